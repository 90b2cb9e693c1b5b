//! `make bench`: the invoicing run (issue 17, goal 2). On a fresh database
//! it writes usage postings for `--tenants` renters with `--instances`
//! instances each (one posting per instance, three balanced legs: renter,
//! host earnings, platform fee, with their usage details) in a few
//! set-based statements, then times
//!
//! - the baseline: one SQL aggregate over the same usage rows, grouped like
//!   invoice lines (tenant, instance, meter, price);
//! - `run_invoices` for every tenant (set-based, chunks of 1,000 tenants),
//!   including reading the invoices back as the API returns them;
//! - `run_statements` for every host (`--tenants / 10` hosts, ten machines
//!   each).
//!
//! Flags: `--tenants N` (default 10000), `--instances N` (default 10).

use std::time::Instant;

use chrono::Utc;
use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl};
use platform::Config;
use rust_decimal::Decimal;

mod common;
use common::{Goal, machine_facts, sized};

fn settings() -> billing::Settings {
    billing::Settings {
        fee_rate: Decimal::new(15, 2),
        currency: "USD".into(),
        events_exchange: "gpumarket.events".into(),
        downtime_credit_multiple: Decimal::ONE,
    }
}

/// Postings as billing's usage path writes them, for every tenant and
/// instance at once (deterministic ids from md5).
fn setup(conn: &mut PgConnection, tenants: usize, instances: usize) -> anyhow::Result<()> {
    let hosts = (tenants / 10).max(1);
    let statements = [
        format!(
            "CREATE TEMP TABLE bench_usage AS \
             SELECT i, j, md5('t' || i)::uuid AS tenant, md5('i' || i || '-' || j)::uuid AS instance, \
                    md5('h' || (i % {hosts}))::uuid AS host, \
                    md5('m' || ((i * {instances} + j) % ({hosts} * 10)))::uuid AS machine, \
                    md5('v' || i || '-' || j)::uuid AS interval_id, \
                    (60 + (i * 7 + j * 13) % 3600)::bigint AS seconds, \
                    (0.42 + ((i + j) % 300) / 100.0)::numeric(24, 9) AS price \
             FROM generate_series(0, {tenants} - 1) i, generate_series(0, {instances} - 1) j"
        ),
        "ALTER TABLE bench_usage ADD COLUMN amount numeric(24, 9), ADD COLUMN fee numeric(24, 9), \
         ADD COLUMN id text"
            .into(),
        "UPDATE bench_usage SET amount = round(seconds * price / 3600, 9), \
                id = 'usage:' || interval_id || ':0:' || seconds"
            .into(),
        "UPDATE bench_usage SET fee = round(amount * 0.15, 9)".into(),
        "INSERT INTO billing.accounts (id, kind, tenant_id, currency) \
         SELECT md5('ra' || tenant)::uuid, 'renter_balance', tenant, 'USD' \
         FROM (SELECT DISTINCT tenant FROM bench_usage) t"
            .into(),
        "INSERT INTO billing.accounts (id, kind, tenant_id, currency) \
         SELECT md5('ha' || host)::uuid, 'host_earnings', host, 'USD' \
         FROM (SELECT DISTINCT host FROM bench_usage) h"
            .into(),
        "INSERT INTO billing.accounts (id, kind, tenant_id, currency) \
         VALUES (md5('platform_fee')::uuid, 'platform_fee', NULL, 'USD')"
            .into(),
        "INSERT INTO billing.transactions (id, kind, tenant_id, instance_id, fee_rate, description) \
         SELECT id, 'usage', tenant, instance, 0.15, \
                'usage: ' || seconds || ' s of gpu at ' || price || ' USD/h' FROM bench_usage"
            .into(),
        "INSERT INTO billing.entries (transaction_id, account_id, amount) \
         SELECT id, md5('ra' || tenant)::uuid, -amount FROM bench_usage \
         UNION ALL SELECT id, md5('ha' || host)::uuid, amount - fee FROM bench_usage \
         UNION ALL SELECT id, md5('platform_fee')::uuid, fee FROM bench_usage"
            .into(),
        "INSERT INTO billing.usage_details (transaction_id, interval_id, meter, offset_seconds, seconds, \
             price_per_hour, started_at, ended_at, host_tenant_id, machine_id, gpu_model, tenant_id, unit) \
         SELECT id, interval_id, 'gpu', 0, seconds, price, now() - seconds * interval '1 second', now(), \
                host, machine, 'RTX 4090', tenant, 'second' FROM bench_usage"
            .into(),
        "UPDATE billing.accounts a SET balance = s.total \
         FROM (SELECT account_id, sum(amount) AS total FROM billing.entries GROUP BY account_id) s \
         WHERE a.id = s.account_id"
            .into(),
    ];
    conn.transaction::<_, anyhow::Error, _>(|c| {
        for sql in &statements {
            diesel::sql_query(sql.as_str()).execute(c)?;
        }
        Ok(())
    })?;
    diesel::sql_query("ANALYZE").execute(conn)?;
    Ok(())
}

#[derive(QueryableByName)]
struct Groups {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    groups: i64,
}

/// The baseline: the renter legs of every usage posting summed per tenant,
/// instance, meter and price (an invoice line's grouping), in one query.
fn aggregate(conn: &mut PgConnection, end: chrono::DateTime<Utc>) -> anyhow::Result<(f64, i64)> {
    let started = Instant::now();
    let g: Groups = diesel::sql_query(
        "SELECT count(*) AS groups FROM ( \
             SELECT t.tenant_id, t.instance_id, d.meter, d.price_per_hour, \
                    -sum(e.amount) AS exact, sum(d.seconds) AS seconds, count(*) AS postings \
             FROM billing.transactions t \
             JOIN billing.entries e ON e.transaction_id = t.id \
             JOIN billing.accounts a ON a.id = e.account_id \
                  AND a.kind = 'renter_balance' AND a.tenant_id = t.tenant_id \
             LEFT JOIN billing.usage_details d ON d.transaction_id = t.id \
             WHERE t.kind = 'usage' AND t.created_at < $1 \
             GROUP BY 1, 2, 3, 4) lines",
    )
    .bind::<diesel::sql_types::Timestamptz, _>(end)
    .get_result(conn)?;
    Ok((started.elapsed().as_secs_f64(), g.groups))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let tenants = sized("--tenants", 10_000, 5);
    let instances = sized("--instances", 10, 2);
    let base = Config::from_env()?;
    let name = format!("gpumarket_bench_invoices_{}", std::process::id());
    let admin = platform::config::replace_db_name(&base.database_url, "postgres");
    let config = base.with_database(&name);
    platform::db::create_database(&admin, &name)?;
    let result = run(&config.database_url, tenants, instances).await;
    // GPUMARKET_BENCH_KEEP_DB=1 keeps the database for EXPLAIN after a run.
    if std::env::var_os("GPUMARKET_BENCH_KEEP_DB").is_none() {
        platform::db::drop_database(&admin, &name)?;
    } else {
        println!("kept database {name}");
    }
    let m = result?;

    let invoice_ratio = m.invoices_s / m.aggregate_s;
    let statement_ratio = m.statements_s / m.aggregate_s;
    let invoice_line = common::ratio("invoice_vs_aggregate", invoice_ratio, Goal::AtMost(3.0));
    let statement_line =
        common::ratio("statement_vs_aggregate", statement_ratio, Goal::AtMost(3.0));
    let section = format!(
        "## Invoice run\n\n\
         `make bench` (`cargo bench --bench invoices -- --tenants {tenants} --instances {instances}`), \
         run {date} on {facts}, PostgreSQL {pg}, release build.\n\n\
         {postings} usage postings ({tenants} tenants × {instances} instances, {hosts} hosts with ten \
         machines each; three legs each, with usage details) written set-based on a fresh database, then \
         timed in the same run:\n\n\
         | what | seconds |\n|---|---|\n\
         | baseline: one SQL aggregate over the usage rows, grouped like invoice lines ({groups} groups, median of 3) | {agg:.3} |\n\
         | `run_invoices` for every tenant ({invoices} invoices, chunks of {chunk} tenants; finalizing {fin:.3} s, reading them back {read:.3} s) | {inv:.3} |\n\
         | `run_statements` for every host ({statements} statements) | {st:.3} |\n\n\
         `{invoice_line}`\n\n`{statement_line}`\n\n",
        date = Utc::now().format("%Y-%m-%d"),
        facts = machine_facts(),
        pg = common::pg_version(&admin),
        postings = tenants * instances,
        hosts = (tenants / 10).max(1),
        groups = m.groups,
        agg = m.aggregate_s,
        invoices = m.invoices,
        chunk = billing::invoices::RUN_CHUNK,
        fin = m.finalize_s,
        read = m.invoices_s - m.finalize_s,
        inv = m.invoices_s,
        statements = m.statements,
        st = m.statements_s,
    );
    common::write_section("## Invoice run", &section)?;
    println!("{section}");
    Ok(())
}

struct Measured {
    aggregate_s: f64,
    groups: i64,
    invoices_s: f64,
    finalize_s: f64,
    invoices: usize,
    statements_s: f64,
    statements: usize,
}

async fn run(url: &str, tenants: usize, instances: usize) -> anyhow::Result<Measured> {
    platform::db::migrate(url)?;
    let mut conn = PgConnection::establish(url)?;
    let started = Instant::now();
    setup(&mut conn, tenants, instances)?;
    eprintln!(
        "setup: {} postings in {:.1} s",
        tenants * instances,
        started.elapsed().as_secs_f64()
    );
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let end = Utc::now();

    let mut samples = Vec::new();
    let mut groups = 0;
    for _ in 0..3 {
        let (s, g) = aggregate(&mut conn, end)?;
        samples.push(s);
        groups = g;
    }
    samples.sort_by(f64::total_cmp);
    let aggregate_s = samples[1];
    eprintln!("aggregate: {groups} groups in {aggregate_s:.3} s");

    let db = platform::Db::connect(url, 2)?;
    let settings = settings();
    let period = billing::invoices::InvoicePeriod::Monthly;
    let started = Instant::now();
    let ids = billing::invoices::finalize_all(&db, &settings, period, end).await?;
    let finalize_s = started.elapsed().as_secs_f64();
    // Reading back as `run_invoices` returns them: the re-run finds every
    // invoice finalized and only reads, which times the reading on its own.
    let started = Instant::now();
    let run = billing::invoices::run_invoices(
        &db,
        &settings,
        period,
        contracts::api::RunInvoicesRequest {
            period_end: Some(end),
            tenant_id: None,
        },
    )
    .await?;
    let rerun_s = started.elapsed().as_secs_f64();
    anyhow::ensure!(run.invoices.len() == ids.len() && ids.len() == tenants);
    let invoices_s = finalize_s + rerun_s;
    eprintln!(
        "invoices: {} finalized in {finalize_s:.3} s, read back in {rerun_s:.3} s",
        ids.len()
    );

    let started = Instant::now();
    let stated = billing::statements::run_statements(
        &db,
        &settings,
        period,
        contracts::api::RunStatementsRequest {
            period_end: Some(end),
            host_tenant_id: None,
        },
    )
    .await?;
    let statements_s = started.elapsed().as_secs_f64();
    eprintln!(
        "statements: {} in {statements_s:.3} s",
        stated.statements.len()
    );
    Ok(Measured {
        aggregate_s,
        groups,
        invoices_s,
        finalize_s,
        invoices: ids.len(),
        statements_s,
        statements: stated.statements.len(),
    })
}
