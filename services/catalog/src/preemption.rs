//! Which interruptible allocations give way when an order needs GPUs a
//! machine does not have free. The catalog decides, as the only writer of
//! capacity, inside the allocation transaction that holds the machine's row
//! lock: the victims' GPUs move to the newcomer in one commit, so nothing is
//! ever double-booked and a preemption without its newcomer cannot happen.
//!
//! Priority: on-demand outranks every interruptible allocation; an
//! interruptible order outranks only strictly lower bids (an equal bid does
//! not preempt, so two renters bidding the same cannot evict each other in a
//! loop). The lowest bids go first; among equal bids the most recent holding
//! goes first, so the longest-running work survives longest. Only as many as
//! needed are chosen, and none if even all of them would not be enough.

use chrono::{DateTime, Utc};
use contracts::Envelope;
use contracts::api::RentalType;
use contracts::events::{ALLOCATION_PREEMPTED, AllocationPreempted};
use contracts::ids::{InstanceId, MachineId, OrderId, TenantId};
use diesel::prelude::*;
use rust_decimal::Decimal;
use schema::catalog::allocations;
use uuid::Uuid;

use crate::{Error, SCHEMA};

/// A live interruptible allocation that could give way.
#[derive(Debug, Clone, PartialEq, Queryable)]
pub struct Holding {
    pub order_id: OrderId,
    pub tenant_id: TenantId,
    pub instance_id: Option<Uuid>,
    pub gpu_count: i32,
    pub bid_per_gpu_hour: Option<Decimal>,
    pub created_at: DateTime<Utc>,
}

/// The holdings to preempt so that `needed` more GPUs become free, from
/// `holdings` already sorted lowest bid first (then newest first); empty when
/// nothing needs to give way, `None` when even all eligible ones are not enough.
pub fn choose(
    holdings: &[Holding],
    rental_type: RentalType,
    bid: Option<Decimal>,
    needed: i32,
) -> Option<Vec<Holding>> {
    if needed <= 0 {
        return Some(Vec::new());
    }
    let outranks = |h: &Holding| match rental_type {
        RentalType::OnDemand => true,
        RentalType::Interruptible => match (bid, h.bid_per_gpu_hour) {
            (Some(mine), Some(theirs)) => theirs < mine,
            _ => false,
        },
    };
    let mut chosen = Vec::new();
    let mut freed = 0;
    for holding in holdings.iter().filter(|h| outranks(h)) {
        chosen.push(holding.clone());
        freed += holding.gpu_count;
        if freed >= needed {
            return Some(chosen);
        }
    }
    None
}

/// Live interruptible allocations on `machine_id`, lowest bid first, then
/// the most recent first. Call with the machine's row locked.
pub fn holdings(conn: &mut PgConnection, machine_id: MachineId) -> QueryResult<Vec<Holding>> {
    allocations::table
        .filter(allocations::machine_id.eq(machine_id))
        .filter(allocations::released_at.is_null())
        .filter(allocations::rental_type.eq(RentalType::Interruptible.as_str()))
        .order((
            allocations::bid_per_gpu_hour.asc(),
            allocations::created_at.desc(),
            allocations::order_id.desc(),
        ))
        .select((
            allocations::order_id,
            allocations::tenant_id,
            allocations::instance_id,
            allocations::gpu_count,
            allocations::bid_per_gpu_hour,
            allocations::created_at,
        ))
        .load(conn)
}

/// Why an order of higher priority preempts.
pub const OUTRANKED: &str = "preempted by an order of higher priority (on-demand or a higher bid)";

/// Ends `victim`'s allocation at `at` for an order of higher priority and
/// announces it through the outbox, in the caller's transaction. Returns
/// the GPUs it gave back.
pub fn preempt(
    conn: &mut PgConnection,
    events_exchange: &str,
    machine_id: MachineId,
    victim: &Holding,
    by: Uuid,
    at: DateTime<Utc>,
) -> Result<i32, Error> {
    preempt_for(conn, events_exchange, machine_id, victim, by, at, OUTRANKED)
}

/// [`preempt`] for any `reason`: a reserved block starting or ending, or
/// its cancellation (docs/reservations.md), take GPUs back the same way,
/// so ordering stops the instance and billing ends at `at` alike.
pub fn preempt_for(
    conn: &mut PgConnection,
    events_exchange: &str,
    machine_id: MachineId,
    victim: &Holding,
    by: Uuid,
    at: DateTime<Utc>,
    reason: &str,
) -> Result<i32, Error> {
    let updated = diesel::update(allocations::table.find(victim.order_id))
        .filter(allocations::released_at.is_null())
        .set((
            allocations::released_at.eq(at),
            allocations::preempted_at.eq(at),
            allocations::preempted_by.eq(by),
        ))
        .execute(conn)?;
    if updated != 1 {
        // The machine row lock makes this impossible; refuse rather than
        // hand out GPUs that were not taken back.
        return Err(Error::Conflict(
            "allocation changed concurrently; retry".into(),
        ));
    }
    crate::mig::release_holds(conn, victim.order_id)?;
    crate::block_allocations::release_uses(conn, victim.order_id)?;
    let event = AllocationPreempted {
        allocation_key: victim.order_id.into(),
        instance_id: victim.instance_id.map(InstanceId),
        tenant_id: victim.tenant_id,
        machine_id,
        gpu_count: victim.gpu_count,
        bid_per_gpu_hour: victim.bid_per_gpu_hour.unwrap_or_default(),
        preempted_at: at,
        notice_seconds: 0,
        reason: reason.to_owned(),
        preempted_by: by,
    };
    let envelope = Envelope::new(
        contracts::events::kinds::ALLOCATION_PREEMPTED,
        at,
        Some(victim.tenant_id),
        platform::http::current_correlation_id(),
        &event,
    )
    .map_err(platform::PlatformError::from)?;
    platform::outbox::enqueue(
        conn,
        SCHEMA,
        events_exchange,
        ALLOCATION_PREEMPTED,
        &envelope,
    )?;
    tracing::info!(allocation = %victim.order_id, machine.id = %machine_id, by = %by, reason, "allocation preempted");
    Ok(victim.gpu_count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(bid: &str, gpus: i32) -> Holding {
        Holding {
            order_id: OrderId::new(),
            tenant_id: TenantId::default(),
            instance_id: None,
            gpu_count: gpus,
            bid_per_gpu_hour: Some(bid.parse().unwrap()),
            created_at: Utc::now(),
        }
    }

    #[test]
    fn on_demand_takes_the_lowest_bids_it_needs_and_no_more() {
        let hs = vec![holding("0.3", 1), holding("0.4", 2), holding("0.9", 1)];
        let chosen = choose(&hs, RentalType::OnDemand, None, 2).unwrap();
        assert_eq!(chosen, hs[..2].to_vec());
        assert_eq!(choose(&hs, RentalType::OnDemand, None, 0).unwrap(), vec![]);
        assert_eq!(choose(&hs, RentalType::OnDemand, None, 5), None);
    }

    #[test]
    fn a_bid_preempts_only_strictly_lower_bids() {
        let hs = vec![holding("0.3", 1), holding("0.5", 1)];
        let bid = |b: &str| Some(b.parse().unwrap());
        assert_eq!(
            choose(&hs, RentalType::Interruptible, bid("0.5"), 1).unwrap(),
            hs[..1].to_vec()
        );
        assert_eq!(choose(&hs, RentalType::Interruptible, bid("0.5"), 2), None);
        assert_eq!(choose(&hs, RentalType::Interruptible, bid("0.3"), 1), None);
        assert_eq!(choose(&hs, RentalType::Interruptible, None, 1), None);
    }
}
