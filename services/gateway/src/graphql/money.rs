//! Balances, host earnings, operator credit grants and renters' Stripe
//! top-ups.

use async_graphql::{Context, ID, Object, SimpleObject};
use chrono::{DateTime, Utc};
use contracts::api;
use contracts::endpoints;
use contracts::ids::TenantId;
use rust_decimal::Decimal;

use super::instant;
use crate::auth::{self, Access};
use crate::clients;
use crate::error::GatewayError;
use crate::error::GqlResult;
use crate::validate;

#[derive(SimpleObject)]
pub struct Money {
    amount: Decimal,
    currency: String,
}

impl From<api::Balance> for Money {
    fn from(b: api::Balance) -> Self {
        Self {
            amount: b.amount,
            currency: b.currency,
        }
    }
}

/// How long the caller's balance lasts at what its running rentals cost
/// now. Settlement charges running rentals as they run, and a renter whose
/// balance runs out is stopped; this is the warning before that.
#[derive(SimpleObject)]
pub struct Runway {
    balance: Decimal,
    currency: String,
    /// The sum of the hourly rates of the tenant's running rentals.
    burn_rate_per_hour: Decimal,
    running_instances: i64,
    /// Whole seconds until the balance reaches zero at the current burn;
    /// null when nothing is running.
    runway_seconds: Option<i64>,
    /// The runway is below `warnBelowSeconds` (or the balance is gone).
    low: bool,
    warn_below_seconds: i64,
}

#[derive(SimpleObject)]
pub struct HostEarnings {
    total: Decimal,
    currency: String,
    postings: Vec<EarningPosting>,
}

/// The host's share of one charge, after the platform fee.
#[derive(SimpleObject)]
pub struct EarningPosting {
    transaction_id: String,
    instance_id: Option<ID>,
    gross: Decimal,
    fee: Decimal,
    net: Decimal,
    fee_rate: Decimal,
    #[graphql(deprecation = "a String: use `postedAtUtc`, a DateTime")]
    posted_at: String,
    posted_at_utc: DateTime<Utc>,
}

impl From<api::HostEarnings> for HostEarnings {
    fn from(e: api::HostEarnings) -> Self {
        Self {
            total: e.total,
            currency: e.currency,
            postings: e
                .postings
                .into_iter()
                .map(|p| EarningPosting {
                    transaction_id: p.transaction_id,
                    instance_id: p.instance_id.map(Into::into),
                    gross: p.gross,
                    fee: p.fee,
                    net: p.net,
                    fee_rate: p.fee_rate,
                    posted_at: instant(p.posted_at),
                    posted_at_utc: p.posted_at,
                })
                .collect(),
        }
    }
}

/// A card top-up of the caller's balance: one Stripe PaymentIntent. The
/// balance rises when Stripe reports the payment succeeded.
#[derive(SimpleObject)]
pub struct TopUp {
    id: ID,
    amount: Decimal,
    currency: String,
    /// `creating` until Stripe answered, then the PaymentIntent's status
    /// (`requires_payment_method`, `processing`, `succeeded`, `canceled`, ...),
    /// or `failed` when the PaymentIntent could not be created (see
    /// `failureReason`; `createTopUp` with the same `idempotencyKey` tries
    /// again).
    status: String,
    /// For Stripe.js (`stripe.confirmPayment`); only in `createTopUp`'s answer.
    client_secret: Option<String>,
    payment_intent_id: Option<String>,
    #[graphql(deprecation = "a String: use `createdAtUtc`, a DateTime")]
    created_at: String,
    created_at_utc: DateTime<Utc>,
    #[graphql(deprecation = "a String: use `succeededAtUtc`, a DateTime")]
    succeeded_at: Option<String>,
    succeeded_at_utc: Option<DateTime<Utc>>,
    /// Why a `failed` top-up could not be created; null otherwise.
    failure_reason: Option<String>,
}

impl From<api::TopUp> for TopUp {
    fn from(t: api::TopUp) -> Self {
        Self {
            id: t.id.into(),
            amount: t.amount,
            currency: t.currency,
            status: t.status,
            client_secret: t.client_secret,
            payment_intent_id: t.payment_intent_id,
            created_at: instant(t.created_at),
            created_at_utc: t.created_at,
            succeeded_at: t.succeeded_at.map(instant),
            succeeded_at_utc: t.succeeded_at,
            failure_reason: t.failure_reason,
        }
    }
}

/// Topping up is paying: a renter tenant, with a key that may spend
/// (billing or rent scope), not a read-only one.
async fn authorize_top_up(ctx: &Context<'_>) -> Result<api::Principal, GatewayError> {
    let principal = auth::authorize(ctx, Access::Billing).await?;
    if !principal
        .scopes
        .iter()
        .any(|s| matches!(s, api::Scope::Billing | api::Scope::Rent))
    {
        return Err(GatewayError::Forbidden(
            "needs scope billing or rent".into(),
        ));
    }
    if !principal.tenant_roles.contains(&api::TenantRole::Renter) {
        return Err(GatewayError::Forbidden("renter tenants only".into()));
    }
    Ok(principal)
}

#[derive(Default)]
pub struct MoneyQuery;

#[Object]
impl MoneyQuery {
    /// The caller's tenant's balance.
    async fn balance(&self, ctx: &Context<'_>) -> GqlResult<Money> {
        let principal = auth::authorize(ctx, Access::Billing).await?;
        let balance = clients::from_context(ctx)?
            .billing
            .call(endpoints::billing::BALANCE, principal.tenant_id, &())
            .await?;
        Ok(balance.into())
    }

    /// The caller's balance against what its running rentals burn.
    async fn runway(&self, ctx: &Context<'_>) -> GqlResult<Runway> {
        let principal = auth::authorize(ctx, Access::Billing).await?;
        let clients = clients::from_context(ctx)?;
        let tenant = principal.tenant_id;
        let (balance, burn) = tokio::try_join!(
            clients
                .billing
                .call(endpoints::billing::BALANCE, tenant, &()),
            clients
                .metering
                .call(endpoints::metering::BURN_RATE, tenant, &()),
        )?;
        let runway = contracts::money::runway_seconds(balance.amount, burn.per_hour);
        let warn = clients.runway_warning_seconds;
        Ok(Runway {
            low: runway.is_some_and(|s| s < warn) || balance.amount <= Decimal::ZERO,
            balance: balance.amount,
            currency: balance.currency,
            burn_rate_per_hour: burn.per_hour,
            running_instances: burn.running_intervals,
            runway_seconds: runway,
            warn_below_seconds: warn,
        })
    }

    async fn host_earnings(&self, ctx: &Context<'_>) -> GqlResult<HostEarnings> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let earnings = clients::from_context(ctx)?
            .billing
            .call(endpoints::billing::EARNINGS, principal.tenant_id, &())
            .await?;
        Ok(earnings.into())
    }

    /// The caller's tenant's latest top-ups (at most 100), newest first.
    async fn top_ups(&self, ctx: &Context<'_>) -> GqlResult<Vec<TopUp>> {
        let principal = auth::authorize(ctx, Access::Billing).await?;
        let top_ups = clients::from_context(ctx)?
            .billing
            .call(endpoints::billing::TOP_UP_LIST, principal.tenant_id, &())
            .await?;
        Ok(top_ups.into_iter().map(Into::into).collect())
    }
}

#[derive(Default)]
pub struct MoneyMutation;

#[Object]
impl MoneyMutation {
    /// Adds credit to a tenant's balance. Operators only. A tenant that does
    /// not exist is NOT_FOUND. The same `idempotencyKey` with the same tenant,
    /// amount and reason grants once; with anything else it is a CONFLICT.
    async fn grant_credit(
        &self,
        ctx: &Context<'_>,
        tenant_id: ID,
        amount: Decimal,
        idempotency_key: String,
        reason: String,
    ) -> GqlResult<Money> {
        auth::authorize(ctx, Access::Operator).await?;
        let tenant_id = validate::id("tenantId", &tenant_id)?;
        validate::money("amount", amount, contracts::bounds::CREDIT)?;
        validate::idempotency_key("idempotencyKey", &idempotency_key)?;
        validate::not_blank("reason", &reason)?;
        let clients = clients::from_context(ctx)?;
        // Billing keeps balances for any id it is given; the tenants are
        // quota's, which answers NOT_FOUND for one that does not exist.
        clients
            .quota
            .call(endpoints::quota::TENANT_QUOTA, TenantId(tenant_id), &())
            .await?;
        let balance = clients
            .billing
            .call(
                endpoints::billing::GRANT_CREDIT,
                (),
                &api::GrantCreditRequest {
                    tenant_id: TenantId(tenant_id),
                    amount,
                    idempotency_key,
                    reason,
                },
            )
            .await?;
        Ok(balance.into())
    }

    /// Starts a card top-up of the caller's balance: creates a Stripe
    /// PaymentIntent for `amount` (settlement currency, at most its minor
    /// unit's decimals) and returns its client secret for Stripe.js. The same
    /// `idempotencyKey` and amount return the same top-up. `NOT_CONFIGURED`
    /// when the deployment has no Stripe key (nothing is written);
    /// `UNAVAILABLE` when Stripe does not answer (the top-up is `failed`, and
    /// the same key tries again).
    async fn create_top_up(
        &self,
        ctx: &Context<'_>,
        amount: Decimal,
        idempotency_key: Option<String>,
    ) -> GqlResult<TopUp> {
        let principal = authorize_top_up(ctx).await?;
        validate::money("amount", amount, contracts::bounds::TOP_UP)?;
        if let Some(key) = &idempotency_key {
            validate::idempotency_key("idempotencyKey", key)?;
        }
        let top_up = clients::from_context(ctx)?
            .billing
            .call(
                endpoints::billing::TOP_UP_CREATE,
                (),
                &api::CreateTopUpRequest {
                    tenant_id: principal.tenant_id,
                    amount,
                    idempotency_key,
                },
            )
            .await?;
        Ok(top_up.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use contracts::money::runway_seconds;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    #[test]
    fn runway_is_whole_seconds_at_the_current_burn() {
        assert_eq!(runway_seconds(d("10"), d("0")), None);
        assert_eq!(runway_seconds(d("10"), d("3600")), Some(10));
        assert_eq!(runway_seconds(d("0.75"), d("900")), Some(3));
        assert_eq!(runway_seconds(d("0.999"), d("3600")), Some(0));
        assert_eq!(runway_seconds(d("-2"), d("1")), Some(0));
        assert_eq!(runway_seconds(d("1"), d("0.9")), Some(4000));
    }
}
