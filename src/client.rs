//! A small client of the public GraphQL API, used by the demo seed and the
//! tests: the same requests a user's script would send.

use serde_json::{Value, json};

/// The first error of a GraphQL response, or a transport failure.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct GraphQlError {
    /// `extensions.code`, or `TRANSPORT` when the request did not get through.
    pub code: String,
    pub message: String,
}

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    url: String,
    token: Option<String>,
}

impl Client {
    /// `base` is the gateway's base URL; requests go to `{base}/graphql`.
    pub fn new(base: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: format!("{}/graphql", base.trim_end_matches('/')),
            token: None,
        }
    }

    pub fn with_token(&self, token: impl Into<String>) -> Self {
        Self {
            token: Some(token.into()),
            ..self.clone()
        }
    }

    /// The whole response body, errors included.
    pub async fn raw(&self, query: &str, variables: Value) -> Result<Value, GraphQlError> {
        let mut req = self
            .http
            .post(&self.url)
            .json(&json!({ "query": query, "variables": variables }));
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        let transport = |e: reqwest::Error| GraphQlError {
            code: "TRANSPORT".into(),
            message: e.to_string(),
        };
        req.send()
            .await
            .map_err(transport)?
            .json()
            .await
            .map_err(transport)
    }

    /// `data`, or the first error with its code.
    pub async fn run(&self, query: &str, variables: Value) -> Result<Value, GraphQlError> {
        let body = self.raw(query, variables).await?;
        if let Some(error) = body["errors"].as_array().and_then(|e| e.first()) {
            return Err(GraphQlError {
                code: error["extensions"]["code"]
                    .as_str()
                    .unwrap_or("UNKNOWN")
                    .to_owned(),
                message: error["message"].as_str().unwrap_or_default().to_owned(),
            });
        }
        Ok(body["data"].clone())
    }
}
