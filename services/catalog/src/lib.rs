//! Catalog owns the supply side of the market: hosts' machines with their
//! specs and prices, the offers renters search, and GPU allocations. It is the
//! only writer of capacity: an allocation is a conditional update of the
//! machine's allocated-GPU counter, so two orders can never get one GPU.

mod allocations;
pub mod error;
mod machines;
mod offers;
mod routes;

use std::sync::Arc;

use platform::{Config, Db};

pub use error::Error;
pub use machines::{list_machine, register_machine, set_pricing};

pub const SCHEMA: &str = "catalog";

/// Starts the catalog's HTTP API; returns the server and its port.
pub fn build(config: Arc<Config>, db: Db) -> Result<(actix_web::dev::Server, u16), Error> {
    let currency = actix_web::web::Data::new(routes::Currency(config.currency.clone()));
    Ok(platform::http::serve(
        &config.bind_host,
        config.ports.catalog,
        db,
        config.service_token.clone(),
        move |cfg| {
            cfg.app_data(currency.clone());
            routes::configure(cfg);
        },
    )?)
}
