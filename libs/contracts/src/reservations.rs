//! Reserved capacity (issue 20, docs/reservations.md): a renter books whole
//! GPUs of one machine for a future block of whole UTC hours, pays the whole
//! block up front into escrow, and may resell future hours of it.
//!
//! Who owns what:
//! - **ordering** owns the reservation (the renter's record, its saga, its
//!   resale listings);
//! - **catalog** owns the GPU time: one booking row per reserved GPU index
//!   and period, under an exclusion constraint, and the block's hold on the
//!   GPUs while it runs;
//! - **billing** owns the money: the escrow, its releases to the host, its
//!   refunds and the resale transfers.
//!
//! This module holds the bodies those three exchange and the rules each of
//! them checks the same way (whole hours, block length, lead time).

use chrono::{DateTime, Duration, Timelike, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::api::PlacementConstraints;
use crate::ids::{MachineId, ResaleListingId, ReservationId, TeamId, TenantId};

/// The longest block one reservation may book (90 days).
pub const MAX_BLOCK_HOURS: i64 = 90 * 24;
/// The furthest ahead a host may let its machine be booked.
pub const MAX_LEAD_DAYS: i32 = 365;
/// How long before a block starts an instance on its GPUs is warned.
pub const WARNING_SECONDS: i64 = 15 * 60;

pub use crate::api::ReservedTerms;

/// What a host sets (`terms: None` stops new bookings; booked blocks stay).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetReservedTermsRequest {
    pub host_tenant_id: TenantId,
    pub terms: Option<ReservedTermsInput>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReservedTermsInput {
    pub price_per_gpu_hour: Decimal,
    pub max_lead_days: i32,
    pub min_block_hours: i32,
}

/// Why a block is refused, the same in every service: `None` when
/// `[starts_at, ends_at)` is whole UTC hours, in the future, at least
/// `min_block_hours` and at most [`MAX_BLOCK_HOURS`] long, and ends within
/// `max_lead_days` of `now`.
pub fn check_block(
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
    now: DateTime<Utc>,
    min_block_hours: i32,
    max_lead_days: i32,
) -> Option<String> {
    if !whole_hour(starts_at) || !whole_hour(ends_at) {
        return Some(
            "startsAt and endsAt must be whole UTC hours (minutes, seconds and fractions 0)".into(),
        );
    }
    if ends_at <= starts_at {
        return Some("endsAt must be after startsAt".into());
    }
    if starts_at <= now {
        return Some("startsAt must be in the future".into());
    }
    let hours = (ends_at - starts_at).num_hours();
    if hours > MAX_BLOCK_HOURS {
        return Some(format!("a block is at most {MAX_BLOCK_HOURS} hours"));
    }
    if hours < i64::from(min_block_hours) {
        return Some(format!(
            "this machine's shortest block is {min_block_hours} hours"
        ));
    }
    if ends_at > now + Duration::days(i64::from(max_lead_days)) {
        return Some(format!(
            "this machine can be booked at most {max_lead_days} days ahead"
        ));
    }
    None
}

/// True for an instant on a whole UTC hour.
pub fn whole_hour(at: DateTime<Utc>) -> bool {
    at.minute() == 0 && at.second() == 0 && at.nanosecond() == 0
}

/// The block's hours.
pub fn hours(starts_at: DateTime<Utc>, ends_at: DateTime<Utc>) -> i64 {
    (ends_at - starts_at).num_hours()
}

// ---------------------------------------------------------------- catalog

/// Books GPUs of a machine for a block (catalog; idempotent by reservation).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BookRequest {
    pub reservation_id: ReservationId,
    pub tenant_id: TenantId,
    pub machine_id: MachineId,
    pub gpu_count: i32,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    /// Refused with `PRICE_ABOVE_MAX` when the reserved price at commit is above it.
    pub max_price_per_gpu_hour: Option<Decimal>,
}

/// GPUs of one machine booked for one reservation's periods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Booking {
    pub reservation_id: ReservationId,
    pub tenant_id: TenantId,
    pub machine_id: MachineId,
    pub host_tenant_id: TenantId,
    pub gpu_model: String,
    /// The GPUs booked, by index on the machine.
    pub gpu_indices: Vec<u32>,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    /// The reserved price committed with the booking.
    pub price_per_gpu_hour: Decimal,
    pub currency: String,
    /// Storage and bandwidth rates of the machine at booking: what an
    /// instance launched in the block is metered at.
    pub storage_price_per_gb_month: Decimal,
    pub bandwidth_up_price_per_tb: Decimal,
    pub bandwidth_down_price_per_tb: Decimal,
    /// Hours carved out of this booking (sold on resale): `[start, end)`.
    #[serde(default)]
    pub carved: Vec<HourRange>,
    /// Set once the booking is cancelled: nothing from this instant on is booked.
    #[serde(default)]
    pub cancelled_from: Option<DateTime<Utc>>,
}

/// A range of whole hours, `[starts_at, ends_at)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HourRange {
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
}

/// Gives a booking's GPUs back from `from` on (catalog; idempotent).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CancelBookingRequest {
    /// Nothing at or after this instant stays booked (the part already run
    /// is history). `None`: now.
    #[serde(default)]
    pub from: Option<DateTime<Utc>>,
    pub reason: String,
}

/// Moves hours `[starts_at, ends_at)` of a booking to a new reservation
/// (a resale), on the same GPUs (catalog; idempotent by the child's id).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CarveBookingRequest {
    pub child_reservation_id: ReservationId,
    pub child_tenant_id: TenantId,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
}

/// A machine's booking calendar over `[from, to)` (at most 31 days).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CalendarQuery {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// The host asking: then `bookings` lists who booked what.
    #[serde(default)]
    pub host_tenant_id: Option<TenantId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineCalendar {
    pub machine_id: MachineId,
    pub gpu_count: i32,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// One entry per hour of `[from, to)`: whole GPUs not booked in it.
    pub hours: Vec<CalendarHour>,
    /// The host's view only: each booked GPU range.
    #[serde(default)]
    pub bookings: Vec<CalendarBooking>,
    pub terms: Option<ReservedTerms>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalendarHour {
    pub starts_at: DateTime<Utc>,
    pub free_gpus: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalendarBooking {
    pub reservation_id: ReservationId,
    pub tenant_id: TenantId,
    pub gpu_index: u32,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub price_per_gpu_hour: Decimal,
}

// ---------------------------------------------------------------- billing

/// Charges a whole block into escrow (billing; idempotent by reservation).
/// Refused with `INSUFFICIENT_FUNDS` when the balance does not cover
/// `amount`, `SPEND_CAP_EXCEEDED` when it would pass the month's cap.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EscrowChargeRequest {
    pub reservation_id: ReservationId,
    pub renter_tenant_id: TenantId,
    pub host_tenant_id: TenantId,
    pub machine_id: MachineId,
    pub gpu_count: i32,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub price_per_gpu_hour: Decimal,
    /// `price_per_gpu_hour × gpu_count × hours`, exact; billing checks it.
    pub amount: Decimal,
    pub currency: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EscrowState {
    /// Charged; released to the host as the block runs.
    Held,
    /// The block is over and every second is released or refunded.
    Settled,
    /// Cancelled: what was not released went back to the holder.
    Cancelled,
}

/// One reservation's escrow, in the settlement currency. Conservation:
/// `amount = released + fees + refunded + remaining` (`released` is the
/// host's share, `fees` the platform's); the penalty is paid by the host on
/// top of the refund.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Escrow {
    pub reservation_id: ReservationId,
    pub renter_tenant_id: TenantId,
    pub host_tenant_id: TenantId,
    pub machine_id: MachineId,
    pub currency: String,
    pub amount: Decimal,
    pub released: Decimal,
    pub fees: Decimal,
    pub refunded: Decimal,
    pub penalty: Decimal,
    pub remaining: Decimal,
    /// Every second of the block before this instant is settled.
    pub settled_until: DateTime<Utc>,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    /// Seconds refunded because the host was silent.
    pub silent_seconds: i64,
    pub state: EscrowState,
}

/// Cancels an escrow at `at` (billing; idempotent): everything not released
/// for the seconds before `at` goes back to the holder of each hour; when
/// the host cancelled (`by_host`) the host also pays the published penalty
/// (`penalty_rate` × what is refunded) to the renter.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EscrowCancelRequest {
    pub at: DateTime<Utc>,
    pub by_host: bool,
    pub reason: String,
}

/// Which escrows: a renter's (`renter_tenant_id`) or a host's.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EscrowQuery {
    #[serde(default)]
    pub renter_tenant_id: Option<TenantId>,
    #[serde(default)]
    pub host_tenant_id: Option<TenantId>,
}

/// The buyer pays the seller for hours of a reservation (billing;
/// idempotent by `listing_id`). Refused with `INSUFFICIENT_FUNDS` when the
/// buyer's balance does not cover `amount`. From then on refunds for
/// silent seconds of those hours go to the buyer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResaleTransferRequest {
    pub listing_id: ResaleListingId,
    /// The escrow the hours are paid from: the original reservation's.
    pub escrow_reservation_id: ReservationId,
    pub child_reservation_id: ReservationId,
    pub buyer_tenant_id: TenantId,
    pub seller_tenant_id: TenantId,
    pub amount: Decimal,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResaleTransfer {
    pub listing_id: ResaleListingId,
    pub amount: Decimal,
    /// What the seller got: `amount − fee`.
    pub seller_credit: Decimal,
    pub fee: Decimal,
}

/// Published money terms of reservations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReservationMoneyTerms {
    pub currency: String,
    /// The platform's share of each escrow release.
    pub fee_rate: Decimal,
    /// What a host pays the renter on cancelling, as a share of the refund.
    pub cancellation_penalty_rate: Decimal,
    /// The platform's share of a resale.
    pub resale_fee_rate: Decimal,
    /// How often escrow is released, in seconds.
    pub settlement_interval_seconds: i64,
}

// ---------------------------------------------------------------- ordering

/// `reserve`: GPUs of an offer (or the cheapest offer matching
/// `constraints`) for `[starts_at, ends_at)`, all or nothing.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReserveRequest {
    pub tenant_id: TenantId,
    pub user_id: Uuid,
    pub idempotency_key: String,
    pub offer_id: Option<MachineId>,
    #[serde(default)]
    pub constraints: Option<PlacementConstraints>,
    pub gpu_count: i32,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub max_price_per_gpu_hour: Option<Decimal>,
    #[serde(default)]
    pub team_id: Option<TeamId>,
}

pub use crate::block_end::WhenBlockEnds;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "graphql", derive(async_graphql::Enum))]
pub enum ReservationState {
    /// Being booked (the saga has not finished).
    Pending,
    /// Paid; the block has not started.
    Booked,
    /// The block is running.
    Active,
    /// The block is over.
    Ended,
    /// Cancelled by the host, or its machine left the market.
    Cancelled,
    /// Refused (no capacity, no funds, over quota); nothing is held.
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reservation {
    pub id: ReservationId,
    pub tenant_id: TenantId,
    pub machine_id: MachineId,
    pub host_tenant_id: TenantId,
    pub gpu_model: String,
    pub gpu_count: i32,
    pub gpu_indices: Vec<u32>,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub price_per_gpu_hour: Decimal,
    /// What the block cost: the escrow charge, or the resale price paid.
    pub amount: Decimal,
    pub currency: String,
    pub state: ReservationState,
    /// Bought on resale: the reservation the hours were carved from.
    pub parent_id: Option<ReservationId>,
    /// Hours sold on resale (no longer this reservation's).
    pub sold: Vec<HourRange>,
    pub created_at: DateTime<Utc>,
    pub reason: Option<String>,
}

/// A holder offers future whole hours of a reservation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateListingRequest {
    pub tenant_id: TenantId,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    /// The asking price per GPU-hour; the buyer pays
    /// `price × gpu_count × hours`.
    pub price_per_gpu_hour: Decimal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "graphql", derive(async_graphql::Enum))]
pub enum ListingState {
    Open,
    /// A purchase is under way (its saga holds the listing).
    Selling,
    Sold,
    Withdrawn,
    /// Its hours started before anyone bought them, or the reservation ended.
    Expired,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResaleListing {
    pub id: ResaleListingId,
    pub reservation_id: ReservationId,
    pub machine_id: MachineId,
    pub gpu_model: String,
    pub gpu_count: i32,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub price_per_gpu_hour: Decimal,
    /// `price × gpu_count × hours`.
    pub amount: Decimal,
    pub currency: String,
    pub state: ListingState,
    /// The seller's own view only.
    #[serde(default)]
    pub seller_tenant_id: Option<TenantId>,
    pub created_at: DateTime<Utc>,
}

/// Open listings, for buyers: optionally of one GPU model, starting no
/// earlier than `from`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ListingSearch {
    #[serde(default)]
    pub gpu_model: Option<String>,
    #[serde(default)]
    pub from: Option<DateTime<Utc>>,
    #[serde(default)]
    pub min_gpus: Option<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuyListingRequest {
    pub tenant_id: TenantId,
    pub user_id: Uuid,
    pub idempotency_key: String,
}

/// Who acts on a reservation: its holder (`tenant_id`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReservationQuery {
    pub tenant_id: TenantId,
}

/// A host cancels a block on its machine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostCancelRequest {
    pub host_tenant_id: TenantId,
    pub reason: String,
}

/// A host's machine's reservations (booked, running, and ended in the last
/// 31 days).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MachineReservationsQuery {
    pub host_tenant_id: TenantId,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2027, 1, 4, h, m, 0)
            .single()
            .expect("valid")
    }

    #[test]
    fn blocks_are_whole_future_hours_within_terms() {
        let now = at(9, 30);
        assert_eq!(check_block(at(10, 0), at(14, 0), now, 1, 30), None);
        assert!(check_block(at(10, 30), at(14, 0), now, 1, 30).is_some());
        assert!(check_block(at(9, 0), at(14, 0), now, 1, 30).is_some());
        assert!(check_block(at(14, 0), at(10, 0), now, 1, 30).is_some());
        assert!(check_block(at(10, 0), at(12, 0), now, 4, 30).is_some());
        let far = now + Duration::days(40);
        let far = far - Duration::minutes(30);
        assert!(check_block(at(10, 0), far, now, 1, 30).is_some());
        assert_eq!(hours(at(10, 0), at(14, 0)), 4);
    }
}
