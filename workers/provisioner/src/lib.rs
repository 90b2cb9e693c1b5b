//! The provisioning worker: turns an allocated instance into a user-ready
//! environment by running the steps of the service model through a
//! [`Driver`], and takes it off its machine again. Deliveries on
//! `provisioner.jobs` only record jobs; the database holds each job's
//! progress under a lease that the worker renews while a step runs, so
//! several worker processes share the work, a killed worker's job is taken
//! over, and a step may last longer than the broker's consumer timeout
//! (docs/provisioning.md).

pub mod agent;
pub mod driver;
pub mod error;
mod jobs;
pub mod settings;
pub mod simulated;

use std::sync::Arc;
use std::time::Duration;

use platform::internal::InternalClient;
use platform::{Config, Db};
use uuid::Uuid;

pub use agent::AgentDriver;
pub use driver::{Driver, Step};
pub use error::Error;
pub use settings::ProvisionerSettings;
pub use simulated::SimulatedDriver;

pub const SCHEMA: &str = "provisioner";

/// The driver `GPUMARKET_PROVISIONER_DRIVER` names.
pub fn driver_from_config(config: &Config, db: Db) -> Result<Arc<dyn Driver>, Error> {
    let settings = config.settings::<ProvisionerSettings>()?;
    match settings.driver.as_str() {
        "simulated" => Ok(Arc::new(SimulatedDriver::from_config(db, config)?)),
        "agent" => Ok(Arc::new(AgentDriver::new(db, config)?)),
        other => Err(Error::Config(format!(
            "GPUMARKET_PROVISIONER_DRIVER: {other:?} is not simulated or agent"
        ))),
    }
}

/// Runs the worker until the process ends: the command consumer, the job
/// runner (with its deadline reconciler), the agents' results consumer and
/// the outbox relay of step events and dead letters.
pub async fn run(config: Arc<Config>, db: Db) -> Result<(), Error> {
    let settings = config.settings::<ProvisionerSettings>()?;
    let driver = driver_from_config(&config, db.clone())?;
    let worker = jobs::Worker {
        db: db.clone(),
        driver,
        ordering: InternalClient::new(config.url("ordering"), config.service_token.clone()),
        settings: Arc::new(jobs::Settings {
            step_attempts: settings.step_attempts,
            lease: settings.job_lease,
            poll: settings.job_poll,
            listen: config
                .listen_notifications
                .then(|| platform::notify::Listener {
                    url: config.database_url_for(SCHEMA),
                    channel: jobs::JOBS_CHANNEL.to_owned(),
                    check: Duration::from_millis(config.notification_check_ms),
                }),
            deadline: chrono::Duration::seconds(settings.job_deadline_seconds),
            concurrency: settings.concurrency,
            events_exchange: config.events_exchange.clone(),
            dead_letter_exchange: config.dead_letter_exchange.clone(),
        }),
        id: format!("worker-{}-{}", std::process::id(), Uuid::now_v7().simple()).into(),
        wake: Arc::new(tokio::sync::Notify::new()),
    };
    tracing::info!(worker.id = %worker.id, driver = %settings.driver, "provisioner starting");
    let runner = worker.clone().run_jobs();
    let queue = settings.queue.clone();
    let consumer = platform::consumer::run(config.clone(), queue, move |envelope| {
        let worker = worker.clone();
        async move { worker.accept(envelope).await }
    });
    let relay = platform::outbox::run_relay(db.clone(), config.clone(), SCHEMA);
    let results =
        agent::run_results_consumer(config.clone(), db, settings.agent_results_queue.clone());
    // All four run forever; ending this future (a stack shutdown) ends them all.
    tokio::join!(runner, consumer, relay, results);
    Ok(())
}

/// The message kinds the worker publishes through its outbox (its
/// commands to host agents go to their own queues, not an exchange).
pub const PUBLISHES: &[&str] = &[contracts::events::PROVISIONING_STEP];

/// The worker's queues: the provisioning commands, and the host agents'
/// step results and progress. The registry adds them to every process's
/// topology, so a command sent before a worker started is kept.
pub fn queues(config: &Config) -> Result<Vec<platform::broker::QueueSpec>, Error> {
    use platform::broker::QueueSpec;
    let settings = config.settings::<ProvisionerSettings>()?;
    Ok(vec![
        QueueSpec::new(&settings.queue).bind(&config.commands_exchange, "provisioner.jobs.#"),
        // Host agents' answers to the `agent` driver's commands, and how far
        // their long steps got (image pulls).
        QueueSpec::new(&settings.agent_results_queue).bind_all(
            &config.agents_exchange,
            &["agent.*.step_result", "agent.*.step_progress"],
        ),
    ])
}
