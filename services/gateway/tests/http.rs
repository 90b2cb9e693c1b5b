//! The gateway over real HTTP, with an in-process stand-in for quota.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use contracts::ids::TenantId;
use std::sync::Arc;

use actix_web::{App, HttpResponse, HttpServer, web};
use contracts::api::{AuthenticateKeyRequest, Principal, Scope, TenantRole};
use contracts::{ErrorBody, ErrorCode};
use serde_json::{Value, json};
use uuid::Uuid;

fn key_principal() -> Principal {
    Principal {
        user_id: Uuid::from_u128(1),
        tenant_id: TenantId(Uuid::from_u128(2)),
        email: "key@example.com".into(),
        tenant_roles: vec![TenantRole::Renter],
        operator: false,
        scopes: vec![Scope::Read],
        api_key_id: None,
    }
}

async fn authenticate(body: web::Json<AuthenticateKeyRequest>) -> HttpResponse {
    if body.secret == "gpm_good" {
        HttpResponse::Ok().json(key_principal())
    } else {
        HttpResponse::Unauthorized().json(ErrorBody {
            code: ErrorCode::Unauthenticated,
            message: "unknown key".into(),
            details: None,
        })
    }
}

/// Starts a fake quota answering `/healthz` and key checks; returns its URL.
fn fake_quota() -> String {
    let server = HttpServer::new(|| {
        App::new()
            .route(
                "/healthz",
                web::get().to(|| async { HttpResponse::Ok().json(json!({"status": "ok"})) }),
            )
            .route(
                "/internal/api-keys/authenticate",
                web::post().to(authenticate),
            )
    })
    .workers(1)
    .bind(("127.0.0.1", 0))
    .unwrap();
    let port = server.addrs()[0].port();
    tokio::spawn(server.run());
    format!("http://127.0.0.1:{port}")
}

fn gateway(quota_url: &str) -> String {
    let mut config = platform::Config::from_env().unwrap();
    config.bind_host = "127.0.0.1".into();
    config.ports.set("gateway", 0);
    config.urls.set("quota", quota_url);
    // No live events here: the event fan-out would otherwise declare the
    // whole topology on the shared broker's default vhost and leave it
    // there. Nothing listens on port 1; the fan-out just keeps retrying.
    config.amqp_url = "amqp://guest:guest@127.0.0.1:1/%2f".into();
    for service in ["catalog", "ordering", "metering", "billing", "webhooks"] {
        config.urls.set(service, "http://127.0.0.1:1");
    }
    let (server, port) = gpumarket_gateway::build(Arc::new(config)).unwrap();
    tokio::spawn(server);
    format!("http://127.0.0.1:{port}")
}

async fn graphql(base: &str, auth: Option<&str>, query: &str) -> Value {
    let (status, body) = graphql_status(base, auth, query).await;
    assert_eq!(status, 200);
    body
}

/// The HTTP status too: an invalid credential is refused with 401.
async fn graphql_status(base: &str, auth: Option<&str>, query: &str) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{base}/graphql"))
        .json(&json!({ "query": query }));
    if let Some(auth) = auth {
        req = req.header("authorization", auth);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_graphiql() {
    let base = gateway(&fake_quota());
    let http = reqwest::Client::new();

    let health = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert!(health.headers().contains_key("x-correlation-id"));
    assert_eq!(health.json::<Value>().await.unwrap()["status"], "ok");

    let ready = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);

    let page = http.get(format!("{base}/graphql")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("graphiql"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_without_quota() {
    let base = gateway("http://127.0.0.1:1");
    let ready = reqwest::get(format!("{base}/readyz")).await.unwrap();
    assert_eq!(ready.status(), 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_are_checked_by_quota() {
    let base = gateway(&fake_quota());
    let me = graphql(&base, Some("Bearer gpm_good"), "{ me { email scopes } }").await;
    assert_eq!(me["data"]["me"]["email"], "key@example.com");
    assert_eq!(me["data"]["me"]["scopes"], json!(["READ"]));

    let (status, bad) = graphql_status(&base, Some("Bearer gpm_bad"), "{ me { email } }").await;
    assert_eq!(status, 401);
    assert_eq!(bad["errors"][0]["extensions"]["code"], "UNAUTHENTICATED");
    assert!(bad.get("data").is_none(), "{bad}");

    let forbidden = graphql(
        &base,
        Some("Bearer gpm_good"),
        r#"mutation { stopInstance(id: "00000000-0000-0000-0000-000000000001") { id } }"#,
    )
    .await;
    assert_eq!(forbidden["errors"][0]["extensions"]["code"], "FORBIDDEN");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_and_bodies() {
    let base = gateway("http://127.0.0.1:1");
    for auth in [None, Some("Bearer nonsense"), Some("Basic abc")] {
        let (status, resp) = graphql_status(&base, auth, "{ me { email } }").await;
        // No credential runs (and `me` needs one); a bad one runs nothing.
        assert_eq!(status, if auth.is_none() { 200 } else { 401 });
        assert_eq!(
            resp["errors"][0]["extensions"]["code"], "UNAUTHENTICATED",
            "{auth:?}"
        );
    }
    let resp = reqwest::Client::new()
        .post(format!("{base}/graphql"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["errors"][0]["extensions"]["code"], "VALIDATION");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_faults_are_told_in_plain_words() {
    let base = gateway(&fake_quota());
    let http = reqwest::Client::new();
    let post = |body: Value| http.post(format!("{base}/graphql")).json(&body).send();
    let batch =
        post(json!([{ "query": "{ gpuModels { name } }" }, { "query": "{ gpuModels { name } }" }]))
            .await
            .unwrap();
    assert_eq!(batch.status(), 400);
    let body: Value = batch.json().await.unwrap();
    assert_eq!(
        body["errors"][0]["message"], "batching is not supported: send one operation per request",
        "{body}"
    );
    assert_eq!(body["errors"][0]["extensions"]["code"], "VALIDATION");

    let cases = [
        ("{ me { ", "syntax error at line 1"),
        (
            "{ me { ...a } } fragment a on Me { email ...b } fragment b on Me { ...a }",
            "fragment cycle: fragment \"a\"",
        ),
        (
            &format!(
                "{{ __type(name: \"Query\") {{ fields {{ type {}{{ name }}{} }} }} }}",
                "{ ofType ".repeat(12),
                " }".repeat(12)
            ),
            "query is nested too deep: ",
        ),
    ];
    for (query, expected) in cases {
        let body: Value = post(json!({ "query": query }))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let message = body["errors"][0]["message"].as_str().unwrap();
        assert!(message.starts_with(expected), "{query}: {message}");
        assert!(
            !message.contains('|') && !message.contains('\n'),
            "{message}"
        );
        assert_eq!(body["errors"][0]["extensions"]["code"], "VALIDATION");
    }
}

/// Every kind of refusal a client can meet before a service is called, as
/// the client receives it (status and body), in one snapshot
/// (`tests/snapshots/`; `cargo insta review` or `INSTA_UPDATE=always` after
/// an intended change). The correlation id varies and is redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_payloads_are_as_snapshotted() {
    let base = gateway(&fake_quota());
    let http = reqwest::Client::new();
    let bomb = {
        let mut q = String::from("{ me { ...f20 } }\nfragment f0 on Me { email }\n");
        for i in 1..=20 {
            q.push_str(&format!(
                "fragment f{i} on Me {{ ...f{p} ...f{p} }}\n",
                p = i - 1
            ));
        }
        q
    };
    let cases: Vec<(&str, Option<&str>, Value)> = vec![
        (
            "unauthenticated",
            None,
            json!({ "query": "{ me { email } }" }),
        ),
        (
            "bad token",
            Some("Bearer nope"),
            json!({ "query": "{ me { email } }" }),
        ),
        ("syntax error", None, json!({ "query": "{ me { " })),
        ("unknown field", None, json!({ "query": "{ nope }" })),
        (
            "NUL in a variable",
            None,
            json!({
                "query": "query($q: String) { offers(query: $q) { nodes { id } } }",
                "variables": { "q": "a\u{0}b" }
            }),
        ),
        (
            "inexact number",
            None,
            json!({
                "query": "{ offers(filter: { maxPricePerGpuHour: 0.0000000001 }) { nodes { id } } }"
            }),
        ),
        ("fragment bomb", None, json!({ "query": bomb })),
        (
            "too many expensive fields",
            None,
            json!({
                "query": "{ a: offers { nodes { id } } b: offers { nodes { id } } c: offers { nodes { id } } d: offers { nodes { id } } e: offers { nodes { id } } f: offers { nodes { id } } g: offers { nodes { id } } h: offers { nodes { id } } i: offers { nodes { id } } j: offers { nodes { id } } k: offers { nodes { id } } l: offers { nodes { id } } m: offers { nodes { id } } n: offers { nodes { id } } o: offers { nodes { id } } p: offers { nodes { id } } q: offers { nodes { id } } r: offers { nodes { id } } s: offers { nodes { id } } t: offers { nodes { id } } u: offers { nodes { id } } }"
            }),
        ),
        (
            "batch",
            None,
            json!([{ "query": "{ gpuModels { name } }" }, { "query": "{ gpuModels { name } }" }]),
        ),
    ];
    let mut answers = Vec::new();
    for (case, auth, body) in cases {
        let mut req = http.post(format!("{base}/graphql")).json(&body);
        if let Some(auth) = auth {
            req = req.header("authorization", auth);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap();
        answers.push(json!({ "case": case, "status": status, "body": body }));
    }
    insta::assert_json_snapshot!("error_payloads", answers, {
        "[].body.errors[].extensions.correlationId" => "[correlation id]",
    });
}
