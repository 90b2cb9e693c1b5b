//! Instances that go on after their reserved block (createOrder's
//! `whenBlockEnds: ON_DEMAND`, docs/reservations.md "When the block
//! ends"). At the block's natural end the sweeper settles it under the
//! machine's row lock; an allocation inside it that asked to go on becomes
//! an on-demand rental of the same GPUs in that transaction, at that
//! instant, when
//!
//! - none of its GPUs is booked at that instant (the next block, or hours
//!   of this one sold on resale, take them),
//! - the machine is still listed with an on-demand price, and
//! - that price is at most the ceiling the renter gave.
//!
//! Otherwise it is preempted like every other instance inside the block,
//! and the reason says why it did not go on. Its storage and bandwidth
//! rates stay the booking's (the disk's meter runs from creation to
//! destroy at one rate); only the GPU rate changes, from 0 to the price.

use chrono::{DateTime, Utc};
use contracts::events::{AllocationContinued, MachineRental};
use contracts::ids::{InstanceId, MachineId, OrderId, ReservationId, TenantId};
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Int2, Timestamptz, Uuid as SqlUuid};
use rust_decimal::Decimal;
use schema::catalog::{allocations, machines};
use uuid::Uuid;

use crate::Error;

/// An allocation inside a block that will go on at `price`.
#[derive(Debug, Clone)]
pub struct Continuing {
    pub order_id: OrderId,
    pub tenant_id: TenantId,
    pub instance_id: Option<Uuid>,
    pub gpu_indices: Vec<i16>,
    pub price: Decimal,
    pub currency: String,
}

/// What becomes of each allocation inside a block ending at `at`.
#[derive(Debug, Default)]
pub struct Decision {
    /// Where the on-demand runs start: the end of the block's range that
    /// just ended (the sweep runs a moment after it; the block paid for
    /// the time up to its end, and not a second past it is free).
    pub since: Option<DateTime<Utc>>,
    /// These go on on demand.
    pub continuing: Vec<Continuing>,
    /// These asked to go on and may not: why, by allocation.
    pub refused: Vec<(OrderId, String)>,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// Decides, under the machine's lock, which live allocations inside block
/// `reservation_id` go on at `at`.
pub fn decide(
    conn: &mut PgConnection,
    machine_id: MachineId,
    reservation_id: Uuid,
    at: DateTime<Utc>,
) -> Result<Decision, Error> {
    type Row = (
        Uuid,
        Uuid,
        Option<Uuid>,
        Vec<i16>,
        Option<Decimal>,
        Option<String>,
    );
    let asked: Vec<Row> = allocations::table
        .filter(allocations::reservation_id.eq(reservation_id))
        .filter(allocations::released_at.is_null())
        .filter(allocations::continue_up_to_per_gpu_hour.is_not_null())
        .order(allocations::order_id.asc())
        .select((
            allocations::order_id,
            allocations::tenant_id,
            allocations::instance_id,
            allocations::gpu_indices,
            allocations::continue_up_to_per_gpu_hour,
            allocations::currency,
        ))
        .load(conn)?;
    let mut decision = Decision::default();
    if asked.is_empty() {
        return Ok(decision);
    }
    #[derive(QueryableByName)]
    struct Ended {
        #[diesel(sql_type = diesel::sql_types::Nullable<Timestamptz>)]
        at: Option<DateTime<Utc>>,
    }
    decision.since = diesel::sql_query(
        "SELECT max(upper(period)) AS at FROM catalog.booked_gpus
         WHERE reservation_id = $1 AND upper(period) <= $2",
    )
    .bind::<SqlUuid, _>(reservation_id)
    .bind::<Timestamptz, _>(at)
    .get_result::<Ended>(conn)?
    .at;
    // A machine deleted meanwhile is as unlisted: nothing goes on, and no
    // lookup error turns a block's end into an internal failure.
    let machine: (bool, Option<Decimal>, String) = machines::table
        .find(machine_id)
        .select((
            machines::listed,
            machines::price_per_gpu_hour,
            machines::currency,
        ))
        .first(conn)
        .optional()?
        .unwrap_or((false, None, String::new()));
    for (order_id, tenant_id, instance_id, indices, ceiling, currency) in asked {
        let order_id = OrderId(order_id);
        let booked = diesel::sql_query(
            "SELECT count(*) AS n FROM catalog.booked_gpus
             WHERE machine_id = $1 AND gpu_index = ANY($2) AND period @> $3",
        )
        .bind::<SqlUuid, _>(machine_id)
        .bind::<Array<Int2>, _>(&indices)
        .bind::<Timestamptz, _>(at)
        .get_result::<Count>(conn)?
        .n;
        let why = match (&machine, ceiling) {
            _ if booked > 0 => Some("its GPUs are reserved from then on".to_owned()),
            ((false, _, _), _) => Some("the machine is no longer listed".to_owned()),
            ((true, None, _), _) => Some("the machine has no on-demand price".to_owned()),
            ((true, Some(price), machine_currency), Some(ceiling)) => {
                if *price > ceiling {
                    Some(format!(
                        "its on-demand price {} {machine_currency} per GPU-hour is above the order's maximum {}",
                        price.normalize(),
                        ceiling.normalize()
                    ))
                } else if currency.as_deref() != Some(machine_currency.as_str()) {
                    Some("the machine's currency changed".to_owned())
                } else {
                    None
                }
            }
            (_, None) => Some("no maximum price was given".to_owned()),
        };
        match (why, machine.1) {
            (None, Some(price)) => decision.continuing.push(Continuing {
                order_id,
                tenant_id: TenantId(tenant_id),
                instance_id,
                gpu_indices: indices,
                price,
                currency: machine.2.clone(),
            }),
            (Some(why), _) => decision.refused.push((order_id, why)),
            (None, None) => decision
                .refused
                .push((order_id, "the machine has no on-demand price".to_owned())),
        }
    }
    Ok(decision)
}

/// Turns `c` into an on-demand rental of its GPUs from `at`, after the
/// block's own hold was given back in this transaction: it holds its GPUs
/// and counts on the machine like any rental, and ordering is told
/// (`catalog.allocation.continued`).
#[allow(clippy::too_many_arguments)]
pub fn convert(
    conn: &mut PgConnection,
    exchange: &str,
    machine_id: MachineId,
    host_tenant_id: TenantId,
    reservation_id: Uuid,
    c: &Continuing,
    at: DateTime<Utc>,
) -> Result<(), Error> {
    let updated = diesel::update(allocations::table.find(c.order_id))
        .filter(allocations::released_at.is_null())
        .filter(allocations::reservation_id.eq(reservation_id))
        .set((
            allocations::reservation_id.eq(None::<Uuid>),
            allocations::continue_up_to_per_gpu_hour.eq(None::<Decimal>),
            allocations::price_per_gpu_hour.eq(c.price),
        ))
        .execute(conn)?;
    if updated == 0 {
        return Ok(());
    }
    crate::block_allocations::release_uses(conn, c.order_id)?;
    let whole: Vec<u32> = c
        .gpu_indices
        .iter()
        .filter_map(|&i| u32::try_from(i).ok())
        .collect();
    crate::mig::hold_whole(conn, machine_id, c.order_id, &whole)?;
    let gpu_count = i32::try_from(whole.len()).unwrap_or(i32::MAX);
    diesel::update(machines::table.find(machine_id))
        .set((
            machines::gpus_allocated.eq(machines::gpus_allocated + gpu_count),
            machines::updated_at.eq(diesel::dsl::now),
        ))
        .execute(conn)?;
    crate::announcements::announce(
        conn,
        exchange,
        contracts::events::kinds::MACHINE_RENTED,
        MachineRental {
            host_tenant_id,
            machine_id,
            allocation_id: c.order_id.into(),
            gpu_count,
            preempted: false,
            at,
            sequence: 0,
            mig: None,
        },
    )?;
    let event = AllocationContinued {
        allocation_key: c.order_id.into(),
        instance_id: c.instance_id.map(InstanceId),
        tenant_id: c.tenant_id,
        machine_id,
        reservation_id: ReservationId(reservation_id),
        gpu_count,
        price_per_gpu_hour: c.price.normalize(),
        currency: c.currency.clone(),
        continued_at: at,
    };
    crate::announcements::publish(
        conn,
        exchange,
        contracts::events::kinds::ALLOCATION_CONTINUED,
        at,
        c.tenant_id,
        &event,
    )?;
    tracing::info!(
        allocation = %c.order_id,
        reservation.id = %reservation_id,
        machine.id = %machine_id,
        price = %c.price,
        "instance goes on on demand after its block"
    );
    Ok(())
}
