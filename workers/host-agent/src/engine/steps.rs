//! The steps the platform sends (names as in the provisioner's driver),
//! each idempotent: provision = validate_host, pull_image, bind_gpus,
//! attach_network, create_volume, start_container, authorize_ssh,
//! readiness_check; deprovision = revoke_ssh, stop_container, unbind_gpus,
//! detach_network, wipe_volume, validate_clean; stop = stop_instance.

use std::path::Path;

use bollard::query_parameters::{ListContainersOptionsBuilder, ListVolumesOptionsBuilder};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::config::GpuStyle;
use super::container::{self, Limits, Plan};
use super::pull::{ImageRef, PullLimits};
use super::{ContainerExecutor, EngineError, exits, gpus, labels, network, volume};
use crate::Progress;
use crate::names;
use crate::protocol::{AgentCommand, Connection, InstanceRef, RentalSpec, StepDetail};

/// Where CDI specs live (the NVIDIA toolkit's `nvidia-ctk cdi generate`).
const CDI_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];

impl ContainerExecutor {
    /// How networks are read (Podman: its own API, see [`network`]).
    fn networks(&self) -> network::Reader<'_> {
        network::Reader {
            docker: &self.docker,
            libpod: self.facts.podman.then_some(self.config.socket.as_path()),
        }
    }

    /// On Podman: netavark's isolation jump back in place (see [`network`]).
    pub async fn repair_isolation(&self) {
        if self.facts.podman {
            network::repair_isolation().await;
        }
    }

    /// Carries out one command.
    pub async fn step(
        &self,
        command: &AgentCommand,
        progress: &Progress,
    ) -> Result<Option<StepDetail>, EngineError> {
        match command.action.as_str() {
            "provision" => {
                let spec: RentalSpec =
                    serde_json::from_value(command.job.clone()).map_err(bad_job)?;
                let allocation = gpus::Allocation::of(&spec);
                self.check_machine(spec.machine_id.into())?;
                let want = allocation.want(spec.gpu_count);
                self.provision_step(&command.step, &spec, &want, command.issued_at, progress)
                    .await
            }
            "stop" if command.step != "stop_instance" => {
                Err(EngineError::UnknownStep(format!("stop/{}", command.step)))
            }
            "deprovision" | "stop" => {
                let job: InstanceRef =
                    serde_json::from_value(command.job.clone()).map_err(bad_job)?;
                self.check_machine(job.machine_id.into())?;
                self.instance_step(&command.step, job.instance_id.into(), command.issued_at)
                    .await?;
                Ok(None)
            }
            other => Err(EngineError::UnknownStep(format!(
                "{other}/{}",
                command.step
            ))),
        }
    }

    fn check_machine(&self, machine: Uuid) -> Result<(), EngineError> {
        if machine == self.machine {
            Ok(())
        } else {
            Err(EngineError::OtherMachine(machine))
        }
    }

    async fn provision_step(
        &self,
        step: &str,
        spec: &RentalSpec,
        want: &gpus::Want,
        issued_at: DateTime<Utc>,
        progress: &Progress,
    ) -> Result<Option<StepDetail>, EngineError> {
        let instance = spec.instance_id;
        match step {
            "validate_host" => self.validate_host(spec).await?,
            "pull_image" => {
                let limits = PullLimits {
                    max_bytes: self.config.max_image_bytes,
                    timeout: self.config.pull_timeout,
                    allowed_registries: &self.config.allowed_registries,
                };
                super::pull::pull_image(&self.docker, &spec.image, &limits, progress).await?;
            }
            "bind_gpus" => {
                self.bind_gpus(instance.into(), want, issued_at).await?;
            }
            "attach_network" => {
                let _choosing = self.choosing.lock().await;
                network::attach_network(
                    self.networks(),
                    labels::base(self.machine, instance.into(), spec.attempt),
                    instance.into(),
                    &spec.ports,
                    self.config.port_range,
                    self.facts.podman,
                )
                .await?;
            }
            "create_volume" => {
                volume::create_volume(
                    &self.docker,
                    labels::base(self.machine, instance.into(), spec.attempt),
                    instance.into(),
                    spec.disk_gib,
                )
                .await?;
            }
            "start_container" => self.start_container(spec, want, issued_at).await?,
            "authorize_ssh" => {
                let keys = spec
                    .ssh_public_key
                    .as_deref()
                    .filter(|k| !k.trim().is_empty())
                    .ok_or(EngineError::NoSshKey)?;
                self.access.authorize(instance.into(), keys)?;
            }
            "readiness_check" => return self.readiness_check(instance.into()).await.map(Some),
            // A stop's step may come with the provisioning job of the run.
            "stop_instance" => self.stop_instance(instance.into(), issued_at).await?,
            other => return Err(EngineError::UnknownStep(other.to_owned())),
        }
        Ok(None)
    }

    async fn instance_step(
        &self,
        step: &str,
        instance: Uuid,
        issued_at: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        match step {
            "stop_instance" => self.stop_instance(instance, issued_at).await,
            "revoke_ssh" => Ok(self.access.revoke(instance)?),
            "stop_container" => {
                self.state.not_wanted(instance)?;
                let removed = container::remove(&self.docker, instance).await;
                self.repair_isolation().await;
                removed
            }
            "unbind_gpus" => {
                let _choosing = self.choosing.lock().await;
                self.binder().release(instance, None)
            }
            "detach_network" => network::detach_network(&self.docker, instance).await,
            "wipe_volume" => volume::wipe_volume(&self.docker, instance).await,
            "validate_clean" => {
                let remains = self.remains(instance).await?;
                if remains.is_empty() {
                    // Clean: a released slice's record has served.
                    let _choosing = self.choosing.lock().await;
                    self.binder().forget(instance)
                } else {
                    Err(EngineError::NotClean(remains))
                }
            }
            other => Err(EngineError::UnknownStep(other.to_owned())),
        }
    }

    /// Engine reachable, GPU runtime present (unless simulated), disk for
    /// the order.
    async fn validate_host(&self, spec: &RentalSpec) -> Result<(), EngineError> {
        self.docker.ping().await?;
        let info = self.docker.info().await?;
        if !self.simulated && spec.gpu_count > 0 {
            match self.config.gpu_style {
                GpuStyle::DeviceRequests => {
                    let has = info
                        .runtimes
                        .as_ref()
                        .is_some_and(|r| r.contains_key("nvidia"));
                    if !has {
                        return Err(EngineError::NoGpuRuntime(
                            "the engine lists no nvidia runtime".into(),
                        ));
                    }
                }
                GpuStyle::Cdi => {
                    if !CDI_DIRS.iter().any(|d| has_nvidia_cdi_spec(Path::new(d))) {
                        return Err(EngineError::NoGpuRuntime(
                            "no NVIDIA CDI spec in /etc/cdi or /var/run/cdi".into(),
                        ));
                    }
                }
            }
        }
        let wanted_gib = u64::try_from(spec.disk_gib.unwrap_or(0)).unwrap_or(0);
        match info.docker_root_dir.as_deref().map(Path::new) {
            Some(root) if root.is_dir() => {
                if let Some(free) = free_bytes(root).await {
                    let free_gib = free >> 30;
                    if free_gib < wanted_gib {
                        return Err(EngineError::NotEnoughDisk {
                            free_gib,
                            wanted_gib,
                        });
                    }
                }
            }
            other => tracing::info!(
                root = ?other,
                "the engine's storage is not visible here; free disk not checked"
            ),
        }
        Ok(())
    }

    /// The instance's GPUs or MIG slice, bound (made) once and kept in
    /// the state directory.
    async fn bind_gpus(
        &self,
        instance: Uuid,
        want: &gpus::Want,
        issued_at: DateTime<Utc>,
    ) -> Result<gpus::Grant, EngineError> {
        let _choosing = self.choosing.lock().await;
        self.binder().bind(instance, want, issued_at)
    }

    async fn start_container(
        &self,
        spec: &RentalSpec,
        want: &gpus::Want,
        issued_at: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let instance = spec.instance_id;
        // What bind_gpus bound; a start after a stop finds it released and
        // binds again (a slice is made again).
        let grant = self.bind_gpus(instance.into(), want, issued_at).await?;
        let indices = grant.indices();
        let devices = match &grant {
            gpus::Grant::Whole(indices) => gpus::devices(
                self.config.gpu_style,
                self.simulated,
                self.facts.podman,
                &self.gpus,
                indices,
            ),
            gpus::Grant::Slice(record) => gpus::slice_devices(
                self.config.gpu_style,
                self.simulated,
                self.facts.podman,
                record,
            ),
        };
        let slice = match &grant {
            gpus::Grant::Slice(record) => Some(record),
            gpus::Grant::Whole(_) => None,
        };
        let ports = network::mappings(self.networks(), instance.into())
            .await?
            .ok_or_else(|| EngineError::StartFailed("the instance has no network".into()))?;
        let image = ImageRef::parse(&spec.image)?.full();
        let body = container::create_body(
            spec,
            &image,
            Plan {
                machine: self.machine,
                gpus: &indices,
                slice,
                devices,
                ports: &ports,
                limits: Limits {
                    ncpu: self.facts.ncpu,
                    mem_total: self.facts.mem_total,
                    pids_limit: self.config.pids_limit,
                    nofile: self.config.nofile,
                    nproc: self.config.nproc,
                },
            },
        )?;
        let started = container::start(&self.docker, instance.into(), body).await;
        self.repair_isolation().await;
        started?;
        // After the start: a container that never ran is not "exited".
        self.state
            .want_running(instance.into(), spec.attempt, issued_at)?;
        tracing::info!(instance.id = %instance, gpus = ?indices, slice = slice.is_some(), "container started");
        Ok(())
    }

    /// Running, and runs a command.
    async fn readiness_check(&self, instance: Uuid) -> Result<StepDetail, EngineError> {
        self.repair_isolation().await;
        let name = names::container(instance);
        let not_running = || async {
            let container = container::inspect(&self.docker, instance).await?;
            let Some(container) = container else {
                return Ok::<_, EngineError>(Some(EngineError::NotReady(
                    "the container is gone".into(),
                )));
            };
            if container::is_running(&container) {
                return Ok(None);
            }
            let state = container.state.as_ref();
            let code = state.and_then(|s| s.exit_code).unwrap_or(-1);
            let oom = state.and_then(|s| s.oom_killed).unwrap_or(false);
            let logs = exits::last_logs(&self.docker, &name).await;
            Ok(Some(EngineError::Exited(exits::reason(code, oom, &logs))))
        };
        if let Some(error) = not_running().await? {
            return Err(error);
        }
        match container::exec(&self.docker, &name, &["true"]).await {
            Ok((0, _)) => {}
            Ok((code, output)) => {
                if let Some(error) = not_running().await? {
                    return Err(error);
                }
                return Err(EngineError::NotReady(format!(
                    "`true` exited with code {code}: {}",
                    exits::bound_tail(&output, 200)
                )));
            }
            Err(error) => {
                // The container may have exited in between.
                if let Some(exited) = not_running().await? {
                    return Err(exited);
                }
                tracing::warn!(instance.id = %instance, %error, "readiness exec failed");
                return Err(EngineError::NotReady(
                    "`true` could not be run in it (the image needs a shell and `true` for SSH)"
                        .into(),
                ));
            }
        }
        let ports = network::mappings(self.networks(), instance)
            .await?
            .unwrap_or_default();
        Ok(StepDetail {
            connection: Some(Connection {
                ssh_host: self.config.public_host.clone(),
                ssh_port: self.config.ssh_port,
                ssh_user: instance.to_string(),
                ports,
            }),
        })
    }

    /// Access revoked (sessions end), no longer wanted running, container
    /// stopped (kept, with its volume and network), GPUs released (a MIG
    /// slice destroyed: the catalog may place another there). Only
    /// what was made before the stop was decided (`issued_at`) is undone: a
    /// stop handled late leaves a start that followed it running, and GPUs
    /// bound for it.
    async fn stop_instance(
        &self,
        instance: Uuid,
        issued_at: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let after = |made: Option<DateTime<Utc>>| made.is_some_and(|m| m > issued_at);
        if let Some(made) = self.state.wanted_made(instance)?
            && after(made)
        {
            tracing::info!(instance.id = %instance, "a stop decided before the latest start: ignored");
            return Ok(());
        }
        self.access.revoke(instance)?;
        self.state.not_wanted(instance)?;
        let stopped = container::stop(&self.docker, instance, self.config.stop_grace_seconds).await;
        self.repair_isolation().await;
        stopped?;
        let _choosing = self.choosing.lock().await;
        self.binder().release(instance, Some(issued_at))
    }

    /// What is left of the instance: containers, networks, volumes labelled
    /// with it, a key file, a GPU binding or MIG slice, a marker.
    pub async fn remains(&self, instance: Uuid) -> Result<Vec<String>, EngineError> {
        let filters = labels::filters(vec![labels::instance_filter(instance)]);
        let mut remains = Vec::new();
        let containers = self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await?;
        for c in containers {
            let name = c
                .names
                .and_then(|n| n.into_iter().next())
                .unwrap_or_default();
            remains.push(format!("container {}", name.trim_start_matches('/')));
        }
        for (name, _) in self
            .networks()
            .list(labels::instance_filter(instance))
            .await?
        {
            remains.push(format!("network {name}"));
        }
        let volumes = self
            .docker
            .list_volumes(Some(
                ListVolumesOptionsBuilder::default()
                    .filters(&filters)
                    .build(),
            ))
            .await?;
        for v in volumes.volumes.unwrap_or_default() {
            remains.push(format!("volume {}", v.name));
        }
        if self.access.has_any(instance) {
            remains.push("SSH keys".into());
        }
        remains.extend(self.binder().remains(instance)?);
        if self.state.is_wanted(instance) {
            remains.push("wanted-running marker".into());
        }
        Ok(remains)
    }
}

/// A job that does not decode, without serde's words: they can quote a
/// value, and the job carries the renter's secrets (env).
fn bad_job(error: serde_json::Error) -> EngineError {
    EngineError::BadJob(format!("{:?} error", error.classify()).to_ascii_lowercase())
}

/// Whether `dir` holds a CDI spec naming NVIDIA devices.
fn has_nvidia_cdi_spec(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name().to_string_lossy().to_ascii_lowercase();
        (name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json"))
            && (name.contains("nvidia")
                || std::fs::read_to_string(entry.path())
                    .is_ok_and(|text| text.contains("nvidia.com/gpu")))
    })
}

/// Free bytes of the filesystem holding `path` (`df -Pk`: statvfs needs
/// unsafe code or another crate).
async fn free_bytes(path: &Path) -> Option<u64> {
    let output = tokio::process::Command::new("df")
        .arg("-Pk")
        .arg(path)
        .output()
        .await
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().nth(1)?;
    let available_kib: u64 = line.split_whitespace().nth(3)?.parse().ok()?;
    Some(available_kib.saturating_mul(1024))
}
