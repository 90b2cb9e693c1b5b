//! Reads Podman's networks through its own (libpod) API instead of the
//! Docker-compatible one. Checked on Podman 4.3.1: every compatible-API
//! read of a network (inspect, or a list that returns it) drops the
//! `isolate` option from the service's in-memory copy, and containers
//! started after that are not isolated from other networks. The libpod
//! read leaves it alone. A plain HTTP/1.0 GET on the engine's socket: the
//! server closes the connection after the answer, so no chunking or
//! keep-alive to handle.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::EngineError;

/// The answer to a read, at most (a few hundred networks).
const MAX_ANSWER: u64 = 16 << 20;
const TIMEOUT: Duration = Duration::from_secs(30);

/// What the executor reads of a network.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct LibpodNetwork {
    pub name: String,
    #[serde(default)]
    pub labels: Option<HashMap<String, String>>,
}

/// The network named `name`, None when absent.
pub async fn network(socket: &Path, name: &str) -> Result<Option<LibpodNetwork>, EngineError> {
    let (status, body) = get(
        socket,
        &format!("/v4.0.0/libpod/networks/{}/json", encode(name)),
    )
    .await?;
    match status {
        200 => Ok(Some(parse(&body)?)),
        404 => Ok(None),
        other => Err(EngineError::Libpod(format!("network {name}: HTTP {other}"))),
    }
}

/// The networks carrying `label` (`key=value`).
pub async fn networks(socket: &Path, label: &str) -> Result<Vec<LibpodNetwork>, EngineError> {
    let filters = serde_json::json!({ "label": [label] }).to_string();
    let (status, body) = get(
        socket,
        &format!("/v4.0.0/libpod/networks/json?filters={}", encode(&filters)),
    )
    .await?;
    if status != 200 {
        return Err(EngineError::Libpod(format!("networks: HTTP {status}")));
    }
    parse(&body)
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, EngineError> {
    serde_json::from_slice(body).map_err(|e| EngineError::Libpod(format!("answer: {e}")))
}

async fn get(socket: &Path, path: &str) -> Result<(u16, Vec<u8>), EngineError> {
    let io = |e: std::io::Error| EngineError::Libpod(e.to_string());
    let exchange = async {
        let mut stream = tokio::net::UnixStream::connect(socket).await.map_err(io)?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: podman\r\n\r\n").as_bytes())
            .await
            .map_err(io)?;
        let mut answer = Vec::new();
        stream
            .take(MAX_ANSWER)
            .read_to_end(&mut answer)
            .await
            .map_err(io)?;
        Ok::<_, EngineError>(answer)
    };
    let answer = tokio::time::timeout(TIMEOUT, exchange)
        .await
        .map_err(|_| EngineError::Libpod(format!("{path}: no answer within {TIMEOUT:?}")))??;
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| EngineError::Libpod(format!("{path}: no HTTP header")))?;
    let head = String::from_utf8_lossy(&answer[..split]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| EngineError::Libpod(format!("{path}: no HTTP status")))?;
    Ok((status, answer[split + 4..].to_vec()))
}

/// Percent-encodes all but unreserved characters.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(
            encode(r#"{"label":["a=b"]}"#),
            "%7B%22label%22%3A%5B%22a%3Db%22%5D%7D"
        );
    }
}
