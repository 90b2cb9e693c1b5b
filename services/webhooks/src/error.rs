use actix_web::ResponseError;
use actix_web::http::StatusCode;
use contracts::ErrorCode;

/// Everything the webhook service can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Validation(String),
    /// An endpoint URL the platform will not call (request forgery).
    #[error("url: {0}")]
    Refused(#[from] crate::egress::Refusal),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    QuotaExceeded(String),
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Platform(#[from] platform::PlatformError),
    #[error("database: {0}")]
    Database(#[from] diesel::result::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Validation(_) | Error::Refused(_) => ErrorCode::Validation,
            Error::NotFound(_) => ErrorCode::NotFound,
            Error::QuotaExceeded(_) => ErrorCode::QuotaExceeded,
            Error::Config(_) | Error::Platform(_) | Error::Database(_) | Error::Io(_) => {
                ErrorCode::Internal
            }
        }
    }
}

impl ResponseError for Error {
    fn status_code(&self) -> StatusCode {
        platform::http::status_for(self.code())
    }

    fn error_response(&self) -> actix_web::HttpResponse {
        platform::http::error_response(self.code(), self)
    }
}
