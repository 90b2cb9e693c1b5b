//! Cancelling an order that is still provisioning: `destroyInstance` works
//! while the instance is being set up. The provisioning job stops (it is
//! `cancelled` and the worker respects it, even mid-step), the machine is
//! cleaned, the GPUs and the quota go back, no GPU time is billed, and the
//! instance never becomes `running` afterwards.

use std::time::Duration;

use gpumarket::client::Client;
use gpumarket::dev::Parts;
use serde_json::{Value, json};

use crate::harness::*;

async fn destroy(renter: &Client, id: &str) -> Value {
    renter
        .run(
            "mutation($id: ID!) { destroyInstance(id: $id) { id status statusReason } }",
            json!({ "id": id }),
        )
        .await
        .expect("destroyInstance")["destroyInstance"]
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_still_provisioning_is_cancelled_by_destroy_and_gives_everything_back() {
    let mut env = TestEnv::new().await;
    // The readiness check takes 4 s: the destroy lands in the middle of it.
    env.settings(|s: &mut provisioner::ProvisionerSettings| {
        s.sim_step_latency_ms = "readiness_check=4000".into();
        s.job_lease = std::time::Duration::from_millis(900);
    });
    let Rental {
        env,
        stack,
        renter,
        offer,
        ..
    } = rental(env, Parts::ALL, "RTX 4090", 2, "0.42", "100").await;

    let placed = order(&renter, &offer, 2, "cancel-me").await.expect("order");
    let id = placed["id"].as_str().expect("id").to_owned();
    assert_eq!(placed["status"], "provisioning");
    let steps = |step: &str| {
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.job_steps s \
             JOIN provisioner.jobs j ON j.id = s.job_id \
             WHERE j.instance_id = '{id}' AND j.kind = 'provision' AND s.step = '{step}'"
        ))
    };
    eventually(
        "the readiness check under way",
        Duration::from_secs(30),
        || async { (steps("readiness_check") == 1).then_some(()) },
    )
    .await;
    let provisioning = instance_status(&renter, &id).await;
    assert_eq!(provisioning["status"], "provisioning");
    assert_eq!(provisioning["allowedActions"], json!(["destroy"]));

    let destroying = destroy(&renter, &id).await;
    assert!(
        matches!(
            destroying["status"].as_str(),
            Some("deprovisioning" | "destroyed")
        ),
        "{destroying}"
    );
    assert!(
        destroying["statusReason"]
            .as_str()
            .is_some_and(|r| r.contains("provisioning cancelled")),
        "{destroying}"
    );
    eventually("destroyed", Duration::from_secs(30), || async {
        (instance_status(&renter, &id).await["status"] == "destroyed").then_some(())
    })
    .await;
    // A repeat changes nothing.
    assert_eq!(destroy(&renter, &id).await["status"], "destroyed");

    // Everything is back: quota, GPUs, and the machine is clean.
    assert_eq!(
        env.count("SELECT count(*) AS n FROM quota.reservations WHERE released_at IS NULL"),
        0
    );
    assert_eq!(
        env.count("SELECT sum(gpus_allocated)::bigint AS n FROM catalog.machines"),
        0
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.sim_resources WHERE instance_id = '{id}'"
        )),
        0
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM provisioner.jobs \
             WHERE instance_id = '{id}' AND kind = 'provision' AND status = 'cancelled'"
        )),
        1
    );

    // The readiness check's time passes: the cancelled job does not bring
    // the instance to running, and no GPU time was billed.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(instance_status(&renter, &id).await["status"], "destroyed");
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM ordering.instance_transitions \
             WHERE instance_id = '{id}' AND to_state = 'running'"
        )),
        0
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM metering.intervals WHERE instance_id = '{id}' AND meter = 'gpu'"
        )),
        0
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM billing.usage_details d \
             JOIN billing.transactions t ON t.id = d.transaction_id \
             WHERE t.instance_id = '{id}' AND d.meter = 'gpu'"
        )),
        0
    );

    // The GPUs are on the market again.
    let again = running_instance(&renter, &offer, 2, "after-cancel").await;
    assert_ne!(again, id);

    stack.stop().await;
    env.cleanup().await;
}
