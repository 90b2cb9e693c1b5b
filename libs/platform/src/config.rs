//! The configuration every process shares, from environment variables:
//! where the database and the broker are, the exchanges, the bind address,
//! each service's port and URL, the service token, the marketplace's
//! currency and the run mode. Every default works on a developer machine
//! with local Postgres and RabbitMQ; every name (database, roles, exchanges,
//! vhost) is configurable so a test can isolate itself. A service's own
//! settings are its own group ([`crate::settings`]), carried here by type.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::PlatformError;
use crate::settings::{ServiceSettings, SettingsMap, parsed, placeholder, var};

pub use crate::settings::SecretString;

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
    /// Topic exchange host agents publish to (`agent.<machine_id>.<kind>`).
    /// `GPUMARKET_AGENTS_EXCHANGE`.
    pub agents_exchange: String,
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
    /// Base URLs other services are reached at; default to the local ports.
    pub urls: Urls,
    /// Shared secret on internal calls (`X-Service-Token`).
    /// `GPUMARKET_SERVICE_TOKEN`.
    pub service_token: SecretString,
    /// Settlement currency (ISO 4217) of the whole marketplace.
    /// `GPUMARKET_CURRENCY`.
    pub currency: String,
    /// How often the outbox relay looks for unsent messages without being
    /// woken: the relay is woken by the commit that wrote them (see
    /// `listen_notifications`), so this only bounds how late a message is
    /// when a notification is lost. `GPUMARKET_OUTBOX_POLL_MS`.
    pub outbox_poll_ms: u64,
    /// Whether the outbox relays and the provisioner's job runner hold a
    /// Postgres `LISTEN` connection and wake on the commits that give them
    /// work (platform::notify); false leaves only the slow polls.
    /// `GPUMARKET_LISTEN_NOTIFICATIONS`.
    pub listen_notifications: bool,
    /// How often a `LISTEN` connection is checked for notifications that
    /// arrived (a read of the socket's buffer, no query).
    /// `GPUMARKET_NOTIFICATION_CHECK_MS`.
    pub notification_check_ms: u64,
    /// `json` or `pretty`. `GPUMARKET_LOG_FORMAT`.
    pub log_format: String,
    /// `GPUMARKET_ENV`: `development` (the default) or `production`, which
    /// refuses development secrets at start-up
    /// ([`Config::development_secrets`] and each service's own), turns
    /// GraphiQL off and keeps introspection for logged-in callers.
    pub production: bool,
    /// Every queue a service or worker consumes, with its bindings, as
    /// each describes it; the registry fills it, and every process declares
    /// them all ([`crate::broker::declare_topology`]).
    pub queues: Vec<crate::broker::QueueSpec>,
    /// Each service's own group of settings, by type ([`crate::settings`]).
    settings: SettingsMap,
}

impl std::fmt::Debug for Config {
    /// The settings that say where and how the process runs, and each
    /// service's group (whose secrets are [`SecretString`]s); never the
    /// service token, nor the database, broker and management URLs (they
    /// may carry passwords).
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
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The development defaults of the shared secrets, published in this
/// repository: anyone can call a service with them.
pub const DEV_SERVICE_TOKEN: &str = "dev-service-token";
const DEV_MANAGEMENT_URL: &str = "http://guest:guest@127.0.0.1:15672";

/// A shared secret a process reads; each service names the ones it uses
/// (its own secrets are checked by the service), and in production a
/// process refuses to start while one of them has its development value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secret {
    /// `GPUMARKET_SERVICE_TOKEN` (every internal call).
    ServiceToken,
    /// The credentials in `GPUMARKET_RABBITMQ_MANAGEMENT_URL` (catalog makes
    /// the agents' broker users with them).
    RabbitmqManagement,
}

impl Secret {
    pub const ALL: [Secret; 2] = [Secret::ServiceToken, Secret::RabbitmqManagement];
}

/// The message a production process exits with when `found` (variables
/// with development values) is not empty.
pub fn refuse_development_secrets(found: &[&'static str]) -> Result<(), PlatformError> {
    if found.is_empty() {
        return Ok(());
    }
    Err(PlatformError::Config(format!(
        "GPUMARKET_ENV=production refuses development secrets; set {}",
        found.join(", ")
    )))
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

impl Config {
    pub fn from_env() -> Result<Self, PlatformError> {
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
            agents_exchange: var("GPUMARKET_AGENTS_EXCHANGE", "gpumarket.agents"),
            delivery_limit: parsed("GPUMARKET_DELIVERY_LIMIT", 5)?,
            prefetch: parsed("GPUMARKET_PREFETCH", 16)?,
            batch_max: parsed("GPUMARKET_BATCH_MAX", 500)?,
            batch_wait_ms: parsed("GPUMARKET_BATCH_WAIT_MS", 50)?,
            bind_host: var("GPUMARKET_BIND_HOST", "127.0.0.1"),
            ports: Ports::default(),
            urls: Urls::default(),
            service_token: var("GPUMARKET_SERVICE_TOKEN", DEV_SERVICE_TOKEN).into(),
            currency: var("GPUMARKET_CURRENCY", "USD"),
            outbox_poll_ms: parsed("GPUMARKET_OUTBOX_POLL_MS", 1000)?,
            listen_notifications: parsed("GPUMARKET_LISTEN_NOTIFICATIONS", true)?,
            notification_check_ms: parsed("GPUMARKET_NOTIFICATION_CHECK_MS", 1)?,
            log_format: var("GPUMARKET_LOG_FORMAT", "pretty"),
            production: run_mode(&var("GPUMARKET_ENV", "development"))?,
            queues: Vec::new(),
            settings: SettingsMap::default(),
        })
    }

    /// The group `T` of a service's settings: the one set on this
    /// configuration, else read from the environment.
    pub fn settings<T: ServiceSettings>(&self) -> Result<Arc<T>, PlatformError> {
        match self.settings.get::<T>() {
            Some(found) => Ok(found),
            None => T::from_env(self.production).map(Arc::new),
        }
    }

    /// Sets the group `T` (a test's faster schedule, say).
    pub fn set_settings<T: ServiceSettings>(&mut self, settings: T) {
        self.settings.set(settings);
    }

    /// Changes the group `T` as it is now (set, or read from the
    /// environment).
    pub fn update_settings<T: ServiceSettings>(
        &mut self,
        change: impl FnOnce(&mut T),
    ) -> Result<(), PlatformError> {
        let mut settings = T::clone(&*self.settings::<T>()?);
        change(&mut settings);
        self.set_settings(settings);
        Ok(())
    }

    /// The variables among `secrets` that still have their development
    /// value (or a template's placeholder); empty in development.
    pub fn development_secrets(&self, secrets: &[Secret]) -> Vec<&'static str> {
        if !self.production {
            return Vec::new();
        }
        let mut found = Vec::new();
        for secret in secrets {
            match secret {
                Secret::ServiceToken => {
                    let token = self.service_token.expose();
                    if token == DEV_SERVICE_TOKEN || token.len() < 16 || placeholder(token) {
                        found.push("GPUMARKET_SERVICE_TOKEN (the development token, or under 16 characters)");
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
        found
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_prints_no_secret() {
        let mut config = Config::from_env().unwrap();
        config.service_token = "tok-3f9a-secret".into();
        config.database_url = "postgres://u:pg-4e7f-secret@db/x".into();
        config.amqp_url = "amqp://u:mq-1d2c-secret@mq/v".into();
        config.rabbitmq_management_url = "http://u:mgmt-8b8b-secret@mq:15672".into();
        let printed = format!("{config:?}");
        assert!(!printed.contains("-secret"), "{printed}");
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
    fn production_refuses_each_shared_development_secret() {
        let mut config = Config::from_env().unwrap();
        config.production = false;
        config.service_token = DEV_SERVICE_TOKEN.into();
        config.rabbitmq_management_url = DEV_MANAGEMENT_URL.into();
        assert!(config.development_secrets(&Secret::ALL).is_empty());
        config.production = true;
        for (secret, variable) in [
            (Secret::ServiceToken, "GPUMARKET_SERVICE_TOKEN"),
            (
                Secret::RabbitmqManagement,
                "GPUMARKET_RABBITMQ_MANAGEMENT_URL",
            ),
        ] {
            let found = config.development_secrets(&[secret]);
            let err = refuse_development_secrets(&found).unwrap_err();
            assert!(err.to_string().contains(variable), "{err}");
        }
        // A process is refused only for the secrets it reads.
        config.service_token = "a-long-random-service-token-0123".into();
        assert!(
            config
                .development_secrets(&[Secret::ServiceToken])
                .is_empty()
        );
        config.service_token = "REPLACE-ME-a-long-random-token".into();
        assert!(
            !config
                .development_secrets(&[Secret::ServiceToken])
                .is_empty()
        );
        config.rabbitmq_management_url = "http://gpm:s3cret-pass@rabbit:15672".into();
        assert!(
            config
                .development_secrets(&[Secret::RabbitmqManagement])
                .is_empty()
        );
    }
}
