//! The funds check at order time counts what already runs: the balance must
//! cover the minimum runway (10 minutes by default) of the tenant's whole
//! GPU burn after the new order, not of the new order alone. Orders placed
//! one after another and orders placed at once both stop where the balance
//! stops; a refused order holds nothing.

use futures_util::future::join_all;
use gpumarket::dev::Parts;

use crate::harness::*;

async fn outcome(
    renter: &gpumarket::client::Client,
    offer: &str,
    key: String,
) -> Result<(), String> {
    order(renter, offer, 1, &key)
        .await
        .map(|_| ())
        .map_err(|e| e.code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_are_refused_once_the_balance_no_longer_covers_the_runway_of_all_of_them() {
    // 0.12 per GPU-hour: 10 minutes cost 0.02, so 0.05 covers two one-GPU
    // rentals side by side and not three.
    let Rental {
        env,
        stack,
        renter,
        tenant,
        offer,
        operator,
    } = rental(
        TestEnv::new().await,
        Parts::ALL,
        "RTX 4090",
        8,
        "0.12",
        "0.05",
    )
    .await;

    // In a row: two accepted, the six others refused.
    let mut results = Vec::new();
    for i in 0..8 {
        results.push(outcome(&renter, &offer, format!("row-{i}")).await);
    }
    let accepted = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(accepted, 2, "{results:?}");
    assert!(results[..2].iter().all(Result::is_ok), "{results:?}");
    for r in &results[2..] {
        assert_eq!(r.as_ref().unwrap_err(), "INSUFFICIENT_FUNDS");
    }
    // The refused ones hold nothing: two reservations, two GPUs.
    let held = |tenant: &str| {
        env.count(&format!(
            "SELECT count(*) AS n FROM quota.reservations \
             WHERE released_at IS NULL AND tenant_id = '{tenant}'"
        ))
    };
    assert_eq!(held(&tenant), 2);
    assert_eq!(
        env.count("SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines"),
        2
    );
    // Retrying a refused order with its key still refuses it.
    assert_eq!(
        outcome(&renter, &offer, "row-5".into()).await.unwrap_err(),
        "INSUFFICIENT_FUNDS"
    );

    // At once: another renter with the same balance sends eight together.
    let api = gpumarket::client::Client::new(&stack.gateway_url);
    let (other, other_tenant) = sign_up(&api, &["RENTER"]).await;
    grant(&operator, &other_tenant, "0.05").await;
    let results = join_all((0..8).map(|i| outcome(&other, &offer, format!("burst-{i}")))).await;
    let accepted = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(accepted, 2, "{results:?}");
    for r in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(r, "INSUFFICIENT_FUNDS");
    }
    assert_eq!(held(&other_tenant), 2);
    assert_eq!(
        env.count("SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines"),
        4
    );
    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_after_a_stop_counts_what_already_runs() {
    // As above: 0.05 covers two one-GPU rentals at 0.12 and not three.
    let Rental {
        env,
        stack,
        renter,
        tenant,
        offer,
        ..
    } = rental(
        TestEnv::new().await,
        Parts::ALL,
        "RTX 4090",
        4,
        "0.12",
        "0.05",
    )
    .await;
    let first = running_instance(&renter, &offer, 1, "first").await;
    let stopped = renter
        .run(
            "mutation($id: ID!) { stopInstance(id: $id) { status } }",
            serde_json::json!({ "id": first }),
        )
        .await
        .expect("stop");
    assert_eq!(stopped["stopInstance"]["status"], "stopped");
    // Two others run now: starting the first again would make three.
    outcome(&renter, &offer, "second".into())
        .await
        .expect("second");
    outcome(&renter, &offer, "third".into())
        .await
        .expect("third");
    let refused = renter
        .run(
            "mutation($id: ID!) { startInstance(id: $id) { status } }",
            serde_json::json!({ "id": first }),
        )
        .await
        .expect_err("start beyond the runway");
    assert_eq!(refused.code, "INSUFFICIENT_FUNDS", "{}", refused.message);
    // The refused start holds nothing: two reservations, two GPUs.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM quota.reservations \
             WHERE released_at IS NULL AND tenant_id = '{tenant}'"
        )),
        2
    );
    assert_eq!(
        env.count("SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines"),
        2
    );
    assert_eq!(instance_status(&renter, &first).await["status"], "stopped");
    stack.stop().await;
    env.cleanup().await;
}
