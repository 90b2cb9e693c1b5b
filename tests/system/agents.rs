//! Host agents end to end: the real agent (simulated GPUs) connects to
//! RabbitMQ with its machine's own credentials, its heartbeats keep the
//! machine online, silence past the grace period opens a gap and costs
//! reliability, an agent cannot report for another machine, and a revoked
//! token stops working at once.

use contracts::ids::MachineId;
use std::time::Duration;

use catalog::agents::AgentAccess;
use catalog::reliability::{self, Settings};
use chrono::{DateTime, Utc};
use diesel::RunQueryDsl;
use diesel::sql_types::{BigInt, Bool, Integer, Nullable, Numeric, Text, Timestamptz};
use gpumarket::client::Client;
use gpumarket::dev::{Parts, Stack};
use host_agent::lapin::options::{BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions};
use host_agent::lapin::types::ShortString;
use host_agent::lapin::{BasicProperties, Connection, ConnectionProperties};
use host_agent::{AgentConfig, Inventory};
use platform::consumer::RawMessage;
use platform::rabbitmq_admin::RabbitAdmin;
use rust_decimal::Decimal;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::harness::*;

/// Short, so that a test can wait it out.
const GRACE_SECONDS: i64 = 2;
const HEARTBEAT: Duration = Duration::from_millis(200);

async fn setup() -> (TestEnv, Stack, platform::Db) {
    let mut env = TestEnv::new().await;
    env.settings(|s: &mut catalog::CatalogSettings| {
        s.heartbeat_grace_seconds = GRACE_SECONDS;
        s.offline_sweep = std::time::Duration::from_millis(200);
    });
    let stack = env
        .start(Parts {
            messaging: false,
            provisioner: false,
            ..Parts::ALL
        })
        .await;
    let db = platform::Db::connect(&env.config.database_url, 2).expect("db");
    (env, stack, db)
}

/// Registers a 2 × RTX 4090 machine, prices and lists it; returns its id and
/// agent token.
async fn machine(host: &Client) -> (uuid::Uuid, String) {
    let data = host
        .run(
            "mutation($input: RegisterMachineInput!) { registerMachine(input: $input) { machine { id } agentToken } }",
            json!({ "input": {
                "name": "agent-rig", "gpuModel": "RTX 4090", "gpuCount": 2, "vramGib": 24,
                "cpuCores": 16, "ramGib": 64, "diskGib": 1000, "country": "US",
                "idempotencyKey": uuid::Uuid::now_v7().to_string(),
            }}),
        )
        .await
        .expect("registerMachine");
    let id: uuid::Uuid = data["registerMachine"]["machine"]["id"]
        .as_str()
        .expect("id")
        .parse()
        .expect("uuid");
    let token = data["registerMachine"]["agentToken"]
        .as_str()
        .expect("agent token")
        .to_owned();
    host.run(
        "mutation($id: ID!, $p: Decimal!) { setMachinePricing(machineId: $id, pricePerGpuHour: $p) { id } }",
        json!({ "id": id, "p": "0.40" }),
    )
    .await
    .expect("setMachinePricing");
    host.run(
        "mutation($id: ID!) { listMachine(machineId: $id) { listed } }",
        json!({ "id": id }),
    )
    .await
    .expect("listMachine");
    (id, token)
}

fn agent_config(stack: &Stack, machine_id: uuid::Uuid, token: &str) -> AgentConfig {
    AgentConfig {
        amqp_url: stack
            .config
            .amqp_url_for_agents()
            .expect("agents' amqp url"),
        machine_id: MachineId(machine_id),
        token: token.to_owned(),
        heartbeat_interval: HEARTBEAT,
        inventory: Inventory::simulated(2, "NVIDIA GeForce RTX 4090", 24, "12.4", "550.54.15"),
        hold_after_step: None,
    }
}

fn start_agent(config: AgentConfig) -> JoinHandle<Result<(), host_agent::Error>> {
    tokio::spawn(host_agent::run(config))
}

/// An AMQP URL with the agent's own credentials, for speaking as it by hand.
fn agent_url(stack: &Stack, machine_id: uuid::Uuid, token: &str) -> String {
    let base = stack
        .config
        .amqp_url_for_agents()
        .expect("agents' amqp url");
    let user = host_agent::protocol::username(machine_id, token);
    base.replacen("amqp://", &format!("amqp://{user}:{token}@"), 1)
}

#[derive(diesel::QueryableByName, Debug, Clone, PartialEq)]
struct State {
    #[diesel(sql_type = Nullable<Timestamptz>)]
    last_heartbeat_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Bool)]
    online: bool,
    #[diesel(sql_type = Nullable<Numeric>)]
    reliability: Option<Decimal>,
    #[diesel(sql_type = Nullable<Integer>)]
    cuda_version_code: Option<i32>,
    #[diesel(sql_type = Nullable<Text>)]
    driver_version: Option<String>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    self_test_passed_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = BigInt)]
    open_gaps: i64,
    #[diesel(sql_type = BigInt)]
    closed_gaps: i64,
    #[diesel(sql_type = BigInt)]
    reports: i64,
}

fn state(env: &TestEnv, id: uuid::Uuid) -> State {
    diesel::sql_query(format!(
        "SELECT m.last_heartbeat_at,
                coalesce(m.last_heartbeat_at > now() - make_interval(secs => {GRACE_SECONDS}), false) AS online,
                m.reliability, m.cuda_version_code, m.driver_version, m.self_test_passed_at,
                (SELECT count(*) FROM catalog.heartbeat_gaps g WHERE g.machine_id = m.id AND g.ended_at IS NULL) AS open_gaps,
                (SELECT count(*) FROM catalog.heartbeat_gaps g WHERE g.machine_id = m.id AND g.ended_at IS NOT NULL) AS closed_gaps,
                (SELECT count(*) FROM catalog.agent_reports r WHERE r.machine_id = m.id) AS reports
         FROM catalog.machines m WHERE m.id = '{id}'"
    ))
    .get_result(&mut env.conn())
    .expect("machine state")
}

#[derive(diesel::QueryableByName, Debug, Clone, PartialEq)]
struct GapRow {
    #[diesel(sql_type = Timestamptz)]
    started_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    ended_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Text)]
    detected_by: String,
}

fn gap_rows(env: &TestEnv, id: uuid::Uuid) -> Vec<GapRow> {
    diesel::sql_query(format!(
        "SELECT started_at, ended_at, detected_by FROM catalog.heartbeat_gaps
         WHERE machine_id = '{id}' ORDER BY started_at"
    ))
    .load(&mut env.conn())
    .expect("gaps")
}

#[derive(diesel::QueryableByName)]
struct Instant {
    #[diesel(sql_type = Timestamptz)]
    at: DateTime<Utc>,
}

fn db_now(env: &TestEnv) -> DateTime<Utc> {
    diesel::sql_query("SELECT now() AS at")
        .get_result::<Instant>(&mut env.conn())
        .expect("now")
        .at
}

fn listed_since(env: &TestEnv, id: uuid::Uuid) -> DateTime<Utc> {
    diesel::sql_query(format!(
        "SELECT started_at AS at FROM catalog.listing_periods WHERE machine_id = '{id}' AND ended_at IS NULL"
    ))
    .get_result::<Instant>(&mut env.conn())
    .expect("open listing period")
    .at
}

async fn wait_state<F>(env: &TestEnv, id: uuid::Uuid, what: &str, limit: Duration, f: F) -> State
where
    F: Fn(&State) -> bool,
{
    eventually(what, limit, || async {
        let s = state(env, id);
        f(&s).then_some(s)
    })
    .await
}

fn catalog_url(stack: &Stack, path: &str) -> String {
    format!("{}{path}", stack.config.url("catalog"))
}

async fn internal_get(stack: &Stack, path: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(catalog_url(stack, path))
        .header("x-service-token", stack.config.service_token.expose())
        .send()
        .await
        .expect("catalog")
}

async fn internal_post(stack: &Stack, path: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(catalog_url(stack, path))
        .header("x-service-token", stack.config.service_token.expose())
        .json(&body)
        .send()
        .await
        .expect("catalog")
}

fn heartbeat_message(env: &TestEnv, id: uuid::Uuid, sent_at: DateTime<Utc>) -> RawMessage {
    RawMessage {
        routing_key: format!("agent.{id}.heartbeat"),
        user_id: Some(agent_user(env, id)),
        message_id: Some(uuid::Uuid::now_v7().to_string()),
        data: serde_json::to_vec(&json!({
            "machine_id": id, "sent_at": sent_at, "seq": 1,
            "gpus": [{ "index": 0, "utilization_percent": 50, "memory_used_mib": 1024 }],
        }))
        .expect("json"),
        delivery_count: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_a_machine_online_and_silence_costs_reliability() {
    let (env, stack, db) = setup().await;
    let api = Client::new(&stack.gateway_url);
    let (host, host_tenant) = sign_up(&api, &["HOST"]).await;
    let (other_host, other_tenant) = sign_up(&api, &["HOST"]).await;
    drop(other_host);
    let (id, token) = machine(&host).await;
    let access = AgentAccess::from_config(&stack.config).expect("agent access");
    access.grant(MachineId(id), &token).await.expect("grant");
    let consumer = tokio::spawn(catalog::heartbeats::run_consumer(
        stack.config.clone(),
        db.clone(),
    ));

    // The agent reports inventory and a self-test, then heartbeats.
    let agent = start_agent(agent_config(&stack, id, &token));
    let online = wait_state(&env, id, "agent online", Duration::from_secs(20), |s| {
        s.online && s.cuda_version_code.is_some() && s.self_test_passed_at.is_some()
    })
    .await;
    assert_eq!(online.cuda_version_code, Some(12040));
    assert_eq!(online.driver_version.as_deref(), Some("550.54.15"));
    assert_eq!(online.reports, 1);

    // Heard from since shortly after listing: no gap, fully reliable.
    let sweeper = tokio::spawn(catalog::reliability::run_offline_sweeper(
        stack.config.clone(),
        db.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(600)).await;
    let steady = state(&env, id);
    assert!(steady.online);
    assert_eq!((steady.open_gaps, steady.closed_gaps), (0, 0));
    assert_eq!(steady.reliability, Some(Decimal::ONE));
    let before_stop = steady.last_heartbeat_at.expect("heartbeat");
    assert!(
        state(&env, id).last_heartbeat_at > Some(before_stop - chrono::TimeDelta::seconds(1)),
        "heartbeats keep coming"
    );

    // The agent stops: past the grace the machine is offline, the sweeper
    // opens a gap from the last heartbeat, and reliability falls while the
    // silence lasts.
    agent.abort();
    let _ = agent.await;
    let silent = wait_state(&env, id, "gap opened", Duration::from_secs(15), |s| {
        !s.online && s.open_gaps == 1 && s.reliability.is_some_and(|r| r < Decimal::ONE)
    })
    .await;
    let opened = gap_rows(&env, id);
    assert_eq!(opened.len(), 1);
    assert_eq!(opened[0].detected_by, "sweeper");
    assert_eq!(Some(opened[0].started_at), silent.last_heartbeat_at);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let later = state(&env, id);
    assert!(
        later.reliability < silent.reliability,
        "downtime keeps counting: {:?} then {:?}",
        silent.reliability,
        later.reliability
    );

    // The agent comes back: online again, the gap is closed at its first
    // heartbeat, and the downtime stays on the record.
    let agent = start_agent(agent_config(&stack, id, &token));
    let back = wait_state(&env, id, "back online", Duration::from_secs(20), |s| {
        s.online && s.open_gaps == 0
    })
    .await;
    assert_eq!(back.closed_gaps, 1);
    let gap = gap_rows(&env, id).remove(0);
    let ended = gap.ended_at.expect("closed gap");
    assert!(ended - gap.started_at > chrono::TimeDelta::seconds(GRACE_SECONDS));
    // Announced to the host (its webhooks): offline when the sweeper opened
    // the gap, online when the heartbeat closed it; once each.
    for kind in ["catalog.machine.offline", "catalog.machine.online"] {
        assert_eq!(
            env.count(&format!(
                "SELECT count(*) AS n FROM catalog.outbox WHERE routing_key = '{kind}' \
                 AND body->'payload'->>'machine_id' = '{id}' \
                 AND body->'payload'->>'host_tenant_id' = '{host_tenant}' \
                 AND (body->'payload'->>'silent_since')::timestamptz = '{}'",
                gap.started_at.to_rfc3339()
            )),
            1,
            "{kind}"
        );
    }
    // Numbered per machine (webhook ordering): online after offline.
    env.assert_sequenced("catalog", &MACHINE_EVENTS, MACHINE_RESOURCE);
    let sequence_of = |kind: &str| {
        env.count(&format!(
            "SELECT (body->'payload'->>'sequence')::bigint AS n FROM catalog.outbox \
             WHERE routing_key = '{kind}' AND body->'payload'->>'machine_id' = '{id}'"
        ))
    };
    assert!(
        0 < sequence_of("catalog.machine.offline")
            && sequence_of("catalog.machine.offline") < sequence_of("catalog.machine.online")
    );
    let reliability_back = back.reliability.expect("reliability");
    assert!(reliability_back < Decimal::ONE, "{reliability_back}");

    // The formula, at a fixed instant: 1 − gap / listed time, floored to 4 places.
    let as_of = db_now(&env);
    let listed = (as_of - listed_since(&env, id))
        .num_microseconds()
        .expect("µs") as f64;
    let down = (ended - gap.started_at).num_microseconds().expect("µs") as f64;
    let expected = ((1.0 - down / listed) * 10_000.0).floor() / 10_000.0;
    let computed = db
        .run(move |c| {
            reliability::compute(c, MachineId(id), as_of, 30).map_err(platform::PlatformError::from)
        })
        .await
        .expect("compute")
        .expect("listed in the window");
    assert_eq!(computed.to_string().parse::<f64>().expect("f64"), expected);

    // The evidence, to the host who owns the machine only.
    let response = internal_get(
        &stack,
        &format!("/internal/machines/{id}/heartbeat-gaps?host_tenant_id={host_tenant}"),
    )
    .await;
    assert_eq!(response.status(), 200);
    let gaps: Value = response.json().await.expect("gaps json");
    assert_eq!(gaps.as_array().map(Vec::len), Some(1));
    assert!(gaps[0]["seconds"].as_i64().expect("seconds") >= GRACE_SECONDS);
    assert!(gaps[0]["ended_at"].is_string());
    let response = internal_get(
        &stack,
        &format!("/internal/machines/{id}/heartbeat-gaps?host_tenant_id={other_tenant}"),
    )
    .await;
    assert_eq!(response.status(), 404);

    // Heartbeats are idempotent: the same one applied twice changes nothing
    // the second time, and a stale one (older than the grace) changes nothing.
    agent.abort();
    let _ = agent.await;
    sweeper.abort();
    let settings = Settings {
        grace_seconds: GRACE_SECONDS,
        window_days: 30,
    };
    let duplicate = heartbeat_message(&env, id, Utc::now());
    catalog::heartbeats::handle(&db, settings, duplicate.clone())
        .await
        .expect("first delivery");
    let once = (state(&env, id), gap_rows(&env, id));
    let as_of = db_now(&env);
    let reliability_once = db
        .run(move |c| {
            reliability::compute(c, MachineId(id), as_of, 30).map_err(platform::PlatformError::from)
        })
        .await
        .expect("compute");
    catalog::heartbeats::handle(&db, settings, duplicate)
        .await
        .expect("second delivery");
    let stale = heartbeat_message(&env, id, Utc::now() - chrono::TimeDelta::hours(1));
    catalog::heartbeats::handle(&db, settings, stale)
        .await
        .expect("stale heartbeat");
    let twice = (state(&env, id), gap_rows(&env, id));
    assert_eq!(once.0.last_heartbeat_at, twice.0.last_heartbeat_at);
    assert_eq!(once.1, twice.1);
    let reliability_twice = db
        .run(move |c| {
            reliability::compute(c, MachineId(id), as_of, 30).map_err(platform::PlatformError::from)
        })
        .await
        .expect("compute");
    assert_eq!(reliability_once, reliability_twice);

    consumer.abort();
    stack.stop().await;
    env.cleanup().await;
}

/// Publishes one heartbeat-shaped message with `user_id` on `channel` and
/// waits for the broker's confirm; the error when the broker refuses it.
async fn publish(
    connection: &Connection,
    routing_key: &str,
    user_id: Option<&str>,
    body: &Value,
    message_id: &str,
) -> Result<(), host_agent::lapin::Error> {
    let channel = connection.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let mut properties = BasicProperties::default()
        .with_content_type(ShortString::from("application/json"))
        .with_message_id(ShortString::from(message_id));
    if let Some(user) = user_id {
        properties = properties.with_user_id(ShortString::from(user));
    }
    channel
        .basic_publish(
            "gpumarket.agents".into(),
            routing_key.into(),
            BasicPublishOptions::default(),
            &serde_json::to_vec(body).expect("json"),
            properties,
        )
        .await?
        .await?;
    // A refusal closes the channel; make sure it has arrived before judging.
    channel.basic_qos(1, Default::default()).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_cannot_report_for_another_machine() {
    let (env, stack, db) = setup().await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let (a, token_a) = machine(&host).await;
    let (b, token_b) = machine(&host).await;
    let access = AgentAccess::from_config(&stack.config).expect("agent access");
    access.grant(MachineId(a), &token_a).await.expect("grant a");
    access.grant(MachineId(b), &token_b).await.expect("grant b");
    let consumer = tokio::spawn(catalog::heartbeats::run_consumer(
        stack.config.clone(),
        db.clone(),
    ));
    // The exchange exists once any catalog process has declared the topology;
    // do not race the consumer's start.
    let admin = Connection::connect(&stack.config.amqp_url, ConnectionProperties::default())
        .await
        .expect("admin connects");
    platform::broker::declare_topology(
        &admin.create_channel().await.expect("channel"),
        &stack.config,
    )
    .await
    .expect("topology");
    let user_a = host_agent::protocol::username(a, &token_a);
    let user_b = host_agent::protocol::username(b, &token_b);
    let heartbeat =
        |id: uuid::Uuid| json!({ "machine_id": id, "sent_at": Utc::now(), "seq": 1, "gpus": [] });

    let as_a = Connection::connect(
        &agent_url(&stack, a, &token_a),
        ConnectionProperties::default(),
    )
    .await
    .expect("agent A connects");
    // B's routing key with A's credentials: the topic permission refuses it.
    let refused = publish(
        &as_a,
        &format!("agent.{b}.heartbeat"),
        Some(&user_a),
        &heartbeat(b),
        "a-as-b-key",
    )
    .await
    .expect_err("A may not publish under B's routing key");
    assert!(refused.to_string().contains("ACCESS_REFUSED"), "{refused}");
    // A claiming to be B in user_id: the broker checks it against the login.
    let refused = publish(
        &as_a,
        &format!("agent.{a}.heartbeat"),
        Some(&user_b),
        &heartbeat(a),
        "a-claims-b",
    )
    .await
    .expect_err("A may not claim to be B");
    assert!(
        refused.to_string().contains("PRECONDITION_FAILED"),
        "{refused}"
    );
    // A's own report with its own identity goes through (the control).
    publish(
        &as_a,
        &format!("agent.{a}.heartbeat"),
        Some(&user_a),
        &heartbeat(a),
        "a-itself",
    )
    .await
    .expect("A reports for itself");
    wait_state(&env, a, "A online", Duration::from_secs(10), |s| s.online).await;

    // A user allowed to publish anything (the platform's own) but who is not
    // B's agent: the consumer dead-letters it, with or without a user_id.
    publish(
        &admin,
        &format!("agent.{b}.heartbeat"),
        None,
        &heartbeat(b),
        "no-user-id",
    )
    .await
    .expect("published");
    let inventory = json!({
        "machine_id": b, "sent_at": Utc::now(), "agent_version": "x", "simulated": true,
        "gpus": [], "cuda_version": "12.4", "driver_version": "550",
    });
    publish(
        &admin,
        &format!("agent.{b}.inventory"),
        Some("guest"),
        &inventory,
        "guest-inventory",
    )
    .await
    .expect("published");
    let channel = admin.create_channel().await.expect("channel");
    let mut dead: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !(dead.iter().any(|m| m == "no-user-id") && dead.iter().any(|m| m == "guest-inventory")) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not dead-lettered: {dead:?}"
        );
        while let Some(message) = channel
            .basic_get(
                "gpumarket.dlx.dead".into(),
                BasicGetOptions { no_ack: true },
            )
            .await
            .expect("basic_get")
        {
            let id = message
                .delivery
                .properties
                .message_id()
                .as_ref()
                .map(|m| m.to_string());
            dead.push(id.unwrap_or_default());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Nothing changed for B.
    let b_state = state(&env, b);
    assert_eq!(b_state.last_heartbeat_at, None);
    assert_eq!(b_state.cuda_version_code, None);
    assert_eq!(b_state.driver_version, None);
    assert_eq!(b_state.reports, 0);

    consumer.abort();
    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_stops_working_at_once() {
    let (env, stack, db) = setup().await;
    let api = Client::new(&stack.gateway_url);
    let (host, host_tenant) = sign_up(&api, &["HOST"]).await;
    let (_, other_tenant) = sign_up(&api, &["HOST"]).await;
    let (id, token) = machine(&host).await;
    let access = AgentAccess::from_config(&stack.config).expect("agent access");
    access.grant(MachineId(id), &token).await.expect("grant");
    let consumer = tokio::spawn(catalog::heartbeats::run_consumer(
        stack.config.clone(),
        db.clone(),
    ));
    let agent = start_agent(agent_config(&stack, id, &token));
    wait_state(&env, id, "agent online", Duration::from_secs(20), |s| {
        s.online
    })
    .await;
    let admin = RabbitAdmin::new(&env.config.rabbitmq_management_url).expect("management");
    let user = host_agent::protocol::username(id, &token);
    eventually(
        "agent connection listed",
        Duration::from_secs(15),
        || async {
            (!admin
                .user_connections(&user)
                .await
                .expect("connections")
                .is_empty())
            .then_some(())
        },
    )
    .await;

    // Another host cannot revoke it.
    let path = format!("/internal/machines/{id}/agent-token/revoke");
    let response = internal_post(&stack, &path, json!({ "host_tenant_id": other_tenant })).await;
    assert_eq!(response.status(), 404);
    assert!(!agent.is_finished());

    // The owner revokes: by the time the call returns the connection is gone,
    // and the agent, refused on reconnecting, stops with an error.
    let response = internal_post(&stack, &path, json!({ "host_tenant_id": host_tenant })).await;
    let status = response.status();
    assert_eq!(status, 200, "{}", response.text().await.unwrap_or_default());
    assert!(
        admin
            .user_connections(&user)
            .await
            .expect("connections")
            .is_empty()
    );
    let ended = tokio::time::timeout(Duration::from_secs(10), agent)
        .await
        .expect("the agent stops")
        .expect("join");
    assert!(
        matches!(ended, Err(host_agent::Error::Refused(_))),
        "{ended:?}"
    );

    // The old token opens nothing any more.
    let retry = tokio::time::timeout(
        Duration::from_secs(10),
        host_agent::run(agent_config(&stack, id, &token)),
    )
    .await
    .expect("refused promptly");
    assert!(
        matches!(retry, Err(host_agent::Error::Refused(_))),
        "{retry:?}"
    );
    let connect = Connection::connect(
        &agent_url(&stack, id, &token),
        ConnectionProperties::default(),
    )
    .await;
    assert!(connect.is_err());
    // And its hash no longer matches the stored one.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM catalog.machines WHERE id = '{id}' \
             AND agent_token_sha256 = encode(sha256('{token}'::bytea), 'hex')"
        )),
        0
    );
    // No heartbeat arrives after the revocation.
    let last = state(&env, id).last_heartbeat_at;
    tokio::time::sleep(HEARTBEAT * 3).await;
    assert_eq!(state(&env, id).last_heartbeat_at, last);

    consumer.abort();
    stack.stop().await;
    env.cleanup().await;
}

/// Issue 15, item 2: connections made with the old token 5 s, 2 s, 1 s and
/// 0.5 s before `rotateAgentToken`, right before it, and while it runs: once
/// the rotation has returned, none of them can publish (and a connection
/// attempt still running then fails); the new token works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_a_token_closes_every_connection_of_the_old_one_however_young() {
    let (env, stack, _db) = setup().await;
    let api = Client::new(&stack.gateway_url);
    let (host, host_tenant) = sign_up(&api, &["HOST"]).await;
    let (id, token) = machine(&host).await;
    let access = AgentAccess::from_config(&stack.config).expect("agent access");
    access.grant(MachineId(id), &token).await.expect("grant");
    let admin = Connection::connect(&stack.config.amqp_url, ConnectionProperties::default())
        .await
        .expect("admin connects");
    platform::broker::declare_topology(
        &admin.create_channel().await.expect("channel"),
        &stack.config,
    )
    .await
    .expect("topology");
    let old_url = agent_url(&stack, id, &token);
    let old_user = host_agent::protocol::username(id, &token);
    let routing_key = format!("agent.{id}.heartbeat");
    let body = json!({ "machine_id": id, "sent_at": Utc::now(), "seq": 1, "gpus": [] });

    // Opened 5 s, 2 s, 1 s, 0.5 s and 0 s before the rotation.
    let mut old: Vec<(String, Connection)> = Vec::new();
    for (label, then_wait_ms) in [
        ("5s", 3000),
        ("2s", 1000),
        ("1s", 500),
        ("0.5s", 500),
        ("0s", 0),
    ] {
        let connection = Connection::connect(&old_url, ConnectionProperties::default())
            .await
            .expect("the old token connects before the rotation");
        old.push((label.to_owned(), connection));
        tokio::time::sleep(Duration::from_millis(then_wait_ms)).await;
    }
    // The control: an old connection publishes before the rotation.
    publish(&old[0].1, &routing_key, Some(&old_user), &body, "before")
        .await
        .expect("the old token publishes before the rotation");

    // And connections being opened while the rotation runs.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let racing = {
        let (stop, url) = (stop.clone(), old_url.clone());
        tokio::spawn(async move {
            let mut opened = Vec::new();
            let mut attempts = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                attempts += 1;
                if let Ok(c) = Connection::connect(&url, ConnectionProperties::default()).await {
                    opened.push((tokio::time::Instant::now(), c));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (attempts, opened)
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let path = format!("/internal/machines/{id}/agent-token/rotate");
    let response = internal_post(&stack, &path, json!({ "host_tenant_id": host_tenant })).await;
    let returned = tokio::time::Instant::now();
    assert_eq!(response.status(), 200);
    let rotated: Value = response.json().await.expect("json");
    let new_token = rotated["agent_token"].as_str().expect("token").to_owned();
    // Keep trying a little past the return: those must fail to connect.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (attempts, racing) = racing.await.expect("join");
    assert!(
        attempts > 3,
        "connections were attempted during the rotation"
    );
    for (at, _) in &racing {
        assert!(
            *at <= returned,
            "the old token opened a connection after the rotation returned"
        );
    }

    for (label, connection) in old
        .iter()
        .map(|(l, c)| (l.clone(), c))
        .chain(racing.iter().map(|(_, c)| ("during".to_owned(), c)))
    {
        let published = publish(
            connection,
            &routing_key,
            Some(&old_user),
            &body,
            &format!("after-{label}"),
        )
        .await;
        assert!(
            published.is_err(),
            "a connection opened {label} before the rotation still publishes"
        );
    }
    let tracked = RabbitAdmin::new(&env.config.rabbitmq_management_url)
        .expect("management")
        .tracked_connections(&old_user)
        .await
        .expect("connections");
    assert!(tracked.is_empty(), "{tracked:?}");

    // The new token works, as its own user.
    let new = Connection::connect(
        &agent_url(&stack, id, &new_token),
        ConnectionProperties::default(),
    )
    .await
    .expect("the new token connects");
    let new_user = host_agent::protocol::username(id, &new_token);
    assert_ne!(new_user, old_user);
    publish(&new, &routing_key, Some(&new_user), &body, "new")
        .await
        .expect("the new token publishes");
    assert_eq!(agent_user(&env, id), new_user);

    drop(new);
    stack.stop().await;
    env.cleanup().await;
}

/// Issue 15, item 21: `deleteMachine` refuses while GPUs of the machine are
/// rented and touches nothing then; otherwise the machine's command queue
/// `cmd.<id>` (declared by its agent), a legacy `host.<id>` and its agent's
/// broker user are deleted, the agent's connection is cut, and the machine
/// is gone from its host's list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_machine_removes_its_queue_and_broker_user() {
    let (env, stack, _db) = setup().await;
    let api = Client::new(&stack.gateway_url);
    let (host, host_tenant) = sign_up(&api, &["HOST"]).await;
    let (other_host, _) = sign_up(&api, &["HOST"]).await;
    let (id, token) = machine(&host).await;
    let broker = MachineOnBroker::new(&env, id);
    assert!(!broker.has_queue().await, "registration declares no queue");
    assert_eq!(broker.users().await.len(), 1);
    let agent = broker.connect_as_agent(&stack, &token).await;
    // A queue from before agents declared their own goes with the machine.
    broker.declare_legacy_queue(&env).await;
    let delete = "mutation($id: ID!) { deleteMachine(machineId: $id) }";

    // A live rental on it: refused, nothing removed.
    env.exec(&format!(
        "INSERT INTO catalog.allocations (order_id, machine_id, tenant_id, gpu_count)
         VALUES (gen_random_uuid(), '{id}', '{host_tenant}', 1)"
    ));
    let refused = host
        .run(delete, json!({ "id": id }))
        .await
        .expect_err("a rented machine cannot be deleted");
    assert_eq!(refused.code, "CONFLICT", "{refused:?}");
    assert!(broker.has_queue().await);
    assert_eq!(broker.users().await.len(), 1);
    // Another host's machine is as good as missing.
    let missing = other_host
        .run(delete, json!({ "id": id }))
        .await
        .expect_err("not the caller's machine");
    assert_eq!(missing.code, "NOT_FOUND", "{missing:?}");

    env.exec(&format!(
        "UPDATE catalog.allocations SET released_at = now() WHERE machine_id = '{id}'"
    ));
    let deleted = host
        .run(delete, json!({ "id": id }))
        .await
        .expect("deleteMachine");
    assert_eq!(deleted["deleteMachine"], true);
    assert!(!broker.has_queue().await, "the queue is deleted");
    assert!(
        !broker.has_legacy_queue().await,
        "the legacy queue is deleted"
    );
    assert!(
        broker.users().await.is_empty(),
        "the broker user is deleted"
    );
    let user = host_agent::protocol::username(id, &token);
    let published = publish(
        &agent,
        &format!("agent.{id}.heartbeat"),
        Some(&user),
        &json!({ "machine_id": id, "sent_at": Utc::now(), "seq": 1, "gpus": [] }),
        "after-delete",
    )
    .await;
    assert!(published.is_err(), "the agent's connection is cut");
    let mine = host
        .run("{ myMachines { id } }", json!({}))
        .await
        .expect("myMachines");
    assert!(
        mine["myMachines"]
            .as_array()
            .is_some_and(|ms| ms.iter().all(|m| m["id"] != id.to_string().as_str())),
        "{mine}"
    );
    let relist = host
        .run(
            "mutation($id: ID!) { listMachine(machineId: $id) { listed } }",
            json!({ "id": id }),
        )
        .await
        .expect_err("a deleted machine cannot be listed");
    assert_eq!(relist.code, "NOT_FOUND");
    // Repeating it is harmless.
    host.run(delete, json!({ "id": id }))
        .await
        .expect("deleteMachine again");

    stack.stop().await;
    env.cleanup().await;
}

/// A deleted machine stays deleted: its host cannot get a new token for it
/// (which would bring back its broker user and queue), nor revoke one, and
/// the catalog refuses reports sent for it, even with its last token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_machine_gets_no_new_token_and_its_reports_are_refused() {
    let (env, stack, db) = setup().await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let (id, _token) = machine(&host).await;
    let broker = MachineOnBroker::new(&env, id);
    // The user of the token the machine had when it was deleted.
    let last_user = agent_user(&env, id);
    host.run(
        "mutation($id: ID!) { deleteMachine(machineId: $id) }",
        json!({ "id": id }),
    )
    .await
    .expect("deleteMachine");
    assert!(!broker.has_queue().await);
    assert!(broker.users().await.is_empty());

    let rotated = host
        .run(
            "mutation($id: ID!) { rotateAgentToken(machineId: $id) { agentToken } }",
            json!({ "id": id }),
        )
        .await
        .expect_err("a deleted machine gets no new token");
    assert_eq!(rotated.code, "NOT_FOUND", "{rotated:?}");
    let revoked = host
        .run(
            "mutation($id: ID!) { revokeAgentToken(machineId: $id) }",
            json!({ "id": id }),
        )
        .await
        .expect_err("a deleted machine has no token to revoke");
    assert_eq!(revoked.code, "NOT_FOUND", "{revoked:?}");
    assert!(!broker.has_queue().await, "no queue is re-created");
    assert!(
        broker.users().await.is_empty(),
        "no broker user is re-created"
    );
    assert_eq!(
        agent_user(&env, id),
        last_user,
        "the stored token is unchanged"
    );

    // A report still in the queue from before the deletion (sent by the
    // machine's then current user) is refused, and changes nothing.
    let before = state(&env, id);
    let settings = Settings {
        grace_seconds: GRACE_SECONDS,
        window_days: 30,
    };
    let refused =
        catalog::heartbeats::handle(&db, settings, heartbeat_message(&env, id, Utc::now()))
            .await
            .expect_err("a deleted machine's heartbeat is refused");
    assert!(
        matches!(refused, platform::consumer::HandlerError::Permanent(_)),
        "{refused:?}"
    );
    let inventory = RawMessage {
        routing_key: format!("agent.{id}.inventory"),
        user_id: Some(last_user.clone()),
        message_id: Some(uuid::Uuid::now_v7().to_string()),
        data: serde_json::to_vec(&json!({
            "machine_id": id, "sent_at": Utc::now(),
            "agent_version": "x", "simulated": true, "gpus": [],
            "cuda_version": "12.4", "driver_version": "550.54.15",
        }))
        .expect("json"),
        delivery_count: 0,
    };
    catalog::heartbeats::handle(&db, settings, inventory)
        .await
        .expect_err("a deleted machine's inventory is refused");
    assert_eq!(state(&env, id), before, "nothing about the machine changed");

    stack.stop().await;
    env.cleanup().await;
}

/// A renter's stopped instance keeps its disk on the machine (and pays for
/// it): the machine cannot be deleted until the instance is destroyed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_holding_a_renters_stopped_instance_cannot_be_deleted() {
    let (env, stack, _db) = setup().await;
    let api = Client::new(&stack.gateway_url);
    let (host, host_tenant) = sign_up(&api, &["HOST"]).await;
    let (other_host, _) = sign_up(&api, &["HOST"]).await;
    let (id, token) = machine(&host).await;
    let broker = MachineOnBroker::new(&env, id);
    let agent = broker.connect_as_agent(&stack, &token).await;
    let _ = agent.close(200, "declared".into()).await;
    // A renter's instance, stopped: its GPUs are released (no allocation),
    // its disk stays on the machine.
    let order = uuid::Uuid::now_v7();
    let instance = uuid::Uuid::now_v7();
    env.exec(&format!(
        "INSERT INTO ordering.orders (id, tenant_id, user_id, idempotency_key, request_fingerprint,
                                      offer_id, machine_id, gpu_count, state)
         VALUES ('{order}', gen_random_uuid(), gen_random_uuid(), 'k', 'f', '{id}', '{id}', 1, 'provisioning')"
    ));
    env.exec(&format!(
        "INSERT INTO ordering.instances (id, order_id, tenant_id, host_tenant_id, machine_id, gpu_model,
                                         gpu_count, rental_type, price_per_gpu_hour, currency, image,
                                         state, stopped_at, storage_price_per_gb_month,
                                         bandwidth_up_price_per_tb, bandwidth_down_price_per_tb, disk_gib)
         VALUES ('{instance}', '{order}', gen_random_uuid(), '{host_tenant}', '{id}', 'RTX 4090', 1,
                 'on_demand', 0.40, 'USD', 'ubuntu:24.04', 'stopped', now(), 0.10, 0, 0, 50)"
    ));
    let delete = "mutation($id: ID!) { deleteMachine(machineId: $id) }";
    let refused = host
        .run(delete, json!({ "id": id }))
        .await
        .expect_err("a machine holding a stopped instance cannot be deleted");
    assert_eq!(refused.code, "CONFLICT", "{refused:?}");
    assert!(
        refused.message.contains("1 instance(s)"),
        "{}",
        refused.message
    );
    // Nothing changed: the machine is still the host's, listed, reachable.
    assert!(broker.has_queue().await);
    assert_eq!(broker.users().await.len(), 1);
    let mine = host
        .run("{ myMachines { id listed } }", json!({}))
        .await
        .expect("myMachines");
    let listed = mine["myMachines"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["id"] == id.to_string().as_str()))
        .map(|m| m["listed"].clone());
    assert_eq!(listed, Some(json!(true)), "{mine}");
    // Another host learns nothing about the machine's rentals.
    let missing = other_host
        .run(delete, json!({ "id": id }))
        .await
        .expect_err("not the caller's machine");
    assert_eq!(missing.code, "NOT_FOUND", "{missing:?}");
    // The count is for services only.
    let anonymous = reqwest::Client::new()
        .get(format!(
            "{}/internal/machines/{id}/live-instances?host_tenant_id={host_tenant}",
            stack.config.url("ordering")
        ))
        .send()
        .await
        .expect("ordering");
    assert_eq!(anonymous.status(), reqwest::StatusCode::UNAUTHORIZED);

    // Destroyed, the instance no longer holds the machine.
    env.exec(&format!(
        "UPDATE ordering.instances SET state = 'destroyed' WHERE id = '{instance}'"
    ));
    let deleted = host
        .run(delete, json!({ "id": id }))
        .await
        .expect("deleteMachine");
    assert_eq!(deleted["deleteMachine"], true);
    assert!(!broker.has_queue().await);
    assert!(broker.users().await.is_empty());

    stack.stop().await;
    env.cleanup().await;
}

/// The harness: a `TestEnv` dropped without `cleanup()` (a test that
/// panicked) still removes its vhost (queues with it), its machines' agent
/// users and its database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_test_env_leaves_nothing_on_the_broker() {
    let (env, stack, _db) = setup().await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let (id, _token) = machine(&host).await;
    let admin = RabbitAdmin::new(&env.config.rabbitmq_management_url).expect("management");
    let vhost = env.config.amqp_vhost().expect("vhost");
    let db_name = env.db_name.clone();
    assert!(
        !admin.queues(&vhost).await.expect("queues").is_empty(),
        "the test made queues"
    );
    stack.stop().await;
    drop(env);
    assert!(admin.queues(&vhost).await.is_err(), "the vhost is gone");
    assert!(
        admin
            .users_starting_with(&format!("agent-{id}"))
            .await
            .expect("users")
            .is_empty()
    );
    let config = platform::Config::from_env().expect("config");
    let postgres = platform::config::replace_db_name(&config.database_url, "postgres");
    let mut conn =
        <diesel::PgConnection as diesel::Connection>::establish(&postgres).expect("postgres");
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let left: Vec<N> = diesel::sql_query(format!(
        "SELECT count(*) AS n FROM pg_database WHERE datname = '{db_name}'"
    ))
    .load(&mut conn)
    .expect("pg_database");
    assert_eq!(left.first().map(|r| r.n), Some(0), "the database is gone");
}

/// An agent user granted before agents declared their own command queues
/// (configure nothing, read `host.<id>`) is brought up to date by
/// `AgentAccess::migrate` (which the catalog runs at start): its agent may
/// then declare and consume `cmd.<id>`, and no other machine's, and the
/// legacy queue is gone. Running it again changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_users_from_before_command_queues_are_migrated() {
    let (env, stack, _db) = setup().await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let (id, token) = machine(&host).await;
    let (other, _) = machine(&host).await;
    let broker = MachineOnBroker::new(&env, id);
    let user = host_agent::protocol::username(id, &token);
    let exchange = format!("^{}$", stack.config.agents_exchange.replace('.', "\\."));
    broker
        .admin
        .set_permissions(
            &broker.vhost,
            &user,
            "^$",
            &exchange,
            &format!("^host\\.{id}$"),
        )
        .await
        .expect("the permissions of before");
    broker.declare_legacy_queue(&env).await;
    let declare = async |machine: uuid::Uuid| {
        let agent = Connection::connect(
            &agent_url(&stack, id, &token),
            ConnectionProperties::default(),
        )
        .await
        .expect("the agent connects");
        let channel = agent.create_channel().await.expect("channel");
        let declared = host_agent::declare_command_queue(&channel, MachineId(machine)).await;
        let _ = agent.close(200, "done".into()).await;
        declared
    };
    assert!(
        matches!(declare(id).await, Err(host_agent::Error::Refused(_))),
        "before: the agent may not declare its queue"
    );

    let access = AgentAccess::from_config(&stack.config).expect("agent access");
    assert_eq!(access.migrate().await.expect("migrate"), (1, 1));
    assert!(!broker.has_legacy_queue().await, "the legacy queue is gone");
    declare(id).await.expect("the agent declares its queue");
    assert!(broker.has_queue().await);
    assert!(
        matches!(declare(other).await, Err(host_agent::Error::Refused(_))),
        "another machine's queue is not the agent's"
    );
    assert_eq!(access.migrate().await.expect("again"), (0, 0));

    stack.stop().await;
    env.cleanup().await;
}

/// What the broker holds for one machine: its `cmd.<id>` queue (or a legacy
/// `host.<id>`) and the agent users of its token generations.
struct MachineOnBroker {
    admin: RabbitAdmin,
    vhost: String,
    id: String,
}

impl MachineOnBroker {
    fn new(env: &TestEnv, id: impl std::fmt::Display) -> Self {
        MachineOnBroker {
            admin: RabbitAdmin::new(&env.config.rabbitmq_management_url).expect("management"),
            vhost: env.config.amqp_vhost().expect("vhost"),
            id: id.to_string(),
        }
    }

    async fn has_queue(&self) -> bool {
        self.has(&format!("cmd.{}", self.id)).await
    }

    async fn has_legacy_queue(&self) -> bool {
        self.has(&format!("host.{}", self.id)).await
    }

    /// Connects as the machine's agent and declares its command queue, as
    /// the agent does on connect; the connection stays open for the caller.
    async fn connect_as_agent(&self, stack: &Stack, token: &str) -> Connection {
        let id: uuid::Uuid = self.id.parse().expect("uuid");
        let agent = Connection::connect(
            &agent_url(stack, id, token),
            ConnectionProperties::default(),
        )
        .await
        .expect("the agent connects");
        let channel = agent.create_channel().await.expect("channel");
        host_agent::declare_command_queue(&channel, MachineId(id))
            .await
            .expect("the agent declares its command queue");
        assert!(self.has_queue().await);
        agent
    }

    /// The durable quorum queue `host.<id>` the catalog used to declare.
    async fn declare_legacy_queue(&self, env: &TestEnv) {
        let conn = Connection::connect(&env.config.amqp_url, ConnectionProperties::default())
            .await
            .expect("amqp");
        let channel = conn.create_channel().await.expect("channel");
        let mut args = host_agent::lapin::types::FieldTable::default();
        args.insert(
            "x-queue-type".into(),
            host_agent::lapin::types::AMQPValue::LongString("quorum".into()),
        );
        channel
            .queue_declare(
                format!("host.{}", self.id).as_str().into(),
                host_agent::lapin::options::QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                args,
            )
            .await
            .expect("legacy queue");
        let _ = conn.close(200, "declared".into()).await;
        assert!(self.has_legacy_queue().await);
    }

    async fn has(&self, queue: &str) -> bool {
        self.admin
            .queues(&self.vhost)
            .await
            .expect("queues")
            .iter()
            .any(|q| q.name == queue)
    }

    async fn users(&self) -> Vec<String> {
        self.admin
            .users_starting_with(&format!("agent-{}", self.id))
            .await
            .expect("users")
    }
}
