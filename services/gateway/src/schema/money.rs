//! Balances, host earnings and operator credit grants.

use async_graphql::{Context, ID, Object, SimpleObject};
use contracts::api;
use rust_decimal::Decimal;

use super::instant;
use crate::auth::{self, Access};
use crate::clients;
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
    posted_at: String,
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
                })
                .collect(),
        }
    }
}

#[derive(Default)]
pub struct MoneyQuery;

#[Object]
impl MoneyQuery {
    /// The caller's tenant's balance.
    async fn balance(&self, ctx: &Context<'_>) -> GqlResult<Money> {
        let principal = auth::authorize(ctx, Access::Billing).await?;
        let balance: api::Balance = clients::from_context(ctx)?
            .billing
            .get(&format!("/internal/balances/{}", principal.tenant_id))
            .await?;
        Ok(balance.into())
    }

    async fn host_earnings(&self, ctx: &Context<'_>) -> GqlResult<HostEarnings> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let earnings: api::HostEarnings = clients::from_context(ctx)?
            .billing
            .get(&format!("/internal/earnings/{}", principal.tenant_id))
            .await?;
        Ok(earnings.into())
    }
}

#[derive(Default)]
pub struct MoneyMutation;

#[Object]
impl MoneyMutation {
    /// Adds credit to a tenant's balance. Operators only.
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
        validate::positive("amount", amount)?;
        validate::idempotency_key("idempotencyKey", &idempotency_key)?;
        validate::not_blank("reason", &reason)?;
        let balance: api::Balance = clients::from_context(ctx)?
            .billing
            .post(
                "/internal/credits",
                &api::GrantCreditRequest {
                    tenant_id,
                    amount,
                    idempotency_key,
                    reason,
                },
            )
            .await?;
        Ok(balance.into())
    }
}
