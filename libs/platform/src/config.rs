//! Configuration from environment variables. Every default works on a
//! developer machine with local Postgres and RabbitMQ; every name (database,
//! roles, exchanges, queues, vhost) is configurable so a test can isolate
//! itself.

use std::collections::BTreeMap;
use std::env;
use std::str::FromStr;

use crate::PlatformError;

/// Its `Debug` shows no secret and no URL that may carry a password (see
/// the impl below), so a configuration can be logged.
#[derive(Clone)]
pub struct Config {
    /// Database for every service (one schema each). `GPUMARKET_DATABASE_URL`.
    pub database_url: String,
    /// When true, each service connects as its own role (`gpumarket_<service>`),
    /// which may touch only its own schema. `GPUMARKET_DB_ROLE_PER_SERVICE`.
    pub db_role_per_service: bool,
    /// Connections per service pool. `GPUMARKET_DB_POOL_SIZE`.
    pub db_pool_size: u32,
    /// `amqp://user:pass@host:port/vhost`. `GPUMARKET_AMQP_URL`.
    pub amqp_url: String,
    /// RabbitMQ management API, used to create per-host users and test vhosts.
    /// `GPUMARKET_RABBITMQ_MANAGEMENT_URL`.
    pub rabbitmq_management_url: String,
    pub events_exchange: String,
    pub commands_exchange: String,
    pub dead_letter_exchange: String,
    pub provisioner_queue: String,
    pub metering_queue: String,
    pub billing_queue: String,
    /// Ordering's queue of catalog events (preemptions).
    pub ordering_queue: String,
    /// Deliveries of one message before the broker dead-letters it.
    pub delivery_limit: u32,
    /// Unacked deliveries a consumer holds at once.
    pub prefetch: u16,
    /// Most messages a batched consumer (billing's usage ingest) applies in
    /// one transaction. `GPUMARKET_BATCH_MAX`.
    pub batch_max: u16,
    /// How long a batched consumer waits after a batch's first message for
    /// more before it applies what it has: the latency bought for
    /// throughput. `GPUMARKET_BATCH_WAIT_MS`.
    pub batch_wait_ms: u64,
    /// Bind address for every HTTP listener. `GPUMARKET_BIND_HOST`.
    pub bind_host: String,
    pub ports: Ports,
    /// The provisioner worker's HTTP port (`/metrics`, `/healthz`,
    /// `/readyz`; 0 = any free port). `GPUMARKET_PROVISIONER_PORT`. Not in
    /// [`Ports`]: no service calls the worker, and `gpumarket dev` serves its
    /// metrics on every service port instead.
    pub provisioner_port: u16,
    /// Base URLs other services are reached at; default to the local ports.
    pub urls: Urls,
    /// Shared secret on internal calls (`X-Service-Token`).
    pub service_token: String,
    /// HMAC keys for JWTs as `kid:secret` pairs separated by commas; the first
    /// signs, all verify (rotation). `GPUMARKET_JWT_KEYS`.
    pub jwt_keys: Vec<(String, String)>,
    pub jwt_ttl_seconds: i64,
    /// Platform fee as a decimal fraction, e.g. `0.15`, kept as text here and
    /// parsed by billing, the only service that uses it. `GPUMARKET_FEE_RATE`.
    pub fee_rate: String,
    /// Settlement currency (ISO 4217). `GPUMARKET_CURRENCY`.
    pub currency: String,
    /// Seconds of burn a renter's balance must cover to start an order.
    pub min_runway_seconds: i64,
    /// How often metering settles running intervals (posts their accrued
    /// usage): the bound on how far a renter can overdraw.
    /// `GPUMARKET_SETTLEMENT_INTERVAL_MS`.
    pub settlement_interval_ms: u64,
    /// A renter's runway (balance over the current burn) below this many
    /// seconds is reported as low. `GPUMARKET_RUNWAY_WARNING_SECONDS`.
    pub runway_warning_seconds: i64,
    /// The published multiple of the hourly rate a renter is credited per
    /// second of downtime of a lost host, charged to the host's earnings.
    /// `GPUMARKET_DOWNTIME_CREDIT_MULTIPLE`.
    pub downtime_credit_multiple: String,
    /// GPUs a new tenant may hold at once until an operator changes it.
    pub default_max_gpus: i32,
    /// How often the outbox relay looks for unsent messages without being
    /// woken: the relay is woken by the commit that wrote them (see
    /// `listen_notifications`), so this only bounds how late a message is
    /// when a notification is lost. `GPUMARKET_OUTBOX_POLL_MS`.
    pub outbox_poll_ms: u64,
    /// Whether the outbox relays and the provisioner's job runner hold a
    /// Postgres `LISTEN` connection and wake on the commits that give them
    /// work (platform::notify); false leaves only the slow polls
    /// (`outbox_poll_ms`, `job_poll_ms`). `GPUMARKET_LISTEN_NOTIFICATIONS`.
    pub listen_notifications: bool,
    /// How often a `LISTEN` connection is checked for notifications that
    /// arrived (a read of the socket's buffer, no query).
    /// `GPUMARKET_NOTIFICATION_CHECK_MS`.
    pub notification_check_ms: u64,
    /// Per-step latency of the simulated driver, `step=ms,step=ms`.
    pub sim_step_latency_ms: String,
    /// Injected failures of the simulated driver, `step=n`: the first n
    /// attempts of that step fail. `GPUMARKET_SIM_STEP_FAILURES`.
    pub sim_step_failures: String,
    /// Attempts of one provisioning step before the job fails.
    pub step_attempts: u32,
    /// `simulated` or `agent` (commands go to the host agent of the machine).
    /// `GPUMARKET_PROVISIONER_DRIVER`.
    pub provisioner_driver: String,
    /// How long a worker's claim on a job lasts unless renewed; a killed
    /// worker's jobs are taken over after it. `GPUMARKET_JOB_LEASE_MS`.
    pub job_lease_ms: u64,
    /// A job not finished this long after it arrived is failed (and its
    /// command dead-lettered). `GPUMARKET_JOB_DEADLINE_SECONDS`.
    pub job_deadline_seconds: i64,
    /// How often an idle worker looks for runnable jobs. `GPUMARKET_JOB_POLL_MS`.
    pub job_poll_ms: u64,
    /// Jobs one worker process runs at once. `GPUMARKET_WORKER_CONCURRENCY`.
    pub worker_concurrency: usize,
    /// How long the `agent` driver waits for a host agent to answer a step.
    /// `GPUMARKET_AGENT_STEP_TIMEOUT_MS`.
    pub agent_step_timeout_ms: u64,
    /// The provisioners' queue of host agents' step results, bound to
    /// `agent.*.step_result`. `GPUMARKET_AGENT_RESULTS_QUEUE`.
    pub agent_results_queue: String,
    /// `json` or `pretty`. `GPUMARKET_LOG_FORMAT`.
    pub log_format: String,
    /// Topic exchange host agents publish to (`agent.<machine_id>.<kind>`).
    /// `GPUMARKET_AGENTS_EXCHANGE`.
    pub agents_exchange: String,
    /// The catalog's queue of agent reports, bound to `agent.*.inventory`,
    /// `agent.*.heartbeat` and `agent.*.self_test` (step results go to the
    /// provisioners' own queue).
    /// `GPUMARKET_AGENTS_QUEUE`.
    pub agents_queue: String,
    /// A machine is online iff its last heartbeat is younger than this; a
    /// silence longer than this is a heartbeat gap (downtime).
    /// `GPUMARKET_HEARTBEAT_GRACE_SECONDS`.
    pub heartbeat_grace_seconds: i64,
    /// How often an agent started by this process heartbeats.
    /// `GPUMARKET_AGENT_HEARTBEAT_SECONDS`.
    pub agent_heartbeat_seconds: u64,
    /// The rolling window reliability is computed over.
    /// `GPUMARKET_RELIABILITY_WINDOW_DAYS`.
    pub reliability_window_days: i64,
    /// How often the catalog looks for silent machines and recomputes
    /// reliability. `GPUMARKET_OFFLINE_SWEEP_MS`.
    pub offline_sweep_ms: u64,
    /// How often ordering's rules task looks for instances whose lifecycle
    /// rules are due. `GPUMARKET_RULES_TICK_MS`.
    pub rules_tick_ms: u64,
    /// How long before a lifecycle rule acts its `rule_warning` event is
    /// published. `GPUMARKET_RULES_WARNING_LEAD_SECONDS`.
    pub rules_warning_lead_seconds: i64,
    /// How long catalog keeps per-heartbeat GPU utilisation; also the longest
    /// idle-stop window a rule may ask for.
    /// `GPUMARKET_GPU_ACTIVITY_RETENTION_SECONDS`.
    pub gpu_activity_retention_seconds: i64,
    /// Fixed utilisation (percent) for simulated agents started by this
    /// process; unset, they report random numbers.
    /// `GPUMARKET_SIM_GPU_UTILIZATION_PERCENT`.
    pub sim_gpu_utilization_percent: Option<u32>,
    /// Bytes per second each simulated container sends (it receives four
    /// times as much), reported as its network counters with the simulated
    /// agents' heartbeats; 0 (default) reports no traffic.
    /// `GPUMARKET_SIM_TRAFFIC_BYTES_PER_SECOND`.
    pub sim_traffic_bytes_per_second: u64,
    /// How often ordering's reconciler compares instances with the catalog's
    /// heartbeats and metering's intervals. `GPUMARKET_RECONCILE_INTERVAL_MS`.
    pub reconcile_interval_ms: u64,
    /// How old a change must be before the reconciler repairs what it should
    /// have caused, so the normal outbox path gets there first.
    /// `GPUMARKET_RECONCILE_SETTLE_SECONDS`.
    pub reconcile_settle_seconds: i64,
    /// Stripe (billing's prepaid top-ups). The secret API key; empty (the
    /// default) means card payments are not configured, and the calls that
    /// need Stripe answer `NOT_CONFIGURED` instead of trying a fake key.
    /// `GPUMARKET_STRIPE_SECRET_KEY`.
    pub stripe_secret_key: String,
    /// Where the Stripe API is reached (tests point it at a test double).
    /// `GPUMARKET_STRIPE_API_BASE`.
    pub stripe_api_base: String,
    /// Webhook signing secrets, newest first; a signature by any of them is
    /// accepted, which is how a secret is rotated.
    /// `GPUMARKET_STRIPE_WEBHOOK_SECRETS` (comma-separated).
    pub stripe_webhook_secrets: Vec<String>,
    /// How far a webhook's signed timestamp may be from now.
    /// `GPUMARKET_STRIPE_WEBHOOK_TOLERANCE_SECONDS`.
    pub stripe_webhook_tolerance_seconds: i64,
    /// The publishable key (`pk_test_...`, `pk_live_...`) the web front end
    /// gives Stripe.js, shown by the gateway's public `platform` query; unset,
    /// the billing page says top-ups are not configured.
    /// `GPUMARKET_STRIPE_PUBLISHABLE_KEY`.
    pub stripe_publishable_key: Option<String>,
    /// The address people open the web front ends at, without a trailing
    /// slash; Stripe's hosted onboarding sends hosts back under it, so a
    /// client cannot choose where. `GPUMARKET_PUBLIC_URL`.
    pub public_url: String,
    /// Smallest and largest top-up, in the settlement currency, as text
    /// parsed by billing. `GPUMARKET_TOP_UP_MIN_AMOUNT`, `GPUMARKET_TOP_UP_MAX_AMOUNT`.
    pub top_up_min_amount: String,
    pub top_up_max_amount: String,
    /// Renters' invoice period: `monthly` (calendar months, UTC), `weekly`
    /// (ISO weeks) or `daily`, parsed by billing. `GPUMARKET_INVOICE_PERIOD`.
    pub invoice_period: String,
    /// Host payouts (Stripe Connect transfers): seconds between payout runs
    /// of billing's loop, 0 for none (operators call `runPayouts`).
    /// `GPUMARKET_PAYOUT_INTERVAL_SECS`.
    pub payout_interval_secs: u64,
    /// The smallest payout, in the settlement currency, as text parsed by
    /// billing. `GPUMARKET_PAYOUT_MINIMUM`.
    pub payout_minimum: String,
    /// Earnings younger than this many seconds are held back from payouts,
    /// so a downtime credit that follows can still be taken from them.
    /// `GPUMARKET_PAYOUT_HOLD_SECONDS`.
    pub payout_hold_seconds: i64,
    /// Seconds between billing's checks for a period that ended and has
    /// not been invoiced; 0 for none (operators call `runInvoices`).
    /// `GPUMARKET_INVOICE_SCHEDULE_SECS`.
    pub invoice_schedule_secs: u64,
    /// The gateway's token bucket per API key, user token or (anonymous)
    /// client address: sustained requests per minute (0 turns it off) and
    /// how many may come at once. `GPUMARKET_RATE_LIMIT_PER_MINUTE`,
    /// `GPUMARKET_RATE_LIMIT_BURST`.
    pub rate_limit_per_minute: u32,
    pub rate_limit_burst: u32,
    /// The built web front end (`make web`), served by the gateway at
    /// `/portal` and `/billing`; relative to the working directory.
    /// `GPUMARKET_WEB_DIR`.
    pub web_dir: String,
    /// `GPUMARKET_ENV`: `development` (the default) or `production`, which
    /// refuses the development secrets below at start-up
    /// ([`Config::refuse_development_secrets`]), turns GraphiQL off and keeps
    /// introspection for logged-in callers.
    pub production: bool,
}

impl std::fmt::Debug for Config {
    /// The settings that say where and how the process runs; never the
    /// service token, JWT keys, Stripe keys and webhook secrets, nor the
    /// database, broker and management URLs (they may carry passwords).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("production", &self.production)
            .field("bind_host", &self.bind_host)
            .field("ports", &self.ports)
            .field("urls", &self.urls)
            .field("db_role_per_service", &self.db_role_per_service)
            .field("db_pool_size", &self.db_pool_size)
            .field("events_exchange", &self.events_exchange)
            .field("commands_exchange", &self.commands_exchange)
            .field("currency", &self.currency)
            .field("fee_rate", &self.fee_rate)
            .field("provisioner_driver", &self.provisioner_driver)
            .field("public_url", &self.public_url)
            .field("stripe_configured", &!self.stripe_secret_key.is_empty())
            .finish_non_exhaustive()
    }
}

/// The development defaults of the secrets, published in this repository:
/// anyone can sign an operator's JWT or call a service with them.
pub const DEV_JWT_SECRET: &str = "insecure-development-jwt-secret-change-me";
pub const DEV_SERVICE_TOKEN: &str = "dev-service-token";
pub const DEV_STRIPE_WEBHOOK_SECRET: &str = "whsec_gpumarket_local_development";
pub const DEV_STRIPE_SECRET_KEY: &str = "sk_test_gpumarket_local";
const DEV_MANAGEMENT_URL: &str = "http://guest:guest@127.0.0.1:15672";

/// A secret a process reads; each process names the ones it uses, and in
/// production refuses to start while one of them has its development value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secret {
    /// `GPUMARKET_JWT_KEYS` (the gateway signs and verifies with them).
    JwtKeys,
    /// `GPUMARKET_SERVICE_TOKEN` (every internal call).
    ServiceToken,
    /// `GPUMARKET_STRIPE_WEBHOOK_SECRETS` and `GPUMARKET_STRIPE_SECRET_KEY`
    /// (billing).
    Stripe,
    /// The credentials in `GPUMARKET_RABBITMQ_MANAGEMENT_URL` (catalog makes
    /// the agents' broker users with them).
    RabbitmqManagement,
}

impl Secret {
    pub const ALL: [Secret; 4] = [
        Secret::JwtKeys,
        Secret::ServiceToken,
        Secret::Stripe,
        Secret::RabbitmqManagement,
    ];
}

/// Each service's port, by the service's name. Platform knows no service:
/// the registry (`src/services.rs`) fills it from `GPUMARKET_<NAME>_PORT` or
/// each service's default ([`Config::configure_service`]); a service nobody
/// configured listens on any free port (0).
#[derive(Debug, Clone, Default)]
pub struct Ports(BTreeMap<String, u16>);

impl Ports {
    pub fn get(&self, service: &str) -> u16 {
        self.0.get(service).copied().unwrap_or(0)
    }

    pub fn set(&mut self, service: &str, port: u16) {
        self.0.insert(service.to_owned(), port);
    }
}

/// Where each service is reached (`GPUMARKET_<NAME>_URL`), by name.
#[derive(Debug, Clone, Default)]
pub struct Urls(BTreeMap<String, String>);

impl Urls {
    pub fn set(&mut self, service: &str, url: impl Into<String>) {
        self.0.insert(service.to_owned(), url.into());
    }
}

fn var(name: &str, default: &str) -> String {
    env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// `GPUMARKET_STRIPE_PUBLISHABLE_KEY`, which the gateway shows to anyone:
/// anything but a publishable key (a secret `sk_` or restricted `rk_` key
/// pasted into the wrong variable) is refused rather than published.
fn publishable_key(raw: Option<String>) -> Result<Option<String>, PlatformError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let key = raw.trim();
    if key.is_empty() {
        return Ok(None);
    }
    if !key.starts_with("pk_") {
        return Err(PlatformError::Config(
            "GPUMARKET_STRIPE_PUBLISHABLE_KEY: not a publishable key (pk_...); it is shown publicly"
                .into(),
        ));
    }
    Ok(Some(key.to_owned()))
}

/// A value copied from a template without being filled in
/// (deploy/k8s/secret.template.yaml's `REPLACE-ME`, the old compose
/// defaults' `dev-only`).
fn placeholder(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    ["replace-me", "dev-only", "change-me"]
        .iter()
        .any(|marker| lower.contains(marker))
}

/// `GPUMARKET_ENV`: true for production.
fn run_mode(raw: &str) -> Result<bool, PlatformError> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "production" | "prod" => Ok(true),
        "development" | "dev" | "" => Ok(false),
        other => Err(PlatformError::Config(format!(
            "GPUMARKET_ENV: expected development or production, got {other:?}"
        ))),
    }
}

fn parsed<T: FromStr>(name: &str, default: T) -> Result<T, PlatformError> {
    match env::var(name) {
        Ok(raw) => raw
            .parse()
            .map_err(|_| PlatformError::Config(format!("{name}: cannot parse {raw:?}"))),
        Err(_) => Ok(default),
    }
}

impl Config {
    pub fn from_env() -> Result<Self, PlatformError> {
        let bind_host = var("GPUMARKET_BIND_HOST", "127.0.0.1");
        let ports = Ports::default();
        let urls = Urls::default();
        let jwt_keys = parse_jwt_keys(&var(
            "GPUMARKET_JWT_KEYS",
            &format!("dev-1:{DEV_JWT_SECRET}"),
        ))?;
        Ok(Self {
            database_url: var(
                "GPUMARKET_DATABASE_URL",
                "postgres://postgres@127.0.0.1:5432/gpumarket",
            ),
            db_role_per_service: parsed("GPUMARKET_DB_ROLE_PER_SERVICE", false)?,
            db_pool_size: parsed("GPUMARKET_DB_POOL_SIZE", 4)?,
            amqp_url: var(
                "GPUMARKET_AMQP_URL",
                "amqp://guest:guest@127.0.0.1:5672/%2f",
            ),
            rabbitmq_management_url: var("GPUMARKET_RABBITMQ_MANAGEMENT_URL", DEV_MANAGEMENT_URL),
            events_exchange: var("GPUMARKET_EVENTS_EXCHANGE", "gpumarket.events"),
            commands_exchange: var("GPUMARKET_COMMANDS_EXCHANGE", "gpumarket.commands"),
            dead_letter_exchange: var("GPUMARKET_DEAD_LETTER_EXCHANGE", "gpumarket.dlx"),
            provisioner_queue: var("GPUMARKET_PROVISIONER_QUEUE", "provisioner.jobs"),
            metering_queue: var("GPUMARKET_METERING_QUEUE", "metering.lifecycle"),
            billing_queue: var("GPUMARKET_BILLING_QUEUE", "billing.usage"),
            ordering_queue: var("GPUMARKET_ORDERING_QUEUE", "ordering.catalog"),
            delivery_limit: parsed("GPUMARKET_DELIVERY_LIMIT", 5)?,
            prefetch: parsed("GPUMARKET_PREFETCH", 16)?,
            batch_max: parsed("GPUMARKET_BATCH_MAX", 500)?,
            batch_wait_ms: parsed("GPUMARKET_BATCH_WAIT_MS", 50)?,
            bind_host,
            ports,
            provisioner_port: parsed("GPUMARKET_PROVISIONER_PORT", 8086)?,
            urls,
            service_token: var("GPUMARKET_SERVICE_TOKEN", DEV_SERVICE_TOKEN),
            jwt_keys,
            jwt_ttl_seconds: parsed("GPUMARKET_JWT_TTL_SECONDS", 3600)?,
            fee_rate: var("GPUMARKET_FEE_RATE", "0.15"),
            currency: var("GPUMARKET_CURRENCY", "USD"),
            min_runway_seconds: parsed("GPUMARKET_MIN_RUNWAY_SECONDS", 600)?,
            settlement_interval_ms: parsed("GPUMARKET_SETTLEMENT_INTERVAL_MS", 10_000)?,
            runway_warning_seconds: parsed("GPUMARKET_RUNWAY_WARNING_SECONDS", 3600)?,
            downtime_credit_multiple: var("GPUMARKET_DOWNTIME_CREDIT_MULTIPLE", "1"),
            default_max_gpus: parsed("GPUMARKET_DEFAULT_MAX_GPUS", 16)?,
            outbox_poll_ms: parsed("GPUMARKET_OUTBOX_POLL_MS", 1000)?,
            listen_notifications: parsed("GPUMARKET_LISTEN_NOTIFICATIONS", true)?,
            notification_check_ms: parsed("GPUMARKET_NOTIFICATION_CHECK_MS", 1)?,
            sim_step_latency_ms: var("GPUMARKET_SIM_STEP_LATENCY_MS", ""),
            sim_step_failures: var("GPUMARKET_SIM_STEP_FAILURES", ""),
            step_attempts: parsed("GPUMARKET_STEP_ATTEMPTS", 3)?,
            provisioner_driver: var("GPUMARKET_PROVISIONER_DRIVER", "simulated"),
            job_lease_ms: parsed("GPUMARKET_JOB_LEASE_MS", 10_000)?,
            job_deadline_seconds: parsed("GPUMARKET_JOB_DEADLINE_SECONDS", 1800)?,
            job_poll_ms: parsed("GPUMARKET_JOB_POLL_MS", 500)?,
            worker_concurrency: parsed("GPUMARKET_WORKER_CONCURRENCY", 8)?,
            agent_step_timeout_ms: parsed("GPUMARKET_AGENT_STEP_TIMEOUT_MS", 30_000)?,
            agent_results_queue: var("GPUMARKET_AGENT_RESULTS_QUEUE", "provisioner.agent-results"),
            log_format: var("GPUMARKET_LOG_FORMAT", "pretty"),
            agents_exchange: var("GPUMARKET_AGENTS_EXCHANGE", "gpumarket.agents"),
            agents_queue: var("GPUMARKET_AGENTS_QUEUE", "catalog.agents"),
            heartbeat_grace_seconds: parsed("GPUMARKET_HEARTBEAT_GRACE_SECONDS", 60)?,
            agent_heartbeat_seconds: parsed("GPUMARKET_AGENT_HEARTBEAT_SECONDS", 5)?,
            reliability_window_days: parsed("GPUMARKET_RELIABILITY_WINDOW_DAYS", 30)?,
            offline_sweep_ms: parsed("GPUMARKET_OFFLINE_SWEEP_MS", 5000)?,
            rules_tick_ms: parsed("GPUMARKET_RULES_TICK_MS", 1000)?,
            rules_warning_lead_seconds: parsed("GPUMARKET_RULES_WARNING_LEAD_SECONDS", 300)?,
            gpu_activity_retention_seconds: parsed(
                "GPUMARKET_GPU_ACTIVITY_RETENTION_SECONDS",
                172_800,
            )?,
            sim_gpu_utilization_percent: match env::var("GPUMARKET_SIM_GPU_UTILIZATION_PERCENT") {
                Ok(raw) => Some(raw.parse().map_err(|_| {
                    PlatformError::Config(format!(
                        "GPUMARKET_SIM_GPU_UTILIZATION_PERCENT: cannot parse {raw:?}"
                    ))
                })?),
                Err(_) => None,
            },
            sim_traffic_bytes_per_second: parsed("GPUMARKET_SIM_TRAFFIC_BYTES_PER_SECOND", 0)?,
            reconcile_interval_ms: parsed("GPUMARKET_RECONCILE_INTERVAL_MS", 5000)?,
            reconcile_settle_seconds: parsed("GPUMARKET_RECONCILE_SETTLE_SECONDS", 30)?,
            stripe_secret_key: var("GPUMARKET_STRIPE_SECRET_KEY", ""),
            stripe_api_base: var("GPUMARKET_STRIPE_API_BASE", "https://api.stripe.com/"),
            stripe_webhook_secrets: var(
                "GPUMARKET_STRIPE_WEBHOOK_SECRETS",
                DEV_STRIPE_WEBHOOK_SECRET,
            )
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect(),
            stripe_webhook_tolerance_seconds: parsed(
                "GPUMARKET_STRIPE_WEBHOOK_TOLERANCE_SECONDS",
                300,
            )?,
            stripe_publishable_key: publishable_key(
                env::var("GPUMARKET_STRIPE_PUBLISHABLE_KEY").ok(),
            )?,
            public_url: var("GPUMARKET_PUBLIC_URL", "http://127.0.0.1:8080")
                .trim_end_matches('/')
                .to_owned(),
            top_up_min_amount: var("GPUMARKET_TOP_UP_MIN_AMOUNT", "5"),
            top_up_max_amount: var("GPUMARKET_TOP_UP_MAX_AMOUNT", "10000"),
            invoice_period: var("GPUMARKET_INVOICE_PERIOD", "monthly"),
            payout_interval_secs: parsed("GPUMARKET_PAYOUT_INTERVAL_SECS", 86_400)?,
            payout_minimum: var("GPUMARKET_PAYOUT_MINIMUM", "10.00"),
            payout_hold_seconds: parsed("GPUMARKET_PAYOUT_HOLD_SECONDS", 86_400)?,
            invoice_schedule_secs: parsed("GPUMARKET_INVOICE_SCHEDULE_SECS", 300)?,
            rate_limit_per_minute: parsed("GPUMARKET_RATE_LIMIT_PER_MINUTE", 1200)?,
            rate_limit_burst: parsed("GPUMARKET_RATE_LIMIT_BURST", 240)?,
            web_dir: var("GPUMARKET_WEB_DIR", "web/dist"),
            production: run_mode(&var("GPUMARKET_ENV", "development"))?,
        })
    }

    /// In production, an error naming every secret of `secrets` that still
    /// has its development value (or is empty); in development, Ok.
    pub fn refuse_development_secrets(&self, secrets: &[Secret]) -> Result<(), PlatformError> {
        if !self.production {
            return Ok(());
        }
        let mut found = Vec::new();
        for secret in secrets {
            match secret {
                Secret::JwtKeys => {
                    if self
                        .jwt_keys
                        .iter()
                        .any(|(_, key)| key == DEV_JWT_SECRET || key.len() < 32 || placeholder(key))
                    {
                        found.push("GPUMARKET_JWT_KEYS (the development key, or a key under 32 characters)");
                    }
                }
                Secret::ServiceToken => {
                    if self.service_token == DEV_SERVICE_TOKEN
                        || self.service_token.len() < 16
                        || placeholder(&self.service_token)
                    {
                        found.push("GPUMARKET_SERVICE_TOKEN (the development token, or under 16 characters)");
                    }
                }
                Secret::Stripe => {
                    if self.stripe_webhook_secrets.is_empty()
                        || self
                            .stripe_webhook_secrets
                            .iter()
                            .any(|s| s == DEV_STRIPE_WEBHOOK_SECRET || placeholder(s))
                    {
                        found.push("GPUMARKET_STRIPE_WEBHOOK_SECRETS (the development secret)");
                    }
                    if self.stripe_secret_key == DEV_STRIPE_SECRET_KEY
                        || placeholder(&self.stripe_secret_key)
                    {
                        found.push("GPUMARKET_STRIPE_SECRET_KEY (the development key)");
                    }
                }
                Secret::RabbitmqManagement => {
                    if self.rabbitmq_management_url == DEV_MANAGEMENT_URL
                        || self.rabbitmq_management_url.contains("://guest:guest@")
                        || placeholder(&self.rabbitmq_management_url)
                    {
                        found.push(
                            "GPUMARKET_RABBITMQ_MANAGEMENT_URL (the guest:guest credentials)",
                        );
                    }
                }
            }
        }
        if found.is_empty() {
            return Ok(());
        }
        Err(PlatformError::Config(format!(
            "GPUMARKET_ENV=production refuses development secrets; set {}",
            found.join(", ")
        )))
    }

    /// Reads `service`'s port (`GPUMARKET_<NAME>_PORT`, else `default_port`)
    /// and URL (`GPUMARKET_<NAME>_URL`, else this host at that port); the
    /// registry calls it for every service it knows.
    pub fn configure_service(
        &mut self,
        service: &str,
        default_port: u16,
    ) -> Result<(), PlatformError> {
        let upper = service.to_ascii_uppercase();
        let port = parsed(&format!("GPUMARKET_{upper}_PORT"), default_port)?;
        self.ports.set(service, port);
        let url = var(
            &format!("GPUMARKET_{upper}_URL"),
            &format!("http://127.0.0.1:{port}"),
        );
        self.urls.set(service, url);
        Ok(())
    }

    /// Where `service` is reached: its configured URL, else this host at its
    /// port.
    pub fn url(&self, service: &str) -> String {
        self.urls
            .0
            .get(service)
            .cloned()
            .unwrap_or_else(|| format!("http://127.0.0.1:{}", self.ports.get(service)))
    }

    /// The database URL a service connects with: its own role when roles per
    /// service are on, the configured user otherwise.
    pub fn database_url_for(&self, service: &str) -> String {
        if !self.db_role_per_service {
            return self.database_url.clone();
        }
        match self.database_url.split_once("://") {
            Some((scheme, rest)) => {
                let host_part = rest.split_once('@').map_or(rest, |(_, host)| host);
                format!("{scheme}://gpumarket_{service}@{host_part}")
            }
            None => self.database_url.clone(),
        }
    }

    /// The RabbitMQ vhost of `amqp_url` (percent-decoded; `/` when the URL
    /// names none). Per-machine agent users get their permissions there.
    pub fn amqp_vhost(&self) -> Result<String, PlatformError> {
        let url = self.parsed_amqp_url()?;
        match url.path().strip_prefix('/') {
            None => Ok("/".to_owned()),
            Some(raw) => percent_decode(raw)
                .ok_or_else(|| PlatformError::Config("GPUMARKET_AMQP_URL: bad vhost".into())),
        }
    }

    /// `amqp_url` without its credentials, which is what a host agent is
    /// given: it connects with its own (`agent-<machine_id>` and its token).
    pub fn amqp_url_for_agents(&self) -> Result<String, PlatformError> {
        let url = self.parsed_amqp_url()?;
        let port = url.port().unwrap_or(match url.scheme() {
            "amqps" => 5671,
            _ => 5672,
        });
        Ok(format!(
            "{}://{}:{port}/{}",
            url.scheme(),
            url.host_str().unwrap_or("127.0.0.1"),
            percent_encode_segment(&self.amqp_vhost()?)
        ))
    }

    fn parsed_amqp_url(&self) -> Result<reqwest::Url, PlatformError> {
        reqwest::Url::parse(&self.amqp_url)
            .map_err(|e| PlatformError::Config(format!("GPUMARKET_AMQP_URL: {e}")))
    }

    /// Replaces the database name in the URL (tests clone per-test databases).
    pub fn with_database(mut self, name: &str) -> Self {
        self.database_url = replace_db_name(&self.database_url, name);
        self
    }
}

/// `postgres://u@h:p/db?x` with `db` replaced by `name`.
pub fn replace_db_name(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let prefix = base.rsplit_once('/').map_or(base, |(p, _)| p);
    match query {
        Some(q) => format!("{prefix}/{name}?{q}"),
        None => format!("{prefix}/{name}"),
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters, so a vhost
/// such as `/` becomes one path segment (`%2F`).
pub fn percent_encode_segment(raw: &str) -> String {
    raw.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Decodes `%XX` escapes; None when an escape is malformed or the result is
/// not UTF-8.
pub fn percent_decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = raw.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn parse_jwt_keys(raw: &str) -> Result<Vec<(String, String)>, PlatformError> {
    let keys: Vec<(String, String)> = raw
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|pair| {
            pair.split_once(':')
                .map(|(kid, secret)| (kid.trim().to_owned(), secret.trim().to_owned()))
                .ok_or_else(|| {
                    PlatformError::Config("GPUMARKET_JWT_KEYS: expected kid:secret".into())
                })
        })
        .collect::<Result<_, _>>()?;
    if keys.is_empty() {
        return Err(PlatformError::Config("GPUMARKET_JWT_KEYS is empty".into()));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_prints_no_secret() {
        let mut config = Config::from_env().unwrap();
        config.service_token = "tok-3f9a-secret".into();
        config.jwt_keys = vec![("k1".into(), "jwt-9c1e-secret".into())];
        config.stripe_secret_key = "sk_test_77aa-secret".into();
        config.stripe_webhook_secrets = vec!["whsec_5b2d-secret".into()];
        config.database_url = "postgres://u:pg-4e7f-secret@db/x".into();
        config.amqp_url = "amqp://u:mq-1d2c-secret@mq/v".into();
        config.rabbitmq_management_url = "http://u:mgmt-8b8b-secret@mq:15672".into();
        let printed = format!("{config:?}");
        assert!(!printed.contains("-secret"), "{printed}");
        assert!(printed.contains("stripe_configured: true"));
    }

    #[test]
    fn only_a_publishable_stripe_key_is_published() {
        assert_eq!(publishable_key(None).unwrap(), None);
        assert_eq!(publishable_key(Some("  ".into())).unwrap(), None);
        assert_eq!(
            publishable_key(Some(" pk_test_123 ".into())).unwrap(),
            Some("pk_test_123".into())
        );
        for secret in ["sk_live_123", "rk_test_123", "whsec_123"] {
            assert!(publishable_key(Some(secret.into())).is_err(), "{secret}");
        }
    }

    #[test]
    fn database_name_is_replaced_keeping_the_query() {
        assert_eq!(
            replace_db_name(
                "postgres://postgres@127.0.0.1:5432/gpumarket?sslmode=disable",
                "t1"
            ),
            "postgres://postgres@127.0.0.1:5432/t1?sslmode=disable"
        );
    }

    #[test]
    fn agents_get_the_vhost_and_host_without_credentials() {
        let mut config = Config::from_env().unwrap();
        config.amqp_url = "amqp://guest:guest@127.0.0.1:5672/%2f".into();
        assert_eq!(config.amqp_vhost().unwrap(), "/");
        assert_eq!(
            config.amqp_url_for_agents().unwrap(),
            "amqp://127.0.0.1:5672/%2F"
        );
        config.amqp_url = "amqp://u:p@localhost".into();
        assert_eq!(config.amqp_vhost().unwrap(), "/");
        config.amqp_url = "amqp://u:p@rabbit:5673/gpumarket_test_1".into();
        assert_eq!(config.amqp_vhost().unwrap(), "gpumarket_test_1");
        assert_eq!(
            config.amqp_url_for_agents().unwrap(),
            "amqp://rabbit:5673/gpumarket_test_1"
        );
    }

    #[test]
    fn run_modes() {
        assert!(run_mode("production").unwrap());
        assert!(run_mode(" Production ").unwrap());
        assert!(!run_mode("development").unwrap());
        assert!(run_mode("staging").is_err());
    }

    #[test]
    fn production_refuses_each_development_secret() {
        let mut config = Config::from_env().unwrap();
        config.production = false;
        assert!(config.refuse_development_secrets(&Secret::ALL).is_ok());
        config.production = true;
        config.jwt_keys = vec![("dev-1".into(), DEV_JWT_SECRET.into())];
        config.service_token = DEV_SERVICE_TOKEN.into();
        config.stripe_webhook_secrets = vec![DEV_STRIPE_WEBHOOK_SECRET.into()];
        config.stripe_secret_key = DEV_STRIPE_SECRET_KEY.into();
        config.rabbitmq_management_url = DEV_MANAGEMENT_URL.into();
        for (secret, variable) in [
            (Secret::JwtKeys, "GPUMARKET_JWT_KEYS"),
            (Secret::ServiceToken, "GPUMARKET_SERVICE_TOKEN"),
            (Secret::Stripe, "GPUMARKET_STRIPE_WEBHOOK_SECRETS"),
            (
                Secret::RabbitmqManagement,
                "GPUMARKET_RABBITMQ_MANAGEMENT_URL",
            ),
        ] {
            let err = config.refuse_development_secrets(&[secret]).unwrap_err();
            assert!(err.to_string().contains(variable), "{err}");
        }
        // A process is refused only for the secrets it reads.
        config.service_token = "a-long-random-service-token-0123".into();
        assert!(
            config
                .refuse_development_secrets(&[Secret::ServiceToken])
                .is_ok()
        );
        // The development key is refused even as a second (verifying) key.
        config.jwt_keys = vec![
            ("k2".into(), "x".repeat(40)),
            ("dev-1".into(), DEV_JWT_SECRET.into()),
        ];
        assert!(
            config
                .refuse_development_secrets(&[Secret::JwtKeys])
                .is_err()
        );
        config.jwt_keys = vec![("k2".into(), "x".repeat(40))];
        assert!(
            config
                .refuse_development_secrets(&[Secret::JwtKeys])
                .is_ok()
        );
        // The Kubernetes template's placeholders are not secrets either.
        config.jwt_keys = vec![(
            "REPLACE-ME-kid-1".into(),
            "REPLACE-ME-at-least-32-random-bytes".into(),
        )];
        assert!(
            config
                .refuse_development_secrets(&[Secret::JwtKeys])
                .is_err()
        );
        config.jwt_keys = vec![("k2".into(), "x".repeat(40))];
        config.rabbitmq_management_url = "http://gpm:s3cret-pass@rabbit:15672".into();
        assert!(
            config
                .refuse_development_secrets(&[Secret::RabbitmqManagement])
                .is_ok()
        );
        config.stripe_webhook_secrets = vec!["whsec_real".into()];
        config.stripe_secret_key = "sk_live_real".into();
        assert!(config.refuse_development_secrets(&Secret::ALL).is_ok());
    }

    #[test]
    fn jwt_keys_parse_in_order() {
        let keys = parse_jwt_keys("a:one, b:two").unwrap();
        assert_eq!(keys[0], ("a".into(), "one".into()));
        assert_eq!(keys[1], ("b".into(), "two".into()));
        assert!(parse_jwt_keys("nokid").is_err());
    }
}
