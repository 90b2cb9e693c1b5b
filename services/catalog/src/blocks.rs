//! The block sweeper: reserved blocks take their GPUs when they start and
//! give them back when they end (docs/reservations.md, docs/catalog.md
//! "Reserved blocks"). Each pass finds the machines with something due and
//! handles each in one short transaction under the machine's row lock (the
//! lock allocations and bookings take), at one instant:
//!
//! 1. **warn**: a live rental whose GPUs' next booked period starts within
//!    [`WARNING_SECONDS`], and an instance inside a block whose booked range
//!    ends within it, get `catalog.allocation.ending_soon` once (recorded in
//!    `catalog.ending_warnings`);
//! 2. **settle** every booking with nothing booked at that instant: the
//!    instances inside it are preempted (`reservation ended`), its hold is
//!    released, and once nothing of it lies ahead it is `finished_at`;
//! 3. **activate** every booking with a booked period containing that
//!    instant and no hold: whatever holds its GPUs is preempted (`reserved
//!    block starts`, `preempted_by` the reservation), and the block holds
//!    them as an allocation of its own (`block_reservation_id`), counted in
//!    `gpus_allocated` and `gpu_holds` like any rental.
//!
//! Each contiguous booked range is its own activation: a booking carved by
//! a resale gives its GPUs back at the start of the hours sold and takes
//! them again at their end (a new hold each time; `activated_at` is the
//! first). Settling before activating, at one instant, lets a block that
//! ends at the hour another starts on the same GPUs hand them over in one
//! transaction. Every step checks the state it changes, so a pass repeated
//! (or run by two processes, one after the other under the lock) changes
//! nothing twice.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use contracts::api::RentalType;
use contracts::events::{AllocationEndingSoon, MachineRental};
use contracts::ids::{InstanceId, MachineId, OrderId, TenantId};
use contracts::reservations::WARNING_SECONDS;
use diesel::prelude::*;
use diesel::sql_types::{Array, Bool, Int2, Timestamptz, Uuid as SqlUuid};
use platform::{Config, Db, PlatformError};
use rust_decimal::Decimal;
use schema::catalog::{allocations, machines};
use schema::catalog_bookings::bookings;
use uuid::Uuid;

use crate::Error;
use crate::block_continuations;
use crate::preemption::{self, Holding};

/// Why a block's start preempts the rentals on its GPUs.
pub const BLOCK_STARTS: &str = "reserved block starts";
/// Why a block's end preempts the instances inside it.
pub const BLOCK_ENDED: &str = "reservation ended";

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    pub warned: usize,
    pub activated: usize,
    pub released: usize,
}

impl Pass {
    fn add(&mut self, other: Pass) {
        self.warned += other.warned;
        self.activated += other.activated;
        self.released += other.released;
    }

    fn is_empty(&self) -> bool {
        *self == Pass::default()
    }
}

/// Sweeps every `block_sweep` forever.
pub async fn run_block_sweeper(config: Arc<Config>, db: Db) -> Result<(), PlatformError> {
    let every = config.settings::<crate::CatalogSettings>()?.block_sweep;
    tracing::info!(every_ms = every.as_millis() as u64, "block sweeper started");
    loop {
        match sweep(&db, &config.events_exchange).await {
            Ok(pass) if !pass.is_empty() => {
                tracing::info!(
                    warned = pass.warned,
                    activated = pass.activated,
                    released = pass.released,
                    "block sweep"
                );
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "block sweep failed"),
        }
        tokio::time::sleep(every).await;
    }
}

/// One pass over the machines with something due; a machine that fails is
/// logged and left to the next pass, the others go on.
pub async fn sweep(db: &Db, exchange: &str) -> Result<Pass, Error> {
    let at = contracts::time::now();
    let due = db
        .run(move |conn| Ok::<_, Error>(due_machines(conn, at)?))
        .await?;
    let mut total = Pass::default();
    for machine_id in due {
        let exchange = exchange.to_owned();
        match db
            .tx(move |conn| sweep_machine(conn, &exchange, MachineId(machine_id)))
            .await
        {
            Ok(pass) => total.add(pass),
            Err(error) => {
                tracing::warn!(machine.id = %machine_id, %error, "block sweep of a machine failed");
            }
        }
    }
    Ok(total)
}

#[derive(QueryableByName)]
struct MachineRow {
    #[diesel(sql_type = SqlUuid)]
    machine_id: Uuid,
}

/// Machines with a booking to activate, settle or finish, or a warning to
/// send, at `at`.
fn due_machines(conn: &mut PgConnection, at: DateTime<Utc>) -> QueryResult<Vec<Uuid>> {
    let rows: Vec<MachineRow> = diesel::sql_query(
        "SELECT DISTINCT machine_id FROM (
           SELECT b.machine_id FROM catalog.bookings b
           WHERE b.finished_at IS NULL
             AND (EXISTS (SELECT 1 FROM catalog.booked_gpus g
                          WHERE g.reservation_id = b.reservation_id AND g.period @> $1)
                  <> EXISTS (SELECT 1 FROM catalog.allocations h
                             WHERE h.block_reservation_id = b.reservation_id AND h.released_at IS NULL)
                  OR NOT EXISTS (SELECT 1 FROM catalog.booked_gpus g
                                 WHERE g.reservation_id = b.reservation_id AND upper(g.period) > $1))
           UNION ALL
           SELECT a.machine_id
           FROM (SELECT DISTINCT machine_id FROM catalog.booked_gpus
                 WHERE lower(period) > $1 AND lower(period) <= $2) soon
           JOIN catalog.allocations a
             ON a.machine_id = soon.machine_id AND a.released_at IS NULL
            AND a.reservation_id IS NULL AND a.block_reservation_id IS NULL
           CROSS JOIN LATERAL (SELECT min(lower(g.period)) AS next FROM catalog.booked_gpus g
                               WHERE g.machine_id = a.machine_id AND g.gpu_index = ANY(a.gpu_indices)
                                 AND lower(g.period) > $1) n
           WHERE n.next <= $2
             AND NOT EXISTS (SELECT 1 FROM catalog.ending_warnings w
                             WHERE w.order_id = a.order_id AND w.ends_at = n.next)
           UNION ALL
           SELECT a.machine_id FROM catalog.booked_gpus g
           JOIN catalog.allocations a ON a.reservation_id = g.reservation_id AND a.released_at IS NULL
           WHERE upper(g.period) > $1 AND upper(g.period) <= $2 AND lower(g.period) <= $1
             AND NOT EXISTS (SELECT 1 FROM catalog.ending_warnings w
                             WHERE w.order_id = a.order_id AND w.ends_at = upper(g.period))
         ) due",
    )
    .bind::<Timestamptz, _>(at)
    .bind::<Timestamptz, _>(at + Duration::seconds(WARNING_SECONDS))
    .load(conn)?;
    Ok(rows.into_iter().map(|r| r.machine_id).collect())
}

#[derive(QueryableByName)]
struct BookingState {
    #[diesel(sql_type = SqlUuid)]
    reservation_id: Uuid,
    #[diesel(sql_type = Bool)]
    running: bool,
    #[diesel(sql_type = Bool)]
    held: bool,
}

/// Warns, settles and activates on one machine, under its row lock.
fn sweep_machine(
    conn: &mut PgConnection,
    exchange: &str,
    machine_id: MachineId,
) -> Result<Pass, Error> {
    let host: Option<TenantId> = machines::table
        .find(machine_id)
        .select(machines::host_tenant_id)
        .for_update()
        .first(conn)
        .optional()?;
    let Some(host) = host else {
        return Ok(Pass::default());
    };
    // The instant of the whole pass, read once the lock is held.
    let at = contracts::time::now();
    let mut pass = Pass {
        warned: warn(conn, exchange, machine_id, at)?,
        ..Pass::default()
    };
    let states: Vec<BookingState> = diesel::sql_query(
        "SELECT b.reservation_id,
                EXISTS (SELECT 1 FROM catalog.booked_gpus g
                        WHERE g.reservation_id = b.reservation_id AND g.period @> $2) AS running,
                EXISTS (SELECT 1 FROM catalog.allocations h
                        WHERE h.block_reservation_id = b.reservation_id AND h.released_at IS NULL) AS held
         FROM catalog.bookings b
         WHERE b.machine_id = $1 AND b.finished_at IS NULL
         ORDER BY b.starts_at, b.reservation_id",
    )
    .bind::<SqlUuid, _>(machine_id)
    .bind::<Timestamptz, _>(at)
    .load(conn)?;
    for state in states.iter().filter(|s| !s.running) {
        if settle(
            conn,
            exchange,
            machine_id,
            host,
            state.reservation_id,
            at,
            BLOCK_ENDED,
        )? {
            pass.released += 1;
        }
    }
    for state in states.iter().filter(|s| s.running && !s.held) {
        activate(conn, exchange, machine_id, host, state.reservation_id, at)?;
        pass.activated += 1;
    }
    Ok(pass)
}

#[derive(QueryableByName)]
struct Ending {
    #[diesel(sql_type = SqlUuid)]
    order_id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    tenant_id: Uuid,
    #[diesel(sql_type = diesel::sql_types::Nullable<SqlUuid>)]
    instance_id: Option<Uuid>,
    #[diesel(sql_type = Timestamptz)]
    ends_at: DateTime<Utc>,
    /// A block starts then (a rental's warning), or ends (an instance's inside it).
    #[diesel(sql_type = Bool)]
    block_starts: bool,
}

/// Sends `catalog.allocation.ending_soon` once per allocation and instant:
/// to live rentals whose GPUs' next booked period starts within the
/// warning window (the earliest over their GPUs: they end there), and to
/// instances inside a block whose booked range ends within it.
fn warn(
    conn: &mut PgConnection,
    exchange: &str,
    machine_id: MachineId,
    at: DateTime<Utc>,
) -> Result<usize, Error> {
    let endings: Vec<Ending> = diesel::sql_query(
        "SELECT DISTINCT a.order_id, a.tenant_id, a.instance_id, x.ends_at, x.block_starts
         FROM catalog.allocations a
         CROSS JOIN LATERAL (
             SELECT min(lower(g.period)) AS ends_at, true AS block_starts
             FROM catalog.booked_gpus g
             WHERE a.reservation_id IS NULL AND g.machine_id = a.machine_id
               AND g.gpu_index = ANY(a.gpu_indices) AND lower(g.period) > $2
             UNION ALL
             SELECT upper(g.period), false
             FROM catalog.booked_gpus g
             WHERE a.reservation_id IS NOT NULL AND g.reservation_id = a.reservation_id
               AND g.period @> $2
         ) x
         WHERE a.machine_id = $1 AND a.released_at IS NULL AND a.block_reservation_id IS NULL
           AND x.ends_at IS NOT NULL AND x.ends_at <= $3
           AND NOT EXISTS (SELECT 1 FROM catalog.ending_warnings w
                           WHERE w.order_id = a.order_id AND w.ends_at = x.ends_at)
         ORDER BY x.ends_at, a.order_id",
    )
    .bind::<SqlUuid, _>(machine_id)
    .bind::<Timestamptz, _>(at)
    .bind::<Timestamptz, _>(at + Duration::seconds(WARNING_SECONDS))
    .load(conn)?;
    let mut sent = 0;
    for ending in endings {
        let recorded = diesel::sql_query(
            "INSERT INTO catalog.ending_warnings (order_id, ends_at) VALUES ($1, $2)
             ON CONFLICT DO NOTHING",
        )
        .bind::<SqlUuid, _>(ending.order_id)
        .bind::<Timestamptz, _>(ending.ends_at)
        .execute(conn)?;
        if recorded == 0 {
            continue;
        }
        let what = if ending.block_starts {
            "starts"
        } else {
            "ends"
        };
        let event = AllocationEndingSoon {
            allocation_key: ending.order_id,
            instance_id: ending.instance_id.map(InstanceId),
            tenant_id: TenantId(ending.tenant_id),
            machine_id,
            ends_at: ending.ends_at,
            reason: format!(
                "reserved block {what} at {}",
                contracts::time::format(ending.ends_at)
            ),
        };
        crate::announcements::publish(
            conn,
            exchange,
            contracts::events::kinds::ALLOCATION_ENDING_SOON,
            at,
            event.tenant_id,
            &event,
        )?;
        tracing::info!(allocation = %ending.order_id, machine.id = %machine_id, ends_at = %ending.ends_at, "allocation warned of its end");
        sent += 1;
    }
    Ok(sent)
}

/// Live allocations as preemption victims, with whether each counts on the
/// machine's whole-GPU counter and whether it is a MIG slice.
type Victim = (Holding, bool, bool);

fn victims(
    conn: &mut PgConnection,
    query: allocations::BoxedQuery<'_, diesel::pg::Pg>,
) -> QueryResult<Vec<Victim>> {
    type Row = (
        (
            Uuid,
            Uuid,
            Option<Uuid>,
            i32,
            Option<Decimal>,
            DateTime<Utc>,
        ),
        Option<String>,
        Option<Uuid>,
    );
    let rows: Vec<Row> = query
        .filter(allocations::released_at.is_null())
        .filter(allocations::block_reservation_id.is_null())
        .order((allocations::created_at.asc(), allocations::order_id.asc()))
        .select((
            (
                allocations::order_id,
                allocations::tenant_id,
                allocations::instance_id,
                allocations::gpu_count,
                allocations::bid_per_gpu_hour,
                allocations::created_at,
            ),
            allocations::mig_profile,
            allocations::reservation_id,
        ))
        .load(conn)?;
    Ok(rows
        .into_iter()
        .map(
            |((order_id, tenant_id, instance_id, gpu_count, bid, created_at), slice, inside)| {
                let counted = slice.is_none() && inside.is_none();
                let holding = Holding {
                    order_id: OrderId(order_id),
                    tenant_id: TenantId(tenant_id),
                    instance_id,
                    gpu_count,
                    bid_per_gpu_hour: bid,
                    created_at,
                };
                (holding, counted, slice.is_some())
            },
        )
        .collect())
}

fn running(conn: &mut PgConnection, reservation_id: Uuid, at: DateTime<Utc>) -> QueryResult<bool> {
    #[derive(QueryableByName)]
    struct Flag {
        #[diesel(sql_type = Bool)]
        flag: bool,
    }
    let flags: Vec<Flag> = diesel::sql_query(
        "SELECT EXISTS (SELECT 1 FROM catalog.booked_gpus
                        WHERE reservation_id = $1 AND period @> $2) AS flag",
    )
    .bind::<SqlUuid, _>(reservation_id)
    .bind::<Timestamptz, _>(at)
    .load(conn)?;
    Ok(flags.first().is_some_and(|f| f.flag))
}

fn ahead(conn: &mut PgConnection, reservation_id: Uuid, at: DateTime<Utc>) -> QueryResult<bool> {
    #[derive(QueryableByName)]
    struct Flag {
        #[diesel(sql_type = Bool)]
        flag: bool,
    }
    let flags: Vec<Flag> = diesel::sql_query(
        "SELECT EXISTS (SELECT 1 FROM catalog.booked_gpus
                        WHERE reservation_id = $1 AND upper(period) > $2) AS flag",
    )
    .bind::<SqlUuid, _>(reservation_id)
    .bind::<Timestamptz, _>(at)
    .load(conn)?;
    Ok(flags.first().is_some_and(|f| f.flag))
}

/// Gives back what booking `reservation_id` holds when nothing of it is
/// booked at `at`: the instances inside it are preempted with `reason`, its
/// hold is released; once nothing of it lies ahead it is finished. Under
/// the machine's row lock; answers whether a hold was released.
pub fn settle(
    conn: &mut PgConnection,
    exchange: &str,
    machine_id: MachineId,
    host_tenant_id: TenantId,
    reservation_id: Uuid,
    at: DateTime<Utc>,
    reason: &str,
) -> Result<bool, Error> {
    if running(conn, reservation_id, at)? {
        return Ok(false);
    }
    // At the block's natural end, instances that asked go on on demand
    // when they may (crate::block_continuations); a host's cancellation
    // stops them all.
    let decision = if reason == BLOCK_ENDED {
        block_continuations::decide(conn, machine_id, reservation_id, at)?
    } else {
        block_continuations::Decision::default()
    };
    let inside = victims(
        conn,
        allocations::table
            .filter(allocations::reservation_id.eq(reservation_id))
            .into_boxed(),
    )?;
    for (instance, _, _) in &inside {
        if decision
            .continuing
            .iter()
            .any(|c| c.order_id == instance.order_id)
        {
            continue;
        }
        let refused = decision
            .refused
            .iter()
            .find(|(order_id, _)| *order_id == instance.order_id)
            .map(|(_, why)| format!("{reason}; not continued on demand: {why}"));
        preemption::preempt_for(
            conn,
            exchange,
            machine_id,
            instance,
            reservation_id,
            at,
            refused.as_deref().unwrap_or(reason),
        )?;
    }
    let hold: Option<(Uuid, i32)> = allocations::table
        .filter(allocations::block_reservation_id.eq(reservation_id))
        .filter(allocations::released_at.is_null())
        .select((allocations::order_id, allocations::gpu_count))
        .first(conn)
        .optional()?;
    let released = hold.is_some();
    if let Some((hold_id, gpu_count)) = hold {
        diesel::update(allocations::table.find(hold_id))
            .filter(allocations::released_at.is_null())
            .set(allocations::released_at.eq(at))
            .execute(conn)?;
        crate::mig::release_holds(conn, OrderId(hold_id))?;
        diesel::update(machines::table.find(machine_id))
            .set((
                machines::gpus_allocated.eq(machines::gpus_allocated - gpu_count),
                machines::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)?;
        crate::announcements::announce(
            conn,
            exchange,
            contracts::events::kinds::MACHINE_RELEASED,
            MachineRental {
                host_tenant_id,
                machine_id,
                allocation_id: hold_id,
                gpu_count,
                preempted: false,
                at,
                sequence: 0,
                mig: None,
            },
        )?;
        tracing::info!(reservation.id = %reservation_id, machine.id = %machine_id, "reserved block gave its GPUs back");
    }
    // The block's GPUs are given back; those that go on take theirs again.
    for continuing in &decision.continuing {
        block_continuations::convert(
            conn,
            exchange,
            machine_id,
            host_tenant_id,
            reservation_id,
            continuing,
            decision.since.unwrap_or(at),
        )?;
    }
    if !ahead(conn, reservation_id, at)? {
        diesel::update(bookings::table.find(reservation_id))
            .filter(bookings::finished_at.is_null())
            .set(bookings::finished_at.eq(at))
            .execute(conn)?;
    }
    Ok(released)
}

#[derive(QueryableByName)]
struct Index {
    #[diesel(sql_type = Int2)]
    gpu_index: i16,
}

/// The block's booked range containing `at` starts: every allocation on its
/// GPUs is preempted and the block holds them. Under the machine's lock.
fn activate(
    conn: &mut PgConnection,
    exchange: &str,
    machine_id: MachineId,
    host_tenant_id: TenantId,
    reservation_id: Uuid,
    at: DateTime<Utc>,
) -> Result<(), Error> {
    let Some(booking) = crate::booking_rows::load(conn, reservation_id)? else {
        return Ok(());
    };
    let indices: Vec<i16> = diesel::sql_query(
        "SELECT DISTINCT gpu_index FROM catalog.booked_gpus
         WHERE reservation_id = $1 AND period @> $2 ORDER BY gpu_index",
    )
    .bind::<SqlUuid, _>(reservation_id)
    .bind::<Timestamptz, _>(at)
    .load::<Index>(conn)?
    .into_iter()
    .map(|r| r.gpu_index)
    .collect();
    if indices.is_empty() {
        return Ok(());
    }
    // Another block still on these GPUs would mean two booked periods
    // overlap, which the exclusion constraint rules out; refuse rather than
    // take GPUs that were not given back.
    let other_blocks: i64 = diesel::sql_query(
        "SELECT count(*) AS n FROM catalog.gpu_holds h
         JOIN catalog.allocations a ON a.order_id = h.holder
         WHERE h.machine_id = $1 AND h.gpu_index = ANY($2) AND a.block_reservation_id IS NOT NULL",
    )
    .bind::<SqlUuid, _>(machine_id)
    .bind::<Array<Int2>, _>(&indices)
    .get_result::<Count>(conn)?
    .n;
    if other_blocks > 0 {
        return Err(Error::Conflict(format!(
            "reserved block {reservation_id}: its GPUs are still held by another block"
        )));
    }
    #[derive(QueryableByName)]
    struct Holder {
        #[diesel(sql_type = SqlUuid)]
        holder: Uuid,
    }
    // Rentals holding the GPUs, and instances of another block still on
    // them (its end was settled above, so none in practice).
    let holders: Vec<Uuid> = diesel::sql_query(
        "SELECT holder FROM catalog.gpu_holds WHERE machine_id = $1 AND gpu_index = ANY($2)
         UNION
         SELECT holder FROM catalog.block_gpu_uses WHERE machine_id = $1 AND gpu_index = ANY($2)",
    )
    .bind::<SqlUuid, _>(machine_id)
    .bind::<Array<Int2>, _>(&indices)
    .load::<Holder>(conn)?
    .into_iter()
    .map(|h| h.holder)
    .collect();
    let on_gpus = victims(
        conn,
        allocations::table
            .filter(allocations::order_id.eq_any(holders))
            .into_boxed(),
    )?;
    let mut freed = 0;
    let mut slices = false;
    for (victim, counted, slice) in &on_gpus {
        let gpus = preemption::preempt_for(
            conn,
            exchange,
            machine_id,
            victim,
            reservation_id,
            at,
            BLOCK_STARTS,
        )?;
        if *counted {
            freed += gpus;
        }
        slices |= *slice;
        crate::announcements::announce(
            conn,
            exchange,
            contracts::events::kinds::MACHINE_RELEASED,
            MachineRental {
                host_tenant_id,
                machine_id,
                allocation_id: victim.order_id.into(),
                gpu_count: victim.gpu_count,
                preempted: true,
                at,
                sequence: 0,
                mig: None,
            },
        )?;
    }
    let gpu_count = i32::try_from(indices.len()).unwrap_or(i32::MAX);
    let hold_id = OrderId::new();
    diesel::insert_into(allocations::table)
        .values((
            allocations::order_id.eq(hold_id),
            allocations::machine_id.eq(machine_id),
            allocations::tenant_id.eq(booking.tenant_id),
            allocations::gpu_count.eq(gpu_count),
            allocations::rental_type.eq(RentalType::OnDemand.as_str()),
            allocations::price_per_gpu_hour.eq(booking.price_per_gpu_hour),
            allocations::storage_price_per_gb_month.eq(booking.storage_price_per_gb_month),
            allocations::bandwidth_up_price_per_tb.eq(booking.bandwidth_up_price_per_tb),
            allocations::bandwidth_down_price_per_tb.eq(booking.bandwidth_down_price_per_tb),
            allocations::currency.eq(&booking.currency),
            allocations::gpu_indices.eq(&indices),
            allocations::block_reservation_id.eq(reservation_id),
        ))
        .execute(conn)?;
    let whole: Vec<u32> = indices
        .iter()
        .filter_map(|&i| u32::try_from(i).ok())
        .collect();
    crate::mig::hold_whole(conn, machine_id, hold_id, &whole)?;
    diesel::update(machines::table.find(machine_id))
        .set((
            machines::gpus_allocated.eq(machines::gpus_allocated - freed + gpu_count),
            machines::updated_at.eq(diesel::dsl::now),
        ))
        .execute(conn)?;
    if slices {
        crate::mig::refresh_free(conn, machine_id)?;
    }
    diesel::update(bookings::table.find(reservation_id))
        .filter(bookings::activated_at.is_null())
        .set(bookings::activated_at.eq(at))
        .execute(conn)?;
    crate::announcements::announce(
        conn,
        exchange,
        contracts::events::kinds::MACHINE_RENTED,
        MachineRental {
            host_tenant_id,
            machine_id,
            allocation_id: hold_id.into(),
            gpu_count,
            preempted: false,
            at,
            sequence: 0,
            mig: None,
        },
    )?;
    tracing::info!(
        reservation.id = %reservation_id,
        machine.id = %machine_id,
        gpus = ?whole,
        preempted = on_gpus.len(),
        "reserved block took its GPUs"
    );
    Ok(())
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}
