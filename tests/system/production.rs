//! `GPUMARKET_ENV=production` (issue 15 item 9): no process starts with a
//! published development secret it reads; the gateway serves no GraphiQL and
//! no introspection to anonymous callers.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpumarket::client::Client;
use gpumarket::dev::Parts;
use serde_json::json;

use crate::harness::*;

/// Every secret variable, removed so that the development defaults apply.
const SECRETS: [&str; 5] = [
    "GPUMARKET_JWT_KEYS",
    "GPUMARKET_SERVICE_TOKEN",
    "GPUMARKET_STRIPE_WEBHOOK_SECRETS",
    "GPUMARKET_STRIPE_SECRET_KEY",
    "GPUMARKET_RABBITMQ_MANAGEMENT_URL",
];

#[test]
fn a_process_with_development_secrets_exits_non_zero_in_production() {
    let cases: [(&[&str], &str); 6] = [
        (&["serve", "gateway"], "GPUMARKET_JWT_KEYS"),
        (&["serve", "quota"], "GPUMARKET_SERVICE_TOKEN"),
        (&["serve", "catalog"], "GPUMARKET_RABBITMQ_MANAGEMENT_URL"),
        (&["serve", "billing"], "GPUMARKET_STRIPE_WEBHOOK_SECRETS"),
        (&["worker", "provisioner"], "GPUMARKET_SERVICE_TOKEN"),
        (&["dev"], "GPUMARKET_JWT_KEYS"),
    ];
    for (args, variable) in cases {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpumarket"));
        cmd.args(args)
            .env("GPUMARKET_ENV", "production")
            // Any port: should the check be missing, nothing collides.
            .env("GPUMARKET_GATEWAY_PORT", "0")
            .env("GPUMARKET_PROVISIONER_PORT", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for name in SECRETS {
            cmd.env_remove(name);
        }
        let mut child = cmd.spawn().expect("spawn gpumarket");
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{args:?} kept running in production with development secrets");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
            .expect("read stderr");
        assert!(!status.success(), "{args:?} exited 0");
        assert!(
            stderr.contains("GPUMARKET_ENV=production refuses development secrets")
                && stderr.contains(variable),
            "{args:?}: {stderr}"
        );
    }
}

#[tokio::test]
async fn production_gateway_has_no_graphiql_and_no_anonymous_introspection() {
    let env = TestEnv::new().await;
    let mut config = env.config.clone();
    config.production = true;
    let stack = gpumarket::dev::start(config, Parts::SERVICES)
        .await
        .expect("start stack");
    let api = Client::new(&stack.gateway_url);

    let graphiql = reqwest::get(format!("{}/graphql", stack.gateway_url))
        .await
        .expect("GET /graphql");
    assert_eq!(graphiql.status(), 404, "GraphiQL is off");

    let schema_query = "{ __schema { queryType { name } } }";
    let type_query = "{ __type(name: \"Query\") { name } }";
    for query in [schema_query, type_query] {
        let err = api
            .run(query, json!({}))
            .await
            .expect_err("anonymous introspection");
        assert_eq!(err.code, "UNAUTHENTICATED", "{query}: {}", err.message);
        let junk = api
            .with_token("not-a-token")
            .run(query, json!({}))
            .await
            .expect_err("junk token");
        assert_eq!(junk.code, "UNAUTHENTICATED", "{query}: {}", junk.message);
    }
    // `__typename` is not introspection, and public fields stay public.
    let typename = api
        .run("{ __typename }", json!({}))
        .await
        .expect("typename");
    assert_eq!(typename["__typename"], "Query");

    let (user, _) = sign_up(&api, &["RENTER"]).await;
    let data = user.run(schema_query, json!({})).await.expect("logged in");
    assert_eq!(data["__schema"]["queryType"]["name"], "Query");
    drop(stack);
    env.cleanup().await;
}
