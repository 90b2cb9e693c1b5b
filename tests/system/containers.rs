//! Real rentals (issue 16, docs/host-agent.md "Running rentals"): a machine
//! whose agent (`gpumarket agent`, its own OS process) runs each rental as a
//! container of a real engine (a private `podman system service` of the
//! test's own, deploy/local/podman-engine.sh) with simulated GPUs, and the
//! renter logs in with the real OpenSSH client through the agent's SSH
//! gateway. The provisioning worker uses the `agent` driver.
//!
//! Skipped (with a message) where no Podman is installed; CI and
//! `make test` install it (deploy/local/ensure-services.sh).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gpumarket::client::Client;
use gpumarket::dev::{Parts, Stack};
use serde_json::{Value, json};

use crate::harness::*;

const LIMIT: Duration = Duration::from_secs(90);
const IMAGE: &str = "localhost/gpumarket-test:latest";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether this machine can run the engine tests (Podman present, as root).
fn engine_available() -> bool {
    let podman = Command::new("podman")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !(podman && root) {
        eprintln!(
            "SKIPPED: the real-container tests need Podman and root (deploy/local/ensure-services.sh installs it)"
        );
    }
    podman && root
}

fn engine_script(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(repo().join("deploy/local/podman-engine.sh"))
        .args(args)
        .output()
        .expect("podman-engine.sh");
    assert!(
        out.status.success(),
        "podman-engine.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Waits for this test's turn with the engine, held until the returned
/// file is dropped: two Podman services on one storage each choose bridge
/// names and subnets from their own view, so the engine tests
/// (workers/host-agent/tests/engine.rs) and these take turns on one lock.
async fn take_turn() -> std::fs::File {
    tokio::task::spawn_blocking(|| {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(std::env::temp_dir().join("gpumarket-engine-tests.lock"))
            .expect("lock file");
        file.lock().expect("lock");
        file
    })
    .await
    .expect("join")
}

/// A fresh directory for a test's key pairs.
fn keys_dir() -> PathBuf {
    let keys = std::env::temp_dir().join(format!("gpm-keys-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&keys).expect("dir");
    keys
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// The private engine and one machine's agent process.
pub struct RealMachine {
    pub id: String,
    token: String,
    dir: PathBuf,
    pub socket: PathBuf,
    pub ssh_port: u16,
    port_range: String,
    amqp_host: String,
    vhost: String,
    agent: Option<Child>,
    /// Held while the test's engine runs ([`take_turn`]).
    _turn: std::fs::File,
}

impl RealMachine {
    pub async fn new(env: &TestEnv, host: &Client, gpus: i32) -> RealMachine {
        let turn = take_turn().await;
        let dir = std::env::temp_dir().join(format!("gpm-real-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).expect("dir");
        engine_script(&["image"]);
        let socket = PathBuf::from(engine_script(&["up", dir.to_str().expect("utf-8")]));
        let (id, token) =
            machine_for_agent(host, "podman-rig", "RTX 4090", gpus, Some(24), "0.40").await;
        let amqp = reqwest::Url::parse(&env.config.amqp_url).expect("amqp url");
        let base = 20000 + (free_port() % 20000);
        let mut machine = RealMachine {
            id,
            token,
            socket,
            ssh_port: free_port(),
            port_range: format!("{base}-{}", base + 49),
            amqp_host: format!(
                "{}:{}",
                amqp.host_str().unwrap_or("127.0.0.1"),
                amqp.port().unwrap_or(5672)
            ),
            vhost: env.config.amqp_vhost().expect("vhost"),
            dir,
            agent: None,
            _turn: turn,
        };
        machine.start_agent(&[]);
        machine
    }

    /// Starts the agent process; `env` adds settings (test hooks).
    pub fn start_agent(&mut self, env: &[(&str, &str)]) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpumarket"));
        cmd.args([
            "agent",
            "--machine-id",
            &self.id,
            "--amqp-host",
            &self.amqp_host,
            "--vhost",
            &self.vhost,
            "--heartbeat-seconds",
            "1",
            "--simulate-gpus",
            "2",
            "--engine-socket",
            self.socket.to_str().expect("utf-8"),
            "--state-dir",
            self.dir.join("state").to_str().expect("utf-8"),
            "--public-host",
            "127.0.0.1",
            "--ssh-port",
            &self.ssh_port.to_string(),
            "--port-range",
            &self.port_range,
        ])
        .args(["--stop-grace-seconds", "1", "--disk-usage-seconds", "1"])
        .env("GPUMARKET_AGENT_TOKEN", &self.token)
        .env("RUST_LOG", "info");
        // The agent's log stays in the machine's directory when a test fails.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("agent.log"))
            .expect("agent log");
        cmd.stdout(log.try_clone().expect("log")).stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        self.agent = Some(cmd.spawn().expect("spawn agent"));
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// SIGKILL, as a host's power cut would.
    pub fn kill_agent(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            let _ = agent.kill();
            let _ = agent.wait();
        }
    }

    /// Everything the engine holds that is labelled with `instance`:
    /// containers, networks, volumes.
    pub fn labelled(&self, instance: &str) -> Vec<String> {
        let filter = format!("{{\"label\":[\"gpumarket.instance={instance}\"]}}");
        let mut found = Vec::new();
        // Networks are listed through Podman's own API: listing them through
        // the Docker-compatible one drops their isolation on Podman 4.3
        // (docs/real-hosts.md).
        for (kind, path) in [
            ("container", "v1.41/containers/json?all=true&filters="),
            ("network", "v4.0.0/libpod/networks/json?filters="),
            ("volume", "v1.41/volumes?filters="),
        ] {
            let body = self.engine_get(&format!("{path}{}", urlencode(&filter)));
            let items = match kind {
                "volume" => body["Volumes"].as_array().cloned().unwrap_or_default(),
                _ => body.as_array().cloned().unwrap_or_default(),
            };
            for item in items {
                let name = item["Names"][0]
                    .as_str()
                    .or(item["Name"].as_str())
                    .or(item["name"].as_str())
                    .unwrap_or("?")
                    .to_owned();
                found.push(format!("{kind} {name}"));
            }
        }
        found
    }

    /// GET on the engine's Docker API.
    pub fn engine_get(&self, path: &str) -> Value {
        let out = Command::new("curl")
            .args(["-sf", "--unix-socket"])
            .arg(&self.socket)
            .arg(format!("http://d/{path}"))
            .output()
            .expect("curl");
        assert!(out.status.success(), "engine GET {path}");
        serde_json::from_slice(&out.stdout).expect("engine json")
    }

    pub fn stop(mut self) {
        self.kill_agent();
        // Whatever a failed test left behind goes with the machine.
        let _ = Command::new("podman")
            .args(["--runtime", "runc", "rm", "-f", "--filter"])
            .arg(format!("label=gpumarket.machine={}", self.id))
            .output();
        engine_script(&["down", self.dir.to_str().expect("utf-8")]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A key pair for the renter, in `dir`.
fn keypair(dir: &Path, name: &str) -> (PathBuf, String) {
    let path = dir.join(name);
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&path)
        .status()
        .expect("ssh-keygen");
    assert!(status.success());
    let public = std::fs::read_to_string(path.with_extension("pub")).expect("public key");
    (path, public.trim().to_owned())
}

/// The OpenSSH client, as a renter runs it.
fn ssh(key: &Path, connection: &Value, command: &str) -> Command {
    let mut cmd = Command::new("ssh");
    cmd.args([
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "ConnectTimeout=10",
        "-o",
        "LogLevel=ERROR",
        "-i",
    ])
    .arg(key)
    .arg("-p")
    .arg(connection["sshPort"].to_string())
    .arg(format!(
        "{}@{}",
        connection["sshUser"].as_str().expect("user"),
        connection["sshHost"].as_str().expect("host")
    ))
    .arg(command)
    .stdin(Stdio::null());
    cmd
}

fn run_ssh(key: &Path, connection: &Value, command: &str) -> (i32, String, String) {
    let out = ssh(key, connection, command).output().expect("ssh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn order_image(
    renter: &Client,
    machine: &str,
    key: &str,
    extra: Value,
) -> Result<String, gpumarket::client::GraphQlError> {
    let mut input = json!({
        "offerId": machine, "gpuCount": 1, "idempotencyKey": uuid::Uuid::now_v7().to_string(),
        "sshPublicKey": key, "image": IMAGE,
    });
    if let (Some(input), Some(extra)) = (input.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            input.insert(k.clone(), v.clone());
        }
    }
    renter
        .run(
            "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id } }",
            json!({ "input": input }),
        )
        .await
        .map(|d| d["createOrder"]["id"].as_str().expect("id").to_owned())
}

async fn connection(renter: &Client, id: &str) -> Value {
    renter
        .run(
            "query($id: ID!) { instance(id: $id) { status connection { sshHost sshPort sshUser sshCommand ports { containerPort hostPort } } } }",
            json!({ "id": id }),
        )
        .await
        .expect("instance")["instance"]["connection"]
        .clone()
}

async fn act(renter: &Client, mutation: &str, id: &str) {
    renter
        .run(
            &format!("mutation($id: ID!) {{ {mutation}(id: $id) {{ status }} }}"),
            json!({ "id": id }),
        )
        .await
        .unwrap_or_else(|e| panic!("{mutation}: {e:?}"));
}

async fn wait_status(renter: &Client, id: &str, status: &str) -> Value {
    eventually(status, LIMIT, || async {
        let i = instance_status(renter, id).await;
        (i["status"] == status).then_some(i)
    })
    .await
}

/// The stack with the `agent` driver, a real machine, and a renter with
/// credit.
async fn real_market(env: &mut TestEnv, gpus: i32) -> (Stack, RealMachine, Client, String) {
    env.settings(|s: &mut provisioner::ProvisionerSettings| {
        s.driver = "agent".into();
        s.agent_step_timeout = std::time::Duration::from_millis(20_000);
    });
    env.settings(|s: &mut gpumarket::dev::AgentSettings| s.heartbeat_seconds = 1);
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let machine = RealMachine::new(env, &host, gpus).await;
    wait_online(&host, &machine.id, Duration::from_secs(30)).await;
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100").await;
    (stack, machine, renter, tenant)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_a_renter_logs_in_with_openssh_and_keeps_the_workspace_through_stop_and_start() {
    if !engine_available() {
        return;
    }
    let mut env = TestEnv::new().await;
    let (stack, machine, renter, _tenant) = real_market(&mut env, 2).await;
    let keys = keys_dir();
    let (renter_key, renter_pub) = keypair(&keys, "renter");
    let (stranger_key, _) = keypair(&keys, "stranger");

    let id = order_image(
        &renter,
        &machine.id,
        &renter_pub,
        json!({ "env": [{ "name": "MODEL_TOKEN", "value": "s3cr3t-value" }], "ports": [8080] }),
    )
    .await
    .expect("order");
    wait_status(&renter, &id, "running").await;
    let conn = connection(&renter, &id).await;
    assert_eq!(conn["sshUser"], id.as_str());
    assert_eq!(conn["sshHost"], "127.0.0.1");
    assert_eq!(conn["sshPort"], machine.ssh_port);
    assert_eq!(conn["ports"][0]["containerPort"], 8080);
    assert!(conn["ports"][0]["hostPort"].as_u64().is_some_and(|p| p > 0));

    // The renter's key runs a command in the container: its output, its
    // environment and its exit code.
    let (code, out, err) = run_ssh(
        &renter_key,
        &conn,
        "echo hello from $(hostname); echo token=$MODEL_TOKEN; exit 7",
    );
    assert_eq!(code, 7, "exit code of the remote command; stderr: {err}");
    assert!(out.contains("hello from"), "{out}");
    assert!(out.contains("token=s3cr3t-value"), "{out}");
    // Another key is refused.
    let (code, _, err) = run_ssh(&stranger_key, &conn, "true");
    assert_eq!(code, 255, "a stranger's key must be refused: {err}");

    // The env value is a secret: no answer of the API carries it.
    let everything = renter
        .run(
            "query($id: ID!) { instance(id: $id) { id status image connection { sshCommand } } instances { id } }",
            json!({ "id": id }),
        )
        .await
        .expect("instance");
    assert!(!everything.to_string().contains("s3cr3t-value"));

    // A file in /workspace survives a stop and a start.
    let (code, _, err) = run_ssh(
        &renter_key,
        &conn,
        "echo kept > /workspace/data.txt && dd if=/dev/zero of=/workspace/weights bs=1M count=24 2>/dev/null",
    );
    assert_eq!(code, 0, "{err}");
    // The engine enforces no size on the volume: the agent measures what
    // `/workspace` holds and the renter sees it.
    let used = eventually("/workspace measured", LIMIT, || async {
        let i = renter
            .run(
                "query($id: ID!) { instance(id: $id) { diskUsedGib diskMeasuredAt } }",
                json!({ "id": id }),
            )
            .await
            .expect("instance");
        let used = i["instance"]["diskUsedGib"]
            .as_str()
            .and_then(|d| d.parse::<f64>().ok())?;
        (used >= 0.023).then_some(used)
    })
    .await;
    assert!(used < 0.03, "24 MiB and a few bytes: {used} GiB");
    let mut open = ssh(&renter_key, &conn, "sleep 120")
        .spawn()
        .expect("long session");
    tokio::time::sleep(Duration::from_secs(1)).await;
    act(&renter, "stopInstance", &id).await;
    wait_status(&renter, &id, "stopped").await;
    // The open session was closed, and a new one is refused.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let closed = loop {
        if let Some(status) = open.try_wait().expect("wait") {
            break status.code();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the open session outlived the stop"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_ne!(closed, Some(0), "the session must end with the stop");
    let (code, _, _) = run_ssh(&renter_key, &conn, "true");
    assert_eq!(code, 255, "no login after a stop");
    assert!(
        connection(&renter, &id).await.is_null(),
        "no connection while stopped"
    );

    act(&renter, "startInstance", &id).await;
    wait_status(&renter, &id, "running").await;
    let conn = connection(&renter, &id).await;
    let (code, out, err) = run_ssh(&renter_key, &conn, "cat /workspace/data.txt");
    assert_eq!((code, out.trim()), (0, "kept"), "{err}");

    // Destroy: nothing labelled with the instance remains on the engine.
    act(&renter, "destroyInstance", &id).await;
    wait_status(&renter, &id, "destroyed").await;
    assert_eq!(machine.labelled(&id), Vec::<String>::new());
    let (code, _, _) = run_ssh(&renter_key, &conn, "true");
    assert_eq!(code, 255, "no login after destroy");

    machine.stop();
    let _ = std::fs::remove_dir_all(keys);
    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_a_command_that_exits_at_once_is_never_ready_and_never_charged() {
    if !engine_available() {
        return;
    }
    let mut env = TestEnv::new().await;
    let (stack, machine, renter, _tenant) = real_market(&mut env, 1).await;
    let keys = keys_dir();
    let (_, renter_pub) = keypair(&keys, "renter");

    let id = order_image(
        &renter,
        &machine.id,
        &renter_pub,
        json!({ "command": ["/bin/sh", "-c", "echo missing weights >&2; exit 3"] }),
    )
    .await
    .expect("order");
    let failed = wait_status(&renter, &id, "failed").await;
    let reason = failed["statusReason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains("code 3"), "the reason says why: {reason}");
    assert!(
        reason.contains("missing weights"),
        "with its output: {reason}"
    );
    assert!(failed["runningAt"].is_null(), "never user-ready");
    // Nothing was billed: no GPU posting for the instance.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM metering.intervals WHERE instance_id = '{id}' AND meter = 'gpu'"
        )),
        0
    );
    eventually("cleaned up", LIMIT, || async {
        machine.labelled(&id).is_empty().then_some(())
    })
    .await;

    machine.stop();
    let _ = std::fs::remove_dir_all(keys);
    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_an_agent_killed_in_the_middle_of_a_step_finishes_the_job_without_doubles() {
    if !engine_available() {
        return;
    }
    let mut env = TestEnv::new().await;
    let (stack, mut machine, renter, _tenant) = real_market(&mut env, 2).await;
    let keys = keys_dir();
    let (renter_key, renter_pub) = keypair(&keys, "renter");

    // Each of these steps creates something on the engine. The agent is
    // killed after the step did its work and before it answered (the worst
    // moment: the work is done, nobody knows), then started again; the
    // redelivered command runs the step again.
    for step in ["attach_network", "create_volume", "start_container"] {
        machine.kill_agent();
        machine.start_agent(&[("GPUMARKET_AGENT_HOLD_AFTER_STEP", step)]);
        let id = order_image(&renter, &machine.id, &renter_pub, json!({}))
            .await
            .expect("order");
        eventually(&format!("{step} done, unanswered"), LIMIT, || async {
            (env.count(&format!(
                "SELECT count(*) AS n FROM provisioner.agent_commands WHERE instance_id = '{id}' \
                 AND step = '{step}' AND answered_at IS NULL"
            )) == 1)
                .then_some(())
        })
        .await;
        // The agent marks the hold once the step's work is done.
        let held = machine.state_dir().join(format!("held-{step}"));
        eventually(&format!("{step} held"), LIMIT, || async {
            held.exists().then_some(())
        })
        .await;
        let _ = std::fs::remove_file(&held);
        machine.kill_agent();
        machine.start_agent(&[]);
        wait_status(&renter, &id, "running").await;
        let things = machine.labelled(&id);
        assert_eq!(
            things.len(),
            3,
            "{step}: one container, one network, one volume: {things:?}"
        );
        let conn = connection(&renter, &id).await;
        let (code, out, err) = run_ssh(&renter_key, &conn, "echo alive");
        assert_eq!((code, out.trim()), (0, "alive"), "{step}: {err}");
        act(&renter, "destroyInstance", &id).await;
        wait_status(&renter, &id, "destroyed").await;
        assert_eq!(machine.labelled(&id), Vec::<String>::new());
    }

    machine.stop();
    let _ = std::fs::remove_dir_all(keys);
    stack.stop().await;
    env.cleanup().await;
}

/// Serves `bytes` bytes to every connection on 0.0.0.0 (reachable from a
/// container through its network's gateway); the port.
async fn byte_server(bytes: usize) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0u8; 1024];
                let _ = socket.read(&mut request).await;
                let head = format!(
                    "HTTP/1.0 200 OK\r\nContent-Length: {bytes}\r\nContent-Type: application/octet-stream\r\n\r\n"
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let chunk = vec![b'x'; 64 * 1024];
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if socket.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n;
                }
            });
        }
    });
    port
}

fn metered(env: &TestEnv, id: &str, meter: &str) -> i64 {
    env.count(&format!(
        "SELECT coalesce(sum(settled_seconds), 0)::bigint AS n FROM metering.intervals \
         WHERE instance_id = '{id}' AND meter = '{meter}'"
    ))
}

/// The engine's own network counters of the instance's container: (sent,
/// received).
fn engine_counters(machine: &RealMachine, id: &str) -> (i64, i64) {
    let stats = machine.engine_get(&format!("v1.41/containers/gpm-{id}/stats?stream=false"));
    let mut counters = (0, 0);
    if let Some(networks) = stats["networks"].as_object() {
        for n in networks.values() {
            counters.0 += n["tx_bytes"].as_i64().unwrap_or(0);
            counters.1 += n["rx_bytes"].as_i64().unwrap_or(0);
        }
    }
    counters
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_traffic_made_in_the_container_is_billed_as_bandwidth_by_the_engines_counters() {
    if !engine_available() {
        return;
    }
    let mut env = TestEnv::new().await;
    env.settlement_interval_ms(300);
    let (stack, machine, renter, _tenant) = real_market(&mut env, 1).await;
    env.exec(&format!(
        "UPDATE catalog.machines SET bandwidth_up_price_per_tb = 9.5, bandwidth_down_price_per_tb = 1.25, \
         download_mbps = 1000, upload_mbps = 1000 WHERE id = '{}'",
        machine.id
    ));
    let keys = keys_dir();
    let (renter_key, renter_pub) = keypair(&keys, "renter");
    let id = order_image(&renter, &machine.id, &renter_pub, json!({}))
        .await
        .expect("order");
    wait_status(&renter, &id, "running").await;
    let conn = connection(&renter, &id).await;

    // 8 MB downloaded inside the container from a server on the host.
    const BYTES: i64 = 8 * 1024 * 1024;
    let port = byte_server(BYTES as usize).await;
    let (code, out, err) = run_ssh(
        &renter_key,
        &conn,
        &format!(
            "gw=$(ip route | awk '/default/ {{print $3}}'); wget -q -O /dev/null http://$gw:{port}/ && echo fetched"
        ),
    );
    assert_eq!((code, out.trim()), (0, "fetched"), "{err}");

    // What is billed is what the engine counted, to the byte, once the
    // counters have been reported.
    let (up, down) = eventually("billed = the engine's counters", LIMIT, || async {
        // Podman before 4.4 reports the two counters swapped (the agent
        // corrects it): the download is the larger one.
        let (a, b) = engine_counters(&machine, &id);
        let (sent, received) = (a.min(b), a.max(b));
        let (up, down) = (
            metered(&env, &id, "bandwidth_up"),
            metered(&env, &id, "bandwidth_down"),
        );
        (received >= BYTES && up == sent && down == received).then_some((up, down))
    })
    .await;
    assert!(down >= BYTES && up > 0, "up {up} down {down}");

    act(&renter, "destroyInstance", &id).await;
    wait_status(&renter, &id, "destroyed").await;
    machine.stop();
    let _ = std::fs::remove_dir_all(keys);
    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_two_renters_on_one_machine_cannot_reach_each_other() {
    if !engine_available() {
        return;
    }
    let mut env = TestEnv::new().await;
    let (stack, machine, renter, _tenant) = real_market(&mut env, 2).await;
    let api = Client::new(&stack.gateway_url);
    let (other, other_tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &other_tenant, "100").await;
    let keys = keys_dir();
    let (key_a, pub_a) = keypair(&keys, "a");
    let (key_b, pub_b) = keypair(&keys, "b");
    let a = order_image(&renter, &machine.id, &pub_a, json!({}))
        .await
        .expect("order a");
    let b = order_image(&other, &machine.id, &pub_b, json!({}))
        .await
        .expect("order b");
    wait_status(&renter, &a, "running").await;
    wait_status(&other, &b, "running").await;
    let (conn_a, conn_b) = (connection(&renter, &a).await, connection(&other, &b).await);

    // B serves on 8080; it reaches itself, A cannot reach it.
    let ip = "ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1";
    let (code, b_ip, err) = run_ssh(&key_b, &conn_b, ip);
    assert_eq!(code, 0, "{err}");
    let b_ip = b_ip.trim().to_owned();
    assert!(!b_ip.is_empty());
    let (code, _, err) = run_ssh(
        &key_b,
        &conn_b,
        "mkdir -p /tmp/www && echo hello > /tmp/www/index.html && httpd -p 8080 -h /tmp/www",
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run_ssh(
        &key_b,
        &conn_b,
        &format!("timeout 5 wget -q -O - http://{b_ip}:8080/"),
    );
    assert_eq!((code, out.trim()), (0, "hello"), "B reaches itself: {err}");
    let (code, out, _) = run_ssh(
        &key_a,
        &conn_a,
        &format!("timeout 5 wget -q -O - http://{b_ip}:8080/"),
    );
    assert_ne!(code, 0, "A reached B: {out}");
    let (code, _, _) = run_ssh(&key_a, &conn_a, &format!("ping -c 1 -W 2 {b_ip}"));
    assert_ne!(code, 0, "A pinged B");

    for (client, id) in [(&renter, &a), (&other, &b)] {
        act(client, "destroyInstance", id).await;
        wait_status(client, id, "destroyed").await;
    }
    machine.stop();
    let _ = std::fs::remove_dir_all(keys);
    stack.stop().await;
    env.cleanup().await;
}

/// The README's real-container steps, as a reader runs them after `make
/// run-real`: the demo market with its real machine (seeded and run exactly
/// as `gpumarket dev --engine-socket` does), the README's order and query
/// sent as written with the placeholders filled, and its `ssh` command run
/// with the OpenSSH client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_the_readmes_real_container_steps_work_on_make_run_real() {
    if !engine_available() {
        return;
    }
    let blocks = readme_blocks("## Log in to a real container");
    let graphql: Vec<&str> = blocks
        .iter()
        .filter(|(lang, _)| lang == "graphql")
        .map(|(_, text)| text.as_str())
        .collect();
    let shell: Vec<&str> = blocks
        .iter()
        .filter(|(lang, _)| lang == "sh")
        .map(|(_, text)| text.trim())
        .collect();
    assert_eq!((graphql.len(), shell.len()), (2, 2), "{blocks:#?}");
    assert_eq!(shell[0], "make run-real");

    let mut env = TestEnv::new().await;
    env.settings(|s: &mut provisioner::ProvisionerSettings| s.driver = "agent".into());
    env.settings(|s: &mut gpumarket::dev::AgentSettings| s.heartbeat_seconds = 1);
    let quota_db = platform::Db::connect(&env.config.database_url, 1).expect("db");
    quota::create_operator(
        &quota_db,
        gpumarket::seed::OPERATOR_EMAIL,
        gpumarket::seed::DEMO_PASSWORD,
    )
    .await
    .expect("demo operator");
    let mut stack = env.start(Parts::ALL).await;
    // The engine `make run-real` starts, private to this test.
    let turn = take_turn().await;
    let dir = std::env::temp_dir().join(format!("gpm-readme-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).expect("dir");
    engine_script(&["image"]);
    let socket = engine_script(&["up", dir.to_str().expect("utf-8")]);
    let ssh_port = free_port();
    let base = 20000 + (free_port() % 20000);
    let real = gpumarket::dev::RealEngine {
        engine_socket: Some(PathBuf::from(&socket)),
        ssh_port,
        port_range: format!("{base}-{}", base + 49),
        state_dir: dir.join("state"),
    };
    let seeded = gpumarket::seed::demo_market(&stack.gateway_url, true)
        .await
        .expect("demo seed");
    let mut machine_id = None;
    for agent in &seeded.agents {
        let task = if agent.real {
            machine_id = Some(agent.machine_id.to_string());
            gpumarket::dev::spawn_real_agent(&stack.config, agent, &real).expect("real agent")
        } else {
            gpumarket::dev::spawn_agent(&stack.config, agent).expect("demo agent")
        };
        stack.adopt(task);
    }
    let machine_id = machine_id.expect("the seed has the real machine");
    let api = Client::new(&stack.gateway_url);
    let renter = api.with_token(&seeded.renter_api_key);
    // local-podman-01 is the garage host's; it is offered once its agent
    // reports.
    eventually("local-podman-01 heard from", LIMIT, || async {
        (env.count(&format!(
            "SELECT count(*) AS n FROM catalog.machines WHERE id = '{machine_id}' \
             AND last_heartbeat_at > now() - interval '10 seconds'"
        )) == 1)
            .then_some(())
    })
    .await;

    let (key, public) = keypair(&dir, "reader");
    let order = graphql[0]
        .replace("<local-podman-01's id>", &machine_id)
        .replace("<your public key>", &public);
    let placed = renter
        .run(&order, json!({}))
        .await
        .expect("the README's order");
    let id = placed["createOrder"]["id"].as_str().expect("id").to_owned();
    let shown = eventually("the README's instance running", LIMIT, || async {
        let shown = renter
            .run(&graphql[1].replace("<instance id>", &id), json!({}))
            .await
            .ok()?;
        (shown["instance"]["state"] == "RUNNING").then_some(shown)
    })
    .await;
    let connection = &shown["instance"]["connection"];
    assert_eq!(
        connection["sshCommand"],
        format!("ssh -p {ssh_port} {id}@127.0.0.1").as_str()
    );
    assert_eq!(connection["ports"][0]["containerPort"], 8080);

    // The README's ssh line, with the test's port and key.
    let line = shell[1]
        .replace("<instance id>", &id)
        .replace("-p 2222", &format!("-p {ssh_port}"));
    let with_key = line.replacen(
        "ssh ",
        &format!(
            "ssh -i {} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o LogLevel=ERROR ",
            key.display()
        ),
        1,
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&with_key)
        .output()
        .expect("ssh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("hello from"),
        "{with_key}: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );

    renter
        .run(
            "mutation($id: ID!) { destroyInstance(id: $id) { status } }",
            json!({ "id": id }),
        )
        .await
        .expect("destroy");
    wait_status(&renter, &id, "destroyed").await;
    stack.stop().await;
    let _ = Command::new("podman")
        .args(["--runtime", "runc", "rm", "-f", "--filter"])
        .arg(format!("label=gpumarket.machine={machine_id}"))
        .output();
    engine_script(&["down", dir.to_str().expect("utf-8")]);
    let _ = std::fs::remove_dir_all(&dir);
    drop(turn);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_a_container_that_exits_while_running_stops_the_instance_and_its_gpu_billing() {
    if !engine_available() {
        return;
    }
    let mut env = TestEnv::new().await;
    let (stack, machine, renter, _tenant) = real_market(&mut env, 1).await;
    let keys = keys_dir();
    let (_, renter_pub) = keypair(&keys, "renter");

    // Ready at once, then the command ends on its own with code 2.
    let id = order_image(
        &renter,
        &machine.id,
        &renter_pub,
        json!({ "command": ["/bin/sh", "-c", "sleep 4; echo training diverged >&2; exit 2"] }),
    )
    .await
    .expect("order");
    wait_status(&renter, &id, "running").await;
    let stopped = wait_status(&renter, &id, "stopped").await;
    let reason = stopped["statusReason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains("code 2"), "the reason says why: {reason}");
    assert!(
        reason.contains("training diverged"),
        "with its output: {reason}"
    );
    assert!(
        stopped["allowedActions"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "start") && a.iter().any(|x| x == "destroy")),
        "the renter can start or destroy it: {stopped}"
    );
    // GPU billing ended when the engine saw the container stop, not when
    // the platform heard of it: the run is at most the command's 4 s (plus
    // the moments between user-ready and the command's start).
    let seconds = eventually("GPU interval closed", LIMIT, || async {
        let closed = env.count(&format!(
            "SELECT count(*) AS n FROM metering.intervals WHERE instance_id = '{id}' AND meter = 'gpu' AND seconds IS NOT NULL"
        ));
        (closed == 1).then(|| {
            env.count(&format!(
                "SELECT sum(seconds)::bigint AS n FROM metering.intervals \
                 WHERE instance_id = '{id}' AND meter = 'gpu'"
            ))
        })
    })
    .await;
    assert!(seconds <= 5, "billed {seconds} s for a 4 s run");
    let engine_finished =
        machine.engine_get(&format!("v1.41/containers/gpm-{id}/json"))["State"]["FinishedAt"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
    let stopped_at = stopped["stoppedAt"].as_str().unwrap_or_default().to_owned();
    let parse = |t: &str| chrono::DateTime::parse_from_rfc3339(t).map(|t| t.timestamp_millis());
    let (engine_ms, stopped_ms) = (parse(&engine_finished), parse(&stopped_at));
    assert!(
        matches!((engine_ms, stopped_ms), (Ok(e), Ok(s)) if (e - s).abs() < 1000),
        "stoppedAt {stopped_at} is the engine's FinishedAt {engine_finished}"
    );

    act(&renter, "destroyInstance", &id).await;
    wait_status(&renter, &id, "destroyed").await;
    assert_eq!(machine.labelled(&id), Vec::<String>::new());
    machine.stop();
    let _ = std::fs::remove_dir_all(keys);
    stack.stop().await;
    env.cleanup().await;
}
