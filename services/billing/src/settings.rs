//! Billing's own settings, read once per process ([`platform::settings`]):
//! its queue, the fee, Stripe, top-ups, invoices, payouts and reserved
//! blocks' escrow. Amounts and rates are kept as written and parsed by the
//! parts that use them ([`crate::Settings`],
//! [`crate::stripe::StripeSettings`], [`crate::payouts::PayoutSettings`],
//! [`crate::escrow::EscrowTerms`]), whose errors name the variable.

use std::time::Duration;

use platform::PlatformError;
use platform::settings::{SecretString, ServiceSettings, optional, parsed, placeholder, var};

/// The development defaults of billing's secrets, published in this
/// repository: production refuses them ([`BillingSettings::development_secrets`]).
pub const DEV_STRIPE_WEBHOOK_SECRET: &str = "whsec_gpumarket_local_development";
pub const DEV_STRIPE_SECRET_KEY: &str = "sk_test_gpumarket_local";

#[derive(Debug, Clone)]
pub struct BillingSettings {
    /// Billing's queue of usage and downtime events. `GPUMARKET_BILLING_QUEUE`.
    pub queue: String,
    /// Platform fee as a decimal fraction, e.g. `0.15`. `GPUMARKET_FEE_RATE`.
    pub fee_rate: String,
    /// The published multiple of the hourly rate a renter is credited per
    /// second of downtime of a lost host, charged to the host's earnings.
    /// `GPUMARKET_DOWNTIME_CREDIT_MULTIPLE`.
    pub downtime_credit_multiple: String,
    /// A renter's runway (balance over the current burn) below this many
    /// seconds is reported as low. `GPUMARKET_RUNWAY_WARNING_SECONDS`.
    pub runway_warning_seconds: i64,
    /// How often spending is watched (low runways, spend caps): every
    /// settlement interval, read from metering's variable so the watch
    /// follows the postings. `GPUMARKET_SETTLEMENT_INTERVAL_MS`.
    pub spend_watch_interval: Duration,
    /// The secret API key; empty (the default) means card payments are not
    /// configured, and the calls that need Stripe answer `NOT_CONFIGURED`
    /// instead of trying a fake key. `GPUMARKET_STRIPE_SECRET_KEY`.
    pub stripe_secret_key: SecretString,
    /// Where the Stripe API is reached (tests point it at a test double).
    /// `GPUMARKET_STRIPE_API_BASE`.
    pub stripe_api_base: String,
    /// Webhook signing secrets, newest first; a signature by any of them is
    /// accepted, which is how a secret is rotated.
    /// `GPUMARKET_STRIPE_WEBHOOK_SECRETS` (comma-separated).
    pub stripe_webhook_secrets: Vec<SecretString>,
    /// How far a webhook's signed timestamp may be from now.
    /// `GPUMARKET_STRIPE_WEBHOOK_TOLERANCE_SECONDS`.
    pub stripe_webhook_tolerance_seconds: i64,
    /// Smallest and largest top-up, in the settlement currency.
    /// `GPUMARKET_TOP_UP_MIN_AMOUNT`, `GPUMARKET_TOP_UP_MAX_AMOUNT`.
    pub top_up_min_amount: String,
    pub top_up_max_amount: String,
    /// Renters' invoice period: `monthly` (calendar months, UTC), `weekly`
    /// (ISO weeks) or `daily`. `GPUMARKET_INVOICE_PERIOD`.
    pub invoice_period: String,
    /// Seconds between billing's checks for a period that ended and has not
    /// been invoiced; 0 for none (operators call `runInvoices`).
    /// `GPUMARKET_INVOICE_SCHEDULE_SECS`.
    pub invoice_schedule_secs: u64,
    /// Seconds between payout runs, 0 for none (operators call
    /// `runPayouts`). `GPUMARKET_PAYOUT_INTERVAL_SECS`.
    pub payout_interval_secs: u64,
    /// The smallest payout, in the settlement currency.
    /// `GPUMARKET_PAYOUT_MINIMUM`.
    pub payout_minimum: String,
    /// Earnings younger than this many seconds are held back from payouts,
    /// so a downtime credit that follows can still be taken from them.
    /// `GPUMARKET_PAYOUT_HOLD_SECONDS`.
    pub payout_hold_seconds: i64,
    /// Escrow of reserved blocks is released up to `now −` this many
    /// seconds: a host's silence is known only once it is longer than the
    /// catalog's heartbeat grace (and its sweeper has run), so the seconds
    /// closer to now wait. Raised to the grace plus one sweep when set
    /// lower ([`crate::escrow::EscrowTerms`]).
    /// `GPUMARKET_ESCROW_SETTLE_LAG_SECONDS`.
    pub escrow_settle_lag_seconds: i64,
    /// The catalog's heartbeat grace and offline sweep, read here (as the
    /// settlement interval is read from metering's variable) so that the
    /// escrow lag is never shorter than what makes a silence known.
    /// `GPUMARKET_HEARTBEAT_GRACE_SECONDS`, `GPUMARKET_OFFLINE_SWEEP_MS`.
    pub heartbeat_grace_seconds: i64,
    pub offline_sweep_ms: u64,
    /// What a host pays the holders when it cancels a reserved block, as a
    /// share of the refund, in [0, 1). `GPUMARKET_RESERVATION_PENALTY_RATE`.
    pub reservation_penalty_rate: String,
    /// The platform's share of a resale of reserved hours, in [0, 1).
    /// `GPUMARKET_RESALE_FEE_RATE`.
    pub resale_fee_rate: String,
}

impl ServiceSettings for BillingSettings {
    fn from_env(_production: bool) -> Result<Self, PlatformError> {
        Ok(Self {
            queue: var("GPUMARKET_BILLING_QUEUE", "billing.usage"),
            fee_rate: var("GPUMARKET_FEE_RATE", "0.15"),
            downtime_credit_multiple: var("GPUMARKET_DOWNTIME_CREDIT_MULTIPLE", "1"),
            runway_warning_seconds: parsed("GPUMARKET_RUNWAY_WARNING_SECONDS", 3600)?,
            spend_watch_interval: Duration::from_millis(
                parsed("GPUMARKET_SETTLEMENT_INTERVAL_MS", 10_000u64)?.max(100),
            ),
            stripe_secret_key: var("GPUMARKET_STRIPE_SECRET_KEY", "").trim().into(),
            stripe_api_base: var("GPUMARKET_STRIPE_API_BASE", "https://api.stripe.com/"),
            stripe_webhook_secrets: var(
                "GPUMARKET_STRIPE_WEBHOOK_SECRETS",
                DEV_STRIPE_WEBHOOK_SECRET,
            )
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(SecretString::from)
            .collect(),
            stripe_webhook_tolerance_seconds: parsed(
                "GPUMARKET_STRIPE_WEBHOOK_TOLERANCE_SECONDS",
                300,
            )?,
            top_up_min_amount: var("GPUMARKET_TOP_UP_MIN_AMOUNT", "5"),
            top_up_max_amount: var("GPUMARKET_TOP_UP_MAX_AMOUNT", "10000"),
            invoice_period: optional("GPUMARKET_INVOICE_PERIOD")
                .unwrap_or_else(|| "monthly".into()),
            invoice_schedule_secs: parsed("GPUMARKET_INVOICE_SCHEDULE_SECS", 300)?,
            payout_interval_secs: parsed("GPUMARKET_PAYOUT_INTERVAL_SECS", 86_400)?,
            payout_minimum: var("GPUMARKET_PAYOUT_MINIMUM", "10.00"),
            payout_hold_seconds: parsed("GPUMARKET_PAYOUT_HOLD_SECONDS", 86_400)?,
            escrow_settle_lag_seconds: parsed("GPUMARKET_ESCROW_SETTLE_LAG_SECONDS", 120)?,
            heartbeat_grace_seconds: parsed("GPUMARKET_HEARTBEAT_GRACE_SECONDS", 60i64)?.max(1),
            offline_sweep_ms: parsed("GPUMARKET_OFFLINE_SWEEP_MS", 5_000u64)?.max(100),
            reservation_penalty_rate: var("GPUMARKET_RESERVATION_PENALTY_RATE", "0.10"),
            resale_fee_rate: var("GPUMARKET_RESALE_FEE_RATE", "0.05"),
        })
    }
}

impl BillingSettings {
    /// Billing's secrets that still have their development value (or a
    /// template's placeholder): production refuses to start with them.
    pub fn development_secrets(&self) -> Vec<&'static str> {
        let mut found = Vec::new();
        if self.stripe_webhook_secrets.is_empty()
            || self
                .stripe_webhook_secrets
                .iter()
                .any(|s| s.expose() == DEV_STRIPE_WEBHOOK_SECRET || placeholder(s.expose()))
        {
            found.push("GPUMARKET_STRIPE_WEBHOOK_SECRETS (the development secret)");
        }
        let key = self.stripe_secret_key.expose();
        if key == DEV_STRIPE_SECRET_KEY || placeholder(key) {
            found.push("GPUMARKET_STRIPE_SECRET_KEY (the development key)");
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn production_refuses_the_development_stripe_secrets_and_never_prints_them() {
        let mut settings = BillingSettings::from_env(false).unwrap();
        settings.stripe_webhook_secrets = vec![DEV_STRIPE_WEBHOOK_SECRET.into()];
        settings.stripe_secret_key = DEV_STRIPE_SECRET_KEY.into();
        let found = settings.development_secrets();
        assert!(
            found
                .iter()
                .any(|f| f.contains("GPUMARKET_STRIPE_WEBHOOK_SECRETS"))
        );
        assert!(
            found
                .iter()
                .any(|f| f.contains("GPUMARKET_STRIPE_SECRET_KEY"))
        );
        settings.stripe_webhook_secrets = vec!["whsec_real-7c1e-secret".into()];
        settings.stripe_secret_key = "sk_live_real-7c1e-secret".into();
        assert!(settings.development_secrets().is_empty());
        settings.stripe_webhook_secrets = vec!["whsec_REPLACE-ME".into()];
        assert_eq!(settings.development_secrets().len(), 1);
        let printed = format!("{settings:?}");
        assert!(!printed.contains("-secret"), "{printed}");
    }
}
