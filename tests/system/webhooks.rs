//! Outbound webhooks end to end: a renter's endpoint receives its own
//! instance's lifecycle, signed so that the Standard Webhooks reference
//! library (`tests/webhooks/receiver.py`, Python `standardwebhooks`)
//! verifies it; a receiver that is down gets every message once it is
//! back, with the same `webhook-id`; another tenant's events never arrive;
//! addresses inside the platform's network are refused when saved and
//! again when a delivery connects.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gpumarket::client::Client;
use gpumarket::dev::Parts;
use serde_json::{Value, json};

use crate::harness::{self, TestEnv, eventually, grant, sign_up_with_token};

const LIMIT: Duration = Duration::from_secs(60);

/// The Python with `standardwebhooks` that `make test` installs
/// (deploy/local/ensure-services.sh).
fn python() -> String {
    std::env::var("GPUMARKET_TEST_PYTHON")
        .unwrap_or_else(|_| "/var/tmp/gpumarket-py/bin/python".to_owned())
}

/// A receiver process; killed when dropped.
pub struct Receiver {
    child: Child,
    pub port: u16,
    http: reqwest::Client,
}

impl Receiver {
    pub fn start() -> Receiver {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/webhooks/receiver.py");
        let mut child = Command::new(python())
            .arg(script)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the receiver (make test installs Python's standardwebhooks)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("receiver port");
        let port = line.trim().parse().unwrap_or_else(|_| {
            panic!("receiver did not start (is standardwebhooks installed?): {line:?}")
        });
        Receiver {
            child,
            port,
            http: reqwest::Client::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub async fn control(&self, path: &str, body: Value) {
        let status = self
            .http
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .expect("receiver control")
            .status();
        assert!(status.is_success(), "{path}: {status}");
    }

    pub async fn received(&self) -> Vec<Value> {
        self.http
            .get(self.url("/_received"))
            .send()
            .await
            .expect("received")
            .json()
            .await
            .expect("json")
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Settings for a test: local receivers, retries one second apart.
fn settings(allow_local: bool) -> webhooks::Settings {
    webhooks::Settings {
        schedule: vec![Duration::from_secs(1); 4],
        allow_local,
        max_endpoints_per_tenant: 3,
        request_timeout: Duration::from_secs(3),
        poll: Duration::from_millis(200),
        concurrency: 4,
        rotation_overlap: Duration::from_secs(3600),
        queue: "gpumarket.webhooks".into(),
    }
}

pub const CREATE: &str = "mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { secret endpoint { id url eventTypes enabled } } }";

async fn create_endpoint(client: &Client, url: &str, types: &[&str]) -> (String, String) {
    let data = client
        .run(
            CREATE,
            json!({ "input": { "url": url, "eventTypes": types } }),
        )
        .await
        .expect("createWebhookEndpoint");
    let created = &data["createWebhookEndpoint"];
    (
        created["endpoint"]["id"].as_str().expect("id").to_owned(),
        created["secret"].as_str().expect("secret").to_owned(),
    )
}

fn data_of(delivery: &Value) -> Value {
    serde_json::from_str(delivery["body"].as_str().expect("body")).expect("body json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renter_receives_its_own_lifecycle_signed_retried_and_never_anothers() {
    let env = TestEnv::new().await;
    let stack = env.start_with_webhooks(Parts::ALL, settings(true)).await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = harness::sign_up(&api, &["HOST"]).await;
    let offer = harness::listed_machine(&host, "RTX 4090", 2, "0.40").await;
    env.heartbeat_all();
    let operator = env.operator(&api).await;

    let (renter_a, tenant_a, _) = sign_up_with_token(&api, &["RENTER"]).await;
    let (renter_b, tenant_b, _) = sign_up_with_token(&api, &["RENTER"]).await;
    grant(&operator, &tenant_a, "100").await;
    grant(&operator, &tenant_b, "100").await;
    let (receiver_a, receiver_b) = (Receiver::start(), Receiver::start());
    let (endpoint_a, secret_a) = create_endpoint(&renter_a, &receiver_a.url("/hooks"), &[]).await;
    let (_, secret_b) = create_endpoint(&renter_b, &receiver_b.url("/hooks"), &[]).await;
    receiver_a
        .control("/_secret", json!({ "secret": secret_a }))
        .await;
    receiver_b
        .control("/_secret", json!({ "secret": secret_b }))
        .await;

    // Receiver A is down for the first two attempts of whatever comes first.
    receiver_a.control("/_fail", json!({ "count": 2 })).await;
    let a = harness::running_instance(&renter_a, &offer, 1, "wh-a").await;
    let b = harness::running_instance(&renter_b, &offer, 1, "wh-b").await;

    let got_a = eventually("A's created and running, delivered", LIMIT, || async {
        let got = receiver_a.received().await;
        let delivered: Vec<&str> = got
            .iter()
            .filter(|d| d["status"] == 204)
            .filter_map(|d| d["type"].as_str())
            .collect();
        (delivered.contains(&"instance.created") && delivered.contains(&"instance.running"))
            .then_some(got)
    })
    .await;
    // Every delivery verified with the reference library.
    assert!(got_a.iter().all(|d| d["verified"] == true), "{got_a:#?}");
    // Only A's instance, in its own sequence.
    for d in &got_a {
        let body = data_of(d);
        assert_eq!(body["data"]["tenant_id"], tenant_a.as_str(), "{body}");
        assert_eq!(body["data"]["instance_id"], a.as_str(), "{body}");
        assert_eq!(body["version"], 1);
    }
    // The receiver refused two attempts; every message was tried again
    // under its own id until it arrived, exactly once.
    let mut ids: Vec<&str> = got_a.iter().map(|d| d["id"].as_str().unwrap()).collect();
    ids.sort();
    ids.dedup();
    let mut failed = 0;
    for id in &ids {
        let codes: Vec<i64> = got_a
            .iter()
            .filter(|d| d["id"] == *id)
            .map(|d| d["status"].as_i64().unwrap())
            .collect();
        let (last, before) = codes.split_last().unwrap();
        assert_eq!(*last, 204, "{id}: {codes:?}");
        assert!(before.iter().all(|c| *c == 503), "{id}: {codes:?}");
        failed += before.len();
    }
    assert_eq!(failed, 2, "{got_a:#?}");
    let first = got_a[0]["id"].as_str().expect("id").to_owned();
    // Distinct messages have distinct ids, and each arrived exactly once.
    let delivered: Vec<&str> = got_a
        .iter()
        .filter(|d| d["status"] == 204)
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    let mut unique = delivered.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), delivered.len(), "{got_a:#?}");
    let sequences: Vec<i64> = got_a
        .iter()
        .filter(|d| d["status"] == 204)
        .map(|d| data_of(d)["data"]["sequence"].as_i64().unwrap())
        .collect();
    let mut sorted = sequences.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        sequences.len(),
        "one sequence number per event"
    );

    // B's receiver has B's instance only.
    let got_b = eventually("B's running, delivered", LIMIT, || async {
        let got = receiver_b.received().await;
        got.iter()
            .any(|d| d["type"] == "instance.running")
            .then_some(got)
    })
    .await;
    for d in &got_b {
        assert_eq!(d["verified"], true);
        assert_eq!(data_of(d)["data"]["tenant_id"], tenant_b.as_str());
        assert_eq!(data_of(d)["data"]["instance_id"], b.as_str());
    }

    // The delivery log shows the attempts of the message that failed twice.
    let log = renter_a
        .run(
            "query($e: ID) { webhookDeliveries(endpointId: $e) { webhookId eventType status attempts attemptLog { statusCode succeeded latencyMs } } }",
            json!({ "e": endpoint_a }),
        )
        .await
        .expect("webhookDeliveries");
    let entry = log["webhookDeliveries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["webhookId"] == first.as_str())
        .cloned()
        .expect("the first delivery in the log");
    assert_eq!(entry["status"], "DELIVERED");
    let codes: Vec<i64> = entry["attemptLog"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["statusCode"].as_i64().unwrap())
        .collect();
    assert_eq!(codes.first(), Some(&204), "newest first: {entry}");
    assert!(
        codes[1..].iter().all(|c| *c == 503) && codes.len() >= 2,
        "{entry}"
    );

    // B cannot see, test or delete A's endpoint.
    for (query, vars) in [
        (
            "mutation($id: ID!) { sendWebhookTest(endpointId: $id) { id } }",
            json!({ "id": endpoint_a }),
        ),
        (
            "mutation($id: ID!) { deleteWebhookEndpoint(id: $id) }",
            json!({ "id": endpoint_a }),
        ),
        (
            "mutation($id: ID!) { rotateWebhookSecret(id: $id) { secret } }",
            json!({ "id": endpoint_a }),
        ),
    ] {
        let err = renter_b
            .run(query, vars)
            .await
            .expect_err("another tenant's endpoint");
        assert_eq!(err.code, "NOT_FOUND", "{query}: {err:?}");
    }
    let listed = renter_b
        .run("{ webhookEndpoints { id } }", json!({}))
        .await
        .expect("list");
    assert_eq!(listed["webhookEndpoints"].as_array().unwrap().len(), 1);

    // Rotation: during the overlap both secrets sign, so a receiver on
    // either verifies.
    let rotated = renter_a
        .run(
            "mutation($id: ID!) { rotateWebhookSecret(id: $id) { secret endpoint { previousSecretUntil } } }",
            json!({ "id": endpoint_a }),
        )
        .await
        .expect("rotate");
    let new_secret = rotated["rotateWebhookSecret"]["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(new_secret, secret_a);
    assert!(rotated["rotateWebhookSecret"]["endpoint"]["previousSecretUntil"].is_string());
    for secret in [&new_secret, &secret_a] {
        receiver_a
            .control("/_secret", json!({ "secret": secret }))
            .await;
        let before = receiver_a.received().await.len();
        let ping = renter_a
            .run(
                "mutation($id: ID!) { sendWebhookTest(endpointId: $id) { webhookId } }",
                json!({ "id": endpoint_a }),
            )
            .await
            .expect("test ping");
        let id = ping["sendWebhookTest"]["webhookId"]
            .as_str()
            .unwrap()
            .to_owned();
        let got = eventually("the ping", LIMIT, || async {
            let got = receiver_a.received().await;
            (got.len() > before && got.iter().any(|d| d["id"] == id.as_str())).then_some(got)
        })
        .await;
        let ping = got.iter().find(|d| d["id"] == id.as_str()).unwrap();
        assert_eq!(ping["verified"], true, "signed for either secret: {ping}");
        assert_eq!(ping["type"], "webhook.test");
    }
    assert!(env.assert_outboxes_hold_only_published_kinds() >= 5);

    drop(stack);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_that_reach_inside_are_refused_when_saved_and_when_sent() {
    let env = TestEnv::new().await;
    // Production's policy: https only, public addresses only.
    let stack = env.start_with_webhooks(Parts::ALL, settings(false)).await;
    let api = Client::new(&stack.gateway_url);
    let (renter, tenant) = harness::sign_up(&api, &["RENTER"]).await;
    for (url, says) in [
        ("http://example.com/hook", "https"),
        ("https://127.0.0.1/hook", "127.0.0.1"),
        ("https://[::1]/hook", "::1"),
        (
            "https://169.254.169.254/latest/meta-data",
            "169.254.169.254",
        ),
        ("https://10.1.2.3/hook", "10.1.2.3"),
        ("https://[::ffff:192.168.0.1]/hook", "192.168.0.1"),
        ("https://localhost:9/hook", "localhost resolves to"),
        ("https://user:pw@example.com/hook", "user name"),
    ] {
        let err = renter
            .run(CREATE, json!({ "input": { "url": url } }))
            .await
            .expect_err(url);
        assert_eq!(err.code, "VALIDATION", "{url}: {err:?}");
        assert!(err.message.contains(says), "{url}: {}", err.message);
    }
    let err = renter
        .run(CREATE, json!({ "input": { "url": "https://example.com/", "eventTypes": ["instance.exploded"] } }))
        .await
        .expect_err("unknown type");
    assert_eq!(err.code, "VALIDATION");
    assert_eq!(env.count("SELECT count(*) AS n FROM webhooks.endpoints"), 0);

    // A name that resolved outside when it was saved and resolves inside
    // now (DNS rebinding): the delivery is refused at connect, and the
    // receiver on loopback hears nothing.
    let receiver = Receiver::start();
    let endpoint = uuid::Uuid::now_v7();
    env.exec(&format!(
        "INSERT INTO webhooks.endpoints (id, tenant_id, url, secret) VALUES \
         ('{endpoint}', '{tenant}', 'https://localhost:{}/hook', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')",
        receiver.port
    ));
    renter
        .run(
            "mutation($id: ID!) { sendWebhookTest(endpointId: $id) { id } }",
            json!({ "id": endpoint.to_string() }),
        )
        .await
        .expect("ping");
    let attempt = eventually("the refused attempt", LIMIT, || async {
        let log = renter
            .run(
                "{ webhookDeliveries { attemptLog { statusCode error } } }",
                json!({}),
            )
            .await
            .expect("log");
        log["webhookDeliveries"][0]["attemptLog"][0]
            .as_object()
            .cloned()
    })
    .await;
    assert!(attempt["statusCode"].is_null(), "{attempt:?}");
    let error = attempt["error"].as_str().unwrap_or_default();
    assert!(error.contains("resolves to"), "{error}");
    assert!(receiver.received().await.is_empty());

    // The endpoint limit is per tenant (3 in this test).
    let mut made = 0;
    let refused = loop {
        match renter
            .run(
                CREATE,
                json!({ "input": { "url": "https://93.184.215.14/hook" } }),
            )
            .await
        {
            Ok(_) => made += 1,
            Err(e) => break e,
        }
        assert!(made <= 3, "the limit did not hold");
    };
    assert_eq!(refused.code, "QUOTA_EXCEEDED", "{refused:?}");
    assert_eq!(made, 2, "one endpoint was already there");

    drop(stack);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_hears_its_machines_rented_and_released() {
    let env = TestEnv::new().await;
    let stack = env.start_with_webhooks(Parts::ALL, settings(true)).await;
    let api = Client::new(&stack.gateway_url);
    let (host, host_tenant) = harness::sign_up(&api, &["HOST"]).await;
    let offer = harness::listed_machine(&host, "RTX 4090", 2, "0.40").await;
    env.heartbeat_all();
    let receiver = Receiver::start();
    let (_, secret) = create_endpoint(
        &host,
        &receiver.url("/host"),
        &["machine.rented", "machine.released"],
    )
    .await;
    receiver
        .control("/_secret", json!({ "secret": secret }))
        .await;
    let operator = env.operator(&api).await;
    let (renter, tenant, _) = sign_up_with_token(&api, &["RENTER"]).await;
    grant(&operator, &tenant, "100").await;
    let id = harness::running_instance(&renter, &offer, 2, "wh-host").await;
    renter
        .run(
            "mutation($id: ID!) { destroyInstance(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await
        .expect("destroy");
    let got = eventually("rented then released", LIMIT, || async {
        let got = receiver.received().await;
        (got.iter().filter(|d| d["status"] == 204).count() >= 2).then_some(got)
    })
    .await;
    let delivered: Vec<Value> = got
        .iter()
        .filter(|d| d["status"] == 204)
        .map(data_of)
        .collect();
    let kinds: Vec<&str> = delivered
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"machine.rented") && kinds.contains(&"machine.released"),
        "{kinds:?}"
    );
    for b in &delivered {
        assert_eq!(b["data"]["host_tenant_id"], host_tenant.as_str());
        assert_eq!(b["data"]["machine_id"], offer.as_str());
        assert_eq!(b["data"]["gpu_count"], 2);
        assert_eq!(b["data"]["preempted"], false);
    }
    // The subscription held: no instance events for the host, and the
    // renter's own events never reach the host's endpoint.
    assert!(got.iter().all(|d| d["verified"] == true));
    assert_eq!(delivered.len(), 2, "{delivered:#?}");
    assert_eq!(
        delivered[0]["data"]["allocation_id"],
        delivered[1]["data"]["allocation_id"]
    );
    // Rented and released went out through the catalog's outbox.
    assert!(env.assert_outboxes_hold_only_published_kinds() >= 2);
    // The machine's own numbers order them, whatever order they came in.
    let sequence_of = |kind: &str| {
        delivered
            .iter()
            .find(|b| b["type"] == kind)
            .and_then(|b| b["data"]["sequence"].as_i64())
            .unwrap()
    };
    assert!(
        0 < sequence_of("machine.rented")
            && sequence_of("machine.rented") < sequence_of("machine.released"),
        "{delivered:#?}"
    );
    env.assert_sequenced(
        "catalog",
        &harness::MACHINE_EVENTS,
        harness::MACHINE_RESOURCE,
    );

    drop(stack);
    env.cleanup().await;
}

/// The webhook service killed while a receiver holds a delivery: the
/// attempt was never recorded, so the delivery comes due again when its
/// lease ends, and the next process sends it with the same `webhook-id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_cut_off_by_a_crash_is_sent_again_with_the_same_id() {
    let env = TestEnv::new().await;
    let parts = Parts {
        provisioner: false,
        ..Parts::ALL
    };
    let mut quick = settings(true);
    quick.request_timeout = Duration::from_secs(2);
    let stack = env.start_with_webhooks(parts, quick.clone()).await;
    let api = Client::new(&stack.gateway_url);
    let (renter, _) = harness::sign_up(&api, &["RENTER"]).await;
    let receiver = Receiver::start();
    let (endpoint, secret) = create_endpoint(&renter, &receiver.url("/crash"), &[]).await;
    receiver
        .control("/_secret", json!({ "secret": secret }))
        .await;
    receiver
        .control("/_hang", json!({ "count": 1, "seconds": 4 }))
        .await;
    let ping = renter
        .run(
            "mutation($id: ID!) { sendWebhookTest(endpointId: $id) { id webhookId } }",
            json!({ "id": endpoint }),
        )
        .await
        .expect("ping");
    let delivery = ping["sendWebhookTest"]["id"].as_str().unwrap().to_owned();
    let webhook_id = ping["sendWebhookTest"]["webhookId"]
        .as_str()
        .unwrap()
        .to_owned();
    // Claimed: its lease pushed the next attempt into the future.
    eventually("the delivery claimed", LIMIT, || async {
        (env.count(&format!(
            "SELECT count(*) AS n FROM webhooks.deliveries WHERE id = '{delivery}' AND next_attempt_at > now() + interval '2 seconds'"
        )) == 1)
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stack.stop().await;
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM webhooks.attempts WHERE delivery_id = '{delivery}'"
        )),
        0,
        "the cut-off attempt was never recorded"
    );

    let stack = env.start_with_webhooks(parts, quick).await;
    let got = eventually("sent again after the lease", LIMIT, || async {
        let got = receiver.received().await;
        (got.iter()
            .filter(|d| d["id"] == webhook_id.as_str())
            .count()
            >= 2)
            .then_some(got)
    })
    .await;
    let copies: Vec<&Value> = got
        .iter()
        .filter(|d| d["id"] == webhook_id.as_str())
        .collect();
    assert!(copies.iter().all(|d| d["verified"] == true), "{copies:#?}");
    eventually("recorded as delivered", LIMIT, || async {
        (env.count(&format!(
            "SELECT count(*) AS n FROM webhooks.deliveries WHERE id = '{delivery}' AND status = 'delivered'"
        )) == 1)
            .then_some(())
    })
    .await;

    drop(stack);
    env.cleanup().await;
}

/// An endpoint that fails every attempt for the whole schedule is disabled,
/// says why, and the tenant's other endpoint is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_keeps_failing_is_disabled_and_its_owner_told() {
    let env = TestEnv::new().await;
    let parts = Parts {
        provisioner: false,
        ..Parts::ALL
    };
    let mut short = settings(true);
    short.schedule = vec![Duration::from_secs(1); 2];
    let stack = env.start_with_webhooks(parts, short).await;
    let api = Client::new(&stack.gateway_url);
    let (renter, _) = harness::sign_up(&api, &["RENTER"]).await;
    let (failing, healthy) = (Receiver::start(), Receiver::start());
    let (bad, bad_secret) = create_endpoint(&renter, &failing.url("/down"), &[]).await;
    let (_, good_secret) =
        create_endpoint(&renter, &healthy.url("/up"), &["endpoint.disabled"]).await;
    failing
        .control("/_secret", json!({ "secret": bad_secret }))
        .await;
    failing.control("/_fail", json!({ "count": 1000 })).await;
    healthy
        .control("/_secret", json!({ "secret": good_secret }))
        .await;
    renter
        .run(
            "mutation($id: ID!) { sendWebhookTest(endpointId: $id) { id } }",
            json!({ "id": bad }),
        )
        .await
        .expect("ping");
    let told = eventually("the other endpoint told", LIMIT, || async {
        let got = healthy.received().await;
        got.into_iter().find(|d| d["type"] == "endpoint.disabled")
    })
    .await;
    assert_eq!(told["verified"], true);
    assert_eq!(data_of(&told)["data"]["endpoint_id"], bad.as_str());
    // The endpoint's first numbered event.
    assert_eq!(data_of(&told)["data"]["sequence"], 1);
    // One attempt and two retries, all refused.
    assert_eq!(failing.received().await.len(), 3);
    let listed = renter
        .run(
            "{ webhookEndpoints { id enabled disabledReason } webhookDeliveries { endpointId status attempts } }",
            json!({}),
        )
        .await
        .expect("list");
    let endpoint = listed["webhookEndpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == bad.as_str())
        .cloned()
        .unwrap();
    assert_eq!(endpoint["enabled"], false);
    let reason = endpoint["disabledReason"].as_str().unwrap_or_default();
    assert!(reason.contains("HTTP 503"), "{reason}");
    let delivery = listed["webhookDeliveries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["endpointId"] == bad.as_str())
        .cloned()
        .unwrap();
    assert_eq!(
        (delivery["status"].clone(), delivery["attempts"].clone()),
        (json!("FAILED"), json!(3))
    );

    drop(stack);
    env.cleanup().await;
}
