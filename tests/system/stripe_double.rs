//! A Stripe test double: a small stateful HTTP server that answers the
//! Stripe API calls billing makes through async-stripe (create and retrieve
//! customers, PaymentIntents and Connect accounts; create transfers) and
//! sends webhooks signed exactly as Stripe signs them. It is not Stripe: it
//! knows eight routes, no payment methods, no charges and no platform
//! balance; it exists because no machine here reaches Stripe and the
//! `localstripe` fake answers with objects async-stripe 1.0 cannot parse.
//!
//! Its answers are Stripe's own published example objects
//! (`tests/data/stripe/*.json`, from Stripe's OpenAPI fixtures, MIT) with
//! id, amount, currency, status, metadata, client secret and timestamps
//! overwritten from the request and the double's state, so async-stripe
//! parses real Stripe shapes. `Idempotency-Key` is honoured as Stripe does:
//! the same key and parameters return the first answer; the same key with
//! other parameters is an `idempotency_error`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use actix_web::{HttpRequest, HttpResponse, web};
use hmac::{Hmac, Mac};
use rand::Rng;
use serde_json::{Value, json};
use sha2::Sha256;

const CUSTOMER: &str = include_str!("../data/stripe/customer.json");
const PAYMENT_INTENT: &str = include_str!("../data/stripe/payment_intent.json");
const EVENT: &str = include_str!("../data/stripe/event.json");
const ACCOUNT: &str = include_str!("../data/stripe/account.json");
const TRANSFER: &str = include_str!("../data/stripe/transfer.json");

/// How the double answers the next transfers (a test's switch).
#[derive(Default, Clone)]
pub enum TransferMode {
    /// As Stripe does when all is well.
    #[default]
    Normal,
    /// Refused as Stripe refuses a transfer the platform balance cannot
    /// cover (402, `balance_insufficient`); nothing is created.
    Refuse,
    /// The transfer is made and remembered under its idempotency key, but
    /// the answer is lost (a 500, as if the connection died): a crash between
    /// Stripe's side and billing's. Applies once, then back to normal.
    LoseAnswerOnce,
}

/// One create call remembered under its idempotency key.
struct Idempotent {
    path: String,
    params: Vec<(String, String)>,
    answer: Value,
}

#[derive(Default)]
struct State {
    customers: HashMap<String, Value>,
    intents: HashMap<String, Value>,
    accounts: HashMap<String, Value>,
    transfers: HashMap<String, Value>,
    transfer_mode: TransferMode,
    idempotent: HashMap<String, Idempotent>,
    /// Objects actually created (not idempotent repeats), per path.
    created: HashMap<String, usize>,
}

struct Shared {
    secret_key: String,
    state: Mutex<State>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panicking handler must not hide the state from the test.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How a delivery is signed: `Stripe-Signature: t={timestamp},v1=...` with
/// one v1 per secret (two while Stripe rolls an endpoint secret).
pub struct Signing {
    pub secrets: Vec<String>,
    pub timestamp: i64,
}

impl Signing {
    pub fn now(secrets: &[&str]) -> Signing {
        Signing {
            secrets: secrets.iter().map(|s| (*s).to_owned()).collect(),
            timestamp: chrono::Utc::now().timestamp(),
        }
    }

    pub fn at(mut self, timestamp: i64) -> Signing {
        self.timestamp = timestamp;
        self
    }

    /// The header Stripe would send for `payload`.
    pub fn header(&self, payload: &[u8]) -> String {
        let mut header = format!("t={}", self.timestamp);
        for secret in &self.secrets {
            let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("hmac key");
            mac.update(format!("{}.", self.timestamp).as_bytes());
            mac.update(payload);
            header.push_str(&format!(",v1={}", hex::encode(mac.finalize().into_bytes())));
        }
        header
    }
}

pub struct StripeDouble {
    /// Base URL to give async-stripe (`GPUMARKET_STRIPE_API_BASE`).
    pub url: String,
    shared: Arc<Shared>,
    server: actix_web::dev::ServerHandle,
    http: reqwest::Client,
}

impl StripeDouble {
    /// Starts the double on a random port; requests must carry `secret_key`.
    pub async fn start(secret_key: &str) -> StripeDouble {
        let shared = Arc::new(Shared {
            secret_key: secret_key.to_owned(),
            state: Mutex::new(State::default()),
        });
        let data = web::Data::from(shared.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = actix_web::HttpServer::new(move || {
            actix_web::App::new()
                .app_data(data.clone())
                .route("/v1/customers", web::post().to(create_customer))
                .route("/v1/customers/{id}", web::get().to(retrieve_customer))
                .route("/v1/payment_intents", web::post().to(create_intent))
                .route("/v1/payment_intents/{id}", web::get().to(retrieve_intent))
                .route("/v1/accounts", web::post().to(create_account))
                .route("/v1/accounts/{id}", web::get().to(retrieve_account))
                .route("/v1/transfers", web::post().to(create_transfer))
                .route("/v1/transfers", web::get().to(list_transfers))
                .default_service(web::to(|req: HttpRequest| async move {
                    stripe_error(
                        404,
                        "invalid_request_error",
                        &format!("Unrecognized request URL ({} {})", req.method(), req.path()),
                    )
                }))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .expect("listen")
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        StripeDouble {
            url: format!("http://127.0.0.1:{port}/"),
            shared,
            server: handle,
            http: reqwest::Client::new(),
        }
    }

    /// How many objects were really created at `path` (e.g. `/v1/customers`);
    /// idempotent repeats do not count.
    pub fn created(&self, path: &str) -> usize {
        self.shared.state().created.get(path).copied().unwrap_or(0)
    }

    pub fn payment_intent(&self, id: &str) -> Option<Value> {
        self.shared.state().intents.get(id).cloned()
    }

    /// The customer fixture as stored for `id`.
    pub fn customer(&self, id: &str) -> Option<Value> {
        self.shared.state().customers.get(id).cloned()
    }

    /// The connected account as stored for `id`.
    pub fn account(&self, id: &str) -> Option<Value> {
        self.shared.state().accounts.get(id).cloned()
    }

    /// Every transfer made, oldest first.
    pub fn transfers(&self) -> Vec<Value> {
        let mut all: Vec<Value> = self.shared.state().transfers.values().cloned().collect();
        all.sort_by_key(|t| (t["created"].as_i64(), t["id"].as_str().map(str::to_owned)));
        all
    }

    /// Test control: how the next transfers are answered.
    pub fn set_transfer_mode(&self, mode: TransferMode) {
        self.shared.state().transfer_mode = mode;
    }

    /// Test control: forget every idempotency key, as Stripe does 24 hours
    /// after a key's first use; objects stay.
    pub fn forget_idempotency_keys(&self) {
        self.shared.state().idempotent.clear();
    }

    /// Test control: the account's `transfers` capability (e.g. `pending`
    /// until the host finishes onboarding).
    pub fn set_transfers_capability(&self, account_id: &str, status: &str) {
        if let Some(account) = self.shared.state().accounts.get_mut(account_id) {
            account["capabilities"]["transfers"] = json!(status);
        }
    }

    /// Test control: the customer pays. Marks the PaymentIntent succeeded (as
    /// Stripe does once the card is confirmed) and returns the
    /// `payment_intent.succeeded` event Stripe would send, not yet delivered.
    pub fn succeed(&self, intent_id: &str) -> Value {
        let intent = {
            let mut state = self.shared.state();
            let intent = state
                .intents
                .get_mut(intent_id)
                .expect("known PaymentIntent");
            intent["status"] = json!("succeeded");
            intent["amount_received"] = intent["amount"].clone();
            intent["latest_charge"] = json!(format!("ch_{}", token(24)));
            intent.clone()
        };
        self.event("payment_intent.succeeded", intent)
    }

    /// A fresh event (new id) of `kind` about `object`, from the event
    /// fixture.
    pub fn event(&self, kind: &str, object: Value) -> Value {
        let mut event: Value = serde_json::from_str(EVENT).expect("event fixture");
        event["id"] = json!(format!("evt_{}", token(24)));
        event["type"] = json!(kind);
        event["created"] = json!(chrono::Utc::now().timestamp());
        event["data"] = json!({ "object": object });
        event["pending_webhooks"] = json!(1);
        event
    }

    /// Delivers `event` to `url` as Stripe does: the JSON body and its
    /// signature. Returns the status and body of the answer.
    pub async fn deliver(&self, url: &str, event: &Value, signing: &Signing) -> (u16, String) {
        let payload = serde_json::to_vec_pretty(event).expect("event JSON");
        let header = signing.header(&payload);
        self.deliver_raw(url, payload, Some(&header)).await
    }

    /// Delivers any bytes with any signature header (forgeries).
    pub async fn deliver_raw(
        &self,
        url: &str,
        payload: Vec<u8>,
        header: Option<&str>,
    ) -> (u16, String) {
        let mut req = self
            .http
            .post(url)
            .header("content-type", "application/json; charset=utf-8")
            .header(
                "user-agent",
                "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
            )
            .body(payload);
        if let Some(header) = header {
            req = req.header("stripe-signature", header);
        }
        let resp = req.send().await.expect("deliver webhook");
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap_or_default())
    }

    pub async fn stop(self) {
        self.server.stop(false).await;
    }
}

fn token(len: usize) -> String {
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::thread_rng();
    (0..len)
        .map(|_| CHARS[rng.gen_range(0..CHARS.len())] as char)
        .collect()
}

/// A Stripe error answer: status, error type, message.
struct Refusal(u16, &'static str, String, Option<&'static str>);

fn refusal(status: u16, kind: &'static str, message: &str) -> Refusal {
    Refusal(status, kind, message.to_owned(), None)
}

impl Refusal {
    /// With Stripe's machine-readable `code` (e.g. `balance_insufficient`).
    fn with_code(mut self, code: &'static str) -> Refusal {
        self.3 = Some(code);
        self
    }

    fn respond(self) -> HttpResponse {
        match self.3 {
            None => stripe_error(self.0, self.1, &self.2),
            Some(code) => {
                HttpResponse::build(actix_web::http::StatusCode::from_u16(self.0).expect("status"))
                    .json(json!({
                        "error": { "type": self.1, "code": code, "message": self.2 }
                    }))
            }
        }
    }
}

fn stripe_error(status: u16, kind: &str, message: &str) -> HttpResponse {
    HttpResponse::build(actix_web::http::StatusCode::from_u16(status).expect("status")).json(
        json!({
            "error": { "type": kind, "message": message }
        }),
    )
}

/// Stripe's authentication: `Authorization: Bearer <secret key>`.
fn authorised(shared: &Shared, req: &HttpRequest) -> Result<(), Refusal> {
    let given = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given == Some(shared.secret_key.as_str()) {
        Ok(())
    } else {
        Err(refusal(
            401,
            "invalid_request_error",
            "Invalid API Key provided",
        ))
    }
}

/// `metadata[key]=value` form fields as a JSON object.
fn metadata(params: &[(String, String)]) -> Value {
    let mut out = serde_json::Map::new();
    for (key, value) in params {
        if let Some(name) = key
            .strip_prefix("metadata[")
            .and_then(|k| k.strip_suffix(']'))
        {
            out.insert(name.to_owned(), json!(value));
        }
    }
    Value::Object(out)
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Runs a create under Stripe's idempotency rules.
fn create(
    shared: &Shared,
    req: &HttpRequest,
    params: Vec<(String, String)>,
    make: impl FnOnce(&mut State, &[(String, String)]) -> Result<Value, Refusal>,
) -> HttpResponse {
    if let Err(denied) = authorised(shared, req) {
        return denied.respond();
    }
    let path = req.path().to_owned();
    let key = req
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut sorted = params.clone();
    sorted.sort();
    let mut state = shared.state();
    if let Some(key) = &key
        && let Some(seen) = state.idempotent.get(key)
    {
        if seen.path != path || seen.params != sorted {
            return stripe_error(
                400,
                "idempotency_error",
                "Keys for idempotent requests can only be used with the same parameters they were first used with.",
            );
        }
        return HttpResponse::Ok()
            .insert_header(("idempotent-replayed", "true"))
            .json(&seen.answer);
    }
    let answer = match make(&mut state, &params) {
        Ok(answer) => answer,
        Err(refused) => return refused.respond(),
    };
    *state.created.entry(path.clone()).or_default() += 1;
    if let Some(key) = key {
        state.idempotent.insert(
            key,
            Idempotent {
                path: path.clone(),
                params: sorted,
                answer: answer.clone(),
            },
        );
    }
    if path == "/v1/transfers" && matches!(state.transfer_mode, TransferMode::LoseAnswerOnce) {
        state.transfer_mode = TransferMode::Normal;
        return stripe_error(
            500,
            "api_error",
            "An unknown error occurred (the double lost this answer on purpose)",
        );
    }
    HttpResponse::Ok().json(answer)
}

async fn create_customer(
    shared: web::Data<Shared>,
    req: HttpRequest,
    form: web::Form<Vec<(String, String)>>,
) -> HttpResponse {
    create(&shared, &req, form.into_inner(), |state, params| {
        let mut customer: Value = serde_json::from_str(CUSTOMER).expect("customer fixture");
        let id = format!("cus_{}", token(14));
        customer["id"] = json!(id);
        customer["created"] = json!(chrono::Utc::now().timestamp());
        customer["metadata"] = metadata(params);
        customer["description"] = json!(param(params, "description"));
        customer["email"] = json!(param(params, "email"));
        customer["name"] = json!(param(params, "name"));
        customer["discount"] = Value::Null;
        state.customers.insert(id, customer.clone());
        Ok(customer)
    })
}

async fn create_intent(
    shared: web::Data<Shared>,
    req: HttpRequest,
    form: web::Form<Vec<(String, String)>>,
) -> HttpResponse {
    create(&shared, &req, form.into_inner(), |state, params| {
        let amount: i64 = param(params, "amount")
            .and_then(|a| a.parse().ok())
            .filter(|a| *a > 0)
            .ok_or_else(|| refusal(400, "invalid_request_error", "Missing or invalid amount"))?;
        let currency = param(params, "currency").ok_or_else(|| {
            refusal(
                400,
                "invalid_request_error",
                "Missing required param: currency.",
            )
        })?;
        if let Some(customer) = param(params, "customer")
            && !state.customers.contains_key(customer)
        {
            return Err(refusal(
                400,
                "invalid_request_error",
                &format!("No such customer: '{customer}'"),
            ));
        }
        let mut intent: Value =
            serde_json::from_str(PAYMENT_INTENT).expect("payment_intent fixture");
        let id = format!("pi_{}", token(24));
        intent["id"] = json!(id);
        intent["amount"] = json!(amount);
        intent["amount_received"] = json!(0);
        intent["currency"] = json!(currency);
        intent["customer"] = json!(param(params, "customer"));
        intent["description"] = json!(param(params, "description"));
        intent["metadata"] = metadata(params);
        intent["status"] = json!("requires_payment_method");
        intent["client_secret"] = json!(format!("{id}_secret_{}", token(25)));
        intent["created"] = json!(chrono::Utc::now().timestamp());
        intent["canceled_at"] = Value::Null;
        intent["last_payment_error"] = Value::Null;
        intent["next_action"] = Value::Null;
        intent["processing"] = Value::Null;
        intent["latest_charge"] = Value::Null;
        state.intents.insert(id, intent.clone());
        Ok(intent)
    })
}

fn retrieve(
    shared: &Shared,
    req: &HttpRequest,
    kind: &str,
    pick: impl FnOnce(&State) -> Option<Value>,
) -> HttpResponse {
    if let Err(denied) = authorised(shared, req) {
        return denied.respond();
    }
    match pick(&shared.state()) {
        Some(object) => HttpResponse::Ok().json(object),
        None => stripe_error(
            404,
            "invalid_request_error",
            &format!(
                "No such {kind}: '{}'",
                req.match_info().get("id").unwrap_or_default()
            ),
        ),
    }
}

async fn retrieve_customer(
    shared: web::Data<Shared>,
    req: HttpRequest,
    id: web::Path<String>,
) -> HttpResponse {
    retrieve(&shared, &req, "customer", |s| {
        s.customers.get(id.as_str()).cloned()
    })
}

async fn retrieve_intent(
    shared: web::Data<Shared>,
    req: HttpRequest,
    id: web::Path<String>,
) -> HttpResponse {
    retrieve(&shared, &req, "payment_intent", |s| {
        s.intents.get(id.as_str()).cloned()
    })
}

/// `capabilities[name][requested]=true` form fields as Stripe reports them
/// on a new account: the fixture's status for what it knows, `pending`
/// otherwise.
fn requested_capabilities(params: &[(String, String)], fixture: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for (key, value) in params {
        if let Some(name) = key
            .strip_prefix("capabilities[")
            .and_then(|k| k.strip_suffix("][requested]"))
            && value == "true"
        {
            let status = fixture["capabilities"][name]
                .as_str()
                .unwrap_or("pending")
                .to_owned();
            out.insert(name.to_owned(), json!(status));
        }
    }
    Value::Object(out)
}

async fn create_account(
    shared: web::Data<Shared>,
    req: HttpRequest,
    form: web::Form<Vec<(String, String)>>,
) -> HttpResponse {
    create(&shared, &req, form.into_inner(), |state, params| {
        let mut account: Value = serde_json::from_str(ACCOUNT).expect("account fixture");
        let id = format!("acct_{}", token(16));
        account["id"] = json!(id);
        account["created"] = json!(chrono::Utc::now().timestamp());
        account["metadata"] = metadata(params);
        account["type"] = json!(param(params, "type").unwrap_or("standard"));
        if let Some(country) = param(params, "country") {
            account["country"] = json!(country);
        }
        account["email"] = json!(param(params, "email"));
        account["capabilities"] = requested_capabilities(params, &account);
        account["external_accounts"]["url"] = json!(format!("/v1/accounts/{id}/external_accounts"));
        state.accounts.insert(id, account.clone());
        Ok(account)
    })
}

async fn retrieve_account(
    shared: web::Data<Shared>,
    req: HttpRequest,
    id: web::Path<String>,
) -> HttpResponse {
    retrieve(&shared, &req, "account", |s| {
        s.accounts.get(id.as_str()).cloned()
    })
}

async fn create_transfer(
    shared: web::Data<Shared>,
    req: HttpRequest,
    form: web::Form<Vec<(String, String)>>,
) -> HttpResponse {
    create(&shared, &req, form.into_inner(), |state, params| {
        let amount: i64 = param(params, "amount")
            .and_then(|a| a.parse().ok())
            .filter(|a| *a > 0)
            .ok_or_else(|| refusal(400, "invalid_request_error", "Missing or invalid amount"))?;
        let currency = param(params, "currency").ok_or_else(|| {
            refusal(
                400,
                "invalid_request_error",
                "Missing required param: currency.",
            )
        })?;
        let destination = param(params, "destination").ok_or_else(|| {
            refusal(
                400,
                "invalid_request_error",
                "Missing required param: destination.",
            )
        })?;
        let Some(account) = state.accounts.get(destination) else {
            return Err(refusal(
                400,
                "invalid_request_error",
                &format!("No such destination: '{destination}'"),
            ));
        };
        if account["capabilities"]["transfers"] != "active" {
            return Err(refusal(
                400,
                "invalid_request_error",
                "Your destination account needs to have at least one of the following capabilities enabled: transfers, crypto_transfers, legacy_payments",
            ));
        }
        if matches!(state.transfer_mode, TransferMode::Refuse) {
            return Err(refusal(
                402,
                "invalid_request_error",
                "You have insufficient available funds in your Stripe account.",
            )
            .with_code("balance_insufficient"));
        }
        let mut transfer: Value = serde_json::from_str(TRANSFER).expect("transfer fixture");
        let id = format!("tr_{}", token(24));
        transfer["id"] = json!(id);
        transfer["amount"] = json!(amount);
        transfer["currency"] = json!(currency);
        transfer["destination"] = json!(destination);
        transfer["destination_payment"] = json!(format!("py_{}", token(14)));
        transfer["balance_transaction"] = json!(format!("txn_{}", token(24)));
        transfer["description"] = json!(param(params, "description"));
        transfer["transfer_group"] = json!(param(params, "transfer_group"));
        transfer["metadata"] = metadata(params);
        transfer["created"] = json!(chrono::Utc::now().timestamp());
        transfer["reversals"]["url"] = json!(format!("/v1/transfers/{id}/reversals"));
        state.transfers.insert(id, transfer.clone());
        Ok(transfer)
    })
}

/// `GET /v1/transfers?transfer_group=...&limit=...`: newest first, as a
/// Stripe list object.
async fn list_transfers(
    shared: web::Data<Shared>,
    req: HttpRequest,
    query: web::Query<Vec<(String, String)>>,
) -> HttpResponse {
    if let Err(denied) = authorised(&shared, &req) {
        return denied.respond();
    }
    let group = param(&query, "transfer_group").map(str::to_owned);
    let limit: usize = param(&query, "limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(10);
    let mut data: Vec<Value> = shared
        .state()
        .transfers
        .values()
        .filter(|t| group.is_none() || t["transfer_group"].as_str() == group.as_deref())
        .cloned()
        .collect();
    data.sort_by_key(|t| std::cmp::Reverse(t["created"].as_i64()));
    let has_more = data.len() > limit;
    data.truncate(limit);
    HttpResponse::Ok().json(json!({
        "object": "list",
        "data": data,
        "has_more": has_more,
        "url": "/v1/transfers",
    }))
}
