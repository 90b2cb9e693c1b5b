//! The instance's container: what it is created with ([`create_body`], a
//! pure function so the request can be checked without an engine), and
//! starting, probing, stopping and removing it.
//!
//! A container is created once and started again after a stop, keeping its
//! root filesystem. When a start finds it created for other GPU indices (a
//! stop released the GPUs and the start got others), another MIG device (a
//! stop destroyed the slice and the start made a new one) or another image,
//! it is removed and created anew: the root filesystem is lost,
//! `/workspace` (a volume) is kept.

use std::collections::HashMap;

use bollard::Docker;
use bollard::exec::StartExecResults;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, DeviceMapping, DeviceRequest, ExecConfig,
    HostConfig, Mount, MountType, PortBinding, ResourcesUlimits, RestartPolicy,
    RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder, StopContainerOptionsBuilder,
};
use futures_util::StreamExt;
use uuid::Uuid;

use super::mig::SliceRecord;
use super::{EngineError, is_not_found};
use crate::names;
use crate::protocol::{PortMapping, RentalSpec};

/// Output of an exec kept, at most (the probes read a line).
const MAX_EXEC_OUTPUT: usize = 64 * 1024;
/// Checks of an exec's exit after its output ended (50 ms apart).
const EXEC_EXIT_POLLS: u32 = 100;

/// The machine's share a container gets and the per-container limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The engine's CPUs and memory (`info`), split by GPU share.
    pub ncpu: i64,
    pub mem_total: i64,
    pub pids_limit: i64,
    pub nofile: i64,
    pub nproc: i64,
}

/// What a container is created from, besides the order.
pub struct Plan<'a> {
    pub machine: Uuid,
    /// The GPU indices it runs on (a slice's GPU for a slice).
    pub gpus: &'a [u32],
    /// The MIG slice it gets instead of whole GPUs.
    pub slice: Option<&'a SliceRecord>,
    pub devices: (Option<Vec<DeviceRequest>>, Option<Vec<DeviceMapping>>),
    pub ports: &'a [PortMapping],
    pub limits: Limits,
}

/// `part`/`whole` of `amount`; the whole amount when the share is not a
/// proper fraction (a machine without GPUs, a bad job).
fn share(amount: i64, part: i32, whole: i32) -> i64 {
    if part <= 0 || whole <= 0 || part >= whole {
        return amount;
    }
    let value = i128::from(amount) * i128::from(part) / i128::from(whole);
    i64::try_from(value).unwrap_or(amount)
}

/// Whether an env name can be passed as `NAME=value`.
fn valid_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('=') && !name.contains('\0')
}

/// The create request for the instance's container.
pub fn create_body(
    spec: &RentalSpec,
    image: &str,
    plan: Plan<'_>,
) -> Result<ContainerCreateBody, EngineError> {
    let gpus = super::state::join_indices(plan.gpus);
    let mut env = Vec::with_capacity(spec.env.len() + 1);
    for (name, value) in &spec.env {
        if !valid_env_name(name) {
            // The name only: values are secrets.
            return Err(EngineError::BadEnv(name.chars().take(64).collect()));
        }
        if name == "GPUMARKET_GPUS" || value.contains('\0') {
            continue;
        }
        env.push(format!("{name}={value}"));
    }
    env.push(format!("GPUMARKET_GPUS={gpus}"));
    let mut labels = super::labels::base(plan.machine, spec.instance_id.into(), spec.attempt);
    labels.insert(
        names::LABEL_GPUS.into(),
        plan.slice.map_or(gpus, SliceRecord::label),
    );
    // The machine's CPUs and memory are split by GPU share: a slice's share
    // is its memory slices' part of its GPU.
    let (part, whole) = match plan.slice {
        Some(slice) => (
            i32::from(slice.slice.size),
            spec.machine_gpu_count
                .saturating_mul(i32::from(contracts::mig::MEMORY_SLICES)),
        ),
        None => (spec.gpu_count, spec.machine_gpu_count),
    };
    let mut port_bindings = HashMap::new();
    let mut exposed = Vec::new();
    for mapping in plan.ports {
        let key = format!("{}/tcp", mapping.container_port);
        exposed.push(key.clone());
        port_bindings.insert(
            key,
            // No host IP = every address. An explicit `0.0.0.0` makes
            // netavark 1.4 match destination 0.0.0.0 literally, and nothing
            // is forwarded.
            Some(vec![PortBinding {
                host_ip: None,
                host_port: Some(mapping.host_port.to_string()),
            }]),
        );
    }
    let limits = plan.limits;
    let (device_requests, devices) = plan.devices;
    let ulimit = |name: &str, value: i64| ResourcesUlimits {
        name: Some(name.into()),
        soft: Some(value),
        hard: Some(value),
    };
    let host_config = HostConfig {
        network_mode: Some(names::network(spec.instance_id.into())),
        port_bindings: Some(port_bindings),
        mounts: Some(vec![Mount {
            target: Some(names::WORKSPACE.into()),
            source: Some(names::volume(spec.instance_id.into())),
            typ: Some(MountType::VOLUME),
            read_only: Some(false),
            ..Default::default()
        }]),
        nano_cpus: Some(share(
            limits.ncpu.saturating_mul(1_000_000_000),
            part,
            whole,
        )),
        memory: Some(share(limits.mem_total, part, whole)),
        pids_limit: Some(limits.pids_limit),
        ulimits: Some(vec![
            ulimit("nofile", limits.nofile),
            ulimit("nproc", limits.nproc),
        ]),
        privileged: Some(false),
        security_opt: Some(vec!["no-new-privileges".into()]),
        restart_policy: Some(RestartPolicy {
            name: Some(RestartPolicyNameEnum::NO),
            maximum_retry_count: None,
        }),
        device_requests,
        devices,
        ..Default::default()
    };
    Ok(ContainerCreateBody {
        image: Some(image.to_owned()),
        cmd: spec.command.clone().filter(|c| !c.is_empty()),
        env: Some(env),
        labels: Some(labels),
        exposed_ports: Some(exposed),
        host_config: Some(host_config),
        ..Default::default()
    })
}

/// The container, None when absent.
pub async fn inspect(
    docker: &Docker,
    instance: Uuid,
) -> Result<Option<ContainerInspectResponse>, EngineError> {
    match docker
        .inspect_container(&names::container(instance), None)
        .await
    {
        Ok(c) => Ok(Some(c)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

pub fn is_running(container: &ContainerInspectResponse) -> bool {
    container
        .state
        .as_ref()
        .and_then(|s| s.running)
        .unwrap_or(false)
}

/// Creates the container unless one fits, and starts it unless running.
pub async fn start(
    docker: &Docker,
    instance: Uuid,
    body: ContainerCreateBody,
) -> Result<(), EngineError> {
    let name = names::container(instance);
    let wanted_gpus = body
        .labels
        .as_ref()
        .and_then(|l| l.get(names::LABEL_GPUS))
        .cloned();
    let existing = settled(docker, instance).await?;
    let fits = existing.as_ref().is_some_and(|c| {
        let config = c.config.as_ref();
        let gpus = config
            .and_then(|c| c.labels.as_ref())
            .and_then(|l| l.get(names::LABEL_GPUS))
            .cloned();
        let image = config.and_then(|c| c.image.clone());
        gpus == wanted_gpus && image == body.image
    });
    let running = match &existing {
        Some(c) if fits => is_running(c),
        Some(_) => {
            tracing::info!(instance.id = %instance, "container made for other GPUs or image: created anew (root filesystem lost, /workspace kept)");
            remove(docker, instance).await?;
            create(docker, &name, body).await?;
            false
        }
        None => {
            create(docker, &name, body).await?;
            false
        }
    };
    if running {
        return Ok(());
    }
    match docker.start_container(&name, None).await {
        Ok(()) => Ok(()),
        // Already started (a concurrent delivery).
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 304, ..
        }) => Ok(()),
        Err(e) => Err(EngineError::StartFailed(short_engine_message(&e))),
    }
}

/// Longest wait for a container that is being stopped (a start right
/// after a stop: the stop's grace period may still run).
const SETTLE_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The container once it is not between states: Podman refuses to start a
/// container that is `stopping` ("container state improper"), which a start
/// right after a stop meets while the stop's grace period runs.
async fn settled(
    docker: &Docker,
    instance: Uuid,
) -> Result<Option<ContainerInspectResponse>, EngineError> {
    let deadline = tokio::time::Instant::now() + SETTLE_LIMIT;
    loop {
        let existing = inspect(docker, instance).await?;
        let status = existing
            .as_ref()
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.status)
            .map(|s| s.to_string());
        let between = matches!(
            status.as_deref(),
            Some("stopping" | "removing" | "restarting")
        );
        if !between || tokio::time::Instant::now() >= deadline {
            return Ok(existing);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

async fn create(docker: &Docker, name: &str, body: ContainerCreateBody) -> Result<(), EngineError> {
    let options = CreateContainerOptionsBuilder::default().name(name).build();
    match docker.create_container(Some(options), body).await {
        Ok(_) => Ok(()),
        // Created by a concurrent delivery of the same step.
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409, ..
        }) => Ok(()),
        Err(e) => Err(EngineError::StartFailed(short_engine_message(&e))),
    }
}

/// Stops the container (kept), SIGKILL after `grace_seconds`; absent or
/// stopped is fine.
pub async fn stop(docker: &Docker, instance: Uuid, grace_seconds: u32) -> Result<(), EngineError> {
    let options = StopContainerOptionsBuilder::default()
        .t(i32::try_from(grace_seconds).unwrap_or(i32::MAX))
        .build();
    match docker
        .stop_container(&names::container(instance), Some(options))
        .await
    {
        Ok(()) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 304, ..
        }) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Removes the container (stopping it); absent is fine. The volume stays.
pub async fn remove(docker: &Docker, instance: Uuid) -> Result<(), EngineError> {
    let options = RemoveContainerOptionsBuilder::default()
        .force(true)
        .v(false)
        .build();
    match docker
        .remove_container(&names::container(instance), Some(options))
        .await
    {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Runs `cmd` in the running container; its exit code and (bounded) output.
pub async fn exec(
    docker: &Docker,
    container: &str,
    cmd: &[&str],
) -> Result<(i64, String), EngineError> {
    let created = docker
        .create_exec(
            container,
            ExecConfig {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(cmd.iter().map(|s| (*s).to_owned()).collect()),
                ..Default::default()
            },
        )
        .await?;
    let mut output = String::new();
    if let StartExecResults::Attached {
        output: mut stream, ..
    } = docker.start_exec(&created.id, None).await?
    {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            if output.len() < MAX_EXEC_OUTPUT {
                output.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
            }
        }
    }
    // The output ends before the engine records the exit (Podman answers
    // `Running` with code 0 for a moment): wait for it.
    for _ in 0..EXEC_EXIT_POLLS {
        let inspected = docker.inspect_exec(&created.id).await?;
        if inspected.running != Some(true) {
            return Ok((inspected.exit_code.unwrap_or(-1), output));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Err(EngineError::NotReady(
        "a command's exit was not recorded".into(),
    ))
}

/// Why a container could not be created or started, for the renter: the
/// cases they can act on by name, the rest without the engine's plumbing
/// (runtime paths, cgroup files), which go to the agent's log.
pub fn short_engine_message(error: &bollard::errors::Error) -> String {
    let message = match error {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    };
    let lower = message.to_ascii_lowercase();
    let short = if lower.contains("address already in use") || lower.contains("already allocated") {
        "a host port of the order is in use"
    } else if lower.contains("no such image") || lower.contains("image not known") {
        "the image is not on the machine"
    } else if lower.contains("executable file not found")
        || lower.contains("no such file or directory")
    {
        "the command was not found in the image"
    } else if lower.contains("permission denied") {
        "the command could not be run: permission denied"
    } else {
        "the engine refused it"
    };
    tracing::warn!(%message, "creating or starting a container failed");
    short.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::config::GpuStyle;
    use crate::engine::gpus;
    use crate::protocol::GpuInfo;
    use contracts::ids::{InstanceId, MachineId, TenantId};

    fn spec() -> RentalSpec {
        RentalSpec {
            gpu_indices: Vec::new(),
            mig: None,
            instance_id: InstanceId(Uuid::now_v7()),
            tenant_id: TenantId(Uuid::now_v7()),
            machine_id: MachineId(Uuid::now_v7()),
            gpu_count: 2,
            machine_gpu_count: 4,
            image: "pytorch/pytorch:2.3".into(),
            ssh_public_key: None,
            command: Some(vec!["python".into(), "train.py".into()]),
            env: [("TOKEN".to_owned(), "secret".to_owned())].into(),
            ports: vec![8888],
            disk_gib: Some(10),
            attempt: 1,
        }
    }

    fn gpu_list() -> Vec<GpuInfo> {
        (0..4)
            .map(|index| GpuInfo {
                index,
                name: "RTX 4090".into(),
                uuid: format!("GPU-uuid-{index}"),
                memory_total_mib: 24576,
            })
            .collect()
    }

    fn body(style: GpuStyle, simulated: bool) -> ContainerCreateBody {
        let spec = spec();
        let indices = [1, 3];
        create_body(
            &spec,
            "docker.io/pytorch/pytorch:2.3",
            Plan {
                machine: spec.machine_id.into(),
                gpus: &indices,
                slice: None,
                devices: gpus::devices(style, simulated, true, &gpu_list(), &indices),
                ports: &[PortMapping {
                    container_port: 8888,
                    host_port: 40001,
                }],
                limits: Limits {
                    ncpu: 16,
                    mem_total: 64 << 30,
                    pids_limit: 4096,
                    nofile: 65536,
                    nproc: 65536,
                },
            },
        )
        .unwrap()
    }

    #[test]
    fn device_requests_name_the_bound_gpus_by_uuid() {
        let body = body(GpuStyle::DeviceRequests, false);
        let host = body.host_config.unwrap();
        let requests = host.device_requests.unwrap();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].driver.as_deref(), Some("nvidia"));
        assert_eq!(
            requests[0].device_ids.as_deref(),
            Some(&["GPU-uuid-1".to_owned(), "GPU-uuid-3".to_owned()][..])
        );
        assert_eq!(requests[0].capabilities, Some(vec![vec!["gpu".to_owned()]]));
        assert!(host.devices.is_none());
        let env = body.env.unwrap();
        assert!(env.contains(&"GPUMARKET_GPUS=1,3".to_owned()));
        assert_eq!(
            body.labels
                .unwrap()
                .get(names::LABEL_GPUS)
                .map(String::as_str),
            Some("1,3")
        );
    }

    #[test]
    fn cdi_devices_name_the_bound_gpus_by_index() {
        let host = body(GpuStyle::Cdi, false).host_config.unwrap();
        let paths: Vec<_> = host
            .devices
            .unwrap()
            .into_iter()
            .map(|d| d.path_on_host.unwrap())
            .collect();
        assert_eq!(paths, ["nvidia.com/gpu=1", "nvidia.com/gpu=3"]);
        assert!(host.device_requests.is_none());
        // Docker takes CDI names as device requests of driver `cdi`.
        let (requests, devices) = gpus::devices(GpuStyle::Cdi, false, false, &gpu_list(), &[2]);
        assert!(devices.is_none());
        let requests = requests.unwrap();
        assert_eq!(requests[0].driver.as_deref(), Some("cdi"));
        assert_eq!(
            requests[0].device_ids.as_deref(),
            Some(&["nvidia.com/gpu=2".to_owned()][..])
        );
    }

    #[test]
    fn simulated_gpus_pass_no_device_but_the_same_binding() {
        let body = body(GpuStyle::DeviceRequests, true);
        let host = body.host_config.as_ref().unwrap();
        assert!(host.device_requests.is_none() && host.devices.is_none());
        assert!(
            body.env
                .as_ref()
                .unwrap()
                .contains(&"GPUMARKET_GPUS=1,3".to_owned())
        );
    }

    #[test]
    fn limits_follow_the_gpu_share_and_security_is_tight() {
        let body = body(GpuStyle::Cdi, false);
        let host = body.host_config.unwrap();
        // 2 of 4 GPUs: half the CPUs and memory.
        assert_eq!(host.nano_cpus, Some(8_000_000_000));
        assert_eq!(host.memory, Some(32 << 30));
        assert_eq!(host.pids_limit, Some(4096));
        assert_eq!(host.privileged, Some(false));
        assert_eq!(
            host.security_opt,
            Some(vec!["no-new-privileges".to_owned()])
        );
        assert_eq!(host.ulimits.as_ref().map(Vec::len), Some(2));
        assert_eq!(
            host.restart_policy.unwrap().name,
            Some(RestartPolicyNameEnum::NO)
        );
        let binding = host.port_bindings.unwrap()["8888/tcp"].clone().unwrap();
        assert_eq!(binding[0].host_port.as_deref(), Some("40001"));
        // Every address: netavark 1.4 reads an explicit 0.0.0.0 literally.
        assert_eq!(binding[0].host_ip, None);
        assert_eq!(
            body.cmd,
            Some(vec!["python".to_owned(), "train.py".to_owned()])
        );
    }

    #[test]
    fn a_slice_is_labelled_with_its_device_and_gets_its_share() {
        use crate::engine::mig::{MigDevice, SliceRecord};
        let spec = spec();
        let record = SliceRecord {
            slice: contracts::mig::MigSlice {
                profile: "3g.40gb".into(),
                gpu_index: 2,
                start: 4,
                size: 4,
                nvml_profile: 2,
            },
            device: MigDevice {
                gpu_instance_id: 2,
                compute_instance_id: 0,
                uuid: "MIG-0b7f3c52-1d2e-8a4b-9c6d-5e4f3a2b1c0d".into(),
                device_index: 1,
            },
            released: false,
        };
        let body = create_body(
            &spec,
            "docker.io/pytorch/pytorch:2.3",
            Plan {
                machine: spec.machine_id.into(),
                gpus: &[2],
                slice: Some(&record),
                devices: gpus::slice_devices(GpuStyle::DeviceRequests, false, false, &record),
                ports: &[],
                limits: Limits {
                    ncpu: 16,
                    mem_total: 64 << 30,
                    pids_limit: 4096,
                    nofile: 65536,
                    nproc: 65536,
                },
            },
        )
        .unwrap();
        assert_eq!(
            body.labels.unwrap()[names::LABEL_GPUS],
            "2:4+4 MIG-0b7f3c52-1d2e-8a4b-9c6d-5e4f3a2b1c0d"
        );
        assert!(body.env.unwrap().contains(&"GPUMARKET_GPUS=2".to_owned()));
        let host = body.host_config.unwrap();
        // Half of one GPU of four: an eighth of the machine.
        assert_eq!(host.nano_cpus, Some(2_000_000_000));
        assert_eq!(host.memory, Some(8 << 30));
        assert_eq!(
            host.device_requests.unwrap()[0].device_ids,
            Some(vec![record.device.uuid.clone()])
        );
    }

    #[test]
    fn bad_env_names_are_refused_without_their_values() {
        let mut spec = spec();
        spec.env = [("A=B".to_owned(), "secret-value".to_owned())].into();
        let plan = Plan {
            machine: spec.machine_id.into(),
            gpus: &[],
            slice: None,
            devices: (None, None),
            ports: &[],
            limits: Limits {
                ncpu: 1,
                mem_total: 1,
                pids_limit: 1,
                nofile: 1,
                nproc: 1,
            },
        };
        let error = create_body(&spec, "x:1", plan).unwrap_err().to_string();
        assert!(!error.contains("secret-value"), "{error}");
    }
}
