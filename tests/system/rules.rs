//! Lifecycle rules enforced by the server: maximum duration, idle GPUs (from
//! a real simulated agent's heartbeats) and auto-destroy after a stop, each
//! announced by a `rule_warning` event before it acts.

use std::time::Duration;

use gpumarket::client::Client;
use gpumarket::dev::Parts;
use serde_json::{Value, json};

use crate::harness::{self, TestEnv, eventually, grant, instance_status, rental, wait_running};

const LIMIT: Duration = Duration::from_secs(60);

/// A stack whose rules look every 200 ms and warn one second ahead.
async fn env() -> TestEnv {
    let mut env = TestEnv::new().await;
    env.settings(|s: &mut ordering::OrderingSettings| {
        s.rules_tick = std::time::Duration::from_millis(200);
        s.rules_warning_lead = chrono::TimeDelta::seconds(1);
    });
    env
}

async fn order_with_rules(renter: &Client, offer: &str, key: &str, rules: Value) -> Value {
    renter
        .run(
            "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id status } }",
            json!({ "input": { "offerId": offer, "gpuCount": 1, "idempotencyKey": key,
                               "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket",
                               "rules": rules } }),
        )
        .await
        .expect("createOrder")["createOrder"]
        .clone()
}

#[derive(Debug, diesel::QueryableByName)]
struct Event {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    seq: i32,
    #[diesel(sql_type = diesel::sql_types::Text)]
    kind: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    to_state: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    reason: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    rule: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    due_at: Option<chrono::DateTime<chrono::Utc>>,
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    at: chrono::DateTime<chrono::Utc>,
}

fn events(env: &TestEnv, id: &str) -> Vec<Event> {
    use diesel::RunQueryDsl;
    diesel::sql_query(format!(
        "SELECT seq, kind, to_state, reason, detail->>'rule' AS rule,
                (detail->>'due_at')::timestamptz AS due_at, at
         FROM ordering.instance_events WHERE instance_id = '{id}' ORDER BY seq"
    ))
    .load(&mut env.conn())
    .expect("events")
}

/// The rule was warned about, then enforced at or after its due instant,
/// and only then did the instance move to `state`; returns the due instant
/// and the reason of that move.
fn assert_announced(
    env: &TestEnv,
    id: &str,
    rule: &str,
    state: &str,
) -> (chrono::DateTime<chrono::Utc>, String) {
    let all = events(env, id);
    let find = |kind: &str| {
        all.iter()
            .rfind(|e| e.kind == kind && e.rule.as_deref() == Some(rule))
            .unwrap_or_else(|| panic!("no {kind} for {rule}: {all:#?}"))
    };
    let warning = find("rule_warning");
    let enforced = find("rule_enforced");
    let moved = all
        .iter()
        .find(|e| {
            e.kind == "state_changed"
                && e.to_state.as_deref() == Some(state)
                && e.seq > enforced.seq
        })
        .unwrap_or_else(|| panic!("no move to {state} after the rule acted: {all:#?}"));
    assert!(
        warning.seq < enforced.seq && enforced.seq < moved.seq,
        "{all:#?}"
    );
    let due = enforced.due_at.expect("due");
    assert_eq!(warning.due_at, Some(due), "{all:#?}");
    assert!(warning.at < enforced.at, "{all:#?}");
    assert!(enforced.at >= due, "acted before it was due: {all:#?}");
    (due, moved.reason.clone().unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_longer_than_its_maximum_duration_is_stopped_after_a_warning() {
    let r = rental(env().await, Parts::ALL, "RTX 4090", 2, "0.40", "100").await;
    let placed = order_with_rules(
        &r.renter,
        &r.offer,
        "max-1",
        json!({ "maxDurationSeconds": 2 }),
    )
    .await;
    let id = placed["id"].as_str().expect("id").to_owned();
    let running = wait_running(&r.renter, &id, LIMIT).await;
    let rules = r
        .renter
        .run(
            "query($id: ID!) { instanceRules(instanceId: $id) { maxDurationSeconds idleStopAfterSeconds } }",
            json!({ "id": id }),
        )
        .await
        .expect("instanceRules");
    assert_eq!(rules["instanceRules"]["maxDurationSeconds"], 2);
    assert!(rules["instanceRules"]["idleStopAfterSeconds"].is_null());

    let stopped = eventually("stopped by the rule", LIMIT, || async {
        let i = instance_status(&r.renter, &id).await;
        (i["status"] == "stopped").then_some(i)
    })
    .await;
    let (due, reason) = assert_announced(&r.env, &id, "max_duration", "stopping");
    assert!(reason.contains("maximum duration"), "{reason}");
    // The status says why it stopped.
    assert_eq!(
        stopped["statusReason"],
        "stopped by rule: maximum duration reached"
    );
    let t0: chrono::DateTime<chrono::Utc> = running["runningAt"].as_str().unwrap().parse().unwrap();
    let t1: chrono::DateTime<chrono::Utc> = stopped["stoppedAt"].as_str().unwrap().parse().unwrap();
    assert_eq!(due, t0 + chrono::TimeDelta::seconds(2));
    assert!(
        t1 >= due,
        "billing stopped at {t1}, before the rule was due at {due}"
    );
    // Acting once: one stop, whatever the rounds that saw it due.
    assert_eq!(
        r.env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instance_events WHERE instance_id = '{id}' AND kind = 'rule_enforced'"
        )),
        1
    );
    r.stack.stop().await;
    r.env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_instance_is_destroyed_after_its_rule_and_bad_rules_are_refused() {
    let r = rental(env().await, Parts::ALL, "RTX 4090", 2, "0.40", "100").await;

    // Refused before the order takes anything.
    let err = r
        .renter
        .run(
            "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id } }",
            json!({ "input": { "offerId": r.offer, "gpuCount": 1, "idempotencyKey": "bad-rules",
                               "rules": { "idleStopAfterSeconds": 5 } } }),
        )
        .await
        .expect_err("half an idle rule");
    assert_eq!(err.code, "VALIDATION");
    assert!(
        err.message.contains("idleThresholdPercent"),
        "{}",
        err.message
    );
    assert_eq!(
        r.env.count("SELECT count(*) AS n FROM ordering.instances"),
        0
    );

    let placed = harness::order(&r.renter, &r.offer, 1, "destroy-1")
        .await
        .expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();
    wait_running(&r.renter, &id, LIMIT).await;

    let set = |rules: Value| {
        let renter = r.renter.clone();
        let id = id.clone();
        async move {
            renter
                .run(
                    "mutation($id: ID!, $rules: InstanceRulesInput!) { setInstanceRules(instanceId: $id, rules: $rules) { autoDestroyAfterStoppedSeconds } }",
                    json!({ "id": id, "rules": rules }),
                )
                .await
        }
    };
    let err = set(json!({ "autoDestroyAfterStoppedSeconds": 0 }))
        .await
        .expect_err("zero");
    assert_eq!(err.code, "VALIDATION");
    // Another tenant cannot see, let alone change, the rules.
    let (stranger, _) = harness::sign_up(&Client::new(&r.stack.gateway_url), &["RENTER"]).await;
    let err = stranger
        .run(
            "mutation($id: ID!) { setInstanceRules(instanceId: $id, rules: { autoDestroyAfterStoppedSeconds: 1 }) { autoDestroyAfterStoppedSeconds } }",
            json!({ "id": id }),
        )
        .await
        .expect_err("stranger");
    assert_eq!(err.code, "NOT_FOUND");

    let applied = set(json!({ "autoDestroyAfterStoppedSeconds": 1 }))
        .await
        .expect("rules");
    assert_eq!(
        applied["setInstanceRules"]["autoDestroyAfterStoppedSeconds"],
        1
    );
    // A running instance is not destroyed by a rule about stopped ones.
    r.renter
        .run(
            "mutation($id: ID!) { stopInstance(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await
        .expect("stop");
    let destroyed = eventually("destroyed by the rule", LIMIT, || async {
        let i = instance_status(&r.renter, &id).await;
        (i["status"] == "destroyed").then_some(i)
    })
    .await;
    assert_eq!(destroyed["status"], "destroyed");
    let (due, _) = assert_announced(&r.env, &id, "auto_destroy", "deprovisioning");
    let stopped_at = events(&r.env, &id)
        .into_iter()
        .find(|e| e.to_state.as_deref() == Some("stopped"))
        .expect("stopped event")
        .at;
    assert_eq!(due, stopped_at + chrono::TimeDelta::seconds(1));
    // Nothing is left held: capacity and quota are back.
    assert_eq!(
        r.env
            .count("SELECT count(*) AS n FROM catalog.allocations WHERE released_at IS NULL"),
        0
    );
    // A destroyed instance's rules no longer change.
    let err = set(json!({ "maxDurationSeconds": 5 }))
        .await
        .expect_err("destroyed");
    assert_eq!(err.code, "CONFLICT");
    r.stack.stop().await;
    r.env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpus_idle_for_the_window_stop_the_instance() {
    let mut env = env().await;
    // The simulated agent reports every GPU at 0 % every second.
    env.settings(|s: &mut gpumarket::dev::AgentSettings| {
        s.sim_gpu_utilization_percent = Some(0);
        s.heartbeat_seconds = 1;
    });
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = harness::sign_up(&api, &["HOST"]).await;
    let offer = harness::machine_with_agent(&stack, &host, "RTX 4090", 2, 24, "0.40").await;
    let (renter, tenant) = harness::sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100").await;

    let placed = order_with_rules(
        &renter,
        &offer,
        "idle-1",
        json!({ "idleStopAfterSeconds": 2, "idleThresholdPercent": 10 }),
    )
    .await;
    let id = placed["id"].as_str().expect("id").to_owned();
    let running = wait_running(&renter, &id, LIMIT).await;
    let stopped = eventually("stopped as idle", LIMIT, || async {
        let i = instance_status(&renter, &id).await;
        (i["status"] == "stopped").then_some(i)
    })
    .await;
    assert_eq!(stopped["status"], "stopped");
    assert_eq!(stopped["statusReason"], "stopped by rule: GPUs idle");
    let (due, reason) = assert_announced(&env, &id, "idle", "stopping");
    assert!(reason.contains("idle"), "{reason}");
    let t0: chrono::DateTime<chrono::Utc> = running["runningAt"].as_str().unwrap().parse().unwrap();
    assert!(
        due >= t0 + chrono::TimeDelta::seconds(2),
        "idle counted before the run: {due} vs {t0}"
    );
    // The verdict rests on heartbeats that cover the window.
    assert!(
        env.count(&format!(
            "SELECT count(*) AS n FROM catalog.gpu_utilisation WHERE machine_id = '{offer}'
             AND at >= '{t0}' AND max_percent = 0"
        )) >= 2
    );
    stack.stop().await;
    env.cleanup().await;
}
