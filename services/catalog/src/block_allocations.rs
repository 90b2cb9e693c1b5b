//! Allocations inside a running reserved block (docs/reservations.md): the
//! holder launches instances on the block's GPUs. The block already holds
//! them (its own allocation counts in `gpus_allocated` and `gpu_holds`), so
//! an instance's allocation takes indices of the block without touching
//! either; `catalog.block_gpu_uses` records which index each instance uses,
//! and its primary key keeps two instances off one GPU whatever the lock
//! order. No GPU price (the block was paid up front); storage and bandwidth
//! at the booking's rates; the allocation must end with the block's range.

use chrono::{DateTime, Utc};
use contracts::api::{AllocateRequest, Allocation, RentalType};
use contracts::ids::{MachineId, OrderId, ReservationId, TenantId};
use diesel::prelude::*;
use diesel::sql_types::{Array, Int2, Nullable, Timestamptz, Uuid as SqlUuid};
use rust_decimal::Decimal;
use schema::catalog::{allocations, machines};
use schema::catalog_bookings::block_gpu_uses;
use uuid::Uuid;

use crate::Error;
use crate::booked_periods::{self, Period};

/// Frees the block GPUs `holder` used (its release or preemption).
pub fn release_uses(conn: &mut PgConnection, holder: OrderId) -> QueryResult<usize> {
    diesel::delete(block_gpu_uses::table.filter(block_gpu_uses::holder.eq(holder))).execute(conn)
}

/// Takes `req.gpu_count` GPUs of reservation `reservation_id`'s running
/// block for `req.order_id`, under the machine's row lock.
pub fn take(
    conn: &mut PgConnection,
    req: &AllocateRequest,
    reservation_id: ReservationId,
) -> Result<Allocation, Error> {
    let machine: Option<(TenantId, String, i32)> = machines::table
        .find(req.machine_id)
        .select((
            machines::host_tenant_id,
            machines::gpu_model,
            machines::gpu_count,
        ))
        .for_update()
        .first(conn)
        .optional()?;
    // Another tenant's reservation answers like a random id.
    let Some(booking) = crate::booking_rows::load(conn, reservation_id.into_uuid())?
        .filter(|b| b.tenant_id == req.tenant_id.into_uuid())
    else {
        return Err(Error::NotFound(format!(
            "reservation {reservation_id} not found"
        )));
    };
    let Some((host_tenant_id, gpu_model, machine_gpu_count)) =
        machine.filter(|_| booking.machine_id == req.machine_id.into_uuid())
    else {
        return Err(Error::Validation(format!(
            "machineId: reservation {reservation_id}'s GPUs are on machine {}",
            booking.machine_id
        )));
    };
    let at = contracts::time::now();
    let booked: Vec<Period> = crate::booking_rows::periods(conn, booking.reservation_id)?
        .into_values()
        .flatten()
        .collect();
    let hold: Option<Vec<i16>> = allocations::table
        .filter(allocations::block_reservation_id.eq(booking.reservation_id))
        .filter(allocations::released_at.is_null())
        .select(allocations::gpu_indices)
        .first(conn)
        .optional()?;
    let running = booked_periods::containing(&booked, at);
    let (Some(range), Some(block_gpus)) = (running, hold) else {
        if running.is_some() {
            // Booked now, but the sweeper has not handed the GPUs over yet
            // (it runs every second): a launch at the block's first instant
            // is retried, not refused for good under its key.
            return Err(Error::Retry(format!(
                "reservation {reservation_id}: the block is starting and its GPUs are being handed over; retry in a second"
            )));
        }
        let ahead = booked.iter().any(|&(_, end)| end > at);
        return Err(Error::Conflict(if ahead {
            format!("reservation {reservation_id}: the block has not started")
        } else {
            format!("reservation {reservation_id}: the block has ended")
        }));
    };
    let used: Vec<i16> = block_gpu_uses::table
        .filter(block_gpu_uses::reservation_id.eq(booking.reservation_id))
        .select(block_gpu_uses::gpu_index)
        .load(conn)?;
    let free: Vec<i16> = block_gpus
        .iter()
        .copied()
        .filter(|i| !used.contains(i))
        .collect();
    let wanted = usize::try_from(req.gpu_count).unwrap_or(usize::MAX);
    if wanted > free.len() {
        return Err(Error::InsufficientCapacity(format!(
            "the block has {} of its {} GPUs free; the order asks for {}",
            free.len(),
            block_gpus.len(),
            req.gpu_count
        )));
    }
    let chosen: Vec<i16> = free.into_iter().take(wanted).collect();
    diesel::insert_into(allocations::table)
        .values((
            allocations::order_id.eq(req.order_id),
            allocations::machine_id.eq(req.machine_id),
            allocations::tenant_id.eq(req.tenant_id),
            allocations::gpu_count.eq(req.gpu_count),
            allocations::rental_type.eq(RentalType::OnDemand.as_str()),
            allocations::instance_id.eq(req.instance_id),
            allocations::price_per_gpu_hour.eq(Decimal::ZERO),
            allocations::storage_price_per_gb_month.eq(booking.storage_price_per_gb_month),
            allocations::bandwidth_up_price_per_tb.eq(booking.bandwidth_up_price_per_tb),
            allocations::bandwidth_down_price_per_tb.eq(booking.bandwidth_down_price_per_tb),
            allocations::currency.eq(&booking.currency),
            allocations::gpu_indices.eq(&chosen),
            allocations::reservation_id.eq(booking.reservation_id),
            allocations::continue_up_to_per_gpu_hour.eq(req.continue_up_to_per_gpu_hour),
        ))
        .execute(conn)?;
    let uses: Vec<_> = chosen
        .iter()
        .map(|&index| {
            (
                block_gpu_uses::machine_id.eq(req.machine_id),
                block_gpu_uses::gpu_index.eq(index),
                block_gpu_uses::reservation_id.eq(booking.reservation_id),
                block_gpu_uses::holder.eq(req.order_id),
            )
        })
        .collect();
    diesel::insert_into(block_gpu_uses::table)
        .values(uses)
        .execute(conn)
        .map_err(|e| match e {
            diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::UniqueViolation,
                _,
            ) => Error::Conflict("the block's GPUs were taken concurrently; retry".into()),
            other => Error::Database(other),
        })?;
    tracing::info!(
        allocation = %req.order_id,
        reservation.id = %reservation_id,
        gpus = ?chosen,
        "GPUs of a reserved block allocated"
    );
    Ok(Allocation {
        order_id: req.order_id,
        machine_id: req.machine_id,
        host_tenant_id,
        gpu_count: req.gpu_count,
        released: false,
        preempted: false,
        gpu_model,
        machine_gpu_count,
        rental_type: RentalType::OnDemand,
        price_per_gpu_hour: Decimal::ZERO,
        storage_price_per_gb_month: booking.storage_price_per_gb_month.normalize(),
        bandwidth_up_price_per_tb: booking.bandwidth_up_price_per_tb.normalize(),
        bandwidth_down_price_per_tb: booking.bandwidth_down_price_per_tb.normalize(),
        currency: booking.currency,
        gpu_indices: chosen
            .iter()
            .filter_map(|&i| u32::try_from(i).ok())
            .collect(),
        mig: None,
        reservation_id: Some(reservation_id),
        ends_by: Some(range.1),
    })
}

#[derive(QueryableByName)]
struct Instant {
    #[diesel(sql_type = Nullable<Timestamptz>)]
    at: Option<DateTime<Utc>>,
}

/// When an allocation's GPUs stop being its own, for a repeated allocate:
/// inside a block, the end of the block's range running at `at` (else the
/// block's end); otherwise the earliest booked start after `at` on its GPUs.
pub fn ends_by(
    conn: &mut PgConnection,
    machine_id: MachineId,
    gpu_indices: &[i16],
    reservation_id: Option<Uuid>,
    at: DateTime<Utc>,
) -> QueryResult<Option<DateTime<Utc>>> {
    let found: Vec<Instant> = match reservation_id {
        Some(id) => diesel::sql_query(
            "SELECT coalesce(
                 (SELECT upper(period) FROM catalog.booked_gpus
                  WHERE reservation_id = $1 AND period @> $2 LIMIT 1),
                 (SELECT ends_at FROM catalog.bookings WHERE reservation_id = $1)) AS at",
        )
        .bind::<SqlUuid, _>(id)
        .bind::<Timestamptz, _>(at)
        .load(conn)?,
        None if gpu_indices.is_empty() => return Ok(None),
        None => diesel::sql_query(
            "SELECT min(lower(period)) AS at FROM catalog.booked_gpus
             WHERE machine_id = $1 AND gpu_index = ANY($2) AND lower(period) > $3",
        )
        .bind::<SqlUuid, _>(machine_id)
        .bind::<Array<Int2>, _>(gpu_indices)
        .bind::<Timestamptz, _>(at)
        .load(conn)?,
    };
    Ok(found.into_iter().next().and_then(|r| r.at))
}
