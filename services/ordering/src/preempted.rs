//! Stopping an instance whose GPUs were taken back (a preemption, a block
//! that ended, a continuation the quota refused): in a module of its own
//! because the preemption consumer and the reservations' handlers both do
//! it.

use chrono::{DateTime, Utc};
use contracts::states::InstanceState;
use diesel::prelude::*;
use schema::ordering::instances;

use crate::Error;
use crate::instances::{InstanceRow, transition};

/// Marks `row` (in `state`) preempted at `at` with `reason`: a running one
/// gets `ordering.instance.stopped` at `at`, so billing ends there, and the
/// worker is told to stop it (its disk stays until it is destroyed).
pub(crate) fn preempt_instance(
    conn: &mut PgConnection,
    events: &str,
    commands: &str,
    row: &InstanceRow,
    state: InstanceState,
    at: DateTime<Utc>,
    reason: &str,
) -> Result<(), Error> {
    let reason = format!("{reason}; notice 0 s");
    diesel::update(instances::table.find(row.id))
        .set((
            instances::preempted_at.eq(at),
            instances::stopped_at.eq(if state == InstanceState::Running {
                Some(at)
            } else {
                row.stopped_at
            }),
        ))
        .execute(conn)?;
    transition(conn, row, InstanceState::Preempted, Some(&reason), at)?;
    if state == InstanceState::HostLost {
        // The outage ends here, as when the renter destroys it: the host's
        // downtime credit for the silence (its run was closed at the last
        // heartbeat, so there is nothing to stop).
        crate::instances::publish_downtime(conn, events, row, at, "preempted")?;
    }
    if state == InstanceState::Running {
        // Billing ends at the preemption instant, not when ordering heard of it.
        crate::instances::publish_stopped(conn, events, row, row.run_seq, at, "preempted")?;
    }
    crate::publishing::publish_stop_command(conn, commands, row, at)?;
    tracing::info!(instance.id = %row.id, from = %state, "instance preempted");
    Ok(())
}
