//! The walking skeleton's flow, end to end: a host lists a machine, a renter
//! rents it, stops it, and the bill is exactly the seconds between the two
//! instants the API reports.

use std::time::Duration;

use chrono::{DateTime, Utc};
use contracts::money;
use gpumarket::client::Client;
use gpumarket::dev::Parts;
use rust_decimal::Decimal;
use serde_json::json;

use crate::harness::*;

fn instant(v: &serde_json::Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().expect("instant"))
        .expect("rfc3339")
        .with_timezone(&Utc)
}

async fn error_code(result: Result<serde_json::Value, gpumarket::client::GraphQlError>) -> String {
    match result {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(e) => e.code,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rental_is_billed_for_exactly_the_seconds_between_running_and_stop() {
    let mut env = TestEnv::new().await;
    // Each service on its own database role: a query into another service's
    // schema would fail this test.
    env.config.db_role_per_service = true;
    // One posting for the whole run, so the ledger can be compared line by
    // line; settlement in segments has its own tests (`system::settlement`).
    env.settlement_interval_ms(3_600_000);
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);

    // Host: sign up, register, price, list.
    let (host, host_tenant) = sign_up(&api, &["HOST"]).await;
    // Its agent runs (simulated GPUs, real protocol): the offer is online because it reports.
    let offer = machine_with_agent(&stack, &host, "RTX 4090", 2, 24, "0.42").await;

    // Renter: sign up; without credit the order is refused and nothing is held.
    let (renter, renter_tenant) = sign_up(&api, &["RENTER"]).await;
    assert_eq!(
        error_code(order(&renter, &offer, 1, "no-credit").await).await,
        "INSUFFICIENT_FUNDS"
    );
    assert_eq!(
        env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL"),
        0
    );
    assert_eq!(
        env.count("SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines"),
        0
    );

    // Credit is an operator's act; a renter cannot grant it to itself.
    let forbidden = renter
        .run(
            "mutation($t: ID!) { grantCredit(tenantId: $t, amount: \"1000\", idempotencyKey: \"x\", reason: \"me\") { amount } }",
            json!({ "t": renter_tenant }),
        )
        .await;
    assert_eq!(error_code(forbidden).await, "FORBIDDEN");
    let operator = env.operator(&api).await;
    grant(&operator, &renter_tenant, "100").await;

    // Search: by model and max price.
    let found = renter
        .run(
            "query($f: OfferFilter) { offers(filter: $f) { nodes { id gpuModel gpusFree pricePerGpuHour } } }",
            json!({ "f": { "gpuModel": "RTX 4090", "maxPricePerGpuHour": "0.50" } }),
        )
        .await
        .expect("offers");
    let nodes = found["offers"]["nodes"].as_array().expect("nodes");
    assert!(
        nodes
            .iter()
            .any(|o| o["id"] == offer.as_str() && o["gpusFree"] == 2)
    );
    let too_cheap = renter
        .run(
            "query($f: OfferFilter) { offers(filter: $f) { nodes { id } } }",
            json!({ "f": { "gpuModel": "RTX 4090", "maxPricePerGpuHour": "0.41" } }),
        )
        .await
        .expect("offers");
    assert!(
        too_cheap["offers"]["nodes"]
            .as_array()
            .expect("nodes")
            .is_empty()
    );

    // Bad orders: clear codes, nothing held.
    assert_eq!(
        error_code(order(&renter, &offer, 0, "zero").await).await,
        "VALIDATION"
    );
    let unknown = uuid::Uuid::now_v7().to_string();
    assert_eq!(
        error_code(order(&renter, &unknown, 1, "unknown").await).await,
        "NOT_FOUND"
    );
    assert_eq!(
        error_code(order(&renter, &offer, 3, "too-many").await).await,
        "VALIDATION"
    );
    assert_eq!(
        error_code(order(&host, &offer, 1, "host-rents").await).await,
        "FORBIDDEN"
    );
    assert_eq!(
        env.count("SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines"),
        0
    );

    // The order; the same key returns the same order, a different request under it conflicts.
    let placed = order(&renter, &offer, 1, "order-1")
        .await
        .expect("createOrder");
    assert_eq!(placed["status"], "provisioning");
    assert_eq!(placed["rentalType"], "on_demand");
    assert_eq!(
        dec(&placed["pricePerGpuHour"]),
        "0.42".parse::<Decimal>().unwrap()
    );
    let id = placed["id"].as_str().expect("id").to_owned();
    let again = order(&renter, &offer, 1, "order-1").await.expect("repeat");
    assert_eq!(again["id"], id.as_str());
    assert_eq!(
        error_code(order(&renter, &offer, 2, "order-1").await).await,
        "CONFLICT"
    );

    let running = wait_running(&renter, &id, Duration::from_secs(30)).await;
    assert_eq!(running["allowedActions"], json!(["stop", "destroy"]));
    let gpus_free = renter
        .run(
            "query { offers(filter: {gpuModel: \"RTX 4090\"}) { nodes { id gpusFree } } }",
            json!({}),
        )
        .await
        .expect("offers");
    assert!(
        gpus_free["offers"]["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .any(|o| o["id"] == offer.as_str() && o["gpusFree"] == 1)
    );

    // Another tenant sees nothing and can stop nothing.
    let (stranger, _) = sign_up(&api, &["RENTER"]).await;
    let peek = stranger
        .run(
            "query($id: ID!) { instance(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await;
    assert_eq!(error_code(peek).await, "NOT_FOUND");
    let stop_other = stranger
        .run(
            "mutation($id: ID!) { stopInstance(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await;
    assert_eq!(error_code(stop_other).await, "NOT_FOUND");

    tokio::time::sleep(Duration::from_millis(2300)).await;
    let stopped = renter
        .run(
            "mutation($id: ID!) { stopInstance(id: $id) { status runningAt stoppedAt } }",
            json!({ "id": id }),
        )
        .await
        .expect("stopInstance")["stopInstance"]
        .clone();
    assert_eq!(stopped["status"], "stopped");
    let t0 = instant(&stopped["runningAt"]);
    let t1 = instant(&stopped["stoppedAt"]);
    let expected_seconds = (t1 - t0)
        .num_microseconds()
        .expect("micros")
        .div_euclid(1_000_000);
    assert!(expected_seconds >= 2, "ran {expected_seconds} s");

    // Metering: one interval with floor(T1 − T0) seconds.
    let usage = eventually("usage recorded", Duration::from_secs(20), || async {
        let u = renter
            .run(
                "query($id: ID) { usage(instanceId: $id) { billedSeconds startedAt endedAt pricePerHour } }",
                json!({ "id": id }),
            )
            .await
            .expect("usage");
        let intervals = u["usage"].as_array().cloned().unwrap_or_default();
        (intervals.len() == 1 && intervals[0]["billedSeconds"].is_i64()).then(|| intervals[0].clone())
    })
    .await;
    assert_eq!(usage["billedSeconds"].as_i64(), Some(expected_seconds));
    assert_eq!(instant(&usage["startedAt"]), t0);
    assert_eq!(instant(&usage["endedAt"]), t1);

    // Billing: renter debit = host credit + platform fee, to the last digit.
    let amount = money::rate(expected_seconds, "0.42".parse().unwrap());
    let split = money::split_fee(amount, "0.15".parse().unwrap());
    let balance = eventually("usage posted", Duration::from_secs(20), || async {
        let b = renter
            .run("{ balance { amount currency } }", json!({}))
            .await
            .expect("balance");
        let amount = dec(&b["balance"]["amount"]);
        (amount != Decimal::from(100)).then_some(b["balance"].clone())
    })
    .await;
    assert_eq!(dec(&balance["amount"]), Decimal::from(100) - amount);
    assert_eq!(balance["currency"], "USD");
    let earnings = host
        .run(
            "{ hostEarnings { total currency postings { gross fee net feeRate instanceId } } }",
            json!({}),
        )
        .await
        .expect("hostEarnings")["hostEarnings"]
        .clone();
    assert_eq!(dec(&earnings["total"]), split.host);
    let posting = &earnings["postings"][0];
    assert_eq!(dec(&posting["gross"]), amount);
    assert_eq!(dec(&posting["net"]), split.host);
    assert_eq!(dec(&posting["fee"]), split.fee);
    assert_eq!(posting["instanceId"], id.as_str());
    assert_eq!(
        env.count("SELECT count(*) AS n FROM billing.transactions WHERE kind = 'usage'"),
        1
    );
    assert_eq!(env.count("SELECT count(*) AS n FROM (SELECT 1 FROM billing.entries GROUP BY transaction_id HAVING sum(amount) <> 0) t"), 0);
    let _ = host_tenant;

    // The GPUs and the quota came back.
    assert_eq!(
        env.count("SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines"),
        0
    );
    assert_eq!(
        env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL"),
        0
    );
    // The simulated host unbound the GPUs and kept the disk.
    eventually(
        "GPUs unbound on the host",
        Duration::from_secs(10),
        || async {
            (env.count("SELECT count(*) AS n FROM provisioner.sim_resources WHERE kind = 'gpu'")
                == 0)
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        env.count("SELECT count(*) AS n FROM provisioner.sim_resources WHERE kind = 'volume'"),
        1
    );
    // Orders, running, usage, stops and provisioning steps went out, each
    // through the outbox of a service that declares it publishes it.
    assert!(env.assert_outboxes_hold_only_published_kinds() >= 5);

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_and_bad_requests_get_clear_codes() {
    let env = TestEnv::new().await;
    let stack = env.start(Parts::SERVICES).await;
    let api = Client::new(&stack.gateway_url);
    let (renter, _) = sign_up(&api, &["RENTER"]).await;

    // A read-only key reads but cannot rent; the secret is shown once.
    let created = renter
        .run(
            "mutation { createApiKey(input: {name: \"ci\", scopes: [READ], idempotencyKey: \"k\"}) { secret apiKey { prefix scopes } } }",
            json!({}),
        )
        .await
        .expect("createApiKey")["createApiKey"]
        .clone();
    let secret = created["secret"].as_str().expect("secret").to_owned();
    assert!(secret.starts_with(&format!(
        "gpm_{}_",
        created["apiKey"]["prefix"].as_str().expect("prefix")
    )));
    let replay = renter
        .run("mutation { createApiKey(input: {name: \"ci\", scopes: [READ], idempotencyKey: \"k\"}) { secret } }", json!({}))
        .await
        .expect("replay");
    assert!(replay["createApiKey"]["secret"].is_null());
    let keyed = api.with_token(secret);
    let me = keyed
        .run("{ me { scopes tenantRoles } instances { id } }", json!({}))
        .await
        .expect("me");
    assert_eq!(me["me"]["scopes"], json!(["READ"]));
    let offer = uuid::Uuid::now_v7().to_string();
    assert_eq!(
        error_code(order(&keyed, &offer, 1, "k").await).await,
        "FORBIDDEN"
    );

    // No token, a forged token, a malformed query.
    assert_eq!(
        error_code(api.run("{ me { email } }", json!({})).await).await,
        "UNAUTHENTICATED"
    );
    let forged = api.with_token("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl");
    assert_eq!(
        error_code(forged.run("{ me { email } }", json!({})).await).await,
        "UNAUTHENTICATED"
    );
    let unknown_key = api.with_token(format!("gpm_deadbeef_{}", "0".repeat(64)));
    assert_eq!(
        error_code(unknown_key.run("{ me { email } }", json!({})).await).await,
        "UNAUTHENTICATED"
    );
    let body = api.raw("{ me { email ", json!({})).await.expect("raw");
    assert!(
        body["errors"][0]["extensions"]["code"].is_string(),
        "{body}"
    );
    let bad_id = renter
        .run("query { instance(id: \"not-a-uuid\") { id } }", json!({}))
        .await;
    assert_eq!(error_code(bad_id).await, "VALIDATION");

    // A duplicate sign-up is a conflict and creates nothing.
    let before = env.count("SELECT count(*) AS n FROM quota.users");
    let me = renter.run("{ me { email } }", json!({})).await.expect("me");
    let dup = api
        .run(
            "mutation($i: SignUpInput!) { signUp(input: $i) { token } }",
            json!({ "i": { "email": me["me"]["email"], "password": PASSWORD, "tenantName": "x", "roles": ["RENTER"] } }),
        )
        .await;
    assert_eq!(error_code(dup).await, "CONFLICT");
    assert_eq!(env.count("SELECT count(*) AS n FROM quota.users"), before);

    // Probes and metrics on every service an operator would scrape.
    let http = reqwest::Client::new();
    // Every service of the registry, the gateway included.
    let bases: Vec<String> = gpumarket::services::names()
        .into_iter()
        .map(|name| stack.config.url(name))
        .collect();
    assert!(bases.contains(&stack.gateway_url));
    for base in &bases {
        for path in ["/healthz", "/readyz"] {
            let status = http
                .get(format!("{base}{path}"))
                .send()
                .await
                .expect(path)
                .status();
            assert!(status.is_success(), "{base}{path}: {status}");
        }
    }
    let metrics = http
        .get(format!("{}/metrics", stack.gateway_url))
        .send()
        .await
        .expect("metrics");
    assert!(
        metrics
            .text()
            .await
            .expect("body")
            .contains("gpumarket_http_requests_total")
    );

    stack.stop().await;
    env.cleanup().await;
}
