//! The confirm route, as Stripe.js calls it: only the publishable key with
//! the intent's own client secret (or the secret key) pays, once, and the
//! payment is reported to the webhook endpoint signed as Stripe signs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::Value;
use stripe_double::{Options, Signing, StripeDouble, Webhook};

const SECRET_KEY: &str = "sk_test_confirm";
const PUBLISHABLE_KEY: &str = "pk_test_confirm";
const WEBHOOK_SECRET: &str = "whsec_confirm";

type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A webhook endpoint that keeps what it is sent.
async fn endpoint() -> (String, Received) {
    let received: Received = Arc::default();
    let data = web::Data::new(received.clone());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new().app_data(data.clone()).route(
            "/webhooks/stripe",
            web::post().to(
                |req: HttpRequest, body: web::Bytes, seen: web::Data<Received>| async move {
                    let signature = req
                        .headers()
                        .get("stripe-signature")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    seen.lock().unwrap().push((signature, body.to_vec()));
                    HttpResponse::Ok().json(serde_json::json!({ "received": true }))
                },
            ),
        )
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    tokio::spawn(server);
    (format!("http://127.0.0.1:{port}/webhooks/stripe"), received)
}

#[tokio::test]
async fn a_payment_confirmed_with_the_client_secret_is_reported_signed() {
    let (url, received) = endpoint().await;
    let stripe = StripeDouble::start_with(Options {
        publishable_key: Some(PUBLISHABLE_KEY.into()),
        webhook: Some(Webhook {
            url,
            secrets: vec![WEBHOOK_SECRET.into()],
        }),
        ..Options::new(SECRET_KEY)
    })
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let created: Value = http
        .post(format!("{}v1/payment_intents", stripe.url))
        .bearer_auth(SECRET_KEY)
        .form(&[("amount", "2500"), ("currency", "usd")])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    let secret = created["client_secret"].as_str().unwrap().to_owned();
    let confirm = format!("{}v1/payment_intents/{id}/confirm", stripe.url);
    let post = |form: Vec<(&'static str, String)>| {
        let http = http.clone();
        let confirm = confirm.clone();
        async move {
            let resp = http.post(&confirm).form(&form).send().await.unwrap();
            let status = resp.status().as_u16();
            let cors = resp
                .headers()
                .get("access-control-allow-origin")
                .map(|v| v.to_str().unwrap().to_owned());
            (status, cors, resp.json::<Value>().await.unwrap())
        }
    };

    // Not the publishable key, or not this intent's secret: nothing paid.
    let (status, _, _) = post(vec![
        ("key", "pk_test_other".into()),
        ("client_secret", secret.clone()),
    ])
    .await;
    assert_eq!(status, 401);
    let (status, _, body) = post(vec![
        ("key", PUBLISHABLE_KEY.into()),
        ("client_secret", format!("{id}_secret_wrong")),
    ])
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        stripe.payment_intent(&id).unwrap()["status"],
        "requires_payment_method"
    );

    // As Stripe.js calls it: paid, answered to any origin.
    let (status, cors, paid) = post(vec![
        ("key", PUBLISHABLE_KEY.into()),
        ("client_secret", secret.clone()),
    ])
    .await;
    assert_eq!(status, 200, "{paid}");
    assert_eq!(cors.as_deref(), Some("*"));
    assert_eq!(paid["status"], "succeeded");
    assert_eq!(paid["amount_received"], 2500);

    // Once only.
    let (status, _, again) = post(vec![
        ("key", PUBLISHABLE_KEY.into()),
        ("client_secret", secret.clone()),
    ])
    .await;
    assert_eq!(status, 400, "{again}");
    assert_eq!(again["error"]["code"], "payment_intent_unexpected_state");

    // The event reaches the endpoint, signed with its secret.
    let mut waited = 0;
    while received.lock().unwrap().is_empty() && waited < 100 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        waited += 1;
    }
    let deliveries = received.lock().unwrap().clone();
    assert_eq!(deliveries.len(), 1);
    let (signature, body) = &deliveries[0];
    let event: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(event["type"], "payment_intent.succeeded");
    assert_eq!(event["data"]["object"]["id"], id.as_str());
    let timestamp: i64 = signature
        .strip_prefix("t=")
        .and_then(|s| s.split(',').next())
        .unwrap()
        .parse()
        .unwrap();
    let expected = Signing {
        secrets: vec![WEBHOOK_SECRET.into()],
        timestamp,
    }
    .header(body)
    .unwrap();
    assert_eq!(signature, &expected);

    stripe.stop().await;
}
