//! Internal HTTP between services: a client that carries the service token
//! and the correlation id and turns error bodies back into codes, and an
//! extractor that refuses internal calls without the token.

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use contracts::{ErrorBody, ErrorCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub const SERVICE_TOKEN_HEADER: &str = "x-service-token";
pub const CORRELATION_HEADER: &str = "x-correlation-id";

/// The expected service token, registered as app data on every service.
#[derive(Clone)]
pub struct ServiceToken(pub String);

/// Proof that the caller presented the service token. Put it in the argument
/// list of every internal handler.
pub struct ServiceCaller;

impl FromRequest for ServiceCaller {
    type Error = actix_web::Error;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let expected = req.app_data::<web::Data<ServiceToken>>();
        let given = req
            .headers()
            .get(SERVICE_TOKEN_HEADER)
            .and_then(|v| v.to_str().ok());
        let ok = match (expected, given) {
            (Some(expected), Some(given)) => {
                constant_time_eq(expected.0.as_bytes(), given.as_bytes())
            }
            _ => false,
        };
        ready(if ok {
            Ok(ServiceCaller)
        } else {
            Err(crate::http::ApiError::new(
                ErrorCode::Unauthenticated,
                "missing or wrong service token",
            )
            .into())
        })
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// An error from another service, with the code it answered.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct RemoteError {
    pub code: ErrorCode,
    pub message: String,
    /// The service's structured detail, passed on unchanged.
    pub details: Option<serde_json::Value>,
}

#[derive(Clone)]
pub struct InternalClient {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl InternalClient {
    pub fn new(base: impl Into<String>, token: impl Into<String>) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(30))
                .build()
                .unwrap_or_default(),
            base: base.into(),
            token: token.into(),
        }
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, RemoteError> {
        self.send(self.http.get(self.url(path))).await
    }

    pub async fn get_query<Q: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        query: &Q,
    ) -> Result<T, RemoteError> {
        self.send(self.http.get(self.url(path)).query(query)).await
    }

    pub async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, RemoteError> {
        self.send(self.http.post(self.url(path)).json(body)).await
    }

    pub async fn put<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, RemoteError> {
        self.send(self.http.put(self.url(path)).json(body)).await
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    async fn send<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, RemoteError> {
        let mut req = req.header(SERVICE_TOKEN_HEADER, &self.token);
        if let Some(cid) = crate::http::current_correlation_id() {
            req = req.header(CORRELATION_HEADER, cid);
        }
        let resp = req.send().await.map_err(|e| RemoteError {
            code: ErrorCode::Unavailable,
            message: format!("service unreachable: {e}"),
            details: None,
        })?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| RemoteError {
            code: ErrorCode::Unavailable,
            message: format!("reading response: {e}"),
            details: None,
        })?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| RemoteError {
                code: ErrorCode::Internal,
                message: format!("unexpected response: {e}"),
                details: None,
            });
        }
        match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(body) => Err(RemoteError {
                code: body.code,
                message: body.message,
                details: body.details,
            }),
            Err(_) => Err(RemoteError {
                code: ErrorCode::Internal,
                message: format!("service answered {status}"),
                details: None,
            }),
        }
    }
}
