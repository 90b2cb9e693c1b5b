//! `make bench`: usage ingest. On a fresh database it measures
//! `metering.usage.recorded` envelopes through billing's consumer path (the
//! set-based inbox claim, rating, the balanced three-leg postings with their
//! balance check once per statement, balances moved once per account, the
//! floor and cap checks, usage details for invoices), in batches of `--batch` per
//! transaction as the consumer applies them, at 1 and 4 connections; and,
//! in the same run on the same Postgres, the baseline: `COPY` of one
//! uniquely keyed row per event. It prints `ratio ingest_vs_copy`.
//!
//! Flags: `--events N` per level (default 100000), `--batch N` (default
//! 500, the consumer's `GPUMARKET_BATCH_MAX`), `--renters N` (default 1000).

use contracts::ids::{InstanceId, TenantId};
use std::io::Write;
use std::time::Instant;

use anyhow::Context;
use chrono::Utc;
use contracts::Envelope;
use contracts::events::UsageRecorded;
use diesel::{Connection, ExecuteCopyFromDsl, PgConnection, RunQueryDsl};
use platform::Config;
use rust_decimal::Decimal;
use uuid::Uuid;

mod common;
use common::{Goal, machine_facts, ratio, sized};

diesel::table! {
    bench_copy (id) {
        id -> Uuid,
        n -> Int4,
    }
}

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
                instance_id: InstanceId(Uuid::now_v7()),
                tenant_id: TenantId(tenant),
                host_tenant_id: TenantId(host),
                meter: contracts::states::Meter::Gpu,
                started_at: now - chrono::Duration::seconds(seconds),
                ended_at: now,
                seconds,
                price_per_hour: Decimal::new(42 + (i % 300) as i64, 2),
                currency: "USD".into(),
                offset_seconds: 0,
                machine_id: None,
                gpu_model: None,
            };
            Envelope::new(
                contracts::events::kinds::USAGE_RECORDED,
                now,
                Some(TenantId(tenant)),
                None,
                &contracts::events::MeteredUsage::from(usage),
            )
            .context("usage envelope")
        })
        .collect()
}

/// Delivers `events` through billing's consumer path on `connections`
/// threads, `batch` per transaction; returns events per second.
fn ingest(
    url: &str,
    events: Vec<Envelope>,
    connections: usize,
    batch: usize,
) -> anyhow::Result<f64> {
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
                    for envelopes in chunk.chunks(batch.max(1)) {
                        conn.transaction::<_, anyhow::Error, _>(|c| {
                            platform::consumer::apply_batch_once(
                                c,
                                billing::SCHEMA,
                                envelopes,
                                |c, fresh| billing::apply_batch(c, fresh, &settings),
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

/// The baseline: `n` rows, each keyed by a fresh UUID (as a message id is),
/// written by one `COPY` on one connection; rows per second.
fn copy_rows(url: &str, n: usize) -> anyhow::Result<f64> {
    let mut conn = PgConnection::establish(url)?;
    let ids: Vec<Uuid> = (0..n).map(|_| Uuid::now_v7()).collect();
    let started = Instant::now();
    let copied = diesel::copy_from(bench_copy::table)
        .from_raw_data(bench_copy::table, |out: &mut dyn Write| {
            for (i, id) in ids.iter().enumerate() {
                writeln!(out, "{id}\t{i}")
                    .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
            }
            Ok::<_, diesel::result::Error>(())
        })
        .execute(&mut conn)?;
    anyhow::ensure!(copied == n, "COPY wrote {copied} of {n} rows");
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let events = sized("--events", 100_000, 200);
    let batch = sized("--batch", 500, 50);
    let renters = sized("--renters", 1_000, 10);
    let base = Config::from_env()?;
    let name = format!("gpumarket_bench_billing_{}", std::process::id());
    let admin = platform::config::replace_db_name(&base.database_url, "postgres");
    let config = base.with_database(&name);
    platform::db::create_database(&admin, &name)?;
    let result = run(&config.database_url, events, batch, renters).await;
    platform::db::drop_database(&admin, &name)?;
    let levels = result?;

    let rows: Vec<String> = levels
        .iter()
        .map(|(c, ingest, copy)| {
            format!("| {c} | {ingest:.0} | {copy:.0} | {:.3} |", ingest / copy)
        })
        .collect();
    let single = levels
        .iter()
        .find(|(c, _, _)| *c == 1)
        .map_or(0.0, |(_, ingest, copy)| ingest / copy);
    let summary = ratio("ingest_vs_copy", single, Goal::AtLeast(0.5));
    let section = format!(
        "## Usage ingest\n\n\
         `make bench` (`cargo bench --bench billing -- --events {events} --batch {batch} --renters {renters}`), \
         run {date} on {facts}, PostgreSQL {pg}, {build} build.\n\n\
         {events} `metering.usage.recorded` envelopes per level, spread over {renters} renters and one host, \
         through billing's consumer path in batches of {batch} per transaction (set-based inbox claim, rating, \
         the balanced three-leg postings with their balance check once per statement, each account's balance moved once \
         per batch, the floor and cap checks, usage details for invoices), beside the baseline measured in the \
         same run on the same Postgres: `COPY` of one row per event keyed by a fresh UUID, one connection. \
         Events (rows) per second.\n\n\
         | connections | ingest events/s | COPY rows/s (1 connection) | ingest / COPY |\n|---|---|---|---|\n{rows}\n\n\
         `{summary}`\n\n",
        rows = rows.join("\n"),
        date = Utc::now().format("%Y-%m-%d"),
        facts = machine_facts(),
        pg = common::pg_version(&admin),
        build = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    );
    common::write_section("## Usage ingest", &section)?;
    println!("{section}");
    Ok(())
}

type Levels = Vec<(usize, f64, f64)>;

async fn run(url: &str, events: usize, batch: usize, renters: usize) -> anyhow::Result<Levels> {
    platform::db::migrate(url)?;
    let mut conn = PgConnection::establish(url)?;
    diesel::sql_query("CREATE TABLE bench_copy (id uuid PRIMARY KEY, n int NOT NULL)")
        .execute(&mut conn)?;
    let host = Uuid::now_v7();
    let url_owned = url.to_owned();
    let copy_rate = tokio::task::spawn_blocking(move || copy_rows(&url_owned, events)).await??;
    eprintln!("COPY {copy_rate:.0} rows/s");
    let mut levels = Vec::new();
    for connections in LEVELS {
        let tenants: Vec<Uuid> = (0..renters).map(|_| Uuid::now_v7()).collect();
        let envelopes = usage_events(events, &tenants, host)?;
        let url_owned = url.to_owned();
        let ingest_rate =
            tokio::task::spawn_blocking(move || ingest(&url_owned, envelopes, connections, batch))
                .await??;
        eprintln!("{connections} connections: ingest {ingest_rate:.0}/s");
        levels.push((connections, ingest_rate, copy_rate));
    }
    Ok(levels)
}
