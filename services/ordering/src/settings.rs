//! Ordering's own settings, read once per process ([`platform::settings`]).

use std::time::Duration;

use chrono::TimeDelta;
use platform::PlatformError;
use platform::settings::{ServiceSettings, parsed, var};

#[derive(Debug, Clone)]
pub struct OrderingSettings {
    /// Ordering's queue of catalog and billing events (preemptions, exits,
    /// disk usage, exhausted balances). `GPUMARKET_ORDERING_QUEUE`.
    pub queue: String,
    /// Seconds of burn a renter's balance must cover to start an order.
    /// `GPUMARKET_MIN_RUNWAY_SECONDS`.
    pub min_runway_seconds: i64,
    /// How often the rules task looks for instances whose lifecycle rules
    /// are due (at least 50 ms). `GPUMARKET_RULES_TICK_MS`.
    pub rules_tick: Duration,
    /// How long before a lifecycle rule acts its `rule_warning` event is
    /// published. `GPUMARKET_RULES_WARNING_LEAD_SECONDS`.
    pub rules_warning_lead: TimeDelta,
    /// The longest idle-stop window a rule may ask for: how long the
    /// catalog keeps GPU utilisation, read from the same variable.
    /// `GPUMARKET_GPU_ACTIVITY_RETENTION_SECONDS`.
    pub gpu_activity_retention_seconds: i64,
    /// How often the reconciler compares instances with the catalog's
    /// heartbeats and metering's intervals (at least 50 ms).
    /// `GPUMARKET_RECONCILE_INTERVAL_MS`.
    pub reconcile_interval: Duration,
    /// How old a change must be before the reconciler repairs what it
    /// should have caused, so the normal outbox path gets there first.
    /// `GPUMARKET_RECONCILE_SETTLE_SECONDS`.
    pub reconcile_settle_seconds: i64,
}

impl ServiceSettings for OrderingSettings {
    fn from_env(_production: bool) -> Result<Self, PlatformError> {
        Ok(Self {
            queue: var("GPUMARKET_ORDERING_QUEUE", "ordering.catalog"),
            min_runway_seconds: parsed("GPUMARKET_MIN_RUNWAY_SECONDS", 600i64)?.max(0),
            rules_tick: Duration::from_millis(parsed("GPUMARKET_RULES_TICK_MS", 1_000u64)?.max(50)),
            rules_warning_lead: TimeDelta::seconds(
                parsed("GPUMARKET_RULES_WARNING_LEAD_SECONDS", 300i64)?.max(0),
            ),
            gpu_activity_retention_seconds: parsed(
                "GPUMARKET_GPU_ACTIVITY_RETENTION_SECONDS",
                172_800i64,
            )?,
            reconcile_interval: Duration::from_millis(
                parsed("GPUMARKET_RECONCILE_INTERVAL_MS", 5_000u64)?.max(50),
            ),
            reconcile_settle_seconds: parsed("GPUMARKET_RECONCILE_SETTLE_SECONDS", 30i64)?.max(0),
        })
    }
}
