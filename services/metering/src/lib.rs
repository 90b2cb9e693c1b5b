//! Metering owns usage: one interval per instance, meter and run, opened by
//! the `running` event (T0) and closed by the `stopped` event (T1). Billed
//! seconds are `floor(T1 − T0)` computed from the two recorded instants,
//! never by counting ticks. The two events may arrive in either order, twice,
//! or late: the interval comes out the same and is announced once.

pub mod error;
mod intervals;
mod routes;

use std::sync::Arc;

use platform::{Config, Db};

pub use error::Error;
pub use intervals::apply_event;

pub const SCHEMA: &str = "metering";

/// Starts the metering service's HTTP API; returns the server and its port.
pub fn build(config: Arc<Config>, db: Db) -> Result<(actix_web::dev::Server, u16), Error> {
    Ok(platform::http::serve(
        &config.bind_host,
        config.ports.metering,
        db,
        config.service_token.clone(),
        routes::configure,
    )?)
}

/// Consumes lifecycle events forever (idempotently, through the inbox).
pub async fn run_consumer(config: Arc<Config>, db: Db) {
    let events = config.events_exchange.clone();
    let queue = config.metering_queue.clone();
    platform::consumer::run_inbox(config, db, queue, SCHEMA, move |conn, envelope| {
        apply_event(conn, envelope, &events)
    })
    .await
}
