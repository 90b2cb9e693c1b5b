//! The services behind the gateway, one internal HTTP client each.

use async_graphql::Context;
use contracts::endpoints;
use contracts::ids::TenantId;
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
    pub webhooks: InternalClient,
    /// Below this runway a renter's balance is reported low (the one
    /// setting a resolver needs, carried with the clients it goes with).
    pub runway_warning_seconds: i64,
}

impl Clients {
    pub fn new(config: &Config, settings: &crate::GatewaySettings) -> Self {
        let client =
            |base: &str| InternalClient::new(base.trim_end_matches('/'), &config.service_token);
        Self {
            quota: client(&config.url("quota")),
            catalog: client(&config.url("catalog")),
            ordering: client(&config.url("ordering")),
            metering: client(&config.url("metering")),
            billing: client(&config.url("billing")),
            webhooks: client(&config.url("webhooks")),
            runway_warning_seconds: settings.runway_warning_seconds,
        }
    }

    /// A page of a tenant's balance history (billing dashboards).
    pub async fn balance_history(
        &self,
        tenant_id: uuid::Uuid,
        query: &contracts::api::BalanceHistoryQuery,
    ) -> Result<contracts::api::BalanceHistoryPage, platform::internal::RemoteError> {
        self.billing
            .call(
                endpoints::billing::DASHBOARD_BALANCE_HISTORY,
                TenantId(tenant_id),
                query,
            )
            .await
    }

    /// A renter tenant's usage and spend per bucket (billing dashboards).
    pub async fn usage_series(
        &self,
        tenant_id: uuid::Uuid,
        query: &contracts::api::UsageSeriesQuery,
    ) -> Result<contracts::api::UsageSeries, platform::internal::RemoteError> {
        self.billing
            .call(
                endpoints::billing::DASHBOARD_USAGE,
                TenantId(tenant_id),
                query,
            )
            .await
    }

    /// A host tenant's earnings per machine and day (billing dashboards).
    pub async fn machine_earnings(
        &self,
        host_tenant_id: uuid::Uuid,
        query: &contracts::api::MachineEarningsQuery,
    ) -> Result<contracts::api::MachineEarnings, platform::internal::RemoteError> {
        self.billing
            .call(
                endpoints::billing::DASHBOARD_EARNINGS,
                TenantId(host_tenant_id),
                query,
            )
            .await
    }
}

/// The clients from the schema data. Missing only when the schema was built
/// for printing, which never executes a request.
pub fn from_context<'a>(ctx: &Context<'a>) -> Result<&'a Clients, GatewayError> {
    ctx.data_opt::<Clients>()
        .ok_or_else(|| GatewayError::Internal("service clients missing from schema data".into()))
}
