//! Orders by constraints (auto-placement) and prices enforced at commit: the
//! cheapest matching offer with the GPUs free, the next one after a lost
//! race, INSUFFICIENT_CAPACITY when nothing matches, PRICE_ABOVE_MAX when the
//! machine's price at allocation is above the order's maximum, and the rates
//! actually billed echoed on the instance.

use contracts::api::{AllocateRequest, RentalType};
use contracts::endpoints;
use contracts::ids::OrderId;
use gpumarket::client::{Client, GraphQlError};
use gpumarket::dev::Parts;
use rust_decimal::Decimal;
use serde_json::{Value, json};

use crate::harness::*;

const SERVICES_ONLY: Parts = Parts::SERVICES;

const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket";
const FIELDS: &str = "id machineId status rentalType pricePerGpuHour pricePerHourTotal \
                      storagePricePerGbMonth bandwidthUpPricePerTb bandwidthDownPricePerTb currency";

async fn create(renter: &Client, input: Value) -> Result<Value, GraphQlError> {
    let mut input = input;
    input["sshPublicKey"] = json!(KEY);
    if input.get("idempotencyKey").is_none() {
        input["idempotencyKey"] = json!(uuid::Uuid::now_v7().to_string());
    }
    renter
        .run(
            &format!(
                "mutation($input: CreateOrderInput!) {{ createOrder(input: $input) {{ {FIELDS} }} }}"
            ),
            json!({ "input": input }),
        )
        .await
        .map(|d| d["createOrder"].clone())
}

async fn market(env: &TestEnv, api: &Client) -> (Client, Client, String, Client) {
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
    (host, renter, tenant, operator)
}

fn held(env: &TestEnv) -> (i64, i64, i64) {
    (
        env.count("SELECT coalesce(sum(gpus_allocated), 0)::bigint AS n FROM catalog.machines"),
        env.count("SELECT count(*) AS n FROM catalog.allocations WHERE released_at IS NULL"),
        env.count(
            "SELECT coalesce(sum(gpu_count), 0)::bigint AS n FROM quota.reservations WHERE released_at IS NULL",
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constraints_get_the_cheapest_matching_offer_and_the_billed_rates_are_echoed() {
    let env = TestEnv::new().await;
    let stack = env.start(SERVICES_ONLY).await;
    let api = Client::new(&stack.gateway_url);
    let (host, renter, _, _) = market(&env, &api).await;

    let pricey = spec_machine(
        &env,
        &host,
        json!({ "gpuModel": "RTX 4090", "gpuCount": 2, "region": "us-east" }),
        json!({ "price": "0.50", "storage": "0.15" }),
    )
    .await;
    let cheap = spec_machine(
        &env,
        &host,
        json!({ "gpuModel": "RTX 4090", "gpuCount": 2, "region": "eu-west" }),
        json!({ "price": "0.40", "storage": "0.12" }),
    )
    .await;
    let other_model = spec_machine(
        &env,
        &host,
        json!({ "gpuModel": "L40S", "gpuCount": 2, "region": "us-east" }),
        json!({ "price": "0.30" }),
    )
    .await;
    env.exec(
        "UPDATE catalog.machines SET bandwidth_up_price_per_tb = 2.5, bandwidth_down_price_per_tb = 1.25",
    );

    // The cheapest RTX 4090, whatever its region; the price actually billed
    // and the machine's storage and bandwidth rates are echoed.
    let key = uuid::Uuid::now_v7().to_string();
    let input = json!({ "constraints": { "gpuModels": ["rtx 4090"] }, "gpuCount": 2, "idempotencyKey": key });
    let first = create(&renter, input.clone()).await.expect("placed");
    assert_eq!(first["machineId"], cheap.as_str());
    assert_eq!(first["rentalType"], "on_demand");
    assert_eq!(first["pricePerGpuHour"], "0.4");
    assert_eq!(first["pricePerHourTotal"], "0.8");
    assert_eq!(first["storagePricePerGbMonth"], "0.12");
    assert_eq!(first["bandwidthUpPricePerTb"], "2.5");
    assert_eq!(first["bandwidthDownPricePerTb"], "1.25");
    assert_eq!(first["status"], "provisioning");
    // The same key and constraints: the same instance, nothing more held.
    let again = create(&renter, input).await.expect("repeat");
    assert_eq!(again["id"], first["id"]);
    // The same key with other constraints is a conflict.
    let e = create(
        &renter,
        json!({ "constraints": { "gpuModels": ["L40S"] }, "gpuCount": 2, "idempotencyKey": key }),
    )
    .await
    .expect_err("reused key");
    assert_eq!(e.code, "CONFLICT", "{e}");
    assert_eq!(held(&env), (2, 1, 2));

    // The cheap machine is full now: the next cheapest that matches.
    let second = create(
        &renter,
        json!({ "constraints": { "gpuModels": ["RTX 4090"], "regions": ["us-east", "eu-west"] }, "gpuCount": 1 }),
    )
    .await
    .expect("placed");
    assert_eq!(second["machineId"], pricey.as_str());
    assert_eq!(second["pricePerGpuHour"], "0.5");

    // Region and price constraints hold, and nothing matching is refused
    // with nothing held.
    let e = create(
        &renter,
        json!({ "constraints": { "gpuModels": ["RTX 4090"], "regions": ["eu-west"] }, "gpuCount": 1 }),
    )
    .await
    .expect_err("eu-west is full");
    assert_eq!(e.code, "INSUFFICIENT_CAPACITY", "{e}");
    let e = create(
        &renter,
        json!({ "constraints": { "gpuModels": ["RTX 4090"] }, "gpuCount": 1, "maxPricePerGpuHour": "0.45" }),
    )
    .await
    .expect_err("the only free 4090 costs 0.50");
    assert_eq!(e.code, "INSUFFICIENT_CAPACITY", "{e}");
    let e = create(
        &renter,
        json!({ "constraints": { "gpuModels": ["H100 80GB SXM"] }, "gpuCount": 1 }),
    )
    .await
    .expect_err("no such machine");
    assert_eq!(e.code, "INSUFFICIENT_CAPACITY", "{e}");
    assert_eq!(held(&env), (3, 2, 3));

    // Any model: the cheapest of all.
    let any = create(&renter, json!({ "constraints": {}, "gpuCount": 1 }))
        .await
        .expect("placed");
    assert_eq!(any["machineId"], other_model.as_str());

    // An offer and constraints, or neither: refused.
    let e = create(
        &renter,
        json!({ "offerId": other_model, "constraints": {}, "gpuCount": 1 }),
    )
    .await
    .expect_err("both");
    assert_eq!(e.code, "VALIDATION", "{e}");
    let e = create(&renter, json!({ "gpuCount": 1 }))
        .await
        .expect_err("neither");
    assert_eq!(e.code, "VALIDATION", "{e}");
    assert_eq!(held(&env), (4, 3, 4));

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_price_is_checked_when_the_gpus_are_allocated() {
    let env = TestEnv::new().await;
    let stack = env.start(SERVICES_ONLY).await;
    let api = Client::new(&stack.gateway_url);
    let (host, renter, tenant, _) = market(&env, &api).await;
    let offer = spec_machine(
        &env,
        &host,
        json!({ "gpuModel": "RTX 4090", "gpuCount": 4 }),
        json!({ "price": "0.40" }),
    )
    .await;

    // Above the maximum at order time.
    let e = create(
        &renter,
        json!({ "offerId": offer, "gpuCount": 1, "maxPricePerGpuHour": "0.35" }),
    )
    .await
    .expect_err("too dear");
    assert_eq!(e.code, "PRICE_ABOVE_MAX", "{e}");

    // The catalog checks the price under the machine's lock when it commits,
    // not a quote that may be stale: a host raising the price between the
    // renter's quote and the allocation gets the order refused.
    let catalog = platform::internal::InternalClient::new(
        stack.config.url("catalog"),
        stack.config.service_token.clone(),
    );
    env.exec("UPDATE catalog.machines SET price_per_gpu_hour = 0.45");
    let raised = catalog
        .call(
            endpoints::catalog::ALLOCATE,
            (),
            &AllocateRequest {
                continue_up_to_per_gpu_hour: Default::default(),
                reservation_id: Default::default(),
                mig_profile: None,
                order_id: OrderId(uuid::Uuid::now_v7()),
                tenant_id: tenant.parse().expect("tenant id"),
                machine_id: offer.parse().expect("offer id"),
                gpu_count: 1,
                rental_type: RentalType::OnDemand,
                bid_per_gpu_hour: None,
                max_price_per_gpu_hour: Some(Decimal::new(40, 2)),
                instance_id: None,
            },
        )
        .await;
    let e = raised.expect_err("raised above the quote");
    assert_eq!(e.code, contracts::ErrorCode::PriceAboveMax, "{}", e.message);
    assert!(e.message.contains("0.45"), "{}", e.message);
    assert_eq!(held(&env), (0, 0, 0));

    // Within the maximum the order is billed at the price at commit.
    let ok = create(
        &renter,
        json!({ "offerId": offer, "gpuCount": 1, "maxPricePerGpuHour": "0.50" }),
    )
    .await
    .expect("within max");
    assert_eq!(ok["pricePerGpuHour"], "0.45");
    assert_eq!(held(&env), (1, 1, 1));

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_constrained_orders_fill_the_cheapest_machines_first_and_never_double_book() {
    let env = TestEnv::new().await;
    let stack = env.start(SERVICES_ONLY).await;
    let api = Client::new(&stack.gateway_url);
    let (host, renter, _, _) = market(&env, &api).await;
    let mut machines = Vec::new();
    for (gpus, price) in [(2, "0.30"), (2, "0.40"), (4, "0.50")] {
        machines.push(
            spec_machine(
                &env,
                &host,
                json!({ "gpuModel": "A100 80GB SXM", "gpuCount": gpus }),
                json!({ "price": price }),
            )
            .await,
        );
    }
    let allocated = |id: &str| {
        env.count(&format!(
            "SELECT gpus_allocated::bigint AS n FROM catalog.machines WHERE id = '{id}'"
        ))
    };

    let race = |n: usize, wave: &'static str| {
        let renter = renter.clone();
        async move {
            let racers: Vec<_> = (0..n)
                .map(|i| {
                    let renter = renter.clone();
                    tokio::spawn(async move {
                        create(
                            &renter,
                            json!({ "constraints": { "gpuModels": ["A100 80GB SXM"] }, "gpuCount": 1,
                                    "idempotencyKey": format!("{wave}-{i}") }),
                        )
                        .await
                    })
                })
                .collect();
            let (mut won, mut lost) = (0, 0);
            for racer in racers {
                match racer.await.expect("join") {
                    Ok(_) => won += 1,
                    Err(e) if e.code == "INSUFFICIENT_CAPACITY" => lost += 1,
                    Err(e) => panic!("unexpected {e}"),
                }
            }
            (won, lost)
        }
    };

    // Five racing orders fit: the two cheapest machines fill before the dearest
    // gets any (a lost race moves on to the next cheapest, never further).
    assert_eq!(race(5, "first").await, (5, 0));
    assert_eq!(
        machines.iter().map(|m| allocated(m)).collect::<Vec<_>>(),
        vec![2, 2, 1]
    );
    // Then more orders than GPUs: the rest fill up, the others are refused.
    assert_eq!(race(9, "second").await, (3, 6));
    assert_eq!(
        machines.iter().map(|m| allocated(m)).collect::<Vec<_>>(),
        vec![2, 2, 4]
    );
    assert_eq!(held(&env), (8, 8, 8));
    assert_eq!(env.count("SELECT count(*) AS n FROM ordering.instances"), 8);
    // Every instance bills the price of the machine it landed on.
    assert_eq!(
        env.count(
            "SELECT count(*) AS n FROM ordering.instances i JOIN catalog.machines m ON m.id = i.machine_id
             WHERE i.price_per_gpu_hour <> m.price_per_gpu_hour"
        ),
        0
    );

    stack.stop().await;
    env.cleanup().await;
}
