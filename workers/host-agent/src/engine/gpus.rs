//! Which of the machine's GPUs an instance gets, and how they are handed
//! to its container ([`devices`], [`slice_devices`]): device requests by
//! GPU (or MIG device) UUID for Docker's NVIDIA runtime, or CDI names for
//! Podman. What the catalog allocated comes with the job ([`Allocation`]):
//! exact GPU indices, a MIG slice, or (from an earlier platform) a count,
//! and the agent chooses ([`choose`]). [`Binder`] keeps the machine's
//! bindings and slices consistent: a GPU is rented whole or holds slices,
//! never both. Simulated GPUs are bound the same way but no device is
//! passed.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bollard::models::{DeviceMapping, DeviceRequest};
use chrono::{DateTime, Utc};
use contracts::mig::MigSlice;
use uuid::Uuid;

use super::EngineError;
use super::config::GpuStyle;
use super::mig::{self, MigBackend, SliceRecord};
use super::state::{Made, StateDir};
use crate::protocol::GpuInfo;

/// What the catalog allocated, as the rental's spec carries it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allocation {
    pub gpu_indices: Vec<u32>,
    pub mig: Option<MigSlice>,
}

impl Allocation {
    pub fn of(spec: &crate::protocol::RentalSpec) -> Allocation {
        Allocation {
            gpu_indices: spec.gpu_indices.clone(),
            mig: spec.mig.clone(),
        }
    }

    /// What to bind for an order of `gpu_count` GPUs.
    pub fn want(&self, gpu_count: i32) -> Want {
        match (&self.mig, self.gpu_indices.is_empty()) {
            (Some(slice), _) => Want::Slice(slice.clone()),
            (None, false) => Want::Exact(self.gpu_indices.clone()),
            (None, true) => Want::Count(usize::try_from(gpu_count.max(0)).unwrap_or(0)),
        }
    }
}

/// What an instance is to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    /// This many whole GPUs, the agent's choice (a job without indices).
    Count(usize),
    /// Exactly these whole GPUs.
    Exact(Vec<u32>),
    /// This MIG slice.
    Slice(MigSlice),
}

/// What an instance holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    Whole(Vec<u32>),
    Slice(SliceRecord),
}

impl Grant {
    /// The GPU indices it is on.
    pub fn indices(&self) -> Vec<u32> {
        match self {
            Grant::Whole(indices) => indices.clone(),
            Grant::Slice(record) => vec![record.slice.gpu_index],
        }
    }
}

/// `want` free indices of `gpus` for `instance`: the ones it already holds
/// when bound (a redelivered step), else the lowest free ones. A GPU bound
/// to another instance, or holding another instance's slice (`sliced`), is
/// not free.
pub fn choose(
    gpus: &[GpuInfo],
    bindings: &BTreeMap<Uuid, Vec<u32>>,
    sliced: &BTreeSet<u32>,
    instance: Uuid,
    want: usize,
) -> Result<Vec<u32>, EngineError> {
    if let Some(held) = bindings.get(&instance)
        && held.len() == want
    {
        return Ok(held.clone());
    }
    let taken = taken(bindings, sliced, instance);
    let free: Vec<u32> = gpus
        .iter()
        .map(|g| g.index)
        .filter(|i| !taken.contains(i))
        .collect();
    if free.len() < want {
        return Err(EngineError::NoFreeGpus {
            wanted: want,
            free: free.len(),
        });
    }
    Ok(free.into_iter().take(want).collect())
}

/// Exactly `indices` for `instance`, refused when one is not on the
/// machine, is allocated twice, or is bound to (or holds a slice of)
/// another instance. The instance's own binding is no obstacle: a
/// redelivered step binds what it bound.
pub fn exact(
    gpus: &[GpuInfo],
    bindings: &BTreeMap<Uuid, Vec<u32>>,
    sliced: &BTreeSet<u32>,
    instance: Uuid,
    indices: &[u32],
) -> Result<Vec<u32>, EngineError> {
    let taken = taken(bindings, sliced, instance);
    let mut seen = BTreeSet::new();
    for &index in indices {
        if !gpus.iter().any(|g| g.index == index) {
            return Err(EngineError::GpuNotOnMachine(index));
        }
        if !seen.insert(index) {
            return Err(EngineError::BadJob(format!(
                "GPU index {index} is allocated twice"
            )));
        }
        if taken.contains(&index) {
            return Err(EngineError::GpuTaken(index));
        }
    }
    Ok(indices.to_vec())
}

/// GPUs other instances hold, whole or by a slice.
fn taken(
    bindings: &BTreeMap<Uuid, Vec<u32>>,
    sliced: &BTreeSet<u32>,
    instance: Uuid,
) -> BTreeSet<u32> {
    bindings
        .iter()
        .filter(|(other, _)| **other != instance)
        .flat_map(|(_, indices)| indices.iter().copied())
        .chain(sliced.iter().copied())
        .collect()
}

/// The machine's GPU bookkeeping: bindings and slices in the state
/// directory, slices made by `mig`. Every method is idempotent, and the
/// caller serialises them (the executor's `choosing` lock), so two rentals
/// never read the same free GPU or memory slices.
pub struct Binder<'a> {
    pub gpus: &'a [GpuInfo],
    pub state: &'a StateDir,
    pub mig: &'a MigBackend,
}

impl Binder<'_> {
    /// Binds what `want` asks for `instance` (made = when the platform
    /// issued the command) and returns it. An instance holds whole GPUs or
    /// one slice: what it held of the other kind, or another slice, is
    /// released first (an allocation from an earlier run).
    pub fn bind(
        &self,
        instance: Uuid,
        want: &Want,
        made: DateTime<Utc>,
    ) -> Result<Grant, EngineError> {
        let bindings = self.state.bindings()?;
        let slices = self.state.slices()?;
        let sliced = mig::sliced(&slices, instance);
        let chosen = match want {
            Want::Slice(slice) => {
                return self.bind_slice(instance, slice, &bindings, &slices, made);
            }
            Want::Count(n) => choose(self.gpus, &bindings, &sliced, instance, *n)?,
            Want::Exact(indices) => exact(self.gpus, &bindings, &sliced, instance, indices)?,
        };
        self.release_slice(instance)?;
        if bindings.get(&instance) != Some(&chosen) {
            self.state.bind(instance, &chosen, made)?;
        }
        Ok(Grant::Whole(chosen))
    }

    fn bind_slice(
        &self,
        instance: Uuid,
        slice: &MigSlice,
        bindings: &BTreeMap<Uuid, Vec<u32>>,
        slices: &BTreeMap<Uuid, SliceRecord>,
        made: DateTime<Utc>,
    ) -> Result<Grant, EngineError> {
        if let Some((mine, was_made)) = self.state.slice_made(instance)?
            && !mine.released
        {
            if mine.is(slice) {
                // Made already (a redelivered step, a start after the
                // bind): as the driver has it now, or made again below if
                // it is gone (a reboot).
                if let Some(device) = self.mig.locate(&mine)? {
                    let record = SliceRecord {
                        device,
                        ..mine.clone()
                    };
                    if record != mine {
                        self.state
                            .keep_slice(instance, &record, was_made.unwrap_or(made))?;
                    }
                    self.state.unbind(instance)?;
                    return Ok(Grant::Slice(record));
                }
            } else {
                self.release_slice(instance)?;
            }
        }
        mig::check_slice(self.gpus, bindings, slices, instance, slice)?;
        let gpu = self
            .gpus
            .iter()
            .find(|g| g.index == slice.gpu_index)
            .ok_or(EngineError::GpuNotOnMachine(slice.gpu_index))?;
        let neighbours: Vec<&SliceRecord> = slices
            .iter()
            .filter(|(other, r)| {
                **other != instance && !r.released && r.slice.gpu_index == slice.gpu_index
            })
            .map(|(_, r)| r)
            .collect();
        let device = self.mig.create(gpu, instance, slice, &neighbours)?;
        let record = SliceRecord {
            slice: slice.clone(),
            device,
            released: false,
        };
        if let Err(error) = self.state.keep_slice(instance, &record, made) {
            // Unrecorded, the slice would hold its memory slices with
            // nothing left to release them: undone.
            if let Err(undo) = self.mig.destroy(&record) {
                tracing::error!(instance.id = %instance, %undo, "a MIG slice that could not be recorded could not be destroyed either");
            }
            return Err(error);
        }
        self.state.unbind(instance)?;
        tracing::info!(instance.id = %instance, slice = %mig::describe(slice), device = %record.device.uuid, "MIG slice made");
        Ok(Grant::Slice(record))
    }

    /// Releases what `instance` holds: the binding, and the slice
    /// (destroyed, its record kept as released for `validate_clean`). With
    /// `before` (a stop's `issued_at`) only what was made before it: a stop
    /// handled late must not release what a later start bound.
    pub fn release(
        &self,
        instance: Uuid,
        before: Option<DateTime<Utc>>,
    ) -> Result<(), EngineError> {
        let later = |made: Made| before.is_some_and(|b| made.is_some_and(|m| m > b));
        match self.state.binding_made(instance)? {
            Some((_, made)) if later(made) => {}
            Some(_) => self.state.unbind(instance)?,
            None => {}
        }
        match self.state.slice_made(instance)? {
            Some((_, made)) if later(made) => Ok(()),
            Some(_) => self.release_slice(instance),
            None => Ok(()),
        }
    }

    /// Destroys the instance's live slice, if any, and marks its record
    /// released (its made time kept).
    fn release_slice(&self, instance: Uuid) -> Result<(), EngineError> {
        let Some((record, made)) = self.state.slice_made(instance)? else {
            return Ok(());
        };
        if record.released {
            return Ok(());
        }
        self.mig.destroy(&record)?;
        let released = SliceRecord {
            released: true,
            ..record
        };
        self.state
            .keep_slice(instance, &released, made.unwrap_or_else(Utc::now))?;
        tracing::info!(instance.id = %instance, slice = %mig::describe(&released.slice), "MIG slice destroyed");
        Ok(())
    }

    /// What is left of the instance's GPUs: a binding, a live slice, or a
    /// released slice whose GPU instance the driver still lists (at its
    /// placement, and claimed by no other rental's slice: NVML reuses ids).
    pub fn remains(&self, instance: Uuid) -> Result<Vec<String>, EngineError> {
        let mut remains = Vec::new();
        if self.state.binding(instance)?.is_some() {
            remains.push("GPU binding".into());
        }
        let slices = self.state.slices()?;
        if let Some(record) = slices.get(&instance) {
            let claimed = || {
                slices.iter().any(|(other, r)| {
                    *other != instance
                        && !r.released
                        && r.slice.gpu_index == record.slice.gpu_index
                        && r.device.gpu_instance_id == record.device.gpu_instance_id
                })
            };
            if !record.released {
                remains.push(format!("MIG slice {}", mig::describe(&record.slice)));
            } else if !claimed() && self.mig.still_listed(record)? {
                remains.push(format!(
                    "MIG GPU instance {} on GPU {}",
                    record.device.gpu_instance_id, record.slice.gpu_index
                ));
            }
        }
        Ok(remains)
    }

    /// Forgets a released slice once the machine was found clean.
    pub fn forget(&self, instance: Uuid) -> Result<(), EngineError> {
        match self.state.slice_made(instance)? {
            Some((record, _)) if record.released => self.state.drop_slice(instance),
            _ => Ok(()),
        }
    }
}

/// The GPU part of a container's `HostConfig`: `(device_requests, devices)`.
/// Device requests name GPUs by UUID (stable across reboots and driver
/// re-enumeration), by index when the inventory has no UUID.
///
/// CDI names go where each engine reads them: Docker (≥ 25, CDI enabled)
/// takes them as device requests of driver `cdi`; Podman's compatible API
/// reads a CDI name in `Devices[].PathOnHost`. Checked on Podman 4.3.1:
/// it ignores device requests altogether, and it sends
/// `nvidia.com/gpu=0::rwm` (path, container path and permissions joined)
/// to its CDI registry, which does not resolve it; later Podman releases
/// split the permissions off. GPUs on Podman need a newer Podman than 4.3.
pub fn devices(
    style: GpuStyle,
    simulated: bool,
    podman: bool,
    gpus: &[GpuInfo],
    indices: &[u32],
) -> (Option<Vec<DeviceRequest>>, Option<Vec<DeviceMapping>>) {
    if simulated || indices.is_empty() {
        return (None, None);
    }
    let ids = indices
        .iter()
        .map(|index| {
            gpus.iter()
                .find(|g| g.index == *index && !g.uuid.is_empty())
                .map_or_else(|| index.to_string(), |g| g.uuid.clone())
        })
        .collect();
    let cdi = indices
        .iter()
        .map(|index| format!("nvidia.com/gpu={index}"))
        .collect();
    hand_over(style, podman, ids, cdi)
}

/// [`devices`] for a MIG slice: the NVIDIA runtime takes the MIG device's
/// UUID as a device id; nvidia-ctk names it `nvidia.com/gpu=<gpu>:<mig
/// device index>` in its CDI spec (which must have been generated after
/// the slice was made: see docs/host-agent.md).
pub fn slice_devices(
    style: GpuStyle,
    simulated: bool,
    podman: bool,
    slice: &SliceRecord,
) -> (Option<Vec<DeviceRequest>>, Option<Vec<DeviceMapping>>) {
    if simulated {
        return (None, None);
    }
    hand_over(
        style,
        podman,
        vec![slice.device.uuid.clone()],
        vec![slice.cdi_name()],
    )
}

/// The shape each style and engine takes: `ids` for the NVIDIA runtime's
/// device request, `cdi` names for CDI.
fn hand_over(
    style: GpuStyle,
    podman: bool,
    ids: Vec<String>,
    cdi: Vec<String>,
) -> (Option<Vec<DeviceRequest>>, Option<Vec<DeviceMapping>>) {
    match style {
        GpuStyle::DeviceRequests => (
            Some(vec![DeviceRequest {
                driver: Some("nvidia".into()),
                device_ids: Some(ids),
                capabilities: Some(vec![vec!["gpu".into()]]),
                options: Some(HashMap::new()),
                ..Default::default()
            }]),
            None,
        ),
        GpuStyle::Cdi if !podman => (
            Some(vec![DeviceRequest {
                driver: Some("cdi".into()),
                device_ids: Some(cdi),
                ..Default::default()
            }]),
            None,
        ),
        GpuStyle::Cdi => (
            None,
            Some(
                cdi.into_iter()
                    .map(|name| DeviceMapping {
                        path_on_host: Some(name),
                        path_in_container: Some(String::new()),
                        cgroup_permissions: Some("rwm".into()),
                    })
                    .collect(),
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::mig::MigDevice;

    fn gpus(n: u32) -> Vec<GpuInfo> {
        (0..n)
            .map(|index| GpuInfo {
                index,
                name: "RTX 4090".into(),
                uuid: format!("GPU-{index}"),
                memory_total_mib: 24576,
            })
            .collect()
    }

    fn slice(gpu_index: u32, start: u8, size: u8) -> MigSlice {
        MigSlice {
            profile: if size == 4 { "3g.40gb" } else { "1g.10gb" }.into(),
            gpu_index,
            start,
            size,
            nvml_profile: if size == 4 { 2 } else { 0 },
        }
    }

    /// A state directory of its own, removed on drop.
    struct Dir(std::path::PathBuf);

    impl Dir {
        fn new() -> Dir {
            Dir(std::env::temp_dir().join(format!("gpm-gpus-{}", Uuid::now_v7())))
        }

        fn open(&self) -> StateDir {
            StateDir::open(&self.0).unwrap()
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn an_instance_keeps_its_gpus_and_others_get_the_free_ones() {
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let mut bindings = BTreeMap::new();
        let none = BTreeSet::new();
        let first = choose(&gpus(4), &bindings, &none, a, 2).unwrap();
        assert_eq!(first, vec![0, 1]);
        bindings.insert(a, first.clone());
        assert_eq!(choose(&gpus(4), &bindings, &none, a, 2).unwrap(), first);
        assert_eq!(
            choose(&gpus(4), &bindings, &none, b, 2).unwrap(),
            vec![2, 3]
        );
        assert!(matches!(
            choose(&gpus(4), &bindings, &none, b, 3),
            Err(EngineError::NoFreeGpus { wanted: 3, free: 2 })
        ));
        // A GPU holding another rental's slice is not free.
        assert_eq!(
            choose(&gpus(4), &bindings, &BTreeSet::from([2]), b, 1).unwrap(),
            vec![3]
        );
    }

    #[test]
    fn allocated_indices_are_bound_exactly_or_refused() {
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let bindings = BTreeMap::from([(a, vec![0, 1])]);
        let none = BTreeSet::new();
        assert_eq!(
            exact(&gpus(4), &bindings, &none, b, &[3, 2]).unwrap(),
            vec![3, 2]
        );
        // a's own binding again: a redelivered step.
        assert_eq!(
            exact(&gpus(4), &bindings, &none, a, &[0, 1]).unwrap(),
            vec![0, 1]
        );
        assert!(matches!(
            exact(&gpus(4), &bindings, &none, b, &[1]),
            Err(EngineError::GpuTaken(1))
        ));
        assert!(matches!(
            exact(&gpus(4), &bindings, &BTreeSet::from([3]), b, &[3]),
            Err(EngineError::GpuTaken(3))
        ));
        assert!(matches!(
            exact(&gpus(4), &bindings, &none, b, &[4]),
            Err(EngineError::GpuNotOnMachine(4))
        ));
        assert!(matches!(
            exact(&gpus(4), &bindings, &none, b, &[2, 2]),
            Err(EngineError::BadJob(_))
        ));
    }

    #[test]
    fn the_job_says_what_to_bind() {
        let of = |extra: serde_json::Value| {
            let mut job = serde_json::json!({
                "instance_id": Uuid::now_v7(), "tenant_id": Uuid::now_v7(),
                "machine_id": Uuid::now_v7(), "gpu_count": 2, "machine_gpu_count": 4,
                "image": "img", "ssh_public_key": null,
            });
            if let (Some(job), Some(extra)) = (job.as_object_mut(), extra.as_object()) {
                job.extend(extra.clone());
            }
            let spec: crate::protocol::RentalSpec = serde_json::from_value(job).unwrap();
            Allocation::of(&spec)
        };
        assert_eq!(
            of(serde_json::json!({"gpu_indices": [3, 1]})).want(2),
            Want::Exact(vec![3, 1])
        );
        let allocation = of(serde_json::json!({"gpu_indices": [], "mig":
            {"profile": "3g.40gb", "gpu_index": 0, "start": 4, "size": 4, "nvml_profile": 2}}));
        assert_eq!(allocation.want(1), Want::Slice(slice(0, 4, 4)));
        // A job from an earlier release: the agent chooses.
        assert_eq!(of(serde_json::json!({})).want(2), Want::Count(2));
    }

    #[test]
    fn simulated_slices_follow_the_placement_rules_and_survive_a_restart() {
        let dir = Dir::new();
        let state = dir.open();
        let gpus = gpus(2);
        let binder = Binder {
            gpus: &gpus,
            state: &state,
            mig: &MigBackend::Simulated,
        };
        let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let at = Utc::now();
        let Grant::Slice(made) = binder.bind(a, &Want::Slice(slice(0, 0, 4)), at).unwrap() else {
            panic!("a slice")
        };
        assert!(made.device.uuid.starts_with("MIG-"));
        // Redelivered: the same slice, not a second one.
        let again = binder
            .bind(a, &Want::Slice(slice(0, 0, 4)), Utc::now())
            .unwrap();
        assert_eq!(again, Grant::Slice(made.clone()));
        // Overlapping it, or taking its GPU whole, is refused; beside it is fine.
        assert!(matches!(
            binder.bind(b, &Want::Slice(slice(0, 2, 2)), at),
            Err(EngineError::SliceRefused(_))
        ));
        assert!(matches!(
            binder.bind(b, &Want::Exact(vec![0]), at),
            Err(EngineError::GpuTaken(0))
        ));
        assert_eq!(
            binder.bind(b, &Want::Count(1), at).unwrap(),
            Grant::Whole(vec![1])
        );
        assert!(matches!(
            binder.bind(c, &Want::Slice(slice(1, 0, 1)), at),
            Err(EngineError::SliceRefused(m)) if m.contains("rented whole")
        ));
        let Grant::Slice(beside) = binder.bind(c, &Want::Slice(slice(0, 4, 4)), at).unwrap() else {
            panic!("a slice")
        };
        assert_ne!(beside.device.uuid, made.device.uuid);
        assert_eq!(beside.cdi_name(), "nvidia.com/gpu=0:1");
        // A restarted agent reads the same state.
        let reopened = dir.open();
        let binder = Binder {
            gpus: &gpus,
            state: &reopened,
            mig: &MigBackend::Simulated,
        };
        assert_eq!(
            binder
                .bind(a, &Want::Slice(slice(0, 0, 4)), Utc::now())
                .unwrap(),
            Grant::Slice(made)
        );
        assert!(binder.remains(a).unwrap()[0].starts_with("MIG slice 3g.40gb"));
        // A stop decided before the slice was made leaves it; a later one,
        // or deprovisioning, releases it.
        binder
            .release(a, Some(at - chrono::Duration::seconds(1)))
            .unwrap();
        assert!(!reopened.slices().unwrap()[&a].released);
        binder.release(a, None).unwrap();
        assert!(reopened.slices().unwrap()[&a].released);
        assert_eq!(binder.remains(a).unwrap(), Vec::<String>::new());
        binder.forget(a).unwrap();
        assert_eq!(reopened.slice_made(a).unwrap(), None);
        // Its memory slices are free again.
        assert!(binder.bind(b, &Want::Slice(slice(0, 0, 1)), at).is_ok());
        assert_eq!(
            reopened.binding(b).unwrap(),
            None,
            "a slice replaced b's whole GPU"
        );
    }

    #[test]
    fn a_real_host_without_nvml_refuses_slices_but_binds_whole_gpus() {
        let dir = Dir::new();
        let state = dir.open();
        let gpus = gpus(1);
        let binder = Binder {
            gpus: &gpus,
            state: &state,
            mig: &MigBackend::Unavailable("built without nvml".into()),
        };
        let a = Uuid::now_v7();
        assert!(matches!(
            binder.bind(a, &Want::Slice(slice(0, 0, 1)), Utc::now()),
            Err(EngineError::MigUnavailable(_))
        ));
        assert_eq!(state.slice_made(a).unwrap(), None);
        assert_eq!(
            binder.bind(a, &Want::Exact(vec![0]), Utc::now()).unwrap(),
            Grant::Whole(vec![0])
        );
    }

    fn record() -> SliceRecord {
        SliceRecord {
            slice: slice(2, 4, 4),
            device: MigDevice {
                gpu_instance_id: 2,
                compute_instance_id: 0,
                uuid: "MIG-4a1f0b6e-8d55-5c7e-9a43-7d2a1e0c9b11".into(),
                device_index: 1,
            },
            released: false,
        }
    }

    #[test]
    fn a_slice_is_handed_over_as_its_mig_device() {
        let (requests, devices) = slice_devices(GpuStyle::DeviceRequests, false, false, &record());
        assert!(devices.is_none());
        let requests = requests.unwrap();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].driver.as_deref(), Some("nvidia"));
        assert_eq!(
            requests[0].device_ids.as_deref(),
            Some(&["MIG-4a1f0b6e-8d55-5c7e-9a43-7d2a1e0c9b11".to_owned()][..])
        );
        assert_eq!(requests[0].capabilities, Some(vec![vec!["gpu".to_owned()]]));
        // Simulated: no device, as for whole GPUs.
        assert_eq!(
            slice_devices(GpuStyle::DeviceRequests, true, false, &record()),
            (None, None)
        );
    }

    #[test]
    fn a_slice_is_handed_over_by_its_cdi_name() {
        // Docker: a device request of driver `cdi`.
        let (requests, devices) = slice_devices(GpuStyle::Cdi, false, false, &record());
        assert!(devices.is_none());
        let requests = requests.unwrap();
        assert_eq!(requests[0].driver.as_deref(), Some("cdi"));
        assert_eq!(
            requests[0].device_ids.as_deref(),
            Some(&["nvidia.com/gpu=2:1".to_owned()][..])
        );
        // Podman: the name as a device's host path.
        let (requests, devices) = slice_devices(GpuStyle::Cdi, false, true, &record());
        assert!(requests.is_none());
        let devices = devices.unwrap();
        assert_eq!(devices.len(), 1);
        assert_eq!(
            devices[0].path_on_host.as_deref(),
            Some("nvidia.com/gpu=2:1")
        );
        assert_eq!(devices[0].cgroup_permissions.as_deref(), Some("rwm"));
    }
}
