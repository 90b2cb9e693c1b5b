//! For tests that need a real database of their own: a fresh, migrated
//! PostgreSQL database named after the test, dropped with the value. The
//! server is the one `GPUMARKET_DATABASE_URL` names (the local default
//! otherwise).

use diesel::{Connection, PgConnection};
use uuid::Uuid;

use crate::{Config, PlatformError};

/// A migrated database of the caller's own, dropped on drop.
pub struct TestDb {
    admin: String,
    name: String,
    /// Its connection URL.
    pub url: String,
}

impl TestDb {
    /// Creates `gpumarket_test_<tag>_<unique>`, migrated (a copy of the
    /// migrated template).
    pub fn new(tag: &str) -> Result<Self, PlatformError> {
        let base = Config::from_env()?;
        let name = format!("gpumarket_test_{tag}_{}", Uuid::now_v7().simple());
        let admin = crate::config::replace_db_name(&base.database_url, "postgres");
        crate::db::create_migrated_database(&admin, &name)?;
        Ok(Self {
            url: base.with_database(&name).database_url,
            admin,
            name,
        })
    }

    /// A new connection to it.
    pub fn conn(&self) -> Result<PgConnection, PlatformError> {
        Ok(PgConnection::establish(&self.url)?)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let _ = crate::db::drop_database(&self.admin, &self.name);
    }
}
