//! The crate's one error type and how it reaches a GraphQL client.

use std::sync::Arc;

use async_graphql::ErrorExtensions;
use contracts::ErrorCode;
use platform::internal::RemoteError;

/// Everything that can go wrong in the gateway, from binding its port to a
/// resolver's verdict. Clone so that a principal resolved once per request
/// can hand the same failure to every field that asks for it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GatewayError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: Arc<std::io::Error>,
    },
    #[error("configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{field}: {message}")]
    Validation {
        field: &'static str,
        message: String,
    },
    /// Too many tries of something that is throttled (failed logins);
    /// the seconds until the next one may be made.
    #[error("{what}; retry in {retry_after_seconds} s")]
    RateLimited {
        what: &'static str,
        retry_after_seconds: u64,
    },
    #[error("{}: {}", .0.code.as_str(), .0.message)]
    Remote(#[from] RemoteError),
    #[error("internal: {0}")]
    Internal(String),
}

impl GatewayError {
    pub fn validation(field: &'static str, message: impl Into<String>) -> Self {
        Self::Validation {
            field,
            message: message.into(),
        }
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Listen { .. } | Self::Config(_) | Self::Internal(_) => ErrorCode::Internal,
            Self::Unauthenticated(_) => ErrorCode::Unauthenticated,
            Self::Forbidden(_) => ErrorCode::Forbidden,
            Self::Validation { .. } => ErrorCode::Validation,
            Self::RateLimited { .. } => ErrorCode::RateLimited,
            Self::Remote(remote) => remote.code,
        }
    }

    /// What a client may read. Internal failures can carry hostnames, SQL or
    /// stack detail, so they stay in the logs.
    pub fn public_message(&self) -> String {
        match self {
            Self::Remote(remote) if remote.code != ErrorCode::Internal => remote.message.clone(),
            _ if self.code() == ErrorCode::Internal => "internal error".to_owned(),
            other => other.to_string(),
        }
    }
}

impl ErrorExtensions for GatewayError {
    fn extend(&self) -> async_graphql::Error {
        let code = self.code();
        if code == ErrorCode::Internal {
            tracing::error!(error = %self, "internal error");
        } else if code == ErrorCode::Unavailable {
            tracing::warn!(error = %self, "dependency unavailable");
        }
        // A service's structured detail (e.g. which quota refused, its limit
        // and usage) becomes extension fields beside the code.
        let details = match self {
            Self::Remote(remote) if code != ErrorCode::Internal => remote.details.clone(),
            _ => None,
        };
        async_graphql::Error::new(self.public_message()).extend_with(|_, ext| {
            if let Some(serde_json::Value::Object(fields)) = details {
                for (key, value) in fields {
                    if key != "code"
                        && let Ok(value) = async_graphql::Value::from_json(value)
                    {
                        ext.set(key, value);
                    }
                }
            }
            if let Self::RateLimited {
                retry_after_seconds,
                ..
            } = self
            {
                ext.set("retryAfterSeconds", *retry_after_seconds);
            }
            ext.set("code", code.as_str());
        })
    }
}

/// The error type resolvers return. It deliberately has no `Display`:
/// async-graphql turns any `Display` error into one without extensions, and a
/// `?` on a bare [`GatewayError`] would silently drop `extensions.code`.
#[derive(Debug, Clone)]
pub struct GqlError(pub GatewayError);

pub type GqlResult<T> = Result<T, GqlError>;

impl From<GatewayError> for GqlError {
    fn from(error: GatewayError) -> Self {
        Self(error)
    }
}

impl From<RemoteError> for GqlError {
    fn from(error: RemoteError) -> Self {
        Self(GatewayError::Remote(error))
    }
}

impl From<GqlError> for async_graphql::Error {
    fn from(error: GqlError) -> Self {
        error.0.extend()
    }
}

/// Gives every error in a response an `extensions.code`. Resolver errors
/// already have one; what is left comes from async-graphql itself (syntax,
/// unknown fields, depth and complexity limits, argument coercion), all of
/// which are faults in the request.
pub fn ensure_codes(response: &mut async_graphql::Response) {
    for error in &mut response.errors {
        let extensions = error.extensions.get_or_insert_with(Default::default);
        if extensions.get("code").is_none() {
            extensions.set("code", ErrorCode::Validation.as_str());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn code_of(error: async_graphql::Error) -> Option<String> {
        match error.extensions?.get("code")? {
            async_graphql::Value::String(s) => Some(s.clone()),
            _ => None,
        }
    }

    #[test]
    fn every_variant_maps_to_its_public_code() {
        let cases = [
            (GatewayError::Unauthenticated("x".into()), "UNAUTHENTICATED"),
            (GatewayError::Forbidden("x".into()), "FORBIDDEN"),
            (
                GatewayError::validation("gpuCount", "must be at least 1"),
                "VALIDATION",
            ),
            (
                GatewayError::RateLimited {
                    what: "too many failed logins",
                    retry_after_seconds: 9,
                },
                "RATE_LIMITED",
            ),
            (GatewayError::Internal("db down".into()), "INTERNAL"),
            (GatewayError::Config("bad".into()), "INTERNAL"),
        ];
        for (error, code) in cases {
            let gql: async_graphql::Error = GqlError(error).into();
            assert_eq!(code_of(gql).as_deref(), Some(code));
        }
    }

    #[test]
    fn remote_errors_pass_through_with_their_code_and_message() {
        for code in [
            ErrorCode::NotFound,
            ErrorCode::QuotaExceeded,
            ErrorCode::InsufficientCapacity,
            ErrorCode::InsufficientFunds,
            ErrorCode::Conflict,
            ErrorCode::Unavailable,
        ] {
            let remote = RemoteError {
                code,
                message: "the service said no".into(),
                details: None,
            };
            let gql: async_graphql::Error = GqlError::from(remote).into();
            assert_eq!(gql.message, "the service said no");
            assert_eq!(code_of(gql).as_deref(), Some(code.as_str()));
        }
    }

    #[test]
    fn internal_detail_is_not_shown() {
        let remote = RemoteError {
            code: ErrorCode::Internal,
            message: "connection to 10.0.0.7:5432 refused".into(),
            details: Some(serde_json::json!({ "host": "10.0.0.7" })),
        };
        let gql: async_graphql::Error = GqlError::from(remote).into();
        assert_eq!(gql.message, "internal error");
        let extensions = gql.extensions.clone().unwrap();
        assert!(extensions.get("host").is_none(), "internal detail leaked");
        assert_eq!(code_of(gql).as_deref(), Some("INTERNAL"));
    }

    #[test]
    fn a_services_details_become_extensions_beside_the_code() {
        let remote = RemoteError {
            code: ErrorCode::QuotaExceeded,
            message: "quota max_gpus exceeded".into(),
            details: Some(serde_json::json!({
                "quota": "max_gpus", "limit": 8, "used": 8, "requested": 1,
                "code": "NOT_A_CODE",
            })),
        };
        let gql: async_graphql::Error = GqlError::from(remote).into();
        let extensions = gql.extensions.clone().unwrap();
        assert_eq!(
            extensions.get("quota"),
            Some(&async_graphql::Value::from("max_gpus"))
        );
        assert_eq!(
            extensions.get("limit"),
            Some(&async_graphql::Value::from(8))
        );
        // The code is the gateway's, never overwritten by a detail.
        assert_eq!(code_of(gql).as_deref(), Some("QUOTA_EXCEEDED"));
    }

    #[test]
    fn validation_names_the_field() {
        let gql: async_graphql::Error = GqlError(GatewayError::validation(
            "idempotencyKey",
            "must not be empty",
        ))
        .into();
        assert!(gql.message.starts_with("idempotencyKey"));
    }
}
