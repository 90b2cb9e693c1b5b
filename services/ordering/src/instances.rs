//! Instance workflows after the saga: reads for the API, ready, failed
//! (with re-placement), stop. Each locks the row and moves it through
//! [`crate::transitions::transition`], writing its messages
//! ([`crate::publishing`]) in the same transaction. The row itself and its
//! holding keys are in [`crate::store`]; they are re-exported here for the
//! modules above the workflows.

use chrono::{DateTime, Utc};
use contracts::api;
use contracts::events::InstanceFailed;
use contracts::ids::{MachineId, OrderId, TenantId};
use diesel::prelude::*;
use platform::Db;
use schema::ordering::instances;
use uuid::Uuid;

use crate::{Deps, Error};
use contracts::states::InstanceState;

pub use crate::publishing::{
    publish, publish_attempt, publish_downtime, publish_running, publish_stopped,
    publish_storage_started,
};
pub(crate) use crate::store::lock;
pub use crate::store::{
    InstanceRow, attempt, current_holding_key, holding_key, load, stale_report,
};
pub use crate::transitions::transition;

pub async fn get(db: &Db, id: Uuid, tenant_id: TenantId) -> Result<api::Instance, Error> {
    db.run(move |conn| {
        load(conn, id)?
            // Another tenant's instance is reported exactly like a missing one.
            .filter(|row| row.tenant_id == tenant_id)
            .map(api::Instance::from)
            .ok_or_else(|| Error::NotFound(format!("instance {id} not found")))
    })
    .await
}

pub async fn list(db: &Db, tenant_id: TenantId) -> Result<Vec<api::Instance>, Error> {
    db.run(move |conn| {
        let rows: Vec<InstanceRow> = instances::table
            .filter(instances::tenant_id.eq(tenant_id))
            .order(instances::created_at.desc())
            .limit(500)
            .select(InstanceRow::as_select())
            .load(conn)?;
        Ok(rows.into_iter().map(api::Instance::from).collect())
    })
    .await
}

/// How many instances on `machine_id` of `host_tenant_id` are neither
/// destroyed nor failed: a stopped, preempted or host-lost instance still
/// keeps its disk there (and its renter pays for it), so the machine must
/// not go away under it. Another host's machine counts none, so the answer
/// tells a host nothing about machines that are not theirs.
pub async fn live_on_machine(
    db: &Db,
    machine_id: MachineId,
    host_tenant_id: TenantId,
) -> Result<api::MachineLiveInstances, Error> {
    let live_instances = db
        .run(move |conn| {
            instances::table
                .filter(instances::machine_id.eq(machine_id))
                .filter(instances::host_tenant_id.eq(host_tenant_id))
                .filter(instances::state.ne_all([InstanceState::Destroyed, InstanceState::Failed]))
                .count()
                .get_result::<i64>(conn)
                .map_err(Error::from)
        })
        .await?;
    Ok(api::MachineLiveInstances {
        machine_id,
        live_instances,
    })
}

/// The provisioner reports the instance user-ready: it is `running` from now
/// (T0), and the event that opens the meter leaves in the same transaction. A
/// repeated report changes nothing, so exactly one `running` event exists per run.
pub async fn mark_ready(
    db: &Db,
    deps: &Deps,
    id: Uuid,
    connection: Option<api::Connection>,
) -> Result<api::Instance, Error> {
    let exchange = deps.config.events_exchange.clone();
    // The provisioner checked it; a connection that is not this instance's
    // is dropped here too rather than shown to the renter.
    let connection = connection.filter(|c| match c.validate(id) {
        Ok(()) => true,
        Err(problem) => {
            tracing::warn!(instance.id = %id, %problem, "connection dropped");
            false
        }
    });
    db.tx(move |conn| {
        let row = lock(conn, id)?;
        if row.state != InstanceState::Provisioning {
            return Ok(row.into());
        }
        let at = contracts::time::now();
        let run_seq = row.run_seq + 1;
        let connection = connection
            .as_ref()
            .and_then(|c| serde_json::to_value(c).ok());
        diesel::update(instances::table.find(id))
            .set((
                instances::running_at.eq(at),
                instances::stopped_at.eq(None::<DateTime<Utc>>),
                instances::run_seq.eq(run_seq),
                instances::connection.eq(connection),
            ))
            .execute(conn)?;
        transition(conn, &row, InstanceState::Running, None, at)?;
        publish_running(conn, &exchange, &row, run_seq, at)?;
        tracing::info!(instance.id = %id, "instance running");
        load(conn, id)?
            .map(api::Instance::from)
            .ok_or_else(|| Error::NotFound(id.to_string()))
    })
    .await
}

/// The provisioner gave up. On a first run the instance failed, nothing is
/// charged, and its GPUs and quota go back. On a start after a stop the
/// renter's disk is still on the machine: the instance goes back to `stopped`
/// with the reason (it can be started again or destroyed), whatever the
/// failed run bound is unbound, and the run's GPUs and quota go back.
pub async fn mark_failed(
    db: &Db,
    deps: &Deps,
    id: Uuid,
    reason: String,
) -> Result<api::Instance, Error> {
    // An order by constraints moves to another machine instead (its quota
    // stays held); it fails only when it may not or cannot.
    if let Some(moved) = crate::replacement::try_replace(db, deps, id, &reason).await? {
        return Ok(moved);
    }
    let events = deps.config.events_exchange.clone();
    let commands = deps.config.commands_exchange.clone();
    let (row, key, failed_now) = db
        .tx(move |conn| -> Result<(InstanceRow, Uuid, bool), Error> {
            let row = lock(conn, id)?;
            let key = current_holding_key(conn, &row)?;
            if row.state != InstanceState::Provisioning {
                return Ok((row, key, false));
            }
            let at = contracts::time::now();
            if row.run_seq >= 1 {
                let reason = format!("start failed: {reason}");
                transition(conn, &row, InstanceState::Stopped, Some(&reason), at)?;
                crate::publishing::publish_stop_command(conn, &commands, &row, at)?;
                return Ok((row, key, true));
            }
            transition(conn, &row, InstanceState::Failed, Some(&reason), at)?;
            publish(
                conn,
                &events,
                contracts::events::kinds::INSTANCE_FAILED,
                at,
                row.tenant_id,
                &InstanceFailed {
                    instance_id: row.id,
                    tenant_id: row.tenant_id,
                    reason: reason.clone(),
                },
            )?;
            Ok((row, key, true))
        })
        .await?;
    // Only the call that failed the run gives its holdings back; a late
    // report about an instance that is running must not free its GPUs.
    if failed_now {
        crate::holdings::release_holdings(deps, OrderId(key)).await?;
    }
    get(db, id, row.tenant_id).await
}

/// Stops billing now (T1) and gives the GPUs back; the disk stays. The
/// `stopped` event leaves in the transaction that records T1; capacity and
/// quota are released after it commits, and a repeated stop resumes there.
pub async fn stop(
    db: &Db,
    deps: &Deps,
    id: Uuid,
    tenant_id: TenantId,
) -> Result<api::Instance, Error> {
    stop_because(db, deps, id, tenant_id, "stop requested").await
}

/// [`stop`] with the reason the instance's status and events will show (a
/// renter's request, or a lifecycle rule).
pub async fn stop_because(
    db: &Db,
    deps: &Deps,
    id: Uuid,
    tenant_id: TenantId,
    reason: &'static str,
) -> Result<api::Instance, Error> {
    let events = deps.config.events_exchange.clone();
    let commands = deps.config.commands_exchange.clone();
    let (_, key) = db
        .tx(move |conn| -> Result<(InstanceRow, Uuid), Error> {
            let row = lock(conn, id)?;
            if row.tenant_id != tenant_id {
                return Err(Error::NotFound(format!("instance {id} not found")));
            }
            let key = current_holding_key(conn, &row)?;
            match row.state {
                InstanceState::Running => {}
                InstanceState::Stopping | InstanceState::Stopped => return Ok((row, key)),
                other => {
                    return Err(Error::Conflict(format!(
                        "instance is {other}; it can be stopped only while running"
                    )));
                }
            }
            let at = contracts::time::now();
            diesel::update(instances::table.find(id))
                .set(instances::stopped_at.eq(at))
                .execute(conn)?;
            transition(conn, &row, InstanceState::Stopping, Some(reason), at)?;
            publish_stopped(conn, &events, &row, row.run_seq, at, reason)?;
            crate::publishing::publish_stop_command(conn, &commands, &row, at)?;
            Ok((row, key))
        })
        .await?;
    crate::holdings::release_holdings(deps, OrderId(key)).await?;
    db.tx(move |conn| {
        let row = lock(conn, id)?;
        if row.state == InstanceState::Stopping {
            // The status keeps saying why it stopped (the renter, the
            // balance, the spend cap, a lifecycle rule), whoever finishes
            // the stop: the reason the stop was made with is on the row.
            let why = row
                .status_reason
                .clone()
                .unwrap_or_else(|| reason.to_owned());
            transition(
                conn,
                &row,
                InstanceState::Stopped,
                Some(&why),
                contracts::time::now(),
            )?;
        }
        load(conn, id)?
            .map(api::Instance::from)
            .ok_or_else(|| Error::NotFound(id.to_string()))
    })
    .await
}
