use serde::{Deserialize, Serialize};

/// The error codes of the public API (`extensions.code` in GraphQL). Internal
/// HTTP errors carry the same code in their body so the gateway can pass a
/// service's verdict through unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    Unauthenticated,
    Forbidden,
    NotFound,
    Validation,
    QuotaExceeded,
    InsufficientCapacity,
    InsufficientFunds,
    Conflict,
    /// The machine's price at commit is above the order's maximum.
    PriceAboveMax,
    /// Too many requests from one API key, token or address; the HTTP
    /// answer says when to retry (`Retry-After`).
    RateLimited,
    /// The deployment lacks what the request needs (e.g. no Stripe secret
    /// key for card top-ups): an operator must configure it, and retrying
    /// does not help until then. HTTP 501.
    NotConfigured,
    Unavailable,
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Unauthenticated => "UNAUTHENTICATED",
            ErrorCode::Forbidden => "FORBIDDEN",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::Validation => "VALIDATION",
            ErrorCode::QuotaExceeded => "QUOTA_EXCEEDED",
            ErrorCode::InsufficientCapacity => "INSUFFICIENT_CAPACITY",
            ErrorCode::InsufficientFunds => "INSUFFICIENT_FUNDS",
            ErrorCode::Conflict => "CONFLICT",
            ErrorCode::PriceAboveMax => "PRICE_ABOVE_MAX",
            ErrorCode::RateLimited => "RATE_LIMITED",
            ErrorCode::NotConfigured => "NOT_CONFIGURED",
            ErrorCode::Unavailable => "UNAVAILABLE",
            ErrorCode::Internal => "INTERNAL",
        }
    }

    /// The HTTP status an internal endpoint answers with for this code.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::Unauthenticated => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::Validation => 422,
            ErrorCode::QuotaExceeded => 429,
            ErrorCode::InsufficientCapacity => 409,
            ErrorCode::InsufficientFunds => 402,
            ErrorCode::Conflict => 409,
            ErrorCode::PriceAboveMax => 409,
            ErrorCode::RateLimited => 429,
            ErrorCode::NotConfigured => 501,
            ErrorCode::Unavailable => 503,
            ErrorCode::Internal => 500,
        }
    }
}

/// The JSON body of every internal HTTP error.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
    /// Structured detail for the client (e.g. which quota and its numbers);
    /// the gateway adds its fields to `extensions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialize_as_the_public_names() {
        for code in [
            ErrorCode::Unauthenticated,
            ErrorCode::QuotaExceeded,
            ErrorCode::InsufficientCapacity,
            ErrorCode::InsufficientFunds,
            ErrorCode::RateLimited,
            ErrorCode::NotConfigured,
        ] {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
    }
}
