//! Interruptible rentals: a bid at or above the machine's minimum; when an
//! on-demand order or a higher bid needs GPUs that bids hold, the catalog
//! preempts the lowest bids in the transaction that gives the GPUs to the
//! newcomer, and ordering stops those instances at that instant (billing
//! ends there). Never more GPUs than the machine has, whatever the race.

use std::time::Duration;

use chrono::{DateTime, Utc};
use gpumarket::client::{Client, GraphQlError};
use gpumarket::dev::Parts;
use serde_json::{Value, json};

use crate::harness::*;

const WITH_MESSAGING: Parts = Parts {
    services: true,
    messaging: true,
    provisioner: false,
};

const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket";

async fn create(
    renter: &Client,
    offer: &str,
    gpus: i32,
    bid: Option<&str>,
) -> Result<Value, GraphQlError> {
    let mut input = json!({ "offerId": offer, "gpuCount": gpus, "sshPublicKey": KEY,
                            "idempotencyKey": uuid::Uuid::now_v7().to_string() });
    if let Some(bid) = bid {
        input["rentalType"] = json!("INTERRUPTIBLE");
        input["bidPerGpuHour"] = json!(bid);
    }
    renter
        .run(
            "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id orderId status rentalType pricePerGpuHour } }",
            json!({ "input": input }),
        )
        .await
        .map(|d| d["createOrder"].clone())
}

async fn instance(renter: &Client, id: &str) -> Value {
    renter
        .run(
            "query($id: ID!) { instance(id: $id) { id status statusReason allowedActions runningAt stoppedAt preemptedAt } }",
            json!({ "id": id }),
        )
        .await
        .expect("instance")["instance"]
        .clone()
}

async fn wait_status(renter: &Client, id: &str, status: &str) -> Value {
    eventually(
        &format!("instance {status}"),
        Duration::from_secs(30),
        || async {
            let i = instance(renter, id).await;
            (i["status"] == status).then_some(i)
        },
    )
    .await
}

async fn setup(env: &TestEnv, api: &Client, gpus: i32) -> (Client, String) {
    let (host, _) = sign_up(api, &["HOST"]).await;
    let (renter, tenant) = sign_up(api, &["RENTER"]).await;
    let operator = env.operator(api).await;
    grant(&operator, &tenant, "100000").await;
    operator
        .run(
            "mutation($t: ID!) { setTenantQuota(tenantId: $t, maxGpus: 1000) { maxGpus } }",
            json!({ "t": tenant }),
        )
        .await
        .expect("setTenantQuota");
    let offer = spec_machine(
        env,
        &host,
        json!({ "gpuModel": "RTX 4090", "gpuCount": gpus }),
        json!({ "price": "1.00", "bid": "0.20" }),
    )
    .await;
    (renter, offer)
}

fn live_gpus(env: &TestEnv) -> (i64, i64) {
    (
        env.count("SELECT coalesce(sum(gpus_allocated), 0)::bigint AS n FROM catalog.machines"),
        env.count(
            "SELECT coalesce(sum(gpu_count), 0)::bigint AS n FROM catalog.allocations WHERE released_at IS NULL",
        ),
    )
}

fn quota_held(env: &TestEnv) -> i64 {
    env.count(
        "SELECT coalesce(sum(gpu_count), 0)::bigint AS n FROM quota.reservations WHERE released_at IS NULL",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higher_bids_and_on_demand_preempt_the_lowest_bids_only() {
    let env = TestEnv::new().await;
    let stack = env.start(WITH_MESSAGING).await;
    let api = Client::new(&stack.gateway_url);
    let (renter, offer) = setup(&env, &api, 2).await;

    let low = create(&renter, &offer, 1, Some("0.30"))
        .await
        .expect("low bid");
    assert_eq!(low["rentalType"], "interruptible");
    assert_eq!(low["pricePerGpuHour"], "0.3");
    let high = create(&renter, &offer, 1, Some("0.50"))
        .await
        .expect("high bid");

    // Below the minimum bid, or a bid on an on-demand order: refused.
    let e = create(&renter, &offer, 1, Some("0.10"))
        .await
        .expect_err("too low");
    assert_eq!(e.code, "VALIDATION", "{e}");
    assert!(e.message.contains("bidPerGpuHour"), "{e}");
    // An equal bid preempts nobody.
    let e = create(&renter, &offer, 1, Some("0.30"))
        .await
        .expect_err("equal");
    assert_eq!(e.code, "INSUFFICIENT_CAPACITY", "{e}");
    assert_eq!(live_gpus(&env), (2, 2));

    // A higher bid takes the lowest bid's GPU, and only that one.
    let middle = create(&renter, &offer, 1, Some("0.40"))
        .await
        .expect("middle bid");
    let preempted = wait_status(&renter, low["id"].as_str().unwrap(), "preempted").await;
    assert!(preempted["preemptedAt"].is_string());
    assert!(
        preempted["statusReason"]
            .as_str()
            .is_some_and(|r| r.contains("preempted")),
        "{preempted}"
    );
    assert_eq!(preempted["allowedActions"], json!(["destroy"]));
    assert_eq!(
        instance(&renter, high["id"].as_str().unwrap()).await["status"],
        "provisioning"
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM catalog.allocations WHERE order_id = '{}' AND preempted_by = '{}'",
            low["orderId"].as_str().unwrap(),
            middle["orderId"].as_str().unwrap()
        )),
        1
    );
    assert_eq!(live_gpus(&env), (2, 2));

    // On-demand outranks every bid: the lowest remaining (0.40) goes.
    let on_demand = create(&renter, &offer, 1, None).await.expect("on-demand");
    assert_eq!(on_demand["rentalType"], "on_demand");
    wait_status(&renter, middle["id"].as_str().unwrap(), "preempted").await;
    assert_eq!(
        instance(&renter, high["id"].as_str().unwrap()).await["status"],
        "provisioning"
    );

    // Two on-demand GPUs cannot come from one bid: refused, and the bid is
    // not preempted for nothing (all or nothing).
    let e = create(&renter, &offer, 2, None)
        .await
        .expect_err("only one bid left");
    assert_eq!(e.code, "INSUFFICIENT_CAPACITY", "{e}");
    assert_eq!(
        instance(&renter, high["id"].as_str().unwrap()).await["status"],
        "provisioning"
    );
    // No bid preempts on-demand.
    create(&renter, &offer, 1, None)
        .await
        .expect("second on-demand");
    wait_status(&renter, high["id"].as_str().unwrap(), "preempted").await;
    let e = create(&renter, &offer, 1, Some("9.00"))
        .await
        .expect_err("all on-demand");
    assert_eq!(e.code, "INSUFFICIENT_CAPACITY", "{e}");

    assert_eq!(live_gpus(&env), (2, 2));
    assert_eq!(
        env.count("SELECT count(*) AS n FROM ordering.preemptions"),
        3
    );
    // Preempted rentals gave their quota back.
    eventually("quota released", Duration::from_secs(20), || async {
        (quota_held(&env) == 2).then_some(())
    })
    .await;

    stack.stop().await;
    env.cleanup().await;
}

fn instant(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().expect("instant"))
        .expect("rfc3339")
        .with_timezone(&Utc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempted_instance_is_billed_until_the_preemption_instant() {
    let env = TestEnv::new().await;
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);
    let (renter, offer) = setup(&env, &api, 1).await;

    let bid = create(&renter, &offer, 1, Some("0.30")).await.expect("bid");
    let id = bid["id"].as_str().unwrap().to_owned();
    let running = wait_running(&renter, &id, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let on_demand = create(&renter, &offer, 1, None).await.expect("on-demand");

    let preempted = wait_status(&renter, &id, "preempted").await;
    let at = instant(&preempted["preemptedAt"]);
    assert_eq!(instant(&preempted["stoppedAt"]), at);
    // The instant is the catalog's, from the transaction that moved the GPU.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM catalog.allocations a JOIN ordering.instances i ON i.order_id = a.order_id
             WHERE i.id = '{id}' AND a.preempted_at = i.preempted_at"
        )),
        1
    );
    let usage = eventually("usage recorded", Duration::from_secs(30), || async {
        let u = renter
            .run(
                "query($id: ID) { usage(instanceId: $id) { meter billedSeconds startedAt endedAt pricePerHour } }",
                json!({ "id": id }),
            )
            .await
            .expect("usage");
        u["usage"]
            .as_array()
            .and_then(|all| all.iter().find(|i| i["billedSeconds"].is_i64()).cloned())
    })
    .await;
    let t0 = instant(&running["runningAt"]);
    assert_eq!(instant(&usage["startedAt"]), t0);
    assert_eq!(instant(&usage["endedAt"]), at);
    let seconds = (at - t0).num_microseconds().unwrap().div_euclid(1_000_000);
    assert!(seconds >= 1);
    assert_eq!(usage["billedSeconds"].as_i64(), Some(seconds));
    let rate: f64 = usage["pricePerHour"]
        .as_str()
        .expect("rate")
        .parse()
        .expect("decimal");
    assert!((rate - 0.3).abs() < 1e-9, "{usage}");

    // The newcomer gets the GPU once the worker has taken it off the
    // preempted instance.
    wait_running(
        &renter,
        on_demand["id"].as_str().unwrap(),
        Duration::from_secs(60),
    )
    .await;

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_on_demand_and_interruptible_orders_never_exceed_the_machine() {
    let env = TestEnv::new().await;
    let stack = env.start(WITH_MESSAGING).await;
    let api = Client::new(&stack.gateway_url);
    let (renter, offer) = setup(&env, &api, 8).await;

    let racers: Vec<_> = (0..48)
        .map(|i| {
            let renter = renter.clone();
            let offer = offer.clone();
            tokio::spawn(async move {
                let bid = format!("{:.2}", 0.20 + 0.05 * (i % 13) as f64);
                let bid = (i % 4 != 0).then_some(bid);
                create(&renter, &offer, 1, bid.as_deref()).await
            })
        })
        .collect();
    let mut won: i64 = 0;
    for racer in racers {
        match racer.await.expect("join") {
            Ok(_) => won += 1,
            Err(e) => assert_eq!(e.code, "INSUFFICIENT_CAPACITY", "{e}"),
        }
    }
    assert!(won >= 8, "{won}");
    // The machine ends full, never over: the counter equals the live holdings.
    assert_eq!(live_gpus(&env), (8, 8));
    // Every preemption was by a higher priority: on-demand, or a higher bid.
    assert_eq!(
        env.count(
            "SELECT count(*) AS n FROM catalog.allocations p JOIN catalog.allocations n ON n.order_id = p.preempted_by
             WHERE NOT (n.rental_type = 'on_demand' OR n.bid_per_gpu_hour > p.bid_per_gpu_hour)
                OR p.rental_type <> 'interruptible'"
        ),
        0
    );
    // Ordering agrees with the catalog once the preemptions are applied: the
    // live instances are exactly the live allocations, quota too.
    eventually("ordering caught up", Duration::from_secs(30), || async {
        let live = env.count(
            "SELECT count(*) AS n FROM ordering.instances WHERE state = 'provisioning'",
        );
        let matched = env.count(
            "SELECT count(*) AS n FROM ordering.instances i JOIN catalog.allocations a ON a.order_id = i.order_id
             WHERE i.state = 'provisioning' AND a.released_at IS NULL",
        );
        (live == 8 && matched == 8 && quota_held(&env) == 8).then_some(())
    })
    .await;
    assert_eq!(
        env.count("SELECT count(*) AS n FROM ordering.instances WHERE state = 'preempted'"),
        won - 8
    );

    stack.stop().await;
    env.cleanup().await;
}

async fn create_by_constraints(
    renter: &Client,
    gpus: i32,
    bid: Option<&str>,
) -> Result<Value, GraphQlError> {
    let mut input = json!({ "constraints": {}, "gpuCount": gpus, "sshPublicKey": KEY,
                            "idempotencyKey": uuid::Uuid::now_v7().to_string() });
    if let Some(bid) = bid {
        input["rentalType"] = json!("INTERRUPTIBLE");
        input["bidPerGpuHour"] = json!(bid);
    }
    renter
        .run(
            "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id machineId rentalType pricePerGpuHour } }",
            json!({ "input": input }),
        )
        .await
        .map(|d| d["createOrder"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_by_constraints_count_the_gpus_they_may_preempt() {
    let env = TestEnv::new().await;
    let stack = env.start(WITH_MESSAGING).await;
    let api = Client::new(&stack.gateway_url);
    let (renter, cheap) = setup(&env, &api, 2).await;
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let dear = spec_machine(
        &env,
        &host,
        json!({ "gpuModel": "RTX 4090", "gpuCount": 1 }),
        json!({ "price": "2.00", "bid": "0.20" }),
    )
    .await;

    let low = create(&renter, &cheap, 1, Some("0.30")).await.expect("low");
    let high = create(&renter, &cheap, 1, Some("0.50"))
        .await
        .expect("high");
    // The cheap machine has no GPU free, but an on-demand order outranks its
    // bids: it is still the cheapest place, and the lowest bid gives way.
    let on_demand = create_by_constraints(&renter, 1, None)
        .await
        .expect("on-demand");
    assert_eq!(on_demand["machineId"], cheap.as_str());
    wait_status(&renter, low["id"].as_str().unwrap(), "preempted").await;
    // A bid of 0.40 outranks nobody left on the cheap machine: it goes to the
    // free GPU of the other one.
    let bid = create_by_constraints(&renter, 1, Some("0.40"))
        .await
        .expect("bid");
    assert_eq!(bid["machineId"], dear.as_str());
    assert_eq!(bid["pricePerGpuHour"], "0.4");
    // Two on-demand GPUs: the cheap machine holds one on-demand and one
    // bid, the other has one GPU: nowhere, and nobody is preempted.
    let e = create_by_constraints(&renter, 2, None)
        .await
        .expect_err("nowhere");
    assert_eq!(e.code, "INSUFFICIENT_CAPACITY", "{e}");
    assert_eq!(
        instance(&renter, high["id"].as_str().unwrap()).await["status"],
        "provisioning"
    );
    assert_eq!(live_gpus(&env), (3, 3));

    stack.stop().await;
    env.cleanup().await;
}
