//! MIG slices on the agent's side: the placement rules a slice must pass
//! before it is made ([`check_slice`], [`sliced`]: the same
//! `contracts::mig` masks the catalog allocates with), what the state
//! directory keeps of a slice ([`SliceRecord`]), and who makes it
//! ([`MigBackend`]): NVML on a real host (the `nvml` feature, [`nvml`]),
//! or the simulated model, which keeps the slice in the state directory
//! only and hands no device to the container, as simulated whole GPUs do.
//!
//! A slice is one GPU instance at the allocated placement with one compute
//! instance using all its compute slices (what `nvidia-smi mig -cgi
//! <profile>:<start> -C` makes); the container gets the MIG device of that
//! pair (see `gpus::slice_devices`).

#[cfg(feature = "nvml")]
#[allow(unsafe_code)]
pub mod nvml;

use std::collections::{BTreeMap, BTreeSet};

use contracts::mig::{Mask, MigSlice, WHOLE};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::EngineError;
use crate::protocol::GpuInfo;

/// A slice as the state directory keeps it (`slices/<instance>`): what was
/// allocated and what the driver made of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceRecord {
    pub slice: MigSlice,
    #[serde(flatten)]
    pub device: MigDevice,
    /// Destroyed by a deprovisioning or stop step; kept until
    /// `validate_clean` has seen the GPU instance gone (the record is what
    /// tells it which one to look for). A released slice holds nothing.
    #[serde(default)]
    pub released: bool,
}

/// What the driver made for a slice: its GPU instance and compute instance
/// (NVML's ids, unique per GPU while they exist) and the MIG device the
/// container is given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigDevice {
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
    /// `MIG-<uuid>`: how the NVIDIA runtime names the device.
    pub uuid: String,
    /// The MIG device's index on its GPU (NVML's
    /// `nvmlDeviceGetMigDeviceHandleByIndex`), which nvidia-ctk's CDI names
    /// use: `nvidia.com/gpu=<gpu>:<index>`.
    pub device_index: u32,
}

impl SliceRecord {
    /// Whether the record is of exactly this allocation.
    pub fn is(&self, slice: &MigSlice) -> bool {
        self.slice.gpu_index == slice.gpu_index
            && self.slice.start == slice.start
            && self.slice.size == slice.size
            && self.slice.profile == slice.profile
    }

    /// nvidia-ctk's CDI name of the MIG device.
    pub fn cdi_name(&self) -> String {
        format!(
            "nvidia.com/gpu={}:{}",
            self.slice.gpu_index, self.device.device_index
        )
    }

    /// What the container is labelled with (`gpumarket.gpus`): a container
    /// made for another slice, or for a slice made anew (a new MIG device),
    /// does not fit and is created again.
    pub fn label(&self) -> String {
        format!(
            "{}:{}+{} {}",
            self.slice.gpu_index, self.slice.start, self.slice.size, self.device.uuid
        )
    }
}

/// `3g.40gb at memory slices 4..8 of GPU 0`.
pub fn describe(slice: &MigSlice) -> String {
    format!(
        "{} at memory slices {}..{} of GPU {}",
        slice.profile,
        slice.start,
        u16::from(slice.start) + u16::from(slice.size),
        slice.gpu_index
    )
}

/// The memory slices of GPU `gpu` that rentals other than `instance` hold:
/// all of them when one has the GPU whole, else their slices'.
pub fn held(
    gpu: u32,
    bindings: &BTreeMap<Uuid, Vec<u32>>,
    slices: &BTreeMap<Uuid, SliceRecord>,
    instance: Uuid,
) -> Mask {
    let whole = bindings
        .iter()
        .any(|(other, indices)| *other != instance && indices.contains(&gpu));
    if whole {
        return WHOLE;
    }
    slices
        .iter()
        .filter(|(other, r)| **other != instance && !r.released && r.slice.gpu_index == gpu)
        .fold(0, |mask, (_, r)| mask | r.slice.mask())
}

/// GPUs holding a slice of a rental other than `instance`: none of them can
/// be bound whole.
pub fn sliced(slices: &BTreeMap<Uuid, SliceRecord>, instance: Uuid) -> BTreeSet<u32> {
    slices
        .iter()
        .filter(|(other, r)| **other != instance && !r.released)
        .map(|(_, r)| r.slice.gpu_index)
        .collect()
}

/// Refuses `slice` for `instance` unless it may be made: on a GPU of this
/// machine, within its eight memory slices, and on memory slices no other
/// rental holds (whole or as a slice). The profile's own valid starts are
/// the catalog's to keep and the driver's to enforce (NVML refuses a
/// placement the profile does not have); the agent does not know them.
pub fn check_slice(
    gpus: &[GpuInfo],
    bindings: &BTreeMap<Uuid, Vec<u32>>,
    slices: &BTreeMap<Uuid, SliceRecord>,
    instance: Uuid,
    slice: &MigSlice,
) -> Result<(), EngineError> {
    if !gpus.iter().any(|g| g.index == slice.gpu_index) {
        return Err(EngineError::GpuNotOnMachine(slice.gpu_index));
    }
    let want = slice.mask();
    if want == 0 {
        return Err(EngineError::SliceRefused(format!(
            "{} is outside the GPU's memory slices 0..8",
            describe(slice)
        )));
    }
    let held = held(slice.gpu_index, bindings, slices, instance);
    if held & want != 0 {
        let whole = bindings
            .iter()
            .any(|(other, ix)| *other != instance && ix.contains(&slice.gpu_index));
        return Err(EngineError::SliceRefused(if whole {
            format!(
                "{}: the GPU is rented whole by another rental",
                describe(slice)
            )
        } else {
            format!("{} overlaps another rental's slice", describe(slice))
        }));
    }
    Ok(())
}

/// Makes and finds slices: NVML on a real host, the state directory alone
/// when simulated.
pub enum MigBackend {
    /// Simulated GPUs: the record is the slice.
    Simulated,
    /// A real host on which slices cannot be made (built without the `nvml`
    /// feature, or NVML would not load): every slice is refused with this.
    Unavailable(String),
    #[cfg(feature = "nvml")]
    Nvml(Box<nvml::NvmlMig>),
}

impl MigBackend {
    /// The backend for the machine's GPUs.
    pub fn for_host(simulated: bool) -> MigBackend {
        if simulated {
            return MigBackend::Simulated;
        }
        #[cfg(feature = "nvml")]
        {
            match nvml::NvmlMig::init() {
                Ok(nvml) => MigBackend::Nvml(Box::new(nvml)),
                Err(error) => MigBackend::Unavailable(format!("NVML could not be loaded: {error}")),
            }
        }
        #[cfg(not(feature = "nvml"))]
        MigBackend::Unavailable("the agent was built without the nvml feature".into())
    }

    /// Makes `slice` on `gpu` for `instance` (the rules were checked).
    /// `neighbours`: the other live slices on that GPU. Idempotent on NVML:
    /// a GPU instance already at the placement (made before a crash lost its
    /// record) is taken over rather than refused.
    pub fn create(
        &self,
        gpu: &GpuInfo,
        instance: Uuid,
        slice: &MigSlice,
        neighbours: &[&SliceRecord],
    ) -> Result<MigDevice, EngineError> {
        match self {
            MigBackend::Simulated => Ok(simulated_device(gpu, instance, slice, neighbours)),
            MigBackend::Unavailable(why) => Err(EngineError::MigUnavailable(why.clone())),
            #[cfg(feature = "nvml")]
            MigBackend::Nvml(nvml) => nvml.create(slice),
        }
    }

    /// The slice's device as the driver has it now (its MIG device index
    /// can change as other slices come and go), or None when it is gone:
    /// MIG instances do not survive a reboot, the state directory does.
    pub fn locate(&self, record: &SliceRecord) -> Result<Option<MigDevice>, EngineError> {
        match self {
            MigBackend::Simulated => Ok(Some(record.device.clone())),
            MigBackend::Unavailable(why) => Err(unavailable(why, record)),
            #[cfg(feature = "nvml")]
            MigBackend::Nvml(nvml) => nvml.locate(record),
        }
    }

    /// Destroys the slice's compute and GPU instance; done when they are
    /// gone already.
    pub fn destroy(&self, record: &SliceRecord) -> Result<(), EngineError> {
        match self {
            MigBackend::Simulated => Ok(()),
            MigBackend::Unavailable(why) => Err(unavailable(why, record)),
            #[cfg(feature = "nvml")]
            MigBackend::Nvml(nvml) => nvml.destroy(record),
        }
    }

    /// Whether the driver still lists the slice's GPU instance (at its
    /// placement) after it was destroyed. Simulated: the record is the
    /// truth, and a released record holds nothing.
    pub fn still_listed(&self, record: &SliceRecord) -> Result<bool, EngineError> {
        match self {
            MigBackend::Simulated => Ok(false),
            MigBackend::Unavailable(why) => Err(unavailable(why, record)),
            #[cfg(feature = "nvml")]
            MigBackend::Nvml(nvml) => nvml.still_listed(record),
        }
    }
}

/// A slice recorded by an agent that could make it, met by one that
/// cannot (rebuilt without NVML): it stays, and says so.
fn unavailable(why: &str, record: &SliceRecord) -> EngineError {
    EngineError::MigUnavailable(format!("{why} (slice {})", describe(&record.slice)))
}

/// A simulated slice's device: deterministic, so a slice made again for
/// the same rental at the same place (a start after a stop) is the same
/// device and its container is kept, as on a host whose runtime would
/// hand it the same device. Ids are the lowest ones its neighbours leave,
/// as NVML hands them out.
fn simulated_device(
    gpu: &GpuInfo,
    instance: Uuid,
    slice: &MigSlice,
    neighbours: &[&SliceRecord],
) -> MigDevice {
    let lowest_free = |taken: &dyn Fn(&SliceRecord) -> u32, from: u32| {
        (from..)
            .find(|id| !neighbours.iter().any(|n| taken(n) == *id))
            .unwrap_or(from)
    };
    MigDevice {
        gpu_instance_id: lowest_free(&|n| n.device.gpu_instance_id, 1),
        compute_instance_id: 0,
        uuid: format!(
            "MIG-{}",
            derived_uuid(&format!(
                "{}/{}+{}/{instance}",
                gpu.uuid, slice.start, slice.size
            ))
        ),
        device_index: lowest_free(&|n| n.device.device_index, 0),
    }
}

/// A name-based UUID: the first 16 bytes of the SHA-256 of `name`, as a
/// version 8 (custom) UUID. (Version 5 would need the uuid crate's SHA-1
/// feature, a dependency more for a simulated device's name.)
fn derived_uuid(name: &str) -> Uuid {
    let digest = Sha256::digest(name.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(n: u32) -> Vec<GpuInfo> {
        (0..n)
            .map(|index| GpuInfo {
                index,
                name: "H100 80GB SXM".into(),
                uuid: format!("GPU-{index}"),
                memory_total_mib: 81920,
            })
            .collect()
    }

    fn slice(gpu_index: u32, profile: &str, start: u8, size: u8) -> MigSlice {
        MigSlice {
            profile: profile.into(),
            gpu_index,
            start,
            size,
            nvml_profile: 0,
        }
    }

    fn record(s: MigSlice, gpu_instance_id: u32) -> SliceRecord {
        SliceRecord {
            slice: s,
            device: MigDevice {
                gpu_instance_id,
                compute_instance_id: 0,
                uuid: format!("MIG-{gpu_instance_id}"),
                device_index: gpu_instance_id - 1,
            },
            released: false,
        }
    }

    #[test]
    fn slices_keep_to_the_gpu_and_off_each_other_and_off_whole_gpus() {
        let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let mut bindings = BTreeMap::new();
        let mut slices = BTreeMap::new();
        slices.insert(a, record(slice(0, "3g.40gb", 0, 4), 1));
        bindings.insert(c, vec![1]);
        let gpus = gpus(2);
        // Beside a's slice: fine; on it: refused, whatever the profile.
        assert!(check_slice(&gpus, &bindings, &slices, b, &slice(0, "3g.40gb", 4, 4)).is_ok());
        let overlap = check_slice(&gpus, &bindings, &slices, b, &slice(0, "1g.10gb", 3, 1));
        assert!(
            matches!(&overlap, Err(EngineError::SliceRefused(m)) if m.contains("overlaps")),
            "{overlap:?}"
        );
        // a's own slice does not stand in its way (a redelivered step).
        assert!(check_slice(&gpus, &bindings, &slices, a, &slice(0, "3g.40gb", 0, 4)).is_ok());
        // GPU 1 is rented whole; GPU 7 is not on the machine; 6+4 is past 8.
        let whole = check_slice(&gpus, &bindings, &slices, b, &slice(1, "1g.10gb", 0, 1));
        assert!(
            matches!(&whole, Err(EngineError::SliceRefused(m)) if m.contains("rented whole")),
            "{whole:?}"
        );
        assert!(matches!(
            check_slice(&gpus, &bindings, &slices, b, &slice(7, "1g.10gb", 0, 1)),
            Err(EngineError::GpuNotOnMachine(7))
        ));
        assert!(matches!(
            check_slice(&gpus, &bindings, &slices, b, &slice(0, "3g.40gb", 6, 4)),
            Err(EngineError::SliceRefused(_))
        ));
        // A released slice holds nothing.
        slices.entry(a).and_modify(|r| r.released = true);
        assert!(check_slice(&gpus, &bindings, &slices, b, &slice(0, "1g.10gb", 3, 1)).is_ok());
        // Which GPUs can no longer be taken whole.
        slices.entry(a).and_modify(|r| r.released = false);
        assert_eq!(sliced(&slices, b), BTreeSet::from([0]));
        assert_eq!(sliced(&slices, a), BTreeSet::new());
        assert_eq!(held(0, &bindings, &slices, b), 0x0F);
        assert_eq!(held(1, &bindings, &slices, b), WHOLE);
    }

    #[test]
    fn simulated_devices_are_deterministic_and_take_free_ids() {
        let gpus = gpus(1);
        let instance = Uuid::now_v7();
        let first = record(slice(0, "3g.40gb", 0, 4), 1);
        let s = slice(0, "3g.40gb", 4, 4);
        let made = simulated_device(&gpus[0], instance, &s, &[&first]);
        assert_eq!(made, simulated_device(&gpus[0], instance, &s, &[&first]));
        assert_ne!(
            made.uuid,
            simulated_device(&gpus[0], Uuid::now_v7(), &s, &[&first]).uuid
        );
        assert!(made.uuid.starts_with("MIG-"));
        assert!(Uuid::parse_str(&made.uuid["MIG-".len()..]).is_ok());
        assert_eq!((made.gpu_instance_id, made.device_index), (2, 1));
        let r = SliceRecord {
            slice: s,
            device: made,
            released: false,
        };
        assert_eq!(r.cdi_name(), "nvidia.com/gpu=0:1");
        assert!(r.label().starts_with("0:4+4 MIG-"));
    }

    #[test]
    fn records_read_back_from_their_json() {
        let r = record(slice(2, "1g.10gb", 6, 1), 3);
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<SliceRecord>(&text).unwrap(), r);
    }
}
