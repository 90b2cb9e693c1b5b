//! Internal HTTP between services: a client that carries the service token
//! and the correlation id and turns error bodies back into codes, and an
//! extractor that refuses internal calls without the token.

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use contracts::endpoints::{Endpoint, Method, PathParams};
use contracts::{ErrorBody, ErrorCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub const SERVICE_TOKEN_HEADER: &str = "x-service-token";

/// How long a call keeps trying to connect to a service that refuses
/// connections. A refused connection never carried the request, so trying
/// again is safe for every method; it turns a peer's restart (a crash, a
/// rolling deploy: about 2 s) into latency instead of a failed order
/// (`make faults`, docs/reliability.md). A request that was sent and got no
/// answer is not retried: its outcome is unknown.
pub const CONNECT_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(6);
pub use crate::correlation::CORRELATION_HEADER;

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
            Err(crate::api_error::ApiError::new(
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
                // Below the services' keep-alive (actix's default, 5 s): a
                // pooled connection is dropped here, a second before the
                // server would close it, instead of a request racing that
                // close ("connection closed before message completed").
                .pool_idle_timeout(std::time::Duration::from_secs(4))
                .build()
                .unwrap_or_default(),
            base: base.into(),
            token: token.into(),
        }
    }

    /// Calls an internal endpoint: its path filled with `params`, `body` as
    /// its JSON body (or its query string, for a GET), its reply parsed as
    /// the endpoint's reply type.
    pub async fn call<P: PathParams, B: Serialize, R: DeserializeOwned>(
        &self,
        endpoint: Endpoint<P, B, R>,
        params: P,
        body: &B,
    ) -> Result<R, RemoteError> {
        let url = self.url(&endpoint.url_path(&params));
        let req = match endpoint.method {
            Method::Get => self.http.get(url).query(body),
            Method::Post => self.http.post(url).json(body),
            Method::Put => self.http.put(url).json(body),
        };
        self.send(req).await
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    async fn send<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, RemoteError> {
        let mut req = req.header(SERVICE_TOKEN_HEADER, &self.token);
        if let Some(cid) = crate::correlation::current_correlation_id() {
            req = req.header(CORRELATION_HEADER, cid);
        }
        let deadline = tokio::time::Instant::now() + CONNECT_RETRY_FOR;
        let mut pause = std::time::Duration::from_millis(100);
        let resp = loop {
            // A JSON or empty body always clones; without a copy there is
            // no second attempt.
            let again = req.try_clone();
            match req.send().await {
                Ok(resp) => break resp,
                Err(e) => match again {
                    Some(next)
                        if e.is_connect() && tokio::time::Instant::now() + pause < deadline =>
                    {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(std::time::Duration::from_secs(1));
                        req = next;
                    }
                    _ => {
                        // The URL names an internal host, port and path: for
                        // the operator's log, not for the caller's message.
                        tracing::warn!(error = %with_causes(&e), "internal call failed");
                        return Err(RemoteError {
                            code: ErrorCode::Unavailable,
                            message: format!(
                                "service unreachable: {}",
                                with_causes(&e.without_url())
                            ),
                            details: None,
                        });
                    }
                },
            }
        };
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| RemoteError {
            code: ErrorCode::Unavailable,
            message: format!("reading response: {}", with_causes(&e.without_url())),
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
                // A service too busy to read the request in time (408), or a
                // proxy in front of one that is down: try again, not a bug.
                code: if matches!(status.as_u16(), 408 | 429 | 502 | 503 | 504) {
                    ErrorCode::Unavailable
                } else {
                    ErrorCode::Internal
                },
                message: format!("service answered {status}"),
                details: None,
            }),
        }
    }
}

/// An error with its chain of causes: reqwest's own message ("error sending
/// request") does not say whether the connection was refused, reset or
/// timed out, which is what an operator needs.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const PROBE: Endpoint<(), serde_json::Value, serde_json::Value> = Endpoint::post("/internal/x");

    /// A peer that is restarting (nothing listens yet) is waited for: the
    /// call lands once it listens instead of failing with UNAVAILABLE.
    #[tokio::test]
    async fn a_refused_connection_is_retried_until_the_peer_listens() {
        // Take a free port, then free it: the peer "restarts" on it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let peer = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(700)).await;
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
                .await
                .expect("bind");
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut buf = vec![0u8; 4096];
            let _ = socket.read(&mut buf).await;
            socket
                .write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\nconnection: close\r\n\r\n{\"ok\":true}",
                )
                .await
                .expect("write");
        });
        let client = InternalClient::new(format!("http://127.0.0.1:{port}"), "token");
        let answer = client
            .call(PROBE, (), &serde_json::json!({ "a": 1 }))
            .await
            .expect("answered after the peer came up");
        assert_eq!(answer["ok"], true);
        peer.await.expect("peer");
    }

    /// A request that reached the peer and got no answer is not sent again:
    /// its outcome is unknown.
    #[tokio::test]
    async fn a_request_that_was_sent_is_not_retried() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let peer = tokio::spawn(async move {
            let mut accepted = 0;
            // The first connection is read and dropped without an answer;
            // a second one would be a retry.
            while let Ok(Ok((mut socket, _))) =
                tokio::time::timeout(std::time::Duration::from_secs(2), listener.accept()).await
            {
                accepted += 1;
                let mut buf = vec![0u8; 4096];
                let _ = socket.read(&mut buf).await;
            }
            accepted
        });
        let client = InternalClient::new(format!("http://127.0.0.1:{port}"), "token");
        let err = client
            .call(PROBE, (), &serde_json::json!({ "a": 1 }))
            .await
            .expect_err("no answer");
        assert_eq!(err.code, ErrorCode::Unavailable);
        // The caller's message does not name the internal address.
        assert!(
            !err.message.contains("127.0.0.1") && !err.message.contains("/internal/"),
            "{}",
            err.message
        );
        assert_eq!(peer.await.expect("peer"), 1);
    }

    /// A service too busy to read the request in time answers 408 without
    /// a JSON body: that is UNAVAILABLE (try again), not INTERNAL.
    #[tokio::test]
    async fn a_bare_timeout_answer_is_unavailable() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let peer = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut buf = vec![0u8; 4096];
            let _ = socket.read(&mut buf).await;
            socket
                .write_all(b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await
                .expect("write");
        });
        let client = InternalClient::new(format!("http://127.0.0.1:{port}"), "token");
        let err = client
            .call(PROBE, (), &serde_json::json!({ "a": 1 }))
            .await
            .expect_err("408");
        assert_eq!(err.code, ErrorCode::Unavailable);
        peer.await.expect("peer");
    }
}
