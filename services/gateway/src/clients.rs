//! The services behind the gateway, one internal HTTP client each.

use async_graphql::Context;
use platform::Config;
use platform::internal::InternalClient;

use crate::error::GatewayError;

#[derive(Clone)]
pub struct Clients {
    pub quota: InternalClient,
    pub catalog: InternalClient,
    pub ordering: InternalClient,
    pub metering: InternalClient,
    pub billing: InternalClient,
    /// Below this runway a renter's balance is reported low (the one
    /// setting a resolver needs, carried with the clients it goes with).
    pub runway_warning_seconds: i64,
}

impl Clients {
    pub fn new(config: &Config) -> Self {
        let client =
            |base: &str| InternalClient::new(base.trim_end_matches('/'), &config.service_token);
        Self {
            quota: client(&config.urls.quota),
            catalog: client(&config.urls.catalog),
            ordering: client(&config.urls.ordering),
            metering: client(&config.urls.metering),
            billing: client(&config.urls.billing),
            runway_warning_seconds: config.runway_warning_seconds,
        }
    }
}

/// The clients from the schema data. Missing only when the schema was built
/// for printing, which never executes a request.
pub fn from_context<'a>(ctx: &Context<'a>) -> Result<&'a Clients, GatewayError> {
    ctx.data_opt::<Clients>()
        .ok_or_else(|| GatewayError::Internal("service clients missing from schema data".into()))
}
