//! Spend control on the real stack: a monthly budget lowered under a running
//! rental stops it at the budget (overshooting by a settlement tick's burn
//! at most), and a low runway is announced on the broker once per crossing,
//! clearing after a top-up.

use contracts::ids::{InstanceId, TenantId};
use std::time::Duration;

use contracts::money;
use diesel::RunQueryDsl;
use gpumarket::dev::Parts;
use host_agent::lapin::options::{
    BasicGetOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use host_agent::lapin::types::FieldTable;
use host_agent::lapin::{Connection, ConnectionProperties};
use rust_decimal::Decimal;
use serde_json::{Value, json};

use crate::harness::*;

fn dec(v: &Value) -> Decimal {
    v.as_str()
        .unwrap_or_else(|| panic!("decimal string: {v}"))
        .parse()
        .expect("decimal")
}

#[derive(diesel::QueryableByName)]
struct Spent {
    #[diesel(sql_type = diesel::sql_types::Numeric)]
    spent: Decimal,
}

/// The tenant's usage charges this month as the ledger has them.
fn charged(env: &TestEnv, tenant: &str) -> Decimal {
    let rows: Vec<Spent> = diesel::sql_query(format!(
        "SELECT COALESCE(-sum(e.amount), 0) AS spent
           FROM billing.entries e
           JOIN billing.transactions t ON t.id = e.transaction_id
           JOIN billing.accounts a ON a.id = e.account_id
          WHERE t.kind = 'usage' AND a.kind = 'renter_balance' AND a.tenant_id = '{tenant}'"
    ))
    .load(&mut env.conn())
    .expect("charged");
    rows.first().map(|r| r.spent).unwrap_or_default()
}

fn month_spend(env: &TestEnv, tenant: &str) -> Decimal {
    let rows: Vec<Spent> = diesel::sql_query(format!(
        "SELECT COALESCE(sum(spent), 0) AS spent FROM billing.monthly_spend WHERE tenant_id = '{tenant}'"
    ))
    .load(&mut env.conn())
    .expect("monthly spend");
    rows.first().map(|r| r.spent).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monthly_budget_lowered_under_a_running_rental_stops_it_at_the_budget() {
    let mut env = TestEnv::new().await;
    env.settlement_interval_ms(500);
    // 900 USD per GPU-hour: a quarter a second, from plenty of credit, so
    // only the budget can stop it.
    let Rental {
        env,
        stack,
        renter,
        tenant,
        operator,
        offer,
    } = rental(env, Parts::ALL, "RTX 4090", 1, "900", "1000").await;
    let id = running_instance(&renter, &offer, 1, "capped").await;
    let spent_so_far = eventually("first charge", Duration::from_secs(30), || async {
        let c = charged(&env, &tenant);
        (c > Decimal::ZERO).then_some(c)
    })
    .await;
    // Four seconds' burn above what is spent now.
    let budget = spent_so_far + Decimal::ONE;
    operator
        .run(
            "mutation($t: ID!, $l: QuotaLimitsInput!) { setTenantQuota(tenantId: $t, limits: $l) { tenantId } }",
            json!({ "t": tenant, "l": { "maxGpus": 16, "monthlyBudget": budget.to_string() } }),
        )
        .await
        .expect("setTenantQuota");

    let stopped = eventually("stopped at the budget", Duration::from_secs(30), || async {
        let i = instance_status(&renter, &id).await;
        (i["status"] == "stopped").then_some(i)
    })
    .await;
    assert_eq!(
        stopped["statusReason"],
        "stopped: monthly spend cap reached"
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instance_transitions WHERE instance_id = '{id}' \
               AND to_state = 'stopping' AND reason = 'stopped: monthly spend cap reached'"
        )),
        1
    );
    let seconds = money::billed_seconds(
        chrono::DateTime::parse_from_rfc3339(stopped["runningAt"].as_str().expect("t0"))
            .expect("t0")
            .timestamp_micros(),
        chrono::DateTime::parse_from_rfc3339(stopped["stoppedAt"].as_str().expect("t1"))
            .expect("t1")
            .timestamp_micros(),
    );
    let whole = money::rate(seconds, Decimal::from(900));
    eventually("run settled in full", Duration::from_secs(30), || async {
        (charged(&env, &tenant) == whole).then_some(())
    })
    .await;
    // Billing's month-to-date spend is the ledger's, and the budget was
    // overshot by a few seconds' burn at most (the tick the copy of the
    // budget took to arrive, then the stop's way to ordering), never by the
    // rest of the credit.
    assert_eq!(month_spend(&env, &tenant), whole);
    assert!(
        whole >= budget,
        "stopped before the budget: {whole} < {budget}"
    );
    assert!(
        whole - budget <= Decimal::from(2),
        "budget {budget} overshot by {} (more than 8 s of burn)",
        whole - budget
    );
    // Announced once, and once stopped, nothing more is charged.
    assert_eq!(
        env.count(
            "SELECT count(*) AS n FROM billing.outbox WHERE routing_key = 'billing.balance.cap_reached'"
        ),
        1
    );
    assert_eq!(
        env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL"),
        0
    );

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_runway_is_announced_once_and_clears_after_a_top_up() {
    let mut env = TestEnv::new().await;
    env.settlement_interval_ms(300);
    env.runway_warning_seconds(600);
    // Orders need a minute of runway here, so one can start under the
    // warning.
    env.settings(|s: &mut ordering::OrderingSettings| s.min_runway_seconds = 60);
    // 900/h from 50: 200 s of runway, under the 600 s warning.
    let Rental {
        env,
        stack,
        renter,
        tenant,
        operator,
        offer,
    } = rental(env, Parts::ALL, "RTX 4090", 1, "900", "50").await;
    let stack_config = stack.config.clone();
    // A queue of our own on the events exchange (declared by the stack):
    // what an alerting consumer would see.
    let amqp = Connection::connect(&stack_config.amqp_url, ConnectionProperties::default())
        .await
        .expect("amqp");
    let channel = amqp.create_channel().await.expect("channel");
    let queue = format!("test.runway.{}", uuid::Uuid::now_v7());
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions {
                auto_delete: false,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declare");
    channel
        .queue_bind(
            queue.as_str().into(),
            stack_config.events_exchange.as_str().into(),
            "billing.runway.low".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");

    let _id = running_instance(&renter, &offer, 1, "low").await;
    let warning: Value = eventually("runway.low published", Duration::from_secs(30), || async {
        channel
            .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic_get")
            .map(|m| serde_json::from_slice::<Value>(&m.delivery.data).expect("json"))
    })
    .await;
    assert_eq!(warning["type"], "billing.runway.low");
    let payload = &warning["payload"];
    assert_eq!(payload["tenant_id"], tenant.as_str());
    assert_eq!(dec(&payload["burn_rate_per_hour"]), Decimal::from(900));
    let runway = payload["runway_seconds"].as_i64().expect("runway");
    assert!((1..=200).contains(&runway), "{payload}");
    assert_eq!(payload["warn_below_seconds"], 600);

    // Several more passes: still low, still one warning.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        env.count(
            "SELECT count(*) AS n FROM billing.outbox WHERE routing_key = 'billing.runway.low'"
        ),
        1
    );
    // A top-up to well over 600 s of burn clears the warning…
    grant(&operator, &tenant, "1000").await;
    eventually("warning cleared", Duration::from_secs(30), || async {
        (env.count("SELECT count(*) AS n FROM billing.runway_alerts") == 0).then_some(())
    })
    .await;
    let low = renter
        .run("{ runway { low } }", json!({}))
        .await
        .expect("runway")["runway"]["low"]
        .clone();
    assert_eq!(low, false);
    assert_eq!(
        env.count(
            "SELECT count(*) AS n FROM billing.outbox WHERE routing_key = 'billing.runway.low'"
        ),
        1
    );

    channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .expect("delete queue");
    stack.stop().await;
    env.cleanup().await;
}

/// The posting path on its own, without the watch: the usage charge that
/// reaches the copied cap announces it in its transaction, exactly once;
/// later charges and redeliveries do not announce again; the month's spend
/// is the sum of the charges, corrections included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charge_that_reaches_the_cap_announces_it_once() {
    use chrono::Utc;
    use contracts::Envelope;
    use contracts::events::UsageRecorded;
    use diesel::Connection;
    use uuid::Uuid;

    let env = TestEnv::new().await;
    let settings = billing::Settings::from_config(&env.config).expect("settings");
    let (tenant, host, interval) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    env.exec(&format!(
        "INSERT INTO billing.spend_caps (tenant_id, monthly_cap) VALUES ('{tenant}', 1.00)"
    ));
    // 1.44 an hour: 1000 s cost 0.40.
    let segment = |offset: i64, seconds: i64| {
        let usage = UsageRecorded {
            interval_id: interval,
            instance_id: InstanceId(Uuid::nil()),
            tenant_id: TenantId(tenant),
            host_tenant_id: TenantId(host),
            meter: contracts::states::Meter::Gpu,
            started_at: Utc::now(),
            ended_at: Utc::now(),
            seconds,
            price_per_hour: "1.44".parse().expect("price"),
            currency: "USD".into(),
            offset_seconds: offset,
            machine_id: None,
            gpu_model: None,
        };
        Envelope::new(
            contracts::events::kinds::USAGE_RECORDED,
            Utc::now(),
            Some(TenantId(tenant)),
            None,
            &contracts::events::MeteredUsage::from(usage),
        )
        .expect("envelope")
    };
    let apply = |envelope: &Envelope| {
        env.conn()
            .transaction::<_, diesel::result::Error, _>(|c| {
                billing::apply_event(c, envelope, &settings)
                    .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))
            })
            .expect("usage");
    };
    let announced = || {
        env.count(&format!(
            "SELECT count(*) AS n FROM billing.outbox WHERE routing_key = 'billing.balance.cap_reached' \
               AND body->>'tenant_id' = '{tenant}'"
        ))
    };
    apply(&segment(0, 1000));
    apply(&segment(1000, 1000));
    assert_eq!(announced(), 0, "0.80 of 1.00");
    let third = segment(2000, 1000);
    apply(&third);
    assert_eq!(announced(), 1, "1.20 of 1.00");
    apply(&third);
    apply(&segment(3000, 1000));
    assert_eq!(announced(), 1, "announced once per crossing");
    // A correction (a settlement ran ahead of a stop) takes spend back.
    apply(&segment(4000, -500));
    assert_eq!(
        month_spend(&env, &tenant.to_string()),
        "1.40".parse::<Decimal>().expect("spent")
    );
    assert_eq!(
        charged(&env, &tenant.to_string()),
        month_spend(&env, &tenant.to_string())
    );

    env.cleanup().await;
}
