//! The engine executor's flags ([`EngineArgs`]) and their checked form
//! ([`EngineConfig`]): where the engine is, how GPUs are handed to a
//! container, which host ports and registries a rental may use, and the
//! limits every container gets.

use std::path::PathBuf;
use std::time::Duration;

use super::EngineError;

/// How a container is given its GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GpuStyle {
    /// `HostConfig.DeviceRequests` (driver `nvidia`, capabilities `[[gpu]]`,
    /// device ids = GPU UUIDs): Docker with the NVIDIA Container Toolkit.
    DeviceRequests,
    /// CDI device names `nvidia.com/gpu=<index>` in `HostConfig.Devices`:
    /// Podman (its compatible API reads a CDI name in `PathOnHost`), or
    /// Docker ≥ 25 with CDI enabled.
    Cdi,
}

/// The agent's engine flags (`gpumarket agent --engine-socket ...`).
#[derive(Debug, Clone, clap::Args)]
pub struct EngineArgs {
    /// The Docker Engine API's unix socket (Docker, or `podman system
    /// service`). Unset: no engine, the agent takes no commands.
    #[arg(long, env = "GPUMARKET_ENGINE_SOCKET")]
    pub engine_socket: Option<PathBuf>,
    /// How GPUs are passed to containers.
    #[arg(long, value_enum, default_value_t = GpuStyle::DeviceRequests)]
    pub gpu_style: GpuStyle,
    /// Host ports the order's container ports are published on, `FIRST-LAST`.
    #[arg(long, default_value = "40000-40999", value_parser = parse_port_range)]
    pub port_range: (u16, u16),
    /// Largest image accepted, GiB (announced layer sizes while pulling,
    /// then the image's size).
    #[arg(long, default_value_t = 50)]
    pub max_image_gib: u64,
    /// Longest an image pull may take.
    #[arg(long, default_value_t = 1800)]
    pub pull_timeout_seconds: u64,
    /// Registries images may come from (`ghcr.io,registry.example:5000`);
    /// empty = any. Docker Hub is `docker.io`.
    #[arg(long, value_delimiter = ',')]
    pub allowed_registries: Vec<String>,
    /// Where the agent keeps GPU bindings and "wanted running" markers, so a
    /// restarted agent knows them.
    #[arg(long, default_value = "/var/lib/gpumarket-agent")]
    pub state_dir: PathBuf,
    /// What renters connect to (default: the machine's hostname).
    #[arg(long)]
    pub public_host: Option<String>,
    /// The SSH gateway's port, as renters reach it (only put in the
    /// connection details).
    #[arg(long, default_value_t = 2222)]
    pub ssh_port: u16,
    /// Seconds a stopping container gets between SIGTERM and SIGKILL.
    #[arg(long, default_value_t = 10)]
    pub stop_grace_seconds: u32,
    /// How often each running rental's `/workspace` is measured (`du` in
    /// the container) and reported with the heartbeat.
    #[arg(long, default_value_t = 60)]
    pub disk_usage_seconds: u64,
    /// Processes (threads) one container may run.
    #[arg(long, default_value_t = 4096)]
    pub container_pids_limit: i64,
    /// `RLIMIT_NOFILE` of container processes (soft = hard). At most the
    /// engine's own hard limit: the runtime cannot raise it (on a host
    /// whose limit is 20000, 65536 fails every start).
    #[arg(long, default_value_t = 16384)]
    pub container_nofile: i64,
    /// `RLIMIT_NPROC` of container processes (soft = hard); the engine
    /// needs it explicit (Podman's default fails with runc here).
    #[arg(long, default_value_t = 16384)]
    pub container_nproc: i64,
}

/// `40000-40999` → (40000, 40999).
pub fn parse_port_range(text: &str) -> Result<(u16, u16), String> {
    let (first, last) = text
        .split_once('-')
        .ok_or_else(|| format!("{text:?}: expected FIRST-LAST"))?;
    let first: u16 = first
        .trim()
        .parse()
        .map_err(|e| format!("{first:?}: {e}"))?;
    let last: u16 = last.trim().parse().map_err(|e| format!("{last:?}: {e}"))?;
    if first == 0 || first > last {
        return Err(format!("{text:?}: expected 1 <= FIRST <= LAST"));
    }
    Ok((first, last))
}

/// The checked engine configuration.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub socket: PathBuf,
    pub gpu_style: GpuStyle,
    pub port_range: (u16, u16),
    pub max_image_bytes: u64,
    pub pull_timeout: Duration,
    /// Lower-cased registry hosts (with port); empty = any.
    pub allowed_registries: Vec<String>,
    pub state_dir: PathBuf,
    pub public_host: String,
    pub ssh_port: u16,
    pub stop_grace_seconds: u32,
    pub disk_usage_interval: Duration,
    pub pids_limit: i64,
    pub nofile: i64,
    pub nproc: i64,
}

impl EngineArgs {
    /// The configuration, or None when no engine socket is given.
    pub fn config(&self) -> Result<Option<EngineConfig>, EngineError> {
        let Some(socket) = self.engine_socket.clone() else {
            return Ok(None);
        };
        let bad = |m: String| Err(EngineError::Config(m));
        if self.max_image_gib == 0 {
            return bad("--max-image-gib must be positive".into());
        }
        if self.pull_timeout_seconds == 0 {
            return bad("--pull-timeout-seconds must be positive".into());
        }
        if self.container_pids_limit <= 0 || self.container_nofile <= 0 || self.container_nproc <= 0
        {
            return bad("container limits must be positive".into());
        }
        let public_host = match &self.public_host {
            Some(host) if !host.trim().is_empty() => host.trim().to_owned(),
            _ => hostname()?,
        };
        Ok(Some(EngineConfig {
            socket,
            gpu_style: self.gpu_style,
            port_range: self.port_range,
            max_image_bytes: self.max_image_gib.saturating_mul(1 << 30),
            pull_timeout: Duration::from_secs(self.pull_timeout_seconds),
            allowed_registries: self
                .allowed_registries
                .iter()
                .map(|r| r.trim().to_ascii_lowercase())
                .filter(|r| !r.is_empty())
                .collect(),
            state_dir: self.state_dir.clone(),
            public_host,
            ssh_port: self.ssh_port,
            stop_grace_seconds: self.stop_grace_seconds,
            disk_usage_interval: Duration::from_secs(self.disk_usage_seconds.max(1)),
            pids_limit: self.container_pids_limit,
            nofile: self.container_nofile,
            nproc: self.container_nproc,
        }))
    }
}

impl EngineConfig {
    /// A configuration with the flags' defaults (tests, embedding).
    pub fn new(socket: impl Into<PathBuf>, state_dir: impl Into<PathBuf>) -> EngineConfig {
        EngineConfig {
            socket: socket.into(),
            gpu_style: GpuStyle::DeviceRequests,
            port_range: (40000, 40999),
            max_image_bytes: 50 << 30,
            pull_timeout: Duration::from_secs(1800),
            allowed_registries: Vec::new(),
            state_dir: state_dir.into(),
            public_host: "localhost".into(),
            ssh_port: 2222,
            stop_grace_seconds: 10,
            disk_usage_interval: Duration::from_secs(60),
            pids_limit: 4096,
            nofile: 16384,
            nproc: 16384,
        }
    }
}

/// The machine's hostname (Linux: the kernel's).
fn hostname() -> Result<String, EngineError> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map_err(|e| EngineError::Config(format!("no --public-host and no hostname: {e}")))?;
    Ok(name.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        engine: EngineArgs,
    }

    #[test]
    fn flags_have_working_defaults_and_no_socket_means_no_engine() {
        use clap::Parser;
        let cli = Cli::try_parse_from(["agent"]).unwrap();
        assert!(cli.engine.config().unwrap().is_none());
        let cli = Cli::try_parse_from([
            "agent",
            "--engine-socket",
            "/run/podman/podman.sock",
            "--gpu-style",
            "cdi",
            "--allowed-registries",
            "GHCR.io, 127.0.0.1:5000",
            "--public-host",
            "gpu1.example",
        ])
        .unwrap();
        let config = cli.engine.config().unwrap().unwrap();
        assert_eq!(config.gpu_style, GpuStyle::Cdi);
        assert_eq!(config.port_range, (40000, 40999));
        assert_eq!(config.max_image_bytes, 50 << 30);
        assert_eq!(config.pull_timeout, Duration::from_secs(1800));
        assert_eq!(config.allowed_registries, ["ghcr.io", "127.0.0.1:5000"]);
        assert_eq!(config.public_host, "gpu1.example");
        assert_eq!(config.ssh_port, 2222);
        assert!(Cli::try_parse_from(["agent", "--port-range", "5-1"]).is_err());
    }

    #[test]
    fn port_ranges_are_checked() {
        assert_eq!(parse_port_range("40000-40999"), Ok((40000, 40999)));
        assert!(parse_port_range("40999-40000").is_err());
        assert!(parse_port_range("0-10").is_err());
        assert!(parse_port_range("40000").is_err());
    }
}
