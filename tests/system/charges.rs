//! `Instance.costSoFar`, `billedSeconds` and `charges` come from the ledger
//! (billing's per-instance charges), so a client never recomputes a bill;
//! `usage` intervals carry the run they belong to.

use std::time::Duration;

use chrono::{DateTime, Utc};
use gpumarket::client::Client;
use gpumarket::dev::Parts;
use rust_decimal::Decimal;
use serde_json::{Value, json};

use crate::harness::*;

fn instant(v: &Value) -> DateTime<Utc> {
    v.as_str().expect("instant").parse().expect("instant")
}

async fn act(renter: &Client, action: &str, id: &str) -> Value {
    renter
        .run(
            &format!(
                "mutation($id: ID!) {{ {action}(id: $id) {{ id status runningAt stoppedAt }} }}"
            ),
            json!({ "id": id }),
        )
        .await
        .expect(action)[action]
        .clone()
}

const CHARGES: &str = "costSoFar billedSeconds charges { currency total gpuSeconds gpuCost \
     storageSeconds storageGibSeconds storageCost bandwidthUpBytes bandwidthUpCost \
     bandwidthDownBytes bandwidthDownCost }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_so_far_and_billed_seconds_match_the_ledger_and_usage_names_its_run() {
    let mut env = TestEnv::new().await;
    // One posting per run, at its stop: the ledger holds exactly the runs.
    env.settlement_interval_ms(3_600_000);
    let Rental {
        env,
        stack,
        renter,
        offer,
        ..
    } = rental(env, Parts::ALL, "RTX 4090", 2, "0.42", "100").await;

    let id = running_instance(&renter, &offer, 1, "charged").await;
    // Nothing settled yet: zeros, not an error.
    let fresh = renter
        .run(
            &format!("query($id: ID!) {{ instance(id: $id) {{ {CHARGES} }} }}"),
            json!({ "id": id }),
        )
        .await
        .expect("instance")["instance"]
        .clone();
    assert_eq!(dec(&fresh["charges"]["gpuCost"]), Decimal::ZERO);

    // Two runs.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let run1 = act(&renter, "stopInstance", &id).await;
    act(&renter, "startInstance", &id).await;
    let run2 = wait_running(&renter, &id, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let run2_stop = act(&renter, "stopInstance", &id).await;
    let floor = |t0: &Value, t1: &Value| {
        (instant(t1) - instant(t0))
            .num_microseconds()
            .expect("micros")
            .div_euclid(1_000_000)
    };
    let expected_seconds = floor(&run1["runningAt"], &run1["stoppedAt"])
        + floor(&run2["runningAt"], &run2_stop["stoppedAt"]);

    let gpu_postings = format!(
        "SELECT count(*) AS n FROM billing.usage_details d \
         JOIN billing.transactions t ON t.id = d.transaction_id \
         WHERE t.instance_id = '{id}' AND d.meter = 'gpu'"
    );
    eventually("both runs posted", Duration::from_secs(30), || async {
        (env.count(&gpu_postings) == 2).then_some(())
    })
    .await;
    let ledger = sql_decimal(
        &env,
        &format!(
            "SELECT coalesce(-sum(e.amount), 0) AS d FROM billing.transactions t \
             JOIN billing.entries e ON e.transaction_id = t.id \
             JOIN billing.accounts a ON a.id = e.account_id \
             WHERE t.kind = 'usage' AND t.instance_id = '{id}' AND a.kind = 'renter_balance'"
        ),
    );
    assert!(ledger > Decimal::ZERO);

    let data = renter
        .run(
            &format!(
                "query($id: ID!) {{ instance(id: $id) {{ {CHARGES} }} \
                 instances {{ id {CHARGES} }} \
                 usage(instanceId: $id) {{ meter runSeq billedSeconds }} }}"
            ),
            json!({ "id": id }),
        )
        .await
        .expect("charges");
    let one = &data["instance"];
    assert_eq!(dec(&one["costSoFar"]), ledger, "{one}");
    assert_eq!(
        dec(&one["costSoFar"]).round_dp(2),
        ledger.round_dp(2),
        "to the cent"
    );
    assert_eq!(one["billedSeconds"], json!(expected_seconds), "{one}");
    let charges = &one["charges"];
    assert_eq!(charges["currency"], "USD");
    assert_eq!(charges["gpuSeconds"], json!(expected_seconds));
    assert_eq!(dec(&charges["total"]), ledger);
    assert_eq!(
        dec(&charges["gpuCost"])
            + dec(&charges["storageCost"])
            + dec(&charges["bandwidthUpCost"])
            + dec(&charges["bandwidthDownCost"]),
        ledger
    );
    // The list answers the same, from one batched call.
    let listed = data["instances"]
        .as_array()
        .expect("instances")
        .iter()
        .find(|i| i["id"] == json!(id))
        .expect("listed");
    assert_eq!(listed["costSoFar"], one["costSoFar"]);
    assert_eq!(listed["billedSeconds"], one["billedSeconds"]);

    // Usage intervals name their run.
    let mut gpu_runs: Vec<(i64, i64)> = data["usage"]
        .as_array()
        .expect("usage")
        .iter()
        .filter(|u| u["meter"] == "gpu")
        .map(|u| {
            (
                u["runSeq"].as_i64().expect("runSeq"),
                u["billedSeconds"].as_i64().expect("seconds"),
            )
        })
        .collect();
    gpu_runs.sort_unstable();
    assert_eq!(
        gpu_runs,
        vec![
            (1, floor(&run1["runningAt"], &run1["stoppedAt"])),
            (2, floor(&run2["runningAt"], &run2_stop["stoppedAt"]))
        ]
    );

    // Another tenant learns nothing about it.
    let api = Client::new(&stack.gateway_url);
    let (other, _) = sign_up(&api, &["RENTER"]).await;
    let refused = other
        .run(
            "query($id: ID!) { instance(id: $id) { costSoFar } }",
            json!({ "id": id }),
        )
        .await
        .expect_err("another tenant");
    assert_eq!(refused.code, "NOT_FOUND");

    stack.stop().await;
    env.cleanup().await;
}
