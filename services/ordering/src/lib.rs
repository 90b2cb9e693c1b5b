//! Ordering owns orders and instances: the order saga that turns an offer
//! into a provisioned instance (quota reserve → funds check → GPU
//! allocation → provisioning command), and the instance state machine whose
//! every transition is a compare-and-set that writes its outgoing message in
//! the same transaction. Stopped instances start again on their machine;
//! destroyed ones are deprovisioned and validated clean before their
//! capacity returns (see `lifecycle`).

pub mod error;
pub mod events;
mod exits;
mod expiry;
mod funds;
mod holdings;
mod instances;
mod lifecycle;
mod preempted;
pub mod preemption;
mod publishing;
mod reconciler;
mod replacement;
mod reservations;
mod routes;
pub mod rules;
mod saga;
pub mod settings;
mod store;
mod transitions;

use std::sync::Arc;

use platform::internal::InternalClient;
use platform::{Config, Db};

pub use error::Error;
pub use settings::OrderingSettings;

pub const SCHEMA: &str = "ordering";

/// What the handlers need besides the database.
#[derive(Clone)]
pub struct Deps {
    pub config: Arc<Config>,
    pub settings: Arc<OrderingSettings>,
    pub catalog: InternalClient,
    pub quota: InternalClient,
    pub billing: InternalClient,
}

impl Deps {
    pub fn new(config: Arc<Config>) -> Result<Self, platform::PlatformError> {
        let client = |base: &str| InternalClient::new(base, config.service_token.clone());
        Ok(Self {
            catalog: client(&config.url("catalog")),
            quota: client(&config.url("quota")),
            billing: client(&config.url("billing")),
            settings: config.settings::<OrderingSettings>()?,
            config,
        })
    }
}

/// Starts the ordering service's HTTP API; returns the server and its port.
pub fn build(config: Arc<Config>, db: Db) -> Result<(actix_web::dev::Server, u16), Error> {
    let deps = actix_web::web::Data::new(Deps::new(config.clone())?);
    events::configure(&config);
    // Background work of this service: the lifecycle rules, the deadline of
    // orders whose request died mid-saga, the reconciler and the record of
    // provisioning steps. All are safe with several replicas.
    rules::spawn(deps.get_ref().clone(), db.clone());
    expiry::spawn(deps.get_ref().clone(), db.clone());
    reservations::spawn(deps.get_ref().clone(), db.clone());
    reconciler::spawn(deps.get_ref().clone(), db.clone());
    tokio::spawn(events::run_step_consumer(config.clone(), db.clone()));
    Ok(platform::http::serve_named(
        "ordering",
        &config.bind_host,
        config.ports.get("ordering"),
        db,
        config.service_token.clone(),
        move |cfg| {
            cfg.app_data(deps.clone());
            routes::configure(cfg);
        },
    )?)
}

// ---------------------------------------------------------------- service

/// This service, as the registry (`src/services.rs`) runs it.
pub struct OrderingService;
pub static SERVICE: OrderingService = OrderingService;

impl platform::service::Service for OrderingService {
    fn name(&self) -> &'static str {
        "ordering"
    }

    fn secrets(&self) -> &'static [platform::config::Secret] {
        use platform::config::Secret;
        &[Secret::ServiceToken, Secret::RabbitmqManagement]
    }

    fn default_port(&self) -> u16 {
        8082
    }

    fn publishes(&self) -> &'static [&'static str] {
        use contracts::events::*;
        &[
            INSTANCE_DOWNTIME,
            INSTANCE_EVENT,
            INSTANCE_FAILED,
            INSTANCE_RUNNING,
            INSTANCE_STOPPED,
            INSTANCE_STORAGE_ENDED,
            INSTANCE_STORAGE_STARTED,
            // Commands to the provisioning workers.
            PROVISION_INSTANCE,
            STOP_INSTANCE,
            DEPROVISION_INSTANCE,
        ]
    }

    fn queues(
        &self,
        config: &Config,
    ) -> Result<Vec<platform::broker::QueueSpec>, platform::service::StartError> {
        use contracts::events::{INSTANCE_DISK_USAGE, INSTANCE_EXITED, PROVISIONING_STEP};
        use platform::broker::QueueSpec;
        let settings = config.settings::<OrderingSettings>()?;
        let events = &config.events_exchange;
        Ok(vec![
            QueueSpec::new(&settings.queue)
                // Preemptions decided by the catalog, and renters out of money.
                .bind(events, "catalog.allocation.*")
                // Blocks cancelled because their machine left the market.
                .bind(events, contracts::events::BOOKINGS_CANCELLED)
                .bind(events, "billing.balance.*")
                // Rentals' containers that stopped on their own, and how much
                // of its disk each rental uses, vouched for by the catalog.
                .bind(events, INSTANCE_EXITED)
                .bind(events, INSTANCE_DISK_USAGE),
            // The workers' provisioning steps, recorded as instance history.
            QueueSpec::new(events::STEPS_QUEUE).bind(events, PROVISIONING_STEP),
        ])
    }

    fn server(
        &self,
        config: Arc<Config>,
    ) -> Result<(actix_web::dev::Server, u16), platform::service::StartError> {
        let db = platform::service::pool(&config, SCHEMA)?;
        Ok(build(config, db)?)
    }

    fn tasks(
        &self,
        config: Arc<Config>,
    ) -> Result<Vec<platform::service::Task>, platform::service::StartError> {
        #[allow(unused_imports)]
        use platform::service::{Task, TaskKind, pool};
        Ok(vec![
            Task::new(
                "ordering outbox relay",
                TaskKind::Messaging,
                platform::outbox::run_relay(pool(&config, SCHEMA)?, config.clone(), SCHEMA),
            ),
            // The catalog's preemptions, applied to the instances they hit.
            Task::fallible(
                "ordering preemption consumer",
                TaskKind::Messaging,
                preemption::run_consumer(config.clone(), pool(&config, SCHEMA)?),
            ),
        ])
    }
}
