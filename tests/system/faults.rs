//! `make faults`: the split stack under a steady load of orders, stops,
//! destroys, heartbeats and usage while services and workers are killed with
//! SIGKILL and RabbitMQ and PostgreSQL are restarted; then quiescence and the
//! invariants a marketplace promises (docs/reliability.md, which this writes).
//!
//! Left out of `make test` by the nextest profile's default filter
//! (`.config/nextest.toml`): it restarts its database and broker, so it runs
//! on a PostgreSQL cluster and a RabbitMQ node of its own
//! (tests/faults/infra.sh) that `make faults` starts and points the test at.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use diesel::RunQueryDsl;
use gpumarket::client::{Client, GraphQlError};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Value, json};

use crate::harness::*;
use crate::processes::{SERVICES, Split, machine_with_agent_process};

const RENTERS: usize = 6;
const MACHINES: usize = 3;
const GPUS_PER_MACHINE: i32 = 4;
/// How long a killed process stays dead before it is started again.
const DEAD_FOR: Duration = Duration::from_secs(2);
/// Load between two faults.
const BETWEEN_FAULTS: Duration = Duration::from_secs(8);
/// States an instance only passes through; none may remain at quiescence.
const PASSING: [&str; 5] = [
    "pending",
    "allocating",
    "provisioning",
    "stopping",
    "deprovisioning",
];

/// What the load did, for the report.
#[derive(Default)]
struct Tally {
    placed: u64,
    running: u64,
    failed: u64,
    stopped: u64,
    destroyed: u64,
    /// Errors the load saw and retried or gave up on: when, what was
    /// asked, the code and the first words of the message.
    errors: Vec<(Instant, String, String, String)>,
}

impl Tally {
    fn error(&mut self, op: &str, e: &GraphQlError) {
        let message: String = e.message.chars().take(160).collect();
        self.errors
            .push((Instant::now(), op.to_owned(), e.code.clone(), message));
    }

    /// "CODE n (op n, ...)" for the errors seen in `from..to`.
    fn summary(&self, from: Instant, to: Instant) -> String {
        let mut by_code: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
        for (t, op, code, _) in &self.errors {
            if *t >= from && *t < to {
                *by_code.entry(code).or_default().entry(op).or_default() += 1;
            }
        }
        if by_code.is_empty() {
            return "none".into();
        }
        by_code
            .iter()
            .map(|(code, ops)| {
                let total: u64 = ops.values().sum();
                let ops: Vec<String> = ops.iter().map(|(op, n)| format!("{op} {n}")).collect();
                format!("{code} {total} ({})", ops.join(", "))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The first message of each code, for the report.
    fn first_messages(&self) -> BTreeMap<&str, &str> {
        let mut first = BTreeMap::new();
        for (_, _, code, message) in &self.errors {
            first.entry(code.as_str()).or_insert(message.as_str());
        }
        first
    }
}

type Shared = Arc<Mutex<Tally>>;

/// One call with a deadline: a request to a process that is being killed
/// must not hang the load.
async fn call(api: &Client, query: &str, vars: Value) -> Result<Value, GraphQlError> {
    match tokio::time::timeout(Duration::from_secs(20), api.run(query, vars)).await {
        Ok(result) => result,
        Err(_) => Err(GraphQlError {
            code: "TIMEOUT".into(),
            message: "no answer in 20 s".into(),
        }),
    }
}

/// Codes that say "try again": the request did not get through, or a
/// dependency was down. Everything else is the system's answer.
fn transient(code: &str) -> bool {
    matches!(
        code,
        "TRANSPORT" | "TIMEOUT" | "UNAVAILABLE" | "INTERNAL" | "RATE_LIMITED"
    )
}

async fn status(api: &Client, id: &str) -> Option<String> {
    call(
        api,
        "query($id: ID!) { instance(id: $id) { status } }",
        json!({ "id": id }),
    )
    .await
    .ok()
    .and_then(|d| d["instance"]["status"].as_str().map(str::to_owned))
}

/// Waits until the instance is in one of `states`; the last status seen.
async fn settle(api: &Client, id: &str, states: &[&str], limit: Duration) -> Option<String> {
    let deadline = Instant::now() + limit;
    let mut last = None;
    while Instant::now() < deadline {
        if let Some(s) = status(api, id).await {
            if states.contains(&s.as_str()) {
                return Some(s);
            }
            last = Some(s);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    last
}

/// Asks for `mutation` on the instance until its status is one of `done`
/// (a retried stop of an instance that already stopped is done, not an
/// error).
async fn act(api: &Client, tally: &Shared, mutation: &str, id: &str, done: &[&str]) -> bool {
    let query = format!("mutation($id: ID!) {{ {mutation}(id: $id) {{ status }} }}");
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if let Err(e) = call(api, &query, json!({ "id": id })).await {
            tally.lock().expect("tally").error(mutation, &e);
        }
        if settle(api, id, done, Duration::from_secs(10))
            .await
            .is_some()
        {
            return true;
        }
    }
    false
}

/// One renter: order by constraints, wait for it to run, let it run a
/// little, then stop and destroy it or destroy it outright; over and over
/// until `stop`. The last instance is left running for quiescence.
async fn renter_load(api: Client, seed: u64, stop: Arc<AtomicBool>, tally: Shared) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !stop.load(Ordering::SeqCst) {
        let key = uuid::Uuid::now_v7().to_string();
        let gpus: i32 = rng.gen_range(1..=2);
        let mut id = None;
        // The same key again after a transient error: the first attempt may
        // have placed the order. An order that failed keeps its answer for
        // its key, so after a few tries it is a new order, as a client would.
        for _ in 0..3 {
            let placed = call(
                &api,
                "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id status } }",
                json!({ "input": {
                    "constraints": { "gpuModels": ["RTX 4090"] },
                    "gpuCount": gpus, "idempotencyKey": key,
                    "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey faults@gpumarket",
                }}),
            )
            .await;
            match placed {
                Ok(d) => {
                    id = d["createOrder"]["id"].as_str().map(str::to_owned);
                    break;
                }
                Err(e) => {
                    tally.lock().expect("tally").error("createOrder", &e);
                    if !transient(&e.code) {
                        // Full, or over quota: the market's answer. Later.
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
        let Some(id) = id else { continue };
        tally.lock().expect("tally").placed += 1;
        match settle(&api, &id, &["running", "failed"], Duration::from_secs(120))
            .await
            .as_deref()
        {
            Some("running") => tally.lock().expect("tally").running += 1,
            Some("failed") => {
                tally.lock().expect("tally").failed += 1;
                continue;
            }
            other => {
                // Quiescence reports it if it never settles.
                let e = GraphQlError {
                    code: "NOT_RUNNING_IN_120S".into(),
                    message: format!("last status {}", other.unwrap_or("unknown")),
                };
                tally.lock().expect("tally").error("waiting", &e);
                continue;
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(1000..4000))).await;
        if stop.load(Ordering::SeqCst) {
            break;
        }
        if rng.gen_bool(0.5) && act(&api, &tally, "stopInstance", &id, &["stopped"]).await {
            tally.lock().expect("tally").stopped += 1;
            tokio::time::sleep(Duration::from_millis(rng.gen_range(500..2000))).await;
        }
        if act(&api, &tally, "destroyInstance", &id, &["destroyed"]).await {
            tally.lock().expect("tally").destroyed += 1;
        }
    }
}

/// One injected fault, as the report shows it.
struct Fault {
    at: Duration,
    what: String,
    started: Instant,
    /// From the fault to every HTTP process answering `/readyz` again.
    recovered_after: Option<Duration>,
    /// The load's errors from this fault to the next.
    errors_seen: String,
}

/// Waits until every service and the gateway answer `/readyz`.
async fn all_ready(split: &Split, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let http = reqwest::Client::new();
    'again: while started.elapsed() < limit {
        for name in SERVICES.iter().copied().chain(["gateway", "provisioner"]) {
            let ok = http
                .get(format!("{}/readyz", split.url(name)))
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if !ok {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue 'again;
            }
        }
        return Some(started.elapsed());
    }
    None
}

fn infra(command: &str) {
    let script = std::env::var("GPUMARKET_FAULTS_INFRA")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/tests/faults/infra.sh").into());
    let status = std::process::Command::new("bash")
        .arg(&script)
        .arg(command)
        .status()
        .expect("run infra.sh");
    assert!(status.success(), "infra.sh {command}: {status}");
}

/// Rows of a query as JSON objects (the test reads every schema as the
/// database owner).
fn rows(env: &TestEnv, sql: &str) -> Vec<Value> {
    #[derive(diesel::QueryableByName)]
    struct J {
        #[diesel(sql_type = diesel::sql_types::Text)]
        j: String,
    }
    let wrapped = format!("SELECT coalesce(json_agg(x), '[]')::text AS j FROM ({sql}) x");
    let out: Vec<J> = diesel::sql_query(&wrapped)
        .load(&mut env.conn())
        .expect(sql);
    serde_json::from_str(&out[0].j).expect("json")
}

fn at(v: &Value) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

fn whole_seconds(from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
    (to - from)
        .num_microseconds()
        .expect("micros")
        .div_euclid(1_000_000)
}

/// The broker's view of the test's vhost: queue name → messages (ready and
/// unacknowledged).
async fn queue_depths(env: &TestEnv) -> BTreeMap<String, i64> {
    let (url, user, pass) = management(&env.config);
    let vhost = env.config.amqp_vhost().expect("vhost");
    let queues: Value = reqwest::Client::new()
        .get(
            url.join(&format!("api/queues/{}", urlencode(&vhost)))
                .expect("url"),
        )
        .basic_auth(user, Some(pass))
        .send()
        .await
        .expect("management API")
        .json()
        .await
        .expect("queues");
    queues
        .as_array()
        .into_iter()
        .flatten()
        .map(|q| {
            let n = q["messages_ready"].as_i64().unwrap_or(0)
                + q["messages_unacknowledged"].as_i64().unwrap_or(0);
            (q["name"].as_str().unwrap_or("?").to_owned(), n)
        })
        .collect()
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn is_dead_letter(queue: &str) -> bool {
    queue.ends_with(".dead")
}

/// Waits until nothing is in flight: no instance in a passing state, every
/// outbox published and every queue but the dead letters empty, twice in a
/// row across the management API's sampling interval.
async fn quiesce(env: &TestEnv, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut calm_since: Option<Instant> = None;
    while started.elapsed() < limit {
        let passing = env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instances WHERE state IN ({})",
            PASSING.map(|s| format!("'{s}'")).join(", ")
        ));
        let unpublished = env.count(
            "SELECT (SELECT count(*) FROM catalog.outbox WHERE published_at IS NULL)
                  + (SELECT count(*) FROM ordering.outbox WHERE published_at IS NULL)
                  + (SELECT count(*) FROM quota.outbox WHERE published_at IS NULL)
                  + (SELECT count(*) FROM metering.outbox WHERE published_at IS NULL)
                  + (SELECT count(*) FROM billing.outbox WHERE published_at IS NULL)
                  + (SELECT count(*) FROM provisioner.outbox WHERE published_at IS NULL) AS n",
        );
        let queued: i64 = queue_depths(env)
            .await
            .iter()
            .filter(|(q, _)| !is_dead_letter(q))
            .map(|(_, n)| n)
            .sum();
        let webhooks_pending =
            env.count("SELECT count(*) AS n FROM webhooks.deliveries WHERE status = 'pending'");
        if passing == 0 && unpublished == 0 && queued == 0 && webhooks_pending == 0 {
            let since = *calm_since.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(7) {
                return Some(started.elapsed());
            }
        } else {
            calm_since = None;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    None
}

/// One invariant's verdict.
struct Verdict {
    name: &'static str,
    held: bool,
    detail: String,
}

fn verdict(name: &'static str, held: bool, detail: impl Into<String>) -> Verdict {
    Verdict {
        name,
        held,
        detail: detail.into(),
    }
}

/// Every state change a renter's webhook subscribes to reached its receiver,
/// verified by the Standard Webhooks reference library, under one
/// `webhook-id` per event (a retry after a kill repeats the id, never
/// makes a new one), and only at its own tenant's path.
fn webhook_invariants(env: &TestEnv, received: &[Value], out: &mut Vec<Verdict>) {
    let events = rows(
        env,
        "SELECT e.instance_id::text AS i, e.seq AS s, i.tenant_id::text AS t \
           FROM ordering.instance_events e JOIN ordering.instances i ON i.id = e.instance_id \
          WHERE e.kind = 'state_changed' AND (e.from_state IS NULL OR e.to_state IN \
                ('running', 'stopped', 'preempted', 'host_lost', 'failed', 'destroyed'))",
    );
    // (instance, sequence) -> webhook ids that delivered it (2xx).
    let mut delivered: BTreeMap<(String, i64), std::collections::BTreeSet<String>> =
        BTreeMap::new();
    let mut unverified = 0;
    let mut foreign = 0;
    for d in received {
        if d["verified"] != true {
            unverified += 1;
            continue;
        }
        let body: Value =
            serde_json::from_str(d["body"].as_str().unwrap_or("{}")).unwrap_or_default();
        let data = &body["data"];
        if d["path"].as_str() != Some(&format!("/t/{}", data["tenant_id"].as_str().unwrap_or("?")))
        {
            foreign += 1;
        }
        if d["status"] == 204
            && let (Some(i), Some(s)) = (data["instance_id"].as_str(), data["sequence"].as_i64())
        {
            delivered
                .entry((i.to_owned(), s))
                .or_default()
                .insert(d["id"].as_str().unwrap_or_default().to_owned());
        }
    }
    let missing: Vec<String> = events
        .iter()
        .filter_map(|e| {
            let key = (e["i"].as_str()?.to_owned(), e["s"].as_i64()?);
            (!delivered.contains_key(&key)).then(|| format!("{}#{}", key.0, key.1))
        })
        .collect();
    let split_ids = delivered.values().filter(|ids| ids.len() > 1).count();
    let failed =
        env.count("SELECT count(*) AS n FROM webhooks.deliveries WHERE status <> 'delivered'");
    let attempts = received.len();
    out.push(verdict(
        "W1 every subscribed instance event reached its webhook receiver, verified",
        missing.is_empty() && unverified == 0 && failed == 0,
        format!(
            "{} events, {} delivered; missing: {}; unverified deliveries: {unverified}; \
             deliveries not delivered: {failed}; {attempts} requests received in all",
            events.len(),
            delivered.len(),
            if missing.is_empty() {
                "none".to_owned()
            } else {
                missing.join(", ")
            }
        ),
    ));
    out.push(verdict(
        "W2 one webhook-id per event, and only at its own tenant's endpoint",
        split_ids == 0 && foreign == 0,
        format!("events delivered under more than one id: {split_ids}; at another tenant's path: {foreign}"),
    ));
}

/// GPUs held in catalog and quota against the instances that run.
fn capacity_invariants(env: &TestEnv, phase: &str, out: &mut Vec<Verdict>) {
    let live = rows(
        env,
        "SELECT order_id::text AS o, gpu_count AS g FROM ordering.instances WHERE state = 'running' ORDER BY 1",
    );
    let allocations = rows(
        env,
        "SELECT order_id::text AS o, gpu_count AS g FROM catalog.allocations WHERE released_at IS NULL ORDER BY 1",
    );
    let reservations = rows(
        env,
        "SELECT order_id::text AS o, gpu_count AS g FROM quota.reservations WHERE released_at IS NULL ORDER BY 1",
    );
    let gpus = |rs: &[Value]| rs.iter().filter_map(|r| r["g"].as_i64()).sum::<i64>();
    // An order's own state is its saga's: `provisioning` once it has its
    // instance, whose lifecycle it then follows; `failed` is terminal.
    let stuck = rows(
        env,
        "SELECT o.id::text, o.state, i.state AS instance FROM ordering.orders o
         LEFT JOIN ordering.instances i ON i.order_id = o.id
         WHERE NOT (o.state = 'failed'
                    OR (o.state = 'provisioning' AND i.state IN ('running', 'stopped', 'destroyed', 'failed')))",
    );
    let settled = env.count("SELECT count(*) AS n FROM ordering.orders");
    out.push(verdict(
        if phase == "A" {
            "A1 every order terminal or running"
        } else {
            "B1 every order terminal or running"
        },
        stuck.is_empty(),
        format!(
            "{settled} orders; not settled: {}",
            if stuck.is_empty() {
                "none".to_owned()
            } else {
                serde_json::to_string(&stuck).unwrap_or_default()
            }
        ),
    ));
    let drift = env.count(
        "SELECT count(*) AS n FROM catalog.machines m WHERE m.gpus_allocated <>
           (SELECT coalesce(sum(a.gpu_count), 0) FROM catalog.allocations a
            WHERE a.machine_id = m.id AND a.released_at IS NULL)",
    );
    out.push(verdict(
        if phase == "A" {
            "A2 allocations equal live instances"
        } else {
            "B2 allocations equal live instances"
        },
        allocations == live && drift == 0,
        format!(
            "{} instances running on {} GPUs; {} live allocations of {} GPUs; machines whose counter drifted: {drift}",
            live.len(),
            gpus(&live),
            allocations.len(),
            gpus(&allocations)
        ),
    ));
    out.push(verdict(
        if phase == "A" {
            "A3 quota usage equals live instances"
        } else {
            "B3 quota usage equals live instances"
        },
        reservations == live,
        format!(
            "{} live reservations of {} GPUs",
            reservations.len(),
            gpus(&reservations)
        ),
    ));
}

/// Money and time: the ledger balances, metering's intervals match
/// ordering's record of when each instance ran, and billing charged exactly
/// their whole seconds, none lost and none twice.
fn money_invariants(env: &TestEnv, out: &mut Vec<Verdict>) {
    let unbalanced = rows(
        env,
        "SELECT transaction_id, sum(amount)::text AS s FROM billing.entries GROUP BY 1 HAVING sum(amount) <> 0",
    );
    let drift = env.count(
        "SELECT count(*) AS n FROM billing.accounts a WHERE a.balance <>
           (SELECT coalesce(sum(e.amount), 0) FROM billing.entries e WHERE e.account_id = a.id)",
    );
    let postings = env.count("SELECT count(*) AS n FROM billing.transactions");
    out.push(verdict(
        "B4 the ledger balances",
        unbalanced.is_empty() && drift == 0,
        format!(
            "{postings} postings; unbalanced: {}; accounts whose balance is not the sum of their entries: {drift}",
            unbalanced.len()
        ),
    ));

    // Ordering's record: each entry into `running` to the next transition.
    let runs = rows(
        env,
        "SELECT instance_id::text AS i, at AS s, next_at AS e, next_state AS via FROM (
           SELECT instance_id, to_state, at,
                  lead(at) OVER (PARTITION BY instance_id ORDER BY id) AS next_at,
                  lead(to_state) OVER (PARTITION BY instance_id ORDER BY id) AS next_state
           FROM ordering.instance_transitions) t
         WHERE to_state = 'running' ORDER BY instance_id, at",
    );
    let intervals = rows(
        env,
        "SELECT id::text, instance_id::text AS i, meter, started_at AS s, ended_at AS e, seconds,
                (SELECT coalesce(sum(d.seconds), 0) FROM billing.usage_details d WHERE d.interval_id = m.id)::bigint AS billed
         FROM metering.intervals m WHERE meter IN ('gpu', 'storage') ORDER BY instance_id, meter, run_seq, started_at",
    );
    let mut recorded: HashMap<String, Vec<&Value>> = HashMap::new();
    for r in &runs {
        recorded
            .entry(r["i"].as_str().unwrap_or_default().to_owned())
            .or_default()
            .push(r);
    }
    let mut metered: HashMap<String, Vec<&Value>> = HashMap::new();
    for i in intervals.iter().filter(|i| i["meter"] == "gpu") {
        metered
            .entry(i["i"].as_str().unwrap_or_default().to_owned())
            .or_default()
            .push(i);
    }
    let mut mismatched = Vec::new();
    let mut host_lost_runs = 0;
    let mut run_seconds = 0i64;
    for (instance, runs) in &recorded {
        let ivs = metered.get(instance).cloned().unwrap_or_default();
        if ivs.len() != runs.len() {
            mismatched.push(format!(
                "{instance}: {} runs, {} intervals",
                runs.len(),
                ivs.len()
            ));
            continue;
        }
        for (run, iv) in runs.iter().zip(ivs) {
            let (Some(s), Some(e)) = (at(&run["s"]), at(&run["e"])) else {
                mismatched.push(format!("{instance}: a run never ended"));
                continue;
            };
            run_seconds += whole_seconds(s, e);
            let lost = run["via"] == "host_lost";
            host_lost_runs += usize::from(lost);
            // A lost host's run is billed to its last heartbeat, before the
            // reconciler noticed.
            let end_ok = if lost {
                at(&iv["e"]).is_some_and(|ie| ie <= e)
            } else {
                at(&iv["e"]) == Some(e)
            };
            if at(&iv["s"]) != Some(s) || !end_ok {
                mismatched.push(format!(
                    "{instance}: ran {s}..{e}, metered {}..{}",
                    iv["s"], iv["e"]
                ));
            }
        }
    }
    let orphans = metered
        .keys()
        .filter(|i| !recorded.contains_key(*i))
        .count();
    out.push(verdict(
        "B5 metered intervals equal the recorded running intervals",
        mismatched.is_empty() && orphans == 0,
        format!(
            "{} runs of {} instances, {run_seconds} GPU-instance-seconds; ended by a lost host: {host_lost_runs}; mismatches: {}; intervals of instances that never ran: {orphans}",
            runs.len(),
            recorded.len(),
            if mismatched.is_empty() {
                "none".to_owned()
            } else {
                mismatched.join("; ")
            }
        ),
    ));

    let mut wrong = Vec::new();
    let mut open = 0;
    let (mut gpu_seconds, mut storage_seconds) = (0i64, 0i64);
    for iv in &intervals {
        let (Some(s), Some(e)) = (at(&iv["s"]), at(&iv["e"])) else {
            open += 1;
            continue;
        };
        let seconds = whole_seconds(s, e);
        let billed = iv["billed"].as_i64().unwrap_or(-1);
        if iv["meter"] == "gpu" {
            gpu_seconds += billed;
        } else {
            storage_seconds += billed;
        }
        if iv["seconds"].as_i64() != Some(seconds) || billed != seconds {
            wrong.push(format!(
                "{} {}: {seconds} s long, recorded {}, billed {billed}",
                iv["meter"].as_str().unwrap_or("?"),
                iv["id"].as_str().unwrap_or("?"),
                iv["seconds"]
            ));
        }
    }
    let undetailed = env.count(
        "SELECT count(*) AS n FROM billing.transactions t WHERE t.kind = 'usage'
           AND NOT EXISTS (SELECT 1 FROM billing.usage_details d WHERE d.transaction_id = t.id)",
    );
    out.push(verdict(
        "B6 billed seconds equal metered seconds (none lost, none twice)",
        wrong.is_empty() && open == 0 && undetailed == 0,
        format!(
            "{} intervals; billed {gpu_seconds} GPU-interval-seconds and {storage_seconds} storage-interval-seconds; wrong: {}; still open: {open}; usage postings without details: {undetailed}",
            intervals.len(),
            if wrong.is_empty() {
                "none".to_owned()
            } else {
                wrong.join("; ")
            }
        ),
    ));
}

fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib / 1024 / 1024);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cores} cores ({cpu}), {mem_gib} GiB")
}

#[allow(clippy::too_many_lines)]
fn report(
    seconds: f64,
    tally: &Tally,
    faults: &[Fault],
    verdicts: &[Verdict],
    dead: &BTreeMap<String, i64>,
    versions: &str,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Reliability: the fault suite\n\n\
         Written by `make faults` (`tests/system/faults.rs`); run it again to refresh. \
         Every figure below is from the last run.\n\n\
         The split stack (six services, the gateway and a provisioner as eight processes, \
         plus {MACHINES} host agent processes with {GPUS_PER_MACHINE} simulated GPUs each) runs \
         on a PostgreSQL cluster and a RabbitMQ node of the suite's own (`tests/faults/infra.sh`), \
         so that restarting them disturbs nothing else. {RENTERS} renters keep ordering (1 or 2 GPUs, \
         placed by constraints), letting instances run 1 to 4 s, stopping half of them and destroying \
         them, retrying with the same idempotency key when a request fails; each renter has a webhook \
         endpoint on a local receiver that verifies every delivery with the Standard Webhooks \
         reference library and holds each for 200 ms; agents heartbeat every \
         second; metering settles running rentals every 2 s. Every {} s a fault is injected. \
         Then the load stops and the suite waits for quiescence (no instance in a passing state, \
         every outbox published, every queue but the dead letters empty, no webhook delivery pending), checks the capacity \
         invariants with the last instances still running (phase A), destroys them, waits again and \
         checks every invariant (phase B).\n",
        BETWEEN_FAULTS.as_secs()
    );
    let _ = writeln!(
        s,
        "Last run: {}, on {}; {versions}; {seconds:.0} s in all.\n",
        Utc::now().format("%Y-%m-%d %H:%M UTC"),
        machine()
    );
    let _ = writeln!(
        s,
        "## What the suite found\n\n\
         - **A peer's restart failed orders.** With billing killed for 2 s, every order placed \
         in that window failed its funds check with `UNAVAILABLE` (about 100 per fault), and \
         as a failed order keeps its answer for its key, retries with the same key kept \
         failing. Services now retry a refused connection for up to 6 s \
         (`platform::internal::CONNECT_RETRY_FOR`): a refused connection never carried the \
         request, so the retry is safe for every call. Since then a service's restart costs \
         the load nothing; only the gateway's own restart is seen by clients (`TRANSPORT`).\n\
         - **Reqwest's message hid the cause** (\"error sending request\"): internal call \
         errors now carry their chain of causes (refused, reset, timed out) in the logs.\n"
    );
    let _ = writeln!(s, "## Load\n");
    let _ = writeln!(
        s,
        "| orders placed | reached running | failed | stopped | destroyed | client errors (retried) |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|---|");
    let errors = match (tally.errors.first(), tally.errors.last()) {
        (Some(first), Some(last)) => tally.summary(first.0, last.0 + Duration::from_millis(1)),
        _ => "none".to_owned(),
    };
    let _ = writeln!(
        s,
        "| {} | {} | {} | {} | {} | {errors} |\n",
        tally.placed, tally.running, tally.failed, tally.stopped, tally.destroyed
    );
    let _ = writeln!(s, "## Faults injected\n");
    let _ = writeln!(
        s,
        "| # | at (s) | fault | every process ready again after (s) | client errors until the next fault |"
    );
    let _ = writeln!(s, "|---:|---:|---|---:|---|");
    for (i, f) in faults.iter().enumerate() {
        let _ = writeln!(
            s,
            "| {} | {:.0} | {} | {} | {} |",
            i + 1,
            f.at.as_secs_f64(),
            f.what,
            f.recovered_after
                .map_or("not recovered".to_owned(), |d| format!(
                    "{:.1}",
                    d.as_secs_f64()
                )),
            f.errors_seen
        );
    }
    let first = tally.first_messages();
    if !first.is_empty() {
        let _ = writeln!(s, "\nWhat the load was told, first message of each code:\n");
        for (code, message) in first {
            let _ = writeln!(s, "- `{code}`: {message}");
        }
    }
    let _ = writeln!(s, "\n## Invariants\n");
    let _ = writeln!(s, "| invariant | held | detail |");
    let _ = writeln!(s, "|---|---|---|");
    for v in verdicts {
        let _ = writeln!(
            s,
            "| {} | {} | {} |",
            v.name,
            if v.held { "yes" } else { "**NO**" },
            v.detail.replace('|', "\\|")
        );
    }
    let _ = writeln!(s, "\n## Dead letters\n");
    if dead.values().all(|n| *n == 0) {
        let _ = writeln!(s, "None: no message was dead-lettered.");
    } else {
        for (q, n) in dead {
            let _ = writeln!(
                s,
                "- `{q}`: {n} messages (see docs/operations.md, \"Dead letters\")"
            );
        }
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_stack_keeps_its_promises_through_kills_and_restarts() {
    assert!(
        std::env::var_os("GPUMARKET_FAULTS_INFRA").is_some(),
        "run through `make faults`: it restarts the database and broker it is given"
    );
    let began = Instant::now();
    let env = TestEnv::new().await;
    let mut settings = vec![
        ("GPUMARKET_SETTLEMENT_INTERVAL_MS", "2000"),
        ("GPUMARKET_HEARTBEAT_GRACE_SECONDS", "60"),
        // Every renter has a webhook endpoint on a local receiver; retries
        // are seconds apart so that every delivery lands before the end.
        ("GPUMARKET_WEBHOOKS_ALLOW_LOCAL", "true"),
        (
            "GPUMARKET_WEBHOOKS_RETRY_SCHEDULE",
            "1,1,2,2,3,3,5,5,5,5,10,10,10,10,10,10",
        ),
        ("GPUMARKET_WEBHOOKS_TIMEOUT_MS", "3000"),
    ];
    if std::env::var_os("RUST_LOG").is_none() {
        // Warnings are what a fault is expected to cause; errors are not.
        settings.push(("RUST_LOG", "error"));
    }
    let mut split = Split::start(&env.config, &settings).await;
    let api = Client::new(&split.url("gateway"));
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let mut agents = Vec::new();
    for (n, price) in ["0.90", "1.20", "1.50"].iter().enumerate().take(MACHINES) {
        let name = format!("agent-{}", n + 1);
        let machine = machine_with_agent_process(
            &env.config,
            &mut split,
            &host,
            &name,
            GPUS_PER_MACHINE,
            price,
        )
        .await;
        // Disks are billed too: storage intervals run from creation to
        // destroy, stopped or not.
        host.run(
            "mutation($id: ID!, $p: Decimal!) { setMachinePricing(machineId: $id, pricePerGpuHour: $p, storagePricePerGbMonth: \"0.10\") { id } }",
            json!({ "id": machine, "p": price }),
        )
        .await
        .expect("storage price");
        agents.push(name);
    }
    let operator = env.operator(&api).await;
    let mut renters = HashMap::new();
    // One receiver, one path and secret per renter; every delivery is held
    // 200 ms, so a kill of the webhook service lands mid-delivery.
    let receiver = crate::webhooks::Receiver::start();
    receiver
        .control("/_hang", json!({ "count": 1_000_000, "seconds": 0.2 }))
        .await;
    for _ in 0..RENTERS {
        let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
        grant(&operator, &tenant, "1000").await;
        let path = format!("/t/{tenant}");
        let created = renter
            .run(
                crate::webhooks::CREATE,
                json!({ "input": { "url": receiver.url(&path) } }),
            )
            .await
            .expect("createWebhookEndpoint");
        let secret = created["createWebhookEndpoint"]["secret"]
            .as_str()
            .expect("secret");
        receiver
            .control("/_secret", json!({ "secret": secret, "path": path }))
            .await;
        renters.insert(tenant, renter);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let tally: Shared = Arc::default();
    let load: Vec<_> = renters
        .values()
        .enumerate()
        .map(|(n, renter)| {
            tokio::spawn(renter_load(
                renter.clone(),
                n as u64 + 1,
                stop.clone(),
                tally.clone(),
            ))
        })
        .collect();

    let load_began = Instant::now();
    let mut faults: Vec<Fault> = Vec::new();
    let kills: Vec<Vec<String>> = SERVICES
        .iter()
        .chain(&["gateway", "provisioner"])
        .map(|s| vec![(*s).to_owned()])
        .chain([vec![agents[0].clone()]])
        .chain([vec!["rabbitmq".into()], vec!["postgres".into()]])
        .chain([vec![
            "ordering".into(),
            "provisioner".into(),
            "billing".into(),
        ]])
        .collect();
    // `GPUMARKET_FAULTS_ONLY=billing,rabbitmq`: only the faults that name
    // one of these (for chasing one fault's effect).
    let only: Option<Vec<String>> = std::env::var("GPUMARKET_FAULTS_ONLY")
        .ok()
        .map(|v| v.split(',').map(str::to_owned).collect());
    for victims in kills {
        if only
            .as_ref()
            .is_some_and(|only| !victims.iter().any(|v| only.contains(v)))
        {
            continue;
        }
        tokio::time::sleep(BETWEEN_FAULTS).await;
        let at = load_began.elapsed();
        let started = Instant::now();
        let what = match victims[0].as_str() {
            "rabbitmq" => {
                tokio::task::spawn_blocking(|| infra("restart-rabbitmq"))
                    .await
                    .expect("join");
                "RabbitMQ stopped and started again".to_owned()
            }
            "postgres" => {
                tokio::task::spawn_blocking(|| infra("restart-postgres"))
                    .await
                    .expect("join");
                "PostgreSQL crashed (immediate shutdown) and started again".to_owned()
            }
            _ => {
                for v in &victims {
                    split.kill(v);
                }
                tokio::time::sleep(DEAD_FOR).await;
                for v in &victims {
                    split.restart(v);
                }
                format!(
                    "SIGKILL {}, started again {} s later",
                    victims.join(" + "),
                    DEAD_FOR.as_secs()
                )
            }
        };
        let ready = all_ready(&split, Duration::from_secs(120)).await;
        faults.push(Fault {
            at,
            what,
            started,
            recovered_after: ready.map(|_| started.elapsed()),
            errors_seen: String::new(),
        });
    }
    tokio::time::sleep(BETWEEN_FAULTS).await;
    let windows_end: Vec<Instant> = faults
        .iter()
        .skip(1)
        .map(|f| f.started)
        .chain([Instant::now()])
        .collect();
    {
        let tally = tally.lock().expect("tally");
        for (f, end) in faults.iter_mut().zip(windows_end) {
            f.errors_seen = tally.summary(f.started, end);
        }
    }

    stop.store(true, Ordering::SeqCst);
    for task in load {
        let _ = tokio::time::timeout(Duration::from_secs(180), task).await;
    }
    let crashed = split.exited();

    let mut verdicts = vec![verdict(
        "no process ended on its own",
        crashed.is_empty(),
        if crashed.is_empty() {
            "every process lived until it was killed".to_owned()
        } else {
            format!("{crashed:?}")
        },
    )];
    let quiet_a = quiesce(&env, Duration::from_secs(180)).await;
    verdicts.push(verdict(
        "A0 quiescence after the load",
        quiet_a.is_some(),
        quiet_a.map_or("not reached in 180 s".to_owned(), |d| {
            format!("reached in {:.1} s", d.as_secs_f64())
        }),
    ));
    capacity_invariants(&env, "A", &mut verdicts);

    // Phase B: everything destroyed, so every interval closes and is billed.
    let live = rows(
        &env,
        "SELECT id::text AS i, tenant_id::text AS t FROM ordering.instances WHERE state IN ('running', 'stopped')",
    );
    let scratch: Shared = Arc::default();
    for inst in &live {
        let renter = &renters[inst["t"].as_str().expect("tenant")];
        act(
            renter,
            &scratch,
            "destroyInstance",
            inst["i"].as_str().expect("id"),
            &["destroyed"],
        )
        .await;
    }
    let quiet_b = quiesce(&env, Duration::from_secs(180)).await;
    verdicts.push(verdict(
        "B0 quiescence after destroying the rest",
        quiet_b.is_some(),
        quiet_b.map_or("not reached in 180 s".to_owned(), |d| {
            format!(
                "{} instances destroyed; reached in {:.1} s",
                live.len(),
                d.as_secs_f64()
            )
        }),
    ));
    capacity_invariants(&env, "B", &mut verdicts);
    money_invariants(&env, &mut verdicts);
    webhook_invariants(&env, &receiver.received().await, &mut verdicts);

    let depths = queue_depths(&env).await;
    let stuck: Vec<String> = depths
        .iter()
        .filter(|(q, n)| !is_dead_letter(q) && **n > 0)
        .map(|(q, n)| format!("{q}: {n}"))
        .collect();
    let dead: BTreeMap<String, i64> = depths
        .into_iter()
        .filter(|(q, _)| is_dead_letter(q))
        .collect();
    verdicts.push(verdict(
        "B7 no message left unacknowledged (dead letters reported)",
        stuck.is_empty(),
        format!(
            "queues holding messages: {}; dead-lettered: {}",
            if stuck.is_empty() {
                "none".to_owned()
            } else {
                stuck.join(", ")
            },
            dead.values().sum::<i64>()
        ),
    ));

    let versions = {
        let pg = rows(&env, "SELECT current_setting('server_version') AS v");
        format!(
            "PostgreSQL {}, RabbitMQ {}",
            pg[0]["v"].as_str().unwrap_or("?"),
            rabbit_version(&env).await
        )
    };
    let text = report(
        began.elapsed().as_secs_f64(),
        &tally.lock().expect("tally"),
        &faults,
        &verdicts,
        &dead,
        &versions,
    );
    println!("{text}");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reliability.md");
    std::fs::write(path, &text).expect("write docs/reliability.md");

    let broken: Vec<&str> = verdicts
        .iter()
        .filter(|v| !v.held)
        .map(|v| v.name)
        .collect();
    drop(split);
    assert!(broken.is_empty(), "invariants broken: {broken:?}");
    env.cleanup().await;
}

async fn rabbit_version(env: &TestEnv) -> String {
    let (url, user, pass) = management(&env.config);
    let overview: Option<Value> = async {
        reqwest::Client::new()
            .get(url.join("api/overview").ok()?)
            .basic_auth(user, Some(pass))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()
    }
    .await;
    overview
        .and_then(|o| o["rabbitmq_version"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}
