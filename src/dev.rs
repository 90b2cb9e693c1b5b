//! Starts services and workers in this process. Services bind their
//! configured ports (0 = any free port); services that call others are
//! started after them and told the ports actually bound.

use contracts::ids::MachineId;
use std::sync::Arc;

use anyhow::Context;
use platform::service::{Service, Task, TaskKind};
use platform::{Config, Db};
use tokio::task::JoinHandle;

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    pub services: bool,
    /// Outbox relays, the metering, billing and heartbeat consumers, and the
    /// offline sweeper.
    pub messaging: bool,
    pub provisioner: bool,
}

impl Parts {
    pub const ALL: Parts = Parts {
        services: true,
        messaging: true,
        provisioner: true,
    };
    /// The services and the gateway alone: no relays, consumers or worker.
    pub const SERVICES: Parts = Parts {
        services: true,
        messaging: false,
        provisioner: false,
    };
}

/// A running stack; dropping it stops everything it started.
pub struct Stack {
    pub config: Arc<Config>,
    pub gateway_url: String,
    servers: Vec<actix_web::dev::ServerHandle>,
    tasks: Vec<JoinHandle<()>>,
}

impl Stack {
    /// Stops servers gracefully and ends background tasks.
    pub async fn stop(mut self) {
        for server in self.servers.drain(..) {
            server.stop(false).await;
        }
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }

    /// Keeps `task` running as long as the stack.
    pub fn adopt(&mut self, task: JoinHandle<()>) {
        self.tasks.push(task);
    }

    /// Waits until a task ends (they run forever unless something is wrong).
    pub async fn wait(mut self) -> anyhow::Result<()> {
        let mut set = tokio::task::JoinSet::new();
        for task in std::mem::take(&mut self.tasks) {
            set.spawn(task);
        }
        if let Some(ended) = set.join_next().await {
            ended
                .context("a service task panicked")?
                .context("a service task panicked")?;
        }
        anyhow::bail!("a service task ended")
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn pool(config: &Config, service: &str) -> anyhow::Result<Db> {
    platform::service::pool(config, service)
        .with_context(|| format!("connecting {service} to the database"))
}

/// The settings of the host agents this process runs for the demo and the
/// tests (`gpumarket dev`'s simulated machines), read once per process
/// ([`platform::settings`]).
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// How often each agent heartbeats (at least 1 s).
    /// `GPUMARKET_AGENT_HEARTBEAT_SECONDS`.
    pub heartbeat_seconds: u64,
    /// Fixed utilisation (percent) the simulated GPUs report; unset, they
    /// report random numbers. `GPUMARKET_SIM_GPU_UTILIZATION_PERCENT`.
    pub sim_gpu_utilization_percent: Option<u32>,
}

impl platform::settings::ServiceSettings for AgentSettings {
    fn from_env(_production: bool) -> Result<Self, platform::PlatformError> {
        let utilization =
            match platform::settings::optional("GPUMARKET_SIM_GPU_UTILIZATION_PERCENT") {
                None => None,
                Some(raw) => Some(
                    raw.trim()
                        .parse::<u32>()
                        .ok()
                        .filter(|p| *p <= 100)
                        .ok_or_else(|| {
                            platform::PlatformError::Config(format!(
                                "GPUMARKET_SIM_GPU_UTILIZATION_PERCENT: {raw:?} is not a percentage"
                            ))
                        })?,
                ),
            };
        Ok(Self {
            heartbeat_seconds: platform::settings::parsed(
                "GPUMARKET_AGENT_HEARTBEAT_SECONDS",
                5u64,
            )?
            .max(1),
            sim_gpu_utilization_percent: utilization,
        })
    }
}

fn local(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// Runs a simulated host agent for a machine in this process, as a host would
/// run `gpumarket agent` next to its GPUs. It carries out the `agent`
/// driver's commands on the simulated machine state (the provisioner's
/// `sim_resources`, standing in for the host's own disk).
pub fn spawn_agent(
    config: &Config,
    agent: &crate::seed::DemoAgent,
) -> anyhow::Result<JoinHandle<()>> {
    let settings = config.settings::<AgentSettings>()?;
    let agent_config = host_agent::AgentConfig {
        // Small frames, as every connection of this process (see
        // `platform::broker::FRAME_MAX`).
        amqp_url: platform::broker::with_frame_max(&config.amqp_url_for_agents()?),
        machine_id: MachineId(agent.machine_id),
        token: agent.token.clone(),
        heartbeat_interval: std::time::Duration::from_secs(settings.heartbeat_seconds),
        inventory: host_agent::Inventory::simulated(
            agent.gpu_count,
            &agent.gpu_model,
            agent.vram_gib,
            &agent.cuda_version,
            "550.90.07",
        ),
        hold_after_step: None,
    };
    let mut agent_config = agent_config;
    agent_config.inventory.simulated_utilization_percent = settings.sim_gpu_utilization_percent;
    let machine_id = agent.machine_id;
    let executor: std::sync::Arc<dyn host_agent::Executor> =
        std::sync::Arc::new(crate::simulated_agent::SimulatedAgent(
            provisioner::SimulatedDriver::from_config(pool(config, "provisioner")?, config)?,
        ));
    Ok(tokio::spawn(async move {
        if let Err(error) = host_agent::run_with_executor(agent_config, Some(executor)).await {
            tracing::warn!(machine.id = %machine_id, %error, "simulated agent stopped");
        }
    }))
}

/// The local engine `make run-real` gives the demo's real-container machine.
#[derive(Debug, Clone, clap::Args)]
pub struct RealEngine {
    /// The engine's Docker API socket (`deploy/local/podman-engine.sh up`).
    /// With it, the demo market gets one more machine, `local-podman-01`,
    /// whose agent runs rentals as real containers (one simulated GPU).
    #[arg(long)]
    pub engine_socket: Option<std::path::PathBuf>,
    /// The real machine's SSH gateway port.
    #[arg(long, default_value_t = 2222)]
    pub ssh_port: u16,
    /// Host ports for the real machine's published ports.
    #[arg(long, default_value = "40000-40099")]
    pub port_range: String,
    /// The real machine's agent state (SSH host key, keys, GPU bindings).
    #[arg(long, default_value = "/var/tmp/gpumarket-real-agent")]
    pub state_dir: std::path::PathBuf,
}

/// Runs the agent of the demo's real-container machine in this process,
/// exactly as `gpumarket agent --engine-socket ...` would on a host: it
/// reports like the others and runs each rental as a container of the local
/// engine, reachable over its SSH gateway on 127.0.0.1.
pub fn spawn_real_agent(
    config: &Config,
    agent: &crate::seed::DemoAgent,
    engine: &RealEngine,
) -> anyhow::Result<JoinHandle<()>> {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        agent: host_agent::AgentArgs,
    }
    let amqp = reqwest::Url::parse(&config.amqp_url)?;
    let socket = engine
        .engine_socket
        .as_ref()
        .context("no engine socket")?
        .to_string_lossy()
        .into_owned();
    let args = Cli::try_parse_from([
        "agent".to_owned(),
        "--machine-id".into(),
        agent.machine_id.to_string(),
        "--token".into(),
        agent.token.clone(),
        "--amqp-host".into(),
        format!(
            "{}:{}",
            amqp.host_str().unwrap_or("127.0.0.1"),
            amqp.port().unwrap_or(5672)
        ),
        "--vhost".into(),
        config.amqp_vhost()?,
        "--heartbeat-seconds".into(),
        config
            .settings::<AgentSettings>()?
            .heartbeat_seconds
            .to_string(),
        "--simulate-gpus".into(),
        agent.gpu_count.to_string(),
        "--simulate-model".into(),
        agent.gpu_model.clone(),
        "--simulate-vram-gib".into(),
        agent.vram_gib.to_string(),
        "--engine-socket".into(),
        socket,
        "--state-dir".into(),
        engine.state_dir.to_string_lossy().into_owned(),
        "--public-host".into(),
        "127.0.0.1".into(),
        "--ssh-listen".into(),
        "127.0.0.1".into(),
        "--ssh-port".into(),
        engine.ssh_port.to_string(),
        "--port-range".into(),
        engine.port_range.clone(),
    ])?;
    let machine_id = agent.machine_id;
    Ok(tokio::spawn(async move {
        if let Err(error) = host_agent::run_host(args.agent).await {
            tracing::error!(machine.id = %machine_id, %error, "the real-container agent stopped");
        }
    }))
}

/// Starts `parts` with `config`: every service of the registry, each with
/// its settings as `config` carries them (a test's, set beforehand) or as
/// the environment says. Migrations must have run.
pub async fn start(config: Config, parts: Parts) -> anyhow::Result<Stack> {
    let mut config = config;
    // The queues as the settings on `config` name them (a test may have
    // changed them).
    crate::services::configure_queues(&mut config)?;
    let mut servers = Vec::new();
    let mut tasks: Vec<JoinHandle<()>> = Vec::new();
    let services: &[&dyn Service] = &crate::services::SERVICES;

    if parts.services {
        // In registry order: each service is told the addresses of those
        // started before it, which are the ones it calls.
        for service in services {
            let (server, port) = service
                .server(Arc::new(config.clone()))
                .map_err(|e| anyhow::anyhow!("starting {}: {e}", service.name()))?;
            servers.push(server.handle());
            tasks.push(tokio::spawn(async move {
                if let Err(error) = server.await {
                    tracing::error!(%error, "server ended");
                }
            }));
            service.bound(&mut config, local(port), port);
        }
    }
    let config = Arc::new(config);

    for service in services {
        let wanted: Vec<Task> = service
            .tasks(config.clone())
            .map_err(|e| anyhow::anyhow!("starting {}'s tasks: {e}", service.name()))?
            .into_iter()
            .filter(|t| match t.kind {
                TaskKind::Always => parts.services,
                TaskKind::Messaging => parts.messaging,
            })
            .collect();
        for task in wanted {
            tasks.push(tokio::spawn(task.future));
        }
    }

    if parts.provisioner {
        let db = pool(&config, "provisioner")?;
        let worker_config = config.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(error) = provisioner::run(worker_config, db).await {
                tracing::error!(%error, "provisioner stopped");
            }
        }));
    }

    Ok(Stack {
        gateway_url: local(config.ports.get("gateway")),
        config,
        servers,
        tasks,
    })
}
