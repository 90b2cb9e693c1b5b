//! Wake-on-commit: a writer runs [`notify`] in the transaction that creates
//! work (an outbox row, a job), and Postgres delivers the `NOTIFY` only when
//! that transaction commits; a [`listen`] task holding a `LISTEN` connection
//! turns each delivery into a wake-up of the loop that does the work. The
//! loop still polls, slowly, so a notification lost with a dead listener or
//! a dropped connection only delays the work until the next poll.
//!
//! Diesel has no asynchronous `LISTEN`, and the workspace forbids the unsafe
//! code it would take to wait on libpq's socket, so the listener checks its
//! connection for notifications every [`Listener::check`] (1 ms by default).
//! A check reads only what is already in the socket's buffer (libpq's
//! `PQconsumeInput` on a non-blocking socket): no round trip to the server
//! and a few microseconds of CPU, and no query runs between checks.

use std::sync::Arc;
use std::time::Duration;

use diesel::pg::PgConnection;
use diesel::{Connection, RunQueryDsl};
use tokio::sync::Notify;

use crate::PlatformError;

/// The channel the outbox relay of `schema` listens on.
pub fn outbox_channel(schema: &str) -> String {
    format!("{schema}_outbox")
}

/// Queues a notification on `channel` in the caller's transaction: it is
/// delivered when the transaction commits, and dropped if it rolls back.
/// Postgres folds identical notifications of one transaction into one.
pub fn notify(conn: &mut PgConnection, channel: &str) -> Result<(), diesel::result::Error> {
    diesel::sql_query("SELECT pg_notify($1, '')")
        .bind::<diesel::sql_types::Text, _>(channel)
        .execute(conn)?;
    Ok(())
}

/// Where and how a [`listen`] task listens.
#[derive(Debug, Clone)]
pub struct Listener {
    /// The database URL (the service's own role is enough: `LISTEN` needs no
    /// privilege).
    pub url: String,
    pub channel: String,
    /// How often the connection is checked for notifications.
    pub check: Duration,
}

/// How long a failed listener waits before it connects again.
const RECONNECT: Duration = Duration::from_secs(1);

/// How often an idle listener asks the server something, so a connection
/// that died without a word (a restarted Postgres, a cut network) is noticed
/// and replaced; until then the worker's slow poll carries the work.
const LIVENESS: Duration = Duration::from_secs(10);

/// Wakes `wake` after every commit that notified `listener.channel`, forever,
/// reconnecting after errors. Each (re)connection also wakes once: whatever
/// was committed while nobody listened is looked for at once.
pub async fn listen(listener: Listener, wake: Arc<Notify>) {
    loop {
        match connect(&listener).await {
            Ok(conn) => {
                tracing::debug!(channel = %listener.channel, "listening");
                wake.notify_one();
                let error = deliver(conn, &listener, &wake).await;
                tracing::warn!(%error, channel = %listener.channel, "listener lost its connection");
            }
            Err(error) => {
                tracing::warn!(%error, channel = %listener.channel, "listener cannot connect");
            }
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

/// Opens a connection and listens on the channel (connecting blocks, so it
/// runs on the blocking pool).
async fn connect(listener: &Listener) -> Result<PgConnection, PlatformError> {
    let url = listener.url.clone();
    let channel = listener.channel.clone();
    tokio::task::spawn_blocking(move || -> Result<PgConnection, PlatformError> {
        let mut conn = PgConnection::establish(&url)?;
        // A channel is an identifier: quoted, so a schema name with any
        // character in it listens on exactly what `pg_notify` sends to.
        let quoted = channel.replace('"', "\"\"");
        diesel::sql_query(format!("LISTEN \"{quoted}\"")).execute(&mut conn)?;
        Ok(conn)
    })
    .await?
}

/// Wakes `wake` for the notifications arriving on `conn` until the
/// connection fails; returns that failure.
async fn deliver(mut conn: PgConnection, listener: &Listener, wake: &Notify) -> PlatformError {
    let mut check = tokio::time::interval(listener.check.max(Duration::from_micros(100)));
    // A late check must not be followed by a burst of catching-up checks.
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut liveness = tokio::time::Instant::now() + LIVENESS;
    loop {
        check.tick().await;
        let mut woke = false;
        for received in conn.notifications_iter() {
            match received {
                Ok(_) => woke = true,
                Err(error) => return error.into(),
            }
        }
        if woke {
            wake.notify_one();
        }
        if tokio::time::Instant::now() >= liveness {
            // The query blocks for a round trip: off the runtime's threads.
            let probed = tokio::task::spawn_blocking(move || {
                let result = diesel::sql_query("SELECT 1").execute(&mut conn);
                (conn, result)
            })
            .await;
            match probed {
                Ok((back, Ok(_))) => conn = back,
                Ok((_, Err(error))) => return error.into(),
                Err(error) => return error.into(),
            }
            liveness = tokio::time::Instant::now() + LIVENESS;
        }
    }
}
