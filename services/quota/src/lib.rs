//! Quota owns who is who and how much they may hold: tenants (organisations),
//! their users and password hashes, API keys, teams, and the quota of each
//! tenant and team with the holds that count against it (docs/quotas.md).

mod api_keys;
pub mod error;
mod holdings;
pub mod limits;
pub mod month;
mod passwords;
mod pressure;
mod reservations;
mod routes;
pub mod settings;
mod teams;
mod tenants;

use std::sync::Arc;

use platform::{Config, Db};

pub use api_keys::create_api_key;
pub use error::Error;
pub use reservations::{release, reserve, set_quota};
pub use settings::QuotaSettings;
pub use tenants::{create_operator, sign_up};

pub const SCHEMA: &str = "quota";

/// What every route of the quota service reads (actix app data). It lives
/// here, not in `routes`, so that the route modules (`routes`, `pressure`)
/// need no import of one another.
pub struct State {
    pub default_max_gpus: i32,
    /// The settlement currency: budgets and spend are in it.
    pub currency: String,
}

/// Starts the quota service's HTTP API; returns the server and its port.
pub fn build(config: Arc<Config>, db: Db) -> Result<(actix_web::dev::Server, u16), Error> {
    let state = actix_web::web::Data::new(State {
        default_max_gpus: config.settings::<QuotaSettings>()?.default_max_gpus,
        currency: config.currency.clone(),
    });
    Ok(platform::http::serve_named(
        "quota",
        &config.bind_host,
        config.ports.get("quota"),
        db,
        config.service_token.clone(),
        move |cfg| {
            cfg.app_data(state.clone());
            routes::configure(cfg);
        },
    )?)
}

// ---------------------------------------------------------------- service

/// This service, as the registry (`src/services.rs`) runs it.
pub struct QuotaService;
pub static SERVICE: QuotaService = QuotaService;

impl platform::service::Service for QuotaService {
    fn name(&self) -> &'static str {
        "quota"
    }

    fn secrets(&self) -> &'static [platform::config::Secret] {
        use platform::config::Secret;
        &[Secret::ServiceToken]
    }

    fn default_port(&self) -> u16 {
        8083
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
        let _ = config;
        Ok(Vec::new())
    }
}
