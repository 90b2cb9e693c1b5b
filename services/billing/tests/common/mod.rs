//! What the billing crate's integration tests share: the settings they run
//! billing with, a fresh migrated database of their own, and a count.

// Each test file compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl};
use gpumarket_billing as billing;
use rust_decimal::Decimal;
use uuid::Uuid;

pub fn settings() -> billing::Settings {
    billing::Settings {
        fee_rate: Decimal::new(15, 2),
        currency: "USD".into(),
        events_exchange: "gpumarket.events".into(),
        downtime_credit_multiple: Decimal::ONE,
    }
}

/// A migrated database of the test's own, dropped with the value.
pub struct TestDb {
    admin: String,
    name: String,
    pub url: String,
}

impl TestDb {
    pub fn new(tag: &str) -> Self {
        let base = platform::Config::from_env().expect("config");
        let name = format!("gpumarket_test_{tag}_{}", Uuid::now_v7().simple());
        let admin = platform::config::replace_db_name(&base.database_url, "postgres");
        platform::db::create_database(&admin, &name).expect("create database");
        let url = base.with_database(&name).database_url;
        platform::db::migrate(&url).expect("migrate");
        Self { admin, name, url }
    }

    pub fn conn(&self) -> PgConnection {
        PgConnection::establish(&self.url).expect("connect")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let _ = platform::db::drop_database(&self.admin, &self.name);
    }
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::Int8)]
    n: i64,
}

/// The `n` of a `SELECT count(*) AS n ...`.
pub fn count(conn: &mut PgConnection, sql: &str) -> i64 {
    diesel::sql_query(sql)
        .get_result::<Count>(conn)
        .expect("count")
        .n
}
