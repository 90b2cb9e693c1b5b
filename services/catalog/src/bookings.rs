//! Bookings: the catalog's record of a reservation's GPU time
//! (docs/reservations.md). One `catalog.bookings` row per reservation and
//! one `catalog.booked_gpus` row per booked GPU index and period; the
//! exclusion constraint on the latter is the no-double-booking rule, so a
//! race that gets past the choice below still cannot book a GPU twice (it
//! is answered `INSUFFICIENT_CAPACITY`).
//!
//! Every change runs under the machine's row lock, the lock allocations and
//! the block sweeper ([`crate::blocks`]) take, and is idempotent: a booking
//! by its reservation id, a carve by the child's id, a cancellation by what
//! it leaves booked.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use contracts::events::{BOOKINGS_CANCELLED, BookingsCancelled};
use contracts::ids::{MachineId, ReservationId, TenantId};
use contracts::reservations::{
    BookRequest, Booking, CancelBookingRequest, CarveBookingRequest, HourRange, check_block,
};
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DbError};
use diesel::sql_types::{Array, Int2, Timestamptz, Uuid as SqlUuid};
use platform::Db;
use rust_decimal::Decimal;
use schema::catalog::{allocations, gpu_holds, machines, mig_gpus};
use schema::catalog_bookings::bookings;
use uuid::Uuid;

use crate::booked_periods::{self, Period};
use crate::booking_rows::{BookingRow, indices, load, periods};
use crate::{Error, SCHEMA};

/// The longest reason a caller may give (it is sent on in events).
const MAX_REASON_CHARS: usize = 500;

/// The booking's machine, locked (the order every writer locks in: the
/// machine, then what is on it); `NOT_FOUND` for an unknown booking.
fn lock_machine_of(conn: &mut PgConnection, id: ReservationId) -> Result<Uuid, Error> {
    let machine_id: Option<Uuid> = bookings::table
        .find(id.into_uuid())
        .select(bookings::machine_id)
        .first(conn)
        .optional()?;
    let Some(machine_id) = machine_id else {
        return Err(not_found(id));
    };
    machines::table
        .find(machine_id)
        .select(machines::id)
        .for_update()
        .first::<Uuid>(conn)?;
    Ok(machine_id)
}

fn not_found(id: ReservationId) -> Error {
    Error::NotFound(format!("booking {id} not found"))
}

/// The answer for a stored booking: with the hours carved out of it.
pub fn answer(conn: &mut PgConnection, row: BookingRow) -> QueryResult<Booking> {
    let carved: Vec<(DateTime<Utc>, DateTime<Utc>)> = bookings::table
        .filter(bookings::parent_id.eq(row.reservation_id))
        .order(bookings::starts_at.asc())
        .select((bookings::starts_at, bookings::ends_at))
        .load(conn)?;
    Ok(Booking {
        gpu_indices: indices(&row),
        reservation_id: ReservationId(row.reservation_id),
        tenant_id: TenantId(row.tenant_id),
        machine_id: MachineId(row.machine_id),
        host_tenant_id: TenantId(row.host_tenant_id),
        gpu_model: row.gpu_model,
        starts_at: row.starts_at,
        ends_at: row.ends_at,
        price_per_gpu_hour: row.price_per_gpu_hour.normalize(),
        currency: row.currency,
        storage_price_per_gb_month: row.storage_price_per_gb_month.normalize(),
        bandwidth_up_price_per_tb: row.bandwidth_up_price_per_tb.normalize(),
        bandwidth_down_price_per_tb: row.bandwidth_down_price_per_tb.normalize(),
        carved: carved
            .into_iter()
            .map(|(starts_at, ends_at)| HourRange { starts_at, ends_at })
            .collect(),
        cancelled_from: row.cancelled_from,
    })
}

/// Books `[starts, ends)` on `indices` for booking `id`.
fn insert_periods(
    conn: &mut PgConnection,
    id: Uuid,
    machine_id: Uuid,
    indices: &[i16],
    period: Period,
) -> QueryResult<usize> {
    diesel::sql_query(
        "INSERT INTO catalog.booked_gpus (reservation_id, machine_id, gpu_index, period)
         SELECT $1, $2, i, tstzrange($3, $4, '[)') FROM unnest($5::smallint[]) AS i",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<SqlUuid, _>(machine_id)
    .bind::<Timestamptz, _>(period.0)
    .bind::<Timestamptz, _>(period.1)
    .bind::<Array<Int2>, _>(indices)
    .execute(conn)
}

/// An exclusion violation anywhere is two bookings of one GPU at once: a
/// race lost, answered like a choice that found too few GPUs.
fn capacity_race(error: Error) -> Error {
    match error {
        Error::Database(DbError::DatabaseError(DatabaseErrorKind::ExclusionViolation, _)) => {
            Error::InsufficientCapacity(
                "the machine's GPUs were booked for those hours concurrently".into(),
            )
        }
        other => other,
    }
}

fn is_unique_violation(error: &Error) -> bool {
    matches!(
        error,
        Error::Database(DbError::DatabaseError(
            DatabaseErrorKind::UniqueViolation,
            _
        ))
    )
}

/// The end of the machine's last booked period, if any is booked.
pub fn booked_until(
    conn: &mut PgConnection,
    machine_id: MachineId,
) -> QueryResult<Option<DateTime<Utc>>> {
    #[derive(QueryableByName)]
    struct Until {
        #[diesel(sql_type = diesel::sql_types::Nullable<Timestamptz>)]
        until: Option<DateTime<Utc>>,
    }
    let found: Vec<Until> = diesel::sql_query(
        "SELECT max(upper(period)) AS until FROM catalog.booked_gpus WHERE machine_id = $1",
    )
    .bind::<SqlUuid, _>(machine_id)
    .load(conn)?;
    Ok(found.into_iter().next().and_then(|u| u.until))
}

// ---------------------------------------------------------------- book

fn validate_book(req: &BookRequest) -> Result<(), Error> {
    if req.gpu_count < 1 {
        return Err(Error::Validation("gpuCount: at least 1".into()));
    }
    if let Some(max) = req.max_price_per_gpu_hour {
        contracts::bounds::check(max, contracts::bounds::GPU_HOUR_PRICE)
            .map_err(|e| Error::Validation(format!("maxPricePerGpuHour: {e}")))?;
    }
    Ok(())
}

/// Whether a stored booking is what `req` asks for (a replay).
fn same_booking(row: &BookingRow, req: &BookRequest) -> bool {
    row.tenant_id == req.tenant_id.into_uuid()
        && row.machine_id == req.machine_id.into_uuid()
        && i32::try_from(row.gpu_indices.len()).ok() == Some(req.gpu_count)
        && row.starts_at == req.starts_at
        && row.ends_at == req.ends_at
        && row.parent_id.is_none()
}

fn replay(conn: &mut PgConnection, req: &BookRequest) -> Result<Option<Booking>, Error> {
    let Some(row) = load(conn, req.reservation_id.into_uuid())? else {
        return Ok(None);
    };
    if !same_booking(&row, req) {
        return Err(Error::Conflict(format!(
            "reservationId: {} is booked already with other GPUs or hours",
            req.reservation_id
        )));
    }
    Ok(Some(answer(conn, row)?))
}

/// The machine as a booking sees it under its row lock.
#[derive(Queryable)]
struct Bookable {
    host_tenant_id: Uuid,
    gpu_model: String,
    gpu_count: i32,
    mig_gpus: i32,
    listed: bool,
    deleted: bool,
    list_until: Option<DateTime<Utc>>,
    currency: String,
    storage_price_per_gb_month: Decimal,
    bandwidth_up_price_per_tb: Decimal,
    bandwidth_down_price_per_tb: Decimal,
}

/// `BOOK`: GPUs of a machine for a block, idempotent per reservation.
pub async fn book(db: &Db, req: BookRequest) -> Result<Booking, Error> {
    validate_book(&req)?;
    let again = req.clone();
    match db.tx(move |conn| book_locked(conn, &req)).await {
        // The same reservation booked concurrently: the other transaction
        // won; answer what it booked (or refuse a different request).
        Err(e) if is_unique_violation(&e) => db
            .run(move |conn| replay(conn, &again))
            .await?
            .ok_or_else(|| Error::Conflict("booking vanished; retry".into())),
        other => other.map_err(capacity_race),
    }
}

fn book_locked(conn: &mut PgConnection, req: &BookRequest) -> Result<Booking, Error> {
    if let Some(found) = replay(conn, req)? {
        return Ok(found);
    }
    let machine: Option<Bookable> = machines::table
        .find(req.machine_id)
        .select((
            machines::host_tenant_id,
            machines::gpu_model,
            machines::gpu_count,
            machines::mig_gpus,
            machines::listed,
            machines::deleted_at.is_not_null(),
            machines::list_until,
            machines::currency,
            machines::storage_price_per_gb_month,
            machines::bandwidth_up_price_per_tb,
            machines::bandwidth_down_price_per_tb,
        ))
        .for_update()
        .first(conn)
        .optional()?;
    let now = contracts::time::now();
    let Some(m) =
        machine.filter(|m| m.listed && !m.deleted && m.list_until.is_none_or(|until| until > now))
    else {
        return Err(Error::NotFound(format!(
            "offer {} not found",
            req.machine_id
        )));
    };
    let Some(terms) = crate::reserved_terms::of(conn, req.machine_id.into_uuid(), &m.currency)?
    else {
        return Err(Error::Validation(
            "machineId: the machine's host offers no reserved blocks".into(),
        ));
    };
    if let Some(why) = check_block(
        req.starts_at,
        req.ends_at,
        now,
        terms.min_block_hours,
        terms.max_lead_days,
    ) {
        return Err(Error::Validation(why));
    }
    if let Some(until) = m.list_until
        && req.ends_at > until
    {
        return Err(Error::Validation(format!(
            "endsAt: the machine is listed until {}",
            contracts::time::format(until)
        )));
    }
    let whole = m.gpu_count - m.mig_gpus;
    if req.gpu_count > whole {
        return Err(Error::Validation(format!(
            "gpuCount: the machine has {whole} GPUs in whole-GPU mode; the reservation asks for {}",
            req.gpu_count
        )));
    }
    if let Some(max) = req.max_price_per_gpu_hour
        && terms.price_per_gpu_hour > max
    {
        return Err(Error::PriceAboveMax(format!(
            "the machine's reserved price is now {} {} per GPU-hour, above the reservation's maximum of {}",
            terms.price_per_gpu_hour,
            m.currency,
            max.normalize()
        )));
    }
    let chosen = choose(conn, req, m.gpu_count)?;
    let small: Vec<i16> = chosen
        .iter()
        .filter_map(|&i| i16::try_from(i).ok())
        .collect();
    let row = BookingRow {
        reservation_id: req.reservation_id.into_uuid(),
        tenant_id: req.tenant_id.into_uuid(),
        machine_id: req.machine_id.into_uuid(),
        host_tenant_id: m.host_tenant_id,
        gpu_model: m.gpu_model,
        gpu_indices: small.clone(),
        starts_at: req.starts_at,
        ends_at: req.ends_at,
        price_per_gpu_hour: terms.price_per_gpu_hour,
        currency: m.currency,
        storage_price_per_gb_month: m.storage_price_per_gb_month,
        bandwidth_up_price_per_tb: m.bandwidth_up_price_per_tb,
        bandwidth_down_price_per_tb: m.bandwidth_down_price_per_tb,
        parent_id: None,
        cancelled_from: None,
        activated_at: None,
        finished_at: None,
    };
    insert(conn, &row)?;
    insert_periods(
        conn,
        row.reservation_id,
        row.machine_id,
        &small,
        (req.starts_at, req.ends_at),
    )?;
    tracing::info!(
        reservation.id = %req.reservation_id,
        machine.id = %req.machine_id,
        gpus = ?chosen,
        "GPUs booked"
    );
    Ok(answer(conn, row)?)
}

fn insert(conn: &mut PgConnection, row: &BookingRow) -> QueryResult<usize> {
    diesel::insert_into(bookings::table)
        .values((
            bookings::reservation_id.eq(row.reservation_id),
            bookings::tenant_id.eq(row.tenant_id),
            bookings::machine_id.eq(row.machine_id),
            bookings::host_tenant_id.eq(row.host_tenant_id),
            bookings::gpu_model.eq(&row.gpu_model),
            bookings::gpu_indices.eq(&row.gpu_indices),
            bookings::starts_at.eq(row.starts_at),
            bookings::ends_at.eq(row.ends_at),
            bookings::price_per_gpu_hour.eq(row.price_per_gpu_hour),
            bookings::currency.eq(&row.currency),
            bookings::storage_price_per_gb_month.eq(row.storage_price_per_gb_month),
            bookings::bandwidth_up_price_per_tb.eq(row.bandwidth_up_price_per_tb),
            bookings::bandwidth_down_price_per_tb.eq(row.bandwidth_down_price_per_tb),
            bookings::parent_id.eq(row.parent_id),
        ))
        .execute(conn)
}

#[derive(QueryableByName)]
struct Index {
    #[diesel(sql_type = Int2)]
    gpu_index: i16,
}

/// The block's GPU indices: whole-mode, free of bookings over the block,
/// those no rental holds now first, then the lowest.
fn choose(conn: &mut PgConnection, req: &BookRequest, gpu_count: i32) -> Result<Vec<u32>, Error> {
    let to_set = |v: Vec<i16>| -> BTreeSet<u32> {
        v.into_iter()
            .filter_map(|i| u32::try_from(i).ok())
            .collect()
    };
    let mig = to_set(
        mig_gpus::table
            .filter(mig_gpus::machine_id.eq(req.machine_id))
            .select(mig_gpus::gpu_index)
            .load(conn)?,
    );
    let booked: Vec<Index> = diesel::sql_query(
        "SELECT DISTINCT gpu_index FROM catalog.booked_gpus
         WHERE machine_id = $1 AND period && tstzrange($2, $3, '[)')",
    )
    .bind::<SqlUuid, _>(req.machine_id)
    .bind::<Timestamptz, _>(req.starts_at)
    .bind::<Timestamptz, _>(req.ends_at)
    .load(conn)?;
    let booked = to_set(booked.into_iter().map(|r| r.gpu_index).collect());
    // Held by a rental (a block's own hold is a booking, counted above).
    let held = to_set(
        gpu_holds::table
            .inner_join(allocations::table)
            .filter(gpu_holds::machine_id.eq(req.machine_id))
            .filter(allocations::block_reservation_id.is_null())
            .select(gpu_holds::gpu_index)
            .distinct()
            .load(conn)?,
    );
    let n = usize::try_from(req.gpu_count).unwrap_or(usize::MAX);
    crate::gpu_choice::choose_for_block(
        u32::try_from(gpu_count).unwrap_or(0),
        &mig,
        &booked,
        &held,
        n,
    )
    .map_err(|free| {
        Error::InsufficientCapacity(format!(
            "{free} GPUs free for the whole block, {} asked",
            req.gpu_count
        ))
    })
}

// ---------------------------------------------------------------- read

/// `BOOKING`: one reservation's booking.
pub async fn get(db: &Db, id: ReservationId) -> Result<Booking, Error> {
    db.run(move |conn| {
        let row = load(conn, id.into_uuid())?.ok_or_else(|| not_found(id))?;
        Ok(answer(conn, row)?)
    })
    .await
}

// ---------------------------------------------------------------- cancel

fn check_reason(reason: &str) -> Result<(), Error> {
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(Error::Validation(format!(
            "reason: at most {MAX_REASON_CHARS} characters"
        )));
    }
    Ok(())
}

/// `CANCEL_BOOKING`: nothing of the booking stays booked from `from` (or
/// now) on; idempotent.
pub async fn cancel(
    db: &Db,
    exchange: &str,
    id: ReservationId,
    req: CancelBookingRequest,
) -> Result<Booking, Error> {
    check_reason(&req.reason)?;
    let exchange = exchange.to_owned();
    db.tx(move |conn| {
        lock_machine_of(conn, id)?;
        let row = load(conn, id.into_uuid())?.ok_or_else(|| not_found(id))?;
        let at = contracts::time::now();
        let reason = if req.reason.trim().is_empty() {
            "reservation cancelled"
        } else {
            req.reason.trim()
        };
        cancel_locked(conn, &exchange, &row, req.from.unwrap_or(at), reason, at)?;
        let row = load(conn, id.into_uuid())?.ok_or_else(|| not_found(id))?;
        Ok(answer(conn, row)?)
    })
    .await
}

/// Cancels `row` from `from` on, under its machine's row lock: its booked
/// periods end there (or go), and when it holds GPUs and nothing of it is
/// booked at `at` any more, it gives them back at once (preempting the
/// instances inside it with `reason`). A later `from` than an earlier
/// cancellation's changes nothing.
pub fn cancel_locked(
    conn: &mut PgConnection,
    exchange: &str,
    row: &BookingRow,
    from: DateTime<Utc>,
    reason: &str,
    at: DateTime<Utc>,
) -> Result<(), Error> {
    let from = from.max(row.starts_at);
    let from = row.cancelled_from.map_or(from, |earlier| earlier.min(from));
    for (index, booked) in periods(conn, row.reservation_id)? {
        let index = i16::try_from(index).unwrap_or(i16::MAX);
        for period in booked {
            let kept = booked_periods::shorten(period, from);
            if kept == Some(period) {
                continue;
            }
            diesel::sql_query(
                "DELETE FROM catalog.booked_gpus
                 WHERE reservation_id = $1 AND gpu_index = $2 AND period = tstzrange($3, $4, '[)')",
            )
            .bind::<SqlUuid, _>(row.reservation_id)
            .bind::<Int2, _>(index)
            .bind::<Timestamptz, _>(period.0)
            .bind::<Timestamptz, _>(period.1)
            .execute(conn)?;
            if let Some(kept) = kept {
                insert_periods(conn, row.reservation_id, row.machine_id, &[index], kept)?;
            }
        }
    }
    diesel::update(bookings::table.find(row.reservation_id))
        .set(bookings::cancelled_from.eq(from))
        .execute(conn)?;
    crate::blocks::settle(
        conn,
        exchange,
        MachineId(row.machine_id),
        TenantId(row.host_tenant_id),
        row.reservation_id,
        at,
        reason,
    )?;
    tracing::info!(reservation.id = %row.reservation_id, from = %from, "booking cancelled");
    Ok(())
}

/// Unlisting or deleting a machine: every booking on it that has not ended
/// is cancelled from now on, and `catalog.bookings.cancelled` tells
/// ordering (which refunds them with the host's penalty), in the caller's
/// transaction, which holds the machine's row lock.
pub fn cancel_machine(
    conn: &mut PgConnection,
    exchange: &str,
    machine_id: MachineId,
    host_tenant_id: TenantId,
    reason: &str,
) -> Result<Vec<ReservationId>, Error> {
    let at = contracts::time::now();
    #[derive(QueryableByName)]
    struct Id {
        #[diesel(sql_type = SqlUuid)]
        reservation_id: Uuid,
    }
    let open: Vec<Id> = diesel::sql_query(
        "SELECT b.reservation_id FROM catalog.bookings b
         WHERE b.machine_id = $1 AND b.finished_at IS NULL
           AND (EXISTS (SELECT 1 FROM catalog.booked_gpus g
                        WHERE g.reservation_id = b.reservation_id AND upper(g.period) > $2)
                OR EXISTS (SELECT 1 FROM catalog.allocations h
                           WHERE h.block_reservation_id = b.reservation_id AND h.released_at IS NULL))
         ORDER BY b.starts_at, b.reservation_id",
    )
    .bind::<SqlUuid, _>(machine_id)
    .bind::<Timestamptz, _>(at)
    .load(conn)?;
    let mut cancelled = Vec::new();
    for Id { reservation_id } in open {
        if let Some(row) = load(conn, reservation_id)? {
            cancel_locked(conn, exchange, &row, at, reason, at)?;
            cancelled.push(ReservationId(reservation_id));
        }
    }
    if cancelled.is_empty() {
        return Ok(cancelled);
    }
    let event = BookingsCancelled {
        machine_id,
        host_tenant_id,
        reservation_ids: cancelled.clone(),
        cancelled_at: at,
        reason: reason.to_owned(),
    };
    let envelope = contracts::Envelope::new(
        contracts::events::kinds::BOOKINGS_CANCELLED,
        at,
        Some(host_tenant_id),
        platform::http::current_correlation_id(),
        &event,
    )
    .map_err(platform::PlatformError::from)?;
    platform::outbox::enqueue(conn, SCHEMA, exchange, BOOKINGS_CANCELLED, &envelope)?;
    tracing::info!(machine.id = %machine_id, bookings = cancelled.len(), reason, "bookings cancelled with their machine");
    Ok(cancelled)
}

// ---------------------------------------------------------------- carve

/// Whether a stored booking is the child `req` asks for (a replay).
fn same_child(row: &BookingRow, parent: ReservationId, req: &CarveBookingRequest) -> bool {
    row.parent_id == Some(parent.into_uuid())
        && row.tenant_id == req.child_tenant_id.into_uuid()
        && row.starts_at == req.starts_at
        && row.ends_at == req.ends_at
}

fn replay_child(
    conn: &mut PgConnection,
    parent: ReservationId,
    req: &CarveBookingRequest,
) -> Result<Option<Booking>, Error> {
    let Some(row) = load(conn, req.child_reservation_id.into_uuid())? else {
        return Ok(None);
    };
    if !same_child(&row, parent, req) {
        return Err(Error::Conflict(format!(
            "childReservationId: {} is booked already with other hours",
            req.child_reservation_id
        )));
    }
    Ok(Some(answer(conn, row)?))
}

/// `CARVE_BOOKING`: hours `[starts_at, ends_at)` of a booking move to a new
/// booking (a resale buyer's reservation) on the same GPUs at the same
/// rates; idempotent per child.
pub async fn carve(
    db: &Db,
    parent: ReservationId,
    req: CarveBookingRequest,
) -> Result<Booking, Error> {
    if req.child_reservation_id == parent {
        return Err(Error::Validation(
            "childReservationId: must differ from the reservation carved".into(),
        ));
    }
    let again = req.clone();
    match db.tx(move |conn| carve_locked(conn, parent, &req)).await {
        Err(e) if is_unique_violation(&e) => db
            .run(move |conn| replay_child(conn, parent, &again))
            .await?
            .ok_or_else(|| Error::Conflict("booking vanished; retry".into())),
        other => other.map_err(capacity_race),
    }
}

fn carve_locked(
    conn: &mut PgConnection,
    parent: ReservationId,
    req: &CarveBookingRequest,
) -> Result<Booking, Error> {
    let machine_id = lock_machine_of(conn, parent)?;
    if let Some(found) = replay_child(conn, parent, req)? {
        return Ok(found);
    }
    let row = load(conn, parent.into_uuid())?.ok_or_else(|| not_found(parent))?;
    if row.cancelled_from.is_some() {
        return Err(Error::Validation(format!(
            "reservation {parent} is cancelled: its hours cannot be sold"
        )));
    }
    let cut = (req.starts_at, req.ends_at);
    let now = contracts::time::now();
    let booked = periods(conn, row.reservation_id)?;
    for index in indices(&row) {
        let on_gpu = booked.get(&index).map_or(&[][..], Vec::as_slice);
        if let Some(why) = booked_periods::check_carve(on_gpu, cut, now) {
            return Err(Error::Validation(why));
        }
    }
    // The parent's periods around the hours: the rows that contain them go,
    // their parts before and after come back, then the child's rows.
    let containing: Vec<Period> = booked
        .values()
        .flatten()
        .copied()
        .filter(|&(s, e)| s <= cut.0 && cut.1 <= e)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    for period in containing {
        diesel::sql_query(
            "DELETE FROM catalog.booked_gpus
             WHERE reservation_id = $1 AND period = tstzrange($2, $3, '[)')",
        )
        .bind::<SqlUuid, _>(row.reservation_id)
        .bind::<Timestamptz, _>(period.0)
        .bind::<Timestamptz, _>(period.1)
        .execute(conn)?;
        for part in booked_periods::split(period, cut) {
            insert_periods(conn, row.reservation_id, machine_id, &row.gpu_indices, part)?;
        }
    }
    let child = BookingRow {
        reservation_id: req.child_reservation_id.into_uuid(),
        tenant_id: req.child_tenant_id.into_uuid(),
        parent_id: Some(row.reservation_id),
        starts_at: req.starts_at,
        ends_at: req.ends_at,
        cancelled_from: None,
        activated_at: None,
        finished_at: None,
        ..row.clone()
    };
    insert(conn, &child)?;
    insert_periods(
        conn,
        child.reservation_id,
        machine_id,
        &child.gpu_indices,
        cut,
    )?;
    tracing::info!(
        reservation.id = %parent,
        child = %req.child_reservation_id,
        starts_at = %req.starts_at,
        ends_at = %req.ends_at,
        "booking carved"
    );
    Ok(answer(conn, child)?)
}
