//! The error an internal endpoint answers with: a status from its code and
//! a JSON body `{code, message, details}`.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use contracts::{ErrorBody, ErrorCode};

/// An error as an internal endpoint answers it: a status from the code and a
/// JSON body `{code, message}`. Internal errors keep their detail in the logs.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Option<serde_json::Value>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: None,
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status_code()).json(ErrorBody {
            code: self.code,
            message: self.message.clone(),
            details: self.details.clone(),
        })
    }
}
