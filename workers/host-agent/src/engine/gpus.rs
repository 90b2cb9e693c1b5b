//! Which of the machine's GPUs an instance gets ([`choose`]), and how they
//! are handed to its container ([`devices`]): device requests by GPU UUID
//! for Docker's NVIDIA runtime, or CDI names for Podman. Simulated GPUs are
//! bound the same way but no device is passed.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bollard::models::{DeviceMapping, DeviceRequest};
use uuid::Uuid;

use super::EngineError;
use super::config::GpuStyle;
use crate::protocol::GpuInfo;

/// `want` free indices of `gpus` for `instance`: the ones it already holds
/// when bound (a redelivered step), else the lowest free ones.
pub fn choose(
    gpus: &[GpuInfo],
    bindings: &BTreeMap<Uuid, Vec<u32>>,
    instance: Uuid,
    want: usize,
) -> Result<Vec<u32>, EngineError> {
    if let Some(held) = bindings.get(&instance)
        && held.len() == want
    {
        return Ok(held.clone());
    }
    let taken: BTreeSet<u32> = bindings
        .iter()
        .filter(|(other, _)| **other != instance)
        .flat_map(|(_, indices)| indices.iter().copied())
        .collect();
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
    match style {
        GpuStyle::DeviceRequests => {
            let ids = indices
                .iter()
                .map(|index| {
                    gpus.iter()
                        .find(|g| g.index == *index && !g.uuid.is_empty())
                        .map_or_else(|| index.to_string(), |g| g.uuid.clone())
                })
                .collect();
            (
                Some(vec![DeviceRequest {
                    driver: Some("nvidia".into()),
                    device_ids: Some(ids),
                    capabilities: Some(vec![vec!["gpu".into()]]),
                    options: Some(HashMap::new()),
                    ..Default::default()
                }]),
                None,
            )
        }
        GpuStyle::Cdi if !podman => (
            Some(vec![DeviceRequest {
                driver: Some("cdi".into()),
                device_ids: Some(
                    indices
                        .iter()
                        .map(|index| format!("nvidia.com/gpu={index}"))
                        .collect(),
                ),
                ..Default::default()
            }]),
            None,
        ),
        GpuStyle::Cdi => (
            None,
            Some(
                indices
                    .iter()
                    .map(|index| DeviceMapping {
                        path_on_host: Some(format!("nvidia.com/gpu={index}")),
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

    #[test]
    fn an_instance_keeps_its_gpus_and_others_get_the_free_ones() {
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let mut bindings = BTreeMap::new();
        let first = choose(&gpus(4), &bindings, a, 2).unwrap();
        assert_eq!(first, vec![0, 1]);
        bindings.insert(a, first.clone());
        assert_eq!(choose(&gpus(4), &bindings, a, 2).unwrap(), first);
        assert_eq!(choose(&gpus(4), &bindings, b, 2).unwrap(), vec![2, 3]);
        assert!(matches!(
            choose(&gpus(4), &bindings, b, 3),
            Err(EngineError::NoFreeGpus { wanted: 3, free: 2 })
        ));
    }
}
