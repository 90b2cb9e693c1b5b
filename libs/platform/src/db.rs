//! The database pool. Diesel is synchronous, so every query runs on tokio's
//! blocking pool through [`Db::run`]; pools stay small because Postgres
//! allows 100 connections by default and a dev process runs six services.

use diesel::pg::PgConnection;
use diesel::r2d2::{ConnectionManager, Pool, PooledConnection};
use diesel::{Connection, RunQueryDsl};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use crate::PlatformError;

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations");

pub type PgPool = Pool<ConnectionManager<PgConnection>>;
pub type PgConn = PooledConnection<ConnectionManager<PgConnection>>;

#[derive(Clone)]
pub struct Db {
    pool: PgPool,
}

impl Db {
    pub fn connect(url: &str, size: u32) -> Result<Self, PlatformError> {
        let manager = ConnectionManager::<PgConnection>::new(url);
        let pool = Pool::builder()
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
            crate::http::in_correlation_scope(cid, || {
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
