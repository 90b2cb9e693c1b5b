//! Re-placement: an order by constraints whose first run cannot be
//! provisioned on its machine moves to the next matching machine with its
//! quota held all along; an order for a named offer, or one out of machines,
//! fails and holds nothing. The broken host is real state in the simulated
//! driver: GPU indices already bound by someone else, so every bind fails.

use std::time::Duration;

use gpumarket::client::Client;
use gpumarket::dev::Parts;
use serde_json::{Value, json};

use crate::harness::*;

const ALL: Parts = Parts {
    services: true,
    messaging: true,
    provisioner: true,
};
const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket";

/// A machine whose GPUs 0..n are bound to a stranger's instance: the
/// leftover of a cleanup that never happened, which no retry fixes.
fn break_machine(env: &TestEnv, machine: &str, gpus: i32) {
    for index in 0..gpus {
        env.exec(&format!(
            "INSERT INTO provisioner.sim_resources (machine_id, kind, name, instance_id) \
             VALUES ('{machine}', 'gpu', '{index}', gen_random_uuid())"
        ));
    }
}

async fn setup(env: &TestEnv, api: &Client, max_gpus: i32) -> (Client, Client) {
    let (host, _) = sign_up(api, &["HOST"]).await;
    let (renter, tenant) = sign_up(api, &["RENTER"]).await;
    let operator = env.operator(api).await;
    grant(&operator, &tenant, "1000").await;
    operator
        .run(
            "mutation($t: ID!, $n: Int!) { setTenantQuota(tenantId: $t, maxGpus: $n) { maxGpus } }",
            json!({ "t": tenant, "n": max_gpus }),
        )
        .await
        .expect("setTenantQuota");
    (host, renter)
}

async fn order(renter: &Client, input: Value) -> Value {
    let mut input = input;
    input["sshPublicKey"] = json!(KEY);
    input["idempotencyKey"] = json!(uuid::Uuid::now_v7().to_string());
    renter
        .run(
            "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id machineId status } }",
            json!({ "input": input }),
        )
        .await
        .expect("createOrder")["createOrder"]
        .clone()
}

async fn wait_status(renter: &Client, id: &str, status: &str) -> Value {
    eventually(
        &format!("instance {status}"),
        Duration::from_secs(60),
        || async {
            let i = renter
                .run(
                    "query($id: ID!) { instance(id: $id) { id status statusReason machineId pricePerGpuHour } }",
                    json!({ "id": id }),
                )
                .await
                .expect("instance")["instance"]
                .clone();
            (i["status"] == status).then_some(i)
        },
    )
    .await
}

/// What is still held, in every place that holds GPUs:
/// (catalog GPUs allocated, live allocations, live quota GPUs).
fn held(env: &TestEnv) -> (i64, i64, i64) {
    (
        env.count("SELECT coalesce(sum(gpus_allocated), 0)::bigint AS n FROM catalog.machines"),
        env.count("SELECT count(*) AS n FROM catalog.allocations WHERE released_at IS NULL"),
        env.count(
            "SELECT coalesce(sum(gpu_count), 0)::bigint AS n FROM quota.reservations WHERE released_at IS NULL",
        ),
    )
}

/// Resources of `instance` the simulated driver still has on `machine`.
fn left_on(env: &TestEnv, machine: &str, instance: &str) -> i64 {
    env.count(&format!(
        "SELECT count(*) AS n FROM provisioner.sim_resources \
         WHERE machine_id = '{machine}' AND instance_id = '{instance}'"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_run_that_fails_on_its_host_runs_on_the_next_with_its_quota_held() {
    let mut env = TestEnv::new().await;
    env.settings(|s: &mut provisioner::ProvisionerSettings| s.step_attempts = 2);
    let stack = env.start(ALL).await;
    let api = Client::new(&stack.gateway_url);
    // The quota is exactly the order: a move that re-admitted the new hold
    // before giving up the old one would be refused.
    let (host, renter) = setup(&env, &api, 2).await;

    let rtx = |price: &str| {
        (
            json!({ "gpuModel": "RTX 4090", "gpuCount": 2 }),
            json!({ "price": price }),
        )
    };
    let (spec, pricing) = rtx("0.29");
    let broken = spec_machine(&env, &host, spec, pricing).await;
    let (spec, pricing) = rtx("0.35");
    let good = spec_machine(&env, &host, spec, pricing).await;
    // Cheaper, but above the order's maximum: never a re-placement target.
    let (spec, pricing) = rtx("0.55");
    let too_dear = spec_machine(&env, &host, spec, pricing).await;
    // Another model: the quota is held per model, so never a target either.
    spec_machine(
        &env,
        &host,
        json!({ "gpuModel": "L40S", "gpuCount": 2 }),
        json!({ "price": "0.10" }),
    )
    .await;
    break_machine(&env, &broken, 2);

    let placed = order(
        &renter,
        json!({ "constraints": { "gpuModels": ["RTX 4090"] }, "gpuCount": 2, "maxPricePerGpuHour": "0.40" }),
    )
    .await;
    assert_eq!(placed["machineId"], broken.as_str(), "the cheapest first");
    let id = placed["id"].as_str().expect("id").to_owned();

    let running = wait_status(&renter, &id, "running").await;
    assert_eq!(running["machineId"], good.as_str());
    assert_eq!(running["pricePerGpuHour"], "0.35");
    assert_ne!(running["machineId"], too_dear.as_str());

    // One move, recorded with its reason; the worker ran a second attempt.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instance_transitions \
             WHERE instance_id = '{id}' AND from_state = 'provisioning' AND to_state = 'provisioning' \
               AND reason LIKE '%re-placed on machine {good}%'"
        )),
        1
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instances \
             WHERE id = '{id}' AND failed_machine_ids = ARRAY['{broken}'::uuid]"
        )),
        1
    );
    // Exactly the new machine's GPUs are held, once, in the catalog and in
    // the quota; the broken machine's are back.
    assert_eq!(held(&env), (2, 1, 2));
    assert_eq!(
        env.count(&format!(
            "SELECT gpus_allocated::bigint AS n FROM catalog.machines WHERE id = '{good}'"
        )),
        2
    );
    // The dead attempt's leftovers on the broken machine are cleaned up; the
    // stranger's bindings that broke it are not ours to touch.
    eventually(
        "broken machine cleaned",
        Duration::from_secs(30),
        || async { (left_on(&env, &broken, &id) == 0).then_some(()) },
    )
    .await;
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.sim_resources WHERE machine_id = '{broken}'"
        )),
        2
    );
    // Billing opens on the machine it runs on, at its rate.
    eventually("meter open", Duration::from_secs(30), || async {
        (env.count(&format!(
            "SELECT count(*) AS n FROM metering.intervals \
             WHERE instance_id = '{id}' AND run_seq = 1 AND price_per_hour = 0.70"
        )) == 1)
            .then_some(())
    })
    .await;

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_offer_or_an_order_out_of_machines_fails_and_holds_nothing() {
    let mut env = TestEnv::new().await;
    env.settings(|s: &mut provisioner::ProvisionerSettings| s.step_attempts = 2);
    let stack = env.start(ALL).await;
    let api = Client::new(&stack.gateway_url);
    let (host, renter) = setup(&env, &api, 8).await;

    let mut broken = Vec::new();
    for price in ["0.30", "0.31"] {
        let id = spec_machine(
            &env,
            &host,
            json!({ "gpuModel": "L40S", "gpuCount": 1 }),
            json!({ "price": price }),
        )
        .await;
        break_machine(&env, &id, 1);
        broken.push(id);
    }

    // Named offer: that machine or nothing.
    let named = order(
        &renter,
        json!({ "offerId": broken[0], "gpuCount": 1, "maxPricePerGpuHour": "1" }),
    )
    .await;
    let named_id = named["id"].as_str().expect("id").to_owned();
    let failed = wait_status(&renter, &named_id, "failed").await;
    assert_eq!(failed["machineId"], broken[0].as_str());
    eventually("named order releases", Duration::from_secs(30), || async {
        (held(&env) == (0, 0, 0)).then_some(())
    })
    .await;

    // By constraints: tried on both matching machines, then failed.
    let placed = order(
        &renter,
        json!({ "constraints": { "gpuModels": ["L40S"] }, "gpuCount": 1, "maxPricePerGpuHour": "1" }),
    )
    .await;
    let id = placed["id"].as_str().expect("id").to_owned();
    let failed = wait_status(&renter, &id, "failed").await;
    assert_eq!(failed["machineId"], broken[1].as_str(), "moved once");
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instance_transitions \
             WHERE instance_id = '{id}' AND to_state = 'provisioning'"
        )),
        1,
        "one re-placement"
    );
    eventually("everything released", Duration::from_secs(30), || async {
        (held(&env) == (0, 0, 0)).then_some(())
    })
    .await;
    // Both attempts' leftovers are cleaned off their machines.
    for machine in &broken {
        eventually("cleaned", Duration::from_secs(30), || async {
            (left_on(&env, machine, &id) == 0).then_some(())
        })
        .await;
    }
    // Nothing was billed.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM metering.intervals WHERE instance_id IN ('{id}', '{named_id}')"
        )),
        0
    );

    stack.stop().await;
    env.cleanup().await;
}
