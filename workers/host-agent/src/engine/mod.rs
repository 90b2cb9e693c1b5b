//! Runs rentals as containers through the Docker Engine API (Docker with
//! the NVIDIA Container Toolkit, or Podman's compatible service: one code
//! path): the real [`crate::Executor`], [`ContainerExecutor`].
//!
//! Each provisioning step is idempotent: what a step makes is named and
//! labelled after the instance ([`crate::names`]) and looked up before it is
//! made, and what the engine cannot hold (GPU bindings, "wanted running"
//! markers) is kept in the state directory ([`state`]). The modules hold one
//! thing each: flags ([`config`]), labels ([`labels`]), GPUs ([`gpus`]),
//! MIG slices ([`mig`]), the
//! image ([`pull`]), the network and host ports ([`network`], with Podman's
//! own API for reading networks in [`libpod`]), `/workspace` ([`volume`]),
//! the container ([`container`]), exits ([`exits`]), counters
//! ([`traffic`]) and the steps themselves ([`steps`]).
//!
//! Engines: Docker, or Podman's Docker-compatible service (checked with
//! Podman 4.3.1 and netavark 1.4 from Debian 12, whose quirks are handled
//! where they bite: networks read through libpod, netavark's isolation jump
//! put back, swapped network counters, no explicit `0.0.0.0` host IP, and
//! nofile/nproc limits always set). Run one engine service per host: two
//! Podman services on one storage choose bridges and subnets apart.

pub mod config;
pub mod container;
pub mod exits;
pub mod gpus;
pub mod labels;
pub mod libpod;
pub mod mig;
pub mod network;
pub mod pull;
pub mod state;
pub mod steps;
pub mod traffic;
pub mod volume;

use contracts::ids::MachineId;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bollard::{API_DEFAULT_VERSION, Docker};
use uuid::Uuid;

pub use config::{EngineArgs, EngineConfig, GpuStyle};

use crate::access::{Access, AccessError};
use crate::protocol::{AgentCommand, GpuInfo, InstanceCounters, InstanceExited, StepDetail};
use crate::{Executor, Inventory, Progress};

/// Seconds any one engine request may take to answer (a pull's stream is
/// bounded by `--pull-timeout-seconds` instead).
const ENGINE_TIMEOUT_SECONDS: u64 = 120;

/// What can go wrong; [`EngineError::reason`] is what the renter reads.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("engine configuration: {0}")]
    Config(String),
    #[error("container engine: {0}")]
    Engine(#[from] bollard::errors::Error),
    #[error("container engine (libpod): {0}")]
    Libpod(String),
    #[error("state directory {path}: {source}")]
    State {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the command's job could not be read: {0}")]
    BadJob(String),
    #[error("unknown step {0}")]
    UnknownStep(String),
    #[error("the command is for machine {0}, not this one")]
    OtherMachine(Uuid),
    #[error("the host has no NVIDIA container runtime ({0})")]
    NoGpuRuntime(String),
    #[error("not enough free disk: {free_gib} GiB free, {wanted_gib} GiB ordered")]
    NotEnoughDisk { free_gib: u64, wanted_gib: u64 },
    #[error("image reference {0:?} is not valid")]
    BadImage(String),
    #[error("registry {0} is not allowed on this machine")]
    RegistryNotAllowed(String),
    #[error("image {0} not found")]
    ImageNotFound(String),
    #[error("image {0}: unauthorized (private images are not supported)")]
    Unauthorized(String),
    #[error("image too large: {} MB, at most {} MB", size / 1_000_000, max / 1_000_000)]
    ImageTooLarge { size: u64, max: u64 },
    #[error("image pull timed out after {} s", .0.as_secs())]
    PullTimedOut(Duration),
    #[error("image {image}: pull failed: {message}")]
    PullFailed { image: String, message: String },
    #[error("not enough free GPUs: {wanted} wanted, {free} free")]
    NoFreeGpus { wanted: usize, free: usize },
    // The next three refuse what the catalog allocated. The provisioner
    // retries every failed step up to its bound (it has no notion of a
    // failure not worth retrying); a retry succeeds only if the other
    // rental went meanwhile.
    #[error("GPU {0} is not on this machine")]
    GpuNotOnMachine(u32),
    #[error("GPU {0} is in use by another rental")]
    GpuTaken(u32),
    #[error("MIG slice refused: {0}")]
    SliceRefused(String),
    #[error("MIG slices cannot be made on this host: {0}")]
    MigUnavailable(String),
    #[error("MIG: {0}")]
    Mig(String),
    #[error("state file {} does not read", .0.display())]
    StateUnreadable(PathBuf),
    #[error("no free host port in the machine's port range")]
    NoFreePorts,
    #[error("environment variable name {0:?} is not valid")]
    BadEnv(String),
    #[error("the container could not be started: {0}")]
    StartFailed(String),
    #[error("{0}")]
    Exited(String),
    #[error("the container does not run commands: {0}")]
    NotReady(String),
    #[error("the order has no SSH public key")]
    NoSshKey,
    #[error("SSH keys: {0}")]
    Access(#[from] AccessError),
    #[error("disk use could not be measured: {0}")]
    NotMeasured(String),
    #[error("not clean: {}", .0.join(", "))]
    NotClean(Vec<String>),
}

impl EngineError {
    /// The reason a renter (or the platform's operator) reads: engine and
    /// state-directory internals stay in the agent's log.
    pub fn reason(&self, step: &str) -> String {
        match self {
            EngineError::Engine(_) | EngineError::Libpod(_) => {
                format!("{step}: the container engine failed")
            }
            EngineError::State { .. } => format!("{step}: the agent's state could not be saved"),
            EngineError::StateUnreadable(_) => {
                format!("{step}: the agent's state could not be read")
            }
            EngineError::Access(AccessError::Io { .. }) => {
                format!("{step}: the agent's state could not be saved")
            }
            other => other.to_string(),
        }
    }
}

/// Whether the engine answered 404 (no such container, network, ...).
pub fn is_not_found(error: &bollard::errors::Error) -> bool {
    matches!(
        error,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// What the engine told about itself at connect.
#[derive(Debug, Clone)]
pub struct EngineFacts {
    /// The API version agreed on (`1.41` with Podman 4).
    pub api_version: String,
    pub podman: bool,
    pub ncpu: i64,
    pub mem_total: i64,
    pub root_dir: Option<String>,
    pub runtimes: Vec<String>,
    /// Podman before 4.4 reports a container's network counters from the
    /// host's side (rx and tx swapped; podman#16618, fixed by #16628).
    pub swapped_net_counters: bool,
}

/// Runs the platform's steps as containers on one machine.
pub struct ContainerExecutor {
    docker: Docker,
    config: EngineConfig,
    machine: Uuid,
    gpus: Vec<GpuInfo>,
    simulated: bool,
    access: Arc<Access>,
    state: state::StateDir,
    /// Makes the MIG slices (NVML, or the simulated model).
    mig: mig::MigBackend,
    facts: EngineFacts,
    /// Serialises the choice of GPUs, slices and host ports on the machine.
    choosing: tokio::sync::Mutex<()>,
    /// Each instance's last `/workspace` measurement: when, and the bytes.
    measured: std::sync::Mutex<std::collections::HashMap<Uuid, (std::time::Instant, u64)>>,
}

impl ContainerExecutor {
    /// Connects to the engine (negotiating the API version), and opens the
    /// state directory.
    pub async fn connect(
        config: EngineConfig,
        machine_id: MachineId,
        inventory: &Inventory,
        access: Arc<Access>,
    ) -> Result<ContainerExecutor, EngineError> {
        let socket = config.socket.to_string_lossy().into_owned();
        let docker =
            Docker::connect_with_unix(&socket, ENGINE_TIMEOUT_SECONDS, API_DEFAULT_VERSION)?
                .negotiate_version()
                .await?;
        let facts = facts(&docker).await?;
        tracing::info!(
            socket = %socket,
            api_version = %facts.api_version,
            podman = facts.podman,
            "container engine connected"
        );
        let state = state::StateDir::open(&config.state_dir)?;
        Ok(ContainerExecutor {
            docker,
            config,
            machine: machine_id.into(),
            gpus: inventory.gpus.clone(),
            simulated: inventory.simulated,
            access,
            state,
            mig: mig::MigBackend::for_host(inventory.simulated),
            facts,
            choosing: tokio::sync::Mutex::new(()),
            measured: std::sync::Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// The engine client (tests, the SSH gateway's exec).
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    pub fn facts(&self) -> &EngineFacts {
        &self.facts
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Bytes used in the instance's `/workspace` (its container must run):
    /// measured, not enforced (see [`volume`]).
    pub async fn disk_usage(&self, instance: Uuid) -> Result<u64, EngineError> {
        volume::disk_usage(&self.docker, instance).await
    }

    /// `/workspace` of a running instance, measured at most every
    /// `--disk-usage-seconds` (a `du` of a large disk is not free); the
    /// measurement is sent only when it is new, so a heartbeat between two
    /// measurements carries none. A failed or slow measurement is skipped.
    async fn workspace_bytes(&self, instance: Uuid) -> Option<u64> {
        let due = {
            let measured = self
                .measured
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            measured
                .get(&instance)
                .is_none_or(|(at, _)| at.elapsed() >= self.config.disk_usage_interval)
        };
        if !due {
            return None;
        }
        let bytes = match tokio::time::timeout(Duration::from_secs(20), self.disk_usage(instance))
            .await
        {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(error)) => {
                tracing::debug!(instance.id = %instance, %error, "measuring /workspace failed");
                return None;
            }
            Err(_) => {
                tracing::warn!(instance.id = %instance, "measuring /workspace took over 20 s; skipped");
                return None;
            }
        };
        self.measured
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(instance, (std::time::Instant::now(), bytes));
        Some(bytes)
    }

    /// The GPU indices bound to `instance`, if any.
    pub fn binding(&self, instance: Uuid) -> Result<Option<Vec<u32>>, EngineError> {
        self.state.binding(instance)
    }

    /// The MIG slice made for `instance`, if any (released or not).
    pub fn slice(&self, instance: Uuid) -> Result<Option<mig::SliceRecord>, EngineError> {
        Ok(self.state.slice_made(instance)?.map(|(record, _)| record))
    }

    /// The GPU bookkeeping of the machine (callers hold `choosing`).
    fn binder(&self) -> gpus::Binder<'_> {
        gpus::Binder {
            gpus: &self.gpus,
            state: &self.state,
            mig: &self.mig,
        }
    }
}

async fn facts(docker: &Docker) -> Result<EngineFacts, EngineError> {
    docker.ping().await?;
    let version = docker.version().await?;
    let info = docker.info().await?;
    let podman = version.components.as_ref().is_some_and(|c| {
        c.iter()
            .any(|c| c.name.to_ascii_lowercase().contains("podman"))
    }) || version
        .platform
        .as_ref()
        .is_some_and(|p| p.name.to_ascii_lowercase().contains("podman"));
    let swapped_net_counters = podman
        && version
            .version
            .as_deref()
            .and_then(major_minor)
            .is_some_and(|v| v < (4, 4));
    Ok(EngineFacts {
        swapped_net_counters,
        api_version: docker.client_version().to_string(),
        podman,
        ncpu: info.ncpu.unwrap_or(1).max(1),
        mem_total: info.mem_total.unwrap_or(0).max(0),
        root_dir: info.docker_root_dir,
        runtimes: info
            .runtimes
            .map(|r| r.into_keys().collect())
            .unwrap_or_default(),
    })
}

/// `4.3.1` → (4, 3).
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.trim().trim_start_matches('v').split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts
        .next()
        .and_then(|m| m.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    Some((major, minor))
}

impl Executor for ContainerExecutor {
    fn execute<'a>(
        &'a self,
        command: &'a AgentCommand,
        progress: Progress,
    ) -> Pin<Box<dyn Future<Output = Result<Option<StepDetail>, String>> + Send + 'a>> {
        Box::pin(async move {
            match self.step(command, &progress).await {
                Ok(detail) => Ok(detail),
                Err(error) => {
                    tracing::warn!(
                        step = %command.step,
                        action = %command.action,
                        %error,
                        "step failed"
                    );
                    Err(error.reason(&command.step))
                }
            }
        })
    }

    fn exited<'a>(
        &'a self,
        machine_id: MachineId,
    ) -> Pin<Box<dyn Future<Output = Vec<InstanceExited>> + Send + 'a>> {
        Box::pin(exits::exited(&self.docker, &self.state, machine_id.into()))
    }

    fn traffic<'a>(
        &'a self,
        machine_id: MachineId,
    ) -> Pin<Box<dyn Future<Output = Vec<InstanceCounters>> + Send + 'a>> {
        Box::pin(async move {
            // Each heartbeat also mends what a teardown outside the agent's
            // steps may have undone (see `network`).
            self.repair_isolation().await;
            let mut counters = traffic::traffic(
                &self.docker,
                machine_id.into(),
                self.facts.swapped_net_counters,
            )
            .await;
            for counter in &mut counters {
                counter.workspace_bytes = self.workspace_bytes(counter.instance_id.into()).await;
            }
            counters
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_major_and_minor() {
        assert_eq!(major_minor("4.3.1"), Some((4, 3)));
        assert_eq!(major_minor("v5.0.0-rc1"), Some((5, 0)));
        assert_eq!(major_minor("27"), Some((27, 0)));
        assert_eq!(major_minor("x"), None);
    }
}
