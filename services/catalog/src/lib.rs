//! Catalog owns the supply side of the market: hosts' machines with their
//! specs and prices, the offers renters search, and GPU allocations. It is the
//! only writer of capacity: an allocation is a conditional update of the
//! machine's allocated-GPU counter, so two orders can never get one GPU.

pub mod agents;
pub mod allocations;
mod announcements;
mod availability;
mod block_allocations;
mod block_continuations;
pub mod blocks;
mod booked_periods;
pub mod booking_rows;
pub mod bookings;
pub mod calendar;
pub mod error;
mod gpu_choice;
mod gpu_models;
mod gpu_state;
pub mod heartbeats;
mod hosts;
mod liveness;
mod machines;
pub mod market;
pub mod mig;
pub mod offers;
pub mod preemption;
pub mod reliability;
pub mod reserved_terms;
mod routes;
pub mod settings;
mod supply;

use std::sync::Arc;

use platform::{Config, Db};

pub use error::Error;
pub use market::Market;
pub use settings::CatalogSettings;

pub const SCHEMA: &str = "catalog";

/// Starts the catalog's HTTP API; returns the server and its port.
pub fn build(config: Arc<Config>, db: Db) -> Result<(actix_web::dev::Server, u16), Error> {
    let settings = config.settings::<CatalogSettings>()?;
    let market = actix_web::web::Data::new(Market {
        currency: config.currency.clone(),
        heartbeat_grace_seconds: settings.heartbeat_grace_seconds,
    });
    let agents = actix_web::web::Data::new(agents::AgentAccess::from_config(&config)?);
    migrate_agent_access(agents.get_ref().clone());
    let events = actix_web::web::Data::new(allocations::Events(config.events_exchange.clone()));
    Ok(platform::http::serve_named(
        "catalog",
        &config.bind_host,
        config.ports.get("catalog"),
        db,
        config.service_token.clone(),
        move |cfg| {
            cfg.app_data(market.clone())
                .app_data(agents.clone())
                .app_data(events.clone());
            routes::configure(cfg);
        },
    )?)
}

/// Gives agent users granted before agents declared their own command
/// queues the permissions they now need, and deletes the legacy per-machine
/// queues ([`agents::AgentAccess::migrate`]). In the background, so a slow or
/// absent management API never holds up the start; retried a few times,
/// then left to the next start.
fn migrate_agent_access(access: agents::AgentAccess) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut delay = std::time::Duration::from_secs(1);
        for attempt in 1..=8 {
            match access.migrate().await {
                Ok(_) => return,
                Err(error) => {
                    tracing::warn!(%error, attempt, "migrating agent broker access failed");
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(std::time::Duration::from_secs(60));
        }
    });
}

// ---------------------------------------------------------------- service

/// This service, as the registry (`src/services.rs`) runs it.
pub struct CatalogService;
pub static SERVICE: CatalogService = CatalogService;

impl platform::service::Service for CatalogService {
    fn name(&self) -> &'static str {
        "catalog"
    }

    fn secrets(&self) -> &'static [platform::config::Secret] {
        use platform::config::Secret;
        &[Secret::ServiceToken, Secret::RabbitmqManagement]
    }

    fn default_port(&self) -> u16 {
        8081
    }

    fn publishes(&self) -> &'static [&'static str] {
        use contracts::events::*;
        &[
            ALLOCATION_CONTINUED,
            ALLOCATION_ENDING_SOON,
            ALLOCATION_PREEMPTED,
            BOOKINGS_CANCELLED,
            HOST_VERIFICATION,
            INSTANCE_DISK_USAGE,
            INSTANCE_EXITED,
            INSTANCE_TRAFFIC,
            MACHINE_OFFLINE,
            MACHINE_ONLINE,
            MACHINE_RELEASED,
            MACHINE_RENTED,
        ]
    }

    fn queues(
        &self,
        config: &Config,
    ) -> Result<Vec<platform::broker::QueueSpec>, platform::service::StartError> {
        let settings = config.settings::<CatalogSettings>()?;
        // Inventory, heartbeats and self-tests of every host agent (named
        // kinds only: step results are the provisioners').
        Ok(vec![
            platform::broker::QueueSpec::new(&settings.agents_queue).bind_all(
                &config.agents_exchange,
                &[
                    "agent.*.inventory",
                    "agent.*.heartbeat",
                    "agent.*.self_test",
                ],
            ),
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
            Task::fallible(
                "catalog heartbeats consumer",
                TaskKind::Messaging,
                heartbeats::run_consumer(config.clone(), pool(&config, SCHEMA)?),
            ),
            Task::fallible(
                "catalog offline sweeper",
                TaskKind::Messaging,
                reliability::run_offline_sweeper(config.clone(), pool(&config, SCHEMA)?),
            ),
            Task::fallible(
                "catalog block sweeper",
                TaskKind::Messaging,
                blocks::run_block_sweeper(config.clone(), pool(&config, SCHEMA)?),
            ),
            // Preemptions and the machines' events leave through its outbox.
            Task::new(
                "catalog outbox relay",
                TaskKind::Messaging,
                platform::outbox::run_relay(pool(&config, SCHEMA)?, config.clone(), SCHEMA),
            ),
        ])
    }
}
