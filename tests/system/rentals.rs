//! What a rental runs and how its renter reaches it (issue 16, the platform
//! side): an order's image, command, env and ports reach the machine's host
//! agent (the `agent` driver in a worker process); the agent's readiness
//! check hands back the connection, which `Instance.connection` shows while
//! the instance runs; env values (secrets) never come back from the API;
//! bad inputs are refused with every field at once; pull progress shows in
//! `instanceEvents`; and a container that exits on its own stops its
//! instance with the agent's reason, billed until the engine's
//! `finished_at`, while repeats, other machines' reports and old runs
//! change nothing.
//!
//! The host agent runs in this process with a test executor that wraps the
//! simulated one: it answers the readiness check with a connection, reports
//! progress while pulling, and reports the exits the test puts in its list.

use contracts::ids::MachineId;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use gpumarket::client::Client;
use gpumarket::dev::{Parts, Stack};
use host_agent::protocol::{
    AgentCommand, Connection, InstanceCounters, InstanceExited, PortMapping, StepDetail,
};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::harness::*;

const NO_WORKER: Parts = Parts {
    services: true,
    messaging: true,
    provisioner: false,
};

const SECRET: &str = "s3cret-value-7f1d0c";
/// An image whose container exits at once: the readiness check fails.
const EXITS_AT_ONCE: &str = "localhost/exits-at-once:latest";
const EXIT_TEXT: &str =
    "the container exited with code 127 before it was ready: sh: train.py: not found";
const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpumarketTestKey test@gpumarket";

/// A worker process that is killed when the test ends, also when it fails
/// (a panicking test must not leave a worker behind).
struct Worker(std::process::Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The simulated executor plus what a real agent would add.
struct TestExecutor {
    inner: gpumarket::simulated_agent::SimulatedAgent,
    /// The jobs of the provisioning commands the agent got.
    jobs: Mutex<Vec<Value>>,
    /// What the next heartbeats report as exited.
    exited: Mutex<Vec<InstanceExited>>,
}

impl host_agent::Executor for TestExecutor {
    fn execute<'a>(
        &'a self,
        command: &'a AgentCommand,
        progress: host_agent::Progress,
    ) -> Pin<Box<dyn Future<Output = Result<Option<StepDetail>, String>> + Send + 'a>> {
        Box::pin(async move {
            if command.action == "provision" {
                self.jobs.lock().unwrap().push(command.job.clone());
            }
            if command.step == "pull_image" {
                progress.report("pulled 1 MB of 2 MB");
            }
            let detail = self.inner.execute(command, progress).await?;
            if command.step != "readiness_check" {
                return Ok(detail);
            }
            let spec: host_agent::protocol::RentalSpec =
                serde_json::from_value(command.job.clone()).map_err(|e| e.to_string())?;
            if spec.image == EXITS_AT_ONCE {
                return Err(EXIT_TEXT.into());
            }
            Ok(Some(StepDetail {
                connection: Some(Connection {
                    ssh_host: "rig-7.hosts.example".into(),
                    ssh_port: 2222,
                    ssh_user: spec.instance_id.to_string(),
                    ports: spec
                        .ports
                        .iter()
                        .enumerate()
                        .map(|(i, &p)| PortMapping {
                            container_port: p,
                            host_port: 40000 + i as u16,
                        })
                        .collect(),
                }),
            }))
        })
    }

    fn exited<'a>(
        &'a self,
        _machine_id: MachineId,
    ) -> Pin<Box<dyn Future<Output = Vec<InstanceExited>> + Send + 'a>> {
        let exited = self.exited.lock().unwrap().clone();
        Box::pin(async move { exited })
    }

    fn traffic<'a>(
        &'a self,
        _machine_id: MachineId,
    ) -> Pin<Box<dyn Future<Output = Vec<InstanceCounters>> + Send + 'a>> {
        Box::pin(async { Vec::new() })
    }
}

/// Registers and lists a machine and runs its agent with a [`TestExecutor`]
/// in this process; the machine's id and the executor.
async fn machine(stack: &Stack, host: &Client, name: &str) -> (String, Arc<TestExecutor>) {
    let (id, token) = machine_for_agent(host, name, "RTX 4090", 2, Some(24), "0.50").await;
    let machine_id: Uuid = id.parse().unwrap();
    let db = platform::Db::connect(&stack.config.database_url, 2).unwrap();
    let executor = Arc::new(TestExecutor {
        inner: gpumarket::simulated_agent::SimulatedAgent(
            provisioner::SimulatedDriver::from_config(db, &stack.config).unwrap(),
        ),
        jobs: Mutex::new(Vec::new()),
        exited: Mutex::new(Vec::new()),
    });
    let config = host_agent::AgentConfig {
        amqp_url: stack.config.amqp_url_for_agents().unwrap(),
        machine_id: MachineId(machine_id),
        token,
        heartbeat_interval: Duration::from_secs(1),
        inventory: host_agent::Inventory::simulated(2, "RTX 4090", 24, "12.4", "550.90.07"),
        hold_after_step: None,
    };
    let shared: Arc<dyn host_agent::Executor> = executor.clone();
    // The task ends with the test's runtime.
    tokio::spawn(async move {
        let _ = host_agent::run_with_executor(config, Some(shared)).await;
    });
    wait_online(host, &id, Duration::from_secs(20)).await;
    (id, executor)
}

const INSTANCE: &str =
    "query($id: ID!) { instance(id: $id) { id status statusReason image runningAt stoppedAt
    connection { sshHost sshPort sshUser sshCommand ports { containerPort hostPort } } } }";

async fn instance(renter: &Client, id: &str) -> Value {
    renter
        .run(INSTANCE, json!({ "id": id }))
        .await
        .expect("instance")["instance"]
        .clone()
}

fn create_order(input: Value) -> (String, Value) {
    (
        "mutation($input: CreateOrderInput!) { createOrder(input: $input) { id status image connection { sshHost } } }"
            .to_owned(),
        json!({ "input": input }),
    )
}

/// `extensions.fieldErrors` fields of the one error in `body`.
fn field_errors(body: &Value) -> Vec<String> {
    let errors = body["errors"].as_array().expect("errors");
    assert_eq!(errors[0]["extensions"]["code"], "VALIDATION", "{body}");
    errors[0]["extensions"]["fieldErrors"]
        .as_array()
        .unwrap_or_else(|| panic!("fieldErrors: {body}"))
        .iter()
        .map(|e| e["field"].as_str().unwrap().to_owned())
        .collect()
}

fn instant(v: &Value) -> DateTime<Utc> {
    v.as_str().expect("instant").parse().expect("rfc3339")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rental_runs_what_was_ordered_and_says_how_to_log_in() {
    let mut env = TestEnv::new().await;
    env.settings(|s: &mut gpumarket::dev::AgentSettings| s.heartbeat_seconds = 1);
    let stack = env.start(NO_WORKER).await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let (offer, executor) = machine(&stack, &host, "rig-a").await;
    let (renter, tenant, token) = sign_up_with_token(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100").await;
    let worker = Worker(worker_process(
        &stack.config,
        &[
            ("GPUMARKET_PROVISIONER_DRIVER", "agent"),
            ("GPUMARKET_AGENT_STEP_TIMEOUT_MS", "10000"),
        ],
    ));

    // Bad inputs: every wrong field at once, nothing ordered.
    let (q, v) = create_order(json!({
        "offerId": offer, "gpuCount": 1, "idempotencyKey": "bad",
        "sshPublicKey": "not a key",
        "command": (0..65).map(|i| i.to_string()).collect::<Vec<_>>(),
        "env": [{"name": "1BAD", "value": "x"}, {"name": "BIG", "value": "x".repeat(33 * 1024)}],
        "ports": [22, 22, 0, 70000],
    }));
    let body = renter.raw(&q, v).await.expect("transport");
    assert_eq!(
        field_errors(&body),
        [
            "sshPublicKey",
            "command",
            "env.name",
            "env.value",
            "ports",
            "ports"
        ],
        "{body}"
    );
    let too_many_ports: Vec<i32> = (1..=17).collect();
    let (q, v) = create_order(json!({
        "offerId": offer, "gpuCount": 1, "idempotencyKey": "bad-2",
        "ports": too_many_ports,
        "env": (0..65).map(|i| json!({"name": format!("V{i}"), "value": "1"})).collect::<Vec<_>>(),
    }));
    let body = renter.raw(&q, v).await.expect("transport");
    assert_eq!(field_errors(&body), ["env", "ports"], "{body}");
    let keys = vec![KEY; 33].join("\n");
    let (q, v) = create_order(json!({
        "offerId": offer, "gpuCount": 1, "idempotencyKey": "bad-3", "sshPublicKey": keys,
    }));
    let body = renter.raw(&q, v).await.expect("transport");
    assert_eq!(field_errors(&body), ["sshPublicKey"], "{body}");
    assert_eq!(env.count("SELECT count(*) AS n FROM ordering.instances"), 0);

    // A good order: two keys, a command, a secret env and two ports.
    let input = json!({
        "offerId": offer, "gpuCount": 1, "idempotencyKey": "rental-1",
        "sshPublicKey": format!("{KEY}\n{KEY}2 second@gpumarket\n"),
        "image": "localhost/gpumarket-test:latest",
        "command": ["sh", "-c", "sleep infinity"],
        "env": [{"name": "API_TOKEN", "value": SECRET}, {"name": "MODE", "value": "train"}],
        "ports": [8888, 6006],
    });
    let (q, v) = create_order(input.clone());
    let placed = renter.run(&q, v).await.expect("order")["createOrder"].clone();
    let id = placed["id"].as_str().unwrap().to_owned();
    assert_eq!(placed["connection"], Value::Null, "none before running");
    // The same key with another secret is another order (the fingerprint
    // covers env values, as digests).
    let mut changed = input.clone();
    changed["env"][0]["value"] = json!("another-secret");
    let (q, v) = create_order(changed);
    assert_eq!(renter.run(&q, v).await.unwrap_err().code, "CONFLICT");
    let (q, v) = create_order(input);
    let again = renter.run(&q, v).await.expect("repeat")["createOrder"].clone();
    assert_eq!(again["id"], placed["id"]);

    wait_running(&renter, &id, Duration::from_secs(60)).await;
    let running = instance(&renter, &id).await;
    let connection = &running["connection"];
    assert_eq!(connection["sshHost"], "rig-7.hosts.example", "{running}");
    assert_eq!(connection["sshPort"], 2222);
    assert_eq!(connection["sshUser"], id.as_str());
    assert_eq!(
        connection["sshCommand"],
        format!("ssh -p 2222 {id}@rig-7.hosts.example")
    );
    assert_eq!(
        connection["ports"],
        json!([{"containerPort": 8888, "hostPort": 40000}, {"containerPort": 6006, "hostPort": 40001}])
    );

    // The agent got what was ordered, env included, for run 1.
    let job = executor
        .jobs
        .lock()
        .unwrap()
        .last()
        .cloned()
        .expect("a job");
    let spec: host_agent::protocol::RentalSpec = serde_json::from_value(job.clone()).unwrap();
    assert_eq!(spec.image, "localhost/gpumarket-test:latest");
    assert_eq!(
        spec.command,
        Some(vec!["sh".into(), "-c".into(), "sleep infinity".into()])
    );
    assert_eq!(spec.env.get("API_TOKEN").map(String::as_str), Some(SECRET));
    assert_eq!(spec.ports, vec![8888, 6006]);
    assert_eq!(spec.disk_gib, Some(20));
    assert_eq!(spec.attempt, 1);
    assert_eq!(spec.ssh_public_key.unwrap().lines().count(), 2);
    // Its Debug (what a log line would show) leaves the secret out.
    assert!(
        !format!(
            "{:?}",
            serde_json::from_value::<contracts::events::ProvisionInstance>(job).unwrap()
        )
        .contains(SECRET)
    );

    // Pull progress is in the instance's history; the secret is in no answer.
    let events_query = "subscription($id: ID!) { instanceEvents(instanceId: $id) {
        seq kind toState reason step { jobKind step status attempt detail }
        instance { id status image connection { sshHost sshPort sshUser sshCommand } } } }";
    let mut stream = EventStream::open_query(
        &stack.gateway_url,
        Some(token.as_str()),
        events_query,
        json!({ "id": id }),
    )
    .await;
    let events = stream
        .until(Duration::from_secs(10), |e| e["toState"] == "running")
        .await;
    assert!(
        events.iter().any(|e| e["step"]["status"] == "progress"
            && e["step"]["step"] == "pull_image"
            && e["step"]["detail"] == "pulled 1 MB of 2 MB"),
        "{events:?}"
    );
    let answers = json!({
        "instance": running,
        "instances": renter.run("{ instances { id image connection { sshHost } } }", json!({})).await.unwrap(),
        "events": events,
    })
    .to_string();
    assert!(!answers.contains(SECRET), "{answers}");
    // Nor is it in anything ordering records for the renter's history.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instance_events WHERE snapshot::text LIKE '%{SECRET}%' \
             OR coalesce(detail::text, '') LIKE '%{SECRET}%'"
        )),
        0
    );

    // Exits that are not this run's, or not from this machine, change nothing.
    let (other, other_executor) = machine(&stack, &host, "rig-b").await;
    let running_at = instant(&running["runningAt"]);
    let exit = |run: i32| InstanceExited {
        instance_id: id.parse().unwrap(),
        run,
        exit_code: 137,
        oom_killed: true,
        finished_at: running_at + chrono::Duration::seconds(2),
        reason: "the container was killed: out of memory".into(),
    };
    other_executor.exited.lock().unwrap().push(exit(1));
    executor.exited.lock().unwrap().push(exit(7));
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(instance(&renter, &id).await["status"], "running");
    other_executor.exited.lock().unwrap().clear();
    let _ = other;

    // The real exit: stopped with the reason, billed until finished_at.
    tokio::time::sleep(Duration::from_secs(1)).await;
    *executor.exited.lock().unwrap() = vec![exit(1)];
    let stopped = eventually("stopped by the exit", Duration::from_secs(20), || async {
        let i = instance(&renter, &id).await;
        (i["status"] == "stopped").then_some(i)
    })
    .await;
    assert_eq!(
        stopped["statusReason"], "the container was killed: out of memory",
        "{stopped}"
    );
    assert_eq!(stopped["connection"], Value::Null);
    assert_eq!(
        instant(&stopped["stoppedAt"]),
        running_at + chrono::Duration::seconds(2)
    );
    let gpu_seconds = eventually("the run billed", Duration::from_secs(20), || async {
        let usage = renter
            .run(
                "query($id: ID) { usage(instanceId: $id) { meter billedSeconds } }",
                json!({ "id": id }),
            )
            .await
            .unwrap();
        usage["usage"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["meter"] == "gpu")
            .and_then(|u| u["billedSeconds"].as_i64())
    })
    .await;
    assert_eq!(gpu_seconds, 2, "floor(finished_at - T0)");

    // The agent keeps repeating the exit: nothing more happens.
    let transitions = |env: &TestEnv| {
        env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instance_transitions WHERE instance_id = '{id}'"
        ))
    };
    let before = transitions(&env);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(transitions(&env), before);

    // Started again (run 2), the old run's exit still repeated is ignored.
    renter
        .run(
            "mutation($id: ID!) { startInstance(id: $id) { status } }",
            json!({ "id": id }),
        )
        .await
        .expect("start");
    let restarted = wait_running(&renter, &id, Duration::from_secs(60)).await;
    assert!(instant(&restarted["runningAt"]) > running_at);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = instance(&renter, &id).await;
    assert_eq!(still["status"], "running", "{still}");
    assert_eq!(still["connection"]["sshPort"], 2222);
    let job = executor.jobs.lock().unwrap().last().cloned().unwrap();
    let spec: host_agent::protocol::RentalSpec = serde_json::from_value(job).unwrap();
    assert_eq!(spec.attempt, 2);
    assert_eq!(
        spec.env.get("API_TOKEN").map(String::as_str),
        Some(SECRET),
        "a start carries the env again"
    );

    renter
        .run(
            "mutation($id: ID!) { destroyInstance(id: $id) { status } }",
            json!({ "id": id }),
        )
        .await
        .expect("destroy");
    eventually("destroyed", Duration::from_secs(60), || async {
        (instance(&renter, &id).await["status"] == "destroyed").then_some(())
    })
    .await;
    drop(worker);
    stack.stop().await;
    env.cleanup().await;
}

/// A container that exits at once never becomes user-ready: the first run
/// fails with the agent's words as its reason (not an internal error), and
/// no GPU time is billed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_exits_at_once_fails_the_order_with_the_agents_reason() {
    let env = TestEnv::new().await;
    let stack = env.start(NO_WORKER).await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let (offer, _executor) = machine(&stack, &host, "rig-c").await;
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100").await;
    let worker = Worker(worker_process(
        &stack.config,
        &[
            ("GPUMARKET_PROVISIONER_DRIVER", "agent"),
            ("GPUMARKET_AGENT_STEP_TIMEOUT_MS", "10000"),
            ("GPUMARKET_STEP_ATTEMPTS", "2"),
        ],
    ));
    let (q, v) = create_order(json!({
        "offerId": offer, "gpuCount": 1, "idempotencyKey": "exits",
        "sshPublicKey": KEY, "image": EXITS_AT_ONCE, "command": ["python", "train.py"],
    }));
    let placed = renter.run(&q, v).await.expect("order")["createOrder"].clone();
    let id = placed["id"].as_str().unwrap().to_owned();
    let failed = eventually("failed", Duration::from_secs(60), || async {
        let i = instance(&renter, &id).await;
        (i["status"] == "failed").then_some(i)
    })
    .await;
    let reason = failed["statusReason"].as_str().expect("a reason");
    assert!(reason.contains(EXIT_TEXT), "{reason}");
    assert!(!reason.to_uppercase().contains("INTERNAL"), "{reason}");
    assert_eq!(failed["runningAt"], Value::Null);
    assert_eq!(failed["connection"], Value::Null);
    let usage = renter
        .run(
            "query($id: ID) { usage(instanceId: $id) { meter billedSeconds } }",
            json!({ "id": id }),
        )
        .await
        .unwrap();
    assert!(
        !usage["usage"]
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u["meter"] == "gpu"),
        "no GPU time: {usage}"
    );
    drop(worker);
    stack.stop().await;
    env.cleanup().await;
}
