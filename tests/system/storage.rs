//! The database's own guarantees: migrations revert cleanly, each service's
//! role reaches only its own schema, and the ledger refuses an unbalanced
//! or edited posting whatever the application does.

use diesel::{Connection, PgConnection, RunQueryDsl};

use crate::harness::TestEnv;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_revert_and_reapply() {
    let env = TestEnv::new().await;
    let url = env.config.database_url.clone();
    tokio::task::spawn_blocking(move || {
        platform::db::revert_all(&url).expect("down");
        platform::db::migrate(&url).expect("up again");
    })
    .await
    .expect("join");
    assert_eq!(
        env.count("SELECT count(*) AS n FROM information_schema.schemata WHERE schema_name IN ('quota','catalog','ordering','metering','billing','provisioner')"),
        6
    );
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_role_reaches_only_its_own_schema() {
    let env = TestEnv::new().await;
    let mut config = env.config.clone();
    config.db_role_per_service = true;
    let catalog_url = config.database_url_for("catalog");
    assert!(catalog_url.contains("gpumarket_catalog@"));
    let mut conn = PgConnection::establish(&catalog_url).expect("connect as catalog");
    diesel::sql_query("SELECT count(*) FROM catalog.machines")
        .execute(&mut conn)
        .expect("own schema");
    let denied = diesel::sql_query("SELECT count(*) FROM billing.entries").execute(&mut conn);
    let message = denied
        .expect_err("billing must be out of reach")
        .to_string();
    assert!(message.contains("permission denied"), "{message}");
    drop(conn);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_refuses_unbalanced_and_edited_postings() {
    let env = TestEnv::new().await;
    let mut conn = env.conn();
    let result = conn.transaction::<_, diesel::result::Error, _>(|c| {
        let a = billing::ledger::account(
            c,
            billing::ledger::AccountKind::RenterBalance,
            Some(uuid::Uuid::now_v7()),
            "USD",
        )?;
        let b = billing::ledger::account(
            c,
            billing::ledger::AccountKind::PaymentClearing,
            None,
            "USD",
        )?;
        billing::ledger::post(
            c,
            &billing::ledger::Posting {
                id: "unbalanced",
                kind: "test",
                tenant_id: None,
                instance_id: None,
                fee_rate: None,
                description: "off by a nano",
                legs: &[
                    (a, "1.000000001".parse().unwrap()),
                    (b, "-1".parse().unwrap()),
                ],
            },
        )?;
        Ok(())
    });
    let message = result.expect_err("commit must fail").to_string();
    assert!(message.contains("does not balance"), "{message}");
    assert_eq!(
        env.count("SELECT count(*) AS n FROM billing.transactions"),
        0
    );

    // A balanced posting commits once; the same id again is a no-op; edits are refused.
    let tenant = uuid::Uuid::now_v7();
    let post = |c: &mut PgConnection| {
        c.transaction::<_, diesel::result::Error, _>(|c| {
            let a = billing::ledger::account(
                c,
                billing::ledger::AccountKind::RenterBalance,
                Some(tenant),
                "USD",
            )?;
            let b = billing::ledger::account(
                c,
                billing::ledger::AccountKind::PaymentClearing,
                None,
                "USD",
            )?;
            billing::ledger::post(
                c,
                &billing::ledger::Posting {
                    id: "credit-1",
                    kind: "credit",
                    tenant_id: Some(tenant),
                    instance_id: None,
                    fee_rate: None,
                    description: "test",
                    legs: &[(a, "5".parse().unwrap()), (b, "-5".parse().unwrap())],
                },
            )
        })
    };
    assert!(post(&mut conn).expect("first"));
    assert!(!post(&mut conn).expect("second"));
    assert_eq!(env.count("SELECT count(*) AS n FROM billing.entries"), 2);
    let edit = diesel::sql_query("UPDATE billing.entries SET amount = 0").execute(&mut conn);
    assert!(
        edit.expect_err("immutable")
            .to_string()
            .contains("immutable")
    );
    drop(conn);
    env.cleanup().await;
}
