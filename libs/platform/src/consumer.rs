//! Consuming messages: manual acks after the effect is committed, bounded
//! prefetch, a delay before a failed message is retried, and the broker's
//! dead-letter exchange after `x-delivery-limit` tries. [`run_inbox`] adds
//! the idempotent-consumer half: the message id is written to
//! `<schema>.inbox` in the same transaction as the effect, so a redelivered
//! message changes nothing. [`run_inbox_batch`] does the same for a whole
//! prefetched batch in one transaction, for consumers whose rate matters
//! (billing's usage ingest).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use contracts::Envelope;
use diesel::RunQueryDsl;
use diesel::pg::PgConnection;
use diesel::sql_types::{Array, Text, Uuid as SqlUuid};
use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, BasicRejectOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use tracing::Instrument;

use crate::{Config, Db, PlatformError, broker};

/// What a handler asks the consumer to do with a message it failed.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// Worth another delivery (a database or a peer was briefly away).
    #[error("transient: {0}")]
    Transient(String),
    /// Will never succeed (undecodable, impossible); dead-letter it now.
    #[error("permanent: {0}")]
    Permanent(String),
}

impl From<diesel::result::Error> for HandlerError {
    fn from(e: diesel::result::Error) -> Self {
        HandlerError::Transient(e.to_string())
    }
}

impl From<PlatformError> for HandlerError {
    fn from(e: PlatformError) -> Self {
        HandlerError::Transient(e.to_string())
    }
}

/// Consumes `queue` forever with `handler`, reconnecting after broker errors.
/// Each delivery is handled on its own task; prefetch bounds how many run at once.
pub async fn run<H, Fut>(config: Arc<Config>, queue: String, handler: H)
where
    H: Fn(Envelope) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    crate::metrics::watch_queues(&config);
    let label: Arc<str> = Arc::from(crate::metrics::queue_label(&queue));
    loop {
        let on_delivery = |delivery| handle_delivery(delivery, handler.clone(), label.clone());
        if let Err(error) = consume_once(&config, &queue, on_delivery).await {
            tracing::warn!(%error, queue, "consumer restarting");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Connects, declares the topology and starts consuming `queue` with at
/// most `prefetch` unacked deliveries; the connection is returned so the
/// caller keeps it open while it reads the deliveries.
async fn subscribe(
    config: &Config,
    queue: &str,
    prefetch: u16,
) -> Result<(lapin::Connection, lapin::Consumer), PlatformError> {
    let conn = broker::connect(&config.amqp_url).await;
    let channel = conn.create_channel().await?;
    broker::declare_topology(&channel, config).await?;
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await?;
    let deliveries = channel
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok((conn, deliveries))
}

/// One connection's worth of consuming: each delivery goes to `on_delivery`
/// on its own task; prefetch bounds how many run at once.
async fn consume_once<D, Fut>(
    config: &Config,
    queue: &str,
    on_delivery: D,
) -> Result<(), PlatformError>
where
    D: Fn(Delivery) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (_conn, mut deliveries) = subscribe(config, queue, config.prefetch).await?;
    tracing::info!(queue, "consuming");
    while let Some(delivery) = deliveries.next().await {
        tokio::spawn(on_delivery(delivery?));
    }
    Err(PlatformError::Other(format!("consumer of {queue} ended")))
}

fn delivery_count(delivery: &Delivery) -> i64 {
    delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("x-delivery-count").cloned())
        .map_or(0, |v| match v {
            AMQPValue::LongLongInt(n) => n,
            AMQPValue::LongInt(n) => i64::from(n),
            AMQPValue::ShortInt(n) => i64::from(n),
            AMQPValue::LongUInt(n) => i64::from(n),
            _ => 0,
        })
}

/// An envelope's kind as a metric label. Kinds are our own constants, but
/// the field comes off the wire: anything unexpected is folded.
fn kind_label(kind: &str) -> String {
    let plain = kind.len() <= 64
        && kind
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'_');
    if plain {
        kind.to_owned()
    } else {
        "other".to_owned()
    }
}

/// Acks a handled message, dead-letters a permanent failure, and retries a
/// transient one after a delay that grows with the broker's delivery count.
async fn settle(delivery: &Delivery, queue: &str, kind: &str, result: Result<(), HandlerError>) {
    if delivery.redelivered || delivery_count(delivery) > 0 {
        crate::metrics::MESSAGES_REDELIVERED
            .with_label_values(&[queue, kind])
            .inc();
    }
    let count = |outcome: &str| {
        crate::metrics::MESSAGES_CONSUMED
            .with_label_values(&[queue, kind, outcome])
            .inc();
    };
    match result {
        Ok(()) => {
            count("ack");
            if let Err(error) = delivery.acker.ack(Default::default()).await {
                // The effect is committed; a redelivery is dropped by the inbox
                // (or is idempotent by nature for raw consumers).
                tracing::warn!(%error, "ack failed");
            }
        }
        Err(HandlerError::Permanent(reason)) => {
            count("dead_letter");
            tracing::error!(%reason, "message dead-lettered");
            let _ = delivery
                .acker
                .reject(BasicRejectOptions { requeue: false })
                .await;
        }
        Err(HandlerError::Transient(reason)) => {
            count("retry");
            let attempt = delivery_count(delivery);
            let delay = Duration::from_millis((100u64 << attempt.clamp(0, 6) as u32).min(5_000));
            tracing::warn!(%reason, retry_in_ms = delay.as_millis() as u64, "message will be retried");
            tokio::time::sleep(delay).await;
            let _ = delivery
                .acker
                .nack(BasicNackOptions {
                    requeue: true,
                    ..Default::default()
                })
                .await;
        }
    }
}

async fn handle_delivery<H, Fut>(delivery: Delivery, handler: H, queue: Arc<str>)
where
    H: Fn(Envelope) -> Fut,
    Fut: Future<Output = Result<(), HandlerError>>,
{
    let envelope: Envelope = match serde_json::from_slice(&delivery.data) {
        Ok(envelope) => envelope,
        Err(error) => {
            tracing::error!(%error, routing_key = %delivery.routing_key, "undecodable message dead-lettered");
            let _ = delivery
                .acker
                .reject(BasicRejectOptions { requeue: false })
                .await;
            return;
        }
    };
    let correlation_id = envelope
        .correlation_id
        .clone()
        .unwrap_or_else(|| envelope.id.to_string());
    let span = tracing::info_span!(
        "message",
        message.id = %envelope.id,
        message.kind = %envelope.kind,
        correlation_id = envelope.correlation_id.as_deref().unwrap_or(""),
        attempt = delivery_count(&delivery) + 1,
    );
    let kind = kind_label(&envelope.kind);
    let started = std::time::Instant::now();
    let work = async move {
        // Calls this handler makes carry the message's correlation id.
        let result =
            crate::correlation::with_correlation_id(correlation_id, handler(envelope)).await;
        settle(&delivery, &queue, &kind, result).await;
        crate::metrics::MESSAGE_SECONDS
            .with_label_values(&[&*queue, kind.as_str()])
            .observe(started.elapsed().as_secs_f64());
    };
    work.instrument(span).await;
}

/// Records `message_id` in `<schema>.inbox`; false when it was already there.
pub fn claim(
    conn: &mut PgConnection,
    schema: &str,
    envelope: &Envelope,
) -> Result<bool, diesel::result::Error> {
    let inserted = diesel::sql_query(format!(
        "INSERT INTO {schema}.inbox (message_id, kind) VALUES ($1, $2) ON CONFLICT DO NOTHING"
    ))
    .bind::<SqlUuid, _>(envelope.id)
    .bind::<Text, _>(&envelope.kind)
    .execute(conn)?;
    Ok(inserted == 1)
}

/// Applies `effect` unless the message was applied before; call inside the
/// transaction that commits the effect. Returns whether it was applied now.
pub fn apply_once<F>(
    conn: &mut PgConnection,
    schema: &str,
    envelope: &Envelope,
    effect: F,
) -> Result<bool, HandlerError>
where
    F: FnOnce(&mut PgConnection, &Envelope) -> Result<(), HandlerError>,
{
    if !claim(conn, schema, envelope)? {
        tracing::debug!("duplicate delivery ignored");
        return Ok(false);
    }
    effect(conn, envelope)?;
    Ok(true)
}

/// Consumes `queue`, applying `effect` and the inbox record in one transaction.
pub async fn run_inbox<F>(
    config: Arc<Config>,
    db: Db,
    queue: String,
    schema: &'static str,
    effect: F,
) where
    F: Fn(&mut PgConnection, &Envelope) -> Result<(), HandlerError> + Send + Sync + Clone + 'static,
{
    run(config, queue, move |envelope: Envelope| {
        let db = db.clone();
        let effect = effect.clone();
        async move {
            db.tx(move |conn| apply_once(conn, schema, &envelope, &effect).map(|_| ()))
                .await
        }
    })
    .await
}

/// Records every message id of `envelopes` in `<schema>.inbox` with one
/// statement; returns the envelopes not seen before, in order, each id once
/// (a batch can hold two copies of one message: a relay that published,
/// crashed before stamping, and published again).
pub fn claim_batch<'a>(
    conn: &mut PgConnection,
    schema: &str,
    envelopes: &'a [Envelope],
) -> Result<Vec<&'a Envelope>, diesel::result::Error> {
    #[derive(diesel::QueryableByName)]
    struct Claimed {
        #[diesel(sql_type = SqlUuid)]
        message_id: uuid::Uuid,
    }
    let mut seen = std::collections::HashSet::with_capacity(envelopes.len());
    let unique: Vec<&Envelope> = envelopes.iter().filter(|e| seen.insert(e.id)).collect();
    // Claimed in id order: two consumers holding copies of the same messages
    // then wait on each other in one order, never in a cycle.
    let mut sorted: Vec<&Envelope> = unique.clone();
    sorted.sort_by_key(|e| e.id);
    let ids: Vec<uuid::Uuid> = sorted.iter().map(|e| e.id).collect();
    let kinds: Vec<&str> = sorted.iter().map(|e| e.kind.as_str()).collect();
    let claimed: std::collections::HashSet<uuid::Uuid> = diesel::sql_query(format!(
        "INSERT INTO {schema}.inbox (message_id, kind) \
         SELECT * FROM unnest($1::uuid[], $2::text[]) ON CONFLICT DO NOTHING RETURNING message_id"
    ))
    .bind::<Array<SqlUuid>, _>(&ids)
    .bind::<Array<Text>, _>(&kinds)
    .load::<Claimed>(conn)?
    .into_iter()
    .map(|c| c.message_id)
    .collect();
    Ok(unique
        .into_iter()
        .filter(|e| claimed.contains(&e.id))
        .collect())
}

/// [`apply_once`] for a batch: claims every message in one statement and
/// hands the ones not applied before to `effect`, all inside the caller's
/// transaction. Returns how many were applied now.
pub fn apply_batch_once<F>(
    conn: &mut PgConnection,
    schema: &str,
    envelopes: &[Envelope],
    effect: F,
) -> Result<usize, HandlerError>
where
    F: FnOnce(&mut PgConnection, &[&Envelope]) -> Result<(), HandlerError>,
{
    let fresh = claim_batch(conn, schema, envelopes)?;
    if fresh.len() < envelopes.len() {
        tracing::debug!(
            duplicates = envelopes.len() - fresh.len(),
            "duplicate deliveries ignored"
        );
    }
    if !fresh.is_empty() {
        effect(conn, &fresh)?;
    }
    Ok(fresh.len())
}

/// Consumes `queue` in batches: up to `config.batch_max` messages, or what
/// arrived within `config.batch_wait_ms` of the batch's first, are claimed
/// and applied by `effect` in ONE transaction, then acked together. The
/// broker keeps up to twice a batch in flight, so the next batch fills
/// while this one commits.
///
/// A batch that fails (one undecodable payload, a deadlock, the database
/// away) is not retried whole: its messages are applied one at a time, each
/// in its own transaction and settled like [`run_inbox`]'s, so a poison
/// message is dead-lettered alone and the rest commit. The first transient
/// failure there sends the rest of the batch back to the queue after the
/// retry delay, as one message's failure does in [`run_inbox`].
///
/// Nothing is acked before its effect commits, and the inbox rows commit
/// with the effect, so a crash anywhere in a batch redelivers it whole and
/// the inbox drops what had committed: nothing is lost or applied twice.
pub async fn run_inbox_batch<F>(
    config: Arc<Config>,
    db: Db,
    queue: String,
    schema: &'static str,
    effect: F,
) where
    F: Fn(&mut PgConnection, &[&Envelope]) -> Result<(), HandlerError>
        + Send
        + Sync
        + Clone
        + 'static,
{
    crate::metrics::watch_queues(&config);
    let label: Arc<str> = Arc::from(crate::metrics::queue_label(&queue));
    let max = usize::from(config.batch_max.max(1));
    let wait = Duration::from_millis(config.batch_wait_ms);
    let prefetch = config.prefetch.max(config.batch_max.saturating_mul(2));
    loop {
        let result = consume_batches(&config, &queue, prefetch, max, wait, |batch| {
            apply_batch(batch, &db, schema, &label, effect.clone())
        })
        .await;
        if let Err(error) = result {
            tracing::warn!(%error, queue, "consumer restarting");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One connection's worth of batched consuming: gathers deliveries into
/// batches and awaits `on_batch` for each before gathering the next.
async fn consume_batches<B, Fut>(
    config: &Config,
    queue: &str,
    prefetch: u16,
    max: usize,
    wait: Duration,
    on_batch: B,
) -> Result<(), PlatformError>
where
    B: Fn(Vec<Delivery>) -> Fut,
    Fut: Future<Output = ()>,
{
    let (_conn, mut deliveries) = subscribe(config, queue, prefetch).await?;
    tracing::info!(
        queue,
        max,
        wait_ms = wait.as_millis() as u64,
        "consuming in batches"
    );
    while let Some(first) = deliveries.next().await {
        let mut batch = vec![first?];
        let deadline = tokio::time::Instant::now() + wait;
        while batch.len() < max {
            match tokio::time::timeout_at(deadline, deliveries.next()).await {
                Ok(Some(delivery)) => batch.push(delivery?),
                Ok(None) => break,
                Err(_elapsed) => break,
            }
        }
        on_batch(batch).await;
    }
    Err(PlatformError::Other(format!("consumer of {queue} ended")))
}

/// Applies one batch (see [`run_inbox_batch`]) and settles every delivery.
async fn apply_batch<F>(batch: Vec<Delivery>, db: &Db, schema: &'static str, queue: &str, effect: F)
where
    F: Fn(&mut PgConnection, &[&Envelope]) -> Result<(), HandlerError>
        + Send
        + Sync
        + Clone
        + 'static,
{
    let started = std::time::Instant::now();
    let mut decoded: Vec<(Delivery, Envelope)> = Vec::with_capacity(batch.len());
    for delivery in batch {
        match serde_json::from_slice::<Envelope>(&delivery.data) {
            Ok(envelope) => decoded.push((delivery, envelope)),
            Err(error) => {
                tracing::error!(%error, routing_key = %delivery.routing_key, "undecodable message dead-lettered");
                let _ = delivery
                    .acker
                    .reject(BasicRejectOptions { requeue: false })
                    .await;
            }
        }
    }
    if decoded.is_empty() {
        return;
    }
    let span = tracing::info_span!("batch", queue, size = decoded.len());
    let envelopes: Vec<Envelope> = decoded.iter().map(|(_, e)| e.clone()).collect();
    let whole = {
        let effect = effect.clone();
        db.tx(move |conn| apply_batch_once(conn, schema, &envelopes, &effect))
            .instrument(span.clone())
            .await
    };
    match whole {
        Ok(applied) => {
            for (delivery, envelope) in &decoded {
                let kind = kind_label(&envelope.kind);
                if delivery.redelivered || delivery_count(delivery) > 0 {
                    crate::metrics::MESSAGES_REDELIVERED
                        .with_label_values(&[queue, &kind])
                        .inc();
                }
                crate::metrics::MESSAGES_CONSUMED
                    .with_label_values(&[queue, &kind, "ack"])
                    .inc();
                crate::metrics::MESSAGE_SECONDS
                    .with_label_values(&[queue, &kind])
                    .observe(started.elapsed().as_secs_f64());
            }
            // Every earlier delivery on this channel is settled (batches run
            // one after another), so one multiple-ack settles this batch.
            if let Some((last, _)) = decoded.last()
                && let Err(error) = last.acker.ack(BasicAckOptions { multiple: true }).await
            {
                tracing::warn!(%error, "batch ack failed");
            }
            tracing::debug!(parent: &span, applied, "batch applied");
        }
        Err(error) => {
            tracing::warn!(parent: &span, %error, "batch failed; applying its messages one at a time");
            apply_one_by_one(decoded, db, schema, queue, effect).await;
        }
    }
}

/// The fallback of a failed batch: each message in its own transaction and
/// settled on its own; after the first transient failure the rest go back
/// to the queue (the database is likely away for all of them).
async fn apply_one_by_one<F>(
    decoded: Vec<(Delivery, Envelope)>,
    db: &Db,
    schema: &'static str,
    queue: &str,
    effect: F,
) where
    F: Fn(&mut PgConnection, &[&Envelope]) -> Result<(), HandlerError>
        + Send
        + Sync
        + Clone
        + 'static,
{
    let mut rest = decoded.into_iter();
    while let Some((delivery, envelope)) = rest.next() {
        let kind = kind_label(&envelope.kind);
        let correlation_id = envelope
            .correlation_id
            .clone()
            .unwrap_or_else(|| envelope.id.to_string());
        let span = tracing::info_span!(
            "message",
            message.id = %envelope.id,
            message.kind = %envelope.kind,
            correlation_id = %correlation_id,
            attempt = delivery_count(&delivery) + 1,
        );
        let effect = effect.clone();
        let result = db
            .tx(move |conn| {
                apply_batch_once(conn, schema, std::slice::from_ref(&envelope), &effect)
            })
            .instrument(span.clone())
            .await
            .map(|_| ());
        let transient = matches!(result, Err(HandlerError::Transient(_)));
        settle(&delivery, queue, &kind, result)
            .instrument(span)
            .await;
        if transient {
            for (delivery, _) in rest.by_ref() {
                let _ = delivery
                    .acker
                    .nack(BasicNackOptions {
                        requeue: true,
                        ..Default::default()
                    })
                    .await;
            }
        }
    }
}

/// A delivery as it came off the wire, for consumers of messages that are not
/// [`Envelope`]s (host agents publish plain JSON): the routing key and the
/// broker-validated `user_id` are part of what such a handler must check.
#[derive(Debug, Clone)]
pub struct RawMessage {
    pub routing_key: String,
    /// The `user_id` property. When present, RabbitMQ has checked that it
    /// names the user of the publishing connection; when absent, it proves
    /// nothing.
    pub user_id: Option<String>,
    pub message_id: Option<String>,
    pub data: Vec<u8>,
    /// Earlier deliveries of this message (the quorum queue's count).
    pub delivery_count: i64,
}

/// [`run`] for messages that are not envelopes: the handler gets the body and
/// the delivery's routing key and properties, with the same acks, retries and
/// dead-lettering. There is no inbox: use it for effects that are idempotent
/// by nature.
pub async fn run_raw<H, Fut>(config: Arc<Config>, queue: String, handler: H)
where
    H: Fn(RawMessage) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    crate::metrics::watch_queues(&config);
    let label: Arc<str> = Arc::from(crate::metrics::queue_label(&queue));
    loop {
        let on_delivery = |delivery| handle_raw_delivery(delivery, handler.clone(), label.clone());
        if let Err(error) = consume_once(&config, &queue, on_delivery).await {
            tracing::warn!(%error, queue, "consumer restarting");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn handle_raw_delivery<H, Fut>(delivery: Delivery, handler: H, queue: Arc<str>)
where
    H: Fn(RawMessage) -> Fut,
    Fut: Future<Output = Result<(), HandlerError>>,
{
    let attempt = delivery_count(&delivery);
    let message = RawMessage {
        routing_key: delivery.routing_key.to_string(),
        user_id: delivery
            .properties
            .user_id()
            .as_ref()
            .map(|u| u.to_string()),
        message_id: delivery
            .properties
            .message_id()
            .as_ref()
            .map(|m| m.to_string()),
        data: delivery.data.clone(),
        delivery_count: attempt,
    };
    let span = tracing::info_span!(
        "message",
        routing_key = %message.routing_key,
        message.id = message.message_id.as_deref().unwrap_or(""),
        attempt = attempt + 1,
    );
    // The first two words of the routing key (`agent.<id>.heartbeat` →
    // `agent.heartbeat`) label the metric without one series per sender.
    let kind = kind_label(&{
        let words: Vec<&str> = message.routing_key.split('.').collect();
        match (words.first(), words.last()) {
            (Some(first), Some(last)) if words.len() > 1 => format!("{first}.{last}"),
            _ => message.routing_key.clone(),
        }
    });
    let started = std::time::Instant::now();
    let work = async move {
        let result = handler(message).await;
        settle(&delivery, &queue, &kind, result).await;
        crate::metrics::MESSAGE_SECONDS
            .with_label_values(&[&*queue, kind.as_str()])
            .observe(started.elapsed().as_secs_f64());
    };
    work.instrument(span).await;
}
