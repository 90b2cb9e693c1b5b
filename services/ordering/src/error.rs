use actix_web::ResponseError;
use actix_web::http::StatusCode;
use contracts::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Validation(String),
    /// Every invalid field of a request at once (`fieldErrors`).
    #[error("{0}")]
    Fields(#[from] contracts::FieldErrors),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Remote(#[from] platform::internal::RemoteError),
    #[error(transparent)]
    Platform(#[from] platform::PlatformError),
    #[error("database: {0}")]
    Database(#[from] diesel::result::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// A refusal recorded on an order or a reservation, answered again for
    /// the same idempotency key.
    pub(crate) fn recorded(code: Option<&str>, reason: Option<String>) -> Error {
        let message = reason.unwrap_or_else(|| "the request failed".into());
        let code = code
            .and_then(|c| serde_json::from_value(serde_json::Value::String(c.to_owned())).ok())
            .unwrap_or(ErrorCode::Conflict);
        Error::Remote(platform::internal::RemoteError {
            code,
            message,
            details: None,
        })
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Validation(_) | Error::Fields(_) => ErrorCode::Validation,
            Error::NotFound(_) => ErrorCode::NotFound,
            Error::Conflict(_) => ErrorCode::Conflict,
            Error::Remote(remote) => remote.code,
            Error::Platform(_) | Error::Database(_) | Error::Io(_) => ErrorCode::Internal,
        }
    }
}

impl ResponseError for Error {
    fn status_code(&self) -> StatusCode {
        platform::http::status_for(self.code())
    }

    fn error_response(&self) -> actix_web::HttpResponse {
        // A remote verdict (e.g. which quota refused) reaches the gateway whole.
        let details = match self {
            Error::Remote(remote) => remote.details.clone(),
            Error::Fields(fields) => Some(fields.details()),
            _ => None,
        };
        platform::http::error_response_with_details(self.code(), self, details)
    }
}
