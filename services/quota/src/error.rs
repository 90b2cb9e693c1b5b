use actix_web::ResponseError;
use actix_web::http::StatusCode;
use contracts::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Validation(String),
    /// Every invalid field of a form-like request at once.
    #[error("{0}")]
    Fields(#[from] contracts::FieldErrors),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("wrong email or password")]
    BadCredentials,
    #[error("unknown or revoked API key")]
    BadApiKey,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    QuotaExceeded(Box<crate::limits::Violation>),
    #[error("password hashing: {0}")]
    Hashing(String),
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
            Error::Validation(_) | Error::Fields(_) => ErrorCode::Validation,
            Error::NotFound(_) => ErrorCode::NotFound,
            Error::Conflict(_) => ErrorCode::Conflict,
            Error::BadCredentials | Error::BadApiKey => ErrorCode::Unauthenticated,
            Error::Forbidden(_) => ErrorCode::Forbidden,
            Error::QuotaExceeded(_) => ErrorCode::QuotaExceeded,
            Error::Hashing(_) | Error::Platform(_) | Error::Database(_) | Error::Io(_) => {
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
        let details = match self {
            Error::QuotaExceeded(violation) => Some(violation.details()),
            Error::Fields(fields) => Some(fields.details()),
            _ => None,
        };
        platform::http::error_response_with_details(self.code(), self, details)
    }
}
