//! Duplicated, reordered and re-sent lifecycle and usage events give the same
//! usage, the same ledger and the same invoice. The real consumer handlers run against real
//! Postgres, delivered in a seeded random order (a failing seed is printed
//! and replays exactly); the broker path itself is covered by the flow test.

use chrono::{Duration as ChronoDuration, TimeZone, Utc};
use contracts::events::{InstanceRunning, InstanceStopped, USAGE_RECORDED};
use contracts::ids::{InstanceId, MachineId, TenantId};
use contracts::{Envelope, money};
use diesel::{Connection, PgConnection, RunQueryDsl};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rust_decimal::Decimal;
use uuid::Uuid;

use crate::harness::TestEnv;

const SEEDS: u64 = 25;

fn deliver_metering(conn: &mut PgConnection, envelope: &Envelope) {
    conn.transaction::<_, diesel::result::Error, _>(|c| {
        platform::consumer::apply_once(c, metering::SCHEMA, envelope, |c, e| {
            metering::apply_event(c, e, "events")
        })
        .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))?;
        Ok(())
    })
    .expect("metering handler");
}

fn deliver_billing(conn: &mut PgConnection, envelope: &Envelope, settings: &billing::Settings) {
    conn.transaction::<_, diesel::result::Error, _>(|c| {
        platform::consumer::apply_once(c, billing::SCHEMA, envelope, |c, e| {
            billing::apply_event(c, e, settings)
        })
        .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))?;
        Ok(())
    })
    .expect("billing handler");
}

#[derive(diesel::QueryableByName)]
struct Body {
    #[diesel(sql_type = diesel::sql_types::Jsonb)]
    body: serde_json::Value,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicated_and_reordered_events_bill_each_second_once() {
    let env = TestEnv::new().await;
    let mut conn = env.conn();
    let settings = billing::Settings {
        fee_rate: "0.15".parse().unwrap(),
        currency: "USD".into(),
        events_exchange: "events".into(),
        downtime_credit_multiple: rust_decimal::Decimal::ONE,
    };

    for seed in 0..SEEDS {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let renter = Uuid::now_v7();
        let host = Uuid::now_v7();
        let mut expected_total = Decimal::ZERO;
        let mut lifecycle = Vec::new();
        for _ in 0..4 {
            let instance = Uuid::now_v7();
            let price: Decimal = Decimal::new(rng.gen_range(1..500_000), 5);
            let gpus = rng.gen_range(1..=8);
            let t0 = Utc.timestamp_opt(1_790_000_000, 0).single().expect("t0")
                + ChronoDuration::microseconds(rng.gen_range(0..10_000_000_000));
            let t1 = t0 + ChronoDuration::microseconds(rng.gen_range(0..100_000_000_000));
            let running = InstanceRunning {
                instance_id: InstanceId(instance),
                tenant_id: TenantId(renter),
                host_tenant_id: TenantId(host),
                machine_id: MachineId(Uuid::now_v7()),
                gpu_model: "RTX_4090".into(),
                gpu_count: gpus,
                rental_type: contracts::api::RentalType::OnDemand,
                price_per_gpu_hour: price,
                currency: "USD".into(),
                run_seq: 1,
                running_at: t0,
            };
            let stopped = InstanceStopped {
                instance_id: InstanceId(instance),
                tenant_id: TenantId(renter),
                run_seq: 1,
                stopped_at: t1,
                reason: "stop requested".into(),
            };
            let seconds = money::billed_seconds(t0.timestamp_micros(), t1.timestamp_micros());
            expected_total += money::rate(seconds, price * Decimal::from(gpus));
            let r = Envelope::new(
                contracts::events::kinds::INSTANCE_RUNNING,
                t0,
                Some(TenantId(renter)),
                None,
                &running,
            )
            .expect("envelope");
            let s = Envelope::new(
                contracts::events::kinds::INSTANCE_STOPPED,
                t1,
                Some(TenantId(renter)),
                None,
                &stopped,
            )
            .expect("envelope");
            // Every event at least once, some twice (a redelivery keeps its id).
            for e in [r, s] {
                if rng.gen_bool(0.5) {
                    lifecycle.push(e.clone());
                }
                lifecycle.push(e);
            }
        }
        lifecycle.shuffle(&mut rng);
        for envelope in &lifecycle {
            deliver_metering(&mut conn, envelope);
        }

        // Each interval announced once, with floor(T1 − T0) seconds.
        let usage: Vec<Body> = diesel::sql_query(format!(
            "SELECT body FROM metering.outbox WHERE routing_key = '{USAGE_RECORDED}' AND body->>'tenant_id' = '{renter}'"
        ))
        .load(&mut conn)
        .expect("usage rows");
        assert_eq!(usage.len(), 4, "seed {seed}: one usage event per interval");
        let mut usage: Vec<Envelope> = usage
            .into_iter()
            .map(|row| serde_json::from_value(row.body).expect("envelope"))
            .collect();
        // Usage may itself be re-sent: as the same message, or re-emitted
        // under a new id with the same interval.
        let mut deliveries = usage.clone();
        deliveries.extend(usage.iter().cloned());
        for e in usage.iter_mut() {
            e.id = Uuid::now_v7();
        }
        deliveries.extend(usage);
        deliveries.shuffle(&mut rng);
        for envelope in &deliveries {
            deliver_billing(&mut conn, envelope, &settings);
        }

        let balance = env.count(&format!(
            "SELECT count(*) AS n FROM billing.transactions WHERE tenant_id = '{renter}' AND kind = 'usage'"
        ));
        assert_eq!(balance, 4, "seed {seed}: one posting per interval");
        #[derive(diesel::QueryableByName)]
        struct Sum {
            #[diesel(sql_type = diesel::sql_types::Numeric)]
            total: Decimal,
        }
        let renter_balance: Sum = diesel::sql_query(format!(
            "SELECT coalesce(sum(e.amount), 0) AS total FROM billing.entries e JOIN billing.accounts a ON a.id = e.account_id \
             WHERE a.kind = 'renter_balance' AND a.tenant_id = '{renter}'"
        ))
        .get_result(&mut conn)
        .expect("sum");
        assert_eq!(
            renter_balance.total, -expected_total,
            "seed {seed}: renter charged exactly once"
        );
        let host_plus_fee: Sum = diesel::sql_query(format!(
            "SELECT coalesce(sum(e.amount), 0) AS total FROM billing.entries e JOIN billing.accounts a ON a.id = e.account_id \
             JOIN billing.transactions t ON t.id = e.transaction_id \
             WHERE t.tenant_id = '{renter}' AND a.kind IN ('host_earnings', 'platform_fee')"
        ))
        .get_result(&mut conn)
        .expect("sum");
        assert_eq!(
            host_plus_fee.total, expected_total,
            "seed {seed}: host + fee = renter debit"
        );
    }
    drop(conn);
    env.cleanup().await;
}

/// The same rentals, delivered once in order for one renter and every event
/// twice, shuffled, re-sent under new ids and settled in segments at random
/// instants for another, give the same invoice: the same lines (instance,
/// meter, seconds, price, exact and rounded amount) and the same totals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_twice_and_shuffled_gives_the_same_invoice() {
    use billing::invoices::{InvoicePeriod, finalize_period};

    let env = TestEnv::new().await;
    let mut conn = env.conn();
    let db = platform::Db::connect(&env.config.database_url, 2).expect("db");
    let settings = billing::Settings {
        fee_rate: "0.15".parse().unwrap(),
        currency: "USD".into(),
        events_exchange: "events".into(),
        downtime_credit_multiple: Decimal::ONE,
    };
    let usage_of = |conn: &mut PgConnection, tenant: Uuid| -> Vec<Envelope> {
        let rows: Vec<Body> = diesel::sql_query(format!(
            "SELECT body FROM metering.outbox WHERE routing_key = '{USAGE_RECORDED}' \
               AND body->>'tenant_id' = '{tenant}' ORDER BY seq"
        ))
        .load(conn)
        .expect("usage rows");
        rows.into_iter()
            .map(|row| serde_json::from_value(row.body).expect("envelope"))
            .collect()
    };

    for seed in 0..8u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1_000 + seed);
        let (in_order, shuffled, host) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        // Instance i of one renter is instance i of the other.
        let mut pairs = Vec::new();
        let mut once = Vec::new();
        let mut twice = Vec::new();
        let mut instants = Vec::new();
        for _ in 0..3 {
            let price: Decimal = Decimal::new(rng.gen_range(1..500_000), 5);
            let gpus = rng.gen_range(1..=8);
            let t0 = Utc.timestamp_opt(1_790_000_000, 0).single().expect("t0")
                + ChronoDuration::microseconds(rng.gen_range(0..10_000_000_000));
            let t1 = t0 + ChronoDuration::microseconds(rng.gen_range(1_000_000..50_000_000_000));
            instants.push((t0, t1));
            let ids = (Uuid::now_v7(), Uuid::now_v7());
            pairs.push(ids);
            for (tenant, instance, out) in
                [(in_order, ids.0, &mut once), (shuffled, ids.1, &mut twice)]
            {
                let running = InstanceRunning {
                    instance_id: InstanceId(instance),
                    tenant_id: TenantId(tenant),
                    host_tenant_id: TenantId(host),
                    machine_id: MachineId(Uuid::nil()),
                    gpu_model: "H100_SXM".into(),
                    gpu_count: gpus,
                    rental_type: contracts::api::RentalType::OnDemand,
                    price_per_gpu_hour: price,
                    currency: "USD".into(),
                    run_seq: 1,
                    running_at: t0,
                };
                let stopped = InstanceStopped {
                    instance_id: InstanceId(instance),
                    tenant_id: TenantId(tenant),
                    run_seq: 1,
                    stopped_at: t1,
                    reason: "stop requested".into(),
                };
                out.push(
                    Envelope::new(
                        contracts::events::kinds::INSTANCE_RUNNING,
                        t0,
                        Some(TenantId(tenant)),
                        None,
                        &running,
                    )
                    .expect("envelope"),
                );
                out.push(
                    Envelope::new(
                        contracts::events::kinds::INSTANCE_STOPPED,
                        t1,
                        Some(TenantId(tenant)),
                        None,
                        &stopped,
                    )
                    .expect("envelope"),
                );
            }
        }

        for envelope in &once {
            deliver_metering(&mut conn, envelope);
        }
        for envelope in &usage_of(&mut conn, in_order) {
            deliver_billing(&mut conn, envelope, &settings);
        }

        let mut lifecycle: Vec<Envelope> = twice.iter().chain(twice.iter()).cloned().collect();
        lifecycle.shuffle(&mut rng);
        // Settlements at random instants while the events trickle in: some
        // run ahead of stops that already happened (corrections follow).
        let settle_at: Vec<usize> = (0..2).map(|_| rng.gen_range(0..lifecycle.len())).collect();
        for (i, envelope) in lifecycle.iter().enumerate() {
            deliver_metering(&mut conn, envelope);
            if settle_at.contains(&i) {
                let (t0, t1) = instants[rng.gen_range(0..instants.len())];
                let span = (t1 - t0).num_microseconds().unwrap_or(0).max(1) * 2;
                let now = t0 + ChronoDuration::microseconds(rng.gen_range(0..span));
                metering::settle_open(&db, now, "events")
                    .await
                    .expect("settle");
            }
        }
        let usage = usage_of(&mut conn, shuffled);
        let mut deliveries = usage.clone();
        deliveries.extend(usage.iter().cloned().map(|mut e| {
            e.id = Uuid::now_v7();
            e
        }));
        deliveries.extend(usage);
        deliveries.shuffle(&mut rng);
        for envelope in &deliveries {
            deliver_billing(&mut conn, envelope, &settings);
        }

        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let end = Utc::now();
        let invoice = |tenant: Uuid| {
            let (db, settings) = (db.clone(), settings.clone());
            async move {
                finalize_period(
                    &db,
                    &settings,
                    InvoicePeriod::Monthly,
                    TenantId(tenant),
                    end,
                )
                .await
                .expect("finalize")
                .expect("an invoice")
            }
        };
        let (a, b) = (invoice(in_order).await, invoice(shuffled).await);
        let index = |instance: Uuid| {
            pairs
                .iter()
                .position(|(x, y)| *x == instance || *y == instance)
                .expect("known instance")
        };
        let lines = |inv: &contracts::api::Invoice| {
            let mut lines: Vec<_> = inv
                .lines
                .iter()
                .map(|l| {
                    (
                        index(l.instance_id.into()),
                        l.meter.clone(),
                        l.quantity,
                        l.unit.clone(),
                        l.unit_price_per_hour,
                        l.exact_amount,
                        l.amount,
                    )
                })
                .collect();
            lines.sort_by(|x, y| (x.0, &x.1).cmp(&(y.0, &y.1)));
            lines
        };
        assert_eq!(lines(&a), lines(&b), "seed {seed}: same lines");
        assert_eq!(
            (a.total, a.exact_total, a.rounding),
            (b.total, b.exact_total, b.rounding),
            "seed {seed}: same totals"
        );
        assert_eq!(a.lines.len(), 3, "seed {seed}");
    }
    drop(conn);
    env.cleanup().await;
}
