//! Starts services and workers in this process. Services bind their
//! configured ports (0 = any free port); services that call others are
//! started after them and told the ports actually bound.

use std::sync::Arc;

use anyhow::Context;
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
    Db::connect(&config.database_url_for(service), config.db_pool_size)
        .with_context(|| format!("connecting {service} to the database"))
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
    let agent_config = host_agent::AgentConfig {
        // Small frames, as every connection of this process (see
        // `platform::broker::FRAME_MAX`).
        amqp_url: platform::broker::with_frame_max(&config.amqp_url_for_agents()?),
        machine_id: agent.machine_id,
        token: agent.token.clone(),
        heartbeat_interval: std::time::Duration::from_secs(config.agent_heartbeat_seconds.max(1)),
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
    agent_config.inventory.simulated_utilization_percent = config.sim_gpu_utilization_percent;
    let machine_id = agent.machine_id;
    let executor: std::sync::Arc<dyn host_agent::Executor> = std::sync::Arc::new(
        provisioner::SimulatedDriver::from_config(pool(config, "provisioner")?, config)?,
    );
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
        config.agent_heartbeat_seconds.max(1).to_string(),
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

/// Starts `parts` with `config`. Migrations must have run.
pub async fn start(config: Config, parts: Parts) -> anyhow::Result<Stack> {
    let webhooks_settings = webhooks::Settings::from_env(config.production)?;
    start_with(config, parts, webhooks_settings).await
}

/// [`start`] with the webhook service's own settings given rather than read
/// from the environment (a test's retry schedule, its local receivers).
pub async fn start_with(
    config: Config,
    parts: Parts,
    webhooks_settings: webhooks::Settings,
) -> anyhow::Result<Stack> {
    let mut config = config;
    let webhooks_settings = Arc::new(webhooks_settings);
    let mut servers = Vec::new();
    let mut tasks: Vec<JoinHandle<()>> = Vec::new();
    let mut spawn_server = |server: actix_web::dev::Server, tasks: &mut Vec<JoinHandle<()>>| {
        servers.push(server.handle());
        tasks.push(tokio::spawn(async move {
            if let Err(error) = server.await {
                tracing::error!(%error, "server ended");
            }
        }));
    };

    if parts.services {
        let base = Arc::new(config.clone());
        let (server, port) = catalog::build(base.clone(), pool(&config, "catalog")?)?;
        spawn_server(server, &mut tasks);
        config.urls.catalog = local(port);
        let (server, port) = quota::build(base.clone(), pool(&config, "quota")?)?;
        spawn_server(server, &mut tasks);
        config.urls.quota = local(port);
        let (server, port) = metering::build(base.clone(), pool(&config, "metering")?)?;
        spawn_server(server, &mut tasks);
        config.urls.metering = local(port);
        let (server, port) = billing::build(base.clone(), pool(&config, "billing")?)?;
        spawn_server(server, &mut tasks);
        config.urls.billing = local(port);
        let (server, port) = webhooks::build(
            base.clone(),
            webhooks_settings.clone(),
            pool(&config, webhooks::SCHEMA)?,
        )?;
        spawn_server(server, &mut tasks);
        config.urls.webhooks = local(port);
        let (server, port) = ordering::build(Arc::new(config.clone()), pool(&config, "ordering")?)?;
        spawn_server(server, &mut tasks);
        config.urls.ordering = local(port);
        let (server, port) = gateway::build(Arc::new(config.clone()))?;
        spawn_server(server, &mut tasks);
        config.ports.gateway = port;
    }
    let config = Arc::new(config);

    if parts.services {
        // Billing's payout schedule (its first run is one interval away).
        tasks.push(tokio::spawn(billing::run_payout_loop(
            config.clone(),
            pool(&config, "billing")?,
        )));
    }

    if parts.messaging {
        for schema in [
            ordering::SCHEMA,
            metering::SCHEMA,
            catalog::SCHEMA,
            billing::SCHEMA,
        ] {
            let db = pool(&config, schema)?;
            tasks.push(tokio::spawn(platform::outbox::run_relay(
                db,
                config.clone(),
                schema,
            )));
        }
        tasks.push(tokio::spawn(metering::run_consumer(
            config.clone(),
            pool(&config, "metering")?,
        )));
        // The catalog's preemptions, applied to the instances they hit.
        tasks.push(tokio::spawn(ordering::preemption::run_consumer(
            config.clone(),
            pool(&config, "ordering")?,
        )));
        // Agents' heartbeats, and the sweeper that notices when they stop.
        tasks.push(tokio::spawn(catalog::heartbeats::run_consumer(
            config.clone(),
            pool(&config, "catalog")?,
        )));
        tasks.push(tokio::spawn(catalog::reliability::run_offline_sweeper(
            config.clone(),
            pool(&config, "catalog")?,
        )));
        let billing_db = pool(&config, "billing")?;
        let billing_config = config.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(error) = billing::run_consumer(billing_config, billing_db).await {
                tracing::error!(%error, "billing consumer stopped");
            }
        }));
        // Monthly caps and low-runway warnings (billing::spend).
        let (watch_config, watch_db) = (config.clone(), pool(&config, "billing")?);
        tasks.push(tokio::spawn(async move {
            if let Err(error) = billing::spend::run_watch(watch_config, watch_db).await {
                tracing::error!(%error, "spend watch stopped");
            }
        }));
        let (schedule_config, schedule_db) = (config.clone(), pool(&config, "billing")?);
        tasks.push(tokio::spawn(async move {
            if let Err(error) =
                billing::schedule::run_invoice_schedule(schedule_config, schedule_db).await
            {
                tracing::error!(%error, "invoice schedule stopped");
            }
        }));
    }

    if parts.messaging {
        // Renters' and hosts' webhooks: the events they see, and the sender.
        let (c, s, d) = (
            config.clone(),
            webhooks_settings.clone(),
            pool(&config, webhooks::SCHEMA)?,
        );
        tasks.push(tokio::spawn(async move {
            if let Err(error) = webhooks::run_consumer(c, s, d).await {
                tracing::error!(%error, "webhook consumer stopped");
            }
        }));
        let (c, s, d) = (
            config.clone(),
            webhooks_settings.clone(),
            pool(&config, webhooks::SCHEMA)?,
        );
        tasks.push(tokio::spawn(async move {
            if let Err(error) = webhooks::run_sender(c, s, d).await {
                tracing::error!(%error, "webhook sender stopped");
            }
        }));
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
        gateway_url: local(config.ports.gateway),
        config,
        servers,
        tasks,
    })
}
