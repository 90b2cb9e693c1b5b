//! The host's rental announcements (`catalog.machine.rented` and
//! `.released`), written by allocations and by the block sweeper, and the
//! outbox write every catalog event in a caller's transaction goes through.

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
    publish(conn, exchange, kind, event.at, event.host_tenant_id, &event)
}

/// Writes an event of `kind` for `tenant_id` to the catalog's outbox, in
/// the caller's transaction.
pub(crate) fn publish<P: serde::Serialize>(
    conn: &mut PgConnection,
    exchange: &str,
    kind: contracts::Kind<P>,
    at: chrono::DateTime<chrono::Utc>,
    tenant_id: contracts::ids::TenantId,
    payload: &P,
) -> Result<(), Error> {
    let envelope = contracts::Envelope::new(
        kind,
        at,
        Some(tenant_id),
        platform::http::current_correlation_id(),
        payload,
    )
    .map_err(platform::PlatformError::from)?;
    platform::outbox::enqueue(conn, crate::SCHEMA, exchange, kind.name(), &envelope)?;
    Ok(())
}
