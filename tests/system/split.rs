//! Split mode: every service, the gateway and a provisioner worker as its own
//! OS process (`system::processes`), talking only over HTTP and RabbitMQ;
//! the walking skeleton's flow runs through them as it does in dev mode
//! (`system::flow`).

use std::collections::HashSet;
use std::process::Child;
use std::time::Duration;

use chrono::{DateTime, Utc};
use contracts::money;
use gpumarket::client::Client;
use rust_decimal::Decimal;
use serde_json::json;

use crate::harness::*;
use crate::processes::{Split, machine_with_agent_process};

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
    // One posting for the whole run, as in `system::flow`.
    let mut split = Split::start(
        &env.config,
        &[("GPUMARKET_SETTLEMENT_INTERVAL_MS", "3600000")],
    )
    .await;
    let api = Client::new(&split.url("gateway"));

    // Host lists a machine; its agent, a process of its own as on a real
    // host, makes it online by heartbeating over RabbitMQ.
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let offer =
        machine_with_agent_process(&env.config, &mut split, &host, "agent", 2, "0.42").await;
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
              'gpumarket_billing', 'gpumarket_webhooks', 'gpumarket_ordering',
              'gpumarket_provisioner')"
        ),
        7
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
        crate::processes::SERVICES.len() + 3,
        "every service, the gateway, the worker, the agent"
    );

    drop(split);
    env.cleanup().await;
}
