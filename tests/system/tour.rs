//! The README's five-minute tour, run as written against the demo market
//! (`gpumarket dev`'s seed, its six machines' simulated agents running): the
//! GraphQL blocks of the tour section are read from README.md and sent in
//! order, with the placeholders filled from earlier answers as a reader
//! would; the host agent is started from the README's own command line. Each
//! step is checked for what the README says it shows, so the tour cannot
//! drift from the demo market or the API unnoticed.

use std::time::Duration;

use clap::Parser;
use gpumarket::client::Client;
use gpumarket::dev::Parts;
use serde_json::{Value, json};

use crate::harness::*;

/// The fenced blocks of the tour section, as (language, text).
fn tour_blocks() -> Vec<(String, String)> {
    readme_blocks("## A five-minute tour")
}

/// Splits a shell command line into words: `\` line continuations, double
/// quotes (all the README uses).
fn shell_words(command: &str) -> Vec<String> {
    let joined = command.replace("\\\n", " ");
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut started = false;
    for c in joined.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                started = true;
            }
            c if c.is_whitespace() && !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(word);
    }
    words
}

#[derive(Parser)]
struct AgentCommand {
    #[command(flatten)]
    args: host_agent::AgentArgs,
}

fn fill(text: &str, vars: &[(&str, &str)]) -> String {
    let mut out = text.to_owned();
    for (placeholder, value) in vars {
        out = out.replace(placeholder, value);
    }
    assert!(
        !out.contains("<machine id>")
            && !out.contains("<offer id>")
            && !out.contains("<instance id>"),
        "a placeholder the tour has not produced yet:\n{out}"
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_tour_shows_what_it_claims_on_the_demo_market() {
    let env = TestEnv::new().await;
    let quota_db = platform::Db::connect(&env.config.database_url, 1).expect("db");
    quota::create_operator(
        &quota_db,
        gpumarket::seed::OPERATOR_EMAIL,
        gpumarket::seed::DEMO_PASSWORD,
    )
    .await
    .expect("demo operator");
    let mut stack = env.start(Parts::ALL).await;
    let seeded = gpumarket::seed::demo_market(&stack.gateway_url, false)
        .await
        .expect("demo seed");
    for agent in &seeded.agents {
        let task = gpumarket::dev::spawn_agent(&stack.config, agent).expect("demo agent");
        stack.adopt(task);
    }
    let api = Client::new(&stack.gateway_url);
    let host = api.with_token(&seeded.host_api_key);
    let renter = api.with_token(&seeded.renter_api_key);

    let blocks = tour_blocks();
    let graphql: Vec<&str> = blocks
        .iter()
        .filter(|(lang, _)| lang == "graphql")
        .map(|(_, text)| text.as_str())
        .collect();
    assert_eq!(graphql.len(), 9, "the tour's GraphQL steps: {graphql:#?}");

    // 1. The host registers a machine and gets its agent token.
    let registered = host.run(graphql[0], json!({})).await.expect("step 1");
    let machine_id = registered["registerMachine"]["machine"]["id"]
        .as_str()
        .expect("machine id")
        .to_owned();
    let token = registered["registerMachine"]["agentToken"]
        .as_str()
        .expect("agent token")
        .to_owned();

    // The README's agent command, with this test's broker vhost.
    let (_, command) = blocks
        .iter()
        .find(|(lang, text)| lang == "sh" && text.contains(" agent "))
        .expect("the tour says how to start the agent");
    let command = command
        .replace("<machine id>", &machine_id)
        .replace("<agentToken>", &token);
    let words = shell_words(&command);
    let at = words
        .iter()
        .position(|w| w == "agent")
        .expect("an agent command");
    assert!(
        words[..at].iter().any(|w| w.ends_with("gpumarket")),
        "{words:?}"
    );
    let agents_url =
        reqwest::Url::parse(&stack.config.amqp_url_for_agents().expect("agents url")).expect("url");
    let vhost = stack.config.amqp_vhost().expect("vhost");
    let mut argv = vec!["gpumarket-agent".to_owned()];
    argv.extend(words[at + 1..].iter().cloned());
    argv.extend([
        "--amqp-host".to_owned(),
        format!(
            "{}:{}",
            agents_url.host_str().unwrap_or("127.0.0.1"),
            agents_url.port().unwrap_or(5672)
        ),
        "--vhost".to_owned(),
        vhost,
    ]);
    let agent = AgentCommand::try_parse_from(&argv)
        .unwrap_or_else(|e| panic!("the README's agent command does not parse: {e}\n{argv:?}"))
        .args
        .into_config()
        .expect("agent config");
    stack.adopt(tokio::spawn(async move {
        if let Err(error) = host_agent::run(agent).await {
            tracing::warn!(%error, "tour agent stopped");
        }
    }));

    // Priced and listed, then online: the step's claim.
    let vars = [("<machine id>", machine_id.as_str())];
    let listed = host
        .run(&fill(graphql[1], &vars), json!({}))
        .await
        .expect("step 1: price and list");
    assert_eq!(listed["listMachine"]["listed"], true, "{listed}");
    wait_online(&host, &machine_id, Duration::from_secs(30)).await;

    // 2. The renter finds it (and the demo's RTX 4090s), with demo credit.
    let found = renter.run(graphql[2], json!({})).await.expect("step 2");
    let balance: rust_decimal::Decimal = found["balance"]["amount"]
        .as_str()
        .expect("balance")
        .parse()
        .expect("decimal");
    assert_eq!(balance, rust_decimal::Decimal::from(500), "{found}");
    let nodes = found["offers"]["nodes"].as_array().expect("offers");
    assert!(nodes.len() >= 3, "{found}");
    assert!(nodes.iter().all(|o| o["gpuModel"] == "RTX 4090"), "{found}");
    assert_eq!(
        nodes[0]["country"], "DE",
        "the new machine is cheapest: {found}"
    );
    let offer_id = nodes[0]["id"].as_str().expect("offer id").to_owned();

    // "When nothing matches, the answer says why": no offer, and
    // relaxations that would find some.
    let why = renter
        .run(graphql[3], json!({}))
        .await
        .expect("step 2: why");
    assert_eq!(why["offers"]["nodes"], json!([]), "{why}");
    let no_offers = &why["offers"]["noOffers"];
    let relaxations = no_offers["relaxations"].as_array().expect("relaxations");
    assert!(relaxations.len() >= 2, "{why}");
    let text: Vec<&str> = relaxations
        .iter()
        .map(|r| r["description"].as_str().unwrap_or_default())
        .collect();
    assert!(text.iter().any(|d| d.contains("CA")), "{text:?}");
    assert!(text.iter().any(|d| d.contains("L40S")), "{text:?}");
    assert!(
        no_offers["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("Nearest"),
        "{why}"
    );

    // 3. Order it; 4. it runs.
    let vars = [("<offer id>", offer_id.as_str())];
    let ordered = renter
        .run(&fill(graphql[4], &vars), json!({}))
        .await
        .expect("step 3");
    let instance_id = ordered["createOrder"]["id"]
        .as_str()
        .expect("instance id")
        .to_owned();
    let vars = [("<instance id>", instance_id.as_str())];
    let step4 = fill(graphql[5], &vars);
    let running = eventually(
        "the tour's instance running",
        Duration::from_secs(30),
        || {
            let (renter, step4) = (&renter, &step4);
            async move {
                let data = renter.run(step4, json!({})).await.expect("step 4");
                (data["instance"]["state"] == "RUNNING").then_some(data)
            }
        },
    )
    .await;
    assert!(running["instance"]["runningAtUtc"].is_string(), "{running}");
    // Some billable seconds before the stop.
    tokio::time::sleep(Duration::from_millis(2100)).await;

    // 5. Stop it: billing stops at this instant.
    let stopped = renter
        .run(&fill(graphql[6], &vars), json!({}))
        .await
        .expect("step 5");
    assert!(
        stopped["stopInstance"]["stoppedAtUtc"].is_string(),
        "{stopped}"
    );

    // 6. The bill: billed seconds of the interval, the balance below 500.
    let step6 = fill(graphql[7], &vars);
    let bill = eventually("the tour's usage billed", Duration::from_secs(30), || {
        let (renter, step6) = (&renter, &step6);
        async move {
            let data = renter.run(step6, json!({})).await.expect("step 6");
            let billed = data["usage"]
                .as_array()
                .and_then(|u| u.first())
                .and_then(|i| i["billedSeconds"].as_i64())
                .unwrap_or(0);
            let balance: rust_decimal::Decimal = data["balance"]["amount"]
                .as_str()
                .unwrap_or("500")
                .parse()
                .unwrap_or_default();
            (billed >= 2 && balance < rust_decimal::Decimal::from(500)).then_some(data)
        }
    })
    .await;
    assert!(bill["usage"][0]["endedAtUtc"].is_string(), "{bill}");

    // 7. Dashboards: today's spend on the RTX 4090, the balance's history.
    let step7 = graphql[8];
    let series = eventually(
        "the tour's spend in the series",
        Duration::from_secs(30),
        || {
            let renter = &renter;
            async move {
                let data = renter.run(step7, json!({})).await.expect("step 7");
                let has_4090 = data["usageSeries"]["points"]
                    .as_array()
                    .is_some_and(|p| p.iter().any(|p| p["key"] == "RTX 4090"));
                has_4090.then_some(data)
            }
        },
    )
    .await;
    let history = series["balanceHistory"]["nodes"]
        .as_array()
        .expect("history");
    assert!(history.len() >= 2, "credit and usage: {series}");

    let Value::String(_) = &series["usageSeries"]["totalSpend"] else {
        panic!("totalSpend: {series}");
    };
    stack.stop().await;
    env.cleanup().await;
}
