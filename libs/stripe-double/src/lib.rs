//! A Stripe test double: a small stateful HTTP server that answers the
//! Stripe API calls billing makes through async-stripe (create and retrieve
//! customers, PaymentIntents and Connect accounts; create and list
//! transfers; account links), the one call Stripe.js makes when a customer
//! pays (`POST /v1/payment_intents/{id}/confirm` with the publishable key
//! and the client secret), a one-click stand-in for Connect's hosted
//! onboarding page (`GET /onboarding/{token}`), and sends webhooks signed
//! exactly as Stripe signs them. It is not Stripe: it knows twelve routes, no payment methods, no charges
//! and no platform balance; it exists because no machine here reaches
//! Stripe and the `localstripe` fake answers with objects async-stripe 1.0
//! cannot parse.
//!
//! Its answers are Stripe's own published example objects
//! (`fixtures/*.json`, from Stripe's OpenAPI fixtures, MIT, see
//! `fixtures/LICENSE`) with id, amount, currency, status, metadata, client
//! secret and timestamps overwritten from the request and the double's
//! state, so async-stripe parses real Stripe shapes. `Idempotency-Key` is
//! honoured as Stripe does: the same key and parameters return the first
//! answer; the same key with other parameters is an `idempotency_error`.
//!
//! Two ways to use it: as a library inside a test process
//! ([`StripeDouble::start`], with test controls such as
//! [`StripeDouble::succeed`] and [`StripeDouble::deliver`]), and as the
//! `stripe-double` binary (`src/main.rs`) that the web end-to-end tests
//! start next to `gpumarket dev`, where a payment confirmed through the
//! confirm route is delivered to the configured webhook URL as Stripe would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use hmac::{Hmac, Mac};
use rand::Rng;
use serde_json::{Value, json};
use sha2::Sha256;

const CUSTOMER: &str = include_str!("../fixtures/customer.json");
const PAYMENT_INTENT: &str = include_str!("../fixtures/payment_intent.json");
const EVENT: &str = include_str!("../fixtures/event.json");
const ACCOUNT: &str = include_str!("../fixtures/account.json");
const TRANSFER: &str = include_str!("../fixtures/transfer.json");
const ACCOUNT_LINK: &str = include_str!("../fixtures/account_link.json");

/// How often a confirmed payment's webhook is tried before the double gives
/// up, and the pause between tries (Stripe retries for days; a test needs
/// only to survive a gateway that is still starting).
const DELIVERY_ATTEMPTS: u32 = 5;
const DELIVERY_PAUSE: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("Stripe fixture {name} does not parse: {source}")]
    Fixture {
        name: &'static str,
        source: serde_json::Error,
    },
    #[error("no such PaymentIntent: {0}")]
    UnknownPaymentIntent(String),
    #[error("cannot sign with this webhook secret")]
    SigningKey,
    #[error("event does not serialise: {0}")]
    Json(#[from] serde_json::Error),
    #[error("delivering to {url}: {source}")]
    Deliver { url: String, source: reqwest::Error },
}

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

/// Where Stripe sends events (a webhook endpoint) and the secrets it signs
/// them with, newest first.
#[derive(Clone, Debug)]
pub struct Webhook {
    pub url: String,
    pub secrets: Vec<String>,
}

/// How to start the double.
#[derive(Clone, Debug)]
pub struct Options {
    /// The secret key (`sk_test_...`) server-side calls must carry.
    pub secret_key: String,
    /// The publishable key (`pk_test_...`) Stripe.js calls carry; without
    /// one, the confirm route accepts only the secret key.
    pub publishable_key: Option<String>,
    /// The address to listen on; port 0 picks a free one.
    pub host: String,
    pub port: u16,
    /// Where a payment confirmed through the API is reported; without one,
    /// the test delivers events itself ([`StripeDouble::deliver`]).
    pub webhook: Option<Webhook>,
}

impl Options {
    /// On 127.0.0.1, a free port, no publishable key and no webhook.
    pub fn new(secret_key: &str) -> Options {
        Options {
            secret_key: secret_key.to_owned(),
            publishable_key: None,
            host: "127.0.0.1".into(),
            port: 0,
            webhook: None,
        }
    }
}

/// Stripe's example objects, parsed once at start.
struct Fixtures {
    customer: Value,
    payment_intent: Value,
    event: Value,
    account: Value,
    transfer: Value,
    account_link: Value,
}

impl Fixtures {
    fn parse() -> Result<Fixtures, Error> {
        let one = |name: &'static str, text: &str| {
            serde_json::from_str(text).map_err(|source| Error::Fixture { name, source })
        };
        Ok(Fixtures {
            customer: one("customer.json", CUSTOMER)?,
            payment_intent: one("payment_intent.json", PAYMENT_INTENT)?,
            event: one("event.json", EVENT)?,
            account: one("account.json", ACCOUNT)?,
            transfer: one("transfer.json", TRANSFER)?,
            account_link: one("account_link.json", ACCOUNT_LINK)?,
        })
    }
}

/// An account link's hosted onboarding, as the double keeps it.
struct OnboardingLink {
    account: String,
    return_url: String,
    refresh_url: String,
    expires_at: i64,
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
    /// Onboarding links not yet used, by the token in their URL.
    links: HashMap<String, OnboardingLink>,
    transfer_mode: TransferMode,
    idempotent: HashMap<String, Idempotent>,
    /// Objects actually created (not idempotent repeats), per path.
    created: HashMap<String, usize>,
}

struct Shared {
    /// The double's own base URL, where its onboarding pages are.
    url: String,
    secret_key: String,
    publishable_key: Option<String>,
    webhook: Option<Webhook>,
    fixtures: Fixtures,
    http: reqwest::Client,
    state: Mutex<State>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panicking handler must not hide the state from the test.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the PaymentIntent succeeded, as Stripe does once the card is
    /// confirmed, and returns it.
    fn succeed(&self, intent_id: &str) -> Result<Value, Error> {
        let mut state = self.state();
        let intent = state
            .intents
            .get_mut(intent_id)
            .ok_or_else(|| Error::UnknownPaymentIntent(intent_id.to_owned()))?;
        intent["status"] = json!("succeeded");
        intent["amount_received"] = intent["amount"].clone();
        intent["latest_charge"] = json!(format!("ch_{}", token(24)));
        Ok(intent.clone())
    }

    fn event(&self, kind: &str, object: Value) -> Value {
        let mut event = self.fixtures.event.clone();
        event["id"] = json!(format!("evt_{}", token(24)));
        event["type"] = json!(kind);
        event["created"] = json!(chrono::Utc::now().timestamp());
        event["data"] = json!({ "object": object });
        event["pending_webhooks"] = json!(1);
        event
    }

    async fn deliver_raw(
        &self,
        url: &str,
        payload: Vec<u8>,
        header: Option<&str>,
    ) -> Result<(u16, String), Error> {
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
        let resp = req.send().await.map_err(|source| Error::Deliver {
            url: url.to_owned(),
            source,
        })?;
        let status = resp.status().as_u16();
        // The status is the answer; a body that cannot be read is only
        // missing detail.
        Ok((status, resp.text().await.unwrap_or_default()))
    }

    async fn deliver(
        &self,
        url: &str,
        event: &Value,
        signing: &Signing,
    ) -> Result<(u16, String), Error> {
        let payload = serde_json::to_vec_pretty(event)?;
        let header = signing.header(&payload)?;
        self.deliver_raw(url, payload, Some(&header)).await
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
    pub fn header(&self, payload: &[u8]) -> Result<String, Error> {
        let mut header = format!("t={}", self.timestamp);
        for secret in &self.secrets {
            let mut mac =
                Hmac::<Sha256>::new_from_slice(secret.as_bytes()).map_err(|_| Error::SigningKey)?;
            mac.update(format!("{}.", self.timestamp).as_bytes());
            mac.update(payload);
            header.push_str(&format!(",v1={}", hex::encode(mac.finalize().into_bytes())));
        }
        Ok(header)
    }
}

pub struct StripeDouble {
    /// Base URL to give async-stripe (`GPUMARKET_STRIPE_API_BASE`).
    pub url: String,
    shared: Arc<Shared>,
    server: actix_web::dev::ServerHandle,
}

impl StripeDouble {
    /// Starts the double on a free port of 127.0.0.1; requests must carry
    /// `secret_key`.
    pub async fn start(secret_key: &str) -> Result<StripeDouble, Error> {
        StripeDouble::start_with(Options::new(secret_key)).await
    }

    /// Starts the double as `options` say; it serves on the current Tokio
    /// runtime until [`StripeDouble::stop`].
    pub async fn start_with(options: Options) -> Result<StripeDouble, Error> {
        let addr = format!("{}:{}", options.host, options.port);
        let listen_error = |source| Error::Listen {
            addr: addr.clone(),
            source,
        };
        let listener = std::net::TcpListener::bind(&addr).map_err(listen_error)?;
        let local = listener.local_addr().map_err(listen_error)?;
        let shared = Arc::new(Shared {
            url: format!("http://{local}/"),
            secret_key: options.secret_key,
            publishable_key: options.publishable_key,
            webhook: options.webhook,
            fixtures: Fixtures::parse()?,
            http: reqwest::Client::new(),
            state: Mutex::new(State::default()),
        });
        let data = web::Data::from(shared.clone());
        let server = actix_web::HttpServer::new(move || {
            actix_web::App::new()
                .app_data(data.clone())
                // Stripe's API answers browsers (Stripe.js) from any origin.
                .wrap(
                    actix_web::middleware::DefaultHeaders::new()
                        .add(("access-control-allow-origin", "*")),
                )
                .route("/v1/customers", web::post().to(create_customer))
                .route("/v1/customers/{id}", web::get().to(retrieve_customer))
                .route("/v1/payment_intents", web::post().to(create_intent))
                .route("/v1/payment_intents/{id}", web::get().to(retrieve_intent))
                .route(
                    "/v1/payment_intents/{id}/confirm",
                    web::post().to(confirm_intent),
                )
                .route(
                    "/v1/payment_intents/{id}/confirm",
                    web::method(actix_web::http::Method::OPTIONS).to(preflight),
                )
                .route("/v1/accounts", web::post().to(create_account))
                .route("/v1/accounts/{id}", web::get().to(retrieve_account))
                .route("/v1/account_links", web::post().to(create_account_link))
                .route("/onboarding/{token}", web::get().to(onboard))
                .route("/v1/transfers", web::post().to(create_transfer))
                .route("/v1/transfers", web::get().to(list_transfers))
                .default_service(web::to(|req: HttpRequest| async move {
                    stripe_error(
                        StatusCode::NOT_FOUND,
                        "invalid_request_error",
                        &format!("Unrecognized request URL ({} {})", req.method(), req.path()),
                    )
                }))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .map_err(listen_error)?
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Ok(StripeDouble {
            url: shared.url.clone(),
            shared,
            server: handle,
        })
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
    pub fn succeed(&self, intent_id: &str) -> Result<Value, Error> {
        let intent = self.shared.succeed(intent_id)?;
        Ok(self.event("payment_intent.succeeded", intent))
    }

    /// A fresh event (new id) of `kind` about `object`, from the event
    /// fixture.
    pub fn event(&self, kind: &str, object: Value) -> Value {
        self.shared.event(kind, object)
    }

    /// Delivers `event` to `url` as Stripe does: the JSON body and its
    /// signature. Returns the status and body of the answer.
    pub async fn deliver(
        &self,
        url: &str,
        event: &Value,
        signing: &Signing,
    ) -> Result<(u16, String), Error> {
        self.shared.deliver(url, event, signing).await
    }

    /// Delivers any bytes with any signature header (forgeries).
    pub async fn deliver_raw(
        &self,
        url: &str,
        payload: Vec<u8>,
        header: Option<&str>,
    ) -> Result<(u16, String), Error> {
        self.shared.deliver_raw(url, payload, header).await
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

/// A Stripe error answer: status, error type, message and, sometimes,
/// Stripe's machine-readable `code` (e.g. `balance_insufficient`).
struct Refusal(StatusCode, &'static str, String, Option<&'static str>);

fn refusal(status: StatusCode, kind: &'static str, message: &str) -> Refusal {
    Refusal(status, kind, message.to_owned(), None)
}

impl Refusal {
    fn with_code(mut self, code: &'static str) -> Refusal {
        self.3 = Some(code);
        self
    }

    fn respond(self) -> HttpResponse {
        match self.3 {
            None => stripe_error(self.0, self.1, &self.2),
            Some(code) => HttpResponse::build(self.0).json(json!({
                "error": { "type": self.1, "code": code, "message": self.2 }
            })),
        }
    }
}

fn stripe_error(status: StatusCode, kind: &str, message: &str) -> HttpResponse {
    HttpResponse::build(status).json(json!({
        "error": { "type": kind, "message": message }
    }))
}

fn invalid_key() -> Refusal {
    refusal(
        StatusCode::UNAUTHORIZED,
        "invalid_request_error",
        "Invalid API Key provided",
    )
}

fn bearer(req: &HttpRequest) -> Option<&str> {
    req.headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// Stripe's authentication: `Authorization: Bearer <secret key>`.
fn authorised(shared: &Shared, req: &HttpRequest) -> Result<(), Refusal> {
    if bearer(req) == Some(shared.secret_key.as_str()) {
        Ok(())
    } else {
        Err(invalid_key())
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
    make: impl FnOnce(&mut State, &Fixtures, &[(String, String)]) -> Result<Value, Refusal>,
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
                StatusCode::BAD_REQUEST,
                "idempotency_error",
                "Keys for idempotent requests can only be used with the same parameters they were first used with.",
            );
        }
        return HttpResponse::Ok()
            .insert_header(("idempotent-replayed", "true"))
            .json(&seen.answer);
    }
    let answer = match make(&mut state, &shared.fixtures, &params) {
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
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            "An unknown error occurred (the double lost this answer on purpose)",
        );
    }
    HttpResponse::Ok().json(answer)
}

fn missing(name: &str) -> Refusal {
    refusal(
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        &format!("Missing required param: {name}."),
    )
}

fn positive_amount(params: &[(String, String)]) -> Result<i64, Refusal> {
    param(params, "amount")
        .and_then(|a| a.parse().ok())
        .filter(|a: &i64| *a > 0)
        .ok_or_else(|| {
            refusal(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "Missing or invalid amount",
            )
        })
}

async fn create_customer(
    shared: web::Data<Shared>,
    req: HttpRequest,
    form: web::Form<Vec<(String, String)>>,
) -> HttpResponse {
    create(
        &shared,
        &req,
        form.into_inner(),
        |state, fixtures, params| {
            let mut customer = fixtures.customer.clone();
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
        },
    )
}

async fn create_intent(
    shared: web::Data<Shared>,
    req: HttpRequest,
    form: web::Form<Vec<(String, String)>>,
) -> HttpResponse {
    create(
        &shared,
        &req,
        form.into_inner(),
        |state, fixtures, params| {
            let amount = positive_amount(params)?;
            let currency = param(params, "currency").ok_or_else(|| missing("currency"))?;
            if let Some(customer) = param(params, "customer")
                && !state.customers.contains_key(customer)
            {
                return Err(refusal(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    &format!("No such customer: '{customer}'"),
                ));
            }
            let mut intent = fixtures.payment_intent.clone();
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
        },
    )
}

/// The CORS preflight a browser sends before a confirm carrying an
/// `Authorization` header (Stripe.js itself sends the key in the form, which
/// needs none).
async fn preflight() -> HttpResponse {
    HttpResponse::NoContent()
        .insert_header(("access-control-allow-methods", "POST, GET, OPTIONS"))
        .insert_header((
            "access-control-allow-headers",
            "authorization, content-type, stripe-version",
        ))
        .insert_header(("access-control-max-age", "600"))
        .finish()
}

/// `POST /v1/payment_intents/{id}/confirm`: the customer pays, as Stripe.js
/// calls it from the browser, with the publishable key (form field `key`,
/// as Stripe.js sends it, or a bearer token) and the intent's
/// `client_secret`; or from a server with the secret key. Every payment
/// succeeds (there are no cards here). The intent becomes `succeeded` and,
/// when a webhook is configured, `payment_intent.succeeded` is delivered to
/// it after the answer, as Stripe delivers events asynchronously.
async fn confirm_intent(
    shared: web::Data<Shared>,
    req: HttpRequest,
    id: web::Path<String>,
    form: web::Form<Vec<(String, String)>>,
) -> HttpResponse {
    let params = form.into_inner();
    let key = param(&params, "key").or_else(|| bearer(&req));
    let with_secret_key = key == Some(shared.secret_key.as_str());
    let with_publishable_key = key.is_some() && key == shared.publishable_key.as_deref();
    if !with_secret_key && !with_publishable_key {
        return invalid_key().respond();
    }
    let intent_id = id.into_inner();
    {
        let state = shared.state();
        let Some(intent) = state.intents.get(&intent_id) else {
            return stripe_error(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                &format!("No such payment_intent: '{intent_id}'"),
            );
        };
        // A publishable key proves nothing about the intent; its client
        // secret does.
        if with_publishable_key
            && !with_secret_key
            && param(&params, "client_secret") != intent["client_secret"].as_str()
        {
            return stripe_error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "The client_secret provided does not match the client_secret associated with the PaymentIntent.",
            );
        }
        let status = intent["status"].as_str().unwrap_or_default();
        if !matches!(
            status,
            "requires_payment_method" | "requires_confirmation" | "requires_action"
        ) {
            return Refusal(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                format!("This PaymentIntent's status is {status}, so it cannot be confirmed."),
                Some("payment_intent_unexpected_state"),
            )
            .respond();
        }
    }
    let intent = match shared.succeed(&intent_id) {
        Ok(intent) => intent,
        Err(e) => {
            return stripe_error(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                &e.to_string(),
            );
        }
    };
    if let Some(webhook) = shared.webhook.clone() {
        let event = shared.event("payment_intent.succeeded", intent.clone());
        let shared = shared.into_inner();
        tokio::spawn(async move { deliver_until_accepted(&shared, &webhook, &event).await });
    }
    HttpResponse::Ok().json(intent)
}

/// Delivers `event` to the configured endpoint, retrying a refusal or an
/// unreachable endpoint a few times as Stripe retries.
async fn deliver_until_accepted(shared: &Shared, webhook: &Webhook, event: &Value) {
    let secrets: Vec<&str> = webhook.secrets.iter().map(String::as_str).collect();
    for attempt in 1..=DELIVERY_ATTEMPTS {
        match shared
            .deliver(&webhook.url, event, &Signing::now(&secrets))
            .await
        {
            Ok((status, body)) if (200..300).contains(&status) => {
                tracing::info!(event = %event["id"], status, %body, "webhook delivered");
                return;
            }
            Ok((status, body)) => {
                tracing::warn!(event = %event["id"], attempt, status, %body, "webhook refused")
            }
            Err(e) => {
                tracing::warn!(event = %event["id"], attempt, error = %e, "webhook not delivered")
            }
        }
        tokio::time::sleep(DELIVERY_PAUSE).await;
    }
    tracing::error!(event = %event["id"], "webhook given up after {DELIVERY_ATTEMPTS} attempts");
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
            StatusCode::NOT_FOUND,
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
    create(
        &shared,
        &req,
        form.into_inner(),
        |state, fixtures, params| {
            let mut account = fixtures.account.clone();
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
            account["external_accounts"]["url"] =
                json!(format!("/v1/accounts/{id}/external_accounts"));
            state.accounts.insert(id, account.clone());
            Ok(account)
        },
    )
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

/// `POST /v1/account_links`: a single-use URL of the double's own onboarding
/// page, standing in for Stripe's hosted Connect onboarding.
async fn create_account_link(
    shared: web::Data<Shared>,
    req: HttpRequest,
    form: web::Form<Vec<(String, String)>>,
) -> HttpResponse {
    if let Err(denied) = authorised(&shared, &req) {
        return denied.respond();
    }
    let params = form.into_inner();
    let (Some(account), Some(return_url), Some(refresh_url)) = (
        param(&params, "account"),
        param(&params, "return_url"),
        param(&params, "refresh_url"),
    ) else {
        return missing("account, return_url and refresh_url").respond();
    };
    if param(&params, "type") != Some("account_onboarding") {
        return missing("type=account_onboarding").respond();
    }
    let mut state = shared.state();
    if !state.accounts.contains_key(account) {
        return refusal(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            &format!("No such account: '{account}'"),
        )
        .respond();
    }
    let now = chrono::Utc::now().timestamp();
    let token = token(24);
    // Stripe's links expire after a few minutes.
    let expires_at = now + 300;
    state.links.insert(
        token.clone(),
        OnboardingLink {
            account: account.to_owned(),
            return_url: return_url.to_owned(),
            refresh_url: refresh_url.to_owned(),
            expires_at,
        },
    );
    let mut link = shared.fixtures.account_link.clone();
    link["created"] = json!(now);
    link["expires_at"] = json!(expires_at);
    link["url"] = json!(format!("{}onboarding/{token}", shared.url));
    HttpResponse::Ok().json(link)
}

/// `GET /onboarding/{token}`: the host "completes" onboarding. The account
/// gets its details submitted, payouts enabled and the `transfers`
/// capability active, and the browser goes back to `return_url`; a used or
/// expired link goes to `refresh_url`, as Stripe's does.
async fn onboard(shared: web::Data<Shared>, token: web::Path<String>) -> HttpResponse {
    let mut state = shared.state();
    let Some(link) = state.links.remove(token.as_str()) else {
        return stripe_error(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "This onboarding link is not known",
        );
    };
    let target = if link.expires_at < chrono::Utc::now().timestamp() {
        link.refresh_url
    } else {
        if let Some(account) = state.accounts.get_mut(&link.account) {
            account["details_submitted"] = json!(true);
            account["payouts_enabled"] = json!(true);
            account["charges_enabled"] = json!(true);
            account["capabilities"]["transfers"] = json!("active");
        }
        link.return_url
    };
    HttpResponse::SeeOther()
        .insert_header(("location", target))
        .finish()
}

async fn create_transfer(
    shared: web::Data<Shared>,
    req: HttpRequest,
    form: web::Form<Vec<(String, String)>>,
) -> HttpResponse {
    create(
        &shared,
        &req,
        form.into_inner(),
        |state, fixtures, params| {
            let amount = positive_amount(params)?;
            let currency = param(params, "currency").ok_or_else(|| missing("currency"))?;
            let destination = param(params, "destination").ok_or_else(|| missing("destination"))?;
            let Some(account) = state.accounts.get(destination) else {
                return Err(refusal(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    &format!("No such destination: '{destination}'"),
                ));
            };
            if account["capabilities"]["transfers"] != "active" {
                return Err(refusal(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    "Your destination account needs to have at least one of the following capabilities enabled: transfers, crypto_transfers, legacy_payments",
                ));
            }
            if matches!(state.transfer_mode, TransferMode::Refuse) {
                return Err(refusal(
                    StatusCode::PAYMENT_REQUIRED,
                    "invalid_request_error",
                    "You have insufficient available funds in your Stripe account.",
                )
                .with_code("balance_insufficient"));
            }
            let mut transfer = fixtures.transfer.clone();
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
        },
    )
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
