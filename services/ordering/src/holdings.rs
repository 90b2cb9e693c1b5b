//! Holdings: what an order (or a later provisioning attempt, by its holding
//! key, [`crate::store::holding_key`]) holds in other services, the GPUs in
//! catalog and the quota reservation in quota, and how they are found,
//! taken and given back. The saga, re-placement, exits, preemption and the
//! lifecycle workflows all use these; none of them is used here.

use contracts::ErrorCode;
use contracts::api::{
    AllocateRequest, CreateOrderRequest, Offer, OfferSearch, OfferSort, PlacementSearch, RentalType,
};
use contracts::endpoints;
use contracts::ids::{MachineId, OrderId};
use diesel::prelude::*;
use platform::internal::RemoteError;
use rust_decimal::Decimal;
use schema::ordering::preemptions;
use uuid::Uuid;

use crate::{Deps, Error};

/// Offers an order by constraints tries before it gives up: each lost race
/// (the offer's GPUs taken, or its price raised above the order's maximum)
/// moves on to the next cheapest.
pub(crate) const PLACEMENT_ATTEMPTS: usize = 5;

/// The disk an order gets when it names none: enough for an OS image and a
/// small working set, and cheap (it is billed until the instance is
/// destroyed).
pub const DEFAULT_DISK_GIB: i32 = 20;

/// The disk an order asks for.
pub(crate) fn disk_gib(req: &CreateOrderRequest) -> i32 {
    req.disk_gib.unwrap_or(DEFAULT_DISK_GIB)
}

/// The cheapest live offers matching an order's constraints that have its
/// GPUs free or held by interruptible rentals it outranks, best first.
pub(crate) async fn candidates(deps: &Deps, req: &CreateOrderRequest) -> Result<Vec<Offer>, Error> {
    let c = req.constraints.clone().unwrap_or_default();
    let search = OfferSearch {
        gpu_models: c.gpu_models,
        gpu_count: Some(req.gpu_count),
        min_vram_gib: c.min_vram_gib,
        // For interruptible searches the catalog compares it with the minimum bid.
        max_price_per_gpu_hour: match req.rental_type {
            RentalType::OnDemand => req.max_price_per_gpu_hour,
            RentalType::Interruptible => req.bid_per_gpu_hour,
        },
        rental_type: Some(req.rental_type),
        countries: c.countries,
        regions: c.regions,
        min_reliability: c.min_reliability,
        min_disk_gib: Some(disk_gib(req)),
        // A slice order: offers with a free slice of the profile, cheapest
        // slice first.
        mig_profile: req.mig_profile.clone(),
        sort: Some(OfferSort::Price),
        first: Some((PLACEMENT_ATTEMPTS * 2) as i64),
        ..Default::default()
    };
    let offers = deps
        .catalog
        .call(
            endpoints::catalog::OFFER_PLACEMENT,
            (),
            &PlacementSearch {
                search,
                bid_per_gpu_hour: req.bid_per_gpu_hour,
            },
        )
        .await?;
    Ok(offers)
}

/// The allocate request for `machine_id`: the price ceiling is the order's
/// maximum, or else the price it was quoted, so a host's raise between quote
/// and commit is refused (`PRICE_ABOVE_MAX`) instead of billed.
pub(crate) fn allocate_request(
    order_id: OrderId,
    req: &CreateOrderRequest,
    machine_id: MachineId,
    quoted: Decimal,
) -> AllocateRequest {
    AllocateRequest {
        continue_up_to_per_gpu_hour: Default::default(),
        reservation_id: Default::default(),
        mig_profile: req.mig_profile.clone(),
        order_id,
        tenant_id: req.tenant_id,
        machine_id,
        gpu_count: req.gpu_count,
        rental_type: req.rental_type,
        bid_per_gpu_hour: req.bid_per_gpu_hour,
        max_price_per_gpu_hour: match req.rental_type {
            RentalType::OnDemand => Some(req.max_price_per_gpu_hour.unwrap_or(quoted)),
            RentalType::Interruptible => None,
        },
        instance_id: None,
    }
}

/// Whether an allocation on a searched offer lost a race for it (its GPUs
/// went, its price or minimum bid rose, or it left the market since the
/// search), so the next offer is worth trying.
pub(crate) fn lost_race(e: &RemoteError) -> bool {
    matches!(
        e.code,
        ErrorCode::InsufficientCapacity
            | ErrorCode::PriceAboveMax
            | ErrorCode::NotFound
            | ErrorCode::Validation
    )
}

/// Gives back what a holding key (an order id, or a later provisioning attempt's key, see
/// [`crate::instances::holding_key`]) holds: its GPUs, then its quota. Both
/// calls are idempotent, so this is safe to repeat.
pub async fn release_holdings(deps: &Deps, order_id: OrderId) -> Result<(), Error> {
    release_gpus(deps, order_id.into()).await?;
    release_quota(deps, order_id.into()).await
}

/// Gives back a holding key's GPUs (idempotent).
pub async fn release_gpus(deps: &Deps, key: Uuid) -> Result<(), Error> {
    deps.catalog
        .call(endpoints::catalog::RELEASE_ALLOCATION, OrderId(key), &())
        .await?;
    Ok(())
}

/// Gives back a holding key's quota reservation (idempotent).
pub async fn release_quota(deps: &Deps, key: Uuid) -> Result<(), Error> {
    deps.quota
        .call(
            contracts::endpoints::quota::RESERVATION_RELEASE,
            OrderId(key),
            &(),
        )
        .await?;
    Ok(())
}

/// Whether `key`'s GPUs were taken back by the catalog.
pub fn preempted(conn: &mut PgConnection, key: Uuid) -> QueryResult<bool> {
    diesel::select(diesel::dsl::exists(preemptions::table.find(key))).get_result(conn)
}
