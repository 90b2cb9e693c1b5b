//! Webhooks owns renters' and hosts' outbound webhooks: their endpoints and
//! signing secrets, the messages their events became, and every delivery
//! and attempt (schema `webhooks`). It consumes the events exchange, turns
//! each event a tenant can see into a Standard Webhooks message for that
//! tenant's subscribed endpoints, and sends it at least once, signed, with
//! retries for about three days (docs/webhooks.md).

pub mod catalog;
pub mod deliveries;
pub mod egress;
pub mod endpoints;
pub mod error;
mod metrics;
mod routes;
pub mod sender;
pub mod settings;
pub mod signature;

use std::sync::Arc;

use contracts::Envelope;
use diesel::pg::PgConnection;
use platform::consumer::HandlerError;
use platform::{Config, Db};

pub use error::Error;
pub use settings::Settings;

pub const SCHEMA: &str = "webhooks";

/// Starts the service's internal HTTP API; returns the server and its port.
pub fn build(
    config: Arc<Config>,
    settings: Arc<Settings>,
    db: Db,
) -> Result<(actix_web::dev::Server, u16), Error> {
    metrics::init();
    let settings = actix_web::web::Data::from(settings);
    Ok(platform::http::serve_named(
        "webhooks",
        &config.bind_host,
        config.ports.get("webhooks"),
        db,
        config.service_token.clone(),
        move |cfg| {
            cfg.app_data(settings.clone());
            routes::configure(cfg);
        },
    )?)
}

/// Consumes the events the service translates, forever: each broker
/// message is recorded in the inbox together with the messages and
/// deliveries it made, so a redelivery makes nothing twice.
pub async fn run_consumer(
    config: Arc<Config>,
    settings: Arc<Settings>,
    db: Db,
) -> Result<(), Error> {
    platform::consumer::run_inbox(config, db, settings.queue.clone(), SCHEMA, apply).await;
    Ok(())
}

fn apply(conn: &mut PgConnection, envelope: &Envelope) -> Result<(), HandlerError> {
    let Some(event) = catalog::translate(envelope)? else {
        return Ok(());
    };
    let made = deliveries::fan_out(
        conn,
        event.tenant_id,
        event.event_type,
        envelope.occurred_at,
        &event.data,
        Some(envelope.id),
        None,
    )
    .map_err(|e| HandlerError::Transient(e.to_string()))?;
    tracing::debug!(event.kind = %event.event_type, deliveries = made, "event fanned out");
    Ok(())
}

/// Runs the sender (see [`sender`]).
pub async fn run_sender(config: Arc<Config>, settings: Arc<Settings>, db: Db) -> Result<(), Error> {
    sender::run(config, settings, db).await
}

// ---------------------------------------------------------------- service

/// This service, as the registry (`src/services.rs`) runs it, with its
/// [`Settings`] from the configuration (set by a test) or the environment.
pub struct WebhooksService;
pub static SERVICE: WebhooksService = WebhooksService;

impl platform::service::Service for WebhooksService {
    fn name(&self) -> &'static str {
        SCHEMA
    }

    fn secrets(&self) -> &'static [platform::config::Secret] {
        use platform::config::Secret;
        // Its consumer reads queue depths through the management API.
        &[Secret::ServiceToken, Secret::RabbitmqManagement]
    }

    fn default_port(&self) -> u16 {
        8087
    }

    fn queues(
        &self,
        config: &Config,
    ) -> Result<Vec<platform::broker::QueueSpec>, platform::service::StartError> {
        let settings = config.settings::<Settings>()?;
        // One binding per event kind it translates.
        Ok(vec![
            platform::broker::QueueSpec::new(&settings.queue)
                .bind_all(&config.events_exchange, &catalog::BINDINGS),
        ])
    }

    fn server(
        &self,
        config: Arc<Config>,
    ) -> Result<(actix_web::dev::Server, u16), platform::service::StartError> {
        let settings = config.settings::<Settings>()?;
        let db = platform::service::pool(&config, SCHEMA)?;
        Ok(build(config, settings, db)?)
    }

    fn tasks(
        &self,
        config: Arc<Config>,
    ) -> Result<Vec<platform::service::Task>, platform::service::StartError> {
        use platform::service::{Task, TaskKind, pool};
        let settings = config.settings::<Settings>()?;
        Ok(vec![
            Task::fallible(
                "webhooks consumer",
                TaskKind::Messaging,
                run_consumer(config.clone(), settings.clone(), pool(&config, SCHEMA)?),
            ),
            Task::fallible(
                "webhooks sender",
                TaskKind::Messaging,
                run_sender(config.clone(), settings, pool(&config, SCHEMA)?),
            ),
        ])
    }
}
