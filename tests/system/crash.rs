//! The provisioner is an OS process killed with SIGKILL in the middle of a
//! step (after the database shows the step started and not finished); a new
//! process takes the job over once the dead one's lease expires and finishes
//! it. Each instance ends `running` exactly once with one row per step (its
//! `attempts` counts the starts: 2 for the killed step, 1 for the others)
//! and one `finished` step event per step. Repeated with the kill placed at
//! each step.

use std::process::Child;
use std::time::Duration;

use gpumarket::dev::Parts;
use platform::Config;

use crate::harness::*;

const STEPS: [&str; 8] = [
    "validate_host",
    "pull_image",
    "bind_gpus",
    "attach_network",
    "create_volume",
    "start_container",
    "authorize_ssh",
    "readiness_check",
];

/// A killed worker's job is taken over once its lease runs out; a short
/// lease keeps the test quick.
const LEASE: (&str, &str) = ("GPUMARKET_JOB_LEASE_MS", "1500");

fn worker(config: &Config, slow_step: Option<&str>) -> Child {
    match slow_step {
        // Long enough that the kill always lands inside the step.
        Some(step) => worker_process(
            config,
            &[
                ("GPUMARKET_SIM_STEP_LATENCY_MS", &format!("{step}=60000")),
                LEASE,
            ],
        ),
        None => worker_process(config, &[LEASE]),
    }
}

/// Step events of one instance in the provisioner's outbox.
fn step_events(env: &TestEnv, id: &str, step: Option<&str>, status: &str) -> i64 {
    let step = step.map_or(String::new(), |s| {
        format!(" AND body->'payload'->>'step' = '{s}'")
    });
    env.count(&format!(
        "SELECT count(*) AS n FROM provisioner.outbox WHERE routing_key = 'provisioner.instance.step' \
         AND body->'payload'->>'instance_id' = '{id}' AND body->'payload'->>'status' = '{status}'{step}"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioner_killed_mid_step_resumes_and_reports_running_exactly_once() {
    let env = TestEnv::new().await;
    let Rental {
        env,
        stack,
        renter,
        offer,
        ..
    } = rental(
        env,
        Parts {
            services: true,
            messaging: true,
            provisioner: false,
        },
        "A100 80GB SXM",
        8,
        "1.10",
        "1000",
    )
    .await;

    for step in STEPS {
        let placed = order(&renter, &offer, 1, &format!("crash-{step}"))
            .await
            .expect("order");
        let id = placed["id"].as_str().expect("id").to_owned();

        let mut doomed = worker(&stack.config, Some(step));
        let in_flight = format!(
            "SELECT count(*) AS n FROM provisioner.job_steps s JOIN provisioner.jobs j ON j.id = s.job_id \
             WHERE j.instance_id = '{id}' AND s.step = '{step}' AND s.finished_at IS NULL"
        );
        eventually(
            &format!("{step} to start"),
            Duration::from_secs(30),
            || async { (env.count(&in_flight) == 1).then_some(()) },
        )
        .await;
        doomed.kill().expect("SIGKILL");
        doomed.wait().expect("reap");
        // The step is still open and the instance not running.
        assert_eq!(env.count(&in_flight), 1, "{step} finished before the kill");
        assert_eq!(
            instance_status(&renter, &id).await["status"],
            "provisioning"
        );

        let mut healthy = worker(&stack.config, None);
        wait_running(&renter, &id, Duration::from_secs(60)).await;
        healthy.kill().expect("kill");
        healthy.wait().expect("reap");

        let running_events = format!(
            "SELECT count(*) AS n FROM ordering.outbox WHERE routing_key = 'ordering.instance.running' \
             AND body->'payload'->>'instance_id' = '{id}'"
        );
        assert_eq!(
            env.count(&running_events),
            1,
            "running events after a kill in {step}"
        );
        let transitions = format!(
            "SELECT count(*) AS n FROM ordering.instance_transitions WHERE instance_id = '{id}' AND to_state = 'running'"
        );
        assert_eq!(env.count(&transitions), 1);
        let steps = format!(
            "SELECT count(*) AS n FROM provisioner.job_steps s JOIN provisioner.jobs j ON j.id = s.job_id \
             WHERE j.instance_id = '{id}' AND s.finished_at IS NOT NULL"
        );
        assert_eq!(
            env.count(&steps),
            STEPS.len() as i64,
            "one finished row per step"
        );
        let retried = format!(
            "SELECT s.attempts::bigint AS n FROM provisioner.job_steps s JOIN provisioner.jobs j ON j.id = s.job_id \
             WHERE j.instance_id = '{id}' AND s.step = '{step}'"
        );
        assert_eq!(env.count(&retried), 2, "{step} ran again after the kill");
        let jobs = format!("SELECT count(*) AS n FROM provisioner.jobs WHERE instance_id = '{id}'");
        assert_eq!(env.count(&jobs), 1);
        // Progress events: one start per attempt, one finish per step.
        assert_eq!(step_events(&env, &id, None, "finished"), STEPS.len() as i64);
        assert_eq!(step_events(&env, &id, Some(step), "started"), 2);
        assert_eq!(
            step_events(&env, &id, None, "started"),
            STEPS.len() as i64 + 1
        );
        assert_eq!(step_events(&env, &id, None, "failed"), 0);
    }
    // The simulated host bound exactly one GPU index per instance, never one twice.
    assert_eq!(
        env.count("SELECT count(*) AS n FROM provisioner.sim_resources WHERE kind = 'gpu'"),
        STEPS.len() as i64
    );
    assert_eq!(
        env.count("SELECT gpus_allocated::bigint AS n FROM catalog.machines"),
        STEPS.len() as i64
    );

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_that_keeps_failing_fails_the_instance_releases_everything_and_charges_nothing()
 {
    let env = TestEnv::new().await;
    let Rental {
        env,
        stack,
        renter,
        offer,
        ..
    } = rental(
        env,
        Parts {
            services: true,
            messaging: true,
            provisioner: false,
        },
        "L40S",
        4,
        "0.89",
        "100",
    )
    .await;
    let placed = order(&renter, &offer, 2, "doomed").await.expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();

    // Every readiness check fails: the worker gives up after its bounded attempts.
    let mut worker = worker_process(
        &stack.config,
        &[
            ("GPUMARKET_STEP_ATTEMPTS", "3"),
            ("GPUMARKET_SIM_STEP_FAILURES", "readiness_check=99"),
        ],
    );
    let failed = eventually("instance failed", Duration::from_secs(60), || async {
        let i = instance_status(&renter, &id).await;
        (i["status"] == "failed").then_some(i)
    })
    .await;
    worker.kill().expect("kill");
    worker.wait().expect("reap");
    assert!(
        failed["statusReason"]
            .as_str()
            .is_some_and(|r| r.contains("readiness_check")),
        "{failed}"
    );
    let attempts = format!(
        "SELECT s.attempts::bigint AS n FROM provisioner.job_steps s JOIN provisioner.jobs j ON j.id = s.job_id \
         WHERE j.instance_id = '{id}' AND s.step = 'readiness_check'"
    );
    assert_eq!(env.count(&attempts), 3, "bounded attempts");
    assert_eq!(
        env.count("SELECT gpus_allocated::bigint AS n FROM catalog.machines"),
        0,
        "GPUs released"
    );
    assert_eq!(
        env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL"),
        0,
        "quota released"
    );
    assert_eq!(
        env.count("SELECT count(*) AS n FROM ordering.outbox WHERE routing_key = 'ordering.instance.running'"),
        0,
        "never ran"
    );
    let balance = renter
        .run("{ balance { amount } usage { id } }", serde_json::json!({}))
        .await
        .expect("balance");
    let amount: rust_decimal::Decimal = balance["balance"]["amount"]
        .as_str()
        .expect("amount")
        .parse()
        .expect("decimal");
    assert_eq!(amount, rust_decimal::Decimal::from(100), "nothing charged");
    assert_eq!(balance["usage"], serde_json::json!([]));

    stack.stop().await;
    env.cleanup().await;
}
