//! The database pool. Diesel is synchronous, so every query runs on tokio's
//! blocking pool through [`Db::run`]; pools stay small because Postgres
//! allows 100 connections by default and a dev process runs six services.

use diesel::pg::PgConnection;
use diesel::r2d2::{ConnectionManager, Pool, PooledConnection};
use diesel::{Connection, RunQueryDsl};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use scheduled_thread_pool::{OnPoolDropBehavior, ScheduledThreadPool};

use crate::PlatformError;

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations");

pub type PgPool = Pool<ConnectionManager<PgConnection>>;
pub type PgConn = PooledConnection<ConnectionManager<PgConnection>>;

#[derive(Clone)]
pub struct Db {
    pool: PgPool,
}

/// r2d2 opens connections on a thread pool of its own, which its drop only
/// tells to stop: a thread still inside libpq when `main` returns races the C
/// `atexit` handlers (OpenSSL's teardown), the rare SIGSEGV or "double free"
/// after a clean shutdown. Each [`Db`] therefore gets a one-thread pool that
/// counts itself here and uncounts itself when its thread ends, and
/// [`join_pool_threads`] waits for the count to reach zero.
static LIVE_POOL_THREADS: Mutex<usize> = Mutex::new(0);
static POOL_THREAD_EXITED: Condvar = Condvar::new();

struct PoolThreadExit;

impl Drop for PoolThreadExit {
    fn drop(&mut self) {
        let mut live = LIVE_POOL_THREADS.lock().unwrap_or_else(|e| e.into_inner());
        *live = live.saturating_sub(1);
        POOL_THREAD_EXITED.notify_all();
    }
}

thread_local! {
    // Dropped when the pool's thread ends, after its last job.
    static POOL_THREAD: std::cell::RefCell<Option<PoolThreadExit>> = const { std::cell::RefCell::new(None) };
}

fn counted_thread_pool() -> Arc<ScheduledThreadPool> {
    let pool = ScheduledThreadPool::builder()
        .num_threads(1)
        .thread_name_pattern("r2d2-db-{}")
        // Do not wait for the reaper's next tick once the pool is dropped.
        .on_drop_behavior(OnPoolDropBehavior::DiscardPendingScheduled)
        .build();
    *LIVE_POOL_THREADS.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    // One thread: this job runs on the thread it counts, and the guard ends
    // with that thread. A pool dropped before its thread took the job
    // discards the job, and the guard with it: the thread then ends without
    // running anything.
    let guard = PoolThreadExit;
    pool.execute(move || POOL_THREAD.with(|slot| *slot.borrow_mut() = Some(guard)));
    Arc::new(pool)
}

/// Waits (up to `limit`) until every pool thread has ended, which happens once
/// every clone of every [`Db`] is dropped. Call it after the async runtime is
/// shut down and before `main` returns. False when threads are still alive.
pub fn join_pool_threads(limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut live = LIVE_POOL_THREADS.lock().unwrap_or_else(|e| e.into_inner());
    while *live > 0 {
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        live = POOL_THREAD_EXITED
            .wait_timeout(live, deadline - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    true
}

impl Db {
    pub fn connect(url: &str, size: u32) -> Result<Self, PlatformError> {
        let manager = ConnectionManager::<PgConnection>::new(url);
        let pool = Pool::builder()
            .thread_pool(counted_thread_pool())
            .max_size(size)
            .min_idle(Some(0))
            .connection_timeout(std::time::Duration::from_secs(10))
            .build(manager)?;
        Ok(Self { pool })
    }

    /// Runs `f` with a pooled connection on the blocking thread pool.
    pub async fn run<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut PgConnection) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<PlatformError> + Send + 'static,
    {
        let pool = self.pool.clone();
        // A task-local does not cross into the blocking pool: carry the
        // correlation id over, or outbox rows written in `f` lose it.
        let cid = crate::http::current_correlation_id();
        tokio::task::spawn_blocking(move || {
            crate::correlation::in_correlation_scope(cid, || {
                let mut conn = pool.get().map_err(PlatformError::from)?;
                f(&mut conn)
            })
        })
        .await
        .map_err(PlatformError::from)?
    }

    /// Runs `f` inside one transaction: everything it writes commits together
    /// or not at all.
    pub async fn tx<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut PgConnection) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<PlatformError> + From<diesel::result::Error> + Send + 'static,
    {
        self.run(move |conn| conn.transaction(f)).await
    }

    /// `SELECT 1`, for readiness probes.
    pub async fn ping(&self) -> Result<(), PlatformError> {
        self.run(|conn| {
            diesel::sql_query("SELECT 1")
                .execute(conn)
                .map(|_| ())
                .map_err(PlatformError::from)
        })
        .await
    }
}

/// Applies every pending migration.
pub fn migrate(url: &str) -> Result<(), PlatformError> {
    let mut conn = PgConnection::establish(url)?;
    conn.run_pending_migrations(MIGRATIONS)
        .map_err(|e| PlatformError::Migration(e.to_string()))?;
    Ok(())
}

/// Reverts every migration, newest first (used to prove the downs work).
pub fn revert_all(url: &str) -> Result<(), PlatformError> {
    let mut conn = PgConnection::establish(url)?;
    conn.revert_all_migrations(MIGRATIONS)
        .map_err(|e| PlatformError::Migration(e.to_string()))?;
    Ok(())
}

/// Creates database `name` on the server of `admin_url` unless it exists.
pub fn create_database(admin_url: &str, name: &str) -> Result<(), PlatformError> {
    validate_identifier(name)?;
    let mut conn = PgConnection::establish(admin_url)?;
    let exists: bool = diesel::select(diesel::dsl::sql::<diesel::sql_types::Bool>(&format!(
        "EXISTS (SELECT 1 FROM pg_database WHERE datname = '{name}')"
    )))
    .get_result(&mut conn)?;
    if !exists {
        diesel::sql_query(format!("CREATE DATABASE \"{name}\"")).execute(&mut conn)?;
    }
    Ok(())
}

/// The migrated template tests copy their databases from, named after the
/// migrations' fingerprint (see build.rs).
pub const TEMPLATE_DATABASE: &str =
    concat!("gpumarket_template_", env!("GPUMARKET_MIGRATIONS_HASH"));

/// Creates database `name` already migrated, as a copy of
/// [`TEMPLATE_DATABASE`] (`CREATE DATABASE ... TEMPLATE`): a copy takes a
/// fraction of the time the ~80 migrations take, which every system test
/// paid. The first caller with these migrations builds the template, under
/// a Postgres advisory lock that other test processes wait on; it is built
/// under another name and renamed when complete, so a build cut off by a
/// crash is never copied. Templates of other migrations are dropped then:
/// the server keeps one.
pub fn create_migrated_database(admin_url: &str, name: &str) -> Result<(), PlatformError> {
    validate_identifier(name)?;
    let mut conn = PgConnection::establish(admin_url)?;
    // One key for every gpumarket test process on this server.
    diesel::sql_query("SELECT pg_advisory_lock(727000019)").execute(&mut conn)?;
    let made = (|| -> Result<(), PlatformError> {
        if !database_exists(&mut conn, TEMPLATE_DATABASE)? {
            build_template(&mut conn, admin_url)?;
        }
        diesel::sql_query(format!(
            "CREATE DATABASE \"{name}\" TEMPLATE \"{TEMPLATE_DATABASE}\""
        ))
        .execute(&mut conn)?;
        Ok(())
    })();
    let unlocked = diesel::sql_query("SELECT pg_advisory_unlock(727000019)").execute(&mut conn);
    made?;
    unlocked?;
    Ok(())
}

fn database_exists(conn: &mut PgConnection, name: &str) -> Result<bool, PlatformError> {
    validate_identifier(name)?;
    Ok(
        diesel::select(diesel::dsl::sql::<diesel::sql_types::Bool>(&format!(
            "EXISTS (SELECT 1 FROM pg_database WHERE datname = '{name}')"
        )))
        .get_result(conn)?,
    )
}

fn build_template(conn: &mut PgConnection, admin_url: &str) -> Result<(), PlatformError> {
    #[derive(diesel::QueryableByName)]
    struct Name {
        #[diesel(sql_type = diesel::sql_types::Text)]
        datname: String,
    }
    let stale: Vec<Name> = diesel::sql_query(
        "SELECT datname FROM pg_database WHERE datname LIKE 'gpumarket\\_template\\_%'",
    )
    .load(conn)?;
    for old in stale {
        validate_identifier(&old.datname)?;
        diesel::sql_query(format!(
            "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
            old.datname
        ))
        .execute(conn)?;
    }
    let building = format!("{TEMPLATE_DATABASE}_building");
    diesel::sql_query(format!("CREATE DATABASE \"{building}\"")).execute(conn)?;
    migrate(&crate::config::replace_db_name(admin_url, &building))?;
    // The migration's connection is closed by now; a template must have none.
    diesel::sql_query(format!(
        "ALTER DATABASE \"{building}\" RENAME TO \"{TEMPLATE_DATABASE}\""
    ))
    .execute(conn)?;
    Ok(())
}

/// Drops database `name`, closing its connections first.
pub fn drop_database(admin_url: &str, name: &str) -> Result<(), PlatformError> {
    validate_identifier(name)?;
    let mut conn = PgConnection::establish(admin_url)?;
    diesel::sql_query(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .execute(&mut conn)?;
    Ok(())
}

fn validate_identifier(name: &str) -> Result<(), PlatformError> {
    if name.is_empty()
        || name.len() > 63
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(PlatformError::Config(format!(
            "database name {name:?} must be 1-63 characters of [A-Za-z0-9_]"
        )));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_dropped_at_once_is_joined_too() {
        for _ in 0..50 {
            drop(Db::connect("postgres://127.0.0.1:1/none", 1).unwrap());
        }
        assert!(join_pool_threads(Duration::from_secs(5)));
    }

    #[test]
    fn pool_threads_are_joined_once_every_pool_is_dropped() {
        // No connection is opened (min_idle 0): the pool's thread alone.
        let db = Db::connect("postgres://127.0.0.1:1/none", 1).unwrap();
        let clone = db.clone();
        drop(db);
        assert!(
            !join_pool_threads(Duration::from_millis(200)),
            "a live clone keeps its thread"
        );
        drop(clone);
        assert!(join_pool_threads(Duration::from_secs(5)));
    }
}
