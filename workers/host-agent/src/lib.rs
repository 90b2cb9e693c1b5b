//! The host agent: the process a host runs on each machine it rents out,
//! started with the machine's id and agent token (`gpumarket agent ...`).
//!
//! It owns the machine's side of the agent protocol (docs/host-agent.md):
//! it connects to RabbitMQ as the machine's own user `agent-<machine_id>.<gen>`
//! (password = the agent token; the catalog creates the user when the machine
//! is registered and deletes it when the token is revoked), and publishes to
//! the `gpumarket.agents` exchange, under routing keys `agent.<machine_id>.*`
//! only, with the broker-checked `user_id` property set:
//! - `inventory` on start: GPUs, driver and CUDA version;
//! - `self_test` on start: the checks it ran on those GPUs;
//! - `heartbeat` every interval: per-GPU utilisation and memory in use.
//!
//! It reconnects with capped exponential backoff when the connection drops
//! and ends with [`Error::Refused`] when the broker refuses its credentials
//! (the token was revoked or rotated). GPUs are simulated by default; the
//! `nvml` feature reads them from NVML on a real host.
//!
//! Given an [`Executor`] ([`run_with_executor`]), it also declares its
//! command queue `cmd.<machine_id>` on every connect
//! ([`declare_command_queue`]) and consumes it: each [`protocol::AgentCommand`] is one step of a
//! provisioning job; the agent carries it out and answers with
//! `agent.<machine_id>.step_result` ([`protocol::StepResult`]), then acks the
//! command. A command past its deadline is dropped unanswered: the worker has
//! already given up on it (and retries with a new command).

// No unsafe code, as in the whole workspace, unless built with NVML: its
// MIG calls are FFI (see Cargo.toml's lints and engine::mig::nvml).
#![cfg_attr(not(feature = "nvml"), forbid(unsafe_code))]

pub mod access;
pub mod engine;
pub mod inventory;
pub mod names;

pub mod protocol;
pub mod ssh;

use contracts::ids::MachineId;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::types::{LongString, ShortString};
use lapin::uri::AMQPUri;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use serde::Serialize;
use uuid::Uuid;

pub use inventory::{Inventory, Sampler};
/// The AMQP client the agent speaks with, for tools and tests that need to
/// speak the same protocol.
pub use lapin;
use protocol::{
    AgentCommand, HeartbeatReport, InstanceCounters, InstanceExited, InventoryReport, Kind,
    SelfTestReport, StepDetail, StepProgress, StepResult,
};

const MIN_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A session that lasted this long resets the backoff.
const STABLE_SESSION: Duration = Duration::from_secs(30);
/// Longest wait for the broker to open a connection or confirm a message.
const BROKER_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The broker refused the agent's credentials or permissions (AMQP 403
    /// `ACCESS_REFUSED` or 530 `NOT_ALLOWED`): the token was revoked or
    /// rotated, or the machine is not registered. Retrying will not help.
    #[error("refused by the broker: {0}")]
    Refused(String),
    #[error("broker: {0}")]
    Broker(#[from] lapin::Error),
    #[error("configuration: {0}")]
    Config(String),
    #[error("inventory: {0}")]
    Inventory(String),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the broker did not confirm a {0} message")]
    NotConfirmed(&'static str),
    /// No queue is bound for the report yet (the platform has not declared
    /// its topology): retried like a lost connection.
    #[error("the broker could not route a {0} message")]
    Unroutable(&'static str),
    #[error("the broker did not answer within {0:?}")]
    Timeout(Duration),
    #[cfg(feature = "nvml")]
    #[error("nvml: {0}")]
    Nvml(#[from] nvml_wrapper::error::NvmlError),
    #[error(transparent)]
    Engine(#[from] engine::EngineError),
    #[error(transparent)]
    Ssh(#[from] ssh::SshError),
    #[error("ssh access: {0}")]
    Access(#[from] access::AccessError),
}

impl Error {
    /// Sorts a broker error: credentials or permissions refused are final.
    fn classify(error: lapin::Error) -> Error {
        if let lapin::ErrorKind::ProtocolError(amqp) = error.kind() {
            let code = amqp.get_id();
            if code == 403 || code == 530 {
                return Error::Refused(amqp.get_message().to_string());
            }
        }
        Error::Broker(error)
    }
}

/// Everything the agent needs to run.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// `amqp://host:port/vhost` without credentials: the agent puts its own
    /// (`agent-<machine_id>.<gen>`, the token) in. Credentials present are replaced.
    pub amqp_url: String,
    pub machine_id: MachineId,
    /// The agent token `registerMachine` returned once.
    pub token: String,
    pub heartbeat_interval: Duration,
    pub inventory: Inventory,
    /// A test hook: after carrying out this step, write `held-<step>` into
    /// the directory and never answer (the agent is then SIGKILLed, so the
    /// step's work is done and nobody was told: the redelivery must not do
    /// it twice). Never set in production (`GPUMARKET_AGENT_HOLD_AFTER_STEP`).
    pub hold_after_step: Option<(String, std::path::PathBuf)>,
}

impl AgentConfig {
    fn uri(&self) -> Result<AMQPUri, Error> {
        let mut uri: AMQPUri = self
            .amqp_url
            .parse()
            .map_err(|e| Error::Config(format!("amqp url {:?}: {e}", self.amqp_url)))?;
        // AMQPUri drops IP hosts (it keeps DNS names only); take the host as written.
        if let Some(host) = host_of(&self.amqp_url) {
            uri.authority.host = host;
        }
        uri.authority.userinfo.username = protocol::username(self.machine_id.into(), &self.token);
        uri.authority.userinfo.password = self.token.clone();
        Ok(uri)
    }
}

/// The host of `scheme://[user[:pass]@]host[:port][/...]`.
fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split('/').next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split_once(']')?.0
    } else {
        host_port.split(':').next()?
    };
    (!host.is_empty()).then(|| host.to_owned())
}

/// Carries out the steps the platform sends to this machine. On a real host
/// this runs containers; in simulated mode it changes the simulated machine
/// state. A step must be idempotent: a command is redelivered when the agent
/// dies before acking it.
pub trait Executor: Send + Sync {
    /// Carries out one step. `progress` takes what a long step wants the
    /// renter to see while it runs (an image pull); the error is the reason
    /// the renter reads.
    fn execute<'a>(
        &'a self,
        command: &'a AgentCommand,
        progress: Progress,
    ) -> Pin<Box<dyn Future<Output = Result<Option<StepDetail>, String>> + Send + 'a>>;

    /// Rentals on `machine_id` whose container stopped on its own while the
    /// platform wants it running, reported with each heartbeat; none by
    /// default.
    fn exited<'a>(
        &'a self,
        machine_id: MachineId,
    ) -> Pin<Box<dyn Future<Output = Vec<InstanceExited>> + Send + 'a>> {
        let _ = machine_id;
        Box::pin(async { Vec::new() })
    }

    /// The network counters of the instances on `machine_id`, reported with
    /// each heartbeat; none by default.
    fn traffic<'a>(
        &'a self,
        machine_id: MachineId,
    ) -> Pin<Box<dyn Future<Output = Vec<InstanceCounters>> + Send + 'a>> {
        let _ = machine_id;
        Box::pin(async { Vec::new() })
    }
}

/// Where a step's progress messages go: the agent publishes them as
/// `agent.<machine_id>.step_progress`, at most one a second, and drops the
/// rest (progress is informational).
#[derive(Clone, Default)]
pub struct Progress {
    sender: Option<tokio::sync::mpsc::Sender<String>>,
}

impl Progress {
    /// Progress that goes nowhere (tests, simulated steps).
    pub fn none() -> Self {
        Self::default()
    }

    /// Reports how far the step got; never waits.
    pub fn report(&self, message: impl Into<String>) {
        if let Some(sender) = &self.sender {
            let mut message: String = message.into();
            if message.len() > 200 {
                let mut end = 200;
                while !message.is_char_boundary(end) {
                    end -= 1;
                }
                message.truncate(end);
            }
            let _ = sender.try_send(message);
        }
    }
}

/// How long a finished step waits for its last progress report to go out
/// before its result does.
const PROGRESS_FLUSH: Duration = Duration::from_secs(5);

/// Commands carried out at once; more wait in the queue.
const COMMAND_PREFETCH: u16 = 8;

/// Runs the agent until its credentials are refused (or a configuration
/// error); broker outages are waited out with backoff. It reports but takes
/// no commands (see [`run_with_executor`]).
pub async fn run(config: AgentConfig) -> Result<(), Error> {
    run_with_executor(config, None).await
}

/// [`run`], and carries out the commands of `cmd.<machine_id>` with
/// `executor` when one is given (only then is the queue declared: an agent
/// that takes no commands has none, and a command to it is refused as
/// "not connected" instead of waiting unread).
pub async fn run_with_executor(
    config: AgentConfig,
    executor: Option<Arc<dyn Executor>>,
) -> Result<(), Error> {
    if config.heartbeat_interval.is_zero() {
        return Err(Error::Config("heartbeat interval must be positive".into()));
    }
    let uri = config.uri()?;
    let sampler = Sampler::for_inventory(&config.inventory)?;
    let mut backoff = MIN_BACKOFF;
    let mut seq = 0u64;
    // Heartbeat numbers start over with the process: this names the run.
    let boot_id = Uuid::now_v7();
    loop {
        let started = tokio::time::Instant::now();
        let run = (boot_id, &mut seq);
        let error = match session(&config, uri.clone(), &sampler, run, executor.as_ref()).await {
            Ok(never) => match never {},
            Err(error) => error,
        };
        if let Error::Refused(reason) = &error {
            tracing::error!(machine.id = %config.machine_id, %reason, "broker refused the agent's credentials; stopping");
            return Err(error);
        }
        if started.elapsed() >= STABLE_SESSION {
            backoff = MIN_BACKOFF;
        }
        tracing::warn!(machine.id = %config.machine_id, %error, retry_in_ms = backoff.as_millis() as u64, "agent connection lost; reconnecting");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One connection: inventory and self-test, then heartbeats until it fails.
async fn session(
    config: &AgentConfig,
    uri: AMQPUri,
    sampler: &Sampler,
    (boot_id, seq): (Uuid, &mut u64),
    executor: Option<&Arc<dyn Executor>>,
) -> Result<std::convert::Infallible, Error> {
    let properties = ConnectionProperties::default().with_connection_name(LongString::from(
        format!("gpumarket-host-agent {}", config.machine_id),
    ));
    let conn = tokio::time::timeout(BROKER_TIMEOUT, Connection::connect_uri(uri, properties))
        .await
        .map_err(|_| Error::Timeout(BROKER_TIMEOUT))?
        .map_err(Error::classify)?;
    let channel = conn.create_channel().await.map_err(Error::classify)?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(Error::classify)?;
    tracing::info!(machine.id = %config.machine_id, "agent connected");
    let user = protocol::username(config.machine_id.into(), &config.token);

    // Commands arrive on a channel of their own so that a long step never
    // delays a heartbeat. The queue is declared and consumed before the
    // first report: once the catalog sees the machine online, a command to
    // it finds its queue.
    let mut commands = match executor {
        Some(_) => {
            let commands = conn.create_channel().await.map_err(Error::classify)?;
            declare_command_queue(&commands, config.machine_id).await?;
            commands
                .basic_qos(COMMAND_PREFETCH, BasicQosOptions::default())
                .await
                .map_err(Error::classify)?;
            let consumer = commands
                .basic_consume(
                    protocol::command_queue(config.machine_id.into())
                        .as_str()
                        .into(),
                    user.as_str().into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(Error::classify)?;
            Some(consumer)
        }
        None => None,
    };

    let inventory = &config.inventory;
    publish(
        &channel,
        config.machine_id,
        &user,
        Kind::Inventory,
        &InventoryReport {
            machine_id: config.machine_id,
            sent_at: now(),
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            simulated: inventory.simulated,
            gpus: inventory.gpus.clone(),
            cuda_version: inventory.cuda_version.clone(),
            driver_version: inventory.driver_version.clone(),
            capabilities: capabilities(inventory.simulated),
        },
    )
    .await?;
    let checks = inventory.self_test(sampler);
    publish(
        &channel,
        config.machine_id,
        &user,
        Kind::SelfTest,
        &SelfTestReport {
            machine_id: config.machine_id,
            sent_at: now(),
            passed: checks.iter().all(|c| c.passed),
            gpus: inventory.gpus.clone(),
            checks,
        },
    )
    .await?;

    let mut ticker = tokio::time::interval(config.heartbeat_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if let (Some(consumer), Some(executor)) = (commands.as_mut(), executor) {
            tokio::select! {
                _ = ticker.tick() => {}
                delivery = consumer.next() => {
                    let delivery = match delivery {
                        Some(delivery) => delivery.map_err(Error::classify)?,
                        None => return Err(Error::Config("command consumer ended".into())),
                    };
                    tokio::spawn(carry_out(
                        channel.clone(),
                        config.machine_id,
                        user.clone(),
                        executor.clone(),
                        delivery,
                        config.hold_after_step.clone(),
                    ));
                    continue;
                }
            }
        } else {
            ticker.tick().await;
        }
        let gpus = match sampler.sample(inventory) {
            Ok(gpus) => gpus,
            Err(error) => {
                // Still alive: a heartbeat without numbers beats none.
                tracing::warn!(%error, "sampling the GPUs failed");
                Vec::new()
            }
        };
        let (instances, exited) = match executor {
            Some(executor) => (
                executor.traffic(config.machine_id).await,
                executor.exited(config.machine_id).await,
            ),
            None => (Vec::new(), Vec::new()),
        };
        *seq += 1;
        publish(
            &channel,
            config.machine_id,
            &user,
            Kind::Heartbeat,
            &HeartbeatReport {
                machine_id: config.machine_id,
                sent_at: now(),
                seq: *seq,
                gpus,
                boot_id: Some(boot_id),
                instances,
                exited,
            },
        )
        .await?;
        tracing::debug!(machine.id = %config.machine_id, seq = *seq, "heartbeat");
    }
}

/// Declares the machine's command queue `cmd.<machine_id>` (durable, classic,
/// bounded, expiring: [`protocol::command_queue_arguments`]). Idempotent, and
/// every declaration pushes its expiry back. The agent's broker user may
/// configure and read this one queue only.
pub async fn declare_command_queue(channel: &Channel, machine_id: MachineId) -> Result<(), Error> {
    declare_command_queue_holding(channel, machine_id, protocol::COMMAND_QUEUE_MAX_LENGTH).await
}

/// [`declare_command_queue`] holding at most `max_length` commands: for
/// tests that fill a queue. The agent always declares
/// [`protocol::COMMAND_QUEUE_MAX_LENGTH`]; a queue declared with another
/// limit makes the agent's declaration fail until it expires or is deleted.
pub async fn declare_command_queue_holding(
    channel: &Channel,
    machine_id: MachineId,
    max_length: i64,
) -> Result<(), Error> {
    channel
        .queue_declare(
            protocol::command_queue(machine_id.into()).as_str().into(),
            QueueDeclareOptions {
                // Survives a broker restart (with its persistent commands).
                durable: true,
                // Outlives the connection: a command sent during a
                // reconnect waits for the agent (until `x-expires`).
                exclusive: false,
                auto_delete: false,
                ..QueueDeclareOptions::default()
            },
            protocol::command_queue_arguments(max_length),
        )
        .await
        .map_err(Error::classify)?;
    Ok(())
}

/// One command: carry it out, answer, then ack. A command that cannot be
/// decoded or names another machine is acked unanswered (it can never
/// succeed); when the answer cannot be published the command stays unacked
/// and comes back with the next connection.
async fn carry_out(
    channel: Channel,
    machine_id: MachineId,
    user: String,
    executor: Arc<dyn Executor>,
    delivery: lapin::message::Delivery,
    hold_after_step: Option<(String, std::path::PathBuf)>,
) {
    let ack = |delivery: lapin::message::Delivery| async move {
        if let Err(error) = delivery.acker.ack(BasicAckOptions::default()).await {
            tracing::warn!(%error, "ack of a command failed");
        }
    };
    let command: AgentCommand = match serde_json::from_slice(&delivery.data) {
        Ok(command) => command,
        Err(error) => {
            tracing::error!(%error, "undecodable command dropped");
            return ack(delivery).await;
        }
    };
    if command.machine_id != machine_id {
        tracing::error!(command.id = %command.command_id, "command for another machine dropped");
        return ack(delivery).await;
    }
    if command.deadline < Utc::now() {
        tracing::warn!(command.id = %command.command_id, step = %command.step, "command past its deadline dropped");
        return ack(delivery).await;
    }
    let started = std::time::Instant::now();
    let (sender, mut messages) = tokio::sync::mpsc::channel::<String>(4);
    let mut forward = {
        let channel = channel.clone();
        let user = user.clone();
        let (command_id, step) = (command.command_id, command.step.clone());
        tokio::spawn(async move {
            let mut last: Option<tokio::time::Instant> = None;
            while let Some(message) = messages.recv().await {
                if last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
                    continue;
                }
                last = Some(tokio::time::Instant::now());
                let progress = StepProgress {
                    command_id,
                    machine_id,
                    step: step.clone(),
                    message,
                    sent_at: now(),
                };
                if let Err(error) =
                    publish(&channel, machine_id, &user, Kind::StepProgress, &progress).await
                {
                    tracing::debug!(%error, "step progress not delivered");
                }
            }
        })
    };
    let outcome = executor
        .execute(
            &command,
            Progress {
                sender: Some(sender),
            },
        )
        .await;
    // The executor's future (and with it the sender) is gone now, so the
    // forwarder ends once what was reported is published: waiting for it
    // keeps a step's progress ahead of its result. An executor that kept a
    // clone of the sender holds the answer up for at most PROGRESS_FLUSH.
    if tokio::time::timeout(PROGRESS_FLUSH, &mut forward)
        .await
        .is_err()
    {
        forward.abort();
    }
    if let Some((step, dir)) = hold_after_step
        && step == command.step
    {
        tracing::warn!(step, "test hook: holding the answer of a finished step");
        if let Err(error) = std::fs::write(dir.join(format!("held-{step}")), b"") {
            tracing::warn!(%error, "test hook: marker not written");
        }
        return std::future::pending().await;
    }
    let (ok, error, detail) = match outcome {
        Ok(detail) => (true, None, detail),
        Err(error) => (false, Some(error), None),
    };
    let result = StepResult {
        command_id: command.command_id,
        machine_id,
        step: command.step.clone(),
        ok,
        error,
        duration_ms: started.elapsed().as_millis() as u64,
        sent_at: now(),
        detail,
    };
    match publish(&channel, machine_id, &user, Kind::StepResult, &result).await {
        Ok(()) => ack(delivery).await,
        Err(error) => {
            tracing::warn!(%error, command.id = %command.command_id, "step result not delivered; the command will come back");
        }
    }
}

/// Instants go out truncated to microseconds, what Postgres stores.
fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// Publishes one report with publisher confirms, mandatory: a report no
/// queue took (the catalog has not bound its queue yet) is an error, so the
/// session starts over and the inventory is not silently lost.
async fn publish<T: Serialize>(
    channel: &Channel,
    machine_id: MachineId,
    user: &str,
    kind: Kind,
    body: &T,
) -> Result<(), Error> {
    tokio::time::timeout(
        BROKER_TIMEOUT,
        publish_confirmed(channel, machine_id, user, kind, body),
    )
    .await
    .map_err(|_| Error::Timeout(BROKER_TIMEOUT))?
}

async fn publish_confirmed<T: Serialize>(
    channel: &Channel,
    machine_id: MachineId,
    user: &str,
    kind: Kind,
    body: &T,
) -> Result<(), Error> {
    let payload = serde_json::to_vec(body)?;
    let properties = BasicProperties::default()
        .with_content_type(ShortString::from("application/json"))
        .with_type(ShortString::from(kind.as_str()))
        .with_message_id(ShortString::from(Uuid::now_v7().to_string()))
        .with_user_id(ShortString::from(user))
        .with_app_id(ShortString::from("gpumarket-host-agent"))
        .with_timestamp(Utc::now().timestamp().max(0) as u64)
        .with_delivery_mode(2);
    let confirmation = channel
        .basic_publish(
            protocol::EXCHANGE.into(),
            protocol::routing_key(machine_id.into(), kind)
                .as_str()
                .into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            &payload,
            properties,
        )
        .await
        .map_err(Error::classify)?
        .await
        .map_err(Error::classify)?;
    if !confirmation.is_ack() {
        return Err(Error::NotConfirmed(kind.as_str()));
    }
    if confirmation.take_message().is_some() {
        return Err(Error::Unroutable(kind.as_str()));
    }
    Ok(())
}

/// `gpumarket agent ...`: reports the machine, and with `--engine-socket`
/// runs its rentals as containers and serves the renters' SSH gateway
/// (docs/real-hosts.md). Runs until the broker refuses the token.
pub async fn run_host(args: AgentArgs) -> Result<(), Error> {
    let engine = args.engine.config()?;
    let ssh_listen = args.ssh_listen;
    let mut config = args.into_config()?;
    let Some(engine) = engine else {
        tracing::info!(machine.id = %config.machine_id, "no --engine-socket: reporting only, taking no commands");
        return run(config).await;
    };
    let access = Arc::new(access::Access::open(engine.state_dir.join("keys"))?);
    if let Some((_, dir)) = config.hold_after_step.as_mut() {
        dir.clone_from(&engine.state_dir);
    }
    let mut ssh_config = ssh::SshConfig::new(
        std::net::SocketAddr::new(ssh_listen, engine.ssh_port),
        engine.state_dir.join("ssh_host_ed25519_key"),
    );
    ssh_config.engine_socket = Some(engine.socket.clone());
    let executor = engine::ContainerExecutor::connect(
        engine,
        config.machine_id,
        &config.inventory,
        access.clone(),
    )
    .await?;
    let gateway = ssh::Gateway::start(ssh_config, executor.docker().clone(), access).await?;
    tracing::info!(
        machine.id = %config.machine_id,
        ssh = %gateway.local_addr(),
        host_key = gateway.host_key_fingerprint(),
        "running rentals as containers"
    );
    let result = run_with_executor(config, Some(Arc::new(executor))).await;
    gateway.shutdown().await;
    result
}

/// `gpumarket agent ...`: run the host agent for one machine.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// The machine's id (from `registerMachine`).
    #[arg(long)]
    pub machine_id: MachineId,
    /// The machine's agent token (from `registerMachine`, shown once).
    #[arg(long, env = "GPUMARKET_AGENT_TOKEN", hide_env_values = true)]
    pub token: String,
    /// RabbitMQ `host:port`.
    #[arg(long, default_value = "127.0.0.1:5672")]
    pub amqp_host: String,
    /// RabbitMQ virtual host.
    #[arg(long, default_value = "/")]
    pub vhost: String,
    #[arg(long, default_value_t = 5)]
    pub heartbeat_seconds: u64,
    /// Simulate this many GPUs instead of reading NVML (always simulated when
    /// built without the `nvml` feature; then 1 GPU by default).
    #[arg(long)]
    pub simulate_gpus: Option<u32>,
    /// The simulated GPUs' model name.
    #[arg(long, default_value = "RTX 4090")]
    pub simulate_model: String,
    /// The simulated GPUs' memory, GiB each.
    #[arg(long, default_value_t = 24)]
    pub simulate_vram_gib: u32,
    /// CUDA version to report (`major.minor`); defaults to 12.4 when
    /// simulating, to what NVML reports otherwise.
    #[arg(long)]
    pub cuda_version: Option<String>,
    /// Driver version to report; defaults to 550.54.15 when simulating, to
    /// what NVML reports otherwise.
    #[arg(long)]
    pub driver_version: Option<String>,
    /// The container engine (rentals run only when `--engine-socket` is given).
    #[command(flatten)]
    pub engine: engine::EngineArgs,
    /// The address the SSH gateway listens on (its port is `--ssh-port`).
    #[arg(long, default_value = "0.0.0.0")]
    pub ssh_listen: std::net::IpAddr,
    /// Test hook (never in production): after this step, hold its answer
    /// and mark `held-<step>` in the state directory.
    #[arg(long, env = "GPUMARKET_AGENT_HOLD_AFTER_STEP", hide = true)]
    pub hold_after_step: Option<String>,
}

impl AgentArgs {
    pub fn into_config(self) -> Result<AgentConfig, Error> {
        if self.heartbeat_seconds == 0 {
            return Err(Error::Config(
                "--heartbeat-seconds must be at least 1".into(),
            ));
        }
        if self.token.trim().is_empty() {
            return Err(Error::Config(
                "--token (or GPUMARKET_AGENT_TOKEN) is empty".into(),
            ));
        }
        if let Some(cuda) = &self.cuda_version
            && protocol::cuda_version_code(cuda).is_none()
        {
            return Err(Error::Config(format!(
                "--cuda-version {cuda:?}: expected major.minor such as 12.4"
            )));
        }
        let simulate = self.simulate_gpus.is_some();
        let mut inventory = if simulate {
            Inventory::simulated(
                self.simulate_gpus.unwrap_or(1),
                &self.simulate_model,
                self.simulate_vram_gib,
                "12.4",
                "550.54.15",
            )
        } else {
            real_inventory()?
        };
        if let Some(cuda) = self.cuda_version {
            inventory.cuda_version = cuda;
        }
        if let Some(driver) = self.driver_version {
            inventory.driver_version = driver;
        }
        Ok(AgentConfig {
            amqp_url: format!("amqp://{}/{}", self.amqp_host, encode_vhost(&self.vhost)),
            machine_id: self.machine_id,
            token: self.token,
            heartbeat_interval: Duration::from_secs(self.heartbeat_seconds),
            inventory,
            hold_after_step: self
                .hold_after_step
                .map(|step| (step, std::path::PathBuf::new())),
        })
    }
}

/// The host's GPUs: NVML when built with it and the driver library loads,
/// else `nvidia-smi`; neither means this is no GPU host.
fn real_inventory() -> Result<Inventory, Error> {
    #[cfg(feature = "nvml")]
    match Inventory::from_nvml() {
        Ok(inventory) => return Ok(inventory),
        Err(error) => tracing::warn!(%error, "NVML unavailable; trying nvidia-smi"),
    }
    inventory::nvidia_smi::inventory().map_err(|error| {
        Error::Config(format!(
            "no GPUs found ({error}); on a machine without NVIDIA GPUs pass --simulate-gpus N"
        ))
    })
}

/// A vhost as one URL path segment (`/` → `%2F`).
fn encode_vhost(vhost: &str) -> String {
    vhost
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// What this build of the agent tells the catalog it can do: slices only
/// where it can make them (simulated GPUs, or NVML).
fn capabilities(simulated: bool) -> Vec<String> {
    let mut out = vec![contracts::agent::CAPABILITY_GPU_INDICES.to_owned()];
    if simulated || cfg!(feature = "nvml") {
        out.push(contracts::agent::CAPABILITY_MIG.to_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        agent: AgentArgs,
    }

    #[test]
    fn arguments_become_a_config_with_the_agents_own_credentials() {
        let id = Uuid::now_v7();
        let cli = Cli::try_parse_from([
            "agent",
            "--machine-id",
            &id.to_string(),
            "--token",
            "gpa_secret",
            "--simulate-gpus",
            "2",
            "--simulate-vram-gib",
            "80",
            "--cuda-version",
            "12.2",
        ])
        .unwrap();
        let config = cli.agent.into_config().unwrap();
        assert_eq!(config.amqp_url, "amqp://127.0.0.1:5672/%2F");
        assert_eq!(config.heartbeat_interval, Duration::from_secs(5));
        assert_eq!(config.inventory.gpus.len(), 2);
        assert_eq!(config.inventory.cuda_version, "12.2");
        let uri = config.uri().unwrap();
        assert_eq!(uri.authority.host, "127.0.0.1");
        assert_eq!(uri.authority.port, 5672);
        assert_eq!(uri.vhost, "/");
        // The user of this token's generation.
        assert_eq!(
            uri.authority.userinfo.username,
            protocol::username(id, "gpa_secret")
        );
        assert!(
            uri.authority
                .userinfo
                .username
                .starts_with(&format!("agent-{id}."))
        );
        assert_eq!(uri.authority.userinfo.password, "gpa_secret");
    }

    #[test]
    fn hosts_are_read_as_written() {
        assert_eq!(
            host_of("amqp://u:p@10.0.0.1:5672/x").as_deref(),
            Some("10.0.0.1")
        );
        assert_eq!(host_of("amqp://rabbit/%2F").as_deref(), Some("rabbit"));
        assert_eq!(host_of("amqp://[::1]:5672/").as_deref(), Some("::1"));
    }
}
