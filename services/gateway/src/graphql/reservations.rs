//! Reserved capacity (issue 20, docs/reservations.md) as renters see it: a
//! block of whole UTC hours on GPUs of one machine, paid up front into
//! escrow (`reserve`, `reservations`, `reservation`), and the published
//! money terms (`reservationTerms`). The host's side (terms, calendar,
//! cancellation, earnings to come) is in [`hosting`], resale in [`resale`].
//!
//! Ordering owns the reservation and answers only the caller's tenant's (an
//! id of another tenant is `NOT_FOUND`, as a random one); billing owns the
//! escrow, whose endpoint takes no tenant, so the gateway asks for an
//! escrow only of a reservation ordering has just answered for the caller,
//! and checks the escrow's parties again before showing it.

mod hosting;
mod resale;

use std::collections::HashMap;

use async_graphql::{ComplexObject, Context, Enum, ID, InputObject, Object, SimpleObject};
use chrono::{DateTime, Duration, DurationRound, Utc};
use contracts::endpoints;
use contracts::ids::{MachineId, ReservationId, TeamId, TenantId};
use contracts::reservations::{self as rsv, ReservationState};
use contracts::{ErrorCode, api};
use rust_decimal::Decimal;

use super::rentals::PlacementConstraintsInput;
use crate::auth::{self, Access};
use crate::clients;
use crate::error::{GatewayError, GqlError, GqlResult};
use crate::validate;

pub(super) use hosting::reserved_earnings;
pub use hosting::{HostReservationsMutation, HostReservationsQuery, ReservedEarnings};
pub use resale::{ResaleMutation, ResaleQuery};

pub use contracts::reservations::ListingState;

/// A host's terms for reserved blocks on one machine.
#[derive(SimpleObject, Clone)]
pub struct ReservedTerms {
    /// What a renter pays per GPU-hour of a block, charged up front.
    price_per_gpu_hour: Decimal,
    /// A block must end within this many days of now.
    max_lead_days: i32,
    /// The shortest block, in hours.
    min_block_hours: i32,
    currency: String,
}

impl From<rsv::ReservedTerms> for ReservedTerms {
    fn from(t: rsv::ReservedTerms) -> Self {
        Self {
            price_per_gpu_hour: t.price_per_gpu_hour,
            max_lead_days: t.max_lead_days,
            min_block_hours: t.min_block_hours,
            currency: t.currency,
        }
    }
}

/// Whole hours `[startsAt, endsAt)`.
#[derive(SimpleObject, Clone, Copy)]
pub struct HourRange {
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
}

impl From<rsv::HourRange> for HourRange {
    fn from(r: rsv::HourRange) -> Self {
        Self {
            starts_at: r.starts_at,
            ends_at: r.ends_at,
        }
    }
}

/// Where an escrow is in its life.
#[derive(Enum, Clone, Copy, PartialEq, Eq)]
pub enum EscrowState {
    /// Charged; released to the host as the block runs.
    Held,
    /// The block is over and every second is released or refunded.
    Settled,
    /// Cancelled: what was not released went back to the holder(s).
    Cancelled,
}

impl From<rsv::EscrowState> for EscrowState {
    fn from(s: rsv::EscrowState) -> Self {
        match s {
            rsv::EscrowState::Held => EscrowState::Held,
            rsv::EscrowState::Settled => EscrowState::Settled,
            rsv::EscrowState::Cancelled => EscrowState::Cancelled,
        }
    }
}

/// A reservation's escrow, in `currency`. At every instant `amount =
/// released + fees + refunded + remaining`; the penalty a cancelling host
/// pays comes on top of the refund.
#[derive(SimpleObject, Clone)]
pub struct Escrow {
    currency: String,
    /// What the block was charged.
    amount: Decimal,
    /// Paid to the host so far (its share, after the platform fee).
    released: Decimal,
    /// The platform's fee on what was released.
    fees: Decimal,
    /// Given back: silent seconds of the host, and everything left on a
    /// cancellation.
    refunded: Decimal,
    /// What the host paid the renter for cancelling.
    penalty: Decimal,
    /// Still held.
    remaining: Decimal,
    /// Every second of the block before this instant is settled.
    settled_until: DateTime<Utc>,
    /// Seconds refunded because the host was not heard from.
    silent_seconds: i64,
    state: EscrowState,
}

impl From<rsv::Escrow> for Escrow {
    fn from(e: rsv::Escrow) -> Self {
        Self {
            currency: e.currency,
            amount: e.amount,
            released: e.released,
            fees: e.fees,
            refunded: e.refunded,
            penalty: e.penalty,
            remaining: e.remaining,
            settled_until: e.settled_until,
            silent_seconds: e.silent_seconds,
            state: e.state.into(),
        }
    }
}

/// Who a reservation is shown to: the escrow is shown to its renter, or to
/// the host of its machine, and to no one else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Viewer {
    Renter(TenantId),
    Host(TenantId),
}

impl Viewer {
    fn may_see(self, escrow: &rsv::Escrow) -> bool {
        match self {
            Viewer::Renter(tenant) => escrow.renter_tenant_id == tenant,
            Viewer::Host(tenant) => escrow.host_tenant_id == tenant,
        }
    }

    fn query(self) -> rsv::EscrowQuery {
        match self {
            Viewer::Renter(tenant) => rsv::EscrowQuery {
                renter_tenant_id: Some(tenant),
                host_tenant_id: None,
            },
            Viewer::Host(tenant) => rsv::EscrowQuery {
                renter_tenant_id: None,
                host_tenant_id: Some(tenant),
            },
        }
    }
}

/// How a reservation's `escrow` is answered.
#[derive(Clone)]
enum EscrowSlot {
    /// Bought on resale: its hours are paid from the parent's escrow, which
    /// belongs to the parent's holder.
    NotOwn,
    /// Fetched ahead for a whole list, in one call to billing (boxed: an
    /// escrow is large beside the other cases).
    Fetched(Box<Result<Option<rsv::Escrow>, GqlError>>),
    /// Asked for when selected.
    OnDemand(Viewer),
}

/// GPUs of one machine booked for a block of whole UTC hours, paid up
/// front. Launch instances on them while the block runs with
/// `createOrder(input: { reservationId })`.
#[derive(SimpleObject)]
#[graphql(complex)]
pub struct Reservation {
    id: ID,
    machine_id: ID,
    gpu_model: String,
    gpu_count: i32,
    /// The GPUs booked, by index on the machine (empty until booked).
    gpu_indices: Vec<i32>,
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
    /// The block's length in hours.
    hours: i32,
    /// Whole hours of the block not yet started and not sold on resale (0
    /// once cancelled, failed or ended).
    hours_left: i32,
    /// The reserved price committed at booking (or paid on resale).
    price_per_gpu_hour: Decimal,
    /// What the block cost: the escrow charge, or the resale price paid.
    amount: Decimal,
    currency: String,
    state: ReservationState,
    /// Bought on resale: the reservation the hours were carved from.
    parent_id: Option<ID>,
    /// Hours sold on resale: no longer this reservation's.
    sold: Vec<HourRange>,
    created_at: DateTime<Utc>,
    /// Why it failed or was cancelled.
    reason: Option<String>,
    #[graphql(skip)]
    reservation_id: ReservationId,
    #[graphql(skip)]
    escrow_slot: EscrowSlot,
}

#[ComplexObject]
impl Reservation {
    /// The money of the block: charged, released to the host, refunded,
    /// still held. Null for hours bought on resale (they are paid from the
    /// seller's escrow) and before the block is charged.
    async fn escrow(&self, ctx: &Context<'_>) -> GqlResult<Option<Escrow>> {
        let escrow = match &self.escrow_slot {
            EscrowSlot::NotOwn => None,
            EscrowSlot::Fetched(fetched) => fetched.as_ref().clone()?,
            EscrowSlot::OnDemand(viewer) => escrow_of(ctx, self.reservation_id, *viewer).await?,
        };
        Ok(escrow.map(Into::into))
    }
}

impl Reservation {
    fn new(r: rsv::Reservation, viewer: Viewer, now: DateTime<Utc>) -> Self {
        let slot = if r.parent_id.is_some() {
            EscrowSlot::NotOwn
        } else {
            EscrowSlot::OnDemand(viewer)
        };
        Self {
            id: r.id.into(),
            machine_id: r.machine_id.into(),
            hours: clamp_i32(rsv::hours(r.starts_at, r.ends_at)),
            hours_left: clamp_i32(hours_left(&r, now)),
            gpu_model: r.gpu_model,
            gpu_count: r.gpu_count,
            gpu_indices: r
                .gpu_indices
                .iter()
                .map(|&i| i32::try_from(i).unwrap_or(i32::MAX))
                .collect(),
            starts_at: r.starts_at,
            ends_at: r.ends_at,
            price_per_gpu_hour: r.price_per_gpu_hour,
            amount: r.amount,
            currency: r.currency,
            state: r.state,
            parent_id: r.parent_id.map(Into::into),
            sold: r.sold.into_iter().map(Into::into).collect(),
            created_at: r.created_at,
            reason: r.reason,
            reservation_id: r.id,
            escrow_slot: slot,
        }
    }

    /// Answers for `viewer`, the escrows of a whole list fetched ahead when
    /// `escrow` is selected: one call to billing, not one per reservation.
    async fn list(
        ctx: &Context<'_>,
        list: Vec<rsv::Reservation>,
        viewer: Viewer,
    ) -> GqlResult<Vec<Self>> {
        let now = Utc::now();
        let mut list: Vec<Self> = list
            .into_iter()
            .map(|r| Self::new(r, viewer, now))
            .collect();
        let wanted = list
            .iter()
            .any(|r| matches!(r.escrow_slot, EscrowSlot::OnDemand(_)));
        if wanted && ctx.look_ahead().field("escrow").exists() {
            let fetched = escrows_of(ctx, viewer).await;
            for reservation in &mut list {
                if matches!(reservation.escrow_slot, EscrowSlot::OnDemand(_)) {
                    let mine = match &fetched {
                        Ok(by_id) => Ok(by_id.get(&reservation.reservation_id).cloned()),
                        Err(e) => Err(e.clone()),
                    };
                    reservation.escrow_slot = EscrowSlot::Fetched(Box::new(mine));
                }
            }
        }
        Ok(list)
    }
}

fn clamp_i32(n: i64) -> i32 {
    i32::try_from(n.max(0)).unwrap_or(i32::MAX)
}

/// Whole hours of `[from, to)`, 0 when empty.
fn span_hours(from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
    if to <= from {
        0
    } else {
        (to - from).num_hours()
    }
}

/// The hours of the block that have not started by `now` and are still the
/// holder's: an hour that has begun is being used (or lost), and hours sold
/// on resale are the buyer's. Nothing is left of a block that is over,
/// cancelled or never booked.
fn hours_left(r: &rsv::Reservation, now: DateTime<Utc>) -> i64 {
    if matches!(
        r.state,
        ReservationState::Cancelled | ReservationState::Failed | ReservationState::Ended
    ) {
        return 0;
    }
    // The start of the next hour that has not begun: the hour under way at
    // `now` (or starting exactly at it) has begun.
    let next_hour = now
        .duration_trunc(Duration::hours(1))
        .map_or(now, |floor| floor + Duration::hours(1));
    let from = r.starts_at.max(next_hour);
    let left = span_hours(from, r.ends_at);
    let sold: i64 = r
        .sold
        .iter()
        .map(|s| span_hours(s.starts_at.max(from), s.ends_at.min(r.ends_at)))
        .sum();
    (left - sold).max(0)
}

/// One reservation's escrow, if `viewer` is one of its parties; null when
/// billing has none (not charged yet, or never).
async fn escrow_of(
    ctx: &Context<'_>,
    reservation_id: ReservationId,
    viewer: Viewer,
) -> GqlResult<Option<rsv::Escrow>> {
    let result = clients::from_context(ctx)?
        .billing
        .call(endpoints::billing::ESCROW, reservation_id, &())
        .await;
    match result {
        Ok(escrow) => Ok(Some(escrow).filter(|e| viewer.may_see(e))),
        Err(e) if e.code == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(GatewayError::from(e).into()),
    }
}

/// Every escrow of `viewer`'s tenant (as renter or as host), by reservation.
async fn escrows_of(
    ctx: &Context<'_>,
    viewer: Viewer,
) -> GqlResult<HashMap<ReservationId, rsv::Escrow>> {
    let escrows = clients::from_context(ctx)?
        .billing
        .call(endpoints::billing::ESCROW_LIST, (), &viewer.query())
        .await?;
    Ok(escrows
        .into_iter()
        // Billing answers only the asked tenant's; checked again because
        // the endpoint is not the caller's to trust with someone else's.
        .filter(|e| viewer.may_see(e))
        .map(|e| (e.reservation_id, e))
        .collect())
}

/// The published money terms of reserved blocks.
#[derive(SimpleObject)]
pub struct ReservationTerms {
    /// The settlement currency of escrows.
    currency: String,
    /// The platform's share of each escrow release (0 to 1).
    fee_rate: Decimal,
    /// What a cancelling host pays the renter, as a share of the refund.
    cancellation_penalty_rate: Decimal,
    /// The platform's share of a resale (0 to 1): the seller gets the
    /// price less this.
    resale_fee_rate: Decimal,
    /// How often escrow is released to the host, in seconds.
    settlement_interval_seconds: i64,
}

impl From<rsv::ReservationMoneyTerms> for ReservationTerms {
    fn from(t: rsv::ReservationMoneyTerms) -> Self {
        Self {
            currency: t.currency,
            fee_rate: t.fee_rate,
            cancellation_penalty_rate: t.cancellation_penalty_rate,
            resale_fee_rate: t.resale_fee_rate,
            settlement_interval_seconds: t.settlement_interval_seconds,
        }
    }
}

/// A block to book: GPUs of one offer, or of the cheapest offer matching
/// `constraints` whose terms allow the block; all or nothing.
#[derive(InputObject)]
pub struct ReserveInput {
    /// The offer (machine) to book; or give `constraints` instead.
    offer_id: Option<ID>,
    /// Auto-placement, as `createOrder`'s.
    constraints: Option<PlacementConstraintsInput>,
    /// Whole GPUs, 1 to 64.
    gpu_count: i32,
    /// A whole UTC hour in the future.
    starts_at: DateTime<Utc>,
    /// A whole UTC hour after `startsAt`: at least the machine's shortest
    /// block, at most 90 days, within the machine's lead time.
    ends_at: DateTime<Utc>,
    /// Refused with PRICE_ABOVE_MAX when the reserved price is then above it.
    max_price_per_gpu_hour: Option<Decimal>,
    /// Repeating a reservation with the same key returns the same one.
    idempotency_key: String,
    /// A team (project) of your tenant whose quota the GPUs count against too.
    team_id: Option<ID>,
}

impl ReserveInput {
    /// The checks that need no service; the catalog checks the block
    /// against the machine's terms and GPUs.
    fn into_request(
        self,
        principal: &api::Principal,
        now: DateTime<Utc>,
    ) -> Result<rsv::ReserveRequest, GatewayError> {
        let offer_id = self
            .offer_id
            .as_ref()
            .map(|id| validate::id("offerId", id).map(MachineId))
            .transpose()?;
        match (&offer_id, &self.constraints) {
            (Some(_), Some(_)) => {
                return Err(GatewayError::validation(
                    "offerId",
                    "give offerId or constraints, not both",
                ));
            }
            (None, None) => {
                return Err(GatewayError::validation(
                    "offerId",
                    "required (or give constraints)",
                ));
            }
            _ => {}
        }
        validate::within("gpuCount", self.gpu_count, 1, validate::MAX_GPU_COUNT)?;
        validate::block(self.starts_at, self.ends_at, now)?;
        validate::money_opt(
            "maxPricePerGpuHour",
            self.max_price_per_gpu_hour,
            contracts::bounds::GPU_HOUR_PRICE,
        )?;
        validate::idempotency_key("idempotencyKey", &self.idempotency_key)?;
        let team_id = self
            .team_id
            .as_ref()
            .map(|team| validate::id("teamId", team).map(TeamId))
            .transpose()?;
        Ok(rsv::ReserveRequest {
            tenant_id: principal.tenant_id,
            user_id: principal.user_id,
            idempotency_key: self.idempotency_key,
            offer_id,
            constraints: self.constraints.map(Into::into),
            gpu_count: self.gpu_count,
            starts_at: self.starts_at,
            ends_at: self.ends_at,
            max_price_per_gpu_hour: self.max_price_per_gpu_hour,
            team_id,
        })
    }
}

#[derive(Default)]
pub struct ReservationsQuery;

#[Object]
impl ReservationsQuery {
    /// The caller's reservations, newest block first (bought on resale
    /// included).
    async fn reservations(&self, ctx: &Context<'_>) -> GqlResult<Vec<Reservation>> {
        let principal = auth::authorize(ctx, Access::Reservations).await?;
        let list = clients::from_context(ctx)?
            .ordering
            .call(
                endpoints::ordering::RESERVATION_LIST,
                (),
                &rsv::ReservationQuery {
                    tenant_id: principal.tenant_id,
                },
            )
            .await?;
        Reservation::list(ctx, list, Viewer::Renter(principal.tenant_id)).await
    }

    /// One of the caller's reservations; another tenant's is NOT_FOUND.
    async fn reservation(&self, ctx: &Context<'_>, id: ID) -> GqlResult<Option<Reservation>> {
        let principal = auth::authorize(ctx, Access::Reservations).await?;
        let id = ReservationId(validate::id("id", &id)?);
        let reservation = clients::from_context(ctx)?
            .ordering
            .call(
                endpoints::ordering::RESERVATION,
                id,
                &rsv::ReservationQuery {
                    tenant_id: principal.tenant_id,
                },
            )
            .await?;
        Ok(Some(Reservation::new(
            reservation,
            Viewer::Renter(principal.tenant_id),
            Utc::now(),
        )))
    }

    /// The published money terms of reserved blocks: the platform fee on
    /// releases, the cancellation penalty, the resale fee and how often
    /// escrow is settled. Needs no login.
    async fn reservation_terms(&self, ctx: &Context<'_>) -> GqlResult<ReservationTerms> {
        let terms = clients::from_context(ctx)?
            .billing
            .call(endpoints::billing::RESERVATION_TERMS, (), &())
            .await?;
        Ok(terms.into())
    }
}

#[derive(Default)]
pub struct ReservationsMutation;

#[Object]
impl ReservationsMutation {
    /// Books whole GPUs of one machine for a future block of whole UTC
    /// hours and charges the block (`price × gpus × hours`) into escrow at
    /// once. `INSUFFICIENT_CAPACITY` when the GPUs are booked then,
    /// `INSUFFICIENT_FUNDS` without the balance, `PRICE_ABOVE_MAX`,
    /// `QUOTA_EXCEEDED`, `VALIDATION` for a block the machine's terms do
    /// not allow (or a machine that takes no reservations). A state of
    /// `FAILED` says why in `reason`; nothing is held then.
    async fn reserve(&self, ctx: &Context<'_>, input: ReserveInput) -> GqlResult<Reservation> {
        let principal = auth::authorize(ctx, Access::Rent).await?;
        let now = Utc::now();
        let request = input.into_request(&principal, now)?;
        let reservation = clients::from_context(ctx)?
            .ordering
            .call(endpoints::ordering::RESERVE, (), &request)
            .await?;
        Ok(Reservation::new(
            reservation,
            Viewer::Renter(principal.tenant_id),
            now,
        ))
    }
}

#[cfg(test)]
mod tests;
