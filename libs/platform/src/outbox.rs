//! The transactional outbox: a service writes its state change and the
//! message that announces it in one transaction ([`enqueue`]); a relay
//! ([`run_relay`]) publishes unsent rows with publisher confirms and only then
//! marks them sent. A crash between publish and mark re-sends the message,
//! which consumers drop by id: delivery is at least once, effects exactly once.

use std::sync::Arc;
use std::time::Duration;

use contracts::Envelope;
use diesel::pg::PgConnection;
use diesel::sql_types::{BigInt, Jsonb, Text, Uuid as SqlUuid};
use diesel::{QueryableByName, RunQueryDsl};
use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::ShortString;
use uuid::Uuid;

use crate::{Config, Db, PlatformError, broker};

/// Writes `envelope` to `<schema>.outbox`, to be published to `exchange` with
/// `routing_key`. Call it inside the transaction of the state change.
pub fn enqueue(
    conn: &mut PgConnection,
    schema: &str,
    exchange: &str,
    routing_key: &str,
    envelope: &Envelope,
) -> Result<(), diesel::result::Error> {
    let body = serde_json::to_value(envelope)
        .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
    diesel::sql_query(format!(
        "INSERT INTO {schema}.outbox (id, exchange, routing_key, body) VALUES ($1, $2, $3, $4)"
    ))
    .bind::<SqlUuid, _>(envelope.id)
    .bind::<Text, _>(exchange)
    .bind::<Text, _>(routing_key)
    .bind::<Jsonb, _>(body)
    .execute(conn)?;
    Ok(())
}

#[derive(QueryableByName)]
struct Pending {
    #[diesel(sql_type = BigInt)]
    seq: i64,
    #[diesel(sql_type = SqlUuid)]
    id: Uuid,
    #[diesel(sql_type = Text)]
    exchange: String,
    #[diesel(sql_type = Text)]
    routing_key: String,
    #[diesel(sql_type = Jsonb)]
    body: serde_json::Value,
}

/// Publishes `<schema>.outbox` forever, reconnecting after broker errors.
pub async fn run_relay(db: Db, config: Arc<Config>, schema: &'static str) {
    let poll = Duration::from_millis(config.outbox_poll_ms);
    // Its own task: the backlog matters most while the relay is stuck
    // reconnecting to a broker that is down.
    let watcher = tokio::spawn(watch_backlog(db.clone(), schema));
    let _stop_watcher = AbortOnDrop(watcher);
    loop {
        if let Err(error) = relay_once(&db, &config, schema, poll).await {
            tracing::warn!(%error, schema, "outbox relay restarting");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Aborts the backlog watcher when the relay ends (a stopped stack).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(QueryableByName)]
struct Backlog {
    #[diesel(sql_type = BigInt)]
    rows: i64,
    #[diesel(sql_type = diesel::sql_types::Double)]
    oldest_seconds: f64,
}

/// How often the backlog gauges are refreshed.
const BACKLOG_POLL: Duration = Duration::from_secs(5);

/// Keeps `gpumarket_outbox_backlog` and `..._oldest_unpublished_seconds`
/// current for `schema`. The count uses the partial index on unpublished
/// rows, so it costs little even with a large published history.
async fn watch_backlog(db: Db, schema: &'static str) {
    let rows = crate::metrics::OUTBOX_BACKLOG.with_label_values(&[schema]);
    let oldest = crate::metrics::OUTBOX_OLDEST_SECONDS.with_label_values(&[schema]);
    loop {
        let read = db
            .run(move |c| {
                diesel::sql_query(format!(
                    "SELECT count(*) AS rows, \
                     COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 \
                     AS oldest_seconds \
                     FROM {schema}.outbox WHERE published_at IS NULL"
                ))
                .get_result::<Backlog>(c)
                .map_err(PlatformError::from)
            })
            .await;
        match read {
            Ok(backlog) => {
                rows.set(backlog.rows);
                oldest.set(backlog.oldest_seconds);
            }
            // The database being away shows in readiness and logs; the
            // gauges keep their last values.
            Err(error) => tracing::debug!(%error, schema, "reading outbox backlog"),
        }
        tokio::time::sleep(BACKLOG_POLL).await;
    }
}

async fn relay_once(
    db: &Db,
    config: &Config,
    schema: &'static str,
    poll: Duration,
) -> Result<(), PlatformError> {
    let conn = broker::connect(&config.amqp_url).await;
    let channel = conn.create_channel().await?;
    // Declared before the first publish: a message sent to an exchange with
    // no queue bound yet would be dropped.
    broker::declare_topology(&channel, config).await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    loop {
        let batch: Vec<Pending> = db
            .run(move |c| {
                diesel::sql_query(format!(
                    "SELECT seq, id, exchange, routing_key, body FROM {schema}.outbox \
                     WHERE published_at IS NULL ORDER BY seq LIMIT 500"
                ))
                .load(c)
                .map_err(PlatformError::from)
            })
            .await?;
        if batch.is_empty() {
            tokio::time::sleep(poll).await;
            continue;
        }
        // The whole batch is published before any confirm is awaited: one
        // round trip per message made a backlog (thousands of instance
        // events after a burst of orders) delay a command queued behind it
        // by seconds. The channel keeps the order; a nack or a lost
        // connection republishes from the first unconfirmed row, and
        // consumers drop the duplicates by message id.
        let mut pending = Vec::with_capacity(batch.len());
        for row in batch {
            let envelope: Envelope = serde_json::from_value(row.body)?;
            let payload = serde_json::to_vec(&envelope)?;
            let mut props = BasicProperties::default()
                .with_message_id(ShortString::from(envelope.id.to_string()))
                .with_type(ShortString::from(envelope.kind.clone()))
                .with_content_type(ShortString::from("application/json"))
                // Persistent: survives a broker restart once confirmed.
                .with_delivery_mode(2)
                .with_timestamp(envelope.occurred_at.timestamp().max(0) as u64);
            if let Some(cid) = &envelope.correlation_id {
                props = props.with_correlation_id(ShortString::from(cid.clone()));
            }
            let confirm = channel
                .basic_publish(
                    row.exchange.as_str().into(),
                    row.routing_key.as_str().into(),
                    BasicPublishOptions::default(),
                    &payload,
                    props,
                )
                .await?;
            pending.push((row.seq, row.id, row.routing_key, confirm));
        }
        let mut sent = Vec::with_capacity(pending.len());
        for (seq, id, routing_key, confirm) in pending {
            if !confirm.await?.is_ack() {
                return Err(PlatformError::Other(format!("broker refused message {id}")));
            }
            tracing::debug!(message.id = %id, %routing_key, "published");
            crate::metrics::MESSAGES_PUBLISHED
                .with_label_values(&[schema])
                .inc();
            sent.push(seq);
        }
        db.run(move |c| {
            diesel::sql_query(format!(
                "UPDATE {schema}.outbox SET published_at = now() WHERE seq = ANY($1)"
            ))
            .bind::<diesel::sql_types::Array<BigInt>, _>(sent)
            .execute(c)
            .map(|_| ())
            .map_err(PlatformError::from)
        })
        .await?;
    }
}
