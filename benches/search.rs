//! `make bench`: offer search on a large market. Fills N machines (default
//! 100,000) into a fresh database, starts the catalog service, and measures
//! p50/p99 of typical searches through the service (HTTP + JSON + pool) next
//! to the same SQL run directly on one Postgres connection, plus a search
//! that matches nothing (the "why no offers" path). Writes the table to
//! docs/benchmarks.md with the machine it ran on.
//!
//! Flags: `--machines N` (default 100000), `--queries N` per case (default 200).

use std::time::Instant;

use anyhow::Context;
use contracts::api::{OfferSearch, OfferSort};
use contracts::endpoints;
use diesel::{Connection, PgConnection, RunQueryDsl};
use platform::internal::InternalClient;
use platform::{Config, Db};

mod common;
use common::{Goal, machine_facts, percentile, sized};

const FILL: &str = "
SELECT setseed(0.42);
INSERT INTO catalog.host_profiles (tenant_id, legal_name, country, payout_currency, verification, verification_reason)
SELECT ('00000000-0000-4000-8000-' || lpad(h::text, 12, '0'))::uuid, 'Host ' || h, 'US', 'USD',
       CASE WHEN h % 3 = 0 THEN 'verified' ELSE 'unverified' END, 'bench'
FROM generate_series(1, 1000) h;
WITH models AS (SELECT array_agg(name ORDER BY name) AS names, array_agg(vram_gib ORDER BY name) AS vrams,
                       count(*)::int AS n FROM catalog.gpu_models),
     rows AS (SELECT i, 1 + floor(random() * (SELECT n FROM models))::int AS m,
                     (ARRAY[1, 2, 4, 8])[1 + floor(random() * 4)::int] AS gpus
              FROM generate_series(1, $N) i)
INSERT INTO catalog.machines (id, host_tenant_id, name, gpu_model, gpu_count, gpus_allocated, vram_gib, cpu_cores,
    ram_gib, disk_gib, country, price_per_gpu_hour, currency, listed, agent_token_sha256, idempotency_key, cpu_model,
    disk_type, upload_mbps, download_mbps, region, datacenter, cuda_version_code, min_bid_per_gpu_hour,
    storage_price_per_gb_month, allowed_gpu_counts, last_heartbeat_at, reliability, self_test_passed_at)
SELECT gen_random_uuid(), ('00000000-0000-4000-8000-' || lpad((1 + i % 1000)::text, 12, '0'))::uuid, 'bench-' || i,
       models.names[m], gpus, floor(random() * (gpus + 1))::int, models.vrams[m], 16 * gpus, 64 * gpus, 500 + floor(random() * 8000)::int,
       (ARRAY['US','CA','DE','SE','FR','NL','GB','FI','NO','JP','SG','AU'])[1 + floor(random() * 12)::int],
       round((0.15 + random() * 3.5)::numeric, 3), 'USD', random() < 0.9, md5(i::text || 'token'), 'bench-' || i,
       'AMD EPYC 7543', (ARRAY['nvme','ssd','hdd'])[1 + floor(random() * 3)::int],
       (ARRAY[100, 500, 1000, 10000])[1 + floor(random() * 4)::int], (ARRAY[100, 500, 1000, 10000])[1 + floor(random() * 4)::int],
       (ARRAY['east','west','central','north'])[1 + floor(random() * 4)::int], random() < 0.4,
       (ARRAY[11080, 12000, 12020, 12040, 12060])[1 + floor(random() * 5)::int],
       CASE WHEN random() < 0.5 THEN round((0.05 + random())::numeric, 3) END, 0.10, '{}',
       CASE WHEN random() < 0.95 THEN now() ELSE now() - interval '1 day' END,
       round((0.70 + random() * 0.30)::numeric, 4), now()
FROM rows, models;
UPDATE catalog.machines SET min_bid_per_gpu_hour = NULL WHERE min_bid_per_gpu_hour > price_per_gpu_hour;
ANALYZE catalog.machines;
ANALYZE catalog.host_profiles;
";

struct Case {
    name: &'static str,
    search: OfferSearch,
    /// Issue 17's goal on this case's service p99, in milliseconds.
    goal: Option<(&'static str, f64)>,
}

fn cases() -> Vec<Case> {
    let dec = |s: &str| s.parse().ok();
    vec![
        Case {
            name: "typical: 3 models, 1 GPU, <= $2/h, reliability >= 0.95, 4 countries, by price",
            search: OfferSearch {
                gpu_models: vec!["RTX 4090".into(), "L40S".into(), "A100 80GB SXM".into()],
                gpu_count: Some(1),
                max_price_per_gpu_hour: dec("2.0"),
                min_reliability: dec("0.95"),
                countries: vec!["US".into(), "DE".into(), "SE".into(), "CA".into()],
                sort: Some(OfferSort::Price),
                first: Some(20),
                ..Default::default()
            },
            goal: None,
        },
        Case {
            name: "datacenter, CUDA >= 12.4, 2 GPUs, by price per TFLOP",
            search: OfferSearch {
                gpu_count: Some(2),
                datacenter_only: Some(true),
                min_cuda_version: Some("12.4".into()),
                sort: Some(OfferSort::PricePerTflop),
                first: Some(20),
                ..Default::default()
            },
            goal: Some(("tflop_sort_p99_ms", 15.0)),
        },
        Case {
            name: "no filter, by reliability",
            search: OfferSearch {
                sort: Some(OfferSort::Reliability),
                first: Some(20),
                ..Default::default()
            },
            goal: None,
        },
        Case {
            name: "matches nothing (H200 under $0.01/h) + why-no-offers",
            search: OfferSearch {
                gpu_models: vec!["H200 141GB SXM".into()],
                max_price_per_gpu_hour: dec("0.01"),
                first: Some(20),
                ..Default::default()
            },
            goal: Some(("why_no_offers_p99_ms", 50.0)),
        },
    ]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let machines = sized("--machines", 100_000, 200);
    let queries = sized("--queries", 200, 10);
    let base = Config::from_env()?;
    let db_name = format!("gpumarket_bench_{}", std::process::id());
    let admin = platform::config::replace_db_name(&base.database_url, "postgres");
    let mut config = base.with_database(&db_name);
    config.ports.set("catalog", 0);
    // No agents run here: a day of grace keeps the filled heartbeats fresh
    // for the whole run, so every case sees the same live market.
    config
        .update_settings(|s: &mut catalog::CatalogSettings| s.heartbeat_grace_seconds = 86_400)?;
    config.db_pool_size = 4;
    let url = config.database_url.clone();
    platform::db::create_database(&admin, &db_name)?;
    platform::db::migrate(&url)?;

    let started = Instant::now();
    let mut conn = PgConnection::establish(&url)?;
    for statement in FILL.replace("$N", &machines.to_string()).split(";\n") {
        if !statement.trim().is_empty() {
            diesel::sql_query(statement)
                .execute(&mut conn)
                .with_context(|| statement.to_owned())?;
        }
    }
    let fill_seconds = started.elapsed().as_secs_f64();
    eprintln!("filled {machines} machines in {fill_seconds:.1} s");

    let config = std::sync::Arc::new(config);
    let (server, port) = catalog::build(config.clone(), Db::connect(&url, 4)?)?;
    let handle = server.handle();
    tokio::spawn(server);
    let client = InternalClient::new(
        format!("http://127.0.0.1:{port}"),
        config.service_token.clone(),
    );
    let market = catalog::Market {
        currency: config.currency.clone(),
        heartbeat_grace_seconds: config
            .settings::<catalog::CatalogSettings>()?
            .heartbeat_grace_seconds,
    };

    let mut rows = Vec::new();
    let mut goals = Vec::new();
    for case in cases() {
        let mut service = Vec::with_capacity(queries);
        let mut direct = Vec::with_capacity(queries);
        let mut found = 0;
        for i in 0..queries + 10 {
            let t = Instant::now();
            let page = client
                .call(endpoints::catalog::SEARCH_OFFERS, (), &case.search)
                .await?;
            let elapsed = t.elapsed();
            found = page.offers.len();
            if i >= 10 {
                service.push(elapsed);
            }
            let t = Instant::now();
            catalog::offers::run_page_sql(&mut conn, &market, &case.search)?;
            if i >= 10 {
                direct.push(t.elapsed());
            }
        }
        service.sort();
        direct.sort();
        rows.push(format!(
            "| {} | {found} | {:.2} | {:.2} | {:.2} | {:.2} |",
            case.name,
            percentile(&service, 0.50),
            percentile(&service, 0.99),
            percentile(&direct, 0.50),
            percentile(&direct, 0.99),
        ));
        eprintln!("{}", rows.last().map(String::as_str).unwrap_or(""));
        if let Some((goal, at_most)) = case.goal {
            // Meaningless at --tiny sizes, but printed so the smoke run
            // exercises the line `make bench` summarises.
            goals.push(common::ratio(
                goal,
                percentile(&service, 0.99),
                Goal::AtMost(at_most),
            ));
        }
    }
    handle.stop(true).await;
    drop(conn);
    // GPUMARKET_BENCH_KEEP_DB=1 keeps the filled market for EXPLAIN.
    if std::env::var_os("GPUMARKET_BENCH_KEEP_DB").is_none() {
        platform::db::drop_database(&admin, &db_name)?;
    } else {
        eprintln!("kept database {db_name}");
    }

    let pg_version = common::pg_version(&admin);
    let section = format!(
        "## Offer search\n\n\
         `make bench` (`cargo bench --bench search -- --machines {machines} --queries {queries}`), run {date} on {facts}, \
         PostgreSQL {pg_version}, release build. {machines} machines (about 90% listed, 95% online, 17 GPU models, 12 countries, \
         1,000 hosts) filled in {fill_seconds:.1} s. Each case ran {queries} times after 10 warm-ups, one at a time; \
         *service* is a POST to the catalog's search endpoint (HTTP, JSON, pool, the search SQL), *SQL* is the same \
         statement with the same binds on one direct connection. Milliseconds.\n\n\
         | search | offers on page | service p50 | service p99 | SQL p50 | SQL p99 |\n|---|---|---|---|---|---|\n{}\n\n\
         Issue 17's goals, on the service p99 at {machines} machines:\n\n```\n{}\n```\n",
        rows.join("\n"),
        goals.join("\n"),
        date = chrono::Utc::now().format("%Y-%m-%d"),
        facts = machine_facts(),
    );
    common::write_section("## Offer search", &section)?;
    println!("{section}");
    Ok(())
}
