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
pub mod meters;
mod metrics;
mod routes;

use std::sync::Arc;

use platform::{Config, Db};
use tracing::Instrument;

pub use error::Error;
pub use intervals::{apply_event, settle_open};

pub const SCHEMA: &str = "metering";

/// Starts the metering service's HTTP API and its settlement task; returns
/// the server and its port.
pub fn build(config: Arc<Config>, db: Db) -> Result<(actix_web::dev::Server, u16), Error> {
    metrics::init();
    tokio::spawn(settle_forever(config.clone(), db.clone()));
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
pub async fn run_consumer(config: Arc<Config>, db: Db) {
    let events = config.events_exchange.clone();
    let queue = config.metering_queue.clone();
    platform::consumer::run_inbox(config, db, queue, SCHEMA, move |conn, envelope| {
        apply_event(conn, envelope, &events)
    })
    .await
}

/// Settles running intervals every `settlement_interval_ms`.
async fn settle_forever(config: Arc<Config>, db: Db) {
    let tick = std::time::Duration::from_millis(config.settlement_interval_ms.max(100));
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
            Task::new(
                "metering consumer",
                TaskKind::Messaging,
                run_consumer(config.clone(), pool(&config, SCHEMA)?),
            ),
        ])
    }
}
