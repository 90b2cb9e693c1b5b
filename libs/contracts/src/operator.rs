//! Bodies of the internal reads behind the operators' marketplace overview
//! (docs/dashboards.md, "Operator overview"). Each service answers for what
//! it owns: billing the money (volume, fees, balances, runway), the catalog
//! the GPU supply, quota the tenants' use of their limits. The gateway only
//! puts the answers side by side.

use crate::ids::TenantId;
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::api::SeriesBucket;

// ---------------------------------------------------------------- billing

/// `[from, to)` in buckets of `bucket` (UTC).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MarketVolumeQuery {
    pub bucket: SeriesBucket,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

/// One bucket of marketplace money. Usage counts where its segment started
/// (as in the renters' and hosts' dashboards); other postings on the fee
/// account count where they were posted.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MarketVolumePoint {
    pub bucket_start: DateTime<Utc>,
    /// What renters were charged for usage: the renter legs, as a positive
    /// amount (corrections included).
    pub volume: Decimal,
    /// The hosts' legs of the same postings.
    pub host_earnings: Decimal,
    /// The platform fee legs of the same postings: `volume − hostEarnings`.
    pub fees: Decimal,
    /// Every other posting on the platform fee account (credit notes, which
    /// refund renters from the platform's revenue), signed.
    pub fee_adjustments: Decimal,
    /// Usage postings summed into the bucket.
    pub postings: i64,
    pub seconds: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MarketVolume {
    pub bucket: SeriesBucket,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub currency: String,
    /// By bucket start; buckets with nothing have no point.
    pub points: Vec<MarketVolumePoint>,
    pub total_volume: Decimal,
    pub total_host_earnings: Decimal,
    pub total_fees: Decimal,
    pub total_fee_adjustments: Decimal,
    pub total_postings: i64,
    pub total_seconds: i64,
}

/// A renter whose balance is gone or whose runway is below billing's
/// low-runway threshold.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CreditRisk {
    pub tenant_id: TenantId,
    pub balance: Decimal,
    /// The burn and runway of the low-runway warning in force, if any (as
    /// billing measured them when it raised the warning).
    pub burn_per_hour: Option<Decimal>,
    pub runway_seconds: Option<i64>,
    pub low_since: Option<DateTime<Utc>>,
    /// The tenant's latest usage posting, if any.
    pub last_charged_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CreditRisks {
    pub currency: String,
    /// Lowest balance first.
    pub tenants: Vec<CreditRisk>,
}

/// At most this many tenants per list: an overview, not an export.
pub const MAX_LISTED_TENANTS: usize = 200;

// ---------------------------------------------------------------- catalog

/// GPUs of one model: on listed machines, of those on machines heard from
/// within the heartbeat grace, and held by live allocations (rentals).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuSupplyModel {
    pub gpu_model: String,
    pub listed_machines: i64,
    pub listed_gpus: i64,
    pub online_gpus: i64,
    /// GPUs allocated now, on any machine of the model (a machine unlisted
    /// under a running rental still rents its GPUs).
    pub rented_gpus: i64,
    /// Of `rented_gpus`, those on listed machines.
    pub rented_listed_gpus: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuSupply {
    pub at: DateTime<Utc>,
    /// By model name.
    pub models: Vec<GpuSupplyModel>,
    pub listed_gpus: i64,
    pub online_gpus: i64,
    pub rented_gpus: i64,
    pub rented_listed_gpus: i64,
}

// ---------------------------------------------------------------- quota

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuotaPressureQuery {
    /// A dimension is listed at or above this share of its limit (1..=100).
    pub threshold_percent: u32,
}

/// One limited dimension of a tenant at or above the threshold.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QuotaPressureDimension {
    /// `max_gpus`, `max_gpus_per_model:<model>`, `max_running_instances`
    /// or `monthly_budget` (as in quota refusals).
    pub quota: String,
    pub limit: Decimal,
    /// For the budget, the projected month spend the admission check uses.
    pub used: Decimal,
    /// `used / limit × 100`, rounded half-even to one decimal.
    pub percent: Decimal,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QuotaPressureTenant {
    pub tenant_id: TenantId,
    pub tenant_name: String,
    /// Highest share first.
    pub dimensions: Vec<QuotaPressureDimension>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QuotaPressure {
    pub threshold_percent: u32,
    pub currency: String,
    /// Highest share first.
    pub tenants: Vec<QuotaPressureTenant>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TenantNamesRequest {
    pub tenant_ids: Vec<TenantId>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TenantName {
    pub tenant_id: TenantId,
    pub name: String,
}
