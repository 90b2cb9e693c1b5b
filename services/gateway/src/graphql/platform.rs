//! The platform's public terms: what every front end needs before anyone
//! logs in (the settlement currency, the platform fee, the Stripe
//! publishable key for Stripe.js). Public by design: all three are shown on
//! pages anyone can open, and a publishable key is meant for browsers.

use async_graphql::{Context, Object, SimpleObject};
use contracts::endpoints;
use rust_decimal::Decimal;

use crate::clients;
use crate::error::GqlResult;

/// The Stripe publishable key, as schema data (`GPUMARKET_STRIPE_PUBLISHABLE_KEY`).
/// A schema without it (a printed SDL, a unit test) reports none.
#[derive(Clone, Debug, Default)]
pub struct StripePublishableKey(pub Option<String>);

/// The money terms of the platform.
#[derive(SimpleObject)]
pub struct Platform {
    /// The settlement currency (ISO 4217) of balances, prices and top-ups.
    currency: String,
    /// The platform's share of each charge, in [0, 1) (e.g. 0.15: hosts
    /// earn 85 % of what renters pay).
    platform_fee_rate: Decimal,
    /// The key Stripe.js is loaded with to take card top-ups; null when
    /// card top-ups are not configured on this deployment.
    stripe_publishable_key: Option<String>,
}

#[derive(Default)]
pub struct PlatformQuery;

#[Object]
impl PlatformQuery {
    /// The platform's public terms. Needs no login.
    async fn platform(&self, ctx: &Context<'_>) -> GqlResult<Platform> {
        // Billing owns the currency and the fee: asked, not re-parsed here,
        // so the two can never disagree.
        let terms = clients::from_context(ctx)?
            .billing
            .call(endpoints::billing::PLATFORM_TERMS, (), &())
            .await?;
        let key = ctx
            .data_opt::<StripePublishableKey>()
            .and_then(|k| k.0.clone());
        Ok(Platform {
            currency: terms.currency,
            platform_fee_rate: terms.fee_rate,
            stripe_publishable_key: key,
        })
    }
}
