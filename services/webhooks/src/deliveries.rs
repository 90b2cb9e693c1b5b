//! Messages and their deliveries: an event becomes one message per tenant
//! (its id is the `webhook-id` of every attempt) and one delivery per
//! endpoint subscribed to it; a delivery is pending until an attempt
//! succeeds or the retry schedule runs out. A sender holds a due delivery
//! by pushing its `next_attempt_at` past the request (a lease), so a sender
//! killed mid-request leaves it to be sent again: at least once, never lost.

use contracts::ids::{DeliveryId, TenantId, WebhookEndpointId};
use std::time::Duration;

use chrono::{DateTime, Utc};
use contracts::webhooks::{Attempt, Delivery, EventType};
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::{
    Bool, Int4, Int8, Interval, Jsonb, Nullable, Text, Timestamptz, Uuid as SqlUuid,
};
use rand::Rng;
use serde_json::Value;
use uuid::Uuid;

use crate::Error;
use crate::catalog;

/// The channel senders listen on: a commit that made a delivery due.
pub const CHANNEL: &str = "webhooks_due";

fn interval(d: Duration) -> diesel::pg::data_types::PgInterval {
    diesel::pg::data_types::PgInterval::from_microseconds(d.as_micros().min(i64::MAX as u128) as i64)
}

/// The header form of a message id.
pub fn webhook_id(message_id: Uuid) -> String {
    format!("msg_{}", message_id.simple())
}

/// Records an event for the tenant's subscribed, enabled endpoints (all but
/// `except`); returns how many deliveries it made. Nothing is stored when
/// no endpoint wants it.
pub fn fan_out(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    event_type: EventType,
    at: DateTime<Utc>,
    data: &Value,
    source_message_id: Option<Uuid>,
    except: Option<Uuid>,
) -> Result<usize, Error> {
    let message_id = Uuid::now_v7();
    let payload = catalog::body(event_type, at, data);
    let made = diesel::sql_query(
        "WITH targets AS ( \
           SELECT id FROM webhooks.endpoints \
            WHERE tenant_id = $2 AND enabled AND id IS DISTINCT FROM $6 \
              AND (cardinality(event_types) = 0 OR $3 = ANY (event_types)) \
         ), message AS ( \
           INSERT INTO webhooks.messages (id, tenant_id, event_type, payload, source_message_id) \
           SELECT $1, $2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM targets) \
           RETURNING id \
         ) \
         INSERT INTO webhooks.deliveries (id, message_id, endpoint_id, tenant_id, next_attempt_at) \
         SELECT gen_random_uuid(), message.id, targets.id, $2, now() FROM message, targets",
    )
    .bind::<SqlUuid, _>(message_id)
    .bind::<SqlUuid, _>(tenant_id)
    .bind::<Text, _>(event_type.as_str())
    .bind::<Jsonb, _>(&payload)
    .bind::<Nullable<SqlUuid>, _>(source_message_id)
    .bind::<Nullable<SqlUuid>, _>(except)
    .execute(conn)?;
    if made > 0 {
        platform::notify::notify(conn, CHANNEL)?;
    }
    Ok(made)
}

/// A test ping to one endpoint of the tenant, whatever it subscribes to.
pub fn ping(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    endpoint_id: Uuid,
) -> Result<Delivery, Error> {
    let endpoint = crate::endpoints::get(conn, tenant_id, endpoint_id)?;
    let message_id = Uuid::now_v7();
    let now = Utc::now();
    let payload = catalog::body(
        EventType::Test,
        now,
        &serde_json::json!({ "endpoint_id": endpoint.id, "tenant_id": tenant_id }),
    );
    diesel::sql_query(
        "INSERT INTO webhooks.messages (id, tenant_id, event_type, payload) VALUES ($1, $2, $3, $4)",
    )
    .bind::<SqlUuid, _>(message_id)
    .bind::<SqlUuid, _>(tenant_id)
    .bind::<Text, _>(EventType::Test.as_str())
    .bind::<Jsonb, _>(&payload)
    .execute(conn)?;
    let id = Uuid::now_v7();
    diesel::sql_query(
        "INSERT INTO webhooks.deliveries (id, message_id, endpoint_id, tenant_id, next_attempt_at) \
         VALUES ($1, $2, $3, $4, now())",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<SqlUuid, _>(message_id)
    .bind::<SqlUuid, _>(endpoint_id)
    .bind::<SqlUuid, _>(tenant_id)
    .execute(conn)?;
    platform::notify::notify(conn, CHANNEL)?;
    get(conn, tenant_id, id)
}

/// Sends a delivery again now with the same `webhook-id`, on a fresh retry
/// schedule (a delivered or failed one too: the receiver asked for it).
pub fn redeliver(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    id: Uuid,
) -> Result<Delivery, Error> {
    let n = diesel::sql_query(
        "UPDATE webhooks.deliveries SET status = 'pending', attempts = 0, next_attempt_at = now(), \
           delivered_at = NULL WHERE tenant_id = $1 AND id = $2",
    )
    .bind::<SqlUuid, _>(tenant_id)
    .bind::<SqlUuid, _>(id)
    .execute(conn)?;
    if n == 0 {
        return Err(Error::NotFound("no such webhook delivery".into()));
    }
    platform::notify::notify(conn, CHANNEL)?;
    get(conn, tenant_id, id)
}

/// A due delivery, held by the sender that claimed it.
#[derive(Debug, QueryableByName)]
pub struct Due {
    #[diesel(sql_type = SqlUuid)]
    pub id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    pub message_id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    pub endpoint_id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    pub tenant_id: TenantId,
    #[diesel(sql_type = Int4)]
    pub attempts: i32,
    #[diesel(sql_type = Jsonb)]
    pub payload: Value,
    #[diesel(sql_type = Text)]
    pub event_type: String,
    #[diesel(sql_type = Text)]
    pub url: String,
    #[diesel(sql_type = Bool)]
    pub enabled: bool,
    #[diesel(sql_type = Text)]
    pub secret: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub previous_secret: Option<String>,
}

/// Claims up to `limit` due deliveries for `lease`.
pub fn claim_due(conn: &mut PgConnection, limit: i64, lease: Duration) -> Result<Vec<Due>, Error> {
    let due = diesel::sql_query(
        "WITH due AS ( \
           SELECT id FROM webhooks.deliveries \
            WHERE status = 'pending' AND next_attempt_at <= now() \
            ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED \
         ), held AS ( \
           UPDATE webhooks.deliveries d SET next_attempt_at = now() + $2 \
             FROM due WHERE d.id = due.id \
           RETURNING d.id, d.message_id, d.endpoint_id, d.tenant_id, d.attempts \
         ) \
         SELECT held.*, m.payload, m.event_type, e.url, e.enabled, e.secret, \
                CASE WHEN e.previous_secret_until > now() THEN e.previous_secret END AS previous_secret \
           FROM held \
           JOIN webhooks.messages m ON m.id = held.message_id \
           JOIN webhooks.endpoints e ON e.id = held.endpoint_id",
    )
    .bind::<Int8, _>(limit)
    .bind::<Interval, _>(interval(lease))
    .load(conn)?;
    Ok(due)
}

/// One attempt's outcome, as the sender saw it.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub started_at: DateTime<Utc>,
    pub status_code: Option<u16>,
    pub latency: Duration,
    pub response_head: String,
    pub error: Option<String>,
}

impl Outcome {
    pub fn succeeded(&self) -> bool {
        self.status_code.is_some_and(|s| (200..300).contains(&s))
    }
}

/// What became of the delivery after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    Delivered,
    RetryIn(Duration),
    /// The schedule ran out.
    Failed,
    /// Someone redelivered or deleted it meanwhile; the attempt is logged.
    Moved,
}

/// The delay before attempt `n + 1` after `n` failed ones, with ±10 %
/// jitter so that many deliveries failing together do not return together.
pub fn retry_delay(schedule: &[Duration], failed: usize) -> Option<Duration> {
    let base = *schedule.get(failed.checked_sub(1)?)?;
    let jitter = rand::thread_rng().gen_range(0.9..=1.1);
    Some(base.mul_f64(jitter))
}

/// Logs an attempt and moves the delivery on: delivered, due again after
/// the schedule's next delay, or failed when the schedule is done.
pub fn record(
    conn: &mut PgConnection,
    due: &Due,
    outcome: &Outcome,
    schedule: &[Duration],
) -> Result<After, Error> {
    let succeeded = outcome.succeeded();
    diesel::sql_query(
        "INSERT INTO webhooks.attempts (delivery_id, tenant_id, started_at, status_code, succeeded, \
           latency_ms, response_head, error) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind::<SqlUuid, _>(due.id)
    .bind::<SqlUuid, _>(due.tenant_id)
    .bind::<Timestamptz, _>(outcome.started_at)
    .bind::<Nullable<Int4>, _>(outcome.status_code.map(i32::from))
    .bind::<Bool, _>(succeeded)
    .bind::<Int4, _>(outcome.latency.as_millis().min(i32::MAX as u128) as i32)
    .bind::<Text, _>(truncate(&outcome.response_head, 1024))
    .bind::<Nullable<Text>, _>(outcome.error.as_deref().map(|e| truncate(e, 500)))
    .execute(conn)?;
    let failed = (due.attempts + 1) as usize;
    let after = if succeeded {
        After::Delivered
    } else {
        match retry_delay(schedule, failed) {
            Some(delay) => After::RetryIn(delay),
            None => After::Failed,
        }
    };
    // Only the delivery as this sender claimed it moves on: a redelivery
    // in the meantime reset `attempts` and owns the schedule now.
    let (status, next): (&str, Option<Duration>) = match after {
        After::Delivered => ("delivered", None),
        After::RetryIn(d) => ("pending", Some(d)),
        After::Failed | After::Moved => ("failed", None),
    };
    let moved = diesel::sql_query(
        "UPDATE webhooks.deliveries SET status = $3::webhooks.delivery_status, attempts = attempts + 1, \
           last_attempt_at = $4, next_attempt_at = now() + $5, \
           delivered_at = CASE WHEN $3 = 'delivered' THEN now() END \
         WHERE id = $1 AND status = 'pending' AND attempts = $2",
    )
    .bind::<SqlUuid, _>(due.id)
    .bind::<Int4, _>(due.attempts)
    .bind::<Text, _>(status)
    .bind::<Timestamptz, _>(outcome.started_at)
    .bind::<Nullable<Interval>, _>(next.map(interval))
    .execute(conn)?;
    Ok(if moved == 1 { after } else { After::Moved })
}

/// Whether the endpoint has had a successful attempt since `since`.
pub fn succeeded_since(
    conn: &mut PgConnection,
    endpoint_id: Uuid,
    since: DateTime<Utc>,
) -> Result<bool, Error> {
    #[derive(QueryableByName)]
    struct Found {
        #[diesel(sql_type = Bool)]
        found: bool,
    }
    let f: Found = diesel::sql_query(
        "SELECT EXISTS (SELECT 1 FROM webhooks.attempts a JOIN webhooks.deliveries d ON d.id = a.delivery_id \
          WHERE d.endpoint_id = $1 AND a.succeeded AND a.started_at >= $2) AS found",
    )
    .bind::<SqlUuid, _>(endpoint_id)
    .bind::<Timestamptz, _>(since)
    .get_result(conn)?;
    Ok(f.found)
}

/// When the delivery was made.
pub fn created_at(conn: &mut PgConnection, id: Uuid) -> Result<Option<DateTime<Utc>>, Error> {
    #[derive(QueryableByName)]
    struct At {
        #[diesel(sql_type = Timestamptz)]
        created_at: DateTime<Utc>,
    }
    let at: Option<At> =
        diesel::sql_query("SELECT created_at FROM webhooks.deliveries WHERE id = $1")
            .bind::<SqlUuid, _>(id)
            .get_result(conn)
            .optional()?;
    Ok(at.map(|a| a.created_at))
}

/// Disables an endpoint that failed every delivery for the whole schedule;
/// true when this call disabled it.
pub fn disable(conn: &mut PgConnection, endpoint_id: Uuid, reason: &str) -> Result<bool, Error> {
    let n = diesel::sql_query(
        "UPDATE webhooks.endpoints SET enabled = false, disabled_reason = $2, disabled_at = now(), \
           updated_at = now() WHERE id = $1 AND enabled",
    )
    .bind::<SqlUuid, _>(endpoint_id)
    .bind::<Text, _>(truncate(reason, 500))
    .execute(conn)?;
    Ok(n == 1)
}

fn truncate(s: &str, max_chars: usize) -> String {
    s.chars().take(max_chars).collect()
}

#[derive(QueryableByName)]
struct DeliveryRow {
    #[diesel(sql_type = SqlUuid)]
    id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    message_id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    endpoint_id: Uuid,
    #[diesel(sql_type = Text)]
    event_type: String,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Int4)]
    attempts: i32,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    next_attempt_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    delivered_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Timestamptz)]
    created_at: DateTime<Utc>,
    #[diesel(sql_type = Jsonb)]
    payload: Value,
}

#[derive(QueryableByName)]
struct AttemptRow {
    #[diesel(sql_type = SqlUuid)]
    delivery_id: Uuid,
    #[diesel(sql_type = Timestamptz)]
    started_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Int4>)]
    status_code: Option<i32>,
    #[diesel(sql_type = Bool)]
    succeeded: bool,
    #[diesel(sql_type = Int4)]
    latency_ms: i32,
    #[diesel(sql_type = Text)]
    response_head: String,
    #[diesel(sql_type = Nullable<Text>)]
    error: Option<String>,
}

const DELIVERY_COLUMNS: &str = "d.id, d.message_id, d.endpoint_id, m.event_type, d.status::text AS status, \
     d.attempts, d.next_attempt_at, d.delivered_at, d.created_at, m.payload";

/// The tenant's deliveries, newest first, each with its last 20 attempts.
pub fn list(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    endpoint_id: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Delivery>, Error> {
    let rows: Vec<DeliveryRow> = diesel::sql_query(format!(
        "SELECT {DELIVERY_COLUMNS} FROM webhooks.deliveries d JOIN webhooks.messages m ON m.id = d.message_id \
          WHERE d.tenant_id = $1 AND ($2::uuid IS NULL OR d.endpoint_id = $2) \
          ORDER BY d.created_at DESC, d.id DESC LIMIT $3"
    ))
    .bind::<SqlUuid, _>(tenant_id)
    .bind::<Nullable<SqlUuid>, _>(endpoint_id)
    .bind::<Int8, _>(limit.clamp(1, 100))
    .load(conn)?;
    with_attempts(conn, rows)
}

pub fn get(conn: &mut PgConnection, tenant_id: TenantId, id: Uuid) -> Result<Delivery, Error> {
    let rows: Vec<DeliveryRow> = diesel::sql_query(format!(
        "SELECT {DELIVERY_COLUMNS} FROM webhooks.deliveries d JOIN webhooks.messages m ON m.id = d.message_id \
          WHERE d.tenant_id = $1 AND d.id = $2"
    ))
    .bind::<SqlUuid, _>(tenant_id)
    .bind::<SqlUuid, _>(id)
    .load(conn)?;
    with_attempts(conn, rows)?
        .pop()
        .ok_or_else(|| Error::NotFound("no such webhook delivery".into()))
}

fn with_attempts(conn: &mut PgConnection, rows: Vec<DeliveryRow>) -> Result<Vec<Delivery>, Error> {
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let attempts: Vec<AttemptRow> = diesel::sql_query(
        "SELECT delivery_id, started_at, status_code, succeeded, latency_ms, response_head, error \
           FROM (SELECT a.*, row_number() OVER (PARTITION BY delivery_id ORDER BY id DESC) AS n \
                   FROM webhooks.attempts a WHERE delivery_id = ANY ($1)) recent \
          WHERE n <= 20 ORDER BY delivery_id, id DESC",
    )
    .bind::<diesel::sql_types::Array<SqlUuid>, _>(&ids)
    .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|r| Delivery {
            id: DeliveryId(r.id),
            webhook_id: webhook_id(r.message_id),
            endpoint_id: WebhookEndpointId(r.endpoint_id),
            event_type: r.event_type,
            status: r.status,
            attempts: r.attempts,
            next_attempt_at: r.next_attempt_at,
            delivered_at: r.delivered_at,
            created_at: r.created_at,
            payload: r.payload,
            attempt_log: attempts
                .iter()
                .filter(|a| a.delivery_id == r.id)
                .map(|a| Attempt {
                    started_at: a.started_at,
                    status_code: a.status_code,
                    succeeded: a.succeeded,
                    latency_ms: a.latency_ms,
                    response_head: a.response_head.clone(),
                    error: a.error.clone(),
                })
                .collect(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_follow_the_schedule_with_bounded_jitter() {
        let schedule: Vec<Duration> = [5, 300].map(Duration::from_secs).to_vec();
        assert_eq!(retry_delay(&schedule, 0), None);
        for _ in 0..100 {
            let d = retry_delay(&schedule, 1).unwrap().as_secs_f64();
            assert!((4.5..=5.5).contains(&d), "{d}");
            let d = retry_delay(&schedule, 2).unwrap().as_secs_f64();
            assert!((270.0..=330.0).contains(&d), "{d}");
        }
        assert_eq!(retry_delay(&schedule, 3), None);
    }

    #[test]
    fn a_webhook_id_is_the_message_id() {
        let id = Uuid::nil();
        assert_eq!(webhook_id(id), "msg_00000000000000000000000000000000");
    }
}
