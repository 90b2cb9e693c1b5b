//! Billing's events on the broker, written to its outbox in the transaction
//! of the change they announce (a relay publishes them).

use contracts::ids::TenantId;
use contracts::{Envelope, Kind};
use diesel::pg::PgConnection;
use serde::Serialize;

use crate::SCHEMA;

/// Queues `payload` as a `kind` event of `tenant_id` on `exchange`, in the
/// caller's transaction; it carries the current correlation id.
pub fn publish<T: Serialize>(
    conn: &mut PgConnection,
    exchange: &str,
    kind: Kind<T>,
    tenant_id: TenantId,
    correlation_id: Option<String>,
    payload: &T,
) -> Result<(), diesel::result::Error> {
    let envelope = Envelope::new(
        kind,
        contracts::time::now(),
        Some(tenant_id),
        correlation_id.or_else(platform::http::current_correlation_id),
        payload,
    )
    .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
    platform::outbox::enqueue(conn, SCHEMA, exchange, kind.name(), &envelope)
}

/// Queues one `kind` event per payload, each of its tenant, in one
/// statement (the set-based invoice and statement runs).
pub fn publish_all<T: Serialize>(
    conn: &mut PgConnection,
    exchange: &str,
    events: &[(Kind<T>, TenantId, T)],
) -> Result<(), diesel::result::Error> {
    let now = contracts::time::now();
    let correlation_id = platform::http::current_correlation_id();
    let items = events
        .iter()
        .map(|(kind, tenant_id, payload)| {
            Envelope::new(
                *kind,
                now,
                Some(*tenant_id),
                correlation_id.clone(),
                payload,
            )
            .map(|e| (kind.name(), e))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
    platform::outbox::enqueue_many(conn, SCHEMA, exchange, &items)
}
