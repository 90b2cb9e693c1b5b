//! What a service is, said once by the service itself: its name (which is
//! also its `gpumarket serve` argument, its database role and schema, and
//! the stem of its `GPUMARKET_<NAME>_*` variables), the secrets it reads,
//! the queues it consumes and their bindings, its HTTP server and its
//! background tasks (outbox relay, consumers, schedules). Its own group of
//! settings is a type of its crate ([`crate::settings`]). `gpumarket dev`, `gpumarket serve`, `gpumarket services`
//! (which run-split and the deploy checks read) and the test harness take
//! the list of services from the registry in `src/services.rs`, one line
//! per service, and nothing else: adding a service is its own crate and
//! that line (docs/architecture.md, "Adding a service").

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::Config;
use crate::config::Secret;

/// An error a service's start-up reports (each crate has its own type).
pub type StartError = Box<dyn std::error::Error + Send + Sync>;

/// A background task; it runs until the process ends.
pub type TaskFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// When a task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    /// Whenever the service runs (a schedule of its own).
    Always,
    /// Only with messaging (outbox relays, consumers, sweepers): a test that
    /// runs the services alone leaves these out.
    Messaging,
}

pub struct Task {
    pub name: &'static str,
    pub kind: TaskKind,
    pub future: TaskFuture,
}

impl Task {
    pub fn new(
        name: &'static str,
        kind: TaskKind,
        future: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        Self {
            name,
            kind,
            future: Box::pin(future),
        }
    }

    /// A task whose future ends with an error, logged when it does.
    pub fn fallible<E: std::fmt::Display>(
        name: &'static str,
        kind: TaskKind,
        future: impl Future<Output = Result<(), E>> + Send + 'static,
    ) -> Self {
        Self::new(name, kind, async move {
            if let Err(error) = future.await {
                tracing::error!(task = name, %error, "background task stopped");
            }
        })
    }
}

/// One service of the marketplace.
pub trait Service: Send + Sync {
    /// `catalog`, `billing`, …
    fn name(&self) -> &'static str;

    /// The secrets it reads; production refuses to start while one of them
    /// has its development value.
    fn secrets(&self) -> &'static [Secret];

    /// The variables among its secrets (the shared ones it names in
    /// [`Service::secrets`], and its own) that still have development
    /// values; a production process exits naming them.
    fn development_secrets(&self, config: &Config) -> Result<Vec<&'static str>, StartError> {
        Ok(config.development_secrets(self.secrets()))
    }

    /// The queues it consumes, with their bindings; every process declares
    /// every service's ([`crate::broker::declare_topology`]), so none of
    /// them misses a message published before it started.
    fn queues(&self, _config: &Config) -> Result<Vec<crate::broker::QueueSpec>, StartError> {
        Ok(Vec::new())
    }

    /// The message kinds (routing keys) it publishes, through its outbox.
    /// `deploy/topology.json` lists them, `deploy/validate.py` holds
    /// api-specs/asyncapi.yaml's send operations to them, and the system
    /// tests check that no service's outbox carries another kind.
    fn publishes(&self) -> &'static [&'static str] {
        &[]
    }

    /// The port it listens on unless `GPUMARKET_<NAME>_PORT` says otherwise.
    fn default_port(&self) -> u16;

    /// The port it is configured to listen on (0: any free port).
    fn port(&self, config: &Config) -> u16 {
        config.ports.get(self.name())
    }

    /// Records where it listens, so that services started after it reach it.
    fn bound(&self, config: &mut Config, url: String, port: u16) {
        config.ports.set(self.name(), port);
        config.urls.set(self.name(), url);
    }

    /// Builds its HTTP server; returns it, not yet awaited, and its port.
    fn server(&self, config: Arc<Config>) -> Result<(actix_web::dev::Server, u16), StartError>;

    /// Its background tasks, given the configuration with every service's
    /// address.
    fn tasks(&self, config: Arc<Config>) -> Result<Vec<Task>, StartError>;
}

/// The database pool of `schema`, connecting as its own role when roles per
/// service are on.
pub fn pool(config: &Config, schema: &str) -> Result<crate::Db, crate::PlatformError> {
    crate::Db::connect(&config.database_url_for(schema), config.db_pool_size)
}
