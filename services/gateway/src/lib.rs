//! The gateway is gpumarket's public API: GraphQL at `/graphql` over the
//! internal services. It owns no data; it authenticates callers (JWTs it
//! issues, API keys checked by quota), enforces scopes and tenant roles,
//! validates input cheaply, and maps every failure to a public error code.

mod auth;
mod caller;
mod clients;
mod error;
mod graphql;
mod http;
mod hub;
mod introspection;
mod over_http;
mod rate_limit;
pub mod settings;
mod validate;
mod web;
mod webhooks;
mod ws;

use std::sync::Arc;

pub use error::GatewayError;
pub use settings::GatewaySettings;

/// Binds `config.bind_host:config.ports.get("gateway")` (0 picks a free port) and
/// returns the running server, not yet awaited, with the port it bound.
pub fn build(config: Arc<platform::Config>) -> Result<(actix_web::dev::Server, u16), GatewayError> {
    http::serve(config)
}

/// The schema in SDL, as checked in at `api-specs/graphql/schema.graphql`.
pub fn sdl() -> String {
    graphql::builder().finish().sdl()
}

// ---------------------------------------------------------------- service

/// The gateway, as the registry (`src/services.rs`) runs it: last, since it
/// calls every other service.
pub struct GatewayService;
pub static SERVICE: GatewayService = GatewayService;

impl platform::service::Service for GatewayService {
    fn name(&self) -> &'static str {
        "gateway"
    }

    fn secrets(&self) -> &'static [platform::config::Secret] {
        use platform::config::Secret;
        // And its own JWT keys ([`GatewaySettings::development_secrets`]).
        &[Secret::ServiceToken]
    }

    fn development_secrets(
        &self,
        config: &platform::Config,
    ) -> Result<Vec<&'static str>, platform::service::StartError> {
        let mut found = config.development_secrets(self.secrets());
        if config.production {
            found.extend(config.settings::<GatewaySettings>()?.development_secrets());
        }
        Ok(found)
    }

    fn default_port(&self) -> u16 {
        8080
    }

    fn server(
        &self,
        config: Arc<platform::Config>,
    ) -> Result<(actix_web::dev::Server, u16), platform::service::StartError> {
        Ok(build(config)?)
    }

    fn tasks(
        &self,
        _config: Arc<platform::Config>,
    ) -> Result<Vec<platform::service::Task>, platform::service::StartError> {
        Ok(Vec::new())
    }
}
