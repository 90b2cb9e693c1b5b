//! GPU allocations, all-or-nothing per order and idempotent by order id (the
//! holding key). An allocation locks the machine's row, so racing orders for
//! one machine are serialised; under that lock it checks the price against
//! the order's maximum (or the bid against the minimum bid), frees GPUs by
//! preempting lower-priority interruptible holdings when needed (see
//! [`crate::preemption`]), and takes the GPUs, all in one transaction. The
//! check constraint on `gpus_allocated` is the last line of defence.
//!
//! The rates committed with the allocation (GPU price or bid, storage and
//! bandwidth prices, currency) are stored on it: they are what the renter is
//! billed, and a repeated allocate answers the same snapshot.
//!
//! Reserved blocks (docs/reservations.md): a rental never gets a GPU inside
//! a booked period that has started, prefers GPUs with no booking ahead (then
//! the latest next booking, [`crate::gpu_choice`]) and is told when it must
//! end (`ends_by`); an allocation with a `reservation_id` takes GPUs of that
//! running block instead ([`crate::block_allocations`]).

use chrono::{DateTime, Utc};
use contracts::api::{AllocateRequest, Allocation, RentalType};
use contracts::events::MachineRental;
use contracts::ids::{MachineId, OrderId, ReservationId, TenantId};
use contracts::mig::MigSlice;
use diesel::prelude::*;
use platform::Db;
use rust_decimal::Decimal;
use schema::catalog::{allocations, machines};
use uuid::Uuid;

use crate::{Error, gpu_choice, preemption};

/// Where the catalog's events go (the `catalog.*` routing keys).
#[derive(Clone)]
pub struct Events(pub String);

type StoredRow = (
    (
        Uuid,
        Uuid,
        i32,
        Option<DateTime<Utc>>,
        Option<DateTime<Utc>>,
    ),
    (String, Option<Decimal>, Option<Decimal>),
    (Option<Decimal>, Option<Decimal>, Option<String>),
    (Uuid, String, i32),
    (
        Vec<i16>,
        Option<String>,
        Option<i16>,
        Option<i16>,
        Option<i16>,
    ),
    Option<Uuid>,
);

fn existing(conn: &mut PgConnection, order_id: OrderId) -> Result<Option<Allocation>, Error> {
    let row: Option<StoredRow> = allocations::table
        .inner_join(machines::table)
        .filter(allocations::order_id.eq(order_id))
        .select((
            (
                allocations::order_id,
                allocations::machine_id,
                allocations::gpu_count,
                allocations::released_at,
                allocations::preempted_at,
            ),
            (
                allocations::rental_type,
                allocations::price_per_gpu_hour,
                allocations::storage_price_per_gb_month,
            ),
            (
                allocations::bandwidth_up_price_per_tb,
                allocations::bandwidth_down_price_per_tb,
                allocations::currency,
            ),
            (
                machines::host_tenant_id,
                machines::gpu_model,
                machines::gpu_count,
            ),
            (
                allocations::gpu_indices,
                allocations::mig_profile,
                allocations::mig_gpu_index,
                allocations::mig_start,
                allocations::mig_size,
            ),
            allocations::reservation_id,
        ))
        .first(conn)
        .optional()?;
    // When the GPUs stop being the allocation's, as of now (a booking made
    // since moves it).
    let (reservation, ends_by) = match &row {
        Some((first, _, _, _, (indices, ..), reservation)) if first.3.is_none() => (
            *reservation,
            crate::block_allocations::ends_by(
                conn,
                MachineId(first.1),
                indices,
                *reservation,
                contracts::time::now(),
            )?,
        ),
        Some((.., reservation)) => (*reservation, None),
        None => (None, None),
    };
    let mut found = row.map(
        |(
            (order_id, machine_id, gpu_count, released_at, preempted_at),
            (rental_type, price, storage),
            (up, down, currency),
            (host_tenant_id, gpu_model, machine_gpu_count),
            (indices, mig_profile, mig_index, mig_start, mig_size),
            _,
        )| Allocation {
            reservation_id: reservation.map(ReservationId),
            ends_by,
            order_id: OrderId(order_id),
            machine_id: MachineId(machine_id),
            host_tenant_id: TenantId(host_tenant_id),
            gpu_count,
            released: released_at.is_some(),
            preempted: preempted_at.is_some(),
            gpu_model,
            machine_gpu_count,
            rental_type: RentalType::parse(&rental_type).unwrap_or_default(),
            price_per_gpu_hour: price.unwrap_or_default().normalize(),
            storage_price_per_gb_month: storage.unwrap_or_default().normalize(),
            bandwidth_up_price_per_tb: up.unwrap_or_default().normalize(),
            bandwidth_down_price_per_tb: down.unwrap_or_default().normalize(),
            currency: currency.unwrap_or_default(),
            gpu_indices: indices
                .into_iter()
                .filter_map(|i| u32::try_from(i).ok())
                .collect(),
            mig: match (mig_profile, mig_index, mig_start, mig_size) {
                (Some(profile), Some(index), Some(start), Some(size)) => Some(MigSlice {
                    profile,
                    gpu_index: u32::try_from(index).unwrap_or(0),
                    start: u8::try_from(start).unwrap_or(0),
                    size: u8::try_from(size).unwrap_or(0),
                    // Filled in below from the profile.
                    nvml_profile: 0,
                }),
                _ => None,
            },
        },
    );
    // NVML's constant of the profile, which the agent creates it with.
    if let Some(found) = found.as_mut()
        && let Some(slice) = found.mig.as_mut()
    {
        slice.nvml_profile = crate::mig::profiles(conn, &found.gpu_model)?
            .iter()
            .find(|p| p.name == slice.profile)
            .map_or(0, |p| p.nvml_profile);
    }
    Ok(found)
}

fn validate(req: &AllocateRequest) -> Result<(), Error> {
    if req.gpu_count < 1 {
        return Err(Error::Validation("gpuCount: at least 1".into()));
    }
    if req.reservation_id.is_some() {
        if req.rental_type != RentalType::OnDemand {
            return Err(Error::Validation(
                "rentalType: GPUs of a reserved block are rented on demand".into(),
            ));
        }
        if req.mig_profile.is_some() {
            return Err(Error::Validation(
                "migProfile: a reserved block holds whole GPUs".into(),
            ));
        }
    }
    match (req.continue_up_to_per_gpu_hour, req.reservation_id) {
        (Some(_), None) => {
            return Err(Error::Validation(
                "continueUpToPerGpuHour: only for GPUs of a reserved block".into(),
            ));
        }
        (Some(ceiling), Some(_)) if ceiling <= Decimal::ZERO => {
            return Err(Error::Validation(
                "maxPricePerGpuHour: must be positive".into(),
            ));
        }
        _ => {}
    }
    if let Some(profile) = &req.mig_profile {
        contracts::mig::check_slice_order(profile, req.gpu_count, req.rental_type)
            .map_err(Error::Validation)?;
    }
    match (req.rental_type, req.bid_per_gpu_hour) {
        (RentalType::Interruptible, None) => Err(Error::Validation(
            "bidPerGpuHour: required for an interruptible rental".into(),
        )),
        (RentalType::Interruptible, Some(bid)) if bid <= Decimal::ZERO => {
            Err(Error::Validation("bidPerGpuHour: must be positive".into()))
        }
        (RentalType::OnDemand, Some(_)) => Err(Error::Validation(
            "bidPerGpuHour: only for interruptible rentals".into(),
        )),
        _ => Ok(()),
    }
}

pub async fn allocate(db: &Db, events: &Events, req: AllocateRequest) -> Result<Allocation, Error> {
    validate(&req)?;
    let order_id = req.order_id;
    let exchange = events.0.clone();
    match db.tx(move |conn| take(conn, &exchange, &req)).await {
        // The same order allocated concurrently: the other transaction won
        // and ours rolled back with its capacity; answer what it got.
        Err(Error::Database(diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::UniqueViolation,
            _,
        ))) => db
            .run(move |conn| existing(conn, order_id))
            .await?
            .ok_or_else(|| Error::Conflict("allocation vanished; retry".into())),
        other => other,
    }
}

/// The machine as the allocation sees it under its row lock.
#[derive(Queryable)]
struct Locked {
    host_tenant_id: TenantId,
    gpu_model: String,
    gpu_count: i32,
    listed: bool,
    price_per_gpu_hour: Option<Decimal>,
    min_bid_per_gpu_hour: Option<Decimal>,
    storage_price_per_gb_month: Decimal,
    bandwidth_up_price_per_tb: Decimal,
    bandwidth_down_price_per_tb: Decimal,
    currency: String,
}

fn take(
    conn: &mut PgConnection,
    exchange: &str,
    req: &AllocateRequest,
) -> Result<Allocation, Error> {
    if let Some(found) = existing(conn, req.order_id)? {
        return Ok(found);
    }
    if let Some(reservation_id) = req.reservation_id {
        return crate::block_allocations::take(conn, req, reservation_id);
    }
    let machine: Option<Locked> = machines::table
        .find(req.machine_id)
        .select((
            machines::host_tenant_id,
            machines::gpu_model,
            machines::gpu_count,
            machines::listed,
            machines::price_per_gpu_hour,
            machines::min_bid_per_gpu_hour,
            machines::storage_price_per_gb_month,
            machines::bandwidth_up_price_per_tb,
            machines::bandwidth_down_price_per_tb,
            machines::currency,
        ))
        .for_update()
        .first(conn)
        .optional()?;
    let Some(m) = machine.filter(|m| m.listed) else {
        return Err(Error::NotFound(format!(
            "offer {} not found",
            req.machine_id
        )));
    };
    if let Some(profile) = &req.mig_profile {
        return take_slice(conn, exchange, req, m, profile);
    }
    let price = billed_price(&m, req)?;
    if req.gpu_count > m.gpu_count {
        return Err(Error::InsufficientCapacity(format!(
            "the machine has {} GPUs; the order asks for {}",
            m.gpu_count, req.gpu_count
        )));
    }
    let at = contracts::time::now();
    // GPUs in MIG mode are never rented whole, nor GPUs inside a booked
    // period that has started (its block holds them, or will at the
    // sweeper's next pass).
    let gpus = crate::gpu_state::load_one(conn, req.machine_id.into_uuid(), at)?;
    let free = i32::try_from(gpu_choice::free_for_rental(&gpus, &[]).len()).unwrap_or(0);
    let needed = req.gpu_count - free;
    let victims = if needed > 0 {
        let holdings = preemption::holdings(conn, req.machine_id)?;
        // Each counted by the GPUs it would free for this order (not those
        // inside a started block: they go to the block).
        let usable: Vec<preemption::Holding> = holdings
            .iter()
            .map(|h| preemption::Holding {
                gpu_count: i32::try_from(gpu_choice::usable_from(&gpus, h.order_id.into()))
                    .unwrap_or(0),
                ..h.clone()
            })
            .filter(|h| h.gpu_count > 0)
            .collect();
        let chosen = preemption::choose(&usable, req.rental_type, req.bid_per_gpu_hour, needed)
            .ok_or_else(|| {
                Error::InsufficientCapacity(format!(
                    "machine has {free} of {} GPUs free and not enough held by lower-priority \
                     interruptible rentals; the order asks for {}",
                    m.gpu_count, req.gpu_count
                ))
            })?;
        // As stored: a preemption gives back all of a holding's GPUs.
        holdings
            .into_iter()
            .filter(|h| chosen.iter().any(|c| c.order_id == h.order_id))
            .collect()
    } else {
        Vec::new()
    };
    let victim_keys: Vec<Uuid> = victims.iter().map(|v| v.order_id.into()).collect();
    let usable = gpu_choice::free_for_rental(&gpus, &victim_keys);
    let Some(indices) = gpu_choice::choose_for_rental(
        &usable,
        usize::try_from(req.gpu_count).unwrap_or(usize::MAX),
    ) else {
        return Err(Error::Conflict(
            "the machine's GPUs changed concurrently; retry".into(),
        ));
    };
    let ends_by = gpu_choice::ends_by(&gpus, &indices);
    let mut freed = 0;
    for victim in &victims {
        freed += preemption::preempt(
            conn,
            exchange,
            req.machine_id,
            victim,
            req.order_id.into(),
            at,
        )?;
        crate::announcements::announce(
            conn,
            exchange,
            contracts::events::kinds::MACHINE_RELEASED,
            MachineRental {
                mig: None,
                host_tenant_id: m.host_tenant_id,
                machine_id: req.machine_id,
                allocation_id: victim.order_id.into(),
                gpu_count: victim.gpu_count,
                preempted: true,
                at,
                sequence: 0,
            },
        )?;
    }
    let updated = diesel::update(machines::table.find(req.machine_id))
        .filter(
            (machines::gpus_allocated - freed + req.gpu_count + machines::mig_gpus)
                .le(machines::gpu_count),
        )
        .set((
            machines::gpus_allocated.eq(machines::gpus_allocated - freed + req.gpu_count),
            machines::updated_at.eq(diesel::dsl::now),
        ))
        .execute(conn)?;
    if updated != 1 {
        return Err(Error::Conflict(
            "machine changed concurrently; retry".into(),
        ));
    }
    diesel::insert_into(allocations::table)
        .values((
            allocations::order_id.eq(req.order_id),
            allocations::machine_id.eq(req.machine_id),
            allocations::tenant_id.eq(req.tenant_id),
            allocations::gpu_count.eq(req.gpu_count),
            allocations::rental_type.eq(req.rental_type.as_str()),
            allocations::bid_per_gpu_hour.eq(req.bid_per_gpu_hour),
            allocations::instance_id.eq(req.instance_id),
            allocations::price_per_gpu_hour.eq(price),
            allocations::storage_price_per_gb_month.eq(m.storage_price_per_gb_month),
            allocations::bandwidth_up_price_per_tb.eq(m.bandwidth_up_price_per_tb),
            allocations::bandwidth_down_price_per_tb.eq(m.bandwidth_down_price_per_tb),
            allocations::currency.eq(&m.currency),
        ))
        .execute(conn)?;
    crate::mig::hold_whole(conn, req.machine_id, req.order_id, &indices)?;
    diesel::update(allocations::table.find(req.order_id))
        .set(
            allocations::gpu_indices.eq(indices
                .iter()
                .filter_map(|&i| i16::try_from(i).ok())
                .collect::<Vec<_>>()),
        )
        .execute(conn)?;
    crate::announcements::announce(
        conn,
        exchange,
        contracts::events::kinds::MACHINE_RENTED,
        MachineRental {
            mig: None,
            host_tenant_id: m.host_tenant_id,
            machine_id: req.machine_id,
            allocation_id: req.order_id.into(),
            gpu_count: req.gpu_count,
            preempted: false,
            at,
            sequence: 0,
        },
    )?;
    Ok(Allocation {
        ends_by,
        ..committed(req, m, price, indices, None)
    })
}

/// A MIG slice for the order: placed best-fit under the machine's lock,
/// held slice by slice, billed at the slice's price per hour (stored as the
/// allocation's GPU rate, with one "GPU", so billing needs no other rule).
fn take_slice(
    conn: &mut PgConnection,
    exchange: &str,
    req: &AllocateRequest,
    m: Locked,
    profile: &str,
) -> Result<Allocation, Error> {
    let Some(gpu_price) = m.price_per_gpu_hour else {
        return Err(Error::NotFound(format!(
            "offer {} not found",
            req.machine_id
        )));
    };
    // The allocation row first: the holds refer to it.
    diesel::insert_into(allocations::table)
        .values((
            allocations::order_id.eq(req.order_id),
            allocations::machine_id.eq(req.machine_id),
            allocations::tenant_id.eq(req.tenant_id),
            allocations::gpu_count.eq(1),
            allocations::rental_type.eq(RentalType::OnDemand.as_str()),
            allocations::instance_id.eq(req.instance_id),
            allocations::storage_price_per_gb_month.eq(m.storage_price_per_gb_month),
            allocations::bandwidth_up_price_per_tb.eq(m.bandwidth_up_price_per_tb),
            allocations::bandwidth_down_price_per_tb.eq(m.bandwidth_down_price_per_tb),
            allocations::currency.eq(&m.currency),
        ))
        .execute(conn)?;
    let (slice, price) = crate::mig::take_slice(
        conn,
        req.machine_id,
        &m.gpu_model,
        gpu_price,
        req.order_id,
        profile,
    )?;
    if let Some(max) = req.max_price_per_gpu_hour
        && price > max
    {
        return Err(Error::PriceAboveMax(format!(
            "a {profile} slice of the machine now costs {} {} per hour, above the order's maximum of {}",
            price.normalize(),
            m.currency,
            max.normalize()
        )));
    }
    let small = |v: u32| i16::try_from(v).unwrap_or(i16::MAX);
    diesel::update(allocations::table.find(req.order_id))
        .set((
            allocations::price_per_gpu_hour.eq(price),
            allocations::mig_profile.eq(&slice.profile),
            allocations::mig_gpu_index.eq(small(slice.gpu_index)),
            allocations::mig_start.eq(i16::from(slice.start)),
            allocations::mig_size.eq(i16::from(slice.size)),
        ))
        .execute(conn)?;
    diesel::update(machines::table.find(req.machine_id))
        .set(machines::updated_at.eq(diesel::dsl::now))
        .execute(conn)?;
    crate::mig::refresh_free(conn, req.machine_id)?;
    let at = contracts::time::now();
    crate::announcements::announce(
        conn,
        exchange,
        contracts::events::kinds::MACHINE_RENTED,
        MachineRental {
            host_tenant_id: m.host_tenant_id,
            machine_id: req.machine_id,
            allocation_id: req.order_id.into(),
            gpu_count: 1,
            preempted: false,
            at,
            sequence: 0,
            mig: Some(slice.clone()),
        },
    )?;
    // `validate` made a slice order one GPU, on demand: the request's
    // count and rental type are the slice's.
    Ok(committed(req, m, price, Vec::new(), Some(slice)))
}

/// What a new allocation answers: the request, the machine's terms under
/// its lock, and the GPU rate, GPU indices or slice it committed to.
fn committed(
    req: &AllocateRequest,
    m: Locked,
    price: Decimal,
    gpu_indices: Vec<u32>,
    mig: Option<MigSlice>,
) -> Allocation {
    Allocation {
        reservation_id: Default::default(),
        ends_by: Default::default(),
        order_id: req.order_id,
        machine_id: req.machine_id,
        host_tenant_id: m.host_tenant_id,
        gpu_count: req.gpu_count,
        released: false,
        preempted: false,
        gpu_model: m.gpu_model,
        machine_gpu_count: m.gpu_count,
        rental_type: req.rental_type,
        price_per_gpu_hour: price.normalize(),
        storage_price_per_gb_month: m.storage_price_per_gb_month.normalize(),
        bandwidth_up_price_per_tb: m.bandwidth_up_price_per_tb.normalize(),
        bandwidth_down_price_per_tb: m.bandwidth_down_price_per_tb.normalize(),
        currency: m.currency,
        gpu_indices,
        mig,
    }
}

/// The GPU rate the renter will pay, checked against the machine's terms as
/// they are now: the on-demand price within the order's maximum, or the bid
/// at or above the machine's minimum bid.
fn billed_price(m: &Locked, req: &AllocateRequest) -> Result<Decimal, Error> {
    match req.rental_type {
        RentalType::OnDemand => {
            let Some(price) = m.price_per_gpu_hour else {
                return Err(Error::NotFound(format!(
                    "offer {} not found",
                    req.machine_id
                )));
            };
            if let Some(max) = req.max_price_per_gpu_hour
                && price > max
            {
                return Err(Error::PriceAboveMax(format!(
                    "the machine now costs {} {} per GPU-hour, above the order's maximum of {}",
                    price.normalize(),
                    m.currency,
                    max.normalize()
                )));
            }
            Ok(price)
        }
        RentalType::Interruptible => {
            let bid = req.bid_per_gpu_hour.unwrap_or_default();
            let Some(min_bid) = m.min_bid_per_gpu_hour else {
                return Err(Error::Validation(
                    "rentalType: this machine takes no interruptible rentals (no minimum bid set)"
                        .into(),
                ));
            };
            if bid < min_bid {
                return Err(Error::Validation(format!(
                    "bidPerGpuHour: {} is below the machine's minimum bid of {} {} per GPU-hour",
                    bid.normalize(),
                    min_bid.normalize(),
                    m.currency
                )));
            }
            Ok(bid)
        }
    }
}

/// Returns an order's GPUs to the machine; releasing twice (or releasing a
/// preempted allocation, whose GPUs went to its preemptor) changes nothing.
/// The machine row is locked first, in the order an allocation locks, so a
/// release and a preempting allocation cannot deadlock.
pub async fn release(db: &Db, events: &Events, order_id: OrderId) -> Result<(), Error> {
    let exchange = events.0.clone();
    db.tx(move |conn| {
        // A block's own hold is the sweeper's to give back (crate::blocks).
        let machine_id: Option<Uuid> = allocations::table
            .find(order_id)
            .filter(allocations::released_at.is_null())
            .filter(allocations::block_reservation_id.is_null())
            .select(allocations::machine_id)
            .first(conn)
            .optional()?;
        let Some(machine_id) = machine_id else {
            return Ok(());
        };
        let host_tenant_id: TenantId = machines::table
            .find(machine_id)
            .select(machines::host_tenant_id)
            .for_update()
            .first(conn)?;
        let released: Option<(i32, Option<String>, Option<Uuid>)> =
            diesel::update(allocations::table.find(order_id))
                .filter(allocations::released_at.is_null())
                .filter(allocations::block_reservation_id.is_null())
                .set(allocations::released_at.eq(diesel::dsl::now))
                .returning((
                    allocations::gpu_count,
                    allocations::mig_profile,
                    allocations::reservation_id,
                ))
                .get_result(conn)
                .optional()?;
        if let Some((_, _, Some(_))) = released {
            // Inside a reserved block: its GPUs go back to the block, which
            // still holds them on the machine.
            crate::block_allocations::release_uses(conn, order_id)?;
            return Ok(());
        }
        if let Some((gpu_count, slice, None)) = released {
            // The slice given back, for the host's event (read before its
            // holds go).
            let mig = match slice {
                Some(_) => existing(conn, order_id)?.and_then(|a| a.mig),
                None => None,
            };
            crate::mig::release_holds(conn, order_id)?;
            // A slice never counted on the whole-GPU counter.
            let whole = if slice.is_some() { 0 } else { gpu_count };
            diesel::update(machines::table.find(machine_id))
                .set((
                    machines::gpus_allocated.eq(machines::gpus_allocated - whole),
                    machines::updated_at.eq(diesel::dsl::now),
                ))
                .execute(conn)?;
            if slice.is_some() {
                crate::mig::refresh_free(conn, MachineId(machine_id))?;
            }
            crate::announcements::announce(
                conn,
                &exchange,
                contracts::events::kinds::MACHINE_RELEASED,
                MachineRental {
                    host_tenant_id,
                    machine_id: MachineId(machine_id),
                    allocation_id: order_id.into(),
                    gpu_count,
                    preempted: false,
                    at: contracts::time::now(),
                    sequence: 0,
                    mig,
                },
            )?;
        }
        Ok(())
    })
    .await
}
