//! Prepaid renters through Stripe. A renter tenant tops up its balance with
//! a card: `createTopUp` records a top-up, finds or creates the tenant's
//! Stripe customer and creates a PaymentIntent whose client secret the
//! browser confirms with Stripe.js. The balance rises only when Stripe's
//! signed `payment_intent.succeeded` webhook arrives, once per PaymentIntent
//! however often the event is delivered. See `docs/billing-stripe.md`.

pub mod client;
pub mod connect;
pub mod minor_units;
pub mod signature;
pub mod topups;
pub mod webhook;

use platform::Config;
use rust_decimal::Decimal;

use crate::Error;

/// The Stripe side of billing's settings, checked once at start-up.
#[derive(Clone)]
pub struct StripeSettings {
    /// Webhook signing secrets, newest first; any of them verifies.
    pub webhook_secrets: Vec<String>,
    pub tolerance_seconds: i64,
    pub min_amount: Decimal,
    pub max_amount: Decimal,
}

impl StripeSettings {
    pub fn from_config(config: &Config) -> Result<Self, Error> {
        let settings = config.settings::<crate::BillingSettings>()?;
        let amount = |name: &str, raw: &str| -> Result<Decimal, Error> {
            raw.parse::<Decimal>()
                .ok()
                .filter(|a| *a > Decimal::ZERO)
                .ok_or_else(|| {
                    Error::Validation(format!("{name}: {raw:?} is not a positive decimal"))
                })
        };
        let min_amount = amount("GPUMARKET_TOP_UP_MIN_AMOUNT", &settings.top_up_min_amount)?;
        let max_amount = amount("GPUMARKET_TOP_UP_MAX_AMOUNT", &settings.top_up_max_amount)?;
        if min_amount > max_amount {
            return Err(Error::Validation(
                "GPUMARKET_TOP_UP_MIN_AMOUNT is above GPUMARKET_TOP_UP_MAX_AMOUNT".into(),
            ));
        }
        if settings.stripe_webhook_tolerance_seconds <= 0 {
            return Err(Error::Validation(
                "GPUMARKET_STRIPE_WEBHOOK_TOLERANCE_SECONDS: must be positive".into(),
            ));
        }
        if settings.stripe_webhook_secrets.is_empty() {
            // Not fatal: the rest of billing works, and every webhook is
            // refused until a secret is configured.
            tracing::warn!(
                "GPUMARKET_STRIPE_WEBHOOK_SECRETS is empty: Stripe webhooks will be refused"
            );
        }
        Ok(Self {
            webhook_secrets: settings
                .stripe_webhook_secrets
                .iter()
                .map(|s| s.expose().to_owned())
                .collect(),
            tolerance_seconds: settings.stripe_webhook_tolerance_seconds,
            min_amount,
            max_amount,
        })
    }
}
