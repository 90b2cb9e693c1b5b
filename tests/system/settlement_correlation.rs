//! Periodic settlement belongs to the order: metering keeps the correlation
//! id of the `running` event that opened an interval, and the segments it
//! announces every settlement interval, which no request or message causes,
//! go out under it (docs/operations.md, "Following one order").

use std::time::Duration;

use gpumarket::dev::Parts;
use serde_json::{Value, json};

use crate::harness::*;

/// `metering.usage.recorded` rows of the GPU meter of `instance` in
/// metering's outbox, with `filter` on the envelope (`body`).
fn gpu_segments(env: &TestEnv, instance: &str, filter: &str) -> i64 {
    env.count(&format!(
        "SELECT count(*) AS n FROM metering.outbox \
         WHERE routing_key = 'metering.usage.recorded' \
           AND body->'payload'->>'instance_id' = '{instance}' \
           AND body->'payload'->>'meter' = 'gpu' AND {filter}"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_settlement_segments_carry_the_orders_correlation_id() {
    let mut env = TestEnv::new().await;
    env.settlement_interval_ms(300);
    let stack = env.start(Parts::ALL).await;
    let api = gpumarket::client::Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let offer = listed_machine(&host, "RTX 4090", 1, "0.45").await;
    env.heartbeat_all();
    let (renter, tenant, token) = sign_up_with_token(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100").await;

    let cid = format!("test-settle-{}", uuid::Uuid::now_v7().simple());
    let body: Value = reqwest::Client::new()
        .post(format!("{}/graphql", stack.gateway_url))
        .bearer_auth(&token)
        .header("x-correlation-id", &cid)
        .json(&json!({
            "query": "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id } }",
            "variables": { "input": { "offerId": offer, "gpuCount": 1, "idempotencyKey": "settled",
                "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket" } },
        }))
        .send()
        .await
        .expect("createOrder")
        .json()
        .await
        .expect("body");
    let id = body["data"]["createOrder"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"))
        .to_owned();
    wait_running(&renter, &id, Duration::from_secs(30)).await;

    // Nobody stops it: every segment metering writes meanwhile is a
    // periodic one, announced by its settlement task, and each carries the
    // id the renter's client sent with the order.
    let with_id = format!("body->>'correlation_id' = '{cid}'");
    eventually(
        "two periodic segments under the order's id",
        Duration::from_secs(30),
        || async { (gpu_segments(&env, &id, &with_id) >= 2).then_some(()) },
    )
    .await;
    let status = instance_status(&renter, &id).await;
    assert_eq!(status["status"], "running", "{status}");
    assert_eq!(
        gpu_segments(
            &env,
            &id,
            &format!("body->>'correlation_id' IS DISTINCT FROM '{cid}'")
        ),
        0,
        "every periodic segment carries the order's id"
    );
    // The interval keeps it (what the next tick will use).
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM metering.intervals \
             WHERE instance_id = '{id}' AND meter = 'gpu' AND correlation_id = '{cid}'"
        )),
        1
    );

    stack.stop().await;
    env.cleanup().await;
}
