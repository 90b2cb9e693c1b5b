//! What an operator scrapes and follows: every service's `/metrics` carries
//! request, consumer, queue, outbox, provisioning and billing series after a
//! rental; and one order can be followed across services by the correlation
//! id its creator sent.

use std::time::Duration;

use gpumarket::dev::Parts;
use serde_json::{Value, json};

use crate::harness::*;

async fn scrape(base: &str) -> String {
    reqwest::get(format!("{base}/metrics"))
        .await
        .expect("scrape")
        .text()
        .await
        .expect("metrics body")
}

/// The sum of the samples of `name` whose labels include every pair of
/// `labels`; None when there is no such sample.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (label_part, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once("} ") {
                Some(split) => split,
                None => continue,
            },
            None => match rest.strip_prefix(' ') {
                Some(v) => ("", v),
                None => continue,
            },
        };
        if labels
            .iter()
            .all(|(k, v)| label_part.contains(&format!("{k}=\"{v}\"")))
        {
            let v: f64 = value.trim().parse().expect("sample value");
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

#[test]
fn the_sample_reader_reads_what_prometheus_writes() {
    let text = "# HELP x y\nx_total{a=\"1\",b=\"2\"} 3\nx_total{a=\"1\",b=\"3\"} 4\ny 5\n";
    assert_eq!(sample(text, "x_total", &[("a", "1")]), Some(7.0));
    assert_eq!(sample(text, "x_total", &[("b", "3")]), Some(4.0));
    assert_eq!(sample(text, "y", &[]), Some(5.0));
    assert_eq!(sample(text, "z", &[]), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rental_shows_on_every_services_metrics() {
    let mut env = TestEnv::new().await;
    env.settlement_interval_ms(300);
    let Rental {
        env,
        stack,
        renter,
        offer,
        ..
    } = rental(env, Parts::ALL, "RTX 4090", 2, "0.45", "100").await;
    let id = running_instance(&renter, &offer, 1, "observed").await;
    let config = stack.config.clone();

    // Requests: per service and route pattern, by status class.
    let gateway = scrape(&stack.gateway_url).await;
    let graphql = sample(
        &gateway,
        "gpumarket_http_requests_total",
        &[
            ("service", "gateway"),
            ("route", "/graphql"),
            ("method", "POST"),
            ("status", "2xx"),
        ],
    );
    assert!(graphql.is_some_and(|n| n > 0.0), "{gateway}");
    assert!(
        sample(
            &gateway,
            "gpumarket_http_request_duration_seconds_count",
            &[("service", "gateway"), ("route", "/graphql")],
        )
        .is_some_and(|n| n > 0.0)
    );
    let ordering = scrape(&config.url("ordering")).await;
    assert!(
        sample(
            &ordering,
            "gpumarket_http_requests_total",
            &[("service", "ordering")]
        )
        .is_some_and(|n| n > 0.0),
        "ordering's internal API served the order"
    );
    // No id in a label: the route is the pattern, never the path.
    for line in ordering
        .lines()
        .filter(|l| l.starts_with("gpumarket_http_request"))
    {
        assert!(!line.contains(&id), "{line}");
        let route = line
            .split("route=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("");
        assert!(
            route
                .split('/')
                .all(|segment| uuid::Uuid::parse_str(segment).is_err()),
            "{line}"
        );
    }

    // Provisioning: the steps the worker ran, with their durations.
    let steps = sample(
        &ordering,
        "gpumarket_provisioning_step_duration_seconds_count",
        &[("outcome", "ok")],
    );
    assert!(steps.is_some_and(|n| n > 0.0), "{ordering}");
    assert!(
        sample(
            &ordering,
            "gpumarket_provisioning_steps_total",
            &[("outcome", "ok")]
        )
        .is_some_and(|n| n > 0.0)
    );

    // Billing: usage is posted while the instance runs.
    let billing = eventually(
        "usage postings counted",
        Duration::from_secs(30),
        || async {
            let text = scrape(&config.url("billing")).await;
            sample(
                &text,
                "gpumarket_billing_usage_postings_total",
                &[("meter", "gpu")],
            )
            .is_some_and(|n| n > 0.0)
            .then_some(text)
        },
    )
    .await;
    assert!(
        sample(
            &billing,
            "gpumarket_billing_usage_amount_total",
            &[("meter", "gpu")]
        )
        .is_some_and(|n| n > 0.0)
    );

    // Consumers: handled messages per queue and kind, with their latency.
    let metering_queue = config
        .settings::<metering::MeteringSettings>()
        .unwrap()
        .queue
        .clone();
    let provisioner_queue = config
        .settings::<provisioner::ProvisionerSettings>()
        .unwrap()
        .queue
        .clone();
    let metering = scrape(&config.url("metering")).await;
    assert!(
        sample(
            &metering,
            "gpumarket_messages_consumed_total",
            &[("queue", &metering_queue), ("outcome", "ack")],
        )
        .is_some_and(|n| n > 0.0),
        "{metering}"
    );
    assert!(
        sample(
            &metering,
            "gpumarket_message_handling_duration_seconds_count",
            &[("queue", &metering_queue)],
        )
        .is_some_and(|n| n > 0.0)
    );

    // Queue depth from the management API, and the outbox backlog per
    // schema: gauges refreshed in the background every few seconds.
    let catalog = eventually(
        "queue and outbox gauges",
        Duration::from_secs(20),
        || async {
            let text = scrape(&config.url("catalog")).await;
            let ready = sample(
                &text,
                "gpumarket_queue_messages_ready",
                &[("queue", &provisioner_queue)],
            );
            let consumers = sample(
                &text,
                "gpumarket_queue_consumers",
                &[("queue", &metering_queue)],
            );
            let up = sample(&text, "gpumarket_queue_stats_up", &[]);
            let backlog = ["ordering", "metering", "billing", "catalog", "provisioner"]
                .iter()
                .all(|schema| {
                    sample(&text, "gpumarket_outbox_backlog", &[("schema", schema)]).is_some()
                        && sample(
                            &text,
                            "gpumarket_outbox_oldest_unpublished_seconds",
                            &[("schema", schema)],
                        )
                        .is_some_and(|s| s >= 0.0)
                });
            (ready.is_some_and(|n| n >= 0.0)
                && consumers.is_some_and(|n| n >= 1.0)
                && up == Some(1.0)
                && backlog)
                .then_some(text)
        },
    )
    .await;
    assert!(
        sample(
            &catalog,
            "gpumarket_outbox_published_total",
            &[("schema", "ordering")]
        )
        .is_some_and(|n| n > 0.0)
    );

    stack.stop().await;
    env.cleanup().await;
}

/// The envelopes in `<schema>.outbox` that carry `cid`.
fn outbox_rows_with(env: &TestEnv, schema: &str, cid: &str, routing_key: Option<&str>) -> i64 {
    let key = routing_key.map_or(String::new(), |k| format!(" AND routing_key = '{k}'"));
    env.count(&format!(
        "SELECT count(*) AS n FROM {schema}.outbox \
         WHERE body->>'correlation_id' = '{cid}'{key}"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_order_is_followed_across_services_by_its_correlation_id() {
    let mut env = TestEnv::new().await;
    // No settlement while it runs: periodic segments carry the order's id
    // too (`system::settlement_correlation`), but here they would run out
    // the credit and stop the instance before the renter does; the usage
    // this test follows is the segment the renter's stop closes.
    env.settlement_interval_ms(3_600_000);
    env.settings(|s: &mut ordering::OrderingSettings| s.min_runway_seconds = 1);
    let stack = env.start(Parts::ALL).await;
    let api = gpumarket::client::Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    // 900 per GPU-hour against 0.75 of credit: after 3 s the stop's charge
    // overdraws the balance and billing announces it, an outbox row of its own.
    let offer = listed_machine(&host, "RTX 4090", 1, "900").await;
    env.heartbeat_all();
    let (renter, tenant, token) = sign_up_with_token(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "0.75").await;

    let cid = format!("test-order-{}", uuid::Uuid::now_v7().simple());
    // The renter's client sends the order's id with each request about it.
    let gql = |query: &str, variables: Value| {
        reqwest::Client::new()
            .post(format!("{}/graphql", stack.gateway_url))
            .bearer_auth(&token)
            .header("x-correlation-id", &cid)
            .json(&json!({ "query": query, "variables": variables }))
            .send()
    };
    let response = gql(
        "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id } }",
        json!({ "input": { "offerId": offer, "gpuCount": 1, "idempotencyKey": "followed",
            "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket" } }),
    )
    .await
    .expect("createOrder");
    assert_eq!(
        response
            .headers()
            .get("x-correlation-id")
            .and_then(|v| v.to_str().ok()),
        Some(cid.as_str()),
        "the gateway echoes the id"
    );
    let body: Value = response.json().await.expect("body");
    let id = body["data"]["createOrder"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"))
        .to_owned();
    wait_running(&renter, &id, Duration::from_secs(30)).await;

    // Ordering wrote the provisioning command and the instance's events with
    // the id; the running event came back through the provisioner's step
    // reports, so the id crossed the worker too.
    eventually(
        "ordering's outbox carries the id",
        Duration::from_secs(20),
        || async {
            (outbox_rows_with(&env, "ordering", &cid, Some("ordering.instance.running")) > 0)
                .then_some(())
        },
    )
    .await;
    assert!(outbox_rows_with(&env, "ordering", &cid, None) >= 2);
    assert!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.outbox WHERE body->>'correlation_id' = '{cid}'"
        )) > 0,
        "the provisioner's step reports carry the id"
    );
    // Past the credit, then stopped: metering closes the interval and
    // records its usage, billing charges it and announces the overdraft,
    // both from consumers of messages that carry the id.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let stopped: Value = gql(
        "mutation($id: ID!) { stopInstance(id: $id) { id } }",
        json!({ "id": id }),
    )
    .await
    .expect("stopInstance")
    .json()
    .await
    .expect("stop body");
    assert!(stopped["errors"].is_null(), "{stopped}");
    eventually(
        "metering's outbox carries the id",
        Duration::from_secs(30),
        || async {
            (outbox_rows_with(&env, "metering", &cid, Some("metering.usage.recorded")) > 0)
                .then_some(())
        },
    )
    .await;
    eventually(
        "billing's outbox carries the id",
        Duration::from_secs(30),
        || async { (outbox_rows_with(&env, "billing", &cid, None) > 0).then_some(()) },
    )
    .await;

    stack.stop().await;
    env.cleanup().await;
}
