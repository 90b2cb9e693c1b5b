//! The operators' marketplace overview (docs/dashboards.md, "Operator
//! overview"): marketplace volume and platform fees over a range, GPU
//! supply now, and the tenants near a quota or out of credit. Operators
//! only. Every number comes from the service that owns it (billing's
//! ledger, the catalog's machines and allocations, quota's limits and
//! holds) over internal HTTP; the gateway only sets them side by side, and
//! each part is asked for only when it is selected.

use async_graphql::{Context, Enum, ID, Object, SimpleObject};
use chrono::{DateTime, Utc};
use contracts::api::SeriesBucket;
use contracts::endpoints;
use contracts::operator::{
    CreditRisks, GpuSupply as ApiGpuSupply, MarketVolume as ApiMarketVolume, MarketVolumeQuery,
    QuotaPressure, QuotaPressureQuery, TenantName, TenantNamesRequest,
};
use rust_decimal::Decimal;

use super::dashboards::{UsageBucket, range};
use super::instant;
use crate::auth::{self, Access};
use crate::clients;
use crate::error::{GatewayError, GqlResult};

/// The share of a limit at or above which a tenant is near it, unless the
/// query says otherwise.
const DEFAULT_NEAR_QUOTA_PERCENT: i32 = 80;

/// Marketplace money in one bucket (UTC). Usage counts, whole, where its
/// segment started; other postings on the fee account where they were
/// posted.
#[derive(SimpleObject)]
pub struct MarketVolumePoint {
    #[graphql(deprecation = "a String: use `bucketStartUtc`, a DateTime")]
    bucket_start: String,
    bucket_start_utc: DateTime<Utc>,
    /// What renters were charged for usage (their ledger legs, positive).
    volume: Decimal,
    /// The hosts' share of the same postings.
    host_earnings: Decimal,
    /// The platform fee legs of the same postings: `volume − hostEarnings`.
    fees: Decimal,
    /// Other postings on the platform fee account (credit notes), signed.
    fee_adjustments: Decimal,
    /// Usage postings in the bucket.
    postings: i64,
    /// Whole seconds of usage (of every meter), corrections included.
    seconds: i64,
}

/// Marketplace volume and fees over `[from, to)`; exact ledger amounts (9
/// decimals) in the settlement currency.
#[derive(SimpleObject)]
pub struct MarketVolume {
    currency: String,
    /// By bucket start; buckets with nothing have no point.
    points: Vec<MarketVolumePoint>,
    total_volume: Decimal,
    total_host_earnings: Decimal,
    total_fees: Decimal,
    total_fee_adjustments: Decimal,
    /// `totalFees + totalFeeAdjustments`: what the fee account received.
    total_fee_revenue: Decimal,
    total_postings: i64,
    total_seconds: i64,
}

impl From<ApiMarketVolume> for MarketVolume {
    fn from(v: ApiMarketVolume) -> Self {
        Self {
            currency: v.currency,
            points: v
                .points
                .into_iter()
                .map(|p| MarketVolumePoint {
                    bucket_start: instant(p.bucket_start),
                    bucket_start_utc: p.bucket_start,
                    volume: p.volume,
                    host_earnings: p.host_earnings,
                    fees: p.fees,
                    fee_adjustments: p.fee_adjustments,
                    postings: p.postings,
                    seconds: p.seconds,
                })
                .collect(),
            total_volume: v.total_volume,
            total_host_earnings: v.total_host_earnings,
            total_fees: v.total_fees,
            total_fee_adjustments: v.total_fee_adjustments,
            total_fee_revenue: v.total_fees + v.total_fee_adjustments,
            total_postings: v.total_postings,
            total_seconds: v.total_seconds,
        }
    }
}

/// GPUs of one model now.
#[derive(SimpleObject)]
pub struct GpuSupplyModel {
    gpu_model: String,
    listed_machines: i64,
    /// GPUs on listed machines.
    listed_gpus: i64,
    /// Of `listedGpus`, those on machines online (heard from within the
    /// heartbeat grace).
    online_gpus: i64,
    /// GPUs held by live rentals, on any machine of the model.
    rented_gpus: i64,
    /// Of `rentedGpus`, those on listed machines.
    rented_listed_gpus: i64,
}

#[derive(SimpleObject)]
pub struct GpuSupply {
    /// When the catalog counted.
    #[graphql(deprecation = "a String: use `atUtc`, a DateTime")]
    at: String,
    /// When the catalog counted.
    at_utc: DateTime<Utc>,
    /// By model name.
    models: Vec<GpuSupplyModel>,
    listed_gpus: i64,
    online_gpus: i64,
    rented_gpus: i64,
    rented_listed_gpus: i64,
}

impl From<ApiGpuSupply> for GpuSupply {
    fn from(s: ApiGpuSupply) -> Self {
        Self {
            at: instant(s.at),
            at_utc: s.at,
            models: s
                .models
                .into_iter()
                .map(|m| GpuSupplyModel {
                    gpu_model: m.gpu_model,
                    listed_machines: m.listed_machines,
                    listed_gpus: m.listed_gpus,
                    online_gpus: m.online_gpus,
                    rented_gpus: m.rented_gpus,
                    rented_listed_gpus: m.rented_listed_gpus,
                })
                .collect(),
            listed_gpus: s.listed_gpus,
            online_gpus: s.online_gpus,
            rented_gpus: s.rented_gpus,
            rented_listed_gpus: s.rented_listed_gpus,
        }
    }
}

/// One quota dimension of a tenant at or above the threshold.
#[derive(SimpleObject)]
pub struct QuotaPressureDimension {
    /// `max_gpus`, `max_gpus_per_model:<model>`, `max_running_instances` or
    /// `monthly_budget`, as in `QUOTA_EXCEEDED` refusals.
    quota: String,
    limit: Decimal,
    /// What admission counts: GPUs or instances held now; for the budget,
    /// the projected month spend.
    used: Decimal,
    /// `used / limit × 100`, one decimal (half-even).
    percent: Decimal,
}

#[derive(SimpleObject)]
pub struct NearQuotaTenant {
    tenant_id: ID,
    tenant_name: String,
    /// Highest share first.
    dimensions: Vec<QuotaPressureDimension>,
}

#[derive(SimpleObject)]
pub struct NearQuota {
    threshold_percent: i32,
    /// The currency of budget dimensions.
    currency: String,
    /// Highest share first; at most 200.
    tenants: Vec<NearQuotaTenant>,
}

impl From<QuotaPressure> for NearQuota {
    fn from(p: QuotaPressure) -> Self {
        Self {
            threshold_percent: i32::try_from(p.threshold_percent).unwrap_or(i32::MAX),
            currency: p.currency,
            tenants: p
                .tenants
                .into_iter()
                .map(|t| NearQuotaTenant {
                    tenant_id: t.tenant_id.into(),
                    tenant_name: t.tenant_name,
                    dimensions: t
                        .dimensions
                        .into_iter()
                        .map(|d| QuotaPressureDimension {
                            quota: d.quota,
                            limit: d.limit,
                            used: d.used,
                            percent: d.percent,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// Why a tenant is on the out-of-credit list.
#[derive(Enum, Clone, Copy, PartialEq, Eq)]
pub enum CreditRiskReason {
    /// The balance is at or below zero: new orders are refused and running
    /// instances are being stopped.
    BalanceExhausted,
    /// Billing's low-runway warning is in force: at the burn it measured,
    /// the balance lasts less than `warnBelowSeconds`.
    LowRunway,
}

#[derive(SimpleObject)]
pub struct OutOfCreditTenant {
    tenant_id: ID,
    /// Empty when quota does not know the tenant.
    tenant_name: String,
    reasons: Vec<CreditRiskReason>,
    /// The renter balance now (exact).
    balance: Decimal,
    /// With a low-runway warning: the burn and runway billing measured when
    /// it raised it, and since when.
    burn_per_hour: Option<Decimal>,
    runway_seconds: Option<i64>,
    #[graphql(deprecation = "a String: use `lowSinceUtc`, a DateTime")]
    low_since: Option<String>,
    low_since_utc: Option<DateTime<Utc>>,
    /// The tenant's latest usage posting.
    #[graphql(deprecation = "a String: use `lastChargedAtUtc`, a DateTime")]
    last_charged_at: Option<String>,
    /// The tenant's latest usage posting.
    last_charged_at_utc: Option<DateTime<Utc>>,
}

#[derive(SimpleObject)]
pub struct OutOfCredit {
    currency: String,
    /// The low-runway threshold (`GPUMARKET_RUNWAY_WARNING_SECONDS`).
    warn_below_seconds: i64,
    /// Lowest balance first; at most 200.
    tenants: Vec<OutOfCreditTenant>,
}

fn out_of_credit(
    risks: CreditRisks,
    names: Vec<TenantName>,
    warn_below_seconds: i64,
) -> OutOfCredit {
    let name = |id| {
        names
            .iter()
            .find(|n| n.tenant_id == id)
            .map(|n| n.name.clone())
            .unwrap_or_default()
    };
    OutOfCredit {
        currency: risks.currency,
        warn_below_seconds,
        tenants: risks
            .tenants
            .into_iter()
            .map(|t| {
                let mut reasons = Vec::new();
                if t.balance <= Decimal::ZERO {
                    reasons.push(CreditRiskReason::BalanceExhausted);
                }
                if t.runway_seconds.is_some() {
                    reasons.push(CreditRiskReason::LowRunway);
                }
                OutOfCreditTenant {
                    tenant_id: t.tenant_id.into(),
                    tenant_name: name(t.tenant_id),
                    reasons,
                    balance: t.balance,
                    burn_per_hour: t.burn_per_hour,
                    runway_seconds: t.runway_seconds,
                    low_since: t.low_since.map(instant),
                    low_since_utc: t.low_since,
                    last_charged_at: t.last_charged_at.map(instant),
                    last_charged_at_utc: t.last_charged_at,
                }
            })
            .collect(),
    }
}

/// The overview of one range; each part is read when selected.
pub struct MarketplaceOverview {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    bucket: UsageBucket,
    near_quota_percent: u32,
}

#[Object]
impl MarketplaceOverview {
    async fn from(&self) -> String {
        instant(self.from)
    }

    async fn to(&self) -> String {
        instant(self.to)
    }

    async fn bucket(&self) -> UsageBucket {
        self.bucket
    }

    /// Volume and fees per bucket over `[from, to)` (billing's ledger).
    #[graphql(complexity = "super::extensions::limits::EXPENSIVE_FIELD + child_complexity")]
    async fn volume(&self, ctx: &Context<'_>) -> GqlResult<MarketVolume> {
        let query = MarketVolumeQuery {
            bucket: SeriesBucket::from(self.bucket),
            from: self.from,
            to: self.to,
        };
        let volume = clients::from_context(ctx)?
            .billing
            .call(endpoints::billing::MARKET_VOLUME, (), &query)
            .await
            .map_err(GatewayError::from)?;
        Ok(volume.into())
    }

    /// GPUs listed, online and rented now, per model (the catalog).
    #[graphql(complexity = "super::extensions::limits::EXPENSIVE_FIELD + child_complexity")]
    async fn gpu_supply(&self, ctx: &Context<'_>) -> GqlResult<GpuSupply> {
        let supply = clients::from_context(ctx)?
            .catalog
            .call(endpoints::catalog::GPU_SUPPLY, (), &())
            .await
            .map_err(GatewayError::from)?;
        Ok(supply.into())
    }

    /// Tenants with a quota dimension at or above `nearQuotaPercent` of its
    /// limit now (quota).
    #[graphql(complexity = "super::extensions::limits::EXPENSIVE_FIELD + child_complexity")]
    async fn near_quota(&self, ctx: &Context<'_>) -> GqlResult<NearQuota> {
        let pressure = clients::from_context(ctx)?
            .quota
            .call(
                contracts::endpoints::quota::QUOTA_PRESSURE,
                (),
                &QuotaPressureQuery {
                    threshold_percent: self.near_quota_percent,
                },
            )
            .await
            .map_err(GatewayError::from)?;
        Ok(pressure.into())
    }

    /// Renters whose balance is at or below zero or whose runway is below
    /// the low-runway threshold (billing), named by quota.
    async fn out_of_credit(&self, ctx: &Context<'_>) -> GqlResult<OutOfCredit> {
        let clients = clients::from_context(ctx)?;
        let risks = clients
            .billing
            .call(endpoints::billing::CREDIT_RISKS, (), &())
            .await
            .map_err(GatewayError::from)?;
        let names: Vec<TenantName> = if risks.tenants.is_empty() {
            Vec::new()
        } else {
            let request = TenantNamesRequest {
                tenant_ids: risks.tenants.iter().map(|t| t.tenant_id).collect(),
            };
            clients
                .quota
                .call(contracts::endpoints::quota::TENANT_NAMES, (), &request)
                .await
                .map_err(GatewayError::from)?
        };
        Ok(out_of_credit(risks, names, clients.runway_warning_seconds))
    }
}

#[derive(Default)]
pub struct OperatorQuery;

#[Object]
impl OperatorQuery {
    /// Operators only: marketplace volume and fees per `bucket` over
    /// `[from, to)` (RFC 3339; at most 2000 buckets), GPU supply now, and the
    /// tenants at or above `nearQuotaPercent` (1–100, default 80) of a quota
    /// or out of credit.
    // A resolver's arguments are the GraphQL field's: one each.
    #[allow(clippy::too_many_arguments)]
    async fn marketplace_overview(
        &self,
        ctx: &Context<'_>,
        #[graphql(deprecation = "a String: use `fromUtc`, a DateTime")] from: Option<String>,
        from_utc: Option<DateTime<Utc>>,
        #[graphql(deprecation = "a String: use `toUtc`, a DateTime")] to: Option<String>,
        to_utc: Option<DateTime<Utc>>,
        bucket: Option<UsageBucket>,
        near_quota_percent: Option<i32>,
    ) -> GqlResult<MarketplaceOverview> {
        auth::authorize(ctx, Access::Operator).await?;
        let (from, to) = range(from, from_utc, to, to_utc)?;
        let percent = near_quota_percent.unwrap_or(DEFAULT_NEAR_QUOTA_PERCENT);
        let near_quota_percent = u32::try_from(percent)
            .ok()
            .filter(|p| (1..=100).contains(p))
            .ok_or_else(|| {
                GatewayError::validation("nearQuotaPercent", "must be between 1 and 100")
            })?;
        Ok(MarketplaceOverview {
            from,
            to,
            bucket: bucket.unwrap_or(UsageBucket::Day),
            near_quota_percent,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use async_graphql::Request;
    use contracts::api::{Principal, Scope, TenantRole};
    use platform::internal::InternalClient;
    use serde_json::Value;
    use uuid::Uuid;

    use super::super::{builder, execute};
    use crate::auth::{Credential, JwtKeys, RequestAuth};
    use crate::clients::Clients;
    use contracts::ids::TenantId;

    const QUERY: &str = r#"{ marketplaceOverview(from: "2026-12-01T00:00:00Z",
        to: "2026-12-02T00:00:00Z") { from } }"#;

    /// Every service unreachable: a refusal must come before any is asked.
    async fn run(query: &str, operator: bool, scopes: &[Scope]) -> Value {
        let keys = JwtKeys::new(&[("k1".into(), "test-secret".into())], 600).unwrap();
        let nowhere = InternalClient::new("http://127.0.0.1:1", "token");
        let clients = Clients {
            quota: nowhere.clone(),
            catalog: nowhere.clone(),
            ordering: nowhere.clone(),
            metering: nowhere.clone(),
            billing: nowhere.clone(),
            webhooks: nowhere,
            runway_warning_seconds: 3600,
        };
        let principal = Principal {
            user_id: Uuid::now_v7(),
            tenant_id: TenantId(Uuid::now_v7()),
            email: "op@example.com".into(),
            tenant_roles: vec![TenantRole::Platform],
            operator,
            scopes: scopes.to_vec(),
            api_key_id: None,
        };
        let token = keys.issue(&principal).unwrap().token;
        let schema = builder().data(keys).data(clients).finish();
        let auth = RequestAuth::new(Credential::Jwt(token));
        let response = execute(&schema, Request::new(query), auth).await;
        serde_json::to_value(&response).unwrap()
    }

    fn code(response: &Value) -> &str {
        response["errors"][0]["extensions"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no error code in {response}"))
    }

    #[tokio::test]
    async fn only_operators_may_read_the_overview() {
        assert_eq!(code(&run(QUERY, false, &Scope::ALL).await), "FORBIDDEN");
        assert_eq!(code(&run(QUERY, true, &[Scope::Read]).await), "FORBIDDEN");
        // An operator gets through to its own checks; selecting only the
        // range asks no service.
        let ok = run(QUERY, true, &[Scope::Admin]).await;
        assert!(ok.get("errors").is_none(), "{ok}");
        assert_eq!(
            ok["data"]["marketplaceOverview"]["from"],
            "2026-12-01T00:00:00.000000Z"
        );
    }

    #[tokio::test]
    async fn a_bad_range_or_threshold_is_refused_before_any_service_is_asked() {
        let empty = r#"{ marketplaceOverview(from: "2026-12-02T00:00:00Z",
            to: "2026-12-01T00:00:00Z") { from } }"#;
        assert_eq!(code(&run(empty, true, &[Scope::Admin]).await), "VALIDATION");
        let percent = r#"{ marketplaceOverview(from: "2026-12-01T00:00:00Z",
            to: "2026-12-02T00:00:00Z", nearQuotaPercent: 101) { from } }"#;
        assert_eq!(
            code(&run(percent, true, &[Scope::Admin]).await),
            "VALIDATION"
        );
        // The services being down shows as such, part by part.
        let volume = r#"{ marketplaceOverview(from: "2026-12-01T00:00:00Z",
            to: "2026-12-02T00:00:00Z") { volume { totalVolume } } }"#;
        assert_eq!(
            code(&run(volume, true, &[Scope::Admin]).await),
            "UNAVAILABLE"
        );
    }
}
