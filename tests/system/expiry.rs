//! Deadlines of ordering's in-progress states: orders whose `createOrder`
//! request died mid-saga fail past their deadline and give back the quota
//! and GPUs they held (orders within the deadline are left alone), and a
//! stop interrupted half-way is finished.

use contracts::ids::{MachineId, OrderId, TenantId};
use std::time::Duration;

use contracts::api::{AllocateRequest, QuotaReservation, RentalType, ReserveQuotaRequest};
use contracts::endpoints;
use gpumarket::dev::Parts;
use platform::internal::InternalClient;
use rust_decimal::Decimal;
use serde_json::json;
use uuid::Uuid;

use crate::harness::*;

const SERVICES_ONLY: Parts = Parts::SERVICES;

/// An order exactly as a request that died after taking its quota and GPUs
/// leaves it: `allocating`, holdings taken, no instance; last touched
/// `age_seconds` ago.
async fn abandoned_order(
    env: &TestEnv,
    config: &platform::Config,
    tenant: Uuid,
    machine: Uuid,
    key: &str,
    age_seconds: i64,
) -> Uuid {
    let order = Uuid::now_v7();
    let user: String = {
        #[derive(diesel::QueryableByName)]
        struct U {
            #[diesel(sql_type = diesel::sql_types::Text)]
            id: String,
        }
        use diesel::RunQueryDsl;
        let u: U = diesel::sql_query(format!(
            "SELECT id::text AS id FROM quota.users WHERE tenant_id = '{tenant}' LIMIT 1"
        ))
        .get_result(&mut env.conn())
        .expect("user");
        u.id
    };
    env.exec(&format!(
        "INSERT INTO ordering.orders (id, tenant_id, user_id, idempotency_key, request_fingerprint, \
           offer_id, gpu_count, price_per_gpu_hour, currency, rental_type, state, gpu_model, updated_at) \
         VALUES ('{order}', '{tenant}', '{user}', '{key}', 'fp', '{machine}', 2, 0.5, 'USD', \
           'on_demand', 'allocating', 'RTX 4090', now() - interval '{age_seconds} seconds')"
    ));
    let quota = InternalClient::new(config.url("quota"), &config.service_token);
    let catalog = InternalClient::new(config.url("catalog"), &config.service_token);
    let _: QuotaReservation = quota
        .call(
            contracts::endpoints::quota::RESERVE,
            (),
            &ReserveQuotaRequest {
                gpu_eighths: None,
                order_id: OrderId(order),
                tenant_id: TenantId(tenant),
                gpu_count: 2,
                gpu_model: "RTX 4090".into(),
                hourly_rate: Decimal::ONE,
                team_id: None,
                renews: None,
                moves: None,
            },
        )
        .await
        .expect("reserve");
    let allocation = catalog
        .call(
            endpoints::catalog::ALLOCATE,
            (),
            &AllocateRequest {
                continue_up_to_per_gpu_hour: Default::default(),
                reservation_id: Default::default(),
                mig_profile: None,
                order_id: OrderId(order),
                tenant_id: TenantId(tenant),
                machine_id: MachineId(machine),
                gpu_count: 2,
                rental_type: RentalType::OnDemand,
                bid_per_gpu_hour: None,
                max_price_per_gpu_hour: None,
                instance_id: None,
            },
        )
        .await
        .expect("allocate");
    assert!(!allocation.released);
    order
}

fn held_by(env: &TestEnv, order: Uuid) -> (i64, i64) {
    (
        env.count(&format!(
            "SELECT count(*) AS n FROM catalog.allocations WHERE order_id = '{order}' AND released_at IS NULL"
        )),
        env.count(&format!(
            "SELECT count(*) AS n FROM quota.reservations WHERE order_id = '{order}' AND released_at IS NULL"
        )),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_abandoned_mid_saga_expires_and_gives_back_what_it_held() {
    let Rental {
        env,
        stack,
        renter,
        tenant,
        offer,
        ..
    } = rental(
        TestEnv::new().await,
        SERVICES_ONLY,
        "RTX 4090",
        8,
        "0.50",
        "100",
    )
    .await;
    let tenant: Uuid = tenant.parse().expect("tenant id");
    let machine: Uuid = offer.parse().expect("machine id");

    let old = abandoned_order(&env, &stack.config, tenant, machine, "dead-request", 3600).await;
    let fresh = abandoned_order(&env, &stack.config, tenant, machine, "live-request", 0).await;
    assert_eq!(held_by(&env, old), (1, 1));
    assert_eq!(
        env.count(&format!(
            "SELECT gpus_allocated::bigint AS n FROM catalog.machines WHERE id = '{machine}'"
        )),
        4
    );

    eventually("expired and released", Duration::from_secs(30), || async {
        (env.count(&format!(
            "SELECT count(*) AS n FROM ordering.orders WHERE id = '{old}' AND state = 'failed' \
               AND expired_at IS NOT NULL AND holdings_released_at IS NOT NULL"
        )) == 1)
            .then_some(())
    })
    .await;
    assert_eq!(held_by(&env, old), (0, 0));
    // The order within its deadline is untouched: its request may still be
    // running.
    assert_eq!(held_by(&env, fresh), (1, 1));
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM ordering.orders WHERE id = '{fresh}' AND state = 'allocating'"
        )),
        1
    );
    assert_eq!(
        env.count(&format!(
            "SELECT gpus_allocated::bigint AS n FROM catalog.machines WHERE id = '{machine}'"
        )),
        2
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instances WHERE order_id = '{old}'"
        )),
        0
    );

    // The renter's quota usage shows only the live order's GPUs.
    let quota = renter
        .run("{ tenantQuota { gpusInUse } }", json!({}))
        .await
        .expect("tenantQuota");
    assert_eq!(quota["tenantQuota"]["gpusInUse"], 2);

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_interrupted_half_way_is_finished() {
    let Rental {
        env,
        stack,
        renter,
        offer,
        ..
    } = rental(
        TestEnv::new().await,
        Parts {
            services: true,
            messaging: true,
            provisioner: true,
        },
        "RTX 4090",
        2,
        "0.50",
        "100",
    )
    .await;
    let id = running_instance(&renter, &offer, 2, "interrupted-stop").await;

    // What a stop that died after its first transaction leaves: T1 recorded,
    // `stopping`, the GPUs and quota still held.
    env.exec(&format!(
        "UPDATE ordering.instances SET state = 'stopping', stopped_at = now() - interval '2 minutes', \
           updated_at = now() - interval '2 minutes', version = version + 1 WHERE id = '{id}'"
    ));
    let held = || {
        (
            env.count("SELECT count(*) AS n FROM catalog.allocations WHERE released_at IS NULL"),
            env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL"),
        )
    };
    assert_eq!(held(), (1, 1));

    let stopped = eventually("stop finished", Duration::from_secs(30), || async {
        let i = instance_status(&renter, &id).await;
        (i["status"] == "stopped").then_some(i)
    })
    .await;
    assert_eq!(stopped["allowedActions"], json!(["start", "destroy"]));
    assert_eq!(held(), (0, 0));

    stack.stop().await;
    env.cleanup().await;
}
