//! Metering's own settings (`GPUMARKET_METERING_*` and the settlement
//! interval), read once per process ([`platform::settings`]).

use std::time::Duration;

use platform::PlatformError;
use platform::settings::{ServiceSettings, parsed, var};

#[derive(Debug, Clone)]
pub struct MeteringSettings {
    /// Metering's queue of instance events and traffic reports.
    /// `GPUMARKET_METERING_QUEUE`.
    pub queue: String,
    /// How often running intervals are settled (their accrued usage posted):
    /// the bound on how far a renter can overdraw. At least 100 ms.
    /// `GPUMARKET_SETTLEMENT_INTERVAL_MS`.
    pub settlement_interval: Duration,
}

impl ServiceSettings for MeteringSettings {
    fn from_env(_production: bool) -> Result<Self, PlatformError> {
        Ok(Self {
            queue: var("GPUMARKET_METERING_QUEUE", "metering.lifecycle"),
            settlement_interval: Duration::from_millis(
                parsed("GPUMARKET_SETTLEMENT_INTERVAL_MS", 10_000u64)?.max(100),
            ),
        })
    }
}
