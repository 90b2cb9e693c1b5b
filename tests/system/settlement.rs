//! Settlement of running rentals and the prepaid floor: a running instance
//! is charged as it runs, in segments that add up to exactly what its whole
//! run costs; a renter whose balance runs out is stopped within a
//! settlement interval, and billing ends at that stop.

use std::time::Duration;

use chrono::{DateTime, Utc};
use contracts::money;
use gpumarket::dev::Parts;
use rust_decimal::Decimal;
use serde_json::{Value, json};

use crate::harness::*;

fn dec(v: &Value) -> Decimal {
    v.as_str()
        .expect("decimal string")
        .parse()
        .expect("decimal")
}

fn instant(v: &Value) -> DateTime<Utc> {
    v.as_str().expect("instant").parse().expect("instant")
}

/// The renter's ledger: (usage postings, sum of the renter's usage legs).
fn charged(env: &TestEnv, tenant: &str) -> (i64, Decimal) {
    #[derive(diesel::QueryableByName)]
    struct Sum {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
        #[diesel(sql_type = diesel::sql_types::Numeric)]
        total: Decimal,
    }
    use diesel::RunQueryDsl;
    let s: Sum = diesel::sql_query(format!(
        "SELECT count(DISTINCT t.id) AS n, coalesce(-sum(e.amount), 0) AS total \
         FROM billing.transactions t JOIN billing.entries e ON e.transaction_id = t.id \
         JOIN billing.accounts a ON a.id = e.account_id \
         WHERE t.kind = 'usage' AND a.kind = 'renter_balance' AND a.tenant_id = '{tenant}'"
    ))
    .get_result(&mut env.conn())
    .expect("ledger");
    (s.n, s.total)
}

async fn balance(renter: &gpumarket::client::Client) -> Decimal {
    let b = renter
        .run("{ balance { amount } }", json!({}))
        .await
        .expect("balance");
    dec(&b["balance"]["amount"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_instance_is_charged_as_it_runs_and_the_segments_add_up_exactly() {
    let mut env = TestEnv::new().await;
    env.settlement_interval_ms(300);
    let Rental {
        env,
        stack,
        renter,
        tenant,
        offer,
        ..
    } = rental(env, Parts::ALL, "RTX 4090", 2, "0.45", "100").await;
    let id = running_instance(&renter, &offer, 2, "settled").await;

    // Charged while running: at least two settlements before any stop.
    eventually(
        "settled twice while running",
        Duration::from_secs(30),
        || async { (charged(&env, &tenant).0 >= 2).then_some(()) },
    )
    .await;
    assert!(balance(&renter).await < Decimal::from(100));
    // The runway: what the balance lasts at the running rental's rate.
    let runway = renter
        .run(
            "{ runway { balance burnRatePerHour runningInstances runwaySeconds low warnBelowSeconds } }",
            json!({}),
        )
        .await
        .expect("runway")["runway"]
        .clone();
    assert_eq!(
        dec(&runway["burnRatePerHour"]),
        "0.9".parse::<Decimal>().expect("rate")
    );
    assert_eq!(runway["runningInstances"], 1);
    let expected = (dec(&runway["balance"]) * Decimal::from(4000)).floor();
    assert_eq!(
        Decimal::from(runway["runwaySeconds"].as_i64().expect("seconds")),
        expected
    );
    assert_eq!(runway["low"], false, "{runway}");

    let stopped = renter
        .run(
            "mutation($id: ID!) { stopInstance(id: $id) { runningAt stoppedAt } }",
            json!({ "id": id }),
        )
        .await
        .expect("stop")["stopInstance"]
        .clone();
    let (t0, t1) = (
        instant(&stopped["runningAt"]),
        instant(&stopped["stoppedAt"]),
    );
    let seconds = money::billed_seconds(t0.timestamp_micros(), t1.timestamp_micros());
    let whole = money::rate(seconds, "0.90".parse().expect("rate"));

    // Once the interval is recorded, the segments (and any correction) cost
    // exactly the whole run, and every posting balances.
    let (postings, total) = eventually("run settled in full", Duration::from_secs(30), || async {
        let recorded = env.count(&format!(
            "SELECT count(*) AS n FROM metering.intervals WHERE instance_id = '{id}' AND recorded_at IS NOT NULL"
        ));
        let c = charged(&env, &tenant);
        (recorded == 1 && c.1 == whole).then_some(c)
    })
    .await;
    assert!(postings >= 2, "{postings} postings");
    assert_eq!(total, whole);
    assert_eq!(balance(&renter).await, Decimal::from(100) - whole);
    // Nothing runs: nothing burns, and no runway to count down.
    let runway = renter
        .run(
            "{ runway { burnRatePerHour runwaySeconds low } }",
            json!({}),
        )
        .await
        .expect("runway")["runway"]
        .clone();
    assert_eq!(dec(&runway["burnRatePerHour"]), Decimal::ZERO);
    assert_eq!(runway["runwaySeconds"], Value::Null);
    assert_eq!(runway["low"], false);
    assert_eq!(
        env.count(
            "SELECT count(*) AS n FROM (SELECT 1 FROM billing.entries GROUP BY transaction_id HAVING sum(amount) <> 0) t"
        ),
        0
    );

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renter_whose_balance_runs_out_is_stopped_within_a_settlement_interval() {
    let mut env = TestEnv::new().await;
    env.settlement_interval_ms(500);
    // The order needs a second of runway, no more.
    env.settings(|s: &mut ordering::OrderingSettings| s.min_runway_seconds = 1);
    // 900 USD per GPU-hour: a quarter a second, so 0.75 lasts 3 s.
    let Rental {
        env,
        stack,
        renter,
        tenant,
        offer,
        ..
    } = rental(env, Parts::ALL, "RTX 4090", 1, "900", "0.75").await;
    let id = running_instance(&renter, &offer, 1, "burning").await;
    // Three seconds of credit: far below the hour's warning, once metering
    // has the running event (the burn is what metering has open).
    let runway = eventually("runway reported low", Duration::from_secs(30), || async {
        let r = renter
            .run("{ runway { runwaySeconds low } }", json!({}))
            .await
            .expect("runway")["runway"]
            .clone();
        (r["low"] == true).then_some(r)
    })
    .await;
    assert!(
        runway["runwaySeconds"].as_i64().is_some_and(|s| s <= 3),
        "{runway}"
    );

    let stopped = eventually(
        "stopped for lack of funds",
        Duration::from_secs(30),
        || async {
            let i = instance_status(&renter, &id).await;
            (i["status"] == "stopped").then_some(i)
        },
    )
    .await;
    // The status says why it stopped, not how.
    assert_eq!(
        stopped["statusReason"],
        "stopped: prepaid balance exhausted"
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instance_transitions WHERE instance_id = '{id}' \
               AND to_state = 'stopping' AND reason = 'stopped: prepaid balance exhausted'"
        )),
        1
    );
    let (t0, t1) = (
        instant(&stopped["runningAt"]),
        instant(&stopped["stoppedAt"]),
    );
    let seconds = money::billed_seconds(t0.timestamp_micros(), t1.timestamp_micros());
    let whole = money::rate(seconds, Decimal::from(900));
    eventually("run settled in full", Duration::from_secs(30), || async {
        (charged(&env, &tenant).1 == whole).then_some(())
    })
    .await;
    // Billed to the stop, and the stop came within a settlement interval
    // (plus the event's way to ordering) of the balance running out: the
    // overdraft is a few seconds' burn at most, never the whole run.
    let final_balance = balance(&renter).await;
    assert_eq!(
        final_balance,
        "0.75".parse::<Decimal>().expect("credit") - whole
    );
    assert!(final_balance < Decimal::ZERO, "{final_balance}");
    assert!(
        final_balance > "-0.75".parse::<Decimal>().expect("bound"),
        "overdraft {final_balance} beyond a settlement interval's burn"
    );
    // The GPU and the quota are back.
    assert_eq!(
        env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL"),
        0
    );

    stack.stop().await;
    env.cleanup().await;
}
