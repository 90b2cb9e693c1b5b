//! Orders whose `createOrder` request died mid-saga. The saga runs inside the
//! request, so an order left `pending` or `allocating` has no owner but a
//! renter who may repeat the request (which resumes it); past
//! [`DEADLINE_SECONDS`] nobody will, and what it holds (a quota reservation,
//! maybe GPUs) would be held forever. This task is its deadline.
//!
//! Two steps, each safe to repeat and with several replicas:
//!
//! 1. under the order's row lock (`FOR UPDATE SKIP LOCKED`), an order still in
//!    its saga past the deadline becomes `failed` with `expired_at`. The saga
//!    locks the same row before it creates the instance and refuses a failed
//!    order, and a resumed saga refuses a released reservation, so an expired
//!    order never gets an instance;
//! 2. its GPUs and quota are released (idempotent calls) and
//!    `holdings_released_at` is set; a crash between the two steps is
//!    finished by the next pass.
//!
//! The same pass finishes stops that died half-way: a stop records T1 and
//! moves the instance to `stopping` in one transaction, then releases the
//! GPUs and quota and moves it to `stopped`. An instance left `stopping`
//! past [`STOP_DEADLINE_SECONDS`] (its stop request or rule died in
//! between) has the rest done here, exactly as a repeated stop would.

use contracts::ids::{OrderId, TenantId};
use std::time::Duration;

use diesel::prelude::*;
use platform::Db;
use schema::ordering::{instances, orders};
use tracing::Instrument;
use uuid::Uuid;

use crate::{Deps, Error};
use contracts::states::InstanceState;

/// Longer than any `createOrder` request can take (internal calls time out
/// well before, and placement tries a bounded number of offers).
pub const DEADLINE_SECONDS: i64 = 300;
/// A stop's second half takes two internal calls; far longer means it died.
pub const STOP_DEADLINE_SECONDS: i64 = 60;
const TICK: Duration = Duration::from_secs(5);
const PAGE: i64 = 100;

/// Starts the expiry task for this service.
pub fn spawn(deps: Deps, db: Db) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let result = pass(&db, &deps)
                .instrument(tracing::info_span!("order_expiry"))
                .await;
            match result {
                Ok(0) => {}
                Ok(n) => tracing::info!(orders = n, "expired orders released"),
                Err(error) => tracing::warn!(%error, "order expiry pass failed"),
            }
            tokio::time::sleep(TICK).await;
        }
    })
}

/// One pass: expires what is overdue, then releases what expired orders
/// still hold. Returns how many orders' holdings were released.
pub async fn pass(db: &Db, deps: &Deps) -> Result<usize, Error> {
    finish_stops(db, deps).await?;
    loop {
        let expired = expire_page(db).await?;
        if expired < PAGE as usize {
            break;
        }
    }
    let mut released = 0;
    loop {
        let page = db
            .run(|conn| {
                orders::table
                    .filter(orders::expired_at.is_not_null())
                    .filter(orders::holdings_released_at.is_null())
                    .order(orders::expired_at)
                    .select(orders::id)
                    .limit(PAGE)
                    .load::<Uuid>(conn)
                    .map_err(Error::from)
            })
            .await?;
        let full = page.len() == PAGE as usize;
        for id in page {
            crate::holdings::release_holdings(deps, OrderId(id)).await?;
            db.run(move |conn| {
                diesel::update(orders::table.find(id))
                    .set(orders::holdings_released_at.eq(diesel::dsl::now))
                    .execute(conn)
                    .map_err(Error::from)
            })
            .await?;
            tracing::info!(order.id = %id, "expired order's holdings released");
            released += 1;
        }
        if !full {
            return Ok(released);
        }
    }
}

async fn expire_page(db: &Db) -> Result<usize, Error> {
    db.tx(|conn| {
        let cutoff = contracts::time::now() - chrono::Duration::seconds(DEADLINE_SECONDS);
        let ids: Vec<Uuid> = orders::table
            .filter(orders::state.eq_any([InstanceState::Pending, InstanceState::Allocating]))
            .filter(orders::updated_at.lt(cutoff))
            .select(orders::id)
            .limit(PAGE)
            .for_update()
            .skip_locked()
            .load(conn)?;
        if ids.is_empty() {
            return Ok(0);
        }
        diesel::update(orders::table.filter(orders::id.eq_any(&ids)))
            .set((
                orders::state.eq(InstanceState::Failed),
                orders::failure_code.eq(contracts::ErrorCode::Conflict.as_str()),
                orders::failure_reason.eq(crate::saga::expired().to_string()),
                orders::expired_at.eq(diesel::dsl::now),
                orders::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)?;
        for id in &ids {
            tracing::warn!(order.id = %id, "order expired mid-saga");
        }
        Ok(ids.len())
    })
    .await
}

/// Completes stops left `stopping` past their deadline.
async fn finish_stops(db: &Db, deps: &Deps) -> Result<(), Error> {
    let stale: Vec<(Uuid, Uuid)> = db
        .run(|conn| {
            let cutoff = contracts::time::now() - chrono::Duration::seconds(STOP_DEADLINE_SECONDS);
            instances::table
                .filter(instances::state.eq(InstanceState::Stopping))
                .filter(instances::updated_at.lt(cutoff))
                .select((instances::id, instances::tenant_id))
                .limit(PAGE)
                .load(conn)
                .map_err(Error::from)
        })
        .await?;
    for (id, tenant_id) in stale {
        // Idempotent: a concurrent pass or a repeated stop finds it done.
        crate::instances::stop_because(
            db,
            deps,
            id,
            TenantId(tenant_id),
            "stop finished after it was interrupted",
        )
        .await?;
        tracing::warn!(instance.id = %id, "interrupted stop finished");
    }
    Ok(())
}
