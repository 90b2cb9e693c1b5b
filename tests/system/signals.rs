//! Stopping a process the way an orchestrator does: Kubernetes, Docker,
//! systemd and `run-split.sh` send SIGTERM, a terminal sends SIGINT. The
//! built binary, as its own OS process, must take either as a request to
//! stop gracefully and exit 0 within a few seconds, not die by the signal.
//! Also: the provisioner worker serves `/healthz`, `/readyz` and `/metrics`
//! on its own port (`GPUMARKET_PROVISIONER_PORT`).

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::harness::*;

/// A port nothing listens on (freed just before the child binds it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// `gpumarket <args>` against the test's database and vhost, its HTTP
/// listener on `port` through `port_var`.
fn spawn(env: &TestEnv, args: &[&str], port_var: &str, port: u16) -> Child {
    let config = &env.config;
    Command::new(env!("CARGO_BIN_EXE_gpumarket"))
        .args(args)
        .env("GPUMARKET_DATABASE_URL", &config.database_url)
        .env("GPUMARKET_AMQP_URL", &config.amqp_url)
        .env(
            "GPUMARKET_RABBITMQ_MANAGEMENT_URL",
            &config.rabbitmq_management_url,
        )
        .env("GPUMARKET_SERVICE_TOKEN", config.service_token.expose())
        .env("GPUMARKET_BIND_HOST", "127.0.0.1")
        .env(port_var, port.to_string())
        .env("GPUMARKET_DB_POOL_SIZE", "2")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn gpumarket")
}

/// A client that keeps no idle connection: one kept alive would (rightly)
/// hold a graceful stop until it closes.
fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client")
}

/// Waits until `GET /readyz` answers 2xx, failing if the process exits first.
async fn wait_ready(child: &mut Child, port: u16) {
    let url = format!("http://127.0.0.1:{port}/readyz");
    let http = http();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("exited before it was ready: {status}");
        }
        if let Ok(response) = http.get(&url).send().await
            && response.status().is_success()
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{url} not ready in time"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sends `signal` (`TERM`, `INT`) to the child.
fn signal(child: &Child, signal: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill -{signal} failed");
}

/// The child's exit status, or a failure (after killing it) when it is still
/// running after `limit`.
async fn exit_within(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if tokio::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running {limit:?} after the signal");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts `args`, waits for readiness, sends `sig` and expects exit 0
/// within five seconds.
async fn stops_cleanly(env: &TestEnv, args: &[&str], port_var: &str, sig: &str) {
    let port = free_port();
    let mut child = spawn(env, args, port_var, port);
    wait_ready(&mut child, port).await;
    signal(&child, sig);
    let status = exit_within(&mut child, Duration::from_secs(5)).await;
    assert!(
        status.success(),
        "gpumarket {args:?} after SIG{sig}: {status} (a signal death has no code)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_stops_gracefully_on_sigterm() {
    let env = TestEnv::new().await;
    // The catalog runs an HTTP server, a consumer, the offline sweeper and
    // an outbox relay: all of it has to let go.
    stops_cleanly(
        &env,
        &["serve", "catalog"],
        "GPUMARKET_CATALOG_PORT",
        "TERM",
    )
    .await;
    // Ctrl-C still does the same.
    stops_cleanly(&env, &["serve", "catalog"], "GPUMARKET_CATALOG_PORT", "INT").await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provisioner_serves_probes_and_metrics_and_stops_on_sigterm() {
    let env = TestEnv::new().await;
    let port = free_port();
    let args = ["worker", "provisioner"];
    let mut worker = spawn(&env, &args, "GPUMARKET_PROVISIONER_PORT", port);
    wait_ready(&mut worker, port).await;

    let http = http();
    let base = format!("http://127.0.0.1:{port}");
    let health = http
        .get(format!("{base}/healthz"))
        .send()
        .await
        .expect("healthz");
    assert!(health.status().is_success(), "{}", health.status());
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics body");
    // The probes it just answered are counted under its own name.
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("gpumarket_http_requests_total{")
                && l.contains("service=\"provisioner\"")
                && l.contains("route=\"/readyz\"")),
        "{metrics}"
    );

    signal(&worker, "TERM");
    let status = exit_within(&mut worker, Duration::from_secs(5)).await;
    assert!(status.success(), "worker after SIGTERM: {status}");

    // And SIGINT, which used to kill it outright (it had no handler).
    stops_cleanly(&env, &args, "GPUMARKET_PROVISIONER_PORT", "INT").await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioner_whose_set_port_is_taken_does_not_start() {
    let env = TestEnv::new().await;
    // A port that is set is a promise (Kubernetes probes it): taken, the
    // worker refuses to start rather than run unobservable.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let mut worker = spawn(
        &env,
        &["worker", "provisioner"],
        "GPUMARKET_PROVISIONER_PORT",
        port,
    );
    let status = exit_within(&mut worker, Duration::from_secs(10)).await;
    assert!(!status.success(), "started on a taken port: {status}");
    drop(taken);
    env.cleanup().await;
}
