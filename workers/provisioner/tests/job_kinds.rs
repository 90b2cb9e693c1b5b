//! The database keeps `provisioner.jobs.kind` to the kinds the worker knows
//! (`JobKind`): another kind cannot be written, so it cannot be run as
//! something else.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use diesel::RunQueryDsl;
use platform::test_db::TestDb;

fn insert(conn: &mut diesel::PgConnection, kind: &str) -> Result<usize, diesel::result::Error> {
    diesel::sql_query(
        "INSERT INTO provisioner.jobs (id, instance_id, kind, machine_id, payload, status) \
         VALUES (gen_random_uuid(), gen_random_uuid(), $1, gen_random_uuid(), '{}', 'running')",
    )
    .bind::<diesel::sql_types::Text, _>(kind)
    .execute(conn)
}

#[test]
fn the_database_refuses_a_job_kind_the_worker_does_not_know() {
    let db = TestDb::new("job_kinds").expect("test database");
    let mut conn = db.conn().expect("connect");
    for kind in [
        "provision",
        "provision:3",
        "deprovision",
        "cleanup",
        "cleanup:2",
        "stop:0193f5a2-7c1e-7d40-9a51-3f2b8c9d0e1f",
    ] {
        insert(&mut conn, kind).unwrap_or_else(|e| panic!("{kind}: {e}"));
    }
    for kind in [
        "reboot",
        "stop",
        "stop:not-a-uuid",
        "provisioning",
        "deprovision:2",
        "",
    ] {
        let err = insert(&mut conn, kind).expect_err(kind);
        assert!(err.to_string().contains("jobs_kind_known"), "{kind}: {err}");
    }
}
