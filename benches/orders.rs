//! `make bench`: `createOrder` through the gateway. Starts the whole stack
//! as `gpumarket dev` in a child process (every service, the outbox relays
//! and consumers, one provisioner with the simulated driver at zero step
//! latency, the demo market and its simulated agents) on a fresh database
//! and RabbitMQ vhost, lists machines, and measures:
//!
//! - createOrder throughput and p50/p99 latency at 1, 16 and 64 concurrent
//!   clients (each client its own renter tenant, one GPU per order, the
//!   orders spread over the machines as renters' choices would be);
//! - order-to-running overhead: from the instance row (order accepted) to
//!   `running_at`, with nothing else in flight, so what is measured is the
//!   platform (outbox, broker, worker, reports), not a driver;
//! - its baseline: a bare lapin publish → consume round trip on the same
//!   broker (a temporary exclusive queue, deleted after), and the ratio of
//!   the two p99s, issue 17's goal 3;
//! - the stack's peak resident memory (the child's RSS from /proc, with its
//!   own children's, sampled every 50 ms from start to stop), issue 17's
//!   goal 6 (`stack_peak_rss_mb`);
//! - a pgbench baseline on the same Postgres once the stack has stopped
//!   (TPC-B-like, scale 10, 8 clients, 30 s; `--tiny`: scale 1, 2 s) and the
//!   ratio of createOrder's throughput at 64 clients to its TPS, issue 17's
//!   goal 4 (`create_order_vs_pgbench`). pgbench comes with PostgreSQL
//!   (`deploy/local/ensure-services.sh` installs it); without it the bench
//!   fails and says so.
//!
//! Flags: `--orders N` per concurrency level (default 256), `--machines N`
//! (8 GPUs each, default enough for every order), `--sequential N` orders
//! for the overhead (default 50), `--round-trips N` for the baseline
//! (default 200), `--outbox-poll-ms N` (default: config),
//! `--rate-limit-per-minute N` (default 0: off), `--pgbench-seconds N`,
//! `--pgbench-scale N`, `--perf FILE` (the figures as JSON), `--tiny` (4
//! orders, 2 sequential: `make bench-smoke`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use diesel::{Connection, PgConnection, RunQueryDsl};
use gpumarket::client::Client;
use platform::Config;
use platform::rabbitmq_admin::RabbitAdmin;
use serde_json::json;
use tokio::io::AsyncBufReadExt;

mod common;
use common::{Goal, arg, machine_facts, percentile, sized};
use futures_util::StreamExt;

const PASSWORD: &str = "bench-password-1";
const LEVELS: [usize; 3] = [1, 16, 64];
const SSH_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketBenchKey bench@gpumarket";

/// Deletes the agent users the stack created on `vhost` (the demo
/// machines' agents): users are broker-wide, so deleting the vhost alone
/// would leave one per machine on the shared broker every run.
async fn delete_agent_users(admin: &RabbitAdmin, vhost: &str) -> anyhow::Result<()> {
    for permission in admin.permissions_in(vhost).await? {
        if permission.user.starts_with("agent-") {
            admin.delete_user(&permission.user).await?;
        }
    }
    Ok(())
}

async fn sign_up(api: &Client, roles: &[&str]) -> anyhow::Result<(Client, String)> {
    let email = format!("b-{}@bench.dev", uuid::Uuid::now_v7().simple());
    let data = api
        .run(
            "mutation($input: SignUpInput!) { signUp(input: $input) { token me { tenantId } } }",
            json!({ "input": { "email": email, "password": PASSWORD, "tenantName": "Bench Org", "roles": roles } }),
        )
        .await?;
    let token = data["signUp"]["token"].as_str().context("token")?;
    let tenant = data["signUp"]["me"]["tenantId"]
        .as_str()
        .context("tenant")?
        .to_owned();
    Ok((api.with_token(token), tenant))
}

async fn listed_machine(host: &Client, i: usize) -> anyhow::Result<String> {
    let data = host
        .run(
            "mutation($input: RegisterMachineInput!) { registerMachine(input: $input) { machine { id } } }",
            json!({ "input": {
                "name": format!("bench-{i}"), "gpuModel": "RTX 4090", "gpuCount": 8, "vramGib": 24,
                "cpuCores": 64, "ramGib": 256, "diskGib": 4000, "country": "US",
                "idempotencyKey": format!("bench-machine-{i}"),
            }}),
        )
        .await?;
    let id = data["registerMachine"]["machine"]["id"]
        .as_str()
        .context("machine id")?
        .to_owned();
    host.run(
        "mutation($id: ID!, $p: Decimal!) { setMachinePricing(machineId: $id, pricePerGpuHour: $p) { id } }",
        json!({ "id": id, "p": "0.39" }),
    )
    .await?;
    host.run(
        "mutation($id: ID!) { listMachine(machineId: $id) { listed } }",
        json!({ "id": id }),
    )
    .await?;
    Ok(id)
}

async fn create_order(renter: &Client, offer: &str, key: &str) -> anyhow::Result<String> {
    let data = renter
        .run(
            "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id status } }",
            json!({ "input": { "offerId": offer, "gpuCount": 1, "idempotencyKey": key, "sshPublicKey": SSH_KEY } }),
        )
        .await
        .map_err(|e| anyhow::anyhow!("createOrder: {} {}", e.code, e.message))?;
    Ok(data["createOrder"]["id"]
        .as_str()
        .context("instance id")?
        .to_owned())
}

struct Level {
    clients: usize,
    orders: usize,
    seconds: f64,
    p50: f64,
    p99: f64,
}

/// Every order of the run takes the next machine in turn, so no machine is
/// asked for more GPUs than it has (the bench lists just enough machines);
/// a full machine would measure INSUFFICIENT_CAPACITY, not createOrder.
struct Placement {
    machines: Vec<String>,
    next: AtomicUsize,
}

impl Placement {
    fn next(&self) -> &str {
        &self.machines[self.next.fetch_add(1, Ordering::Relaxed) % self.machines.len()]
    }
}

async fn level(
    renters: &[Client],
    placement: &Arc<Placement>,
    clients: usize,
    orders: usize,
) -> anyhow::Result<Level> {
    let per_client = orders.div_ceil(clients);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, renter) in renters.iter().take(clients).enumerate() {
        let renter = renter.clone();
        let placement = placement.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_client);
            for n in 0..per_client {
                let key = format!("bench-{clients}-{c}-{n}");
                let t = Instant::now();
                create_order(&renter, placement.next(), &key).await?;
                latencies.push(t.elapsed());
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let seconds = started.elapsed().as_secs_f64();
    latencies.sort();
    Ok(Level {
        clients,
        orders: latencies.len(),
        seconds,
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
    })
}

/// Where one order's way to `running` went, in milliseconds: the command's
/// way to the worker (outbox relay, RabbitMQ, the job row), the wait for a
/// worker to claim it, the eight steps, and the report back to ordering.
#[derive(diesel::QueryableByName, Clone, Copy)]
struct Overhead {
    #[diesel(sql_type = diesel::sql_types::Double)]
    total: f64,
    #[diesel(sql_type = diesel::sql_types::Double)]
    delivery: f64,
    #[diesel(sql_type = diesel::sql_types::Double)]
    claim: f64,
    #[diesel(sql_type = diesel::sql_types::Double)]
    steps: f64,
    /// Of `steps`, the time inside the driver (the steps' own durations);
    /// the rest is the step log, its events and the lease.
    #[diesel(sql_type = diesel::sql_types::Double)]
    driver: f64,
    #[diesel(sql_type = diesel::sql_types::Double)]
    report: f64,
}

/// The breakdown of an instance's order-to-running time, or None while the
/// instance is not running yet.
fn overhead_ms(conn: &mut PgConnection, id: &str) -> anyhow::Result<Option<Overhead>> {
    let rows: Vec<Overhead> = diesel::sql_query(
        "SELECT (extract(epoch FROM i.running_at - i.created_at) * 1000)::float8 AS total, \
                (extract(epoch FROM j.created_at - i.created_at) * 1000)::float8 AS delivery, \
                (extract(epoch FROM min(s.started_at) - j.created_at) * 1000)::float8 AS claim, \
                (extract(epoch FROM j.finished_at - min(s.started_at)) * 1000)::float8 AS steps, \
                coalesce(sum(s.duration_ms), 0)::float8 AS driver, \
                (extract(epoch FROM i.running_at - j.finished_at) * 1000)::float8 AS report \
         FROM ordering.instances i \
         JOIN provisioner.jobs j ON j.instance_id = i.id AND j.kind = 'provision' \
         JOIN provisioner.job_steps s ON s.job_id = j.id \
         WHERE i.id = $1::uuid AND i.running_at IS NOT NULL AND j.finished_at IS NOT NULL \
         GROUP BY i.running_at, i.created_at, j.created_at, j.finished_at",
    )
    .bind::<diesel::sql_types::Text, _>(id)
    .load(conn)?;
    Ok(rows.first().copied())
}

async fn wait_all_running(conn: &mut PgConnection, expected: i64) -> anyhow::Result<()> {
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let n: N = diesel::sql_query(
            "SELECT count(*) AS n FROM ordering.instances WHERE state = 'running'",
        )
        .get_result(conn)?;
        if n.n >= expected {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} of {expected} instances running after 10 minutes",
            n.n
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `--name VALUE` from the command line.
fn text_arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let orders = sized("--orders", 256, 4);
    let sequential = sized("--sequential", 50, 2);
    let round_trips = sized("--round-trips", 200, 5);
    let pgbench_scale = sized("--pgbench-scale", 10, 1);
    let pgbench_seconds = sized("--pgbench-seconds", 30, 2);
    let perf_file = text_arg("--perf");
    // Each client places at least one order, so a level places
    // `orders.div_ceil(clients) * clients` of them (more than `orders` when
    // there are fewer orders than clients, as with --tiny).
    let needed_gpus: usize = LEVELS
        .iter()
        .map(|&clients| orders.div_ceil(clients) * clients)
        .sum::<usize>()
        + sequential;
    let machines_n = arg("--machines", needed_gpus.div_ceil(8) + 4);
    let base = Config::from_env()?;
    let name = format!("gpumarket_bench_orders_{}", std::process::id());
    let admin = platform::config::replace_db_name(&base.database_url, "postgres");
    // Before anything is created: without pgbench there is no baseline.
    let pgbench = Pgbench::find(&admin)?;
    let mut config = base.with_database(&name);
    let outbox_poll_ms = arg("--outbox-poll-ms", config.outbox_poll_ms as usize) as u64;
    let rate_limit = arg("--rate-limit-per-minute", 0);
    let amqp = reqwest::Url::parse(&config.amqp_url)?;
    config.amqp_url = format!(
        "amqp://{}:{}@{}:{}/{name}",
        amqp.username(),
        amqp.password().unwrap_or_default(),
        amqp.host_str().unwrap_or("127.0.0.1"),
        amqp.port().unwrap_or(5672)
    );
    let broker = RabbitAdmin::new(&config.rabbitmq_management_url)?;
    broker.put_vhost(&name).await?;
    platform::db::create_database(&admin, &name)?;
    platform::db::migrate(&config.database_url)?;
    let url = config.database_url.clone();

    let amqp_url = config.amqp_url.clone();
    let settings = StackSettings {
        database_url: url.clone(),
        amqp_url: amqp_url.clone(),
        outbox_poll_ms,
        rate_limit,
    };
    let result = async {
        let measured = run(&settings, &url, orders, sequential, machines_n).await?;
        // After the stack has stopped: the same broker and the same
        // Postgres, nothing else on them.
        let trips = round_trip_ms(&amqp_url, round_trips).await?;
        let tps = pgbench.run(pgbench_scale, pgbench_seconds)?;
        anyhow::Ok((measured, trips, tps))
    }
    .await;

    if let Err(error) = delete_agent_users(&broker, &name).await {
        eprintln!("agent users of vhost {name} not deleted: {error}");
    }
    let _ = broker.delete_vhost(&name).await;
    platform::db::drop_database(&admin, &name)?;
    let (measured, trips, tps) = result?;
    let Measured {
        levels,
        overhead,
        idle_rss_mb,
        peak_rss_mb,
    } = measured;
    let overhead_p99 = {
        let mut total: Vec<Duration> = overhead
            .iter()
            .map(|o| Duration::from_secs_f64(o.total.max(0.0) / 1000.0))
            .collect();
        total.sort();
        percentile(&total, 0.99)
    };
    let trip_p50 = percentile(&trips, 0.50);
    let trip_p99 = percentile(&trips, 0.99);
    let goal = common::ratio(
        "order_to_running_vs_roundtrip",
        overhead_p99 / trip_p99.max(f64::EPSILON),
        Goal::AtMost(5.0),
    );
    let busiest = levels
        .last()
        .map_or(0.0, |l| l.orders as f64 / l.seconds.max(f64::EPSILON));
    let vs_pgbench = busiest / tps.max(f64::EPSILON);
    let pgbench_goal = common::ratio("create_order_vs_pgbench", vs_pgbench, Goal::AtLeast(0.5));
    let rss_goal = common::ratio("stack_peak_rss_mb", peak_rss_mb, Goal::AtMost(300.0));

    let rows: Vec<String> = levels
        .iter()
        .map(|l| {
            format!(
                "| {} | {} | {:.1} | {:.0} | {:.1} | {:.1} |",
                l.clients,
                l.orders,
                l.seconds,
                l.orders as f64 / l.seconds,
                l.p50,
                l.p99
            )
        })
        .collect();
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let section = format!(
        "## createOrder\n\n\
         `make bench` (`cargo bench --bench orders -- --orders {orders} --sequential {sequential}`), run {date} on {facts}, \
         PostgreSQL {pg}, {build} build. The stack is `gpumarket dev` in a child process: every service, relay and consumer \
         in one process with one provisioner (simulated driver, zero step latency) and the demo market's simulated agents, \
         relays woken on commit (fallback poll {outbox_poll_ms} ms). {machines_n} listed machines with 8 GPUs each. \
         Each client is its own renter tenant placing one-GPU orders one after another through the gateway \
         (GraphQL over HTTP: JWT, quota reserve and funds check side by side, allocation, instance and outbox command); \
         latencies in milliseconds, from request to response.\n\n\
         | concurrent clients | orders | seconds | orders/s | p50 ms | p99 ms |\n|---|---|---|---|---|---|\n{rows}\n\n\
         **Baseline for throughput**: pgbench on the same Postgres after the stack stopped (TPC-B-like, scale {pgbench_scale}, \
         8 clients, {pgbench_seconds} s): {tps:.0} TPS. createOrder at {busiest_clients} clients: {busiest:.0} orders/s.\n\n\
         **Memory**: the stack's resident set (the child and any children, from /proc, every 50 ms): \
         {idle_rss_mb:.0} MB once seeded, {peak_rss_mb:.0} MB at peak (sign-ups and the order bursts).\n\n\
         **Order-to-running overhead** with nothing else in flight ({sequential} orders one at a time; from the \
         instance row to `running_at`), and where it goes: *delivery* is the command's way to the worker (outbox \
         relay, RabbitMQ, the job row), *claim* the wait for a worker to take the job, *steps* the eight steps \
         with their step log and events, *report* the worker's report to ordering and the `running` transition. \
         The relays and the job claim are woken by the commits that give them work (Postgres LISTEN/NOTIFY); \
         they also poll, every {outbox_poll_ms} ms for the relay, in case a notification is lost.\n\n\
         | part | p50 ms | p99 ms | max ms |\n|---|---|---|---|\n{breakdown}\n\n\
         **Baseline for latency**: a bare lapin publish → consume round trip on the same broker ({n_trips} round trips, \
         one at a time, a temporary exclusive queue, no confirms or persistence): p50 {trip_p50:.2} ms, \
         p99 {trip_p99:.2} ms.\n\n```\n{goal}\n{pgbench_goal}\n{rss_goal}\n```\n\n",
        rows = rows.join("\n"),
        date = chrono::Utc::now().format("%Y-%m-%d"),
        facts = machine_facts(),
        pg = common::pg_version(&admin),
        breakdown = breakdown(&overhead),
        n_trips = trips.len(),
        busiest_clients = LEVELS[LEVELS.len() - 1],
    );
    if let Some(path) = perf_file {
        let figures = json!({
            "create_order_vs_pgbench": vs_pgbench,
            "stack_peak_rss_mb": peak_rss_mb,
            "stack_idle_rss_mb": idle_rss_mb,
            "pgbench_tps": tps,
            "pgbench_scale": pgbench_scale,
            "pgbench_seconds": pgbench_seconds,
            "order_to_running_vs_roundtrip": overhead_p99 / trip_p99.max(f64::EPSILON),
            "build": build,
            "tiny": common::tiny(),
            "levels": levels.iter().map(|l| json!({
                "clients": l.clients,
                "orders": l.orders,
                "seconds": l.seconds,
                "orders_per_second": l.orders as f64 / l.seconds.max(f64::EPSILON),
                "p50_ms": l.p50,
                "p99_ms": l.p99,
            })).collect::<Vec<_>>(),
        });
        std::fs::write(&path, serde_json::to_string_pretty(&figures)? + "\n")
            .with_context(|| format!("writing --perf {path}"))?;
        eprintln!("figures written to {path}");
    }
    common::write_section("## createOrder", &section)?;
    println!("{section}");
    Ok(())
}

/// pgbench, the one that matches the server's major version when Debian's
/// layout has it (`/usr/lib/postgresql/<major>/bin`), else the first on
/// PATH; and where it connects (the admin URL's host, port and user).
struct Pgbench {
    program: std::path::PathBuf,
    admin_url: String,
}

impl Pgbench {
    fn find(admin_url: &str) -> anyhow::Result<Pgbench> {
        let version = common::pg_version(admin_url);
        let major = version
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap_or_default()
            .to_owned();
        let debian = std::path::PathBuf::from(format!("/usr/lib/postgresql/{major}/bin/pgbench"));
        let candidates = [debian, std::path::PathBuf::from("pgbench")];
        for program in candidates {
            let works = std::process::Command::new(&program)
                .arg("--version")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if works {
                return Ok(Pgbench {
                    program,
                    admin_url: admin_url.to_owned(),
                });
            }
        }
        anyhow::bail!(
            "pgbench not found (neither /usr/lib/postgresql/{major}/bin/pgbench nor on PATH): the \
             createOrder bench measures its throughput baseline with it. Run `make services` \
             (deploy/local/ensure-services.sh installs it on Debian/Ubuntu), or install the \
             PostgreSQL {major} package that ships pgbench, then run again"
        )
    }

    /// `pgbench` with the connection of the admin URL.
    fn command(&self) -> anyhow::Result<std::process::Command> {
        let url = reqwest::Url::parse(&self.admin_url)?;
        let mut cmd = std::process::Command::new(&self.program);
        cmd.env("PGHOST", url.host_str().unwrap_or("127.0.0.1"))
            .env("PGPORT", url.port().unwrap_or(5432).to_string());
        if !url.username().is_empty() {
            cmd.env("PGUSER", url.username());
        }
        if let Some(password) = url.password() {
            cmd.env("PGPASSWORD", password);
        }
        // As `gpumarket dev` connects: the URL's sslmode, else no TLS to a
        // local server (src/main.rs, `without_tls_when_local`).
        match url.query_pairs().find(|(k, _)| k == "sslmode") {
            Some((_, mode)) => {
                cmd.env("PGSSLMODE", mode.as_ref());
            }
            None if matches!(url.host_str(), Some("127.0.0.1" | "localhost" | "[::1]")) => {
                cmd.env("PGSSLMODE", "disable");
            }
            None => {}
        }
        Ok(cmd)
    }

    /// TPS of the TPC-B-like script on a database of its own at `scale`, 8
    /// clients on 2 threads for `seconds` (the database is dropped after).
    fn run(&self, scale: usize, seconds: usize) -> anyhow::Result<f64> {
        let db = format!("gpumarket_bench_pgbench_{}", std::process::id());
        platform::db::create_database(&self.admin_url, &db)?;
        let result = (|| {
            let init = self
                .command()?
                .args(["-i", "-q", "-s", &scale.to_string(), &db])
                .output()
                .context("running pgbench -i")?;
            anyhow::ensure!(
                init.status.success(),
                "pgbench -i failed: {}",
                String::from_utf8_lossy(&init.stderr)
            );
            let out = self
                .command()?
                .args(["-n", "-c", "8", "-j", "2", "-T", &seconds.to_string(), &db])
                .output()
                .context("running pgbench")?;
            let text = String::from_utf8_lossy(&out.stdout);
            anyhow::ensure!(
                out.status.success(),
                "pgbench failed: {}{}",
                text,
                String::from_utf8_lossy(&out.stderr)
            );
            // `tps = 1071.523 (without initial connection time)`
            text.lines()
                .filter_map(|l| l.trim().strip_prefix("tps = "))
                .find_map(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
                .with_context(|| format!("no tps in pgbench's output:\n{text}"))
        })();
        platform::db::drop_database(&self.admin_url, &db)?;
        let tps = result?;
        eprintln!("pgbench: scale {scale}, 8 clients, {seconds} s: {tps:.0} TPS");
        Ok(tps)
    }
}

/// `trips` bare publish → consume round trips through a temporary exclusive,
/// auto-delete queue on the broker of `amqp_url`, one at a time; sorted.
async fn round_trip_ms(amqp_url: &str, trips: usize) -> anyhow::Result<Vec<Duration>> {
    use lapin::options::{
        BasicConsumeOptions, BasicPublishOptions, QueueDeclareOptions, QueueDeleteOptions,
    };
    use lapin::types::FieldTable;
    let conn = lapin::Connection::connect(amqp_url, lapin::ConnectionProperties::default()).await?;
    let channel = conn.create_channel().await?;
    let queue = channel
        .queue_declare(
            "".into(),
            QueueDeclareOptions {
                exclusive: true,
                auto_delete: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    let name = queue.name().clone();
    let mut deliveries = channel
        .basic_consume(
            name.clone(),
            "".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    let mut samples = Vec::with_capacity(trips);
    for n in 0..trips {
        let t = Instant::now();
        channel
            .basic_publish(
                "".into(),
                name.clone(),
                BasicPublishOptions::default(),
                format!("{n}").as_bytes(),
                lapin::BasicProperties::default(),
            )
            .await?;
        let delivery = tokio::time::timeout(Duration::from_secs(30), deliveries.next())
            .await
            .context("no delivery within 30 s")?
            .context("the consumer ended")??;
        samples.push(t.elapsed());
        anyhow::ensure!(delivery.data == format!("{n}").as_bytes(), "out of order");
    }
    channel
        .queue_delete(name, QueueDeleteOptions::default())
        .await?;
    channel.close(200, "done".into()).await?;
    conn.close(200, "done".into()).await?;
    samples.sort();
    Ok(samples)
}

/// One table row per part of the order-to-running time.
fn breakdown(samples: &[Overhead]) -> String {
    type Part = (&'static str, fn(&Overhead) -> f64);
    let parts: [Part; 7] = [
        ("total", |o| o.total),
        ("delivery", |o| o.delivery),
        ("claim", |o| o.claim),
        ("steps", |o| o.steps),
        ("steps: in the driver", |o| o.driver),
        ("steps: step log, events, lease", |o| o.steps - o.driver),
        ("report", |o| o.report),
    ];
    parts
        .iter()
        .map(|(name, part)| {
            let mut ms: Vec<Duration> = samples
                .iter()
                .map(|o| Duration::from_secs_f64(part(o).max(0.0) / 1000.0))
                .collect();
            ms.sort();
            format!(
                "| {name} | {:.1} | {:.1} | {:.1} |",
                percentile(&ms, 0.50),
                percentile(&ms, 0.99),
                percentile(&ms, 1.0)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What the child stack is told besides the defaults.
struct StackSettings {
    database_url: String,
    amqp_url: String,
    outbox_poll_ms: u64,
    rate_limit: usize,
}

/// `gpumarket dev` as a child process, with its resident memory sampled.
struct Stack {
    child: tokio::process::Child,
    gateway_url: String,
    peak_kib: Arc<std::sync::atomic::AtomicU64>,
    sampler: tokio::task::JoinHandle<()>,
}

impl Stack {
    /// Starts `gpumarket dev` (the binary of this build) on the bench's
    /// database and vhost, every port chosen by the system, and waits until
    /// it has seeded the demo market and says it is running.
    async fn start(settings: &StackSettings) -> anyhow::Result<Stack> {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_gpumarket"));
        cmd.arg("dev")
            .env("GPUMARKET_DATABASE_URL", &settings.database_url)
            .env("GPUMARKET_AMQP_URL", &settings.amqp_url)
            .env("GPUMARKET_SIM_STEP_LATENCY_MS", "")
            .env("GPUMARKET_SIM_STEP_FAILURES", "")
            .env("GPUMARKET_DEFAULT_MAX_GPUS", "1000000")
            .env("GPUMARKET_HEARTBEAT_GRACE_SECONDS", "86400")
            // The benchmark's own limit: none by default. It is one trusted
            // load generator measuring the order path, which the per-caller
            // rate limit (1200/min by default) would cut off at once
            // (RATE_LIMITED); the limiter itself is measured by the security
            // tests. `--rate-limit-per-minute N` puts one back.
            .env(
                "GPUMARKET_RATE_LIMIT_PER_MINUTE",
                settings.rate_limit.to_string(),
            )
            .env(
                "GPUMARKET_OUTBOX_POLL_MS",
                settings.outbox_poll_ms.to_string(),
            )
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or("warn".into()),
            )
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true);
        for port in [
            "GPUMARKET_GATEWAY_PORT",
            "GPUMARKET_CATALOG_PORT",
            "GPUMARKET_ORDERING_PORT",
            "GPUMARKET_QUOTA_PORT",
            "GPUMARKET_METERING_PORT",
            "GPUMARKET_BILLING_PORT",
            "GPUMARKET_PROVISIONER_PORT",
        ] {
            cmd.env(port, "0");
        }
        let mut child = cmd.spawn().context("starting `gpumarket dev`")?;
        let pid = child.id().context("the child's pid")?;
        let peak_kib = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let sampler = tokio::spawn({
            let peak_kib = peak_kib.clone();
            async move {
                loop {
                    peak_kib.fetch_max(tree_rss_kib(pid), Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        });
        let stdout = child.stdout.take().context("the child's stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let mut gateway_url = None;
        let ready = tokio::time::timeout(Duration::from_secs(600), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(url) = line.trim().strip_prefix("GraphiQL:") {
                    gateway_url = Some(url.trim().trim_end_matches("/graphql").to_owned());
                }
                if line.starts_with("Use a key as the header") {
                    return anyhow::Ok(());
                }
            }
            anyhow::bail!("`gpumarket dev` ended before it was running")
        })
        .await;
        match ready {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => anyhow::bail!("`gpumarket dev` was not running after 10 minutes"),
        }
        // Whatever it prints later must not fill the pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Stack {
            child,
            gateway_url: gateway_url.context("`gpumarket dev` printed no GraphiQL URL")?,
            peak_kib,
            sampler,
        })
    }

    /// Resident memory of the stack now, in MB.
    fn rss_mb(&self) -> f64 {
        self.child
            .id()
            .map_or(0.0, |pid| tree_rss_kib(pid) as f64 / 1024.0)
    }

    /// Stops the stack as Ctrl-C would (SIGTERM, then SIGKILL after 30 s);
    /// the peak resident memory seen while it ran, in MB.
    async fn stop(mut self) -> anyhow::Result<f64> {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        match tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await {
            Ok(status) => {
                status?;
            }
            Err(_) => {
                eprintln!("`gpumarket dev` still running 30 s after SIGTERM; killing it");
                self.child.kill().await?;
            }
        }
        self.sampler.abort();
        Ok(self.peak_kib.load(Ordering::Relaxed) as f64 / 1024.0)
    }
}

/// Resident memory of `pid` and all its descendants, in KiB (VmRSS from
/// /proc; 0 for a process that is gone).
fn tree_rss_kib(pid: u32) -> u64 {
    let rss = |pid: u32| -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.split_whitespace().next()?.parse().ok())
            })
            .unwrap_or(0)
    };
    // Parent of every process: /proc/<pid>/stat's fourth field, after the
    // parenthesised name (which may hold spaces).
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(id) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{id}/stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            if let Some(ppid) = ppid {
                parents.push((id, ppid));
            }
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        i += 1;
    }
    tree.into_iter().map(rss).sum()
}

struct Measured {
    levels: Vec<Level>,
    overhead: Vec<Overhead>,
    idle_rss_mb: f64,
    peak_rss_mb: f64,
}

async fn run(
    settings: &StackSettings,
    url: &str,
    orders: usize,
    sequential: usize,
    machines_n: usize,
) -> anyhow::Result<Measured> {
    let stack = Stack::start(settings).await?;
    let idle_rss_mb = stack.rss_mb();
    eprintln!(
        "`gpumarket dev` running at {}, {idle_rss_mb:.0} MB resident",
        stack.gateway_url
    );
    let api = Client::new(&stack.gateway_url);
    // The demo operator `gpumarket dev` creates.
    let login = api
        .run(
            "mutation($e: String!, $p: String!) { login(email: $e, password: $p) { token } }",
            json!({ "e": gpumarket::seed::OPERATOR_EMAIL, "p": gpumarket::seed::DEMO_PASSWORD }),
        )
        .await?;
    let operator = api.with_token(login["login"]["token"].as_str().context("token")?);

    let (host, _) = sign_up(&api, &["HOST"]).await?;
    let mut machines = Vec::with_capacity(machines_n);
    for i in 0..machines_n {
        machines.push(listed_machine(&host, i).await?);
    }
    let mut conn = PgConnection::establish(url)?;
    diesel::sql_query("UPDATE catalog.machines SET last_heartbeat_at = now()")
        .execute(&mut conn)?;
    let placement = Arc::new(Placement {
        machines,
        next: AtomicUsize::new(0),
    });

    let mut renters = Vec::new();
    for _ in 0..LEVELS[LEVELS.len() - 1] {
        let (renter, tenant) = sign_up(&api, &["RENTER"]).await?;
        operator
            .run(
                "mutation($t: ID!, $a: Decimal!, $k: String!) { grantCredit(tenantId: $t, amount: $a, idempotencyKey: $k, reason: \"bench\") { amount } }",
                json!({ "t": tenant, "a": "1000000", "k": uuid::Uuid::now_v7().to_string() }),
            )
            .await?;
        renters.push(renter);
    }
    eprintln!(
        "{} machines, {} renters ready, {:.0} MB resident",
        placement.machines.len(),
        renters.len(),
        stack.rss_mb()
    );

    let mut levels = Vec::new();
    for clients in LEVELS {
        let result = level(&renters, &placement, clients, orders).await?;
        eprintln!(
            "{clients} clients: {:.0} orders/s, p50 {:.1} ms, p99 {:.1} ms, {:.0} MB resident",
            result.orders as f64 / result.seconds,
            result.p50,
            result.p99,
            stack.rss_mb()
        );
        levels.push(result);
    }
    let placed: usize = levels.iter().map(|l| l.orders).sum();
    // The provisioner drains the burst before the quiet measurement starts.
    wait_all_running(&mut conn, placed as i64).await?;

    let mut overhead = Vec::with_capacity(sequential);
    for n in 0..sequential {
        let id = create_order(&renters[0], placement.next(), &format!("bench-seq-{n}")).await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(o) = overhead_ms(&mut conn, &id)? {
                overhead.push(o);
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "instance {id} never ran");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    drop(conn);
    let peak_rss_mb = stack.stop().await?;
    eprintln!("`gpumarket dev` peak resident memory: {peak_rss_mb:.0} MB");
    Ok(Measured {
        levels,
        overhead,
        idle_rss_mb,
        peak_rss_mb,
    })
}
