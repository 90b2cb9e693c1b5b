//! The provisioning worker's job machinery over real Postgres and RabbitMQ,
//! with workers as OS processes: a job that keeps failing dies, fails the
//! instance with nothing held or charged and lands its command in the
//! dead-letter queue; a job past its deadline is failed by the reconciler
//! while its step still runs; two workers share the jobs and run every
//! instance exactly once; the `agent` driver provisions and destroys through
//! a real host agent, times out one that does not answer, fails at once a
//! command to a machine whose agent is not connected or whose command queue
//! is full, and a command sent while the agent was away is carried out when
//! it is back.

use contracts::ids::{InstanceId, MachineId, OrderId, TenantId};
use std::time::Duration;

use gpumarket::client::Client;
use gpumarket::dev::Parts;
use host_agent::lapin::options::BasicGetOptions;
use host_agent::lapin::{Connection, ConnectionProperties};
use serde_json::json;

use crate::harness::*;

const NO_WORKER: Parts = Parts {
    services: true,
    messaging: true,
    provisioner: false,
};

/// A connection and channel of the test's own on the stack's vhost (keep the
/// connection alive as long as the channel is used).
async fn broker_channel(config: &platform::Config) -> (Connection, host_agent::lapin::Channel) {
    let conn = Connection::connect(&config.amqp_url, ConnectionProperties::default())
        .await
        .expect("amqp");
    let channel = conn.create_channel().await.expect("channel");
    (conn, channel)
}

/// Messages ready in `queue` and its consumers (a passive declare: the
/// queue must exist).
async fn queue_depth(channel: &host_agent::lapin::Channel, queue: &str) -> (u32, u32) {
    let q = channel
        .queue_declare(
            queue.into(),
            host_agent::lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            Default::default(),
        )
        .await
        .expect("the command queue exists");
    (q.message_count(), q.consumer_count())
}

/// Commands for `instance`'s first step that no agent answered.
fn unanswered_validate_host(env: &TestEnv, instance: &str) -> i64 {
    env.count(&format!(
        "SELECT count(*) AS n FROM provisioner.agent_commands WHERE instance_id = '{instance}' \
         AND step = 'validate_host' AND answered_at IS NULL"
    ))
}

/// Message ids in the dead-letter queue, read (and consumed) until `want`
/// shows up or the limit passes.
async fn dead_letters(config: &platform::Config, want: &str) -> Vec<(String, String)> {
    let (_conn, channel) = broker_channel(config).await;
    let queue = format!("{}.dead", config.dead_letter_exchange);
    let mut seen: Vec<(String, String)> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !seen.iter().any(|(id, _)| id == want) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{want} not dead-lettered; saw {seen:?}"
        );
        while let Some(message) = channel
            .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic_get")
        {
            let id = message
                .delivery
                .properties
                .message_id()
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default();
            seen.push((id, message.delivery.routing_key.to_string()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

/// The id of the provisioning command ordering sent for `instance`.
fn command_id(env: &TestEnv, instance: &str) -> String {
    #[derive(diesel::QueryableByName)]
    struct Id {
        #[diesel(sql_type = diesel::sql_types::Text)]
        id: String,
    }
    let rows: Vec<Id> = diesel::RunQueryDsl::load(
        diesel::sql_query(format!(
            "SELECT id::text AS id FROM ordering.outbox WHERE routing_key = 'provisioner.jobs.provision' \
             AND body->'payload'->>'instance_id' = '{instance}'"
        )),
        &mut env.conn(),
    )
    .expect("command");
    assert_eq!(rows.len(), 1, "one provisioning command");
    rows[0].id.clone()
}

/// Nothing is held and nothing was charged.
async fn assert_released_and_uncharged(env: &TestEnv, renter: &Client, credit: i64) {
    eventually("holdings released", Duration::from_secs(20), || async {
        (env.count("SELECT coalesce(sum(gpus_allocated), 0)::bigint AS n FROM catalog.machines")
            == 0
            && env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL")
                == 0)
            .then_some(())
    })
    .await;
    assert_eq!(
        env.count(
            "SELECT count(*) AS n FROM ordering.outbox WHERE routing_key = 'ordering.instance.running'"
        ),
        0,
        "never ran"
    );
    let balance = renter
        .run("{ balance { amount } usage { id } }", json!({}))
        .await
        .expect("balance");
    let amount: rust_decimal::Decimal = balance["balance"]["amount"]
        .as_str()
        .expect("amount")
        .parse()
        .expect("decimal");
    assert_eq!(
        amount,
        rust_decimal::Decimal::from(credit),
        "nothing charged"
    );
    assert_eq!(balance["usage"], json!([]));
}

async fn wait_failed(renter: &Client, id: &str) -> serde_json::Value {
    eventually("instance failed", Duration::from_secs(60), || async {
        let i = instance_status(renter, id).await;
        (i["status"] == "failed").then_some(i)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_keeps_failing_is_dead_lettered_and_releases_everything() {
    let env = TestEnv::new().await;
    let Rental {
        env,
        stack,
        renter,
        offer,
        ..
    } = rental(env, NO_WORKER, "L40S", 4, "0.89", "100").await;
    let placed = order(&renter, &offer, 2, "dead").await.expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();

    // The readiness check fails every time: a permanent fault, after the
    // steps before it put GPUs, a network, a volume, a container and a key
    // on the machine.
    let mut worker = worker_process(
        &stack.config,
        &[
            ("GPUMARKET_STEP_ATTEMPTS", "3"),
            ("GPUMARKET_SIM_STEP_FAILURES", "readiness_check=99"),
        ],
    );
    let failed = wait_failed(&renter, &id).await;
    assert!(
        failed["statusReason"]
            .as_str()
            .is_some_and(|r| r.contains("readiness_check") && r.contains("injected failure")),
        "{failed}"
    );
    assert_released_and_uncharged(&env, &renter, 100).await;

    // The original command is in the dead-letter queue, under its own id and
    // routing key, once.
    let command = command_id(&env, &id);
    let dead = dead_letters(&stack.config, &command).await;
    // The dead run's leftovers are cleaned off the machine.
    eventually("cleanup", Duration::from_secs(30), || async {
        (env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.jobs WHERE instance_id = '{id}' AND kind = 'cleanup' \
             AND status = 'succeeded' AND reported_at IS NOT NULL"
        )) == 1)
            .then_some(())
    })
    .await;
    worker.kill().expect("kill");
    worker.wait().expect("reap");
    assert_eq!(
        dead.iter().filter(|(m, _)| *m == command).count(),
        1,
        "{dead:?}"
    );
    assert!(
        dead.iter()
            .any(|(m, key)| *m == command && key == "provisioner.jobs.provision")
    );

    // The job: failed, dead-lettered, reported; three starts of the step,
    // three failure events; the steps before it ran once.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.jobs WHERE instance_id = '{id}' AND kind = 'provision' \
             AND status = 'failed' AND dead_lettered_at IS NOT NULL AND reported_at IS NOT NULL"
        )),
        1
    );
    assert_eq!(
        env.count(&format!(
            "SELECT s.attempts::bigint AS n FROM provisioner.job_steps s JOIN provisioner.jobs j ON j.id = s.job_id \
             WHERE j.instance_id = '{id}' AND j.kind = 'provision' AND s.step = 'readiness_check'"
        )),
        3
    );
    let events = |status: &str| {
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.outbox WHERE routing_key = 'provisioner.instance.step' \
             AND body->'payload'->>'instance_id' = '{id}' AND body->'payload'->>'step' = 'readiness_check' \
             AND body->'payload'->>'status' = '{status}' AND published_at IS NOT NULL"
        ))
    };
    assert_eq!(events("started"), 3);
    assert_eq!(events("failed"), 3);
    assert_eq!(events("finished"), 0);
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.job_steps s JOIN provisioner.jobs j ON j.id = s.job_id \
             WHERE j.instance_id = '{id}' AND j.kind = 'provision' AND s.finished_at IS NOT NULL AND s.attempts = 1"
        )),
        7,
        "the steps before it ran once each"
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.sim_resources WHERE instance_id = '{id}'"
        )),
        0
    );

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_deadline_is_failed_while_its_step_hangs() {
    let env = TestEnv::new().await;
    let Rental {
        env,
        stack,
        renter,
        offer,
        ..
    } = rental(env, NO_WORKER, "RTX 4090", 2, "0.42", "100").await;
    let placed = order(&renter, &offer, 1, "overdue").await.expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();

    // The image pull hangs far past the job's 3 s deadline.
    let mut worker = worker_process(
        &stack.config,
        &[
            ("GPUMARKET_JOB_DEADLINE_SECONDS", "3"),
            ("GPUMARKET_SIM_STEP_LATENCY_MS", "pull_image=600000"),
        ],
    );
    let failed = wait_failed(&renter, &id).await;
    assert!(
        failed["statusReason"]
            .as_str()
            .is_some_and(|r| r.contains("deadline")),
        "{failed}"
    );
    // The worker marks the job reported once ordering has answered, which
    // is just after ordering shows the instance failed.
    let reported = format!(
        "SELECT count(*) AS n FROM provisioner.jobs WHERE instance_id = '{id}' AND status = 'failed' \
         AND reported_at IS NOT NULL AND dead_lettered_at IS NOT NULL"
    );
    eventually("the job reported", Duration::from_secs(30), || async {
        (env.count(&reported) == 1).then_some(())
    })
    .await;
    worker.kill().expect("kill");
    worker.wait().expect("reap");
    // The hanging step never finished; the job is failed and reported.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.job_steps s JOIN provisioner.jobs j ON j.id = s.job_id \
             WHERE j.instance_id = '{id}' AND s.step = 'pull_image' AND s.finished_at IS NULL"
        )),
        1
    );
    assert_released_and_uncharged(&env, &renter, 100).await;

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_share_the_jobs_and_run_every_instance_exactly_once() {
    const N: usize = 8;
    let env = TestEnv::new().await;
    let Rental {
        env,
        stack,
        renter,
        offer,
        ..
    } = rental(env, NO_WORKER, "A100 80GB SXM", N as i32, "1.10", "1000").await;

    // Two jobs at a time each, and a slow step: neither can take them all.
    let settings = [
        ("GPUMARKET_WORKER_CONCURRENCY", "2"),
        ("GPUMARKET_SIM_STEP_LATENCY_MS", "pull_image=1000"),
    ];
    let mut workers = [
        worker_process(&stack.config, &settings),
        worker_process(&stack.config, &settings),
    ];
    let mut ids = Vec::new();
    for n in 0..N {
        let placed = order(&renter, &offer, 1, &format!("pair-{n}"))
            .await
            .expect("order");
        ids.push(placed["id"].as_str().expect("id").to_owned());
    }
    for id in &ids {
        wait_running(&renter, id, Duration::from_secs(90)).await;
    }
    for worker in &mut workers {
        worker.kill().expect("kill");
        worker.wait().expect("reap");
    }

    for id in &ids {
        assert_eq!(
            env.count(&format!(
                "SELECT count(*) AS n FROM ordering.outbox WHERE routing_key = 'ordering.instance.running' \
                 AND body->'payload'->>'instance_id' = '{id}'"
            )),
            1,
            "one running event for {id}"
        );
        assert_eq!(
            env.count(&format!(
                "SELECT count(*) AS n FROM provisioner.jobs WHERE instance_id = '{id}'"
            )),
            1
        );
        // Every step ran exactly once: no two workers ran the same job.
        assert_eq!(
            env.count(&format!(
                "SELECT count(*) AS n FROM provisioner.job_steps s JOIN provisioner.jobs j ON j.id = s.job_id \
                 WHERE j.instance_id = '{id}' AND s.finished_at IS NOT NULL AND s.attempts = 1"
            )),
            8
        );
        assert_eq!(
            env.count(&format!(
                "SELECT count(*) AS n FROM provisioner.outbox WHERE routing_key = 'provisioner.instance.step' \
                 AND body->'payload'->>'instance_id' = '{id}' AND body->'payload'->>'status' = 'started'"
            )),
            8
        );
    }
    assert_eq!(
        env.count("SELECT count(DISTINCT owner) AS n FROM provisioner.jobs"),
        2,
        "both workers ran jobs"
    );
    assert_eq!(
        env.count(
            "SELECT count(DISTINCT name) AS n FROM provisioner.sim_resources WHERE kind = 'gpu'"
        ),
        N as i64,
        "every GPU index bound once"
    );
    assert_eq!(
        env.count("SELECT gpus_allocated::bigint AS n FROM catalog.machines"),
        N as i64
    );

    stack.stop().await;
    env.cleanup().await;
}

/// A renter with credit on `stack`.
async fn renter_with_credit(env: &TestEnv, stack: &gpumarket::dev::Stack) -> Client {
    let api = Client::new(&stack.gateway_url);
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100").await;
    renter
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_driver_provisions_and_destroys_through_a_real_host_agent() {
    let env = TestEnv::new().await;
    let stack = env.start(NO_WORKER).await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let machine = machine_with_agent(&stack, &host, "RTX 4090", 2, 24, "0.42").await;
    let renter = renter_with_credit(&env, &stack).await;

    let mut worker = worker_process(
        &stack.config,
        &[
            ("GPUMARKET_PROVISIONER_DRIVER", "agent"),
            ("GPUMARKET_AGENT_STEP_TIMEOUT_MS", "10000"),
        ],
    );
    let placed = order(&renter, &machine, 1, "via-agent")
        .await
        .expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();
    wait_running(&renter, &id, Duration::from_secs(60)).await;

    // Every provisioning step went to the agent and was answered ok; the
    // agent changed the machine's state.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.agent_commands WHERE instance_id = '{id}' \
             AND machine_id = '{machine}' AND ok AND answered_at IS NOT NULL"
        )),
        8
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.sim_resources WHERE instance_id = '{id}' AND kind = 'gpu'"
        )),
        1
    );

    renter
        .run(
            "mutation($id: ID!) { destroyInstance(id: $id) { status } }",
            json!({ "id": id }),
        )
        .await
        .expect("destroy");
    eventually("destroyed", Duration::from_secs(60), || async {
        (instance_status(&renter, &id).await["status"] == "destroyed").then_some(())
    })
    .await;
    worker.kill().expect("kill");
    worker.wait().expect("reap");
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.agent_commands WHERE instance_id = '{id}' \
             AND step = 'validate_clean' AND ok"
        )),
        1
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.sim_resources WHERE instance_id = '{id}'"
        )),
        0,
        "nothing left on the machine"
    );
    assert_eq!(
        env.count("SELECT coalesce(sum(gpus_allocated), 0)::bigint AS n FROM catalog.machines"),
        0
    );

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_driver_times_out_a_silent_agent_and_fails_the_instance() {
    let env = TestEnv::new().await;
    let Rental {
        env,
        stack,
        renter,
        offer,
        ..
    } = rental(env, NO_WORKER, "RTX 4090", 2, "0.42", "100").await;
    // The machine's agent connected once (its queue exists) but does not
    // answer.
    let machine: uuid::Uuid = offer.parse().expect("uuid");
    let (_conn, channel) = broker_channel(&stack.config).await;
    host_agent::declare_command_queue(&channel, MachineId(machine))
        .await
        .expect("command queue");
    let mut worker = worker_process(
        &stack.config,
        &[
            ("GPUMARKET_PROVISIONER_DRIVER", "agent"),
            ("GPUMARKET_AGENT_STEP_TIMEOUT_MS", "1000"),
            ("GPUMARKET_STEP_ATTEMPTS", "2"),
        ],
    );
    let placed = order(&renter, &offer, 1, "silent").await.expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();
    let failed = wait_failed(&renter, &id).await;
    assert!(
        failed["statusReason"]
            .as_str()
            .is_some_and(|r| r.contains("did not answer")),
        "{failed}"
    );
    assert_released_and_uncharged(&env, &renter, 100).await;
    let command = command_id(&env, &id);
    dead_letters(&stack.config, &command).await;
    worker.kill().expect("kill");
    worker.wait().expect("reap");
    // Two commands for the first step, neither answered.
    assert_eq!(unanswered_validate_host(&env, &id), 2);

    stack.stop().await;
    env.cleanup().await;
}

/// A machine whose agent is not connected has no command queue (its agent
/// declares it on connect): the command comes back unroutable and the step
/// fails at once with "is not connected", retried like a silent agent's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_to_a_machine_whose_agent_is_not_connected_fails_at_once() {
    let env = TestEnv::new().await;
    let Rental {
        env,
        stack,
        renter,
        offer,
        ..
    } = rental(env, NO_WORKER, "RTX 4090", 2, "0.42", "100").await;
    let mut worker = worker_process(
        &stack.config,
        &[
            ("GPUMARKET_PROVISIONER_DRIVER", "agent"),
            // Far longer than the test waits: no step waits it out.
            ("GPUMARKET_AGENT_STEP_TIMEOUT_MS", "600000"),
            ("GPUMARKET_STEP_ATTEMPTS", "2"),
        ],
    );
    let placed = order(&renter, &offer, 1, "disconnected")
        .await
        .expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();
    let failed = wait_failed(&renter, &id).await;
    let reason = failed["statusReason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!("machine {offer} is not connected")),
        "{failed}"
    );
    assert_released_and_uncharged(&env, &renter, 100).await;
    dead_letters(&stack.config, &command_id(&env, &id)).await;
    worker.kill().expect("kill");
    worker.wait().expect("reap");
    assert_eq!(
        unanswered_validate_host(&env, &id),
        2,
        "two attempts, as for a silent agent"
    );

    stack.stop().await;
    env.cleanup().await;
}

/// A command queue holds a bounded number of commands (`x-max-length`,
/// `reject-publish`): one more is nacked and the step fails with "is full".
/// The limit is 1000; this queue is declared with 1 and filled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_to_a_full_command_queue_fails_at_once() {
    use host_agent::lapin::BasicProperties;
    use host_agent::lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
    let env = TestEnv::new().await;
    let Rental {
        env,
        stack,
        renter,
        offer,
        ..
    } = rental(env, NO_WORKER, "RTX 4090", 2, "0.42", "100").await;
    let machine: uuid::Uuid = offer.parse().expect("uuid");
    let queue = host_agent::protocol::command_queue(machine);
    let (_conn, channel) = broker_channel(&stack.config).await;
    host_agent::declare_command_queue_holding(&channel, MachineId(machine), 1)
        .await
        .expect("command queue");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let filler = channel
        .basic_publish(
            "".into(),
            queue.as_str().into(),
            BasicPublishOptions::default(),
            b"{}",
            BasicProperties::default(),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(filler.is_ack(), "the one command the queue holds");
    let mut worker = worker_process(
        &stack.config,
        &[
            ("GPUMARKET_PROVISIONER_DRIVER", "agent"),
            ("GPUMARKET_AGENT_STEP_TIMEOUT_MS", "600000"),
            ("GPUMARKET_STEP_ATTEMPTS", "2"),
        ],
    );
    let placed = order(&renter, &offer, 1, "full").await.expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();
    let failed = wait_failed(&renter, &id).await;
    let reason = failed["statusReason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!("command queue of machine {offer} is full")),
        "{failed}"
    );
    assert_released_and_uncharged(&env, &renter, 100).await;
    worker.kill().expect("kill");
    worker.wait().expect("reap");
    let (depth, _) = queue_depth(&channel, &queue).await;
    assert_eq!(depth, 1, "nothing more went in");

    stack.stop().await;
    env.cleanup().await;
}

/// The command queue outlives the agent's connection (`x-expires`, ten
/// minutes): a command sent while the agent is away waits there and is
/// carried out when it is back, without a retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_sent_while_the_agent_is_away_is_carried_out_when_it_is_back() {
    let env = TestEnv::new().await;
    let stack = env.start(NO_WORKER).await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let (machine, token) =
        machine_for_agent(&host, "away-rig", "RTX 4090", 2, Some(24), "0.42").await;
    let agent = gpumarket::seed::DemoAgent {
        machine_id: machine.parse().expect("uuid"),
        token: token.clone(),
        gpu_model: "RTX 4090".into(),
        gpu_count: 2,
        vram_gib: 24,
        cuda_version: "12.4".into(),
        real: false,
    };
    let running = gpumarket::dev::spawn_agent(&stack.config, &agent).expect("agent");
    wait_online(&host, &machine, Duration::from_secs(20)).await;
    let renter = renter_with_credit(&env, &stack).await;

    // The agent goes away; its queue stays.
    running.abort();
    let _ = running.await;
    let admin = platform::rabbitmq_admin::RabbitAdmin::new(&stack.config.rabbitmq_management_url)
        .expect("management");
    admin
        .close_all_connections_of(
            &host_agent::protocol::username(agent.machine_id, &token),
            "the agent goes away",
        )
        .await
        .expect("disconnect");
    let queue = host_agent::protocol::command_queue(agent.machine_id);
    let (_conn, channel) = broker_channel(&stack.config).await;
    // The agent's queue outlives its connection (queue_depth fails if not).
    let depth = async || queue_depth(&channel, &queue).await;
    eventually("the agent gone", Duration::from_secs(20), || async {
        (depth().await.1 == 0).then_some(())
    })
    .await;

    let mut worker = worker_process(
        &stack.config,
        &[
            ("GPUMARKET_PROVISIONER_DRIVER", "agent"),
            ("GPUMARKET_AGENT_STEP_TIMEOUT_MS", "120000"),
        ],
    );
    let placed = order(&renter, &machine, 1, "while-away")
        .await
        .expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();
    eventually("the command waiting", Duration::from_secs(30), || async {
        (depth().await.0 == 1).then_some(())
    })
    .await;
    assert_eq!(
        instance_status(&renter, &id).await["status"],
        "provisioning"
    );

    // Back: the waiting command is carried out, and the rest follow.
    let _back = gpumarket::dev::spawn_agent(&stack.config, &agent).expect("agent");
    wait_running(&renter, &id, Duration::from_secs(60)).await;
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.agent_commands WHERE instance_id = '{id}' \
             AND step = 'validate_host'"
        )),
        1,
        "the command sent while away was the one carried out"
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.agent_commands WHERE instance_id = '{id}' \
             AND ok AND answered_at IS NOT NULL"
        )),
        8
    );
    worker.kill().expect("kill");
    worker.wait().expect("reap");

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_whose_workers_keep_dying_is_given_up_after_its_attempts() {
    let env = TestEnv::new().await;
    let Rental {
        env,
        stack,
        renter,
        offer,
        ..
    } = rental(env, NO_WORKER, "RTX 4090", 2, "0.42", "100").await;
    let placed = order(&renter, &offer, 1, "poison").await.expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();
    let lease = ("GPUMARKET_JOB_LEASE_MS", "1500");
    let attempts = ("GPUMARKET_STEP_ATTEMPTS", "2");
    let started = |n: i64| {
        format!(
            "SELECT count(*) AS n FROM provisioner.job_steps s JOIN provisioner.jobs j ON j.id = s.job_id \
             WHERE j.instance_id = '{id}' AND s.step = 'bind_gpus' AND s.finished_at IS NULL AND s.attempts = {n}"
        )
    };
    // Two workers in a row die inside bind_gpus (as a step that crashes its
    // worker would make them).
    for n in 1..=2 {
        let mut doomed = worker_process(
            &stack.config,
            &[
                ("GPUMARKET_SIM_STEP_LATENCY_MS", "bind_gpus=60000"),
                lease,
                attempts,
            ],
        );
        let sql = started(n);
        eventually("bind_gpus to start", Duration::from_secs(30), || async {
            (env.count(&sql) == 1).then_some(())
        })
        .await;
        doomed.kill().expect("SIGKILL");
        doomed.wait().expect("reap");
    }
    // A healthy worker does not start it a third time: the job dies.
    let mut healthy = worker_process(&stack.config, &[lease, attempts]);
    let failed = wait_failed(&renter, &id).await;
    assert!(
        failed["statusReason"]
            .as_str()
            .is_some_and(|r| r.contains("bind_gpus gave up after 2 attempts")),
        "{failed}"
    );
    assert_eq!(env.count(&started(2)), 1, "never started a third time");
    assert_released_and_uncharged(&env, &renter, 100).await;
    // The worker's outbox relay publishes the dead letter: it must live
    // until then (killing it at the report raced the relay under load).
    dead_letters(&stack.config, &command_id(&env, &id)).await;
    healthy.kill().expect("kill");
    healthy.wait().expect("reap");

    stack.stop().await;
    env.cleanup().await;
}

/// Workers binding GPUs on one machine at the same moment each get their
/// own index: the simulated host serialises its allocator per machine (CI
/// once caught two binds taking the same index, the second one silently
/// left without a GPU).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_binds_on_one_machine_never_share_a_gpu_index() {
    use provisioner::Driver;
    let env = TestEnv::new().await;
    let db = platform::Db::connect(&env.config.database_url, 8).expect("pool");
    let driver = provisioner::SimulatedDriver::from_config(db, &env.config).expect("driver");
    let machine = uuid::Uuid::now_v7();
    let jobs: Vec<contracts::events::ProvisionInstance> = (0..8)
        .map(|_| contracts::events::ProvisionInstance {
            gpu_indices: Vec::new(),
            mig: None,
            instance_id: InstanceId(uuid::Uuid::now_v7()),
            order_id: OrderId(uuid::Uuid::now_v7()),
            tenant_id: TenantId(uuid::Uuid::now_v7()),
            machine_id: MachineId(machine),
            gpu_count: 1,
            machine_gpu_count: 8,
            image: "nvidia/cuda:12.4.1-runtime-ubuntu22.04".into(),
            ssh_public_key: None,
            command: None,
            env: Default::default(),
            ports: Vec::new(),
            disk_gib: None,
        })
        .collect();
    let results = futures_util::future::join_all(
        jobs.iter()
            .map(|job| driver.run_step(provisioner::Step::BindGpus, job)),
    )
    .await;
    for result in results {
        result.expect("bind");
    }
    assert_eq!(
        env.count(&format!(
            "SELECT count(DISTINCT name) AS n FROM provisioner.sim_resources \
             WHERE machine_id = '{machine}' AND kind = 'gpu'"
        )),
        8,
        "eight instances, eight distinct indices"
    );
    for job in &jobs {
        assert_eq!(
            env.count(&format!(
                "SELECT count(*) AS n FROM provisioner.sim_resources \
                 WHERE instance_id = '{}' AND kind = 'gpu'",
                job.instance_id
            )),
            1
        );
    }
    env.cleanup().await;
}
