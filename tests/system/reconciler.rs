//! Ordering's reconciler against a real stack: a host that goes silent stops
//! billing at its last good heartbeat and keeps its GPUs held, and a new run
//! starts when it is heard from again; a run metering lost is re-opened with
//! its original start; an interval left open after a stop is closed at the
//! instance's recorded stop.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use diesel::RunQueryDsl;
use gpumarket::client::Client;
use gpumarket::dev::Parts;
use serde_json::json;

use crate::harness::{self, TestEnv, eventually, instance_status, rental, wait_running};

const LIMIT: Duration = Duration::from_secs(60);

/// A stack whose reconciler looks every 200 ms and repairs what is 1 s old,
/// with a 2 s heartbeat grace.
async fn env() -> TestEnv {
    let mut env = TestEnv::new().await;
    env.settings(|s: &mut ordering::OrderingSettings| {
        s.reconcile_interval = std::time::Duration::from_millis(200);
        s.reconcile_settle_seconds = 1;
    });
    env.settings(|s: &mut catalog::CatalogSettings| s.heartbeat_grace_seconds = 2);
    env
}

/// Keeps every machine online for the test's duration (no agent runs here).
fn heard_from_for_an_hour(env: &TestEnv) {
    env.exec("UPDATE catalog.machines SET last_heartbeat_at = now() + interval '1 hour'");
}

#[derive(Debug, diesel::QueryableByName)]
struct Interval {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    run_seq: i32,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    started_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    ended_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    seconds: Option<i64>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    recorded_at: Option<DateTime<Utc>>,
}

fn intervals(env: &TestEnv, id: &str) -> Vec<Interval> {
    diesel::sql_query(format!(
        "SELECT run_seq, started_at, ended_at, seconds, recorded_at FROM metering.intervals
         WHERE instance_id = '{id}' AND meter = 'gpu' ORDER BY run_seq"
    ))
    .load(&mut env.conn())
    .expect("intervals")
}

#[derive(Debug, diesel::QueryableByName)]
struct Row {
    #[diesel(sql_type = diesel::sql_types::Text)]
    state: String,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    run_seq: i32,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    running_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    stopped_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    status_reason: Option<String>,
}

fn instance(env: &TestEnv, id: &str) -> Row {
    diesel::sql_query(format!(
        "SELECT state, run_seq, running_at, stopped_at, status_reason FROM ordering.instances WHERE id = '{id}'"
    ))
    .get_result(&mut env.conn())
    .expect("instance")
}

fn billed(t0: DateTime<Utc>, t1: DateTime<Utc>) -> i64 {
    contracts::money::billed_seconds(t0.timestamp_micros(), t1.timestamp_micros())
}

async fn ordered_and_running(renter: &Client, offer: &str, key: &str) -> (String, DateTime<Utc>) {
    let placed = harness::order(renter, offer, 1, key).await.expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();
    let running = wait_running(renter, &id, LIMIT).await;
    let t0 = running["runningAt"]
        .as_str()
        .expect("runningAt")
        .parse()
        .expect("instant");
    (id, t0)
}

/// Metering's open interval for run 1 of `id`, once the running event arrived.
async fn open_interval(env: &TestEnv, id: &str) -> Interval {
    eventually("the run's interval opened", LIMIT, || async {
        intervals(env, id)
            .into_iter()
            .find(|i| i.run_seq == 1 && i.started_at.is_some())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciler_bills_a_lost_host_until_its_last_heartbeat_and_starts_a_new_run_when_it_is_back()
 {
    let r = rental(env().await, Parts::ALL, "RTX 4090", 2, "0.40", "100").await;
    heard_from_for_an_hour(&r.env);
    let (id, t0) = ordered_and_running(&r.renter, &r.offer, "lost-1").await;
    assert_eq!(open_interval(&r.env, &id).await.started_at, Some(t0));
    // A second ordering replica, with its own reconciler, competes for the
    // same instances: each transition must still happen once.
    let replica = second_ordering_replica(&r.stack);

    // The host goes silent: its last good heartbeat is 1.5 s into the run.
    let last = t0 + TimeDelta::milliseconds(1500);
    r.env.exec(&format!(
        "UPDATE catalog.machines SET last_heartbeat_at = '{}' WHERE id = '{}'",
        contracts::time::format(last),
        r.offer
    ));
    let lost = eventually("instance host_lost", LIMIT, || async {
        let i = instance_status(&r.renter, &id).await;
        (i["status"] == "host_lost").then_some(i)
    })
    .await;
    assert!(
        lost["statusReason"]
            .as_str()
            .is_some_and(|s| s.contains("host lost")),
        "{lost}"
    );
    let row = instance(&r.env, &id);
    assert_eq!((row.run_seq, row.stopped_at), (1, Some(last)));
    // Billing stops exactly at the last good heartbeat.
    let closed = eventually("run 1 recorded", LIMIT, || async {
        intervals(&r.env, &id)
            .into_iter()
            .find(|i| i.run_seq == 1 && i.recorded_at.is_some())
    })
    .await;
    assert_eq!((closed.started_at, closed.ended_at), (Some(t0), Some(last)));
    assert_eq!(closed.seconds, Some(billed(t0, last)));
    assert_eq!(closed.seconds, Some(1));
    // The renter's instance is still on that machine: GPUs and quota stay held.
    assert_eq!(
        r.env.count(&format!(
            "SELECT count(*) AS n FROM catalog.allocations WHERE machine_id = '{}' AND released_at IS NULL",
            r.offer
        )),
        1
    );
    assert_eq!(
        r.env.count(&format!(
            "SELECT count(*) AS n FROM quota.reservations WHERE tenant_id = '{}' AND released_at IS NULL",
            r.tenant
        )),
        1
    );
    assert_eq!(
        r.env.count(&format!(
            "SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines WHERE id = '{}'",
            r.offer
        )),
        1
    );
    // The transition is in the instance's history, once, and so is its stop.
    assert_eq!(
        r.env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instance_events
             WHERE instance_id = '{id}' AND kind = 'state_changed' AND to_state = 'host_lost'"
        )),
        1
    );
    assert_eq!(
        r.env.count(&format!(
            "SELECT count(*) AS n FROM ordering.outbox
             WHERE routing_key = 'ordering.instance.stopped'
               AND body->'payload'->>'instance_id' = '{id}'
               AND body->'payload'->>'reason' = 'host lost'"
        )),
        1
    );

    // Heard from again: a new run, the outage unbilled.
    heard_from_for_an_hour(&r.env);
    let back = wait_running(&r.renter, &id, LIMIT).await;
    let t2: DateTime<Utc> = back["runningAt"]
        .as_str()
        .expect("runningAt")
        .parse()
        .expect("instant");
    assert!(t2 > last + TimeDelta::seconds(2), "{t2} vs {last}");
    let row = instance(&r.env, &id);
    assert_eq!(
        (row.state.as_str(), row.run_seq, row.running_at),
        ("running", 2, Some(t2))
    );
    assert_eq!(row.stopped_at, None);
    assert!(
        row.status_reason
            .as_deref()
            .is_some_and(|s| s.contains("host back")),
        "{row:?}"
    );
    let second = eventually("run 2 opened", LIMIT, || async {
        intervals(&r.env, &id)
            .into_iter()
            .find(|i| i.run_seq == 2 && i.started_at.is_some())
    })
    .await;
    assert_eq!((second.started_at, second.ended_at), (Some(t2), None));
    assert_eq!(
        r.env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instance_transitions
             WHERE instance_id = '{id}' AND from_state = 'host_lost' AND to_state = 'running'"
        )),
        1
    );
    // Whatever was sent for run 2 carries its one start.
    assert_eq!(
        r.env.count(&format!(
            "SELECT count(DISTINCT body->'payload'->>'running_at') AS n FROM ordering.outbox
             WHERE routing_key = 'ordering.instance.running'
               AND body->'payload'->>'instance_id' = '{id}'
               AND (body->'payload'->>'run_seq')::int = 2"
        )),
        1
    );
    // The outage ends with the renter's downtime credit, charged to the
    // host: the heartbeat gap [last heartbeat, host back) at the rental's
    // hourly rate (multiple 1 by default), posted once.
    let downtime = billed(last, t2);
    let credit = contracts::money::rate(downtime, "0.40".parse().expect("rate"));
    eventually("downtime credited", LIMIT, || async {
        let n = r.env.count(&format!(
            "SELECT count(*) AS n FROM billing.transactions
             WHERE kind = 'downtime_credit' AND instance_id = '{id}'"
        ));
        (n == 1).then_some(())
    })
    .await;
    #[derive(diesel::QueryableByName)]
    struct Leg {
        #[diesel(sql_type = diesel::sql_types::Text)]
        kind: String,
        #[diesel(sql_type = diesel::sql_types::Numeric)]
        amount: rust_decimal::Decimal,
    }
    let legs: Vec<Leg> = diesel::sql_query(format!(
        "SELECT a.kind, e.amount FROM billing.entries e
         JOIN billing.accounts a ON a.id = e.account_id
         JOIN billing.transactions t ON t.id = e.transaction_id
         WHERE t.kind = 'downtime_credit' AND t.instance_id = '{id}' ORDER BY a.kind"
    ))
    .load(&mut r.env.conn())
    .expect("legs");
    let legs: Vec<(String, rust_decimal::Decimal)> =
        legs.into_iter().map(|l| (l.kind, l.amount)).collect();
    assert_eq!(
        legs,
        vec![
            ("host_earnings".to_owned(), -credit),
            ("renter_balance".to_owned(), credit)
        ]
    );
    assert!(credit > rust_decimal::Decimal::ZERO);

    // Run 1 is untouched by the new run.
    let first = intervals(&r.env, &id)
        .into_iter()
        .find(|i| i.run_seq == 1)
        .expect("run 1");
    assert_eq!((first.ended_at, first.seconds), (Some(last), Some(1)));

    // Run 2 ends normally and is billed on its own.
    let stopped = r
        .renter
        .run(
            "mutation($id: ID!) { stopInstance(id: $id) { status stoppedAt } }",
            json!({ "id": id }),
        )
        .await
        .expect("stop");
    assert_eq!(stopped["stopInstance"]["status"], "stopped");
    replica.stop(false).await;
    r.stack.stop().await;
    r.env.cleanup().await;
}

/// Another ordering service on the stack's database and broker (its
/// background tasks, the reconciler among them, end with the test).
fn second_ordering_replica(stack: &gpumarket::dev::Stack) -> actix_web::dev::ServerHandle {
    let mut config = (*stack.config).clone();
    config.ports.set("ordering", 0);
    let db = platform::Db::connect(&config.database_url, config.db_pool_size).expect("db");
    let (server, _) = ordering::build(std::sync::Arc::new(config), db).expect("ordering replica");
    let handle = server.handle();
    tokio::spawn(server);
    handle
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciler_reopens_a_running_instance_whose_interval_metering_lost() {
    let r = rental(env().await, Parts::ALL, "RTX 4090", 2, "0.40", "100").await;
    heard_from_for_an_hour(&r.env);
    let (id, t0) = ordered_and_running(&r.renter, &r.offer, "unbilled-1").await;
    open_interval(&r.env, &id).await;

    r.env.exec(&format!(
        "DELETE FROM metering.intervals WHERE instance_id = '{id}'"
    ));
    let reopened = eventually("interval re-opened", LIMIT, || async {
        intervals(&r.env, &id)
            .into_iter()
            .find(|i| i.run_seq == 1 && i.started_at.is_some())
    })
    .await;
    // The original start, not the repair's.
    assert_eq!((reopened.started_at, reopened.ended_at), (Some(t0), None));
    assert_eq!(instance(&r.env, &id).state, "running");

    // And the run is billed as if nothing had happened.
    let stopped = r
        .renter
        .run(
            "mutation($id: ID!) { stopInstance(id: $id) { stoppedAt } }",
            json!({ "id": id }),
        )
        .await
        .expect("stop");
    let t1: DateTime<Utc> = stopped["stopInstance"]["stoppedAt"]
        .as_str()
        .expect("stoppedAt")
        .parse()
        .expect("instant");
    let recorded = eventually("run recorded", LIMIT, || async {
        intervals(&r.env, &id)
            .into_iter()
            .find(|i| i.run_seq == 1 && i.recorded_at.is_some())
    })
    .await;
    assert_eq!(
        (recorded.started_at, recorded.ended_at, recorded.seconds),
        (Some(t0), Some(t1), Some(billed(t0, t1)))
    );
    r.stack.stop().await;
    r.env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciler_closes_an_interval_left_open_after_a_stop() {
    let r = rental(env().await, Parts::ALL, "RTX 4090", 2, "0.40", "100").await;
    heard_from_for_an_hour(&r.env);
    let (id, t0) = ordered_and_running(&r.renter, &r.offer, "unstopped-1").await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let stopped = r
        .renter
        .run(
            "mutation($id: ID!) { stopInstance(id: $id) { status stoppedAt } }",
            json!({ "id": id }),
        )
        .await
        .expect("stop");
    assert_eq!(stopped["stopInstance"]["status"], "stopped");
    let t1: DateTime<Utc> = stopped["stopInstance"]["stoppedAt"]
        .as_str()
        .expect("stoppedAt")
        .parse()
        .expect("instant");
    eventually("run recorded", LIMIT, || async {
        intervals(&r.env, &id)
            .into_iter()
            .find(|i| i.run_seq == 1 && i.recorded_at.is_some())
    })
    .await;

    // Metering believes the run is still going.
    r.env.exec(&format!(
        "UPDATE metering.intervals SET ended_at = NULL, recorded_at = NULL, seconds = NULL
         WHERE instance_id = '{id}'"
    ));
    let closed = eventually("interval closed again", LIMIT, || async {
        intervals(&r.env, &id)
            .into_iter()
            .find(|i| i.run_seq == 1 && i.recorded_at.is_some())
    })
    .await;
    assert_eq!(
        (closed.started_at, closed.ended_at, closed.seconds),
        (Some(t0), Some(t1), Some(billed(t0, t1)))
    );
    assert!(closed.seconds >= Some(1));
    let status = instance_status(&r.renter, &id).await;
    assert_eq!(status["status"], "stopped");
    r.stack.stop().await;
    r.env.cleanup().await;
}

/// A renter may give up on a lost host: destroy gives the quota back at once,
/// while the GPUs stay out of the market until the machine validates clean
/// (here it never does, so they stay held and the instance deprovisioning).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroying_an_instance_on_a_lost_host_frees_the_quota_not_the_unvalidated_gpus() {
    let mut env = env().await;
    env.settings(|s: &mut provisioner::ProvisionerSettings| {
        s.sim_step_failures = "validate_clean=100".into()
    });
    let r = rental(env, Parts::ALL, "RTX 4090", 2, "0.40", "100").await;
    heard_from_for_an_hour(&r.env);
    let (id, _) = ordered_and_running(&r.renter, &r.offer, "lost-destroy").await;
    r.env.exec(&format!(
        "UPDATE catalog.machines SET last_heartbeat_at = now() - interval '1 minute' WHERE id = '{}'",
        r.offer
    ));
    let lost = eventually("instance host_lost", LIMIT, || async {
        let i = instance_status(&r.renter, &id).await;
        (i["status"] == "host_lost").then_some(i)
    })
    .await;
    assert_eq!(lost["allowedActions"], json!(["destroy"]));
    // The renter waits a little for the host before giving up on it.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let destroyed = r
        .renter
        .run(
            "mutation($id: ID!) { destroyInstance(id: $id) { status } }",
            json!({ "id": id }),
        )
        .await
        .expect("destroyInstance");
    assert_eq!(destroyed["destroyInstance"]["status"], "deprovisioning");
    let live_quota = || {
        r.env
            .count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL")
    };
    assert_eq!(live_quota(), 0, "the renter's quota is back at once");
    // Giving up on the host ends the outage: the downtime credit is posted.
    eventually("downtime credited at the destroy", LIMIT, || async {
        (r.env.count(&format!(
            "SELECT count(*) AS n FROM billing.transactions
             WHERE kind = 'downtime_credit' AND instance_id = '{id}'
               AND description LIKE '%destroyed%'"
        )) == 1)
            .then_some(())
    })
    .await;
    // The validation keeps failing: the instance stays deprovisioning and the
    // machine's GPUs stay allocated.
    eventually("deprovisioning failed", LIMIT, || async {
        (r.env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.jobs WHERE instance_id = '{id}' \
               AND kind = 'deprovision' AND status = 'failed'"
        )) == 1)
            .then_some(())
    })
    .await;
    assert_eq!(instance(&r.env, &id).state, "deprovisioning");
    assert_eq!(
        r.env.count(&format!(
            "SELECT count(*) AS n FROM catalog.allocations WHERE machine_id = '{}' AND released_at IS NULL",
            r.offer
        )),
        1
    );
    // Nothing more was billed after the loss.
    assert_eq!(intervals(&r.env, &id).len(), 1);

    r.stack.stop().await;
    r.env.cleanup().await;
}
