//! The published money terms of reservations (penalty and resale fee
//! rates), how far behind now escrow is released, and the peers the escrow
//! asks (the catalog for heartbeat gaps, quota for the monthly budget).

use std::time::Duration;

use contracts::reservations::ReservationMoneyTerms;
use platform::Config;
use platform::internal::InternalClient;
use rust_decimal::Decimal;

use crate::{BillingSettings, Error, Settings};

/// Reservation settings, checked once at start-up.
#[derive(Debug, Clone)]
pub struct EscrowTerms {
    /// `GPUMARKET_RESERVATION_PENALTY_RATE`, in [0, 1).
    pub penalty_rate: Decimal,
    /// `GPUMARKET_RESALE_FEE_RATE`, in [0, 1).
    pub resale_fee_rate: Decimal,
    /// Escrow is released up to `now − settle_lag`.
    pub settle_lag: chrono::Duration,
    /// How often the release loop runs (the settlement interval).
    pub interval: Duration,
}

impl EscrowTerms {
    pub fn from_config(config: &Config) -> Result<Self, Error> {
        Self::from_settings(&*config.settings::<BillingSettings>()?)
    }

    pub fn from_settings(billing: &BillingSettings) -> Result<Self, Error> {
        Ok(Self {
            penalty_rate: rate(
                "GPUMARKET_RESERVATION_PENALTY_RATE",
                &billing.reservation_penalty_rate,
            )?,
            resale_fee_rate: rate("GPUMARKET_RESALE_FEE_RATE", &billing.resale_fee_rate)?,
            settle_lag: chrono::Duration::seconds(settle_lag(
                billing.escrow_settle_lag_seconds,
                billing.heartbeat_grace_seconds,
                billing.offline_sweep_ms,
            )),
            interval: billing.spend_watch_interval,
        })
    }

    /// What `RESERVATION_TERMS` publishes.
    pub fn published(&self, settings: &Settings) -> ReservationMoneyTerms {
        ReservationMoneyTerms {
            currency: settings.currency.clone(),
            fee_rate: settings.fee_rate,
            cancellation_penalty_rate: self.penalty_rate,
            resale_fee_rate: self.resale_fee_rate,
            settlement_interval_seconds: i64::try_from(self.interval.as_millis().div_ceil(1000))
                .unwrap_or(i64::MAX)
                .max(1),
        }
    }
}

/// A rate in [0, 1), its variable named when it is not.
fn rate(name: &str, raw: &str) -> Result<Decimal, Error> {
    match raw.trim().parse::<Decimal>() {
        Ok(r) if r >= Decimal::ZERO && r < Decimal::ONE => Ok(r),
        _ => Err(Error::Validation(format!(
            "{name}: {raw:?} is not a decimal in [0, 1)"
        ))),
    }
}

/// The lag in seconds: as configured, but never shorter than the
/// catalog's grace plus one offline sweep, the time it takes a silence to
/// become a recorded gap. Releasing closer to now would pay the host for
/// seconds whose silence is not known yet.
pub fn settle_lag(configured: i64, grace_seconds: i64, sweep_ms: u64) -> i64 {
    let sweep = i64::try_from(sweep_ms.div_ceil(1000)).unwrap_or(i64::MAX);
    let floor = grace_seconds.max(1).saturating_add(sweep);
    if configured < floor {
        tracing::warn!(
            configured,
            floor,
            "GPUMARKET_ESCROW_SETTLE_LAG_SECONDS is below the heartbeat grace plus one offline sweep; using the floor"
        );
    }
    configured.max(floor)
}

/// The services the escrow asks.
#[derive(Clone)]
pub struct EscrowPeers {
    /// Heartbeat gaps: the evidence of a silent host.
    pub catalog: InternalClient,
    /// The tenant's monthly budget, checked at a charge or a resale.
    pub quota: InternalClient,
}

impl EscrowPeers {
    pub fn from_config(config: &Config) -> Self {
        let client = |base: &str| InternalClient::new(base, config.service_token.clone());
        Self {
            catalog: client(&config.url("catalog")),
            quota: client(&config.url("quota")),
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_in_zero_to_one() {
        assert_eq!(rate("X", "0.10").unwrap(), Decimal::new(10, 2));
        assert_eq!(rate("X", " 0 ").unwrap(), Decimal::ZERO);
        assert!(rate("X", "1").is_err());
        assert!(rate("X", "-0.1").is_err());
        assert!(rate("X", "ten").unwrap_err().to_string().contains("X"));
    }

    #[test]
    fn the_lag_covers_the_grace_and_a_sweep() {
        assert_eq!(settle_lag(120, 60, 5_000), 120);
        assert_eq!(settle_lag(30, 60, 5_000), 65);
        assert_eq!(settle_lag(0, 60, 100), 61);
    }
}
