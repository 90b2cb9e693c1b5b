//! Containers that stopped on their own (`catalog.instance.exited`): the
//! engine saw a rental's container exit, get OOM-killed or crash-loop, its
//! machine's agent said so in a heartbeat and the catalog vouched that the
//! agent is the machine's. Here the instance stops like a renter's stop,
//! with the agent's reason as `statusReason`, except that the run's billing
//! ends at the engine's `finished_at` (clamped to the run: never before it
//! began, never in the future), when the container stopped being usable.
//! The usual stop job follows (the agent's stop is idempotent on a dead
//! container); the renter can start or destroy the instance.
//!
//! Agents repeat an exit in every heartbeat until the instance stops, so the
//! same exit arrives many times: only a `running` instance on the reporting
//! machine, in the reported run (its latest provisioning attempt), stops;
//! anything else (a repeat, another machine's report, an old run) is logged
//! and ignored.

use chrono::{DateTime, Utc};
use contracts::Envelope;
use contracts::events::{InstanceDiskUsage, InstanceExited, MAX_EXIT_REASON};
use contracts::ids::OrderId;
use diesel::prelude::*;
use platform::Db;
use platform::consumer::HandlerError;
use schema::ordering::instances;

use crate::instances::{
    InstanceRow, attempt, current_holding_key, lock, publish_stopped, transition,
};
use crate::{Deps, Error, SCHEMA};
use contracts::states::InstanceState;

/// Handles one `catalog.instance.exited` from ordering's queue.
pub async fn handle(db: &Db, deps: &Deps, envelope: Envelope) -> Result<(), HandlerError> {
    let event: InstanceExited = envelope
        .payload()
        .map_err(|e| HandlerError::Permanent(format!("undecodable exit report: {e}")))?;
    let events = deps.config.events_exchange.clone();
    let commands = deps.config.commands_exchange.clone();
    let stopped = db
        .tx(move |conn| {
            if !platform::consumer::claim(conn, SCHEMA, &envelope)? {
                // A redelivery after the stop committed: finish what the
                // first delivery may not have (both steps are idempotent).
                return unfinished(conn, &event);
            }
            apply(conn, &events, &commands, &event, contracts::time::now())
        })
        .await
        .map_err(|e: Error| HandlerError::Transient(e.to_string()))?;
    let Some((id, key)) = stopped else {
        return Ok(());
    };
    // As a renter's stop: the run's GPUs and quota go back, then the
    // instance is `stopped` (both idempotent, so a crash in between is
    // finished by whoever comes next: the reconciler, a redelivery).
    crate::holdings::release_holdings(deps, OrderId(key))
        .await
        .map_err(|e| HandlerError::Transient(e.to_string()))?;
    db.tx(move |conn| {
        let row = lock(conn, id)?;
        if row.state == InstanceState::Stopping {
            let why = row.status_reason.clone();
            transition(
                conn,
                &row,
                InstanceState::Stopped,
                why.as_deref(),
                contracts::time::now(),
            )?;
        }
        Ok::<_, Error>(())
    })
    .await
    .map_err(|e| HandlerError::Transient(e.to_string()))
}

/// Handles one `catalog.instance.disk_usage`: keeps the measurement when
/// the instance is on the reporting machine and it is newer than the one
/// kept (a repeat or an older sample changes nothing; no claim is needed).
pub async fn disk_usage(db: &Db, envelope: Envelope) -> Result<(), HandlerError> {
    let event: InstanceDiskUsage = envelope
        .payload()
        .map_err(|e| HandlerError::Permanent(format!("undecodable disk usage: {e}")))?;
    if event.bytes < 0 {
        return Err(HandlerError::Permanent("negative disk usage".into()));
    }
    let updated = db
        .run(move |conn| {
            diesel::update(
                instances::table
                    .filter(instances::id.eq(event.instance_id))
                    .filter(instances::machine_id.eq(event.machine_id))
                    .filter(
                        instances::disk_measured_at
                            .is_null()
                            .or(instances::disk_measured_at.lt(event.measured_at)),
                    ),
            )
            .set((
                instances::disk_used_bytes.eq(event.bytes),
                instances::disk_measured_at.eq(event.measured_at),
            ))
            .execute(conn)
            .map_err(HandlerError::from)
        })
        .await?;
    if updated == 0 {
        tracing::debug!("disk usage for no instance of that machine, or not newer, ignored");
    }
    Ok(())
}

/// Stops the instance if the report is about its current run; returns it
/// and its holding key when it did.
fn apply(
    conn: &mut PgConnection,
    events: &str,
    commands: &str,
    event: &InstanceExited,
    now: DateTime<Utc>,
) -> Result<Option<(uuid::Uuid, uuid::Uuid)>, Error> {
    let Some(row) = crate::instances::load(conn, event.instance_id.into())? else {
        tracing::warn!(instance.id = %event.instance_id, "exit report for an unknown instance ignored");
        return Ok(None);
    };
    let row = lock(conn, row.id.into())?;
    if row.machine_id != event.machine_id {
        tracing::warn!(
            instance.id = %row.id,
            machine.id = %event.machine_id,
            "exit report from a machine the instance is not on ignored"
        );
        return Ok(None);
    }
    let current = attempt(conn, row.id.into())?;
    if row.state != InstanceState::Running || event.run != current {
        tracing::info!(
            instance.id = %row.id,
            run = event.run,
            current,
            state = %row.state,
            "exit report for a run that is not running ignored"
        );
        return Ok(None);
    }
    let until = billed_until(&row, event.finished_at, now);
    let reason = bounded(&event.reason);
    let key = current_holding_key(conn, &row)?;
    stop_exited(conn, events, commands, &row, until, &reason, now)?;
    tracing::info!(
        instance.id = %row.id,
        run = event.run,
        exit_code = event.exit_code,
        oom_killed = event.oom_killed,
        "instance stopped: its container exited"
    );
    Ok(Some((row.id.into(), key)))
}

/// The instance and its holding key if it is still `stopping` on the
/// reporting machine (a stop whose release did not finish).
fn unfinished(
    conn: &mut PgConnection,
    event: &InstanceExited,
) -> Result<Option<(uuid::Uuid, uuid::Uuid)>, Error> {
    let Some(row) = crate::instances::load(conn, event.instance_id.into())? else {
        return Ok(None);
    };
    if row.machine_id != event.machine_id || row.state != InstanceState::Stopping {
        return Ok(None);
    }
    Ok(Some((row.id.into(), current_holding_key(conn, &row)?)))
}

/// The engine's `finished_at`, clamped to [the run's start, now].
pub fn billed_until(
    row: &InstanceRow,
    finished_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    let start = row.running_at.unwrap_or(now);
    finished_at.max(start).min(now)
}

fn bounded(reason: &str) -> String {
    let reason = reason.trim();
    let reason = if reason.is_empty() {
        "the container stopped"
    } else {
        reason
    };
    reason.chars().take(MAX_EXIT_REASON).collect()
}

fn stop_exited(
    conn: &mut PgConnection,
    events: &str,
    commands: &str,
    row: &InstanceRow,
    until: DateTime<Utc>,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    diesel::update(instances::table.find(row.id))
        .set(instances::stopped_at.eq(until))
        .execute(conn)?;
    transition(conn, row, InstanceState::Stopping, Some(reason), now)?;
    // Billing of the run ends when the container stopped being usable.
    publish_stopped(conn, events, row, row.run_seq, until, reason)?;
    crate::publishing::publish_stop_command(conn, commands, row, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_bounded_and_never_empty() {
        assert_eq!(bounded("  "), "the container stopped");
        assert_eq!(bounded(&"x".repeat(900)).chars().count(), MAX_EXIT_REASON);
    }
}
