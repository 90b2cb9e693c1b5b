//! Test databases are copies of one migrated template
//! (`platform::db::create_migrated_database`): a copy has every migration,
//! and copies made at once by racing test processes all succeed.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use diesel::{Connection, PgConnection};
use diesel_migrations::MigrationHarness;
use gpumarket_platform::db::{
    MIGRATIONS, TEMPLATE_DATABASE, create_migrated_database, drop_database,
};

#[test]
fn copies_of_the_template_are_fully_migrated_even_when_made_at_once() {
    let base = gpumarket_platform::Config::from_env().expect("config");
    let admin = gpumarket_platform::config::replace_db_name(&base.database_url, "postgres");
    let names: Vec<String> = (0..4)
        .map(|i| {
            format!(
                "gpumarket_test_template_{i}_{}",
                uuid::Uuid::now_v7().simple()
            )
        })
        .collect();
    let made: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = names
            .iter()
            .map(|name| {
                let admin = admin.clone();
                scope.spawn(move || create_migrated_database(&admin, name))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (name, result) in names.iter().zip(&made) {
        assert!(result.is_ok(), "{name}: {result:?}");
        let url = gpumarket_platform::config::replace_db_name(&base.database_url, name);
        let mut conn = PgConnection::establish(&url).expect("connect");
        assert!(
            !conn.has_pending_migration(MIGRATIONS).expect("pending"),
            "{name} lacks migrations of {TEMPLATE_DATABASE}"
        );
        drop(conn);
        drop_database(&admin, name).expect("drop");
    }
}
