//! Plumbing every gpumarket service and worker shares, written once:
//! configuration, telemetry, the database pool and migrations, the RabbitMQ
//! connection and topology, the transactional outbox and its relay, the
//! idempotent consumer (inbox), and internal HTTP between services.

pub mod api_error;
pub mod broker;
pub mod config;
pub mod consumer;
pub mod correlation;
pub mod db;
pub mod endpoint;
pub mod error;
pub mod http;
pub mod internal;
pub mod metrics;
pub mod notify;
pub mod outbox;
pub mod rabbitmq_admin;
pub mod sequence;
pub mod service;
pub mod settings;
pub mod telemetry;
pub mod test_db;

pub use config::Config;
pub use db::Db;
pub use error::PlatformError;
