//! Metering owns usage: one interval per instance, meter and run, opened by
//! the `running` event (T0) and closed by the `stopped` event (T1). Billed
//! seconds are `floor(T1 − T0)` computed from the two recorded instants,
//! never by counting ticks. The two events may arrive in either order, twice,
//! or late: the interval comes out the same and is announced once.
//!
//! A running interval is also *settled* every settlement interval: the whole
//! seconds since its start are announced to billing in segments, so a
//! renter's balance follows the burn; at the close the rest (or a correction)
//! is announced, and the segments add up to `floor(T1 − T0)` exactly.
//!
//! Storage (GB-seconds from creation to destroy) and bandwidth (bytes from
//! the host agent's counters) are metered beside GPU time: see [`meters`]
//! and docs/metering.md.

pub mod error;
mod intervals;
mod lifecycle;
pub mod meters;
mod metrics;
mod routes;
pub mod settings;

use std::sync::Arc;

use platform::{Config, Db};
use tracing::Instrument;

pub use error::Error;
pub use intervals::settle_open;
pub use lifecycle::apply_event;
pub use settings::MeteringSettings;

pub const SCHEMA: &str = "metering";

/// Starts the metering service's HTTP API and its settlement task; returns
/// the server and its port.
pub fn build(config: Arc<Config>, db: Db) -> Result<(actix_web::dev::Server, u16), Error> {
    metrics::init();
    let settings = config.settings::<MeteringSettings>()?;
    tokio::spawn(settle_forever(config.clone(), settings, db.clone()));
    Ok(platform::http::serve_named(
        "metering",
        &config.bind_host,
        config.ports.get("metering"),
        db,
        config.service_token.clone(),
        routes::configure,
    )?)
}

/// Consumes lifecycle events forever (idempotently, through the inbox).
pub async fn run_consumer(config: Arc<Config>, db: Db) -> Result<(), Error> {
    let events = config.events_exchange.clone();
    let queue = config.settings::<MeteringSettings>()?.queue.clone();
    platform::consumer::run_inbox(config, db, queue, SCHEMA, move |conn, envelope| {
        apply_event(conn, envelope, &events)
    })
    .await;
    Ok(())
}

/// The four instance events metering acts on. A wildcard
/// (`ordering.instance.*`) also matched `ordering.instance.event`, the
/// renters' history feed (two per provisioning step), which metering took
/// through its inbox only to ignore.
const INSTANCE_EVENTS: [&str; 4] = [
    contracts::events::INSTANCE_RUNNING,
    contracts::events::INSTANCE_STOPPED,
    contracts::events::INSTANCE_STORAGE_STARTED,
    contracts::events::INSTANCE_STORAGE_ENDED,
];

/// Settles running intervals every `settlement_interval_ms`.
async fn settle_forever(config: Arc<Config>, settings: Arc<MeteringSettings>, db: Db) {
    let tick = settings.settlement_interval;
    loop {
        tokio::time::sleep(tick).await;
        let now = contracts::time::now();
        let settled = intervals::settle_open(&db, now, &config.events_exchange)
            .instrument(tracing::info_span!("settlement"))
            .await;
        match settled {
            Ok(0) => {}
            Ok(n) => tracing::debug!(intervals = n, "running intervals settled"),
            Err(error) => tracing::warn!(%error, "settlement failed; next tick retries"),
        }
        // A minute back covers samples a racing start could not settle.
        let since = now - chrono::Duration::seconds(60);
        if let Err(error) = meters::settle_recent_traffic(&db, since, &config.events_exchange).await
        {
            tracing::warn!(%error, "bandwidth settlement failed; next tick retries");
        }
    }
}

// ---------------------------------------------------------------- service

/// This service, as the registry (`src/services.rs`) runs it.
pub struct MeteringService;
pub static SERVICE: MeteringService = MeteringService;

impl platform::service::Service for MeteringService {
    fn name(&self) -> &'static str {
        "metering"
    }

    fn secrets(&self) -> &'static [platform::config::Secret] {
        use platform::config::Secret;
        &[Secret::ServiceToken, Secret::RabbitmqManagement]
    }

    fn default_port(&self) -> u16 {
        8084
    }

    fn publishes(&self) -> &'static [&'static str] {
        &[contracts::events::USAGE_RECORDED]
    }

    fn queues(
        &self,
        config: &Config,
    ) -> Result<Vec<platform::broker::QueueSpec>, platform::service::StartError> {
        let settings = config.settings::<MeteringSettings>()?;
        Ok(vec![
            platform::broker::QueueSpec::new(&settings.queue)
                // Instances' network counters, vouched for by the catalog.
                .bind(&config.events_exchange, contracts::events::INSTANCE_TRAFFIC)
                .bind_all(&config.events_exchange, &INSTANCE_EVENTS)
                .unbind(&config.events_exchange, "ordering.instance.*"),
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
                "metering outbox relay",
                TaskKind::Messaging,
                platform::outbox::run_relay(pool(&config, SCHEMA)?, config.clone(), SCHEMA),
            ),
            Task::fallible(
                "metering consumer",
                TaskKind::Messaging,
                run_consumer(config.clone(), pool(&config, SCHEMA)?),
            ),
        ])
    }
}
