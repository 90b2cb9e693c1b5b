//! Split mode's processes for tests: every service, the gateway and a
//! provisioner worker as its own OS process (the built `gpumarket` binary),
//! each on its own port and each service on its own database role, plus host
//! agents as processes of their own. What `make run-split` starts, on the
//! test's database and vhost; `system::split` and `system::faults` drive it.

use std::collections::HashMap;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gpumarket::client::Client;
use platform::Config;

use crate::harness::{machine_for_agent, wait_online};

/// Every service but the gateway, from the registry (`src/services.rs`).
pub static SERVICES: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
    gpumarket::services::names()
        .into_iter()
        .filter(|n| *n != "gateway")
        .collect()
});

/// The processes of one split stack; dropping it kills them all, so a failed
/// assertion leaves nothing running.
pub struct Split {
    env: Vec<(String, String)>,
    ports: HashMap<&'static str, u16>,
    /// What each process was started with, so that it can be started again.
    args: HashMap<String, Vec<String>>,
    pub children: HashMap<String, Child>,
}

impl Split {
    /// Starts the services, the gateway and one worker and waits until each
    /// HTTP process answers `/readyz`. `settings` are extra `GPUMARKET_*`
    /// variables every process gets (they win over the defaults here).
    pub async fn start(config: &Config, settings: &[(&str, &str)]) -> Split {
        // Held together so that the ports differ; freed just before use.
        let listeners: Vec<(&'static str, std::net::TcpListener)> = SERVICES
            .iter()
            .copied()
            .chain(["gateway", "provisioner"])
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
                config.service_token.expose().to_owned(),
            ),
            (
                "GPUMARKET_OUTBOX_POLL_MS".into(),
                config.outbox_poll_ms.to_string(),
            ),
            ("GPUMARKET_LOG_FORMAT".into(), "pretty".into()),
        ];
        if std::env::var_os("RUST_LOG").is_none() {
            env.push(("RUST_LOG".into(), "warn".into()));
        }
        for (name, port) in &ports {
            let upper = name.to_uppercase();
            env.push((format!("GPUMARKET_{upper}_PORT"), port.to_string()));
            if SERVICES.contains(name) {
                env.push((
                    format!("GPUMARKET_{upper}_URL"),
                    format!("http://127.0.0.1:{port}"),
                ));
            }
        }
        // Later entries win: `Command::envs` applies them in order.
        env.extend(settings.iter().map(|(k, v)| ((*k).into(), (*v).into())));

        let mut split = Split {
            env,
            ports,
            args: HashMap::new(),
            children: HashMap::new(),
        };
        for name in SERVICES.iter().copied().chain(["gateway"]) {
            split.spawn(name, &["serve", name]);
        }
        split.spawn("provisioner", &["worker", "provisioner"]);
        for name in SERVICES.iter().copied().chain(["gateway", "provisioner"]) {
            split.wait_ready(name).await;
        }
        split
    }

    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}", self.ports[name])
    }

    pub fn pid(&self, name: &str) -> u32 {
        self.children[name].id()
    }

    /// Runs `args` as the process `name`, its output prefixed with the name.
    pub fn spawn(&mut self, name: &str, args: &[&str]) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpumarket"));
        cmd.args(args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn gpumarket");
        let prefix = |stream: Box<dyn std::io::Read + Send>| {
            let name = name.to_owned();
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
        self.args.insert(
            name.to_owned(),
            args.iter().map(|a| (*a).to_owned()).collect(),
        );
        self.children.insert(name.to_owned(), child);
    }

    /// Starts `name` again with the arguments it was first started with.
    pub fn restart(&mut self, name: &str) {
        let args = self.args[name].clone();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.spawn(name, &args);
    }

    pub async fn wait_ready(&mut self, name: &str) {
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

    /// SIGKILL: no shutdown hook runs, as when a machine or container dies.
    pub fn kill(&mut self, name: &str) {
        if let Some(mut child) = self.children.remove(name) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Processes that ended on their own (a crash), with their exit status.
    pub fn exited(&mut self) -> Vec<(String, String)> {
        self.children
            .iter_mut()
            .filter_map(|(name, child)| {
                let status = child.try_wait().ok()??;
                Some((name.clone(), status.to_string()))
            })
            .collect()
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

/// Registers, prices and lists a machine of `gpus` simulated GPUs, runs
/// `gpumarket agent` for it as the process `name` and waits until the
/// machine is online; its id (= its offer id).
pub async fn machine_with_agent_process(
    config: &Config,
    split: &mut Split,
    host: &Client,
    name: &str,
    gpus: i32,
    price: &str,
) -> String {
    let (id, token) = machine_for_agent(host, name, "RTX 4090", gpus, Some(24), price).await;

    let amqp = reqwest::Url::parse(&config.amqp_url).expect("amqp url");
    let amqp_host = format!(
        "{}:{}",
        amqp.host_str().unwrap_or("127.0.0.1"),
        amqp.port().unwrap_or(5672)
    );
    let vhost = config.amqp_vhost().expect("vhost");
    let gpus = gpus.to_string();
    split.spawn(
        name,
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
            &gpus,
        ],
    );
    wait_online(host, &id, Duration::from_secs(60)).await;
    id
}
