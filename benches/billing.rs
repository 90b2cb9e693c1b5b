//! `make bench`: billing. On a fresh database it measures
//!
//! - usage ingest: `metering.usage.recorded` envelopes through billing's real
//!   consumer path (inbox claim, cumulative rating, balanced posting, floor
//!   check, usage details), one transaction per event, at 1 and 4
//!   connections, beside a raw-insert baseline (one JSONB row per
//!   transaction) on the same Postgres in the same run;
//! - the invoicing run: `run_invoices` for every tenant with usage (default
//!   10,000 tenants with 3 postings each).
//!
//! Flags: `--events N` per ingest level (default 20000), `--tenants N`
//! (default 10000), `--postings N` per tenant (default 3).

use std::time::Instant;

use anyhow::Context;
use chrono::Utc;
use contracts::Envelope;
use contracts::events::{USAGE_RECORDED, UsageRecorded};
use diesel::{Connection, PgConnection, RunQueryDsl};
use platform::Config;
use rust_decimal::Decimal;
use uuid::Uuid;

mod common;
use common::{machine_facts, sized};

const LEVELS: [usize; 2] = [1, 4];

fn settings() -> billing::Settings {
    billing::Settings {
        fee_rate: Decimal::new(15, 2),
        currency: "USD".into(),
        events_exchange: "gpumarket.events".into(),
        downtime_credit_multiple: Decimal::ONE,
    }
}

/// `n` usage segments spread over `tenants` renters (one host), as metering
/// announces them.
fn usage_events(n: usize, tenants: &[Uuid], host: Uuid) -> anyhow::Result<Vec<Envelope>> {
    let now = Utc::now();
    (0..n)
        .map(|i| {
            let tenant = tenants[i % tenants.len()];
            let seconds = 1 + (i as i64 * 7919) % 3600;
            let usage = UsageRecorded {
                interval_id: Uuid::now_v7(),
                instance_id: Uuid::now_v7(),
                tenant_id: tenant,
                host_tenant_id: host,
                meter: "gpu".into(),
                started_at: now - chrono::Duration::seconds(seconds),
                ended_at: now,
                seconds,
                price_per_hour: Decimal::new(42 + (i % 300) as i64, 2),
                currency: "USD".into(),
                offset_seconds: 0,
                machine_id: None,
                gpu_model: None,
            };
            Envelope::new(USAGE_RECORDED, now, Some(tenant), None, &usage).context("usage envelope")
        })
        .collect()
}

/// Delivers `events` through billing's consumer path on `connections`
/// threads; returns events per second.
fn ingest(url: &str, events: Vec<Envelope>, connections: usize) -> anyhow::Result<f64> {
    let settings = settings();
    let chunks: Vec<Vec<Envelope>> = {
        let mut chunks: Vec<Vec<Envelope>> = (0..connections).map(|_| Vec::new()).collect();
        for (i, e) in events.into_iter().enumerate() {
            chunks[i % connections].push(e);
        }
        chunks
    };
    let total: usize = chunks.iter().map(Vec::len).sum();
    let started = Instant::now();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let settings = settings.clone();
                scope.spawn(move || -> anyhow::Result<()> {
                    let mut conn = PgConnection::establish(url)?;
                    for envelope in chunk {
                        conn.transaction::<_, anyhow::Error, _>(|c| {
                            platform::consumer::apply_once(
                                c,
                                billing::SCHEMA,
                                &envelope,
                                |c, e| billing::apply_event(c, e, &settings),
                            )
                            .map_err(|e| anyhow::anyhow!("{e}"))?;
                            Ok(())
                        })?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| anyhow::anyhow!("ingest thread panicked"))??;
        }
        Ok(())
    })?;
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// The baseline: the same number of rows, each a JSONB insert in its own
/// transaction, on the same connections.
fn raw_inserts(url: &str, n: usize, connections: usize) -> anyhow::Result<f64> {
    let started = Instant::now();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let handles: Vec<_> = (0..connections)
            .map(|c| {
                scope.spawn(move || -> anyhow::Result<()> {
                    let mut conn = PgConnection::establish(url)?;
                    for i in (c..n).step_by(connections) {
                        diesel::sql_query(
                            "INSERT INTO bench_raw (id, body) VALUES ($1, jsonb_build_object('n', $2::int))",
                        )
                        .bind::<diesel::sql_types::Uuid, _>(Uuid::now_v7())
                        .bind::<diesel::sql_types::Integer, _>(i as i32)
                        .execute(&mut conn)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| anyhow::anyhow!("baseline thread panicked"))??;
        }
        Ok(())
    })?;
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let events = sized("--events", 20_000, 100);
    let tenants_n = sized("--tenants", 10_000, 10);
    let postings = sized("--postings", 3, 1);
    let base = Config::from_env()?;
    let name = format!("gpumarket_bench_billing_{}", std::process::id());
    let admin = platform::config::replace_db_name(&base.database_url, "postgres");
    let config = base.with_database(&name);
    platform::db::create_database(&admin, &name)?;
    let result = run(&config.database_url, events, tenants_n, postings).await;
    platform::db::drop_database(&admin, &name)?;
    let (levels, invoice_seconds, invoices) = result?;

    let rows: Vec<String> = levels
        .iter()
        .map(|(c, ingest, raw)| {
            format!(
                "| {c} | {ingest:.0} | {raw:.0} | {:.0} % |",
                ingest / raw * 100.0
            )
        })
        .collect();
    let section = format!(
        "## Billing\n\n\
         `make bench` (`cargo bench --bench billing -- --events {events} --tenants {tenants_n} --postings {postings}`), \
         run {date} on {facts}, PostgreSQL {pg}, release build.\n\n\
         **Usage ingest**: {events} `metering.usage.recorded` envelopes per level through billing's consumer path \
         (inbox claim, cumulative rating, the balanced three-leg posting with its deferred balance check, the \
         floor check, usage details for invoices), one transaction per event, beside a raw-insert baseline (one \
         JSONB row per transaction) on the same Postgres in the same run; events per second.\n\n\
         | connections | ingest events/s | raw inserts/s | ingest / raw |\n|---|---|---|---|\n{rows}\n\n\
         **Invoicing run**: `run_invoices` for {tenants_n} tenants with {postings} usage postings each (one \
         transaction per tenant: counter lock, lines rounded once, rounding posting, item assignment): \
         {invoices} invoices (those tenants and the ingest levels' 200) in {invoice_seconds:.1} s \
         ({per:.1} ms per invoice).\n\n",
        rows = rows.join("\n"),
        date = Utc::now().format("%Y-%m-%d"),
        facts = machine_facts(),
        pg = common::pg_version(&admin),
        per = invoice_seconds * 1000.0 / invoices.max(1) as f64,
    );
    common::write_section("## Billing", &section)?;
    println!("{section}");
    Ok(())
}

type Levels = Vec<(usize, f64, f64)>;

async fn run(
    url: &str,
    events: usize,
    tenants_n: usize,
    postings: usize,
) -> anyhow::Result<(Levels, f64, usize)> {
    platform::db::migrate(url)?;
    let mut conn = PgConnection::establish(url)?;
    diesel::sql_query("CREATE TABLE bench_raw (id uuid PRIMARY KEY, body jsonb NOT NULL)")
        .execute(&mut conn)?;
    let host = Uuid::now_v7();

    let mut levels = Vec::new();
    for connections in LEVELS {
        let renters: Vec<Uuid> = (0..100).map(|_| Uuid::now_v7()).collect();
        let envelopes = usage_events(events, &renters, host)?;
        let url_owned = url.to_owned();
        let ingest_rate =
            tokio::task::spawn_blocking(move || ingest(&url_owned, envelopes, connections))
                .await??;
        let url_owned = url.to_owned();
        let raw_rate =
            tokio::task::spawn_blocking(move || raw_inserts(&url_owned, events, connections))
                .await??;
        eprintln!("{connections} connections: ingest {ingest_rate:.0}/s, raw {raw_rate:.0}/s");
        levels.push((connections, ingest_rate, raw_rate));
    }

    // The invoicing run over many tenants.
    let tenants: Vec<Uuid> = (0..tenants_n).map(|_| Uuid::now_v7()).collect();
    let envelopes = usage_events(tenants_n * postings, &tenants, host)?;
    let url_owned = url.to_owned();
    tokio::task::spawn_blocking(move || ingest(&url_owned, envelopes, 4)).await??;
    // The ingest levels' tenants are invoiced in the same run too.
    let db = platform::Db::connect(url, 4)?;
    let period_end = Utc::now();
    let started = Instant::now();
    let result = billing::invoices::run_invoices(
        &db,
        &settings(),
        billing::invoices::InvoicePeriod::Monthly,
        contracts::api::RunInvoicesRequest {
            period_end: Some(period_end),
            tenant_id: None,
        },
    )
    .await?;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("{} invoices in {seconds:.1} s", result.invoices.len());
    Ok((levels, seconds, result.invoices.len()))
}
