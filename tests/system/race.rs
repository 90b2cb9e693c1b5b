//! Racing orders over real connections: capacity and quota are decided by
//! the database under concurrency, never overshot.

use gpumarket::client::Client;
use gpumarket::dev::Parts;
use serde_json::json;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_orders_never_get_more_gpus_than_a_machine_has() {
    let env = TestEnv::new().await;
    let Rental {
        env,
        stack,
        renter,
        tenant,
        operator,
        offer,
        ..
    } = rental(env, Parts::SERVICES, "H100 80GB SXM", 8, "2.49", "100000").await;
    operator
        .run(
            "mutation($t: ID!) { setTenantQuota(tenantId: $t, maxGpus: 1000) { maxGpus } }",
            json!({ "t": tenant }),
        )
        .await
        .expect("setTenantQuota");

    let racers: Vec<_> = (0..200)
        .map(|i| {
            let renter = renter.clone();
            let offer = offer.clone();
            tokio::spawn(async move { order(&renter, &offer, 1, &format!("race-{i}")).await })
        })
        .collect();
    let mut won = 0;
    let mut lost = 0;
    for racer in racers {
        match racer.await.expect("join") {
            Ok(_) => won += 1,
            Err(e) if e.code == "INSUFFICIENT_CAPACITY" => lost += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!((won, lost), (8, 192));
    assert_eq!(
        env.count("SELECT gpus_allocated::bigint AS n FROM catalog.machines"),
        8
    );
    assert_eq!(
        env.count("SELECT count(*) AS n FROM catalog.allocations WHERE released_at IS NULL"),
        8
    );
    assert_eq!(env.count("SELECT count(*) AS n FROM ordering.instances"), 8);
    // Losers gave their quota back.
    assert_eq!(env.count("SELECT coalesce(sum(gpu_count), 0)::bigint AS n FROM quota.reservations WHERE released_at IS NULL"), 8);

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_orders_never_exceed_a_tenants_gpu_quota() {
    let env = TestEnv::new().await;
    let stack = env.start(Parts::SERVICES).await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let mut offers = Vec::new();
    for _ in 0..4 {
        offers.push(listed_machine(&host, "L40S", 8, "0.89").await);
    }
    env.heartbeat_all();
    env.heartbeat_all();
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100000").await;
    operator
        .run(
            "mutation($t: ID!) { setTenantQuota(tenantId: $t, maxGpus: 5) { maxGpus } }",
            json!({ "t": tenant }),
        )
        .await
        .expect("setTenantQuota");

    let racers: Vec<_> = (0..24)
        .map(|i| {
            let renter = renter.clone();
            let offer = offers[i % offers.len()].clone();
            tokio::spawn(async move { order(&renter, &offer, 1, &format!("quota-{i}")).await })
        })
        .collect();
    let mut won = 0;
    for racer in racers {
        match racer.await.expect("join") {
            Ok(_) => won += 1,
            Err(e) => assert_eq!(e.code, "QUOTA_EXCEEDED", "{e}"),
        }
    }
    assert_eq!(won, 5);
    assert_eq!(
        env.count("SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines"),
        5
    );
    let quota = renter
        .run("{ tenantQuota { maxGpus gpusInUse } }", json!({}))
        .await
        .expect("tenantQuota");
    assert_eq!(
        quota["tenantQuota"],
        json!({ "maxGpus": 5, "gpusInUse": 5 })
    );

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_order_sent_concurrently_is_placed_once() {
    let env = TestEnv::new().await;
    let Rental {
        env,
        stack,
        renter,
        offer,
        ..
    } = rental(env, Parts::SERVICES, "A100 80GB SXM", 8, "1.29", "1000").await;

    let racers: Vec<_> = (0..12)
        .map(|_| {
            let renter = renter.clone();
            let offer = offer.clone();
            tokio::spawn(async move { order(&renter, &offer, 2, "one-order").await })
        })
        .collect();
    let mut ids = std::collections::HashSet::new();
    for racer in racers {
        let placed = racer
            .await
            .expect("join")
            .expect("every retry gets the order");
        ids.insert(placed["id"].as_str().expect("id").to_owned());
    }
    assert_eq!(ids.len(), 1, "one instance for one idempotency key");
    assert_eq!(
        env.count("SELECT gpus_allocated::bigint AS n FROM catalog.machines"),
        2
    );
    assert_eq!(env.count("SELECT count(*) AS n FROM ordering.orders"), 1);
    assert_eq!(env.count("SELECT coalesce(sum(gpu_count), 0)::bigint AS n FROM quota.reservations WHERE released_at IS NULL"), 2);

    stack.stop().await;
    env.cleanup().await;
}
