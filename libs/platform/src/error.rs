use thiserror::Error;

/// Failures of the shared plumbing. Services wrap this in their own error
/// enum; all of these are internal errors from the caller's point of view.
#[derive(Debug, Error)]
pub enum PlatformError {
    #[error("database: {0}")]
    Database(#[from] diesel::result::Error),
    #[error("database connection: {0}")]
    Connection(#[from] diesel::ConnectionError),
    #[error("database pool: {0}")]
    Pool(#[from] diesel::r2d2::PoolError),
    #[error("migrations: {0}")]
    Migration(String),
    #[error("broker: {0}")]
    Broker(#[from] lapin::Error),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("http: {0}")]
    Http(#[from] reqwest::Error),
    #[error("blocking task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
    #[error("configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Other(String),
}
