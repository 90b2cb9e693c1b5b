//! `make bench`: `createOrder` through the gateway. Starts the whole stack
//! (every service, the outbox relays and consumers, one provisioner with the
//! simulated driver at zero step latency) on a fresh database and RabbitMQ
//! vhost, lists machines, and measures:
//!
//! - createOrder throughput and p50/p99 latency at 1, 16 and 64 concurrent
//!   clients (each client its own renter tenant, one GPU per order, the
//!   orders spread over the machines as renters' choices would be);
//! - order-to-running overhead: from the instance row (order accepted) to
//!   `running_at`, with nothing else in flight, so what is measured is the
//!   platform (outbox, broker, worker, reports), not a driver;
//! - its baseline: a bare lapin publish → consume round trip on the same
//!   broker (a temporary exclusive queue, deleted after), and the ratio of
//!   the two p99s, issue 17's goal 3.
//!
//! Flags: `--orders N` per concurrency level (default 256), `--machines N`
//! (8 GPUs each, default enough for every order), `--sequential N` orders
//! for the overhead (default 50), `--round-trips N` for the baseline
//! (default 200), `--outbox-poll-ms N` (default: config),
//! `--rate-limit-per-minute N` (default 0: off), `--tiny` (4 orders, 2
//! sequential: `make bench-smoke`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use diesel::{Connection, PgConnection, RunQueryDsl};
use gpumarket::client::Client;
use gpumarket::dev::Parts;
use platform::Config;
use serde_json::json;

mod common;
use common::{Goal, arg, machine_facts, percentile, sized};
use futures_util::StreamExt;

const PASSWORD: &str = "bench-password-1";
const LEVELS: [usize; 3] = [1, 16, 64];
const SSH_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketBenchKey bench@gpumarket";

struct Broker {
    base: reqwest::Url,
    user: String,
    pass: String,
    http: reqwest::Client,
}

impl Broker {
    fn new(config: &Config) -> anyhow::Result<Broker> {
        let mut base = reqwest::Url::parse(&config.rabbitmq_management_url)?;
        let user = base.username().to_owned();
        let pass = base.password().unwrap_or_default().to_owned();
        let _ = base.set_username("");
        let _ = base.set_password(None);
        Ok(Broker {
            base,
            user,
            pass,
            http: reqwest::Client::new(),
        })
    }

    async fn create_vhost(&self, vhost: &str) -> anyhow::Result<()> {
        self.http
            .put(self.base.join(&format!("api/vhosts/{vhost}"))?)
            .basic_auth(&self.user, Some(&self.pass))
            .json(&json!({}))
            .send()
            .await?
            .error_for_status()?;
        self.http
            .put(
                self.base
                    .join(&format!("api/permissions/{vhost}/{}", self.user))?,
            )
            .basic_auth(&self.user, Some(&self.pass))
            .json(&json!({ "configure": ".*", "write": ".*", "read": ".*" }))
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    async fn delete_vhost(&self, vhost: &str) -> anyhow::Result<()> {
        self.http
            .delete(self.base.join(&format!("api/vhosts/{vhost}"))?)
            .basic_auth(&self.user, Some(&self.pass))
            .send()
            .await?;
        Ok(())
    }
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let orders = sized("--orders", 256, 4);
    let sequential = sized("--sequential", 50, 2);
    let round_trips = sized("--round-trips", 200, 5);
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
    let mut config = base.with_database(&name);
    config.ports = platform::config::Ports {
        gateway: 0,
        catalog: 0,
        ordering: 0,
        quota: 0,
        metering: 0,
        billing: 0,
    };
    config.sim_step_latency_ms = String::new();
    config.sim_step_failures = String::new();
    config.default_max_gpus = 1_000_000;
    config.heartbeat_grace_seconds = 86_400;
    // The benchmark's own limit: none. It is one trusted load generator
    // measuring the order path, which the per-caller rate limit (1200/min
    // by default) would cut off at once (RATE_LIMITED); the limiter itself
    // is measured by the security tests. `--rate-limit-per-minute N` puts
    // one back.
    config.rate_limit_per_minute = arg("--rate-limit-per-minute", 0) as u32;
    config.outbox_poll_ms = arg("--outbox-poll-ms", config.outbox_poll_ms as usize) as u64;
    let amqp = reqwest::Url::parse(&config.amqp_url)?;
    config.amqp_url = format!(
        "amqp://{}:{}@{}:{}/{name}",
        amqp.username(),
        amqp.password().unwrap_or_default(),
        amqp.host_str().unwrap_or("127.0.0.1"),
        amqp.port().unwrap_or(5672)
    );
    let broker = Broker::new(&config)?;
    broker.create_vhost(&name).await?;
    platform::db::create_database(&admin, &name)?;
    platform::db::migrate(&config.database_url)?;
    let url = config.database_url.clone();
    let poll_ms = config.outbox_poll_ms;

    let amqp_url = config.amqp_url.clone();
    let result = async {
        let measured = run(config, &url, orders, sequential, machines_n).await?;
        // After the stack has stopped: the same broker, nothing else on it.
        let trips = round_trip_ms(&amqp_url, round_trips).await?;
        anyhow::Ok((measured, trips))
    }
    .await;

    let _ = broker.delete_vhost(&name).await;
    platform::db::drop_database(&admin, &name)?;
    let ((levels, overhead), trips) = result?;
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
    let section = format!(
        "## createOrder\n\n\
         `make bench` (`cargo bench --bench orders -- --orders {orders} --sequential {sequential}`), run {date} on {facts}, \
         PostgreSQL {pg}, release build, every service, relay and consumer in one process with one provisioner \
         (simulated driver, zero step latency), relays woken on commit (fallback poll {poll_ms} ms). {machines_n} listed machines with 8 GPUs each. \
         Each client is its own renter tenant placing one-GPU orders one after another through the gateway \
         (GraphQL over HTTP: JWT, quota reserve, funds check, allocation, instance and outbox command); \
         latencies in milliseconds, from request to response.\n\n\
         | concurrent clients | orders | seconds | orders/s | p50 ms | p99 ms |\n|---|---|---|---|---|---|\n{rows}\n\n\
         **Order-to-running overhead** with nothing else in flight ({sequential} orders one at a time; from the \
         instance row to `running_at`), and where it goes: *delivery* is the command's way to the worker (outbox \
         relay, RabbitMQ, the job row), *claim* the wait for a worker to take the job, *steps* the eight steps \
         with their step log and events, *report* the worker's report to ordering and the `running` transition. \
         The relays and the job claim are woken by the commits that give them work (Postgres LISTEN/NOTIFY); \
         they also poll, every {poll_ms} ms for the relay, in case a notification is lost.\n\n\
         | part | p50 ms | p99 ms | max ms |\n|---|---|---|---|\n{breakdown}\n\n\
         **Baseline**: a bare lapin publish → consume round trip on the same broker ({n_trips} round trips, \
         one at a time, a temporary exclusive queue, no confirms or persistence): p50 {trip_p50:.2} ms, \
         p99 {trip_p99:.2} ms.\n\n`{goal}` (order-to-running p99 over the round trip's p99)\n\n",
        rows = rows.join("\n"),
        date = chrono::Utc::now().format("%Y-%m-%d"),
        facts = machine_facts(),
        pg = common::pg_version(&admin),
        breakdown = breakdown(&overhead),
        n_trips = trips.len(),
    );
    common::write_section("## createOrder", &section)?;
    println!("{section}");
    Ok(())
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
    let parts: [Part; 5] = [
        ("total", |o| o.total),
        ("delivery", |o| o.delivery),
        ("claim", |o| o.claim),
        ("steps", |o| o.steps),
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

async fn run(
    config: Config,
    url: &str,
    orders: usize,
    sequential: usize,
    machines_n: usize,
) -> anyhow::Result<(Vec<Level>, Vec<Overhead>)> {
    let stack = gpumarket::dev::start(
        config,
        Parts {
            services: true,
            messaging: true,
            provisioner: true,
        },
    )
    .await?;
    let api = Client::new(&stack.gateway_url);
    let db = platform::Db::connect(url, 1)?;
    let operator_email = format!("op-{}@bench.dev", uuid::Uuid::now_v7().simple());
    quota::create_operator(&db, &operator_email, PASSWORD).await?;
    let login = api
        .run(
            "mutation($e: String!, $p: String!) { login(email: $e, password: $p) { token } }",
            json!({ "e": operator_email, "p": PASSWORD }),
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
        "{} machines, {} renters ready",
        placement.machines.len(),
        renters.len()
    );

    let mut levels = Vec::new();
    for clients in LEVELS {
        let result = level(&renters, &placement, clients, orders).await?;
        eprintln!(
            "{clients} clients: {:.0} orders/s, p50 {:.1} ms, p99 {:.1} ms",
            result.orders as f64 / result.seconds,
            result.p50,
            result.p99
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
    stack.stop().await;
    Ok((levels, overhead))
}
