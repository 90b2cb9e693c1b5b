//! The instance lifecycle after the first run: stop → start on the same
//! machine → stop → destroy, each run billed for exactly floor(T1 − T0) of
//! the instants the API reports; destroy deprovisions, validates the machine
//! clean and only then returns the capacity. A machine that fails the clean
//! validation keeps the instance `deprovisioning` and its GPUs out of the
//! market.

use std::process::Child;
use std::time::Duration;

use chrono::{DateTime, Utc};
use gpumarket::client::Client;
use gpumarket::dev::Parts;
use serde_json::{Value, json};

use crate::harness::*;

fn worker(config: &platform::Config, latency: Option<&str>) -> Child {
    match latency {
        Some(latency) => worker_process(config, &[("GPUMARKET_SIM_STEP_LATENCY_MS", latency)]),
        None => worker_process(config, &[]),
    }
}

const FIELDS: &str = "id status statusReason allowedActions runningAt stoppedAt";

fn instant(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().expect("instant"))
        .expect("rfc3339")
        .with_timezone(&Utc)
}

fn billed(t0: DateTime<Utc>, t1: DateTime<Utc>) -> i64 {
    (t1 - t0)
        .num_microseconds()
        .expect("micros")
        .div_euclid(1_000_000)
}

async fn act(
    renter: &Client,
    action: &str,
    id: &str,
) -> Result<Value, gpumarket::client::GraphQlError> {
    renter
        .run(
            &format!("mutation($id: ID!) {{ {action}(id: $id) {{ {FIELDS} }} }}"),
            json!({ "id": id }),
        )
        .await
        .map(|d| d[action].clone())
}

async fn wait_status(renter: &Client, id: &str, status: &str) -> Value {
    eventually(
        &format!("instance {status}"),
        Duration::from_secs(30),
        || async {
            let i = instance_status(renter, id).await;
            (i["status"] == status).then_some(i)
        },
    )
    .await
}

/// Closed usage intervals of one instance, oldest first.
async fn intervals(renter: &Client, id: &str, n: usize) -> Vec<Value> {
    eventually("usage recorded", Duration::from_secs(20), || async {
        let u = renter
            .run(
                "query($id: ID) { usage(instanceId: $id) { billedSeconds startedAt endedAt } }",
                json!({ "id": id }),
            )
            .await
            .expect("usage");
        let mut all = u["usage"].as_array().cloned().unwrap_or_default();
        all.retain(|i| i["billedSeconds"].is_i64());
        all.sort_by_key(|i| instant(&i["startedAt"]));
        (all.len() == n).then_some(all)
    })
    .await
}

/// GPUs the market offers on `offer`, or None when it offers none.
async fn gpus_free(renter: &Client, offer: &str) -> Option<i64> {
    let found = renter
        .run(
            "query { offers(first: 100) { nodes { id gpusFree } } }",
            json!({}),
        )
        .await
        .expect("offers");
    found["offers"]["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|o| o["id"] == offer))
        .and_then(|o| o["gpusFree"].as_i64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_start_stop_destroy_bills_each_run_and_returns_a_clean_machine() {
    let env = TestEnv::new().await;
    let stack = env.start(Parts::ALL).await;
    let api = Client::new(&stack.gateway_url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let offer = listed_machine(&host, "RTX 4090", 2, "0.42").await;
    env.heartbeat_all();
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let (other, other_tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;
    grant(&operator, &tenant, "100").await;
    grant(&operator, &other_tenant, "100").await;

    // Run 1.
    let placed = order(&renter, &offer, 1, "life-1").await.expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();
    let running = wait_running(&renter, &id, Duration::from_secs(30)).await;
    assert_eq!(running["allowedActions"], json!(["stop", "destroy"]));
    // Another tenant can neither destroy nor start it: it does not exist for them.
    for action in ["destroyInstance", "startInstance"] {
        let refused = act(&other, action, &id).await.expect_err(action);
        assert_eq!(refused.code, "NOT_FOUND", "{action}");
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let stopped = act(&renter, "stopInstance", &id).await.expect("stop");
    assert_eq!(stopped["status"], "stopped");
    assert_eq!(stopped["allowedActions"], json!(["start", "destroy"]));
    let run1 = (
        instant(&stopped["runningAt"]),
        instant(&stopped["stoppedAt"]),
    );

    // While another renter holds every GPU of the machine, start fails
    // clearly and holds nothing.
    let squatter = order(&other, &offer, 2, "squat").await.expect("order");
    let squatter = squatter["id"].as_str().expect("id").to_owned();
    wait_running(&other, &squatter, Duration::from_secs(30)).await;
    let refused = act(&renter, "startInstance", &id).await;
    let error = refused.expect_err("start must fail while the GPUs are taken");
    assert_eq!(error.code, "INSUFFICIENT_CAPACITY");
    assert!(error.message.contains("machine"), "{}", error.message);
    assert_eq!(instance_status(&renter, &id).await["status"], "stopped");
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL AND tenant_id = '{tenant}'"
        )),
        0
    );
    assert_eq!(
        env.count("SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines"),
        2
    );
    act(&other, "stopInstance", &squatter).await.expect("stop");

    // Run 2, on the same machine.
    env.heartbeat_all();
    let starting = act(&renter, "startInstance", &id).await.expect("start");
    assert_eq!(starting["status"], "provisioning");
    // A repeated start is answered, not repeated.
    let again = act(&renter, "startInstance", &id)
        .await
        .expect("start again");
    assert!(matches!(
        again["status"].as_str(),
        Some("provisioning" | "running")
    ));
    let running = wait_running(&renter, &id, Duration::from_secs(30)).await;
    assert!(instant(&running["runningAt"]) > run1.1);
    assert!(running["stoppedAt"].is_null());
    assert_eq!(
        env.count("SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines"),
        1
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let stopped = act(&renter, "stopInstance", &id).await.expect("stop 2");
    assert_eq!(stopped["status"], "stopped");
    let run2 = (
        instant(&stopped["runningAt"]),
        instant(&stopped["stoppedAt"]),
    );

    // Destroy from stopped: no new interval, the machine is cleaned.
    let destroying = act(&renter, "destroyInstance", &id).await.expect("destroy");
    assert!(matches!(
        destroying["status"].as_str(),
        Some("deprovisioning" | "destroyed")
    ));
    let destroyed = wait_status(&renter, &id, "destroyed").await;
    assert_eq!(destroyed["allowedActions"], json!([]));
    let repeat = act(&renter, "destroyInstance", &id).await.expect("repeat");
    assert_eq!(repeat["status"], "destroyed");
    assert_eq!(
        act(&renter, "startInstance", &id)
            .await
            .expect_err("start")
            .code,
        "CONFLICT"
    );

    // Two runs, each billed floor(T1 − T0) of the reported instants.
    let usage = intervals(&renter, &id, 2).await;
    for (interval, (t0, t1)) in usage.iter().zip([run1, run2]) {
        assert_eq!(instant(&interval["startedAt"]), t0);
        assert_eq!(instant(&interval["endedAt"]), t1);
        assert_eq!(interval["billedSeconds"].as_i64(), Some(billed(t0, t1)));
        assert!(billed(t0, t1) >= 1);
    }

    // Nothing of the instance is left on the host; everything it held is back.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.sim_resources WHERE instance_id = '{id}'"
        )),
        0
    );
    assert_eq!(
        env.count("SELECT count(*) AS n FROM catalog.allocations WHERE released_at IS NULL"),
        0
    );
    assert_eq!(
        env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL"),
        0
    );
    assert_eq!(gpus_free(&renter, &offer).await, Some(2));
    // One job per run and one deprovisioning job, each with its step log.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.jobs WHERE instance_id = '{id}' AND status = 'succeeded' \
             AND kind IN ('provision', 'provision:2', 'deprovision')"
        )),
        3
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.job_steps s JOIN provisioner.jobs j ON j.id = s.job_id \
             WHERE j.instance_id = '{id}' AND j.kind = 'deprovision' AND s.finished_at IS NOT NULL"
        )),
        6
    );

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_that_fails_the_clean_check_keeps_its_gpus_out_of_the_market() {
    let mut env = TestEnv::new().await;
    // The first wipe silently leaves the volume behind.
    env.settings(|s: &mut provisioner::ProvisionerSettings| {
        s.sim_step_failures = "wipe_volume=1".into()
    });
    let Rental {
        env,
        stack,
        renter,
        offer,
        ..
    } = rental(env, Parts::ALL, "L40S", 2, "0.89", "100").await;

    let placed = order(&renter, &offer, 1, "dirty").await.expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();
    wait_running(&renter, &id, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;

    // Destroy from running: billing ends at the destroy instant.
    let destroying = act(&renter, "destroyInstance", &id).await.expect("destroy");
    assert_eq!(destroying["status"], "deprovisioning");
    let (t0, t1) = (
        instant(&destroying["runningAt"]),
        instant(&destroying["stoppedAt"]),
    );
    let usage = intervals(&renter, &id, 1).await;
    assert_eq!(instant(&usage[0]["startedAt"]), t0);
    assert_eq!(instant(&usage[0]["endedAt"]), t1);
    assert_eq!(usage[0]["billedSeconds"].as_i64(), Some(billed(t0, t1)));

    // The validation finds the volume and fails the job.
    let failed = format!(
        "SELECT count(*) AS n FROM provisioner.jobs WHERE instance_id = '{id}' AND kind = 'deprovision' \
         AND status = 'failed' AND last_error LIKE '%not clean%volume%'"
    );
    eventually("validation to fail", Duration::from_secs(30), || async {
        (env.count(&failed) == 1).then_some(())
    })
    .await;
    let held = eventually("failure reported", Duration::from_secs(20), || async {
        let i = instance_status(&renter, &id).await;
        i["statusReason"]
            .as_str()
            .is_some_and(|r| r.contains("maintenance"))
            .then_some(i)
    })
    .await;
    assert_eq!(held["status"], "deprovisioning");
    assert!(
        held["statusReason"]
            .as_str()
            .is_some_and(|r| r.contains("volume"))
    );
    assert_eq!(held["allowedActions"], json!([]));

    // The capacity stays taken and the machine is off the market.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.sim_resources WHERE instance_id = '{id}' AND kind = 'volume'"
        )),
        1
    );
    assert_eq!(
        env.count("SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines"),
        1
    );
    assert_eq!(
        env.count("SELECT count(*) AS n FROM catalog.allocations WHERE released_at IS NULL"),
        1
    );
    assert_eq!(
        env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL"),
        1
    );
    eventually("machine unlisted", Duration::from_secs(10), || async {
        (env.count("SELECT count(*) AS n FROM catalog.machines WHERE listed") == 0).then_some(())
    })
    .await;
    assert_eq!(gpus_free(&renter, &offer).await, None);
    // A repeated destroy changes nothing.
    let repeat = act(&renter, "destroyInstance", &id).await.expect("repeat");
    assert_eq!(repeat["status"], "deprovisioning");

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_fails_to_provision_leaves_the_instance_stopped_with_its_disk() {
    let env = TestEnv::new().await;
    let Rental {
        env,
        stack,
        renter,
        offer,
        ..
    } = rental(env, Parts::ALL, "RTX 4090", 1, "0.42", "100").await;

    let placed = order(&renter, &offer, 1, "restart").await.expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();
    wait_running(&renter, &id, Duration::from_secs(30)).await;
    act(&renter, "stopInstance", &id).await.expect("stop");
    eventually("GPU unbound", Duration::from_secs(10), || async {
        (env.count("SELECT count(*) AS n FROM provisioner.sim_resources WHERE kind = 'gpu'") == 0)
            .then_some(())
    })
    .await;

    // Something outside the platform holds the machine's only GPU index: the
    // restart cannot bind it.
    env.exec(&format!(
        "INSERT INTO provisioner.sim_resources (machine_id, kind, name, instance_id) \
         VALUES ('{offer}', 'gpu', '0', gen_random_uuid())"
    ));
    let starting = act(&renter, "startInstance", &id).await.expect("start");
    assert_eq!(starting["status"], "provisioning");
    let back = wait_status(&renter, &id, "stopped").await;
    assert!(
        back["statusReason"]
            .as_str()
            .is_some_and(|r| r.starts_with("start failed")),
        "{back}"
    );
    assert_eq!(back["allowedActions"], json!(["start", "destroy"]));
    // The failed run's GPUs and quota went back; the disk stayed.
    eventually("holdings released", Duration::from_secs(10), || async {
        (env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL") == 0
            && env.count("SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines") == 0)
            .then_some(())
    })
    .await;
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.sim_resources WHERE instance_id = '{id}' AND kind = 'volume'"
        )),
        1
    );

    // Once the GPU is free again, the next start (run 2 again) works.
    env.exec("DELETE FROM provisioner.sim_resources WHERE kind = 'gpu'");
    env.heartbeat_all();
    act(&renter, "startInstance", &id)
        .await
        .expect("start again");
    let running = wait_running(&renter, &id, Duration::from_secs(30)).await;
    assert!(running["statusReason"].is_null());
    act(&renter, "destroyInstance", &id).await.expect("destroy");
    wait_status(&renter, &id, "destroyed").await;
    assert_eq!(intervals(&renter, &id, 2).await.len(), 2);

    stack.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioner_killed_mid_deprovision_resumes_and_destroys_exactly_once() {
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
        2,
        "0.89",
        "100",
    )
    .await;

    // This worker provisions normally but hangs in the wipe.
    let mut doomed = worker(&stack.config, Some("wipe_volume=60000"));
    let placed = order(&renter, &offer, 2, "crash-destroy")
        .await
        .expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();
    wait_running(&renter, &id, Duration::from_secs(30)).await;
    act(&renter, "destroyInstance", &id).await.expect("destroy");
    let in_flight = format!(
        "SELECT count(*) AS n FROM provisioner.job_steps s JOIN provisioner.jobs j ON j.id = s.job_id \
         WHERE j.instance_id = '{id}' AND j.kind = 'deprovision' AND s.step = 'wipe_volume' AND s.finished_at IS NULL"
    );
    eventually("wipe to start", Duration::from_secs(30), || async {
        (env.count(&in_flight) == 1).then_some(())
    })
    .await;
    doomed.kill().expect("SIGKILL");
    doomed.wait().expect("reap");
    assert_eq!(
        instance_status(&renter, &id).await["status"],
        "deprovisioning"
    );
    assert_eq!(
        env.count("SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines"),
        2,
        "capacity stays out until the machine is clean"
    );

    let mut healthy = worker(&stack.config, None);
    wait_status(&renter, &id, "destroyed").await;
    healthy.kill().expect("kill");
    healthy.wait().expect("reap");

    // One deprovisioning job, one finished row per step, the wipe run twice.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.jobs WHERE instance_id = '{id}' AND kind = 'deprovision'"
        )),
        1
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.job_steps s JOIN provisioner.jobs j ON j.id = s.job_id \
             WHERE j.instance_id = '{id}' AND j.kind = 'deprovision' AND s.finished_at IS NOT NULL"
        )),
        6
    );
    assert_eq!(
        env.count(&format!(
            "SELECT s.attempts::bigint AS n FROM provisioner.job_steps s JOIN provisioner.jobs j ON j.id = s.job_id \
             WHERE j.instance_id = '{id}' AND j.kind = 'deprovision' AND s.step = 'wipe_volume'"
        )),
        2
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instance_transitions WHERE instance_id = '{id}' AND to_state = 'destroyed'"
        )),
        1
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.sim_resources WHERE instance_id = '{id}'"
        )),
        0
    );
    assert_eq!(
        env.count("SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines"),
        0
    );
    assert_eq!(
        env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL"),
        0
    );
    // Billing stopped at the destroy, once.
    let usage = intervals(&renter, &id, 1).await;
    assert!(usage[0]["billedSeconds"].as_i64().is_some());

    stack.stop().await;
    env.cleanup().await;
}
