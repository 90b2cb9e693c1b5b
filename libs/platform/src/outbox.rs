//! The transactional outbox: a service writes its state change and the
//! message that announces it in one transaction ([`enqueue`]); a relay
//! ([`run_relay`]) publishes unsent rows with publisher confirms and only then
//! marks them sent. A crash between publish and mark re-sends the message,
//! which consumers drop by id: delivery is at least once, effects exactly once.
//!
//! The relay is woken by the commit that wrote a row: [`enqueue`] also
//! queues a `NOTIFY <schema>_outbox` in the same transaction, which Postgres
//! delivers only at commit, and the relay keeps a `LISTEN` connection
//! (crate::notify). It still polls every `outbox_poll_ms` (1 s by default),
//! so a lost notification or a dead listener delays a message by at most
//! that, and loses nothing.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

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
    // The relay's wake-up rides in the same statement (no extra round trip):
    // a NOTIFY is delivered at commit, so the relay never wakes to a row it
    // cannot see yet, and the many rows of one transaction make one
    // notification (Postgres folds identical ones).
    diesel::sql_query(format!(
        "WITH woken AS (SELECT pg_notify($5, '')) \
         INSERT INTO {schema}.outbox (id, exchange, routing_key, body) \
         SELECT $1, $2, $3, $4 FROM woken"
    ))
    .bind::<SqlUuid, _>(envelope.id)
    .bind::<Text, _>(exchange)
    .bind::<Text, _>(routing_key)
    .bind::<Jsonb, _>(body)
    .bind::<Text, _>(crate::notify::outbox_channel(schema))
    .execute(conn)?;
    Ok(())
}

/// [`enqueue`] for many envelopes in one statement (a set-based run that
/// announces one event per row it changed); nothing when `items` is empty.
pub fn enqueue_many(
    conn: &mut PgConnection,
    schema: &str,
    exchange: &str,
    items: &[(&str, Envelope)],
) -> Result<(), diesel::result::Error> {
    if items.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = items.iter().map(|(_, e)| e.id).collect();
    let keys: Vec<&str> = items.iter().map(|(k, _)| *k).collect();
    let bodies = items
        .iter()
        .map(|(_, e)| serde_json::to_value(e))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
    diesel::sql_query(format!(
        "WITH woken AS (SELECT pg_notify($5, '')) \
         INSERT INTO {schema}.outbox (id, exchange, routing_key, body) \
         SELECT u.id, $1, u.k, u.b FROM woken, unnest($2::uuid[], $3::text[], $4::jsonb[]) AS u(id, k, b)"
    ))
    .bind::<Text, _>(exchange)
    .bind::<diesel::sql_types::Array<SqlUuid>, _>(&ids)
    .bind::<diesel::sql_types::Array<Text>, _>(&keys)
    .bind::<diesel::sql_types::Array<Jsonb>, _>(&bodies)
    .bind::<Text, _>(crate::notify::outbox_channel(schema))
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

/// Publishes `<schema>.outbox` forever, reconnecting after broker errors;
/// woken by the commits that enqueue (unless `listen_notifications` is off)
/// and every `outbox_poll_ms` regardless.
pub async fn run_relay(db: Db, config: Arc<Config>, schema: &'static str) {
    let wake = Arc::new(Notify::new());
    let _stop_listener = config.listen_notifications.then(|| {
        AbortOnDrop(tokio::spawn(crate::notify::listen(
            crate::notify::Listener {
                url: config.database_url_for(schema),
                channel: crate::notify::outbox_channel(schema),
                check: Duration::from_millis(config.notification_check_ms),
            },
            wake.clone(),
        )))
    });
    run_relay_woken(db, config, schema, wake).await
}

/// [`run_relay`] woken by whoever holds `wake` (tests use it to watch the
/// listener, or to run the relay with no listener at all).
pub async fn run_relay_woken(db: Db, config: Arc<Config>, schema: &'static str, wake: Arc<Notify>) {
    // Never 0: with no notifications an idle relay would spin on the table.
    let poll = Duration::from_millis(config.outbox_poll_ms.max(1));
    // Its own task: the backlog matters most while the relay is stuck
    // reconnecting to a broker that is down.
    let watcher = tokio::spawn(watch_backlog(db.clone(), schema));
    let _stop_watcher = AbortOnDrop(watcher);
    loop {
        if let Err(error) = relay_once(&db, &config, schema, poll, &wake).await {
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
    wake: &Notify,
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
            // A commit that notifies while a batch is being published leaves
            // a permit in `wake`, so it is not missed here.
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(poll) => {}
            }
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

/// Against the local Postgres and RabbitMQ (a fresh database and vhost per
/// test, both removed at the end). No test asserts how fast a message goes:
/// the timeouts only keep a broken relay from hanging the suite.
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use diesel::Connection;

    const SCHEMA: &str = "ordering";
    const HANG_GUARD: Duration = Duration::from_secs(60);

    struct Env {
        config: Config,
        admin_url: String,
        name: String,
        management: (reqwest::Url, String, String),
    }

    impl Env {
        async fn new() -> Env {
            let name = format!("gpumarket_test_relay_{}", Uuid::now_v7().simple());
            let mut config = Config::from_env().expect("config");
            let admin_url = crate::config::replace_db_name(&config.database_url, "postgres");
            config = config.with_database(&name);
            config.db_pool_size = 2;
            let amqp = reqwest::Url::parse(&config.amqp_url).expect("amqp url");
            config.amqp_url = format!(
                "amqp://{}:{}@{}:{}/{name}",
                amqp.username(),
                amqp.password().unwrap_or_default(),
                amqp.host_str().unwrap_or("127.0.0.1"),
                amqp.port().unwrap_or(5672)
            );
            let (admin, db, url) = (admin_url.clone(), name.clone(), config.database_url.clone());
            tokio::task::spawn_blocking(move || {
                crate::db::create_database(&admin, &db).expect("create database");
                crate::db::migrate(&url).expect("migrate");
            })
            .await
            .expect("join");
            let mut base =
                reqwest::Url::parse(&config.rabbitmq_management_url).expect("management URL");
            let user = base.username().to_owned();
            let pass = base.password().unwrap_or_default().to_owned();
            let _ = base.set_username("");
            let _ = base.set_password(None);
            let http = reqwest::Client::new();
            for (path, body) in [
                (format!("api/vhosts/{name}"), serde_json::json!({})),
                (
                    format!("api/permissions/{name}/{user}"),
                    serde_json::json!({ "configure": ".*", "write": ".*", "read": ".*" }),
                ),
            ] {
                let resp = http
                    .put(base.join(&path).expect("url"))
                    .basic_auth(&user, Some(&pass))
                    .json(&body)
                    .send()
                    .await
                    .expect("management API");
                assert!(resp.status().is_success(), "{path}: {}", resp.status());
            }
            Env {
                config,
                admin_url,
                name,
                management: (base, user, pass),
            }
        }

        async fn cleanup(self) {
            let (base, user, pass) = &self.management;
            let _ = reqwest::Client::new()
                .delete(
                    base.join(&format!("api/vhosts/{}", self.name))
                        .expect("url"),
                )
                .basic_auth(user, Some(pass))
                .send()
                .await;
            tokio::task::spawn_blocking(move || {
                crate::db::drop_database(&self.admin_url, &self.name).expect("drop database")
            })
            .await
            .expect("join");
        }

        /// Enqueues one message in a transaction of its own; its id.
        fn enqueue_one(&self) -> Uuid {
            let mut conn = PgConnection::establish(&self.config.database_url).expect("connect");
            let envelope = Envelope::named(
                "test.relay",
                chrono::Utc::now(),
                None,
                None,
                &serde_json::json!({}),
            )
            .expect("envelope");
            conn.transaction(|c| {
                enqueue(
                    c,
                    SCHEMA,
                    &self.config.events_exchange,
                    "test.relay",
                    &envelope,
                )
            })
            .expect("enqueue");
            envelope.id
        }

        fn published(&self, id: Uuid) -> bool {
            #[derive(QueryableByName)]
            struct Published {
                #[diesel(sql_type = diesel::sql_types::Bool)]
                published: bool,
            }
            let mut conn = PgConnection::establish(&self.config.database_url).expect("connect");
            diesel::sql_query(format!(
                "SELECT published_at IS NOT NULL AS published FROM {SCHEMA}.outbox WHERE id = $1"
            ))
            .bind::<SqlUuid, _>(id)
            .get_result::<Published>(&mut conn)
            .expect("outbox row")
            .published
        }
    }

    /// With no listener (as when it died), nothing ever notifies the relay:
    /// the slow poll alone still publishes the row.
    #[tokio::test]
    async fn the_slow_poll_relays_without_notifications() {
        let env = Env::new().await;
        let mut config = env.config.clone();
        config.listen_notifications = false;
        config.outbox_poll_ms = 20;
        let db = Db::connect(&config.database_url, 2).expect("pool");
        let relay = tokio::spawn(run_relay(db, Arc::new(config), SCHEMA));
        let id = env.enqueue_one();
        let deadline = tokio::time::Instant::now() + HANG_GUARD;
        while !env.published(id) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the relay never published the row"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        relay.abort();
        let _ = relay.await;
        env.cleanup().await;
    }

    /// An enqueue, once committed, wakes whoever listens on the schema's
    /// outbox channel.
    #[tokio::test]
    async fn a_committed_enqueue_wakes_the_listener() {
        let env = Env::new().await;
        let wake = Arc::new(Notify::new());
        let listener = tokio::spawn(crate::notify::listen(
            crate::notify::Listener {
                url: env.config.database_url.clone(),
                channel: crate::notify::outbox_channel(SCHEMA),
                check: Duration::from_millis(1),
            },
            wake.clone(),
        ));
        // The wake-up every (re)connection gives: the listener is listening.
        tokio::time::timeout(HANG_GUARD, wake.notified())
            .await
            .expect("the listener never connected");
        env.enqueue_one();
        tokio::time::timeout(HANG_GUARD, wake.notified())
            .await
            .expect("the commit never woke the listener");
        listener.abort();
        let _ = listener.await;
        env.cleanup().await;
    }
}
