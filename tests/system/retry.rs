//! An order that failed only because a service it needed was down
//! (`UNAVAILABLE`) and holds nothing is retried by repeating it with the same
//! idempotency key: the retry is a fresh attempt, not a replay of the
//! failure. A failure of the order itself (funds, capacity, price) is still
//! replayed (`system::runway`).

use std::time::Duration;

use gpumarket::client::Client;

use crate::harness::*;
use crate::processes::Split;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_that_failed_on_a_dependency_is_retried_with_its_key() {
    let env = TestEnv::new().await;
    let mut split = Split::start(&env.config, &[]).await;
    let api = Client::new(&split.url("gateway"));
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let offer = listed_machine(&host, "RTX 4090", 2, "0.42").await;
    env.heartbeat_all();
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100").await;
    let held = || {
        (
            env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL"),
            env.count("SELECT coalesce(sum(gpus_allocated), 0)::bigint AS n FROM catalog.machines"),
        )
    };

    // Billing (the funds check) is down: the order fails UNAVAILABLE, and
    // its quota reservation is given back.
    split.kill("billing");
    let down = order(&renter, &offer, 1, "dep-down")
        .await
        .expect_err("billing down");
    assert_eq!(down.code, "UNAVAILABLE", "{}", down.message);
    assert_eq!(held(), (0, 0));
    // Still down: the retry fails the same way, holding nothing new.
    let again = order(&renter, &offer, 1, "dep-down")
        .await
        .expect_err("still down");
    assert_eq!(again.code, "UNAVAILABLE");
    assert_eq!(held(), (0, 0));

    // Billing is back: the same key places the order.
    split.spawn("billing", &["serve", "billing"]);
    split.wait_ready("billing").await;
    let placed = order(&renter, &offer, 1, "dep-down")
        .await
        .expect("retried once billing is back");
    assert_eq!(placed["status"], "provisioning");
    let id = placed["id"].as_str().expect("id").to_owned();
    assert_eq!(held(), (1, 1));
    // From now on the key names that order: a repeat answers it.
    let replay = order(&renter, &offer, 1, "dep-down").await.expect("replay");
    assert_eq!(replay["id"], placed["id"]);
    wait_running(&renter, &id, Duration::from_secs(60)).await;
    // The two failed attempts are kept, under their superseded keys.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM ordering.orders WHERE tenant_id = '{tenant}' \
             AND state = 'failed' AND failure_code = 'UNAVAILABLE' \
             AND idempotency_key LIKE 'dep-down#superseded:%'"
        )),
        2
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM ordering.orders WHERE tenant_id = '{tenant}'"
        )),
        3
    );

    drop(split);
    env.cleanup().await;
}
