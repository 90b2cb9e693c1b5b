//! MIG slices through NVML (the `nvml` feature): the agent's only unsafe
//! code. nvml-wrapper 0.13 wraps reading MIG (GPU instance profiles, MIG
//! device handles, UUIDs) but not making or destroying GPU and compute
//! instances, nor a MIG device's GPU instance id; those are called through
//! its raw bindings (`Nvml::lib()`), each an FFI call that fills an
//! out-parameter on success ([`out`]). Their handles stay inside the
//! function that got them: nvml-wrapper does not export the bindings'
//! types, so they are only ever inferred. A function the loaded driver
//! lacks is an error, not the bindings' own panic ([`sym!`]).
//!
//! Compiled here, never run: there is no GPU on the development machine
//! (docs/host-agent.md lists what a real host must verify).

use std::mem::MaybeUninit;
use std::os::raw::c_uint;
use std::ptr;

use contracts::mig::MigSlice;
use nvml_wrapper::Nvml;
use nvml_wrapper::error::{NvmlError, nvml_try};

use super::{MigDevice, SliceRecord, describe};
use crate::engine::EngineError;

/// `nvmlGpuInstancePlacement_t`: the same two `unsigned int`s, `repr(C)`.
#[repr(C)]
struct Placement {
    start: c_uint,
    size: c_uint,
}

/// `NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED`.
const ENGINE_PROFILE_SHARED: c_uint = 0;

/// `NVML_DEVICE_MIG_ENABLE`.
const MIG_ENABLED: u32 = 1;

/// The loaded NVML's function `$name`, or an error when the driver's NVML
/// is too old to have it.
macro_rules! sym {
    ($nvml:expr, $name:ident) => {
        $nvml.lib().$name.as_ref().map(|f| *f).map_err(|_| {
            EngineError::Mig(concat!("the driver's NVML has no ", stringify!($name)).into())
        })
    };
}

/// Calls an NVML function through `call`, whose pointer is the function's
/// out-parameter, and returns what it wrote.
///
/// # Safety
///
/// `call` must hand its pointer to an NVML function that writes a `T`
/// there when it returns success.
unsafe fn out<T>(call: impl FnOnce(*mut T) -> c_uint) -> Result<T, NvmlError> {
    let mut value = MaybeUninit::<T>::uninit();
    nvml_try(call(value.as_mut_ptr()))?;
    // SAFETY: NVML returned success, so it wrote the value (the caller's
    // promise).
    Ok(unsafe { value.assume_init() })
}

/// The GPU instance `id` of `device` if NVML lists it at `slice`'s
/// placement: None when it is gone, or when the id is another slice's now
/// (ids are reused, and a reboot forgets every instance).
///
/// # Safety
///
/// `by_id` and `info` must be `nvmlDeviceGetGpuInstanceById` and
/// `nvmlGpuInstanceGetInfo`, `device` a device handle of a live NVML, and
/// `placement` must read the placement of a `nvmlGpuInstanceInfo_t`.
unsafe fn gpu_instance_at<D: Copy, G: Copy, I>(
    by_id: unsafe extern "C" fn(D, c_uint, *mut G) -> c_uint,
    info: unsafe extern "C" fn(G, *mut I) -> c_uint,
    placement: fn(&I) -> (c_uint, c_uint),
    device: D,
    id: u32,
    slice: &MigSlice,
) -> Result<Option<G>, NvmlError> {
    // SAFETY: the functions and handle are what the caller promised; each
    // writes its out-parameter on success.
    let gi = match unsafe { out(|p| by_id(device, id, p)) } {
        Ok(gi) => gi,
        Err(NvmlError::NotFound) => return Ok(None),
        Err(e) => return Err(e),
    };
    // SAFETY: as above, with the handle NVML just returned.
    let info = unsafe { out(|p| info(gi, p)) }?;
    let wanted = (c_uint::from(slice.start), c_uint::from(slice.size));
    Ok((placement(&info) == wanted).then_some(gi))
}

/// NVML's compute instance profile (`NVML_COMPUTE_INSTANCE_PROFILE_*`)
/// with `slices` compute slices: one compute instance using the whole GPU
/// instance.
fn compute_profile(slices: u32) -> Option<c_uint> {
    match slices {
        1 => Some(0),
        2 => Some(1),
        3 => Some(2),
        4 => Some(3),
        7 => Some(4),
        8 => Some(5),
        6 => Some(6),
        _ => None,
    }
}

fn failed(what: &str, error: NvmlError) -> EngineError {
    EngineError::Mig(format!("{what}: {error}"))
}

/// NVML, loaded for MIG.
pub struct NvmlMig {
    nvml: Nvml,
}

impl NvmlMig {
    pub fn init() -> Result<NvmlMig, NvmlError> {
        Ok(NvmlMig {
            nvml: Nvml::init()?,
        })
    }

    fn device(&self, index: u32) -> Result<nvml_wrapper::Device<'_>, EngineError> {
        self.nvml
            .device_by_index(index)
            .map_err(|e| failed(&format!("GPU {index}"), e))
    }

    /// One GPU instance at the slice's placement with one compute instance
    /// using all its compute slices. One already there is taken over (made
    /// before a crash lost its record: the caller checked that no rental's
    /// slice is there); a GPU instance made here whose compute instance
    /// fails is destroyed again.
    pub fn create(&self, slice: &MigSlice) -> Result<MigDevice, EngineError> {
        let what = describe(slice);
        let device = self.device(slice.gpu_index)?;
        let mode = device
            .mig_mode()
            .map_err(|e| failed(&format!("MIG mode of GPU {}", slice.gpu_index), e))?;
        if mode.current != MIG_ENABLED {
            return Err(EngineError::Mig(format!(
                "GPU {0} is not in MIG mode (the host enables it: nvidia-smi -i {0} -mig 1)",
                slice.gpu_index
            )));
        }
        let profile = device
            .profile_info(slice.nvml_profile)
            .map_err(|e| failed(&format!("GPU instance profile of {what}"), e))?;
        let compute = compute_profile(profile.slice_count).ok_or_else(|| {
            EngineError::Mig(format!(
                "{what}: no compute instance profile has {} compute slices",
                profile.slice_count
            ))
        })?;
        let list = sym!(self.nvml, nvmlDeviceGetGpuInstances)?;
        let info = sym!(self.nvml, nvmlGpuInstanceGetInfo)?;
        let make = sym!(self.nvml, nvmlDeviceCreateGpuInstanceWithPlacement)?;
        let destroy = sym!(self.nvml, nvmlGpuInstanceDestroy)?;
        // SAFETY: a handle of a device of `self.nvml`, which outlives every
        // use below.
        let handle = unsafe { device.handle() };

        let mut listed = vec![ptr::null_mut(); (profile.instance_count as usize).max(1)];
        let mut count: c_uint = 0;
        // SAFETY: the buffer holds as many handles as the profile can have
        // instances on the GPU, which is what NVML requires.
        nvml_try(unsafe { list(handle, profile.id, listed.as_mut_ptr(), &mut count) })
            .map_err(|e| failed(&format!("listing GPU instances for {what}"), e))?;
        let mut found = None;
        for &gi in listed.iter().take(count as usize) {
            // SAFETY: a handle NVML just listed; the info is written on
            // success.
            let i =
                unsafe { out(|p| info(gi, p)) }.map_err(|e| failed("reading a GPU instance", e))?;
            if (i.placement.start, i.placement.size)
                == (c_uint::from(slice.start), c_uint::from(slice.size))
            {
                found = Some(gi);
                break;
            }
        }
        let (gi, made_here) = match found {
            Some(gi) => (gi, false),
            None => {
                let placement = Placement {
                    start: slice.start.into(),
                    size: slice.size.into(),
                };
                // SAFETY: `placement` has the layout of
                // nvmlGpuInstancePlacement_t and outlives the call; the
                // handle is written on success.
                let gi = unsafe {
                    out(|p| make(handle, profile.id, ptr::from_ref(&placement).cast(), p))
                }
                .map_err(|e| failed(&format!("creating the GPU instance {what}"), e))?;
                (gi, true)
            }
        };

        let compute_instance = || -> Result<u32, EngineError> {
            let ci_profile_info = sym!(self.nvml, nvmlGpuInstanceGetComputeInstanceProfileInfo)?;
            let list_ci = sym!(self.nvml, nvmlGpuInstanceGetComputeInstances)?;
            let make_ci = sym!(self.nvml, nvmlGpuInstanceCreateComputeInstance)?;
            let ci_info = sym!(self.nvml, nvmlComputeInstanceGetInfo_v2)?;
            // SAFETY: `gi` is a live GPU instance handle; the profile info
            // is written on success.
            let ci_profile =
                unsafe { out(|p| ci_profile_info(gi, compute, ENGINE_PROFILE_SHARED, p)) }
                    .map_err(|e| failed("compute instance profile", e))?;
            let mut cis = vec![ptr::null_mut(); (ci_profile.instanceCount as usize).max(1)];
            let mut n: c_uint = 0;
            // SAFETY: the buffer holds as many handles as the profile can
            // have instances in the GPU instance.
            nvml_try(unsafe { list_ci(gi, ci_profile.id, cis.as_mut_ptr(), &mut n) })
                .map_err(|e| failed("listing compute instances", e))?;
            let ci = match cis.first() {
                Some(&ci) if n > 0 => ci,
                // SAFETY: `gi` is live; the handle is written on success.
                _ => unsafe { out(|p| make_ci(gi, ci_profile.id, p)) }
                    .map_err(|e| failed("creating the compute instance", e))?,
            };
            // SAFETY: `ci` is a live compute instance handle.
            let ci = unsafe { out(|p| ci_info(ci, p)) }
                .map_err(|e| failed("reading the compute instance", e))?;
            Ok(ci.id)
        };
        let compute_instance_id = match compute_instance() {
            Ok(id) => id,
            Err(error) => {
                if made_here {
                    // SAFETY: `gi` is the live GPU instance made above.
                    if let Err(undo) = nvml_try(unsafe { destroy(gi) }) {
                        tracing::error!(%undo, slice = %what, "a GPU instance without its compute instance could not be destroyed");
                    }
                }
                return Err(error);
            }
        };
        // SAFETY: `gi` is live; the info is written on success.
        let gpu_instance_id = unsafe { out(|p| info(gi, p)) }
            .map_err(|e| failed("reading the GPU instance", e))?
            .id;
        let (device_index, uuid) = self.mig_device(&device, gpu_instance_id)?.ok_or_else(|| {
            EngineError::Mig(format!(
                "GPU instance {gpu_instance_id} of GPU {} has no MIG device",
                slice.gpu_index
            ))
        })?;
        Ok(MigDevice {
            gpu_instance_id,
            compute_instance_id,
            uuid,
            device_index,
        })
    }

    /// The MIG device of GPU instance `gi_id`: its index on the GPU and
    /// UUID.
    fn mig_device(
        &self,
        device: &nvml_wrapper::Device<'_>,
        gi_id: u32,
    ) -> Result<Option<(u32, String)>, EngineError> {
        let gpu_instance_of = sym!(self.nvml, nvmlDeviceGetGpuInstanceId)?;
        let count = device
            .mig_device_count()
            .map_err(|e| failed("MIG device count", e))?;
        for index in 0..count {
            let mig = match device.mig_device_by_index(index) {
                Ok(mig) => mig,
                // No MIG device at this index.
                Err(NvmlError::NotFound) => continue,
                Err(e) => return Err(failed("MIG device", e)),
            };
            // SAFETY: a MIG device handle NVML just returned; the id is
            // written on success.
            let id = unsafe { out(|p| gpu_instance_of(mig.handle(), p)) }
                .map_err(|e| failed("GPU instance of a MIG device", e))?;
            if id == gi_id {
                let uuid = mig.uuid().map_err(|e| failed("MIG device UUID", e))?;
                return Ok(Some((index, uuid)));
            }
        }
        Ok(None)
    }

    /// The slice's device now, None when its GPU or compute instance is gone.
    pub fn locate(&self, record: &SliceRecord) -> Result<Option<MigDevice>, EngineError> {
        let device = self.device(record.slice.gpu_index)?;
        let by_id = sym!(self.nvml, nvmlDeviceGetGpuInstanceById)?;
        let info = sym!(self.nvml, nvmlGpuInstanceGetInfo)?;
        let ci_by_id = sym!(self.nvml, nvmlGpuInstanceGetComputeInstanceById)?;
        // SAFETY: NVML's own functions and a device handle of `self.nvml`.
        let gi = unsafe {
            gpu_instance_at(
                by_id,
                info,
                |i| (i.placement.start, i.placement.size),
                device.handle(),
                record.device.gpu_instance_id,
                &record.slice,
            )
        }
        .map_err(|e| failed("looking up the GPU instance", e))?;
        let Some(gi) = gi else {
            return Ok(None);
        };
        // SAFETY: `gi` is live; the handle is written on success.
        match unsafe { out(|p| ci_by_id(gi, record.device.compute_instance_id, p)) } {
            Ok(_) => {}
            Err(NvmlError::NotFound) => return Ok(None),
            Err(e) => return Err(failed("looking up the compute instance", e)),
        }
        Ok(self
            .mig_device(&device, record.device.gpu_instance_id)?
            .map(|(device_index, uuid)| MigDevice {
                uuid,
                device_index,
                ..record.device.clone()
            }))
    }

    /// Destroys the slice's compute instance, then its GPU instance; done
    /// when they are gone (or the id is another slice's now).
    pub fn destroy(&self, record: &SliceRecord) -> Result<(), EngineError> {
        let what = describe(&record.slice);
        let device = self.device(record.slice.gpu_index)?;
        let by_id = sym!(self.nvml, nvmlDeviceGetGpuInstanceById)?;
        let info = sym!(self.nvml, nvmlGpuInstanceGetInfo)?;
        let ci_by_id = sym!(self.nvml, nvmlGpuInstanceGetComputeInstanceById)?;
        let destroy_ci = sym!(self.nvml, nvmlComputeInstanceDestroy)?;
        let destroy_gi = sym!(self.nvml, nvmlGpuInstanceDestroy)?;
        // SAFETY: NVML's own functions and a device handle of `self.nvml`.
        let gi = unsafe {
            gpu_instance_at(
                by_id,
                info,
                |i| (i.placement.start, i.placement.size),
                device.handle(),
                record.device.gpu_instance_id,
                &record.slice,
            )
        }
        .map_err(|e| failed(&format!("looking up the GPU instance {what}"), e))?;
        let Some(gi) = gi else {
            return Ok(());
        };
        // SAFETY: `gi` is live; the handle is written on success.
        match unsafe { out(|p| ci_by_id(gi, record.device.compute_instance_id, p)) } {
            // SAFETY: a live compute instance handle, not used after.
            Ok(ci) => nvml_try(unsafe { destroy_ci(ci) })
                .map_err(|e| failed(&format!("destroying the compute instance {what}"), e))?,
            Err(NvmlError::NotFound) => {}
            Err(e) => return Err(failed("looking up the compute instance", e)),
        }
        // SAFETY: a live GPU instance handle, not used after.
        nvml_try(unsafe { destroy_gi(gi) })
            .map_err(|e| failed(&format!("destroying the GPU instance {what}"), e))
    }

    /// Whether NVML still lists the slice's GPU instance at its placement.
    pub fn still_listed(&self, record: &SliceRecord) -> Result<bool, EngineError> {
        let device = self.device(record.slice.gpu_index)?;
        let by_id = sym!(self.nvml, nvmlDeviceGetGpuInstanceById)?;
        let info = sym!(self.nvml, nvmlGpuInstanceGetInfo)?;
        // SAFETY: NVML's own functions and a device handle of `self.nvml`.
        let gi = unsafe {
            gpu_instance_at(
                by_id,
                info,
                |i| (i.placement.start, i.placement.size),
                device.handle(),
                record.device.gpu_instance_id,
                &record.slice,
            )
        }
        .map_err(|e| failed("looking up the GPU instance", e))?;
        Ok(gi.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_gpu_instance_size_has_a_whole_compute_instance() {
        for slices in [1, 2, 3, 4, 6, 7, 8] {
            assert!(compute_profile(slices).is_some(), "{slices}");
        }
        assert_eq!(compute_profile(5), None);
        assert_eq!(std::mem::size_of::<Placement>(), 8);
    }
}
