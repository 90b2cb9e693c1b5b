//! `instanceEvents` over a real WebSocket (graphql-transport-ws): the
//! history first, then live state changes and provisioning steps, each once;
//! only the instance's own tenant may subscribe.

use std::collections::HashSet;
use std::time::Duration;

use gpumarket::client::Client;
use gpumarket::dev::Parts;
use serde_json::{Value, json};

use crate::harness::{self, EventStream, Frame, TestEnv, grant, order, sign_up_with_token};

const LIMIT: Duration = Duration::from_secs(60);

fn to_state(e: &Value) -> Option<&str> {
    (e["kind"] == "state_changed").then(|| e["toState"].as_str().unwrap_or_default())
}

/// Every event streamed once: recorded events by `seq` (increasing), steps
/// by (job kind, step, status, attempt).
/// Reads until the instance is `running` and the run's last provisioning
/// step (the readiness check) has finished. Steps come straight from the
/// worker and state changes through ordering, so either may arrive first.
async fn until_provisioned(events: &mut EventStream) -> Vec<Value> {
    let running = std::cell::Cell::new(false);
    let ready = std::cell::Cell::new(false);
    events
        .until(LIMIT, |e| {
            if to_state(e) == Some("running") {
                running.set(true);
            }
            if e["kind"] == "provisioning_step"
                && e["step"]["step"] == "readiness_check"
                && e["step"]["status"] == "finished"
            {
                ready.set(true);
            }
            running.get() && ready.get()
        })
        .await
}

fn assert_no_repeats(events: &[Value]) {
    let mut last = 0;
    let mut steps = HashSet::new();
    for e in events {
        if let Some(seq) = e["seq"].as_i64() {
            assert!(seq > last, "seq {seq} after {last}: {events:#?}");
            last = seq;
        }
        if e["kind"] == "provisioning_step" {
            let s = &e["step"];
            let key = format!(
                "{}:{}:{}:{}",
                s["jobKind"], s["step"], s["status"], s["attempt"]
            );
            assert!(steps.insert(key.clone()), "step {key} twice: {events:#?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_events_stream_history_then_live_changes_and_steps_once() {
    let env = TestEnv::new().await;
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = harness::sign_up(&api, &["HOST"]).await;
    let offer = harness::listed_machine(&host, "RTX 4090", 2, "0.40").await;
    env.heartbeat_all();
    let (renter, tenant, token) = sign_up_with_token(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100").await;

    let instance = order(&renter, &offer, 1, "sub-1").await.expect("order");
    let id = instance["id"].as_str().expect("id").to_owned();

    // Subscribed after the order: the history supplies what came before.
    let mut events = EventStream::open(&stack.gateway_url, Some(&token), &id).await;
    let provisioned = until_provisioned(&mut events).await;
    let first = &provisioned[0];
    assert_eq!(first["seq"], 1);
    assert_eq!(to_state(first), Some("provisioning"), "{first}");
    assert_eq!(first["instance"]["rentalType"], "on_demand");
    let rate: rust_decimal::Decimal = first["instance"]["pricePerGpuHour"]
        .as_str()
        .expect("rate")
        .parse()
        .expect("decimal");
    assert_eq!(rate, rust_decimal::Decimal::new(4, 1));
    let steps: Vec<&Value> = provisioned
        .iter()
        .filter(|e| e["kind"] == "provisioning_step")
        .collect();
    assert!(
        steps.iter().any(|e| e["step"]["status"] == "started")
            && steps.iter().any(|e| e["step"]["status"] == "finished"),
        "provisioning steps before running: {provisioned:#?}"
    );
    let running = provisioned
        .iter()
        .find(|e| to_state(e) == Some("running"))
        .expect("running");
    assert_eq!(running["fromState"], "provisioning");
    assert_eq!(running["instance"]["status"], "running");

    // Live: stop, then start again (its steps arrive live too).
    renter
        .run(
            "mutation($id: ID!) { stopInstance(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await
        .expect("stop");
    let stopped = events
        .until(LIMIT, |e| to_state(e) == Some("stopped"))
        .await;
    let states: Vec<&str> = stopped.iter().filter_map(to_state).collect();
    assert_eq!(states, ["stopping", "stopped"], "{stopped:#?}");
    // Steps come straight from the workers and state changes through
    // ordering, so the two sources interleave; each is in order.
    let stopping = stopped
        .iter()
        .find(|e| to_state(e) == Some("stopping"))
        .expect("stopping");
    assert_eq!(stopping["reason"], "stop requested");

    renter
        .run(
            "mutation($id: ID!) { startInstance(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await
        .expect("start");
    let restarted = until_provisioned(&mut events).await;
    assert_eq!(
        restarted.iter().filter_map(to_state).next(),
        Some("provisioning"),
        "{restarted:#?}"
    );
    assert!(
        restarted
            .iter()
            .any(|e| e["kind"] == "provisioning_step" && e["step"]["jobKind"] != "provision"),
        "the start's own steps: {restarted:#?}"
    );

    let all: Vec<Value> = provisioned
        .into_iter()
        .chain(stopped)
        .chain(restarted)
        .collect();
    assert_no_repeats(&all);
    // Every recorded state change reached the subscriber.
    let recorded = env.count(&format!(
        "SELECT count(*) AS n FROM ordering.instance_events WHERE instance_id = '{id}' AND kind = 'state_changed'"
    ));
    let streamed = all.iter().filter(|e| e["kind"] == "state_changed").count() as i64;
    assert_eq!(streamed, recorded);

    // A second subscriber now gets the whole history, in order, at once.
    let mut late = EventStream::open(&stack.gateway_url, Some(&token), &id).await;
    let replay = late
        .until(LIMIT, |e| {
            e["seq"].as_i64() == all.iter().filter_map(|e| e["seq"].as_i64()).max()
        })
        .await;
    assert_no_repeats(&replay);
    assert_eq!(
        replay.iter().filter_map(to_state).collect::<Vec<_>>(),
        all.iter().filter_map(to_state).collect::<Vec<_>>()
    );

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_instances_tenant_may_subscribe() {
    let env = TestEnv::new().await;
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = harness::sign_up(&api, &["HOST"]).await;
    let offer = harness::listed_machine(&host, "RTX 4090", 2, "0.40").await;
    env.heartbeat_all();
    let (renter, tenant, _) = sign_up_with_token(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100").await;
    let instance = order(&renter, &offer, 1, "sub-2").await.expect("order");
    let id = instance["id"].as_str().expect("id").to_owned();

    let expect_error = |frame: Frame, code: &str| match frame {
        Frame::Next(payload) => {
            assert_eq!(
                payload["errors"][0]["extensions"]["code"], code,
                "{payload}"
            );
            assert!(payload["data"].is_null() || payload["data"]["instanceEvents"].is_null());
        }
        Frame::Error(payload) => assert_eq!(payload[0]["extensions"]["code"], code, "{payload}"),
        other => panic!("expected a {code} error, got {other:?}"),
    };

    // Another renter: the instance does not exist as far as it can tell.
    let (_, _, stranger) = sign_up_with_token(&api, &["RENTER"]).await;
    let mut other = EventStream::open(&stack.gateway_url, Some(&stranger), &id).await;
    expect_error(other.frame(LIMIT).await, "NOT_FOUND");

    // No token, and a forged one.
    let mut anonymous = EventStream::open(&stack.gateway_url, None, &id).await;
    expect_error(anonymous.frame(LIMIT).await, "UNAUTHENTICATED");
    // A forged token is refused at `connection_init`: the socket closes
    // before any subscription, instead of connecting as anonymous.
    let (_, refused) = EventStream::init(&stack.gateway_url, Some("not.a.jwt")).await;
    assert_eq!(refused["type"], "__closed", "{refused}");
    assert!(
        refused["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("token"),
        "{refused}"
    );
    // So is an API key that does not exist.
    let (_, refused) =
        EventStream::init(&stack.gateway_url, Some("gpm_live_0000000000000000000000")).await;
    assert_eq!(refused["type"], "__closed", "{refused}");

    // A malformed id is refused before anything is looked up.
    let mut bad = EventStream::open(&stack.gateway_url, Some(&stranger), "nope").await;
    expect_error(bad.frame(LIMIT).await, "VALIDATION");
    // So is a document that does not parse: the code is there over WebSocket too.
    let mut broken = EventStream::open_query(
        &stack.gateway_url,
        Some(&stranger),
        "subscription { instanceEvents(",
        json!({}),
    )
    .await;
    expect_error(broken.frame(LIMIT).await, "VALIDATION");

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_made_with_a_revoked_api_key_streams_nothing_more() {
    let env = TestEnv::new().await;
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = harness::sign_up(&api, &["HOST"]).await;
    let offer = harness::listed_machine(&host, "RTX 4090", 2, "0.40").await;
    env.heartbeat_all();
    let (renter, tenant, _) = sign_up_with_token(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100").await;
    let created = renter
        .run(
            "mutation { createApiKey(input: {name: \"events\", scopes: [READ], idempotencyKey: \"events\"}) { secret apiKey { id } } }",
            json!({}),
        )
        .await
        .expect("createApiKey")["createApiKey"]
        .clone();
    let secret = created["secret"].as_str().expect("secret").to_owned();
    let key_id = created["apiKey"]["id"].as_str().expect("id").to_owned();
    let instance = order(&renter, &offer, 1, "sub-key").await.expect("order");
    let id = instance["id"].as_str().expect("id").to_owned();

    // The key streams while it is valid.
    let mut events = EventStream::open(&stack.gateway_url, Some(&secret), &id).await;
    until_provisioned(&mut events).await;

    // Revoked: the next event is not sent; the subscription completes.
    renter
        .run(
            "mutation($id: ID!) { revokeApiKey(id: $id) { revokedAt } }",
            json!({ "id": key_id }),
        )
        .await
        .expect("revokeApiKey");
    renter
        .run(
            "mutation($id: ID!) { stopInstance(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await
        .expect("stop");
    loop {
        match events.frame(LIMIT).await {
            Frame::Next(payload) => {
                let event = &payload["data"]["instanceEvents"];
                // Provisioning's last events may still be on their way;
                // nothing of the stop may arrive.
                assert!(
                    event["kind"] == "provisioning_step" || to_state(event) == Some("running"),
                    "an event after the revocation: {payload}"
                );
            }
            Frame::Complete | Frame::Closed(..) => break,
            Frame::Error(payload) => panic!("{payload}"),
        }
    }
    drop(stack);
    env.cleanup().await;
}

/// One address may hold at most 32 subscription sockets open: the next
/// upgrade is refused with 429 and RATE_LIMITED, and a socket closed frees
/// its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_holds_a_bounded_number_of_sockets() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::{Error as WsError, Message};

    let env = TestEnv::new().await;
    let stack = env.start(Parts::ALL).await;
    let mut open = Vec::new();
    for _ in 0..32 {
        let (stream, ack) = EventStream::init(&stack.gateway_url, None).await;
        assert_eq!(ack["type"], "connection_ack", "{ack}");
        open.push(stream);
    }
    let connect = || async {
        let url = format!(
            "{}/graphql",
            stack.gateway_url.replacen("http://", "ws://", 1)
        );
        let mut request = url.into_client_request().expect("ws request");
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            "graphql-transport-ws".parse().expect("header"),
        );
        tokio_tungstenite::connect_async(request).await
    };
    match connect().await {
        Err(WsError::Http(response)) => {
            assert_eq!(response.status().as_u16(), 429);
            let body: Value =
                serde_json::from_slice(response.body().as_deref().unwrap_or_default())
                    .expect("JSON body");
            assert_eq!(
                body["errors"][0]["extensions"]["code"], "RATE_LIMITED",
                "{body}"
            );
        }
        Err(other) => panic!("expected 429, got {other}"),
        Ok(_) => panic!("the 33rd socket was accepted"),
    }
    // Closing one frees its place once the server has seen the close.
    let mut first = open.remove(0);
    first.close().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match connect().await {
            Ok((mut ws, _)) => {
                use futures_util::SinkExt;
                let _ = ws.send(Message::Close(None)).await;
                break;
            }
            Err(WsError::Http(r)) if r.status().as_u16() == 429 => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "a closed socket's place was never freed"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(other) => panic!("reconnecting: {other}"),
        }
    }
    drop(open);
    stack.stop().await;
    env.cleanup().await;
}
