//! What the billing crate's integration tests share: the settings they run
//! billing with, a fresh migrated database of their own, and a count.

// Each test file compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use diesel::{PgConnection, QueryableByName, RunQueryDsl};
use gpumarket_billing as billing;
use rust_decimal::Decimal;

pub fn settings() -> billing::Settings {
    billing::Settings {
        fee_rate: Decimal::new(15, 2),
        currency: "USD".into(),
        events_exchange: "gpumarket.events".into(),
        downtime_credit_multiple: Decimal::ONE,
    }
}

/// A migrated database of the test's own, dropped with the value.
pub struct TestDb(platform::test_db::TestDb);

impl TestDb {
    pub fn new(tag: &str) -> Self {
        Self(platform::test_db::TestDb::new(tag).expect("test database"))
    }

    pub fn url(&self) -> &str {
        &self.0.url
    }

    pub fn conn(&self) -> PgConnection {
        self.0.conn().expect("connect")
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
