//! Resale: a holder lists future whole hours of a reservation (all its GPUs)
//! at a price of their choosing; a buyer's purchase carves those hours out
//! of the booking into a reservation of the buyer's.
//!
//! A purchase claims the listing under its row lock (`open → selling`, with
//! the buyer, the buyer's key and the new reservation's id), so of
//! concurrent buyers exactly one gets it and the others are refused. Then,
//! each step idempotent by the listing or the new reservation: the buyer's
//! quota hold → billing's transfer (buyer → seller less the resale fee;
//! from then on refunds for silent seconds of those hours go to the buyer)
//! → the catalog carves the hours → `sold`. A refusal before the transfer
//! reopens the listing; after it, the purchase is finished by repeating it
//! with the same key (nothing after the transfer is refused for a claimed
//! listing whose hours have not started: the claim needs an hour's margin).

use chrono::{DateTime, Duration, Utc};
use contracts::ErrorCode;
use contracts::api::ReserveQuotaRequest;
use contracts::endpoints;
use contracts::ids::{OrderId, ResaleListingId, ReservationId, TenantId};
use contracts::reservations::{
    BuyListingRequest, CarveBookingRequest, CreateListingRequest, ListingSearch, ResaleListing,
    ResaleTransferRequest, Reservation,
};
use diesel::prelude::*;
use platform::Db;
use rust_decimal::Decimal;
use schema::ordering_reservations::{resale_listings, reservations};
use uuid::Uuid;

use super::store::{self, ListingRow, Status};
use crate::{Deps, Error};

/// A purchase must claim hours at least this far ahead, so the carve that
/// follows the money never meets hours that have started.
const CLAIM_MARGIN_SECONDS: i64 = 300;
const MAX_KEY: usize = 255;
const MAX_LISTED: i64 = 200;

/// Lists hours `[starts_at, ends_at)` of the caller's reservation.
pub async fn create(
    db: &Db,
    reservation_id: ReservationId,
    req: CreateListingRequest,
) -> Result<ResaleListing, Error> {
    let mut fields = contracts::FieldErrors::new();
    if let Err(e) =
        contracts::bounds::check(req.price_per_gpu_hour, contracts::bounds::GPU_HOUR_BID)
    {
        fields.add("pricePerGpuHour", e.to_string());
    }
    if !contracts::reservations::whole_hour(req.starts_at)
        || !contracts::reservations::whole_hour(req.ends_at)
    {
        fields.add("startsAt", "listed hours are whole UTC hours");
    }
    if req.ends_at <= req.starts_at {
        fields.add("endsAt", "must be after startsAt");
    }
    if req.starts_at <= Utc::now() {
        fields.add("startsAt", "hours that have started cannot be sold");
    }
    fields.into_result()?;
    db.tx(move |conn| {
        let row = store::owned(conn, reservation_id.into_uuid(), req.tenant_id)?;
        if row.status()? != Status::Booked {
            return Err(Error::Conflict(format!(
                "reservation {reservation_id} is {}; only booked hours are sold",
                row.status
            )));
        }
        if req.starts_at < row.starts_at || req.ends_at > row.ends_at {
            return Err(Error::Validation(format!(
                "startsAt: the listed hours must lie within the block, {} to {}",
                row.starts_at.to_rfc3339(),
                row.ends_at.to_rfc3339()
            )));
        }
        let (Some(machine_id), Some(gpu_model), Some(currency)) =
            (row.machine_id, row.gpu_model.clone(), row.currency.clone())
        else {
            return Err(Error::Conflict(format!(
                "reservation {reservation_id} has no booking"
            )));
        };
        let hours = contracts::reservations::hours(req.starts_at, req.ends_at);
        let amount = req.price_per_gpu_hour * Decimal::from(row.gpu_count) * Decimal::from(hours);
        let now = contracts::time::now();
        let id = Uuid::now_v7();
        let inserted = diesel::insert_into(resale_listings::table)
            .values((
                resale_listings::id.eq(id),
                resale_listings::reservation_id.eq(row.id),
                resale_listings::seller_tenant_id.eq(req.tenant_id.into_uuid()),
                resale_listings::machine_id.eq(machine_id),
                resale_listings::gpu_model.eq(gpu_model),
                resale_listings::gpu_count.eq(row.gpu_count),
                resale_listings::starts_at.eq(req.starts_at),
                resale_listings::ends_at.eq(req.ends_at),
                resale_listings::price_per_gpu_hour.eq(req.price_per_gpu_hour),
                resale_listings::amount.eq(amount),
                resale_listings::currency.eq(currency),
                resale_listings::state.eq("open"),
                resale_listings::created_at.eq(now),
                resale_listings::updated_at.eq(now),
            ))
            .execute(conn);
        match inserted {
            Ok(_) => {}
            Err(diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::ExclusionViolation,
                _,
            )) => {
                return Err(Error::Conflict(
                    "some of these hours are already listed or sold".into(),
                ));
            }
            Err(e) => return Err(e.into()),
        }
        listing(conn, id)?.to_contract(true)
    })
    .await
}

fn listing(conn: &mut PgConnection, id: Uuid) -> Result<ListingRow, Error> {
    resale_listings::table
        .find(id)
        .select(ListingRow::as_select())
        .first(conn)
        .optional()?
        .ok_or_else(|| Error::NotFound(format!("listing {id} not found")))
}

/// The seller withdraws an open listing.
pub async fn withdraw(
    db: &Db,
    id: ResaleListingId,
    tenant_id: TenantId,
) -> Result<ResaleListing, Error> {
    db.tx(move |conn| {
        let row: ListingRow = resale_listings::table
            .find(id.into_uuid())
            .filter(resale_listings::seller_tenant_id.eq(tenant_id.into_uuid()))
            .select(ListingRow::as_select())
            .for_update()
            .first(conn)
            .optional()?
            .ok_or_else(|| Error::NotFound(format!("listing {id} not found")))?;
        match row.state.as_str() {
            "open" => {
                diesel::update(resale_listings::table.find(row.id))
                    .set((
                        resale_listings::state.eq("withdrawn"),
                        resale_listings::updated_at.eq(contracts::time::now()),
                    ))
                    .execute(conn)?;
            }
            "withdrawn" => {}
            other => {
                return Err(Error::Conflict(format!(
                    "listing {id} is {other}; only an open listing is withdrawn"
                )));
            }
        }
        listing(conn, row.id)?.to_contract(true)
    })
    .await
}

/// Open listings whose hours have not started, soonest first.
pub async fn search(db: &Db, filter: ListingSearch) -> Result<Vec<ResaleListing>, Error> {
    db.run(move |conn| {
        let now = contracts::time::now();
        let from = filter.from.map_or(now, |f| f.max(now));
        let mut query = resale_listings::table
            .filter(resale_listings::state.eq("open"))
            .filter(resale_listings::starts_at.gt(from))
            .into_boxed();
        if let Some(model) = &filter.gpu_model {
            query = query.filter(resale_listings::gpu_model.ilike(model.replace(['%', '_'], "")));
        }
        if let Some(min) = filter.min_gpus {
            query = query.filter(resale_listings::gpu_count.ge(min));
        }
        let rows: Vec<ListingRow> = query
            .order((resale_listings::starts_at, resale_listings::id))
            .limit(MAX_LISTED)
            .select(ListingRow::as_select())
            .load(conn)?;
        rows.iter().map(|r| r.to_contract(false)).collect()
    })
    .await
}

/// The caller's own listings, newest first.
pub async fn mine(db: &Db, tenant_id: TenantId) -> Result<Vec<ResaleListing>, Error> {
    db.run(move |conn| {
        let rows: Vec<ListingRow> = resale_listings::table
            .filter(resale_listings::seller_tenant_id.eq(tenant_id.into_uuid()))
            .order(resale_listings::created_at.desc())
            .limit(MAX_LISTED)
            .select(ListingRow::as_select())
            .load(conn)?;
        rows.iter().map(|r| r.to_contract(true)).collect()
    })
    .await
}

/// What a purchase works with once it holds the listing.
struct Claim {
    listing: ListingRow,
    child_id: Uuid,
    /// The reservation whose escrow pays for the hours (the original block).
    escrow_id: Uuid,
    indices: Vec<i32>,
    done: bool,
}

/// Buys a listing's hours: the buyer's new reservation.
pub async fn buy(
    db: &Db,
    deps: &Deps,
    id: ResaleListingId,
    req: BuyListingRequest,
) -> Result<Reservation, Error> {
    if req.idempotency_key.trim().is_empty() || req.idempotency_key.len() > MAX_KEY {
        return Err(Error::Validation(format!(
            "idempotencyKey: 1 to {MAX_KEY} characters"
        )));
    }
    // A repeat of a purchase that finished, or was refused, answers as it did.
    let earlier = {
        let (tenant, key) = (req.tenant_id, req.idempotency_key.clone());
        db.run(move |conn| {
            reservations::table
                .filter(reservations::tenant_id.eq(tenant.into_uuid()))
                .filter(reservations::idempotency_key.eq(key))
                .select(store::ReservationRow::as_select())
                .first(conn)
                .optional()
                .map_err(Error::from)
        })
        .await?
    };
    if let Some(row) = earlier {
        if row.request_fingerprint != format!("listing:{id}") {
            return Err(Error::Conflict(
                "idempotencyKey: already used for something else".into(),
            ));
        }
        match row.status()? {
            Status::Failed => {
                return Err(Error::recorded(row.failure_code.as_deref(), row.reason));
            }
            Status::Booked | Status::Cancelled => {
                return db.run(move |conn| store::one(conn, row)).await;
            }
            Status::Pending => {}
        }
    }
    let claim = {
        let req = req.clone();
        db.tx(move |conn| claim(conn, id.into_uuid(), &req)).await?
    };
    let child_id = claim.child_id;
    if !claim.done {
        finish(db, deps, &claim, req.tenant_id).await?;
    }
    db.run(move |conn| {
        let row = store::load(conn, child_id)?;
        store::one(conn, row)
    })
    .await
}

fn claim(conn: &mut PgConnection, id: Uuid, req: &BuyListingRequest) -> Result<Claim, Error> {
    let row: ListingRow = resale_listings::table
        .find(id)
        .select(ListingRow::as_select())
        .for_update()
        .first(conn)
        .optional()?
        .ok_or_else(|| Error::NotFound(format!("listing {id} not found")))?;
    let parent = store::load(conn, row.reservation_id)?;
    let escrow_id = store::root(conn, parent.id)?;
    let mine = row.buyer_tenant_id == Some(req.tenant_id.into_uuid())
        && row.buyer_key.as_deref() == Some(req.idempotency_key.as_str());
    match row.state.as_str() {
        "selling" | "sold" if mine => {
            let child_id = row.child_reservation_id.ok_or_else(|| {
                Error::Conflict(format!("listing {id} has no buyer's reservation"))
            })?;
            return Ok(Claim {
                done: row.state == "sold",
                child_id,
                escrow_id,
                indices: parent.gpu_indices.clone(),
                listing: row,
            });
        }
        "open" => {}
        other => {
            return Err(Error::Conflict(format!(
                "listing {id} is {other}; it cannot be bought"
            )));
        }
    }
    if row.seller_tenant_id == req.tenant_id.into_uuid() {
        return Err(Error::Validation(
            "listingId: this is your own listing; withdraw it instead".into(),
        ));
    }
    let now = contracts::time::now();
    if row.starts_at <= now + Duration::seconds(CLAIM_MARGIN_SECONDS) {
        return Err(Error::Conflict(format!(
            "listing {id}'s hours start at {}, too soon to be bought",
            row.starts_at.to_rfc3339()
        )));
    }
    if parent.status()? != Status::Booked {
        return Err(Error::Conflict(format!(
            "listing {id}'s reservation is {}; it cannot be bought",
            parent.status
        )));
    }
    let child_id = Uuid::now_v7();
    let inserted = diesel::insert_into(reservations::table)
        .values((
            reservations::id.eq(child_id),
            reservations::tenant_id.eq(req.tenant_id.into_uuid()),
            reservations::user_id.eq(req.user_id),
            reservations::idempotency_key.eq(&req.idempotency_key),
            reservations::request_fingerprint.eq(format!("listing:{id}")),
            reservations::machine_id.eq(row.machine_id),
            reservations::host_tenant_id.eq(parent.host_tenant_id),
            reservations::gpu_model.eq(&row.gpu_model),
            reservations::gpu_count.eq(row.gpu_count),
            reservations::starts_at.eq(row.starts_at),
            reservations::ends_at.eq(row.ends_at),
            reservations::price_per_gpu_hour.eq(row.price_per_gpu_hour),
            reservations::amount.eq(row.amount),
            reservations::currency.eq(&row.currency),
            reservations::status.eq(Status::Pending.as_str()),
            reservations::parent_id.eq(row.reservation_id),
            reservations::listing_id.eq(row.id),
            reservations::created_at.eq(now),
            reservations::updated_at.eq(now),
        ))
        .on_conflict_do_nothing()
        .execute(conn)?;
    if inserted == 0 {
        return Err(Error::Conflict(
            "idempotencyKey: already used for something else".into(),
        ));
    }
    diesel::update(resale_listings::table.find(id))
        .set((
            resale_listings::state.eq("selling"),
            resale_listings::buyer_tenant_id.eq(req.tenant_id.into_uuid()),
            resale_listings::buyer_key.eq(&req.idempotency_key),
            resale_listings::child_reservation_id.eq(child_id),
            resale_listings::updated_at.eq(now),
        ))
        .execute(conn)?;
    Ok(Claim {
        listing: listing(conn, id)?,
        child_id,
        escrow_id,
        indices: parent.gpu_indices.clone(),
        done: false,
    })
}

async fn finish(db: &Db, deps: &Deps, claim: &Claim, buyer: TenantId) -> Result<(), Error> {
    let l = &claim.listing;
    let child_id = claim.child_id;
    let quota = deps
        .quota
        .call(
            endpoints::quota::RESERVE,
            (),
            &ReserveQuotaRequest {
                order_id: OrderId(child_id),
                tenant_id: buyer,
                gpu_count: l.gpu_count,
                gpu_model: l.gpu_model.clone(),
                hourly_rate: Decimal::ZERO,
                team_id: None,
                renews: None,
                moves: None,
                gpu_eighths: None,
            },
        )
        .await;
    if let Err(e) = quota {
        reopen(db, deps, claim, &Error::Remote(e.clone())).await;
        return Err(e.into());
    }
    let transfer = deps
        .billing
        .call(
            endpoints::billing::RESALE_TRANSFER,
            (),
            &ResaleTransferRequest {
                listing_id: ResaleListingId(l.id),
                escrow_reservation_id: ReservationId(claim.escrow_id),
                child_reservation_id: ReservationId(child_id),
                buyer_tenant_id: buyer,
                seller_tenant_id: TenantId(l.seller_tenant_id),
                amount: l.amount,
                starts_at: l.starts_at,
                ends_at: l.ends_at,
            },
        )
        .await;
    match transfer {
        Ok(_) => {}
        // Refused (the buyer's balance): nothing moved; the listing opens again.
        Err(e) if e.code != ErrorCode::Unavailable && e.code != ErrorCode::Internal => {
            reopen(db, deps, claim, &Error::Remote(e.clone())).await;
            return Err(e.into());
        }
        // Not known whether it went through: a repeat with the same key
        // finishes (the transfer is idempotent by the listing).
        Err(e) => return Err(e.into()),
    }
    deps.catalog
        .call(
            endpoints::catalog::CARVE_BOOKING,
            ReservationId(l.reservation_id),
            &CarveBookingRequest {
                child_reservation_id: ReservationId(child_id),
                child_tenant_id: buyer,
                starts_at: l.starts_at,
                ends_at: l.ends_at,
            },
        )
        .await?;
    let listing_id = l.id;
    let indices = claim.indices.clone();
    db.tx(move |conn| {
        let now = contracts::time::now();
        diesel::update(resale_listings::table.find(listing_id))
            .filter(resale_listings::state.eq("selling"))
            .set((
                resale_listings::state.eq("sold"),
                resale_listings::updated_at.eq(now),
            ))
            .execute(conn)?;
        diesel::update(reservations::table.find(child_id))
            .filter(reservations::status.eq(Status::Pending.as_str()))
            .set((
                reservations::status.eq(Status::Booked.as_str()),
                reservations::gpu_indices.eq(&indices),
                reservations::updated_at.eq(now),
            ))
            .execute(conn)?;
        Ok(())
    })
    .await
}

/// A purchase refused before any money moved: the listing is open again
/// and the buyer's reservation failed (with the refusal, for the same key).
async fn reopen(db: &Db, deps: &Deps, claim: &Claim, error: &Error) {
    if let Err(release_error) = crate::holdings::release_quota(deps, claim.child_id).await {
        tracing::error!(reservation.id = %claim.child_id, %release_error, "quota release after a refused purchase failed");
    }
    let listing_id = claim.listing.id;
    let child_id = claim.child_id;
    let code = error.code().as_str().to_owned();
    let reason = error.to_string();
    let result = db
        .tx(move |conn| {
            let now: DateTime<Utc> = contracts::time::now();
            diesel::update(resale_listings::table.find(listing_id))
                .filter(resale_listings::state.eq("selling"))
                .filter(resale_listings::child_reservation_id.eq(child_id))
                .set((
                    resale_listings::state.eq("open"),
                    resale_listings::buyer_tenant_id.eq(None::<Uuid>),
                    resale_listings::buyer_key.eq(None::<String>),
                    resale_listings::child_reservation_id.eq(None::<Uuid>),
                    resale_listings::updated_at.eq(now),
                ))
                .execute(conn)?;
            diesel::update(reservations::table.find(child_id))
                .filter(reservations::status.eq(Status::Pending.as_str()))
                .set((
                    reservations::status.eq(Status::Failed.as_str()),
                    // The listing is open again: another buyer's reservation
                    // will name it (`reservations_listing` is unique).
                    reservations::listing_id.eq(None::<Uuid>),
                    reservations::failure_code.eq(code),
                    reservations::reason.eq(reason),
                    reservations::quota_released_at.eq(now),
                    reservations::updated_at.eq(now),
                ))
                .execute(conn)?;
            Ok::<_, Error>(())
        })
        .await;
    if let Err(error) = result {
        tracing::error!(listing.id = %listing_id, %error, "reopening a listing failed");
    }
}
