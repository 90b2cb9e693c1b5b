//! The provisioning worker: consumes `provisioner.jobs` and turns an
//! allocated instance into a user-ready environment by running the steps of
//! the service model through a [`Driver`]. The database, not the unacked
//! delivery, holds a job's progress: each step is recorded as started before
//! it runs and as finished after, so a worker killed mid-job resumes at the
//! unfinished step when the message is redelivered, and reports the instance
//! ready exactly once (ordering's transition is idempotent too).

pub mod driver;
pub mod error;
mod jobs;
pub mod simulated;

use std::sync::Arc;

use platform::internal::InternalClient;
use platform::{Config, Db};

pub use driver::{Driver, Step};
pub use error::Error;
pub use simulated::SimulatedDriver;

pub const SCHEMA: &str = "provisioner";

/// Runs the worker until the process ends.
pub async fn run(config: Arc<Config>, db: Db) -> Result<(), Error> {
    let driver: Arc<dyn Driver> = Arc::new(SimulatedDriver::from_config(db.clone(), &config)?);
    let worker = jobs::Worker {
        db,
        driver,
        ordering: InternalClient::new(config.urls.ordering.clone(), config.service_token.clone()),
        step_attempts: config.step_attempts.max(1),
    };
    let queue = config.provisioner_queue.clone();
    platform::consumer::run(config, queue, move |envelope| {
        let worker = worker.clone();
        async move { worker.handle(envelope).await }
    })
    .await;
    Ok(())
}
