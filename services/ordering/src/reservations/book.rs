//! The reservation saga: find the machine and book its GPUs for the block
//! (catalog) → hold the quota (keyed by the reservation id) → charge the
//! whole block into escrow (billing) → `booked`. Each step is idempotent by
//! the reservation id, so a request that died mid-saga is resumed by
//! repeating it with the same idempotency key; a refusal gives back what
//! earlier steps took (the booking, the quota) and records the failure, and
//! the same key then answers the same error. The charge is last: nothing
//! after it can be refused, so money is never taken for a block that is
//! not booked.

use chrono::Utc;
use contracts::ErrorCode;
use contracts::api::{OfferSearch, OfferSort, ReserveQuotaRequest};
use contracts::endpoints;
use contracts::ids::{MachineId, OrderId, ReservationId, TenantId};
use contracts::reservations::{
    BookRequest, Booking, CancelBookingRequest, EscrowChargeRequest, Reservation, ReserveRequest,
};
use diesel::prelude::*;
use platform::Db;
use platform::internal::RemoteError;
use rust_decimal::Decimal;
use schema::ordering_reservations::reservations;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::store::{self, ReservationRow, Status};
use crate::{Deps, Error};

/// Machines a reservation by constraints tries before it gives up.
const CANDIDATES: usize = 5;
/// The most GPUs one reservation books.
pub const MAX_GPUS: i32 = 64;
const MAX_KEY: usize = 255;

fn validate(req: &ReserveRequest) -> Result<(), Error> {
    let mut fields = contracts::FieldErrors::new();
    if req.idempotency_key.trim().is_empty() || req.idempotency_key.len() > MAX_KEY {
        fields.add("idempotencyKey", format!("1 to {MAX_KEY} characters"));
    }
    if !(1..=MAX_GPUS).contains(&req.gpu_count) {
        fields.add("gpuCount", format!("1 to {MAX_GPUS}"));
    }
    match (&req.offer_id, &req.constraints) {
        (Some(_), Some(_)) => fields.add(
            "constraints",
            "give either an offerId or constraints, not both",
        ),
        (None, None) => fields.add("offerId", "give an offerId or constraints"),
        _ => {}
    }
    if req
        .max_price_per_gpu_hour
        .is_some_and(|p| p <= Decimal::ZERO)
    {
        fields.add("maxPricePerGpuHour", "greater than 0");
    }
    // The market-wide bounds; each machine's own terms are the catalog's.
    if let Some(problem) = contracts::reservations::check_block(
        req.starts_at,
        req.ends_at,
        Utc::now(),
        1,
        contracts::reservations::MAX_LEAD_DAYS,
    ) {
        fields.add("startsAt", problem);
    }
    fields.into_result().map_err(Error::from)
}

fn fingerprint(req: &ReserveRequest) -> String {
    let canonical = serde_json::json!({
        "offer_id": req.offer_id,
        "constraints": req.constraints,
        "gpu_count": req.gpu_count,
        "starts_at": req.starts_at,
        "ends_at": req.ends_at,
        "max_price_per_gpu_hour": req.max_price_per_gpu_hour.map(|p| p.normalize().to_string()),
        "team_id": req.team_id,
    });
    hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
}

/// `reserve`: the reservation this request made (or makes now), or why not.
pub async fn reserve(db: &Db, deps: &Deps, req: ReserveRequest) -> Result<Reservation, Error> {
    validate(&req)?;
    let print = fingerprint(&req);
    let id = match find(db, req.tenant_id, req.idempotency_key.clone()).await? {
        Some(row) if row.request_fingerprint != print => {
            return Err(Error::Conflict(
                "idempotencyKey: already used for a different reservation".into(),
            ));
        }
        Some(row) => match row.status()? {
            Status::Booked | Status::Cancelled => {
                return db.run(move |conn| store::one(conn, row)).await;
            }
            Status::Failed
                if row.failure_code.as_deref() == Some(ErrorCode::Unavailable.as_str()) =>
            {
                // Nothing about the request was refused: a fresh attempt
                // under a new id (the failed one gave back what it took).
                supersede(db, row.id, req.idempotency_key.clone()).await?;
                insert(db, &req, &print).await?
            }
            Status::Failed => return Err(failure(&row)),
            Status::Pending => row.id,
        },
        None => insert(db, &req, &print).await?,
    };
    match steps(db, deps, id, &req).await {
        Ok(()) => {
            let row = db.run(move |conn| store::load(conn, id)).await?;
            db.run(move |conn| store::one(conn, row)).await
        }
        Err(Step { error, charged }) => {
            if !charged {
                if let Err(release_error) = compensate(deps, id).await {
                    tracing::error!(reservation.id = %id, %release_error, "reservation compensation failed; the expiry pass retries");
                    return Err(error);
                }
                fail(db, id, &error).await?;
            }
            Err(error)
        }
    }
}

/// A step's error, and whether the block had been charged by then (then
/// nothing is given back: a repeat of the request finishes the saga).
struct Step {
    error: Error,
    charged: bool,
}

impl<E: Into<Error>> From<E> for Step {
    fn from(error: E) -> Self {
        Step {
            error: error.into(),
            charged: false,
        }
    }
}

async fn steps(db: &Db, deps: &Deps, id: Uuid, req: &ReserveRequest) -> Result<(), Step> {
    let booking = match existing_booking(deps, id).await? {
        Some(booking) => booking,
        None => book(deps, id, req).await?,
    };
    let hold = deps
        .quota
        .call(
            endpoints::quota::RESERVE,
            (),
            &ReserveQuotaRequest {
                order_id: OrderId(id),
                tenant_id: req.tenant_id,
                gpu_count: booking.gpu_indices.len() as i32,
                gpu_model: booking.gpu_model.clone(),
                // The block is paid up front and counts as month spend when
                // charged; nothing accrues by the hour.
                hourly_rate: Decimal::ZERO,
                team_id: req.team_id,
                renews: None,
                moves: None,
                gpu_eighths: None,
            },
        )
        .await?;
    if hold.released {
        return Err(Error::Conflict(
            "the reservation expired: its request ended before it was booked, and what it held \
             was given back; reserve again with a new idempotency key"
                .into(),
        )
        .into());
    }
    let hours = contracts::reservations::hours(booking.starts_at, booking.ends_at);
    let amount = booking.price_per_gpu_hour
        * Decimal::from(booking.gpu_indices.len() as i64)
        * Decimal::from(hours);
    deps.billing
        .call(
            endpoints::billing::ESCROW_CHARGE,
            (),
            &EscrowChargeRequest {
                reservation_id: ReservationId(id),
                renter_tenant_id: req.tenant_id,
                host_tenant_id: booking.host_tenant_id,
                machine_id: booking.machine_id,
                gpu_count: booking.gpu_indices.len() as i32,
                starts_at: booking.starts_at,
                ends_at: booking.ends_at,
                price_per_gpu_hour: booking.price_per_gpu_hour,
                amount,
                currency: booking.currency.clone(),
            },
        )
        .await?;
    let booked = db
        .run(move |conn| mark_booked(conn, id, &booking, amount))
        .await
        .map_err(|error| Step {
            error,
            charged: true,
        })?;
    if !booked {
        // Expired while the charge was away: the expiry pass gave the
        // booking and quota back, so the charge goes back too.
        refund_expired(deps, id).await;
        return Err(Step {
            error: Error::Conflict(
                "the reservation expired while it was being booked; nothing was charged in the \
                 end; reserve again with a new idempotency key"
                    .into(),
            ),
            charged: true,
        });
    }
    Ok(())
}

/// The catalog's booking of an earlier attempt of this request, if any.
async fn existing_booking(deps: &Deps, id: Uuid) -> Result<Option<Booking>, Error> {
    match deps
        .catalog
        .call(endpoints::catalog::BOOKING, ReservationId(id), &())
        .await
    {
        Ok(booking) => Ok(Some(booking)),
        Err(e) if e.code == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Books the offer, or the cheapest offer matching the constraints whose
/// GPUs are free for the block (moving on after each refusal).
async fn book(deps: &Deps, id: Uuid, req: &ReserveRequest) -> Result<Booking, Error> {
    let request = |machine_id: MachineId| BookRequest {
        reservation_id: ReservationId(id),
        tenant_id: req.tenant_id,
        machine_id,
        gpu_count: req.gpu_count,
        starts_at: req.starts_at,
        ends_at: req.ends_at,
        max_price_per_gpu_hour: req.max_price_per_gpu_hour,
    };
    if let Some(machine_id) = req.offer_id {
        return Ok(deps
            .catalog
            .call(endpoints::catalog::BOOK, (), &request(machine_id))
            .await?);
    }
    let mut last: Option<RemoteError> = None;
    for machine_id in candidates(deps, req).await? {
        match deps
            .catalog
            .call(endpoints::catalog::BOOK, (), &request(machine_id))
            .await
        {
            Ok(booking) => return Ok(booking),
            Err(e)
                if matches!(
                    e.code,
                    ErrorCode::InsufficientCapacity
                        | ErrorCode::PriceAboveMax
                        | ErrorCode::NotFound
                        | ErrorCode::Validation
                ) =>
            {
                tracing::debug!(reservation.id = %id, machine.id = %machine_id, code = e.code.as_str(), "booking refused; trying the next machine");
                last = Some(e);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(match last {
        Some(e) => Error::Remote(RemoteError {
            code: ErrorCode::InsufficientCapacity,
            message: format!(
                "no machine matching the constraints could book {} GPUs for the block (last: {})",
                req.gpu_count, e.message
            ),
            details: None,
        }),
        None => Error::Remote(RemoteError {
            code: ErrorCode::InsufficientCapacity,
            message: "no listed machine matching the constraints offers reserved blocks".into(),
            details: None,
        }),
    })
}

/// Machines matching the constraints that sell reserved blocks of enough
/// GPUs at no more than the maximum, cheapest reserved price first.
async fn candidates(deps: &Deps, req: &ReserveRequest) -> Result<Vec<MachineId>, Error> {
    let c = req.constraints.clone().unwrap_or_default();
    let page = deps
        .catalog
        .call(
            endpoints::catalog::SEARCH_OFFERS,
            (),
            &OfferSearch {
                gpu_models: c.gpu_models,
                min_vram_gib: c.min_vram_gib,
                countries: c.countries,
                regions: c.regions,
                min_reliability: c.min_reliability,
                sort: Some(OfferSort::Price),
                first: Some(100),
                ..Default::default()
            },
        )
        .await?;
    let mut offers: Vec<(Decimal, MachineId)> = page
        .offers
        .iter()
        .filter(|o| o.gpu_count >= req.gpu_count)
        .filter_map(|o| {
            o.reserved
                .as_ref()
                .map(|t| (t.price_per_gpu_hour, o.machine_id))
        })
        .filter(|(price, _)| req.max_price_per_gpu_hour.is_none_or(|max| *price <= max))
        .collect();
    offers.sort();
    Ok(offers
        .into_iter()
        .take(CANDIDATES)
        .map(|(_, m)| m)
        .collect())
}

/// Gives back what a reservation took: its booking, then its quota (both
/// idempotent, both no-ops when never taken).
pub(super) async fn compensate(deps: &Deps, id: Uuid) -> Result<(), Error> {
    match deps
        .catalog
        .call(
            endpoints::catalog::CANCEL_BOOKING,
            ReservationId(id),
            &CancelBookingRequest {
                from: None,
                reason: "the reservation was not completed".into(),
            },
        )
        .await
    {
        Ok(_) => {}
        Err(e) if e.code == ErrorCode::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    crate::holdings::release_quota(deps, id).await
}

/// A charge that went through for a reservation that expired meanwhile goes
/// back to the renter whole (the block has not started: nothing released).
pub(super) async fn refund_expired(deps: &Deps, id: Uuid) {
    let cancel = contracts::reservations::EscrowCancelRequest {
        at: contracts::time::now(),
        by_host: false,
        reason: "the reservation expired before it was booked".into(),
    };
    match deps
        .billing
        .call(
            endpoints::billing::ESCROW_CANCEL,
            ReservationId(id),
            &cancel,
        )
        .await
    {
        Ok(_) => {}
        Err(e) if e.code == ErrorCode::NotFound => {}
        Err(error) => {
            tracing::error!(reservation.id = %id, %error, "refund of an expired reservation failed; the expiry pass retries")
        }
    }
}

fn mark_booked(
    conn: &mut PgConnection,
    id: Uuid,
    booking: &Booking,
    amount: Decimal,
) -> Result<bool, Error> {
    let indices: Vec<i32> = booking
        .gpu_indices
        .iter()
        .filter_map(|&i| i32::try_from(i).ok())
        .collect();
    let updated = diesel::update(reservations::table.find(id))
        .filter(reservations::status.eq(Status::Pending.as_str()))
        .set((
            reservations::status.eq(Status::Booked.as_str()),
            reservations::machine_id.eq(booking.machine_id.into_uuid()),
            reservations::host_tenant_id.eq(booking.host_tenant_id.into_uuid()),
            reservations::gpu_model.eq(&booking.gpu_model),
            reservations::gpu_count.eq(indices.len() as i32),
            reservations::gpu_indices.eq(&indices),
            reservations::price_per_gpu_hour.eq(booking.price_per_gpu_hour),
            reservations::amount.eq(amount),
            reservations::currency.eq(&booking.currency),
            reservations::updated_at.eq(contracts::time::now()),
        ))
        .execute(conn)?;
    if updated == 1 {
        return Ok(true);
    }
    // A concurrent request with the same key finished it first.
    let row = store::load(conn, id)?;
    Ok(row.status()? == Status::Booked)
}

async fn find(db: &Db, tenant_id: TenantId, key: String) -> Result<Option<ReservationRow>, Error> {
    db.run(move |conn| {
        reservations::table
            .filter(reservations::tenant_id.eq(tenant_id.into_uuid()))
            .filter(reservations::idempotency_key.eq(key))
            .select(ReservationRow::as_select())
            .first(conn)
            .optional()
            .map_err(Error::from)
    })
    .await
}

async fn insert(db: &Db, req: &ReserveRequest, print: &str) -> Result<Uuid, Error> {
    let req = req.clone();
    let print = print.to_owned();
    db.tx(move |conn| {
        let id = Uuid::now_v7();
        let now = contracts::time::now();
        let inserted = diesel::insert_into(reservations::table)
            .values((
                reservations::id.eq(id),
                reservations::tenant_id.eq(req.tenant_id.into_uuid()),
                reservations::user_id.eq(req.user_id),
                reservations::team_id.eq(req.team_id.map(|t| t.into_uuid())),
                reservations::idempotency_key.eq(&req.idempotency_key),
                reservations::request_fingerprint.eq(&print),
                reservations::machine_id.eq(req.offer_id.map(MachineId::into_uuid)),
                reservations::gpu_count.eq(req.gpu_count),
                reservations::starts_at.eq(req.starts_at),
                reservations::ends_at.eq(req.ends_at),
                reservations::status.eq(Status::Pending.as_str()),
                reservations::created_at.eq(now),
                reservations::updated_at.eq(now),
            ))
            .on_conflict((reservations::tenant_id, reservations::idempotency_key))
            .do_nothing()
            .execute(conn)?;
        if inserted == 1 {
            return Ok(id);
        }
        // A concurrent request with the same key won the insert.
        let other: ReservationRow = reservations::table
            .filter(reservations::tenant_id.eq(req.tenant_id.into_uuid()))
            .filter(reservations::idempotency_key.eq(&req.idempotency_key))
            .select(ReservationRow::as_select())
            .first(conn)?;
        if other.request_fingerprint != print {
            return Err(Error::Conflict(
                "idempotencyKey: already used for a different reservation".into(),
            ));
        }
        Ok(other.id)
    })
    .await
}

async fn supersede(db: &Db, id: Uuid, key: String) -> Result<(), Error> {
    db.run(move |conn| {
        diesel::update(reservations::table.find(id))
            .filter(reservations::status.eq(Status::Failed.as_str()))
            .filter(reservations::idempotency_key.eq(&key))
            .set(reservations::idempotency_key.eq(format!("{key}#superseded:{id}")))
            .execute(conn)?;
        Ok(())
    })
    .await
}

async fn fail(db: &Db, id: Uuid, error: &Error) -> Result<(), Error> {
    let code = error.code().as_str().to_owned();
    let reason = error.to_string();
    db.run(move |conn| {
        diesel::update(reservations::table.find(id))
            .filter(reservations::status.eq(Status::Pending.as_str()))
            .set((
                reservations::status.eq(Status::Failed.as_str()),
                reservations::failure_code.eq(code),
                reservations::reason.eq(reason),
                reservations::quota_released_at.eq(contracts::time::now()),
                reservations::updated_at.eq(contracts::time::now()),
            ))
            .execute(conn)?;
        Ok(())
    })
    .await
}

/// The recorded refusal, answered again for the same key.
fn failure(row: &ReservationRow) -> Error {
    Error::recorded(row.failure_code.as_deref(), row.reason.clone())
}
