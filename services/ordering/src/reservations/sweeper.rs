//! The reservations' clock in ordering, every few seconds, safe with several
//! replicas (each step is a conditional update or an idempotent call):
//!
//! - a reservation still `pending` past [`DEADLINE_SECONDS`] (its request
//!   died mid-saga and nobody repeated it) fails as expired, and what it
//!   took is given back: the booking, the quota and, should the charge have
//!   gone through, the escrow (refunded whole: its block has not started).
//!   A resale purchase in flight is left to its buyer (its money may have
//!   moved; repeating the purchase finishes it);
//! - listings whose hours started unsold expire;
//! - the quota hold of a block that ended (or was cancelled) is given back.

use std::time::Duration;

use chrono::TimeDelta;
use diesel::prelude::*;
use platform::Db;
use schema::ordering_reservations::{resale_listings, reservations};
use tracing::Instrument;
use uuid::Uuid;

use super::store::Status;
use crate::{Deps, Error};

/// As long as an order's (`crate::expiry`): longer than any request lasts.
pub const DEADLINE_SECONDS: i64 = 300;
const TICK: Duration = Duration::from_secs(5);
const PAGE: i64 = 100;

pub(crate) fn spawn(deps: Deps, db: Db) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Err(error) = pass(&db, &deps)
                .instrument(tracing::info_span!("reservation_sweep"))
                .await
            {
                tracing::warn!(%error, "reservation sweep failed");
            }
            tokio::time::sleep(TICK).await;
        }
    })
}

async fn pass(db: &Db, deps: &Deps) -> Result<(), Error> {
    // Pending past the deadline: failed first (the saga's final update
    // needs `pending`, so it cannot book it afterwards), then given back.
    let expired: Vec<Uuid> = db
        .run(|conn| {
            let now = contracts::time::now();
            let ids: Vec<Uuid> = reservations::table
                .filter(reservations::status.eq(Status::Pending.as_str()))
                .filter(reservations::listing_id.is_null())
                .filter(reservations::created_at.lt(now - TimeDelta::seconds(DEADLINE_SECONDS)))
                .select(reservations::id)
                .limit(PAGE)
                .load(conn)?;
            diesel::update(reservations::table)
                .filter(reservations::id.eq_any(&ids))
                .filter(reservations::status.eq(Status::Pending.as_str()))
                .set((
                    reservations::status.eq(Status::Failed.as_str()),
                    reservations::failure_code.eq("CONFLICT"),
                    reservations::reason.eq(
                        "the reservation expired: its request ended before it was booked; \
                         reserve again with a new idempotency key",
                    ),
                    reservations::updated_at.eq(now),
                ))
                .execute(conn)?;
            Ok::<_, Error>(ids)
        })
        .await?;
    for id in expired {
        super::book::compensate(deps, id).await?;
        super::book::refund_expired(deps, id).await;
        db.run(move |conn| {
            diesel::update(reservations::table.find(id))
                .set(reservations::quota_released_at.eq(contracts::time::now()))
                .execute(conn)?;
            Ok::<_, Error>(())
        })
        .await?;
        tracing::info!(reservation.id = %id, "expired reservation given back");
    }

    let expired_listings = db
        .run(|conn| {
            let now = contracts::time::now();
            Ok::<_, Error>(
                diesel::update(resale_listings::table)
                    .filter(resale_listings::state.eq("open"))
                    .filter(resale_listings::starts_at.le(now))
                    .set((
                        resale_listings::state.eq("expired"),
                        resale_listings::updated_at.eq(now),
                    ))
                    .execute(conn)?,
            )
        })
        .await?;
    if expired_listings > 0 {
        tracing::info!(listings = expired_listings, "unsold listings expired");
    }

    let over: Vec<Uuid> = db
        .run(|conn| {
            let now = contracts::time::now();
            Ok::<_, Error>(
                reservations::table
                    .filter(reservations::quota_released_at.is_null())
                    .filter(
                        reservations::status.eq(Status::Cancelled.as_str()).or(
                            reservations::status
                                .eq(Status::Booked.as_str())
                                .and(reservations::ends_at.le(now)),
                        ),
                    )
                    .select(reservations::id)
                    .limit(PAGE)
                    .load(conn)?,
            )
        })
        .await?;
    for id in over {
        crate::holdings::release_quota(deps, id).await?;
        db.run(move |conn| {
            diesel::update(reservations::table.find(id))
                .set(reservations::quota_released_at.eq(contracts::time::now()))
                .execute(conn)?;
            Ok::<_, Error>(())
        })
        .await?;
    }
    Ok(())
}
