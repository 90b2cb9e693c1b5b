use actix_web::ResponseError;
use actix_web::http::StatusCode;
use contracts::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Validation(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    InsufficientFunds(String),
    /// Past the tenant's monthly budget: the code quota refuses budgets with.
    #[error("{0}")]
    QuotaExceeded(String),
    /// Evidence billing needs from another service (the catalog's heartbeat
    /// gaps) could not be had: nothing was changed, the caller retries.
    #[error("{0}")]
    Unavailable(String),
    /// Stripe did not answer, or answered with a failure that is not the
    /// caller's: the request may be retried with the same idempotency key.
    #[error("payment provider: {0}")]
    PaymentProvider(String),
    /// No Stripe secret key is configured, or Stripe refused the configured
    /// one: an operator has to act, a retry cannot help.
    #[error("{0}")]
    NotConfigured(String),
    /// A webhook that must not be believed (signature, timestamp, shape):
    /// answered 400 with nothing written.
    #[error("{0}")]
    WebhookRejected(String),
    #[error(transparent)]
    Platform(#[from] platform::PlatformError),
    #[error("database: {0}")]
    Database(#[from] diesel::result::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// Another service (quota, metering) answered with an error.
    #[error(transparent)]
    Remote(#[from] platform::internal::RemoteError),
}

impl Error {
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Validation(_) => ErrorCode::Validation,
            Error::NotFound(_) => ErrorCode::NotFound,
            Error::Conflict(_) => ErrorCode::Conflict,
            Error::InsufficientFunds(_) => ErrorCode::InsufficientFunds,
            Error::QuotaExceeded(_) => ErrorCode::QuotaExceeded,
            Error::Unavailable(_) => ErrorCode::Unavailable,
            Error::PaymentProvider(_) => ErrorCode::Unavailable,
            Error::NotConfigured(_) => ErrorCode::NotConfigured,
            Error::WebhookRejected(_) => ErrorCode::Validation,
            Error::Platform(_) | Error::Database(_) | Error::Io(_) => ErrorCode::Internal,
            Error::Remote(e) => e.code,
        }
    }
}

/// What a caller is told when the deployment has no Stripe secret key.
pub const PAYMENT_PROVIDER_NOT_CONFIGURED: &str = "card payments are not configured on this deployment: \
     the payment provider (Stripe) has no secret key; ask the operator";

/// What a caller is told when Stripe does not answer. Every request that
/// reaches Stripe is safe to repeat: top-ups by their idempotencyKey, payout
/// accounts and onboarding links because a host has one account.
pub const PAYMENT_PROVIDER_UNAVAILABLE: &str = "the payment provider (Stripe) is unavailable; \
     try again (a top-up with the same idempotencyKey)";

impl ResponseError for Error {
    fn status_code(&self) -> StatusCode {
        match self {
            // Stripe's contract: any non-2xx is a failed delivery; 400 says
            // "this request is bad" rather than "unprocessable entity".
            Error::WebhookRejected(_) => StatusCode::BAD_REQUEST,
            _ => platform::http::status_for(self.code()),
        }
    }

    fn error_response(&self) -> actix_web::HttpResponse {
        match self {
            Error::WebhookRejected(message) => {
                actix_web::HttpResponse::BadRequest().json(contracts::ErrorBody {
                    code: ErrorCode::Validation,
                    message: message.clone(),
                    details: None,
                })
            }
            // The generic answer for UNAVAILABLE hides its message; this one
            // is safe to show and tells the caller what to do.
            Error::PaymentProvider(detail) => {
                tracing::warn!(%detail, "payment provider unavailable");
                platform::http::ApiError::new(ErrorCode::Unavailable, PAYMENT_PROVIDER_UNAVAILABLE)
                    .error_response()
            }
            // Ours, safe to show: it says what to retry.
            Error::Unavailable(message) => {
                platform::http::ApiError::new(ErrorCode::Unavailable, message.clone())
                    .error_response()
            }
            Error::NotConfigured(detail) => {
                tracing::warn!(%detail, "payment provider not configured");
                platform::http::error_response(ErrorCode::NotConfigured, self)
            }
            _ => platform::http::error_response(self.code(), self),
        }
    }
}
