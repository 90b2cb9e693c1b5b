//! The `gpumarket` binary as a user runs it: a host registers, prices and
//! lists a machine with an API key; a renter finds it with the compact query
//! language; a malformed query is refused, with a caret, before any request.

use std::process::Output;

use diesel::RunQueryDsl;
use gpumarket::client::Client;
use gpumarket::dev::Parts;
use rust_decimal::Decimal;
use serde_json::{Value, json};

use crate::harness::*;

async fn api_key(user: &Client, scopes: &[&str]) -> String {
    let data = user
        .run(
            "mutation($input: CreateApiKeyInput!) { createApiKey(input: $input) { secret } }",
            json!({ "input": { "name": "cli", "scopes": scopes,
                               "idempotencyKey": uuid::Uuid::now_v7().to_string() } }),
        )
        .await
        .expect("createApiKey");
    data["createApiKey"]["secret"]
        .as_str()
        .expect("secret")
        .to_owned()
}

/// Runs the binary against `url`, the key (if any) in the environment as a
/// user would keep it, and checks that the key never shows in the output.
async fn gpumarket(url: &str, key: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_gpumarket"));
    cmd.args(args)
        .env("GPUMARKET_API_URL", url)
        .env_remove("GPUMARKET_API_KEY");
    if let Some(key) = key {
        cmd.env("GPUMARKET_API_KEY", key);
    }
    let out = cmd.output().await.expect("run gpumarket");
    if let Some(key) = key {
        for stream in [&out.stdout, &out.stderr] {
            assert!(
                !String::from_utf8_lossy(stream).contains(key),
                "{args:?} printed the API key"
            );
        }
    }
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The command succeeded; its stdout as JSON.
fn json_of(what: &str, out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{what} failed ({:?}):\n{}{}",
        out.status.code(),
        stdout(out),
        stderr(out)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{what}: stdout is not JSON ({e}):\n{}", stdout(out)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_registers_prices_lists_and_finds_a_machine() {
    let env = TestEnv::new().await;
    let stack = env.start(Parts::ALL).await;
    let url = stack.gateway_url.clone();
    let api = Client::new(&url);
    let (host, _) = sign_up(&api, &["HOST"]).await;
    let host_key = api_key(&host, &["READ", "HOST", "BILLING"]).await;
    let (renter, _) = sign_up(&api, &["RENTER"]).await;
    let renter_key = api_key(&renter, &["READ", "RENT", "BILLING"]).await;
    let key = Some(host_key.as_str());

    // Host: register (the token is shown once), price, list.
    let out = gpumarket(
        &url,
        key,
        &[
            "host",
            "register",
            "--name",
            "cli-rig",
            "--gpu-model",
            "RTX 4090",
            "--gpu-count",
            "2",
            "--cpu-cores",
            "16",
            "--ram-gib",
            "64",
            "--disk-gib",
            "1000",
            "--country",
            "US",
            "--cuda-version",
            "12.4",
            "--json",
        ],
    )
    .await;
    let registered = json_of("host register", &out);
    let id = registered["machine"]["id"]
        .as_str()
        .expect("machine id")
        .to_owned();
    assert_eq!(registered["machine"]["gpuModel"], "RTX 4090");
    assert_eq!(registered["machine"]["gpuCount"], 2);
    assert!(
        registered["agentToken"]
            .as_str()
            .is_some_and(|t| t.len() > 20)
    );
    assert!(stderr(&out).contains("shown only once"), "{}", stderr(&out));

    let out = gpumarket(
        &url,
        key,
        &[
            "host",
            "price",
            &id,
            "--price",
            "0.45",
            "--min-bid",
            "0.20",
            "--gpu-counts",
            "1,2",
            "--json",
        ],
    )
    .await;
    let priced = json_of("host price", &out);
    assert_eq!(priced["id"], id.as_str());
    assert_eq!(dec(&priced["pricePerGpuHour"]), Decimal::new(45, 2));

    let listed = json_of(
        "host list",
        &gpumarket(&url, key, &["host", "list", &id, "--json"]).await,
    );
    assert_eq!(listed["listed"], true);
    // Offers are machines heard from lately; no host agent runs here, so the
    // heartbeat is written as the agent's would be.
    diesel::sql_query(format!(
        "UPDATE catalog.machines SET last_heartbeat_at = now() WHERE id = '{id}'"
    ))
    .execute(&mut env.conn())
    .expect("heartbeat");

    // The table is for people: the machine is there by name and id.
    let out = gpumarket(&url, key, &["host", "machines"]).await;
    assert!(out.status.success(), "host machines: {}", stderr(&out));
    assert!(stdout(&out).contains("cli-rig"), "{}", stdout(&out));
    assert!(stdout(&out).contains(&id), "{}", stdout(&out));

    // Renter: the query language finds it (key given as a flag this time).
    let out = gpumarket(
        &url,
        None,
        &[
            "offers",
            "search",
            "gpu_name=RTX_4090 dph<=1",
            "--json",
            "--api-key",
            &renter_key,
        ],
    )
    .await;
    assert!(!stdout(&out).contains(&renter_key) && !stderr(&out).contains(&renter_key));
    let offers = json_of("offers search", &out);
    let found = offers["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|o| o["id"] == id.as_str())
        .unwrap_or_else(|| panic!("machine {id} not among the offers: {offers:#}"));
    assert_eq!(found["gpuModel"], "RTX 4090");
    assert_eq!(dec(&found["pricePerGpuHour"]), Decimal::new(45, 2));
    let table = gpumarket(
        &url,
        Some(&renter_key),
        &["offers", "search", "gpu_name=RTX_4090 dph<=1"],
    )
    .await;
    assert!(table.status.success(), "{}", stderr(&table));
    assert!(stdout(&table).contains(&id), "{}", stdout(&table));

    // Nothing that cheap: the summary and what to relax, not an error.
    let out = gpumarket(
        &url,
        Some(&renter_key),
        &["offers", "search", "gpu_name=RTX_4090 dph<=0.01"],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("No offers match"), "{}", stdout(&out));

    // A malformed query: caret, exit 2, and no request (nothing listens there).
    let out = gpumarket(
        "http://127.0.0.1:9",
        Some(&renter_key),
        &["offers", "search", "gpu_nme=RTX_4090 dph<=1"],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("gpu_nme=RTX_4090 dph<=1\n^^^^^^^ "), "{err}");
    assert!(err.contains("did you mean `gpu_name`?"), "{err}");

    // An API error: `CODE: message` on stderr, exit 1.
    let stranger = uuid::Uuid::now_v7().to_string();
    let out = gpumarket(&url, key, &["host", "list", &stranger]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    let (code, message) = err.split_once(": ").expect("CODE: message");
    assert!(
        !code.is_empty() && code.chars().all(|c| c.is_ascii_uppercase() || c == '_'),
        "{err}"
    );
    assert!(!message.trim().is_empty(), "{err}");

    // Host verbs need a key; that is said before any request.
    let out = gpumarket(&url, None, &["host", "machines"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("GPUMARKET_API_KEY"),
        "{}",
        stderr(&out)
    );

    // Unlisted, it is no longer found.
    let unlisted = json_of(
        "host unlist",
        &gpumarket(&url, key, &["host", "unlist", &id, "--json"]).await,
    );
    assert_eq!(unlisted["listed"], false);
    let offers = json_of(
        "offers search",
        &gpumarket(
            &url,
            Some(&renter_key),
            &["offers", "search", "gpu_name=RTX_4090", "--json"],
        )
        .await,
    );
    assert!(
        !offers["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .any(|o| o["id"] == id.as_str()),
        "{offers:#}"
    );

    env.cleanup().await;
}
