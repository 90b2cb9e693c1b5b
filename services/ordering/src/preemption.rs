//! Preemptions decided by the catalog (`catalog.allocation.preempted`).
//!
//! The catalog has already given the GPUs to the higher-priority order, in
//! the transaction that preempted them; here ordering makes the renter's side
//! agree, in one transaction with the inbox record:
//!
//! - the preempted holding key is recorded in `ordering.preemptions`, so a
//!   saga or a start that has not created (or restarted) its instance yet
//!   refuses to, instead of provisioning on GPUs that are gone;
//! - an instance whose current holding is that key and that is `running` or
//!   `provisioning` becomes `preempted` at the catalog's instant; a running
//!   one gets `ordering.instance.stopped` with `stopped_at = preempted_at`,
//!   so metering bills exactly until the preemption; the worker is told to
//!   stop it (unbind GPUs and container; the disk stays until destroyed).
//!
//! After the commit the holding's quota is released (idempotent, so it is
//! done for duplicates too: a crash between commit and release is repaired by
//! the redelivery).

use std::sync::Arc;

use contracts::Envelope;
use contracts::events::{ALLOCATION_PREEMPTED, AllocationPreempted};
use diesel::prelude::*;
use platform::consumer::HandlerError;
use platform::{Config, Db};
use schema::ordering::{instances, orders, preemptions};
use uuid::Uuid;

use crate::instances::{InstanceRow, current_holding_key, lock};
use crate::{Deps, Error, SCHEMA};
use contracts::states::InstanceState;

/// Consumes ordering's queue forever: the catalog's preemptions and
/// containers that exited ([`crate::exits`]), and
/// billing's exhausted balances and reached spend caps ([`crate::funds`]).
pub async fn run_consumer(config: Arc<Config>, db: Db) -> Result<(), Error> {
    let deps = Deps::new(config.clone())?;
    let queue = deps.settings.queue.clone();
    platform::consumer::run(config, queue, move |envelope: Envelope| {
        let db = db.clone();
        let deps = deps.clone();
        async move { handle(&db, &deps, envelope).await }
    })
    .await;
    Ok(())
}

async fn handle(db: &Db, deps: &Deps, envelope: Envelope) -> Result<(), HandlerError> {
    if envelope.kind == contracts::events::BALANCE_EXHAUSTED
        || envelope.kind == contracts::events::SPEND_CAP_REACHED
    {
        return crate::funds::handle(db, deps, envelope).await;
    }
    if envelope.kind == contracts::events::INSTANCE_EXITED {
        return crate::exits::handle(db, deps, envelope).await;
    }
    if envelope.kind == contracts::events::INSTANCE_DISK_USAGE {
        return crate::exits::disk_usage(db, envelope).await;
    }
    if envelope.kind == contracts::events::BOOKINGS_CANCELLED {
        return crate::reservations::bookings_cancelled(db, deps, envelope).await;
    }
    if envelope.kind == contracts::events::ALLOCATION_CONTINUED {
        return crate::reservations::continued(db, deps, envelope).await;
    }
    if envelope.kind == contracts::events::ALLOCATION_ENDING_SOON {
        return crate::reservations::ending_soon(db, envelope).await;
    }
    if envelope.kind != ALLOCATION_PREEMPTED {
        return Ok(());
    }
    let event: AllocationPreempted = envelope
        .payload()
        .map_err(|e| HandlerError::Permanent(format!("undecodable preemption: {e}")))?;
    let key = event.allocation_key;
    let events = deps.config.events_exchange.clone();
    let commands = deps.config.commands_exchange.clone();
    db.tx(move |conn| {
        if !platform::consumer::claim(conn, SCHEMA, &envelope)? {
            return Ok(());
        }
        apply(conn, &events, &commands, &event)
    })
    .await
    .map_err(|e: Error| HandlerError::Transient(e.to_string()))?;
    crate::holdings::release_quota(deps, key)
        .await
        .map_err(|e| HandlerError::Transient(e.to_string()))
}

fn apply(
    conn: &mut PgConnection,
    events: &str,
    commands: &str,
    event: &AllocationPreempted,
) -> Result<(), Error> {
    // Lock what a racing saga or start locks before it creates or restarts
    // the instance, so exactly one of the two sees the other.
    let row: Option<InstanceRow> = match event.instance_id {
        Some(id) => Some(lock(conn, id.into())?),
        None => {
            let order: Option<Uuid> = orders::table
                .find(event.allocation_key)
                .select(orders::id)
                .for_update()
                .first(conn)
                .optional()?;
            match order {
                Some(order_id) => {
                    let id: Option<Uuid> = instances::table
                        .filter(instances::order_id.eq(order_id))
                        .select(instances::id)
                        .first(conn)
                        .optional()?;
                    id.map(|id| lock(conn, id)).transpose()?
                }
                None => None,
            }
        }
    };
    diesel::insert_into(preemptions::table)
        .values((
            preemptions::allocation_key.eq(event.allocation_key),
            preemptions::instance_id.eq(row.as_ref().map(|r| r.id)),
            preemptions::machine_id.eq(event.machine_id),
            preemptions::preempted_at.eq(event.preempted_at),
            preemptions::reason.eq(&event.reason),
        ))
        .on_conflict_do_nothing()
        .execute(conn)?;
    let Some(row) = row else {
        tracing::info!(allocation = %event.allocation_key, "preempted before its instance existed");
        return Ok(());
    };
    // A holding of an earlier run (since stopped) says nothing about now.
    if current_holding_key(conn, &row)? != event.allocation_key {
        return Ok(());
    }
    let state = row.state;
    // A lost host's instance too: its GPUs are gone, so the host coming
    // back must not run it on them again.
    if !matches!(
        state,
        InstanceState::Running | InstanceState::Provisioning | InstanceState::HostLost
    ) {
        return Ok(());
    }
    crate::preempted::preempt_instance(
        conn,
        events,
        commands,
        &row,
        state,
        event.preempted_at,
        &event.reason,
    )
}
