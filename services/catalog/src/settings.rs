//! The catalog's own settings, read once per process
//! ([`platform::settings`]).

use std::time::Duration;

use platform::PlatformError;
use platform::settings::{ServiceSettings, parsed, var};

#[derive(Debug, Clone)]
pub struct CatalogSettings {
    /// The catalog's queue of agent reports, bound to `agent.*.inventory`,
    /// `agent.*.heartbeat` and `agent.*.self_test` (step results go to the
    /// provisioners' own queue). `GPUMARKET_AGENTS_QUEUE`.
    pub agents_queue: String,
    /// A machine is online iff its last heartbeat is younger than this; a
    /// silence longer than this is a heartbeat gap (downtime). At least 1.
    /// `GPUMARKET_HEARTBEAT_GRACE_SECONDS`.
    pub heartbeat_grace_seconds: i64,
    /// The rolling window reliability is computed over. At least 1.
    /// `GPUMARKET_RELIABILITY_WINDOW_DAYS`.
    pub reliability_window_days: i64,
    /// How often the catalog looks for silent machines and recomputes
    /// reliability. `GPUMARKET_OFFLINE_SWEEP_MS`.
    pub offline_sweep: Duration,
    /// How long per-heartbeat GPU utilisation is kept. Ordering reads the
    /// same variable as the longest idle-stop window a rule may ask for, so
    /// the two agree. `GPUMARKET_GPU_ACTIVITY_RETENTION_SECONDS`.
    pub gpu_activity_retention_seconds: i64,
    /// How often the catalog starts and ends reserved blocks and warns the
    /// rentals they will cut short (docs/reservations.md).
    /// `GPUMARKET_BLOCK_SWEEP_MS`.
    pub block_sweep: Duration,
}

/// How long GPU utilisation is kept when no configuration says otherwise.
pub const DEFAULT_GPU_ACTIVITY_RETENTION_SECONDS: i64 = 172_800;

impl ServiceSettings for CatalogSettings {
    fn from_env(_production: bool) -> Result<Self, PlatformError> {
        Ok(Self {
            agents_queue: var("GPUMARKET_AGENTS_QUEUE", "catalog.agents"),
            heartbeat_grace_seconds: parsed("GPUMARKET_HEARTBEAT_GRACE_SECONDS", 60i64)?.max(1),
            reliability_window_days: parsed("GPUMARKET_RELIABILITY_WINDOW_DAYS", 30i64)?.max(1),
            offline_sweep: Duration::from_millis(
                parsed("GPUMARKET_OFFLINE_SWEEP_MS", 5_000u64)?.max(100),
            ),
            gpu_activity_retention_seconds: parsed(
                "GPUMARKET_GPU_ACTIVITY_RETENTION_SECONDS",
                DEFAULT_GPU_ACTIVITY_RETENTION_SECONDS,
            )?,
            block_sweep: Duration::from_millis(
                parsed("GPUMARKET_BLOCK_SWEEP_MS", 1_000u64)?.max(100),
            ),
        })
    }
}
