#![allow(clippy::expect_used, clippy::unwrap_used)] // Tests: a failed expectation is the failure.

//! Offer search against a real database: the machine's stored copy of its
//! model's TFLOPS follows the catalog (so the price-per-TFLOP order does), and
//! the "why no offers" explanation answers as the system tests expect.
//! Each test makes its own database and drops it.

use std::collections::HashMap;

use contracts::api::{NoOffers, OfferSearch, OfferSort};
use diesel::{Connection, PgConnection, RunQueryDsl};
use gpumarket_catalog::{Market, offers};
use platform::Db;
use platform::test_db::TestDb;

/// A database of the test's own (platform's [`TestDb`]) and a way to poke it.
trait Exec {
    fn exec(&self, sql: &str);
}

impl Exec for TestDb {
    fn exec(&self, sql: &str) {
        let mut conn = self.conn().expect("connect");
        diesel::sql_query(sql).execute(&mut conn).expect(sql);
    }
}

fn market() -> Market {
    Market {
        currency: "USD".into(),
        heartbeat_grace_seconds: 3600,
    }
}

/// A listed, online machine with all its GPUs free.
fn machine(db: &TestDb, name: &str, model: &str, gpus: i32, country: &str, cuda: i32, price: &str) {
    db.exec(&format!(
        "INSERT INTO catalog.machines (id, host_tenant_id, name, gpu_model, gpu_count, vram_gib, cpu_cores, ram_gib,
             disk_gib, country, price_per_gpu_hour, currency, listed, agent_token_sha256, idempotency_key,
             cuda_version_code, last_heartbeat_at, reliability, datacenter)
         VALUES (md5('{name}')::uuid, '00000000-0000-4000-8000-000000000001', '{name}', '{model}', {gpus}, 24, 16, 64,
             500, '{country}', {price}, 'USD', true, md5('{name}token'), '{name}', {cuda}, now(), 0.99,
             '{name}' IN ('m1', 'm2', 'm5'))"
    ));
}

/// The five machines of tests/system/market.rs, as far as the explanation
/// looks at them.
fn seeded(db: &TestDb) {
    machine(db, "m1", "H100 80GB SXM", 8, "SE", 12040, "2.49");
    machine(db, "m2", "A100 80GB SXM", 4, "DE", 12020, "1.29");
    machine(db, "m3", "RTX 4090", 2, "US", 12040, "0.34");
    machine(db, "m4", "RTX 4090", 1, "CA", 11080, "0.31");
    machine(db, "m5", "L40S", 4, "US", 12040, "0.89");
}

#[derive(diesel::QueryableByName)]
struct Name {
    #[diesel(sql_type = diesel::sql_types::Text)]
    name: String,
}

/// The machines' names of a search's first page, in order.
async fn names(db: &Db, test: &TestDb, q: OfferSearch) -> Vec<String> {
    let page = offers::search(db, &market(), q).await.expect("search");
    let mut conn = PgConnection::establish(&test.url).expect("connect");
    page.offers
        .iter()
        .map(|o| {
            let rows: Vec<Name> =
                diesel::sql_query("SELECT name FROM catalog.machines WHERE id = $1")
                    .bind::<diesel::sql_types::Uuid, _>(o.id)
                    .load(&mut conn)
                    .expect("name");
            rows.into_iter().next().expect("machine").name
        })
        .collect()
}

async fn explain(db: &Db, q: OfferSearch) -> NoOffers {
    let page = offers::search(db, &market(), q).await.expect("search");
    assert!(page.offers.is_empty(), "expected an empty page");
    page.no_offers.expect("an explanation")
}

fn by_tflop() -> OfferSearch {
    OfferSearch {
        sort: Some(OfferSort::PricePerTflop),
        first: Some(50),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_price_per_tflop_order_follows_the_models_tflops() {
    let test = TestDb::new("catalog_tflops").expect("test database");
    let db = Db::connect(&test.url, 2).expect("pool");
    // 0.50 / 165.2 ≈ 0.00303 against 1.00 / 362.1 ≈ 0.00276 per TFLOP-hour.
    machine(&test, "cheap4090", "RTX 4090", 1, "US", 12040, "0.50");
    machine(&test, "l40s", "L40S", 1, "US", 12040, "1.00");
    assert_eq!(names(&db, &test, by_tflop()).await, ["l40s", "cheap4090"]);
    let page = offers::search(&db, &market(), by_tflop())
        .await
        .expect("search");
    assert_eq!(page.offers[1].fp16_tflops.to_string(), "165.2");

    // A corrected datasheet figure reaches the machines of that model.
    test.exec("UPDATE catalog.gpu_models SET fp16_tflops = 400 WHERE name = 'RTX 4090'");
    assert_eq!(names(&db, &test, by_tflop()).await, ["cheap4090", "l40s"]);
    let page = offers::search(&db, &market(), by_tflop())
        .await
        .expect("search");
    assert_eq!(page.offers[0].fp16_tflops.to_string(), "400");
    assert_eq!(page.offers[0].price_per_tflop_hour.to_string(), "0.00125");

    // A machine whose model changes takes the new model's figure, and a
    // write to the copy itself cannot make it disagree with the catalog.
    test.exec("UPDATE catalog.machines SET gpu_model = 'RTX 3090' WHERE name = 'cheap4090'");
    assert_eq!(names(&db, &test, by_tflop()).await, ["l40s", "cheap4090"]);
    test.exec("UPDATE catalog.machines SET fp16_tflops = 9999 WHERE name = 'cheap4090'");
    let page = offers::search(&db, &market(), by_tflop())
        .await
        .expect("search");
    assert_eq!(page.offers[1].fp16_tflops.to_string(), "71");

    // A repricing moves the offer along the same key.
    test.exec("UPDATE catalog.machines SET price_per_gpu_hour = 0.10 WHERE name = 'cheap4090'");
    assert_eq!(names(&db, &test, by_tflop()).await, ["cheap4090", "l40s"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn why_no_offers_counts_and_nearest_values() {
    let test = TestDb::new("catalog_why").expect("test database");
    let db = Db::connect(&test.url, 2).expect("pool");
    seeded(&test);

    // The system test's search (tests/system/market.rs): each constraint's
    // eliminated and matching-without counts, the nearest values and how many
    // offers each admits.
    let why = explain(
        &db,
        OfferSearch {
            countries: vec!["DE".into(), "SE".into()],
            min_cuda_version: Some("12.4".into()),
            max_price_per_gpu_hour: "2.00".parse().ok(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(why.live_offers, 5);
    let report: HashMap<&str, (i64, i64)> = why
        .constraints
        .iter()
        .map(|c| (c.constraint.as_str(), (c.eliminated, c.matching_without)))
        .collect();
    assert_eq!(report["countries"], (3, 2));
    assert_eq!(report["min_cuda_version"], (2, 1));
    assert_eq!(report["max_price_per_gpu_hour"], (1, 1));
    let relax: HashMap<&str, (&str, i64)> = why
        .relaxations
        .iter()
        .map(|r| (r.constraint.as_str(), (r.value.as_str(), r.matching)))
        .collect();
    assert_eq!(relax["max_price_per_gpu_hour"], ("2.49", 1));
    assert_eq!(relax["min_cuda_version"], ("12.2", 1));
    assert_eq!(relax["countries"], ("US (2)", 2));
    assert!(
        why.summary.starts_with("0 of 5 live offers match"),
        "{}",
        why.summary
    );
    // Most offers first.
    assert_eq!(why.relaxations[0].constraint, "countries");

    // Two model filters: each set constraint names the models that match
    // the rest.
    let why = explain(
        &db,
        OfferSearch {
            gpu_model: Some("L40S".into()),
            gpu_models: vec!["RTX 4090".into()],
            ..Default::default()
        },
    )
    .await;
    let relax: HashMap<&str, &str> = why
        .relaxations
        .iter()
        .map(|r| (r.constraint.as_str(), r.value.as_str()))
        .collect();
    assert_eq!(relax["gpu_model"], "RTX 4090 (2)");
    assert_eq!(relax["gpu_models"], "L40S (1)");

    // A maximum (the most GPUs free among the matching model) and a
    // constraint only dropping helps.
    let why = explain(
        &db,
        OfferSearch {
            gpu_model: Some("RTX 4090".into()),
            gpu_count: Some(8),
            datacenter_only: Some(true),
            ..Default::default()
        },
    )
    .await;
    let report: HashMap<&str, (i64, i64)> = why
        .constraints
        .iter()
        .map(|c| (c.constraint.as_str(), (c.eliminated, c.matching_without)))
        .collect();
    assert_eq!(report["gpu_model"], (3, 1));
    assert_eq!(report["gpu_count"], (4, 0));
    assert_eq!(report["datacenter_only"], (2, 0));
    // With gpu_count 8 and the model kept, no offer would match by
    // dropping only the datacenter; none of the 4090s has 8 GPUs.
    assert!(
        why.relaxations
            .iter()
            .all(|r| r.constraint != "datacenter_only")
    );
    let relax: HashMap<&str, (&str, i64)> = why
        .relaxations
        .iter()
        .map(|r| (r.constraint.as_str(), (r.value.as_str(), r.matching)))
        .collect();
    assert_eq!(relax["gpu_model"], ("H100 80GB SXM (1)", 1));

    let why = explain(
        &db,
        OfferSearch {
            gpu_model: Some("RTX 4090".into()),
            datacenter_only: Some(true),
            ..Default::default()
        },
    )
    .await;
    let dropped = why
        .relaxations
        .iter()
        .find(|r| r.constraint == "datacenter_only")
        .expect("datacenter relaxation");
    assert_eq!((dropped.value.as_str(), dropped.matching), ("dropped", 2));

    // Nothing live: every count is zero and the summary says so.
    test.exec("UPDATE catalog.machines SET listed = false");
    let why = explain(
        &db,
        OfferSearch {
            gpu_count: Some(1),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(why.live_offers, 0);
    assert_eq!(why.constraints[0].eliminated, 0);
    assert!(why.relaxations.is_empty());
    assert!(
        why.summary.ends_with("No offers are live right now."),
        "{}",
        why.summary
    );
}
