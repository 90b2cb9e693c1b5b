//! The host's rental announcements (`catalog.machine.rented` and
//! `.released`), written by allocations and by the block sweeper.

use contracts::events::MachineRental;
use diesel::PgConnection;

use crate::Error;

/// `catalog.machine.rented` or `.released`, for the host (its webhooks,
/// docs/webhooks.md), in the caller's transaction (which holds the
/// machine's row lock), with the machine's next event number (its
/// `sequence`; the caller's value is replaced).
pub(crate) fn announce(
    conn: &mut PgConnection,
    exchange: &str,
    kind: contracts::Kind<MachineRental>,
    mut event: MachineRental,
) -> Result<(), Error> {
    event.sequence = crate::reliability::machine_sequence(conn, event.machine_id.into())?;
    let envelope = contracts::Envelope::new(
        kind,
        event.at,
        Some(event.host_tenant_id),
        platform::http::current_correlation_id(),
        &event,
    )
    .map_err(platform::PlatformError::from)?;
    platform::outbox::enqueue(conn, crate::SCHEMA, exchange, kind.name(), &envelope)?;
    Ok(())
}
