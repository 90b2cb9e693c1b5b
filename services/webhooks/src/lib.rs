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

/// Declares the service's queue on the events exchange and its bindings
/// (one per event kind it translates).
async fn declare(config: &Config, settings: &Settings) -> Result<(), Error> {
    let conn = platform::broker::connect(&config.amqp_url).await;
    let channel = conn
        .create_channel()
        .await
        .map_err(platform::PlatformError::from)?;
    platform::broker::declare_topology(&channel, config).await?;
    platform::broker::declare_quorum(
        &channel,
        &settings.queue,
        Some(&config.dead_letter_exchange),
        config.delivery_limit,
    )
    .await?;
    for key in catalog::BINDINGS {
        platform::broker::bind(&channel, &settings.queue, &config.events_exchange, key).await?;
    }
    let _ = conn.close(0, "declared".into()).await;
    Ok(())
}

/// Consumes the events the service translates, forever: each broker
/// message is recorded in the inbox together with the messages and
/// deliveries it made, so a redelivery makes nothing twice.
pub async fn run_consumer(
    config: Arc<Config>,
    settings: Arc<Settings>,
    db: Db,
) -> Result<(), Error> {
    declare(&config, &settings).await?;
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

/// This service, as the registry (`src/services.rs`) runs it: with its
/// settings from the environment ([`SERVICE`]) or given ([`WebhooksService::with`],
/// a test's retry schedule and local receivers).
pub struct WebhooksService {
    settings: Option<Settings>,
}

pub static SERVICE: WebhooksService = WebhooksService { settings: None };

impl WebhooksService {
    pub fn with(settings: Settings) -> Self {
        Self {
            settings: Some(settings),
        }
    }

    fn settings(&self, config: &Config) -> Result<Arc<Settings>, Error> {
        match &self.settings {
            Some(s) => Ok(Arc::new(s.clone())),
            None => Ok(Arc::new(Settings::from_env(config.production)?)),
        }
    }
}

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

    fn server(
        &self,
        config: Arc<Config>,
    ) -> Result<(actix_web::dev::Server, u16), platform::service::StartError> {
        let settings = self.settings(&config)?;
        let db = platform::service::pool(&config, SCHEMA)?;
        Ok(build(config, settings, db)?)
    }

    fn tasks(
        &self,
        config: Arc<Config>,
    ) -> Result<Vec<platform::service::Task>, platform::service::StartError> {
        use platform::service::{Task, TaskKind, pool};
        let settings = self.settings(&config)?;
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
