//! Reserved capacity on the host's side: a machine's terms for blocks
//! (`setReservedTerms`), its booking calendar (`machineCalendar`, public
//! with the bookings for its host), the blocks booked on it
//! (`machineReservations`), a host's cancellation (`cancelReservation`,
//! refund plus the published penalty), and what is still to come to the
//! host from escrow (`Machine.reservedEarningsToCome`).

use std::collections::HashMap;

use async_graphql::{Context, ID, InputObject, Object, SimpleObject};
use chrono::{DateTime, Duration, Utc};
use contracts::endpoints;
use contracts::ids::{MachineId, ReservationId, TenantId};
use contracts::money::split_fee;
use contracts::reservations::{self as rsv, MAX_BLOCK_HOURS, MAX_LEAD_DAYS};
use rust_decimal::Decimal;

use super::{Reservation, ReservedTerms, Viewer};
use crate::auth::{self, Access};
use crate::clients;
use crate::error::{GatewayError, GqlResult};
use crate::validate;

/// The longest calendar one request reads (the catalog's bound).
const MAX_CALENDAR_DAYS: i64 = 31;

/// A host's terms for reserved blocks on a machine.
#[derive(InputObject)]
pub struct ReservedTermsInput {
    /// Per GPU-hour, 0 to 1000 with at most 9 decimal places.
    price_per_gpu_hour: Decimal,
    /// How far ahead the machine can be booked: 1 to 365 days.
    max_lead_days: i32,
    /// The shortest block, 1 to 2160 hours (90 days).
    min_block_hours: i32,
}

impl ReservedTermsInput {
    fn into_terms(self) -> Result<rsv::ReservedTermsInput, GatewayError> {
        validate::money(
            "pricePerGpuHour",
            self.price_per_gpu_hour,
            contracts::bounds::GPU_HOUR_PRICE,
        )?;
        validate::within("maxLeadDays", self.max_lead_days, 1, MAX_LEAD_DAYS)?;
        let longest = i32::try_from(MAX_BLOCK_HOURS).unwrap_or(i32::MAX);
        validate::within("minBlockHours", self.min_block_hours, 1, longest)?;
        // A shortest block that cannot end within the lead time could never
        // be booked.
        if i64::from(self.min_block_hours) > i64::from(self.max_lead_days) * 24 {
            return Err(GatewayError::validation(
                "minBlockHours",
                "must fit within maxLeadDays",
            ));
        }
        Ok(rsv::ReservedTermsInput {
            price_per_gpu_hour: self.price_per_gpu_hour,
            max_lead_days: self.max_lead_days,
            min_block_hours: self.min_block_hours,
        })
    }
}

/// Whole GPUs of the machine not booked in one hour.
#[derive(SimpleObject)]
pub struct CalendarHour {
    starts_at: DateTime<Utc>,
    free_gpus: i32,
}

/// One booked GPU over a period (the host's view only).
#[derive(SimpleObject)]
pub struct CalendarBooking {
    reservation_id: ID,
    gpu_index: i32,
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
    price_per_gpu_hour: Decimal,
}

/// A machine's GPU time over `[from, to)`, hour by hour.
#[derive(SimpleObject)]
pub struct MachineCalendar {
    machine_id: ID,
    gpu_count: i32,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    /// One entry per hour: the whole GPUs not booked in it.
    hours: Vec<CalendarHour>,
    /// Who booked which GPU when: for the machine's host only (empty for
    /// everyone else).
    bookings: Vec<CalendarBooking>,
    /// The machine's terms for blocks; null when it takes none.
    terms: Option<ReservedTerms>,
}

impl From<rsv::MachineCalendar> for MachineCalendar {
    fn from(c: rsv::MachineCalendar) -> Self {
        Self {
            machine_id: c.machine_id.into(),
            gpu_count: c.gpu_count,
            from: c.from,
            to: c.to,
            hours: c
                .hours
                .into_iter()
                .map(|h| CalendarHour {
                    starts_at: h.starts_at,
                    free_gpus: h.free_gpus,
                })
                .collect(),
            // The renter's tenant is left out: the host needs the block,
            // not who holds it.
            bookings: c
                .bookings
                .into_iter()
                .map(|b| CalendarBooking {
                    reservation_id: b.reservation_id.into(),
                    gpu_index: i32::try_from(b.gpu_index).unwrap_or(i32::MAX),
                    starts_at: b.starts_at,
                    ends_at: b.ends_at,
                    price_per_gpu_hour: b.price_per_gpu_hour,
                })
                .collect(),
            terms: c.terms.map(Into::into),
        }
    }
}

/// What a host is still to be paid from the escrows of blocks on a
/// machine, after the platform fee.
#[derive(SimpleObject, Clone)]
pub struct ReservedEarnings {
    /// The host's share of what remains in escrow: `remaining × (1 −
    /// feeRate)`, rounded half-even to 9 places. Silent hours are refunded
    /// to the renter instead, so this is what full attendance earns.
    amount: Decimal,
    currency: String,
    /// Blocks with money still in escrow.
    blocks: i32,
}

/// Each of a host's machines' reserved earnings to come, from one call for
/// the host's escrows and one for the fee rate.
pub(in crate::graphql) async fn reserved_earnings(
    ctx: &Context<'_>,
    host: TenantId,
) -> GqlResult<(HashMap<MachineId, ReservedEarnings>, ReservedEarnings)> {
    let clients = clients::from_context(ctx)?;
    let viewer = Viewer::Host(host);
    let (escrows, terms) = futures_util::future::try_join(
        clients
            .billing
            .call(endpoints::billing::ESCROW_LIST, (), &viewer.query()),
        clients
            .billing
            .call(endpoints::billing::RESERVATION_TERMS, (), &()),
    )
    .await?;
    let none = ReservedEarnings {
        amount: Decimal::ZERO,
        currency: terms.currency.clone(),
        blocks: 0,
    };
    Ok((
        earnings_to_come(&escrows, host, terms.fee_rate, &terms.currency),
        none,
    ))
}

/// The host's share of what remains in each machine's held escrows.
fn earnings_to_come(
    escrows: &[rsv::Escrow],
    host: TenantId,
    fee_rate: Decimal,
    currency: &str,
) -> HashMap<MachineId, ReservedEarnings> {
    let mut remaining: HashMap<MachineId, (Decimal, i32)> = HashMap::new();
    for e in escrows {
        if e.host_tenant_id != host
            || e.state != rsv::EscrowState::Held
            || e.remaining <= Decimal::ZERO
        {
            continue;
        }
        let entry = remaining.entry(e.machine_id).or_default();
        entry.0 += e.remaining;
        entry.1 += 1;
    }
    remaining
        .into_iter()
        .map(|(machine, (amount, blocks))| {
            (
                machine,
                ReservedEarnings {
                    amount: split_fee(amount, fee_rate).host,
                    currency: currency.to_owned(),
                    blocks,
                },
            )
        })
        .collect()
}

#[derive(Default)]
pub struct HostReservationsQuery;

#[Object]
impl HostReservationsQuery {
    /// A machine's GPU time hour by hour over `[from, to)` (at most 31
    /// days): free GPUs per hour and its terms for blocks. Any signed-in
    /// caller may read a listed machine's; its host also sees who booked
    /// which GPU (`bookings`), and its unlisted machines.
    #[graphql(
        complexity = "crate::graphql::extensions::limits::EXPENSIVE_FIELD + child_complexity"
    )]
    async fn machine_calendar(
        &self,
        ctx: &Context<'_>,
        machine_id: ID,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> GqlResult<MachineCalendar> {
        let principal = auth::principal(ctx).await?;
        let machine_id = MachineId(validate::id("machineId", &machine_id)?);
        if to <= from {
            return Err(GatewayError::validation("to", "must be after from").into());
        }
        if to - from > Duration::days(MAX_CALENDAR_DAYS) {
            return Err(GatewayError::validation(
                "to",
                format!("at most {MAX_CALENDAR_DAYS} days after from"),
            )
            .into());
        }
        // Bookings are asked for only as the machine's host: the catalog
        // shows them to the host it is given when the machine is its own.
        let host_tenant_id = Access::Host
            .check(&principal)
            .is_ok()
            .then_some(principal.tenant_id);
        let calendar = clients::from_context(ctx)?
            .catalog
            .call(
                endpoints::catalog::MACHINE_CALENDAR,
                machine_id,
                &rsv::CalendarQuery {
                    from,
                    to,
                    host_tenant_id,
                },
            )
            .await?;
        Ok(calendar.into())
    }

    /// The blocks booked on one of the caller's machines: booked, running,
    /// and ended in the last 31 days. Another host's machine is NOT_FOUND.
    async fn machine_reservations(
        &self,
        ctx: &Context<'_>,
        machine_id: ID,
    ) -> GqlResult<Vec<Reservation>> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let machine_id = MachineId(validate::id("machineId", &machine_id)?);
        let list = clients::from_context(ctx)?
            .ordering
            .call(
                endpoints::ordering::MACHINE_RESERVATIONS,
                machine_id,
                &rsv::MachineReservationsQuery {
                    host_tenant_id: principal.tenant_id,
                },
            )
            .await?;
        Reservation::list(ctx, list, Viewer::Host(principal.tenant_id)).await
    }
}

#[derive(Default)]
pub struct HostReservationsMutation;

#[Object]
impl HostReservationsMutation {
    /// Sets the caller's machine's terms for reserved blocks, or withdraws
    /// them (`terms` null or left out: no new bookings; blocks already
    /// booked stay). Answers the terms now in force (null once withdrawn).
    /// `VALIDATION` for a machine that cannot take blocks; `NOT_FOUND` for
    /// a machine that is not the caller's.
    async fn set_reserved_terms(
        &self,
        ctx: &Context<'_>,
        machine_id: ID,
        terms: Option<ReservedTermsInput>,
    ) -> GqlResult<Option<ReservedTerms>> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let machine_id = MachineId(validate::id("machineId", &machine_id)?);
        let terms = terms.map(ReservedTermsInput::into_terms).transpose()?;
        let set = clients::from_context(ctx)?
            .catalog
            .call(
                endpoints::catalog::SET_RESERVED_TERMS,
                machine_id,
                &rsv::SetReservedTermsRequest {
                    host_tenant_id: principal.tenant_id,
                    terms,
                },
            )
            .await?;
        Ok(set.map(Into::into))
    }

    /// Cancels a block booked on the caller's machine: what is not yet
    /// released goes back to its holder(s), and the host pays them the
    /// published penalty (`reservationTerms.cancellationPenaltyRate` of the
    /// refund) from its earnings. `reason` (at most 500 characters) is
    /// shown to the renter. `NOT_FOUND` for a reservation not on one of the
    /// caller's machines; `CONFLICT` once it is over or cancelled.
    async fn cancel_reservation(
        &self,
        ctx: &Context<'_>,
        id: ID,
        reason: String,
    ) -> GqlResult<Reservation> {
        let principal = auth::authorize(ctx, Access::Host).await?;
        let id = ReservationId(validate::id("id", &id)?);
        validate::text("reason", &reason, validate::MAX_REASON_LEN)?;
        let reservation = clients::from_context(ctx)?
            .ordering
            .call(
                endpoints::ordering::HOST_CANCEL_RESERVATION,
                id,
                &rsv::HostCancelRequest {
                    host_tenant_id: principal.tenant_id,
                    reason: reason.trim().to_owned(),
                },
            )
            .await?;
        Ok(Reservation::new(
            reservation,
            Viewer::Host(principal.tenant_id),
            Utc::now(),
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn escrow(host: TenantId, machine: MachineId, remaining: &str) -> rsv::Escrow {
        let at: DateTime<Utc> = "2027-01-04T10:00:00Z".parse().unwrap();
        rsv::Escrow {
            reservation_id: ReservationId(Uuid::now_v7()),
            renter_tenant_id: TenantId(Uuid::now_v7()),
            host_tenant_id: host,
            machine_id: machine,
            currency: "USD".into(),
            amount: Decimal::from(10),
            released: Decimal::ZERO,
            fees: Decimal::ZERO,
            refunded: Decimal::ZERO,
            penalty: Decimal::ZERO,
            remaining: remaining.parse().unwrap(),
            settled_until: at,
            starts_at: at,
            ends_at: at + Duration::hours(4),
            silent_seconds: 0,
            state: rsv::EscrowState::Held,
        }
    }

    #[test]
    fn earnings_to_come_are_the_hosts_share_of_held_escrow_per_machine() {
        let host = TenantId(Uuid::now_v7());
        let (a, b) = (MachineId(Uuid::now_v7()), MachineId(Uuid::now_v7()));
        let mut settled = escrow(host, a, "3");
        settled.state = rsv::EscrowState::Settled;
        let mut cancelled = escrow(host, a, "3");
        cancelled.state = rsv::EscrowState::Cancelled;
        let escrows = [
            escrow(host, a, "7.5"),
            escrow(host, a, "2.500000001"),
            escrow(host, b, "0"),
            settled,
            cancelled,
            // Not this host's: never counted.
            escrow(TenantId(Uuid::now_v7()), a, "100"),
        ];
        let fee: Decimal = "0.15".parse().unwrap();
        let to_come = earnings_to_come(&escrows, host, fee, "USD");
        let on_a = &to_come[&a];
        // (7.5 + 2.500000001) × 0.85 = 8.50000000085 → 8.500000001 (half-even, 9 places).
        assert_eq!(on_a.amount, "8.500000001".parse::<Decimal>().unwrap());
        assert_eq!(on_a.blocks, 2);
        assert_eq!(on_a.currency, "USD");
        assert!(!to_come.contains_key(&b), "nothing remains on b");
    }

    #[test]
    fn terms_are_bounded() {
        let input = |price: &str, lead: i32, min: i32| ReservedTermsInput {
            price_per_gpu_hour: price.parse().unwrap(),
            max_lead_days: lead,
            min_block_hours: min,
        };
        assert!(input("2.40", 30, 4).into_terms().is_ok());
        assert!(input("0", 365, 2160).into_terms().is_ok());
        let field = |r: Result<rsv::ReservedTermsInput, GatewayError>| match r.unwrap_err() {
            GatewayError::Validation { field, .. } => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(input("-1", 30, 4).into_terms()), "pricePerGpuHour");
        assert_eq!(
            field(input("1000.01", 30, 4).into_terms()),
            "pricePerGpuHour"
        );
        assert_eq!(field(input("1", 0, 4).into_terms()), "maxLeadDays");
        assert_eq!(field(input("1", 366, 4).into_terms()), "maxLeadDays");
        assert_eq!(field(input("1", 30, 0).into_terms()), "minBlockHours");
        assert_eq!(field(input("1", 365, 2161).into_terms()), "minBlockHours");
        assert_eq!(field(input("1", 1, 25).into_terms()), "minBlockHours");
    }
}
