//! Split mode: every service, the gateway and a provisioner worker as its own
//! OS process (the built `gpumarket` binary), each on its own port and each
//! service on its own database role, talking only over HTTP and RabbitMQ;
//! the walking skeleton's flow runs through them as it does in dev mode
//! (`system::flow`). What `make run-split` starts, on this test's database
//! and vhost.

use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use chrono::{DateTime, Utc};
use contracts::money;
use gpumarket::client::Client;
use platform::Config;
use rust_decimal::Decimal;
use serde_json::json;

use crate::harness::*;

const SERVICES: [&str; 5] = ["catalog", "quota", "metering", "billing", "ordering"];

/// The processes of one split stack; dropping it kills them all, so a failed
/// assertion leaves nothing running.
struct Split {
    env: Vec<(String, String)>,
    ports: HashMap<&'static str, u16>,
    children: HashMap<&'static str, Child>,
}

impl Split {
    /// Starts the services, the gateway and one worker and waits until each
    /// HTTP process answers `/readyz`.
    async fn start(config: &Config) -> Split {
        // Held together so that the ports differ; freed just before use.
        let listeners: Vec<(&'static str, std::net::TcpListener)> = SERVICES
            .iter()
            .copied()
            .chain(["gateway"])
            .map(|name| (name, free_listener()))
            .collect();
        let ports: HashMap<&'static str, u16> = listeners
            .iter()
            .map(|(name, l)| (*name, l.local_addr().expect("addr").port()))
            .collect();
        drop(listeners);

        let mut env: Vec<(String, String)> = vec![
            ("GPUMARKET_DATABASE_URL".into(), config.database_url.clone()),
            ("GPUMARKET_DB_ROLE_PER_SERVICE".into(), "true".into()),
            ("GPUMARKET_DB_POOL_SIZE".into(), "2".into()),
            ("GPUMARKET_AMQP_URL".into(), config.amqp_url.clone()),
            (
                "GPUMARKET_RABBITMQ_MANAGEMENT_URL".into(),
                config.rabbitmq_management_url.clone(),
            ),
            ("GPUMARKET_BIND_HOST".into(), "127.0.0.1".into()),
            (
                "GPUMARKET_SERVICE_TOKEN".into(),
                config.service_token.clone(),
            ),
            (
                "GPUMARKET_OUTBOX_POLL_MS".into(),
                config.outbox_poll_ms.to_string(),
            ),
            // One posting for the whole run, as in `system::flow`.
            ("GPUMARKET_SETTLEMENT_INTERVAL_MS".into(), "3600000".into()),
            ("GPUMARKET_LOG_FORMAT".into(), "pretty".into()),
        ];
        if std::env::var_os("RUST_LOG").is_none() {
            env.push(("RUST_LOG".into(), "warn".into()));
        }
        for (name, port) in &ports {
            let upper = name.to_uppercase();
            env.push((format!("GPUMARKET_{upper}_PORT"), port.to_string()));
            if *name != "gateway" {
                env.push((
                    format!("GPUMARKET_{upper}_URL"),
                    format!("http://127.0.0.1:{port}"),
                ));
            }
        }

        let mut split = Split {
            env,
            ports,
            children: HashMap::new(),
        };
        for name in SERVICES.into_iter().chain(["gateway"]) {
            split.spawn(name, &["serve", name]);
        }
        split.spawn("provisioner", &["worker", "provisioner"]);
        for name in SERVICES.into_iter().chain(["gateway"]) {
            split.wait_ready(name).await;
        }
        split
    }

    fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}", self.ports[name])
    }

    fn pid(&self, name: &str) -> u32 {
        self.children[name].id()
    }

    /// Runs `args` as the process `name`, its output prefixed with the name.
    fn spawn(&mut self, name: &'static str, args: &[&str]) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpumarket"));
        cmd.args(args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn gpumarket");
        let prefix = |stream: Box<dyn std::io::Read + Send>| {
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stream).lines() {
                    match line {
                        Ok(line) => eprintln!("{name:<11}| {line}"),
                        Err(_) => break,
                    }
                }
            });
        };
        prefix(Box::new(child.stdout.take().expect("stdout")));
        prefix(Box::new(child.stderr.take().expect("stderr")));
        self.children.insert(name, child);
    }

    async fn wait_ready(&mut self, name: &'static str) {
        let url = format!("{}/readyz", self.url(name));
        let http = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = self
                .children
                .get_mut(name)
                .expect("child")
                .try_wait()
                .expect("try_wait")
            {
                panic!("{name} exited before it was ready: {status}");
            }
            let ok = http
                .get(&url)
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} not ready at {url}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn kill(&mut self, name: &str) {
        if let Some(mut child) = self.children.remove(name) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Split {
    fn drop(&mut self) {
        for child in self.children.values_mut() {
            let _ = child.kill();
        }
        for child in self.children.values_mut() {
            let _ = child.wait();
        }
    }
}

/// A listener on a free port below Linux's ephemeral range (32768 and up by
/// default): between this test freeing the port and its process binding it,
/// neither another test's port 0 nor an outgoing connection can take it.
fn free_listener() -> std::net::TcpListener {
    for _ in 0..1000 {
        // The low bits of a UUIDv7 are random.
        let port = 20_000 + (uuid::Uuid::now_v7().as_u128() % 12_000) as u16;
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            return listener;
        }
    }
    panic!("no free port in 20000..32000");
}

/// Open TCP connections of process `pid` to `port` (Linux `/proc`).
fn connections_to(pid: u32, port: u16) -> usize {
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fds")
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            target
                .to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')
                .map(str::to_owned)
        })
        .collect();
    let remote = format!(":{port:04X}");
    ["tcp", "tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .map(|line| line.split_whitespace().map(str::to_owned).collect())
                .collect::<Vec<Vec<String>>>()
        })
        .filter(|fields| {
            fields.len() > 9 && fields[2].ends_with(&remote) && inodes.contains(&fields[9])
        })
        .count()
}

/// Registers, prices and lists a 2-GPU machine, runs `gpumarket agent` for
/// it (simulated GPUs) and waits until the machine is online; its id.
async fn machine_with_agent_process(config: &Config, split: &mut Split, host: &Client) -> String {
    let data = host
        .run(
            "mutation($input: RegisterMachineInput!) { registerMachine(input: $input) { machine { id } agentToken } }",
            json!({ "input": {
                "name": "split-rig", "gpuModel": "RTX 4090", "gpuCount": 2, "vramGib": 24,
                "cpuCores": 16, "ramGib": 64, "diskGib": 1000, "country": "US",
                "cudaVersion": "12.4", "idempotencyKey": uuid::Uuid::now_v7().to_string(),
            }}),
        )
        .await
        .expect("registerMachine");
    let id = data["registerMachine"]["machine"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let token = data["registerMachine"]["agentToken"]
        .as_str()
        .expect("token")
        .to_owned();
    host.run(
        "mutation($id: ID!, $p: Decimal!) { setMachinePricing(machineId: $id, pricePerGpuHour: $p) { id } }",
        json!({ "id": id, "p": "0.42" }),
    )
    .await
    .expect("setMachinePricing");
    host.run(
        "mutation($id: ID!) { listMachine(machineId: $id) { listed } }",
        json!({ "id": id }),
    )
    .await
    .expect("listMachine");

    let amqp = reqwest::Url::parse(&config.amqp_url).expect("amqp url");
    let amqp_host = format!(
        "{}:{}",
        amqp.host_str().unwrap_or("127.0.0.1"),
        amqp.port().unwrap_or(5672)
    );
    let vhost = config.amqp_vhost().expect("vhost");
    split.spawn(
        "agent",
        &[
            "agent",
            "--machine-id",
            &id,
            "--token",
            &token,
            "--amqp-host",
            &amqp_host,
            "--vhost",
            &vhost,
            "--heartbeat-seconds",
            "1",
            "--simulate-gpus",
            "2",
        ],
    );
    eventually("machine online", Duration::from_secs(60), || async {
        let machines = host
            .run("{ myMachines { id online } }", json!({}))
            .await
            .expect("myMachines");
        machines["myMachines"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["id"] == id.as_str()))
            .filter(|m| m["online"] == true)
            .map(|_| ())
    })
    .await;
    id
}

fn instant(v: &serde_json::Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().expect("instant"))
        .expect("rfc3339")
        .with_timezone(&Utc)
}

fn dec(v: &serde_json::Value) -> Decimal {
    v.as_str()
        .expect("decimal string")
        .parse()
        .expect("decimal")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flow_runs_with_every_service_in_its_own_process() {
    let env = TestEnv::new().await;
    let mut split = Split::start(&env.config).await;
    let api = Client::new(&split.url("gateway"));

    // Host lists a machine; its agent, a process of its own as on a real
    // host, makes it online by heartbeating over RabbitMQ.
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let offer = machine_with_agent_process(&env.config, &mut split, &host).await;
    let (renter, renter_tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &renter_tenant, "100").await;

    let placed = order(&renter, &offer, 1, "split-1").await.expect("order");
    assert_eq!(placed["status"], "provisioning");
    let id = placed["id"].as_str().expect("id").to_owned();
    wait_running(&renter, &id, Duration::from_secs(90)).await;

    // Billing goes away while the instance runs and stops: the usage waits
    // in billing's queue, not in billing's memory.
    split.kill("billing");
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let stopped = renter
        .run(
            "mutation($id: ID!) { stopInstance(id: $id) { status runningAt stoppedAt } }",
            json!({ "id": id }),
        )
        .await
        .expect("stopInstance")["stopInstance"]
        .clone();
    assert_eq!(stopped["status"], "stopped");
    let t0 = instant(&stopped["runningAt"]);
    let t1 = instant(&stopped["stoppedAt"]);
    let expected_seconds = (t1 - t0)
        .num_microseconds()
        .expect("micros")
        .div_euclid(1_000_000);
    assert!(expected_seconds >= 2, "ran {expected_seconds} s");

    let usage = eventually("usage recorded", Duration::from_secs(60), || async {
        let u = renter
            .run(
                "query($id: ID) { usage(instanceId: $id) { billedSeconds startedAt endedAt } }",
                json!({ "id": id }),
            )
            .await
            .expect("usage");
        let intervals = u["usage"].as_array().cloned().unwrap_or_default();
        (intervals.len() == 1 && intervals[0]["billedSeconds"].is_i64())
            .then(|| intervals[0].clone())
    })
    .await;
    assert_eq!(usage["billedSeconds"].as_i64(), Some(expected_seconds));
    assert_eq!(instant(&usage["startedAt"]), t0);
    assert_eq!(instant(&usage["endedAt"]), t1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        env.count("SELECT count(*) AS n FROM billing.transactions WHERE kind = 'usage'"),
        0,
        "nothing posts usage while billing's process is down"
    );

    split.spawn("billing", &["serve", "billing"]);
    split.wait_ready("billing").await;
    let amount = money::rate(expected_seconds, "0.42".parse().expect("price"));
    let fee = money::split_fee(amount, "0.15".parse().expect("fee"));
    let balance = eventually("usage posted", Duration::from_secs(60), || async {
        let b = renter
            .run("{ balance { amount currency } }", json!({}))
            .await
            .ok()?;
        let amount = dec(&b["balance"]["amount"]);
        (amount != Decimal::from(100)).then_some(b["balance"].clone())
    })
    .await;
    assert_eq!(dec(&balance["amount"]), Decimal::from(100) - amount);
    assert_eq!(balance["currency"], "USD");
    let earnings = host
        .run(
            "{ hostEarnings { total postings { gross fee net instanceId } } }",
            json!({}),
        )
        .await
        .expect("hostEarnings")["hostEarnings"]
        .clone();
    assert_eq!(dec(&earnings["total"]), fee.host);
    assert_eq!(dec(&earnings["postings"][0]["gross"]), amount);
    assert_eq!(dec(&earnings["postings"][0]["fee"]), fee.fee);
    assert_eq!(earnings["postings"][0]["instanceId"], id.as_str());
    assert_eq!(
        env.count("SELECT count(*) AS n FROM billing.transactions WHERE kind = 'usage'"),
        1
    );
    assert_eq!(
        env.count("SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines"),
        0
    );
    assert_eq!(
        env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL"),
        0
    );

    // Separate processes, separate roles: each service and the worker is
    // connected as its own role, and the gateway holds no database
    // connection at all while the catalog (which served the flow) does.
    assert_eq!(
        env.count(
            "SELECT count(DISTINCT usename)::bigint AS n FROM pg_stat_activity
             WHERE datname = current_database() AND usename::text IN
             ('gpumarket_catalog', 'gpumarket_quota', 'gpumarket_metering',
              'gpumarket_billing', 'gpumarket_ordering', 'gpumarket_provisioner')"
        ),
        6
    );
    let pg_port = reqwest::Url::parse(&env.config.database_url)
        .ok()
        .and_then(|u| u.port())
        .unwrap_or(5432);
    assert!(connections_to(split.pid("catalog"), pg_port) > 0);
    assert_eq!(connections_to(split.pid("gateway"), pg_port), 0);
    let pids: HashSet<u32> = split.children.values().map(Child::id).collect();
    assert_eq!(
        pids.len(),
        8,
        "five services, the gateway, the worker, the agent"
    );

    drop(split);
    env.cleanup().await;
}
