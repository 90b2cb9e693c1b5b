//! Metering's internal endpoints.

use super::Endpoint;
use crate::api::{BurnRate, GpuInterval, IntervalLookupRequest, UsageInterval, UsageQuery};
use crate::ids::TenantId;

/// A tenant's usage intervals, optionally of one instance.
pub const USAGE: Endpoint<(), UsageQuery, Vec<UsageInterval>> = Endpoint::get("/internal/usage");

/// The GPU intervals of the instances named, for ordering's reconciler.
pub const INTERVALS_LOOKUP: Endpoint<(), IntervalLookupRequest, Vec<GpuInterval>> =
    Endpoint::post("/internal/intervals/lookup");

/// What the tenant's running rentals cost per hour now, for its runway.
pub const BURN_RATE: Endpoint<TenantId, (), BurnRate> =
    Endpoint::get("/internal/burn-rates/{tenant_id}");
