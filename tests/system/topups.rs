//! Prepaid renters through Stripe, end to end: a renter asks for a top-up
//! over GraphQL, billing really calls Stripe through async-stripe (here the
//! Stripe test double), and the balance rises only when a correctly signed
//! `payment_intent.succeeded` webhook arrives, exactly once however often it
//! is delivered. Forged and stale webhooks are refused with 400 and change
//! nothing.

use contracts::ids::{InstanceId, TenantId};
use gpumarket::client::Client;
use gpumarket::dev::Parts;
use rust_decimal::Decimal;
use serde_json::{Value, json};

use crate::harness::*;
use stripe_double::{Signing, StripeDouble};

const SECRET_KEY: &str = "sk_test_double_4242";
/// The endpoint secret being rolled in, and the one being rolled out.
const NEW_SECRET: &str = "whsec_new_0123456789";
const OLD_SECRET: &str = "whsec_old_9876543210";

const SERVICES: Parts = Parts::SERVICES;

const CREATE: &str =
    "mutation($a: Decimal!, $k: String) { createTopUp(amount: $a, idempotencyKey: $k) {
    id amount currency status clientSecret paymentIntentId createdAt succeededAt } }";

fn dec(v: &Value) -> Decimal {
    v.as_str()
        .expect("decimal string")
        .parse()
        .expect("decimal")
}

async fn balance(renter: &Client) -> Decimal {
    let data = renter
        .run("{ balance { amount currency } }", json!({}))
        .await
        .expect("balance");
    assert_eq!(data["balance"]["currency"], "USD");
    dec(&data["balance"]["amount"])
}

async fn top_up(
    renter: &Client,
    amount: &str,
    key: Option<&str>,
) -> Result<Value, gpumarket::client::GraphQlError> {
    renter
        .run(CREATE, json!({ "a": amount, "k": key }))
        .await
        .map(|d| d["createTopUp"].clone())
}

fn code(result: Result<Value, gpumarket::client::GraphQlError>) -> (String, String) {
    match result {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(e) => (e.code, e.message),
    }
}

/// Ledger rows of top-ups: (transactions, entries).
fn ledger_rows(env: &TestEnv) -> (i64, i64) {
    (
        env.count("SELECT count(*) AS n FROM billing.transactions WHERE kind = 'top_up'"),
        env.count(
            "SELECT count(*) AS n FROM billing.entries e JOIN billing.transactions t
               ON t.id = e.transaction_id WHERE t.kind = 'top_up'",
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_top_up_through_stripe_raises_the_balance_exactly_once() {
    let stripe = StripeDouble::start(SECRET_KEY)
        .await
        .expect("Stripe double");
    let mut env = TestEnv::new().await;
    env.settings(|s: &mut billing::BillingSettings| {
        s.stripe_api_base = stripe.url.clone();
        s.stripe_secret_key = SECRET_KEY.into();
        s.stripe_webhook_secrets = vec![NEW_SECRET.into(), OLD_SECRET.into()];
    });
    // Billing on its own database role: the new tables must be granted to it.
    env.config.db_role_per_service = true;
    let stack = env.start(SERVICES).await;
    let api = Client::new(&stack.gateway_url);
    // Stripe reaches the public edge; the gateway forwards to billing.
    let webhook = format!("{}/webhooks/stripe", stack.gateway_url);

    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    assert_eq!(balance(&renter).await, Decimal::ZERO);

    // The top-up: a PaymentIntent at Stripe, its client secret for the browser.
    let created = top_up(&renter, "25.50", Some("card-1"))
        .await
        .expect("createTopUp");
    let intent_id = created["paymentIntentId"]
        .as_str()
        .expect("PaymentIntent id")
        .to_owned();
    assert!(intent_id.starts_with("pi_"), "{created}");
    assert_eq!(dec(&created["amount"]), "25.50".parse::<Decimal>().unwrap());
    assert_eq!(created["currency"], "USD");
    assert_eq!(created["status"], "requires_payment_method");
    let secret = created["clientSecret"].as_str().expect("client secret");
    assert!(
        secret.starts_with(&format!("{intent_id}_secret_")),
        "{secret}"
    );
    // What Stripe was asked for: cents, lower-case currency, our ids as metadata.
    let at_stripe = stripe.payment_intent(&intent_id).expect("at Stripe");
    assert_eq!(at_stripe["amount"], 2550);
    assert_eq!(at_stripe["currency"], "usd");
    assert_eq!(at_stripe["metadata"]["tenant_id"], tenant.as_str());
    assert_eq!(at_stripe["metadata"]["top_up_id"], created["id"]);
    let customer = at_stripe["customer"].as_str().expect("customer").to_owned();
    assert_eq!(
        stripe.customer(&customer).expect("customer")["metadata"]["tenant_id"],
        tenant.as_str()
    );

    // The same key: the same top-up and PaymentIntent, nothing new at Stripe.
    let again = top_up(&renter, "25.50", Some("card-1"))
        .await
        .expect("repeat");
    assert_eq!(again["id"], created["id"]);
    assert_eq!(again["paymentIntentId"], created["paymentIntentId"]);
    assert_eq!(again["clientSecret"], created["clientSecret"]);
    let (conflict, _) = code(top_up(&renter, "30", Some("card-1")).await);
    assert_eq!(conflict, "CONFLICT");
    assert_eq!(stripe.created("/v1/payment_intents"), 1);
    assert_eq!(stripe.created("/v1/customers"), 1);

    // Amounts that cannot be charged exactly, or are out of bounds; callers that may not pay.
    for bad in ["0.001", "1", "0", "-5", "100000"] {
        let (c, message) = code(top_up(&renter, bad, None).await);
        assert_eq!(c, "VALIDATION", "{bad}: {message}");
        assert!(message.contains("amount"), "{bad}: {message}");
    }
    let (host, _) = sign_up(&api, &["HOST"]).await;
    assert_eq!(code(top_up(&host, "10", None).await).0, "FORBIDDEN");
    let anonymous = Client::new(&stack.gateway_url);
    assert_eq!(
        code(anonymous.run(CREATE, json!({ "a": "10" })).await).0,
        "UNAUTHENTICATED"
    );
    assert_eq!(stripe.created("/v1/payment_intents"), 1);

    // Created is not paid.
    assert_eq!(balance(&renter).await, Decimal::ZERO);

    // The customer pays; Stripe's event, first forged and stale.
    let event = stripe.succeed(&intent_id).expect("known PaymentIntent");
    let forged = Signing::now(&["whsec_attacker"]);
    let (status, body) = stripe
        .deliver(&webhook, &event, &forged)
        .await
        .expect("deliver");
    assert_eq!(status, 400, "{body}");
    let stale = Signing::now(&[NEW_SECRET]).at(chrono::Utc::now().timestamp() - 600);
    let (status, body) = stripe
        .deliver(&webhook, &event, &stale)
        .await
        .expect("deliver");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("tolerance"), "{body}");
    let future = Signing::now(&[NEW_SECRET]).at(chrono::Utc::now().timestamp() + 600);
    assert_eq!(
        stripe
            .deliver(&webhook, &event, &future)
            .await
            .expect("deliver")
            .0,
        400
    );
    // A genuine signature over other bytes (an amount changed in transit).
    let payload = serde_json::to_vec_pretty(&event).unwrap();
    let header = Signing::now(&[NEW_SECRET]).header(&payload).expect("sign");
    let tampered = String::from_utf8(payload)
        .unwrap()
        .replace("2550", "9999999");
    assert_eq!(
        stripe
            .deliver_raw(&webhook, tampered.into_bytes(), Some(&header))
            .await
            .expect("deliver")
            .0,
        400
    );
    assert_eq!(
        stripe
            .deliver_raw(&webhook, b"{}".to_vec(), None)
            .await
            .expect("deliver")
            .0,
        400
    );
    // Signed, but not an event.
    let junk = b"not json".to_vec();
    let header = Signing::now(&[NEW_SECRET]).header(&junk).expect("sign");
    assert_eq!(
        stripe
            .deliver_raw(&webhook, junk, Some(&header))
            .await
            .expect("deliver")
            .0,
        400
    );
    assert_eq!(balance(&renter).await, Decimal::ZERO);
    assert_eq!(
        env.count("SELECT count(*) AS n FROM billing.stripe_events"),
        0
    );
    assert_eq!(ledger_rows(&env), (0, 0));

    // Genuine, during a secret rotation: signed with the new and the old secret.
    let rolling = Signing::now(&[NEW_SECRET, OLD_SECRET]);
    let (status, body) = stripe
        .deliver(&webhook, &event, &rolling)
        .await
        .expect("deliver");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"credited\""), "{body}");
    // Delivered again (Stripe retries), and replayed with a fresh signature by
    // the old secret only: nothing more.
    let (status, body) = stripe
        .deliver(&webhook, &event, &rolling)
        .await
        .expect("deliver");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("duplicate"), "{body}");
    let (status, body) = stripe
        .deliver(&webhook, &event, &Signing::now(&[OLD_SECRET]))
        .await
        .expect("deliver");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("duplicate"), "{body}");
    // The same PaymentIntent under a new event id credits nothing either.
    let resent = stripe.event(
        "payment_intent.succeeded",
        stripe.payment_intent(&intent_id).unwrap(),
    );
    let (status, body) = stripe
        .deliver(&webhook, &resent, &Signing::now(&[NEW_SECRET]))
        .await
        .expect("deliver");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("already_credited"), "{body}");

    let expected: Decimal = "25.50".parse().unwrap();
    assert_eq!(balance(&renter).await, expected);
    assert_eq!(ledger_rows(&env), (1, 2));
    // Announced once (webhooks' top_up.succeeded), however often Stripe told us.
    assert_eq!(
        env.count("SELECT count(*) AS n FROM billing.outbox WHERE routing_key = 'billing.top_up.succeeded'"),
        1
    );
    // Numbered within the renter's balance events (webhook ordering): the
    // first, as nothing else was announced for this renter.
    assert_eq!(
        env.count(&format!(
            "SELECT (body->'payload'->>'sequence')::bigint AS n FROM billing.outbox \
             WHERE routing_key = 'billing.top_up.succeeded' AND body->'payload'->>'tenant_id' = '{tenant}'"
        )),
        1
    );
    env.assert_sequenced("billing", &BALANCE_EVENTS, BALANCE_RESOURCE);
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM billing.entries e JOIN billing.accounts a ON a.id = e.account_id
              WHERE e.transaction_id = 'top_up:{intent_id}' AND a.kind = 'renter_balance'
                AND a.tenant_id = '{tenant}' AND e.amount = 25.50"
        )),
        1
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM billing.entries e JOIN billing.accounts a ON a.id = e.account_id
              WHERE e.transaction_id = 'top_up:{intent_id}' AND a.kind = 'payment_clearing' AND e.amount = -25.50"
        )),
        1
    );

    // An event billing does not act on: acknowledged, recorded, nothing credited.
    let other = stripe.event("customer.created", stripe.customer(&customer).unwrap());
    let (status, body) = stripe
        .deliver(&webhook, &other, &Signing::now(&[NEW_SECRET]))
        .await
        .expect("deliver");
    assert!((200..300).contains(&status), "{status} {body}");
    assert!(body.contains("ignored"), "{body}");
    assert_eq!(balance(&renter).await, expected);
    assert_eq!(
        env.count("SELECT count(*) AS n FROM billing.stripe_events"),
        3
    );

    // The renter's list: succeeded, no client secret outside the create.
    let listed = renter
        .run(
            "{ topUps { id status clientSecret paymentIntentId succeededAt } }",
            json!({}),
        )
        .await
        .expect("topUps");
    let list = listed["topUps"].as_array().expect("list");
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], created["id"]);
    assert_eq!(list[0]["status"], "succeeded");
    assert!(list[0]["clientSecret"].is_null());
    assert!(list[0]["succeededAt"].is_string());
    // Another tenant sees none of it.
    let (stranger, _) = sign_up(&api, &["RENTER"]).await;
    let theirs = stranger
        .run("{ topUps { id } }", json!({}))
        .await
        .expect("topUps");
    assert_eq!(theirs["topUps"], json!([]));

    // A second top-up (no key): a new PaymentIntent for the same Stripe customer.
    let second = top_up(&renter, "10", None).await.expect("second top-up");
    assert_ne!(second["paymentIntentId"], created["paymentIntentId"]);
    assert_eq!(stripe.created("/v1/customers"), 1);
    let second_at_stripe = stripe
        .payment_intent(second["paymentIntentId"].as_str().unwrap())
        .unwrap();
    assert_eq!(second_at_stripe["customer"], customer.as_str());

    // Delivered straight to billing (an ingress routing the path there) works the same.
    let direct = format!("{}/webhooks/stripe", stack.config.url("billing"));
    let paid = stripe
        .succeed(second["paymentIntentId"].as_str().unwrap())
        .expect("known PaymentIntent");
    let (status, body) = stripe
        .deliver(&direct, &paid, &Signing::now(&[OLD_SECRET]))
        .await
        .expect("deliver");
    assert_eq!(status, 200, "{body}");
    assert_eq!(balance(&renter).await, "35.50".parse::<Decimal>().unwrap());

    stack.stop().await;
    stripe.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_stripe_is_unavailable_and_the_retry_succeeds() {
    let stripe = StripeDouble::start(SECRET_KEY)
        .await
        .expect("Stripe double");
    let mut env = TestEnv::new().await;
    // Nothing listens on port 1.
    env.settings(|s: &mut billing::BillingSettings| {
        s.stripe_api_base = "http://127.0.0.1:1/".into();
        s.stripe_secret_key = SECRET_KEY.into();
        s.stripe_webhook_secrets = vec![NEW_SECRET.into()];
    });
    let stack = env.start(SERVICES).await;
    let api = Client::new(&stack.gateway_url);
    let (renter, _, token) = sign_up_with_token(&api, &["RENTER"]).await;

    let (c, message) = code(top_up(&renter, "20", Some("retry-me")).await);
    assert_eq!(c, "UNAVAILABLE", "{message}");
    assert!(message.contains("Stripe"), "{message}");
    assert_eq!(balance(&renter).await, Decimal::ZERO);
    // The top-up that could not be created says so (and why); it is not
    // left `creating` as if Stripe were still being asked.
    let listed = renter
        .run(
            "{ topUps { status failureReason paymentIntentId } }",
            json!({}),
        )
        .await
        .expect("topUps");
    let failed = &listed["topUps"][0];
    assert_eq!(failed["status"], "failed", "{listed}");
    assert!(failed["paymentIntentId"].is_null(), "{listed}");
    let reason = failed["failureReason"].as_str().expect("failureReason");
    assert!(reason.contains("Stripe"), "{reason}");
    assert_eq!(
        env.count("SELECT count(*) AS n FROM billing.top_ups WHERE status = 'creating'"),
        0
    );
    stack.stop().await;

    // Stripe answers again (billing restarted pointing at it): the same key
    // completes the same top-up.
    env.settings(|s: &mut billing::BillingSettings| s.stripe_api_base = stripe.url.clone());
    let stack = env.start(SERVICES).await;
    let api = Client::new(&stack.gateway_url);
    let renter = api.with_token(&token);
    let done = top_up(&renter, "20", Some("retry-me"))
        .await
        .expect("retry");
    assert!(done["clientSecret"].is_string(), "{done}");
    assert_eq!(done["status"], "requires_payment_method", "{done}");
    let listed = renter
        .run("{ topUps { status failureReason } }", json!({}))
        .await
        .expect("topUps");
    assert!(listed["topUps"][0]["failureReason"].is_null(), "{listed}");
    assert_eq!(env.count("SELECT count(*) AS n FROM billing.top_ups"), 1);
    assert_eq!(stripe.created("/v1/payment_intents"), 1);

    // The webhook may beat the create call's answer: billing then finds the
    // top-up by the metadata it put on the PaymentIntent. (Forget the stored
    // PaymentIntent id, as if the answer had been lost.)
    let intent_id = done["paymentIntentId"].as_str().unwrap().to_owned();
    env.exec("UPDATE billing.top_ups SET payment_intent_id = NULL, status = 'creating'");
    let webhook = format!("{}/webhooks/stripe", stack.gateway_url);
    let paid = stripe.succeed(&intent_id).expect("known PaymentIntent");
    let (status, body) = stripe
        .deliver(&webhook, &paid, &Signing::now(&[NEW_SECRET]))
        .await
        .expect("deliver");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"credited\""), "{body}");
    assert_eq!(balance(&renter).await, Decimal::from(20));
    // The repeated create now meets the PaymentIntent the webhook recorded.
    let again = top_up(&renter, "20", Some("retry-me"))
        .await
        .expect("repeat");
    assert_eq!(again["paymentIntentId"], intent_id.as_str());
    assert_eq!(again["status"], "succeeded");
    assert_eq!(stripe.created("/v1/payment_intents"), 1);

    stack.stop().await;
    stripe.stop().await;
    env.cleanup().await;
}

/// A deployment without a Stripe secret key cannot take card payments:
/// `createTopUp` says so with `NOT_CONFIGURED` (no retry helps), writes
/// nothing, and the payout account calls answer the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_not_configured_is_not_configured_and_leaves_no_top_up() {
    let mut env = TestEnv::new().await;
    // The default: no key (checked here, and set to be independent of it).
    assert!(
        env.config
            .settings::<billing::BillingSettings>()
            .unwrap()
            .stripe_secret_key
            .is_empty()
    );
    env.settings(|s: &mut billing::BillingSettings| s.stripe_secret_key = Default::default());
    let stack = env.start(SERVICES).await;
    let api = Client::new(&stack.gateway_url);
    let (renter, _) = sign_up(&api, &["RENTER"]).await;

    for key in [Some("no-stripe"), None] {
        let (c, message) = code(top_up(&renter, "20", key).await);
        assert_eq!(c, "NOT_CONFIGURED", "{message}");
        assert!(message.contains("not configured"), "{message}");
        assert!(!message.contains("try again"), "{message}");
    }
    assert_eq!(env.count("SELECT count(*) AS n FROM billing.top_ups"), 0);
    let listed = renter
        .run("{ topUps { id } }", json!({}))
        .await
        .expect("topUps");
    assert_eq!(listed["topUps"], json!([]));
    assert_eq!(balance(&renter).await, Decimal::ZERO);

    let (host, _) = sign_up(&api, &["HOST"]).await;
    let (c, message) = code(
        host.run(
            "mutation { createPayoutAccount(country: \"US\") { stripeAccountId } }",
            json!({}),
        )
        .await
        .map(|d| d["createPayoutAccount"].clone()),
    );
    assert_eq!(c, "NOT_CONFIGURED", "{message}");

    stack.stop().await;
    env.cleanup().await;
}

/// An invoice left open by an overdraft is paid by the Stripe top-up that
/// covers it, in the webhook's crediting transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_top_up_that_covers_an_overdraft_pays_the_open_invoice() {
    use contracts::Envelope;
    use contracts::events::UsageRecorded;
    use diesel::Connection;

    let stripe = StripeDouble::start(SECRET_KEY)
        .await
        .expect("Stripe double");
    let mut env = TestEnv::new().await;
    env.settings(|s: &mut billing::BillingSettings| {
        s.stripe_api_base = stripe.url.clone();
        s.stripe_secret_key = SECRET_KEY.into();
        s.stripe_webhook_secrets = vec![NEW_SECRET.into()];
    });
    let stack = env.start(SERVICES).await;
    let api = Client::new(&stack.gateway_url);
    let webhook = format!("{}/webhooks/stripe", stack.gateway_url);
    let (renter, tenant) = sign_up(&api, &["RENTER"]).await;
    let operator = env.operator(&api).await;

    // Two hours at 1.50 with no credit: 3.00 overdrawn.
    let settings = billing::Settings::from_config(&env.config).expect("settings");
    let tenant_id: uuid::Uuid = tenant.parse().expect("tenant");
    let start = chrono::Utc::now() - chrono::Duration::hours(3);
    let usage = UsageRecorded {
        interval_id: uuid::Uuid::now_v7(),
        instance_id: InstanceId(uuid::Uuid::now_v7()),
        tenant_id: TenantId(tenant_id),
        host_tenant_id: TenantId(uuid::Uuid::now_v7()),
        meter: contracts::states::Meter::Gpu,
        started_at: start,
        ended_at: start + chrono::Duration::hours(2),
        seconds: 7200,
        price_per_hour: "1.50".parse().expect("price"),
        currency: "USD".into(),
        offset_seconds: 0,
        machine_id: None,
        gpu_model: None,
    };
    let envelope = Envelope::new(
        contracts::events::kinds::USAGE_RECORDED,
        usage.ended_at,
        Some(TenantId(tenant_id)),
        None,
        &contracts::events::MeteredUsage::from(usage.clone()),
    )
    .expect("envelope");
    env.conn()
        .transaction::<_, diesel::result::Error, _>(|c| {
            billing::apply_event(c, &envelope, &settings)
                .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))
        })
        .expect("usage");
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let run = operator
        .run(
            "mutation($e: String, $t: ID) { runInvoices(periodEnd: $e, tenantId: $t) { invoices { id status total } } }",
            json!({ "e": chrono::Utc::now().to_rfc3339(), "t": tenant }),
        )
        .await
        .expect("runInvoices");
    let invoice = run["runInvoices"]["invoices"][0].clone();
    assert_eq!(invoice["status"], "finalized", "{run}");
    assert_eq!(dec(&invoice["total"]), "3.00".parse::<Decimal>().unwrap());
    let status = || async {
        renter
            .run(
                "query($id: ID!) { invoice(id: $id) { status } }",
                json!({ "id": invoice["id"] }),
            )
            .await
            .expect("invoice")["invoice"]["status"]
            .clone()
    };

    let created = top_up(&renter, "10", Some("cover"))
        .await
        .expect("createTopUp");
    assert_eq!(status().await, "finalized", "asking is not paying");
    let intent_id = created["paymentIntentId"].as_str().expect("id").to_owned();
    let (code, body) = stripe
        .deliver(
            &webhook,
            &stripe.succeed(&intent_id).expect("known PaymentIntent"),
            &Signing::now(&[NEW_SECRET]),
        )
        .await
        .expect("deliver");
    assert_eq!(code, 200, "{body}");
    assert_eq!(balance(&renter).await, Decimal::from(7));
    assert_eq!(status().await, "paid");

    stack.stop().await;
    stripe.stop().await;
    env.cleanup().await;
}

/// The public terms the front ends load first: billing's currency and fee
/// rate (asked from billing, not re-read by the gateway) and the Stripe
/// publishable key, for anyone, logged in or not; no key configured is null.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_platform_terms_are_public_and_come_from_billing() {
    const PLATFORM: &str = "{ platform { currency platformFeeRate stripePublishableKey } }";
    let mut env = TestEnv::new().await;
    env.settings(|s: &mut billing::BillingSettings| s.fee_rate = "0.2".into());
    env.settings(|s: &mut gateway::GatewaySettings| {
        s.stripe_publishable_key = Some("pk_test_double_4242".into())
    });
    let stack = env.start(SERVICES).await;
    let api = Client::new(&stack.gateway_url);

    let anonymous = api.run(PLATFORM, json!({})).await.expect("platform");
    assert_eq!(
        anonymous["platform"],
        json!({
            "currency": "USD",
            "platformFeeRate": "0.2",
            "stripePublishableKey": "pk_test_double_4242",
        })
    );
    let (renter, _) = sign_up(&api, &["RENTER"]).await;
    assert_eq!(
        renter.run(PLATFORM, json!({})).await.expect("platform"),
        anonymous
    );
    stack.stop().await;

    // Without a publishable key top-ups cannot be paid in a browser: null.
    env.settings(|s: &mut gateway::GatewaySettings| s.stripe_publishable_key = None);
    let stack = env.start(SERVICES).await;
    let api = Client::new(&stack.gateway_url);
    let data = api.run(PLATFORM, json!({})).await.expect("platform");
    assert!(data["platform"]["stripePublishableKey"].is_null(), "{data}");
    assert_eq!(data["platform"]["platformFeeRate"], "0.2");
    stack.stop().await;
    env.cleanup().await;
}
