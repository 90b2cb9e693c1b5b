//! What the agent knows about its machine's GPUs: the inventory found once
//! on start and the live numbers sampled for each heartbeat. Simulated with
//! `--simulate-gpus`; on a real host read from NVML (the `nvml` feature),
//! falling back to `nvidia-smi`.

/// The reader where NVML is missing: `nvidia-smi`'s CSV queries.
pub mod nvidia_smi;

use rand::Rng;

use crate::Error;
use crate::protocol::{GpuInfo, GpuSample, SelfTestCheck};

/// The machine's GPUs, driver and CUDA version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inventory {
    pub gpus: Vec<GpuInfo>,
    /// `major.minor`, e.g. `12.4`.
    pub cuda_version: String,
    pub driver_version: String,
    /// Simulated GPUs: heartbeats carry made-up utilisation.
    pub simulated: bool,
    /// Simulated GPUs report this utilisation instead of random numbers
    /// (tests of idle detection).
    pub simulated_utilization_percent: Option<u32>,
}

impl Inventory {
    /// `count` GPUs named `model` with `vram_gib` each.
    pub fn simulated(
        count: u32,
        model: &str,
        vram_gib: u32,
        cuda_version: &str,
        driver_version: &str,
    ) -> Inventory {
        Inventory {
            gpus: (0..count)
                .map(|index| GpuInfo {
                    index,
                    name: model.to_owned(),
                    uuid: format!("GPU-sim-{index:02}-{model}").replace(' ', "-"),
                    memory_total_mib: u64::from(vram_gib) * 1024,
                })
                .collect(),
            cuda_version: cuda_version.to_owned(),
            driver_version: driver_version.to_owned(),
            simulated: true,
            simulated_utilization_percent: None,
        }
    }

    /// The GPUs NVML finds (needs the NVIDIA driver's `libnvidia-ml.so`).
    #[cfg(feature = "nvml")]
    pub fn from_nvml() -> Result<Inventory, Error> {
        let nvml = nvml_wrapper::Nvml::init()?;
        let driver_version = nvml.sys_driver_version()?;
        let cuda = nvml.sys_cuda_driver_version()?;
        let count = nvml.device_count()?;
        let mut gpus = Vec::with_capacity(count as usize);
        for index in 0..count {
            let device = nvml.device_by_index(index)?;
            gpus.push(GpuInfo {
                index,
                name: device.name()?,
                uuid: device.uuid()?,
                memory_total_mib: device.memory_info()?.total / (1024 * 1024),
            });
        }
        Ok(Inventory {
            gpus,
            cuda_version: crate::protocol::cuda_version_string(cuda),
            driver_version,
            simulated: false,
            simulated_utilization_percent: None,
        })
    }

    /// The checks reported as the self-test. The simulated test passes when
    /// the inventory is usable (at least one GPU with memory, a CUDA version
    /// the platform can read); on NVML each GPU must also answer a query.
    pub fn self_test(&self, sampler: &Sampler) -> Vec<SelfTestCheck> {
        let mut checks = vec![
            SelfTestCheck {
                name: "gpus_present".into(),
                passed: !self.gpus.is_empty() && self.gpus.iter().all(|g| g.memory_total_mib > 0),
                detail: format!("{} GPU(s)", self.gpus.len()),
            },
            SelfTestCheck {
                name: "cuda_version".into(),
                passed: crate::protocol::cuda_version_code(&self.cuda_version).is_some(),
                detail: self.cuda_version.clone(),
            },
        ];
        let sampled = sampler.sample(self);
        checks.push(SelfTestCheck {
            name: "gpus_respond".into(),
            passed: sampled.as_ref().is_ok_and(|s| s.len() == self.gpus.len()),
            detail: match &sampled {
                Ok(s) => format!("{} GPU(s) answered", s.len()),
                Err(e) => e.to_string(),
            },
        });
        checks
    }
}

/// Where heartbeat numbers come from.
pub enum Sampler {
    Simulated,
    /// A real host without a loadable NVML.
    NvidiaSmi,
    #[cfg(feature = "nvml")]
    Nvml(Box<nvml_wrapper::Nvml>),
}

impl Sampler {
    /// NVML for a real inventory (when built with it), made-up numbers for a
    /// simulated one.
    pub fn for_inventory(inventory: &Inventory) -> Result<Sampler, Error> {
        if inventory.simulated {
            return Ok(Sampler::Simulated);
        }
        #[cfg(feature = "nvml")]
        if let Ok(nvml) = nvml_wrapper::Nvml::init() {
            return Ok(Sampler::Nvml(Box::new(nvml)));
        }
        Ok(Sampler::NvidiaSmi)
    }

    /// Utilisation and memory in use of each GPU.
    pub fn sample(&self, inventory: &Inventory) -> Result<Vec<GpuSample>, Error> {
        match self {
            Sampler::Simulated => {
                let mut rng = rand::thread_rng();
                Ok(inventory
                    .gpus
                    .iter()
                    .map(|gpu| GpuSample {
                        index: gpu.index,
                        utilization_percent: inventory
                            .simulated_utilization_percent
                            .map_or_else(|| rng.gen_range(0..=100), |u| u.min(100)),
                        memory_used_mib: rng.gen_range(0..=gpu.memory_total_mib),
                    })
                    .collect())
            }
            Sampler::NvidiaSmi => nvidia_smi::samples(),
            #[cfg(feature = "nvml")]
            Sampler::Nvml(nvml) => inventory
                .gpus
                .iter()
                .map(|gpu| {
                    let device = nvml.device_by_index(gpu.index)?;
                    Ok(GpuSample {
                        index: gpu.index,
                        utilization_percent: device.utilization_rates()?.gpu,
                        memory_used_mib: device.memory_info()?.used / (1024 * 1024),
                    })
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_simulated_inventory_passes_its_self_test_and_samples_in_range() {
        let inventory = Inventory::simulated(2, "RTX 4090", 24, "12.4", "550.54.15");
        assert_eq!(inventory.gpus.len(), 2);
        assert_eq!(inventory.gpus[1].memory_total_mib, 24 * 1024);
        let sampler = Sampler::for_inventory(&inventory).unwrap();
        assert!(inventory.self_test(&sampler).iter().all(|c| c.passed));
        for sample in sampler.sample(&inventory).unwrap() {
            assert!(sample.utilization_percent <= 100);
            assert!(sample.memory_used_mib <= 24 * 1024);
        }
        let empty = Inventory::simulated(0, "RTX 4090", 24, "12.4", "550.54.15");
        assert!(!empty.self_test(&sampler).iter().all(|c| c.passed));
    }
}
