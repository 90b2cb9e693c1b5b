//! A block cancelled from the host's side: the host cancels it
//! (`cancelReservation`), or its machine leaves the market (the catalog's
//! `catalog.bookings.cancelled`). The whole original block goes, resold
//! hours included (they are on the same GPUs): the catalog gives the GPU
//! time back from now on, billing refunds everything not yet released to
//! whoever held each hour plus the host's published penalty, and the
//! reservations are `cancelled` with the reason. Every step is idempotent,
//! so a repeat (or a redelivered event) finishes a cancellation that died
//! half-way.
//!
//! Also here: the catalog's warning that an instance's GPUs are booked soon
//! (`catalog.allocation.ending_soon`), recorded on the instance's history
//! (and so sent to its webhooks) as a `rule_warning`.

use contracts::endpoints;
use contracts::events::{AllocationEndingSoon, BookingsCancelled};
use contracts::ids::ReservationId;
use contracts::reservations::{
    CancelBookingRequest, EscrowCancelRequest, HostCancelRequest, Reservation,
};
use contracts::states::InstanceEventKind;
use contracts::{Envelope, ErrorCode};
use diesel::prelude::*;
use platform::Db;
use platform::consumer::HandlerError;
use schema::ordering_reservations::{resale_listings, reservations};
use uuid::Uuid;

use super::store::{self, ReservationRow, Status};
use crate::{Deps, Error, SCHEMA};

const MAX_REASON: usize = 500;

/// A host cancels a reservation on its machine: the whole original block.
pub async fn host_cancel(
    db: &Db,
    deps: &Deps,
    id: ReservationId,
    req: HostCancelRequest,
) -> Result<Reservation, Error> {
    let reason = req.reason.trim().to_owned();
    if reason.is_empty() || reason.chars().count() > MAX_REASON {
        return Err(Error::Validation(format!(
            "reason: 1 to {MAX_REASON} characters"
        )));
    }
    let host = req.host_tenant_id.into_uuid();
    let row = db
        .run(move |conn| {
            let row = store::load(conn, id.into_uuid())?;
            if row.host_tenant_id != Some(host) {
                return Err(store::not_found(id.into_uuid()));
            }
            Ok(row)
        })
        .await?;
    match row.status()? {
        Status::Cancelled => return db.run(move |conn| store::one(conn, row)).await,
        Status::Booked => {}
        Status::Pending | Status::Failed => {
            return Err(Error::Conflict(format!(
                "reservation {id} is {}; there is nothing booked to cancel",
                row.status
            )));
        }
    }
    if row.ends_at <= contracts::time::now() {
        return Err(Error::Conflict(format!(
            "reservation {id}'s block has ended; it cannot be cancelled"
        )));
    }
    let root = db.run(move |conn| store::root(conn, row.id)).await?;
    cancel_block(db, deps, root, &format!("cancelled by the host: {reason}")).await?;
    db.run(move |conn| {
        let row = store::load(conn, id.into_uuid())?;
        store::one(conn, row)
    })
    .await
}

/// The original block and every reservation carved out of it (resales).
fn tree(conn: &mut PgConnection, root: Uuid) -> Result<Vec<ReservationRow>, Error> {
    let mut out = vec![store::load(conn, root)?];
    let mut frontier = vec![root];
    while !frontier.is_empty() {
        let children: Vec<ReservationRow> = reservations::table
            .filter(reservations::parent_id.eq_any(&frontier))
            .select(ReservationRow::as_select())
            .load(conn)?;
        frontier = children.iter().map(|c| c.id).collect();
        out.extend(children);
    }
    Ok(out)
}

/// Cancels the block of `root` (an original reservation) from now on, by
/// the host's side: GPU time, money, then the records.
pub(crate) async fn cancel_block(
    db: &Db,
    deps: &Deps,
    root: Uuid,
    reason: &str,
) -> Result<(), Error> {
    let rows = db.run(move |conn| tree(conn, root)).await?;
    let now = contracts::time::now();
    let live: Vec<&ReservationRow> = rows
        .iter()
        .filter(|r| matches!(r.status(), Ok(Status::Booked | Status::Cancelled)))
        .collect();
    for row in &live {
        match deps
            .catalog
            .call(
                endpoints::catalog::CANCEL_BOOKING,
                ReservationId(row.id),
                &CancelBookingRequest {
                    from: None,
                    reason: reason.to_owned(),
                },
            )
            .await
        {
            Ok(_) => {}
            Err(e) if e.code == ErrorCode::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    match deps
        .billing
        .call(
            endpoints::billing::ESCROW_CANCEL,
            ReservationId(root),
            &EscrowCancelRequest {
                at: now,
                by_host: true,
                reason: reason.to_owned(),
            },
        )
        .await
    {
        Ok(_) => {}
        Err(e) if e.code == ErrorCode::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    let ids: Vec<Uuid> = live.iter().map(|r| r.id).collect();
    let reason = reason.to_owned();
    let marked = ids.clone();
    db.tx(move |conn| {
        let ids = marked;
        let now = contracts::time::now();
        // Blocks that ended before the cancellation stay as they were.
        diesel::update(reservations::table)
            .filter(reservations::id.eq_any(&ids))
            .filter(reservations::status.eq(Status::Booked.as_str()))
            .filter(reservations::ends_at.gt(now))
            .set((
                reservations::status.eq(Status::Cancelled.as_str()),
                reservations::reason.eq(&reason),
                reservations::updated_at.eq(now),
            ))
            .execute(conn)?;
        diesel::update(resale_listings::table)
            .filter(resale_listings::reservation_id.eq_any(&ids))
            .filter(resale_listings::state.eq("open"))
            .set((
                resale_listings::state.eq("withdrawn"),
                resale_listings::updated_at.eq(now),
            ))
            .execute(conn)?;
        Ok::<_, Error>(())
    })
    .await?;
    for id in ids {
        crate::holdings::release_quota(deps, id).await?;
    }
    Ok(())
}

/// `catalog.bookings.cancelled`: the machine left the market.
pub(crate) async fn bookings_cancelled(
    db: &Db,
    deps: &Deps,
    envelope: Envelope,
) -> Result<(), HandlerError> {
    let event: BookingsCancelled = envelope
        .payload()
        .map_err(|e| HandlerError::Permanent(format!("undecodable bookings.cancelled: {e}")))?;
    let transient = |e: Error| HandlerError::Transient(e.to_string());
    let mut roots: Vec<Uuid> = Vec::new();
    for id in &event.reservation_ids {
        let id = id.into_uuid();
        let root = db
            .run(move |conn| match store::root(conn, id) {
                Ok(root) => Ok(Some(root)),
                Err(Error::NotFound(_)) => Ok(None),
                Err(e) => Err(e),
            })
            .await
            .map_err(transient)?;
        if let Some(root) = root
            && !roots.contains(&root)
        {
            roots.push(root);
        }
    }
    let reason = format!("the host's machine left the market: {}", event.reason);
    for root in roots {
        // Idempotent: a redelivery repeats calls that answer as before.
        cancel_block(db, deps, root, &reason)
            .await
            .map_err(transient)?;
    }
    Ok(())
}

/// `catalog.allocation.ending_soon`: a warning on the instance's history.
pub(crate) async fn ending_soon(db: &Db, envelope: Envelope) -> Result<(), HandlerError> {
    let event: AllocationEndingSoon = envelope
        .payload()
        .map_err(|e| HandlerError::Permanent(format!("undecodable ending_soon: {e}")))?;
    db.tx(move |conn| {
        if !platform::consumer::claim(conn, SCHEMA, &envelope)? {
            return Ok(());
        }
        let id = crate::store::instance_of_allocation(conn, event.instance_id, event.allocation_key)?;
        let Some(id) = id else {
            return Ok(());
        };
        let row = crate::instances::lock(conn, id)?;
        let at = contracts::time::now();
        let then = match row.continue_up_to_per_gpu_hour {
            // Inside a block that it asked to outlive (the warning of a
            // block starting on a rental's GPUs never has a ceiling).
            Some(max) if row.reservation_id.is_some() => format!(
                "at {} the instance goes on on demand if its GPUs are free and cost at most {} per GPU-hour, else it is stopped (its disk is kept)",
                event.ends_at.to_rfc3339(),
                max.normalize()
            ),
            _ => format!(
                "the instance is stopped at {} (its disk is kept)",
                event.ends_at.to_rfc3339()
            ),
        };
        crate::events::record(
            conn,
            id,
            InstanceEventKind::RuleWarning,
            crate::events::Detail {
                reason: Some(&format!("{}; {then}", event.reason)),
                dedupe_key: Some(format!(
                    "ending:{}:{}",
                    event.allocation_key,
                    event.ends_at.timestamp()
                )),
                ..Default::default()
            },
            at,
        )?;
        Ok::<_, Error>(())
    })
    .await
    .map_err(|e| HandlerError::Transient(e.to_string()))
}
