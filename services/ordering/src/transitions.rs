//! The one way an instance changes state: checked against the state
//! machine, compare-and-set on the row's version, recorded with its
//! transition row and instance event, in the caller's transaction.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use schema::ordering::{instance_transitions, instances};

use crate::Error;
use contracts::states::InstanceState;

use crate::publishing::publish_storage_ended;
use crate::store::InstanceRow;

/// Moves `row` to `next` if the state machine allows it, with a
/// compare-and-set on the version read, and records the transition and its
/// instance event (published through the outbox) in the caller's transaction.
/// Columns that change with the transition (`running_at`, `stopped_at`) are
/// best written before calling it, so the event's snapshot shows them.
pub fn transition(
    conn: &mut PgConnection,
    row: &InstanceRow,
    next: InstanceState,
    reason: Option<&str>,
    at: DateTime<Utc>,
) -> Result<(), Error> {
    let current = row.state;
    if !current.can_become(next) {
        return Err(Error::Conflict(format!(
            "instance is {current} and cannot become {next}"
        )));
    }
    let updated = diesel::update(instances::table.find(row.id))
        .filter(instances::state.eq(&row.state))
        .filter(instances::version.eq(row.version))
        .set((
            instances::state.eq(next.as_str()),
            instances::status_reason.eq(reason),
            instances::version.eq(row.version + 1),
            instances::updated_at.eq(at),
        ))
        .execute(conn)?;
    if updated != 1 {
        return Err(Error::Conflict(
            "instance changed concurrently; retry".into(),
        ));
    }
    // A connection belongs to one run: whatever ends or precedes a run
    // (stop, failure, destroy, preemption, a new start) forgets it. A lost
    // host keeps it (hidden while `host_lost`): when the host comes back,
    // the same container runs on and the connection shows again.
    if !matches!(next, InstanceState::Running | InstanceState::HostLost) {
        diesel::update(instances::table.find(row.id))
            .set(instances::connection.eq(None::<serde_json::Value>))
            .execute(conn)?;
    }
    diesel::insert_into(instance_transitions::table)
        .values((
            instance_transitions::instance_id.eq(row.id),
            instance_transitions::from_state.eq(Some(current.as_str())),
            instance_transitions::to_state.eq(next.as_str()),
            instance_transitions::reason.eq(reason),
            instance_transitions::at.eq(at),
        ))
        .execute(conn)?;
    // Every instance leaves the states that keep its disk exactly once, by
    // one of these two transitions, whatever path led there: the disk stops
    // billing then (at the destroy request, not when the cleanup ends).
    match next {
        InstanceState::Deprovisioning => {
            publish_storage_ended(conn, crate::events::exchange(), row, at, "destroyed")?;
        }
        InstanceState::Failed => {
            publish_storage_ended(conn, crate::events::exchange(), row, at, "failed")?;
        }
        _ => {}
    }
    crate::events::record(
        conn,
        row.id.into(),
        contracts::states::InstanceEventKind::StateChanged,
        crate::events::Detail {
            from_state: Some(current),
            to_state: Some(next),
            reason,
            ..Default::default()
        },
        at,
    )?;
    Ok(())
}
