#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration: {0}")]
    Config(String),
    #[error("step {step} failed: {reason}")]
    Step { step: &'static str, reason: String },
    #[error(transparent)]
    Platform(#[from] platform::PlatformError),
    #[error("database: {0}")]
    Database(#[from] diesel::result::Error),
    #[error(transparent)]
    Remote(#[from] platform::internal::RemoteError),
}
