//! The GraphQL-over-HTTP specification's rules for `/graphql`: which
//! requests are taken (a POST of `application/json`, or a GET query in the
//! URL), what a malformed one gets (400 or 415, with a coded error), the
//! media type of the answer (`application/graphql-response+json` when the
//! client accepts it, else `application/json`) and its status (a request
//! that could not run at all is 400 and has no `data` in the former).
//! Checked by the specification's own audit, tests/graphql-http.

use actix_web::http::StatusCode;
use actix_web::http::header::{ACCEPT, ALLOW, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use actix_web::{HttpRequest, HttpResponse};
use async_graphql::parser::types::{DocumentOperations, OperationType};
use contracts::ErrorCode;
use serde_json::{Map, Value};

use crate::error::ensure_codes;

const GRAPHQL_RESPONSE: &str = "application/graphql-response+json";
const JSON: &str = "application/json";

/// The media type of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaType {
    /// `application/json`: every well-formed request is answered 200.
    Json,
    /// `application/graphql-response+json`: the status says whether the
    /// request ran.
    GraphqlResponse,
}

impl MediaType {
    /// The specification's media type when the client lists it, else
    /// `application/json` (also for a missing `Accept` and for `*/*`).
    pub fn accepted_by(req: &HttpRequest) -> Self {
        let accept = req
            .headers()
            .get(ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let lists_it = accept.split(',').any(|item| {
            item.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case(GRAPHQL_RESPONSE))
        });
        if lists_it {
            Self::GraphqlResponse
        } else {
            Self::Json
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Self::Json => "application/json; charset=utf-8",
            Self::GraphqlResponse => "application/graphql-response+json; charset=utf-8",
        }
    }
}

/// A POST must say it is JSON (UTF-8, the only charset JSON has): the 415
/// answer otherwise, rather than guessing at a body of another type.
pub fn refuse_non_json(req: &HttpRequest) -> Option<HttpResponse> {
    let Some(value) = req.headers().get(CONTENT_TYPE) else {
        return Some(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "a POST to /graphql needs Content-Type: application/json",
        ));
    };
    let value = value.to_str().unwrap_or_default();
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    let charset_ok = parts.all(|param| match param.split_once('=') {
        Some((name, charset)) if name.trim().eq_ignore_ascii_case("charset") => charset
            .trim()
            .trim_matches('"')
            .eq_ignore_ascii_case("utf-8"),
        _ => true,
    });
    if essence.eq_ignore_ascii_case(JSON) && charset_ok {
        None
    } else {
        Some(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            &format!("Content-Type {value:?} is not taken; send application/json (UTF-8)"),
        ))
    }
}

/// The GraphQL request in a JSON body: an object with a string `query`, and
/// optionally `operationName` (a string), `variables` and `extensions`
/// (objects); null is as absent. The message says what is wrong.
pub fn request_from_json(body: Value) -> Result<async_graphql::Request, String> {
    let mut params = match body {
        Value::Object(params) => params,
        // A batch of operations: each request is one operation, limited,
        // costed and throttled alone.
        Value::Array(_) => {
            return Err("batching is not supported: send one operation per request".to_owned());
        }
        _ => return Err("the body must be a JSON object with a query".to_owned()),
    };
    let query = match params.remove("query") {
        Some(Value::String(query)) => query,
        None | Some(Value::Null) => return Err("the request has no query".to_owned()),
        Some(_) => return Err("query must be a string".to_owned()),
    };
    let operation_name = match params.remove("operationName") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(name),
        Some(_) => return Err("operationName must be a string".to_owned()),
    };
    let variables = match params.remove("variables") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(variables)) => variables,
        Some(_) => return Err("variables must be an object".to_owned()),
    };
    // The gateway reads no extension, but a malformed one is still refused.
    match params.remove("extensions") {
        None | Some(Value::Null | Value::Object(_)) => {}
        Some(_) => return Err("extensions must be an object".to_owned()),
    }
    let mut request = async_graphql::Request::new(query).variables(
        async_graphql::Variables::from_json(Value::Object(variables)),
    );
    if let Some(name) = operation_name {
        request = request.operation_name(name);
    }
    Ok(request)
}

/// Whether a GET's URL carries a GraphQL request (else it asks for GraphiQL).
pub fn has_query_param(query_string: &str) -> bool {
    url_params(query_string).any(|(name, _)| name == "query")
}

fn url_params(query_string: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query_string.split('&').filter_map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        Some((decode(name)?, decode(value)?))
    })
}

/// `application/x-www-form-urlencoded` decoding: `+` is a space.
fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// The GraphQL request in a GET's URL (`query`, `operationName`, and
/// `variables` and `extensions` as JSON text). Only a query may come this
/// way: a mutation changes state, so it is 405, to be sent with POST.
pub fn request_from_url(query_string: &str) -> Result<async_graphql::Request, Box<HttpResponse>> {
    let mut params = Map::new();
    for (name, value) in url_params(query_string) {
        let value = match name.as_str() {
            "variables" | "extensions" => serde_json::from_str(&value).map_err(|_| {
                Box::new(error(
                    StatusCode::BAD_REQUEST,
                    &format!("{name} must be a JSON object"),
                ))
            })?,
            _ => Value::String(value),
        };
        params.insert(name, value);
    }
    let request = request_from_json(Value::Object(params))
        .map_err(|message| Box::new(bad_request(&message)))?;
    // A document that does not parse is reported by execution, as for POST.
    if let Ok(document) = async_graphql::parser::parse_query(&request.query) {
        let operation = match (&document.operations, request.operation_name.as_deref()) {
            (DocumentOperations::Single(operation), _) => Some(operation.node.ty),
            (DocumentOperations::Multiple(operations), Some(name)) => {
                operations.get(name).map(|operation| operation.node.ty)
            }
            (DocumentOperations::Multiple(_), None) => None,
        };
        if matches!(
            operation,
            Some(OperationType::Mutation | OperationType::Subscription)
        ) {
            let mut refused = error(
                StatusCode::METHOD_NOT_ALLOWED,
                "only queries may be sent with GET; send mutations with POST",
            );
            refused
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, POST"));
            return Err(Box::new(refused));
        }
    }
    Ok(request)
}

/// 400 for a body that is not a GraphQL request; `message` says why.
pub fn bad_request(message: &str) -> HttpResponse {
    error(StatusCode::BAD_REQUEST, message)
}

/// A request refused before it is a GraphQL request: no `data`, one coded
/// error.
fn error(status: StatusCode, message: &str) -> HttpResponse {
    HttpResponse::build(status).json(serde_json::json!({
        "errors": [{
            "message": message,
            "extensions": { "code": ErrorCode::Validation.as_str() },
        }],
    }))
}

/// The HTTP answer to an executed request. A request that could not run at
/// all (a syntax, validation or variable error: no `data`, no error with a
/// path) is 400 without `data` in `application/graphql-response+json`, and
/// 200 with `"data": null` in `application/json`, as the specification
/// asks. One refused by a throttle alone is 429 with `Retry-After`.
pub fn respond(mut response: async_graphql::Response, media: MediaType) -> HttpResponse {
    ensure_codes(&mut response);
    let has_code = |e: &async_graphql::ServerError, code: ErrorCode| {
        e.extensions.as_ref().and_then(|x| x.get("code"))
            == Some(&async_graphql::Value::from(code.as_str()))
    };
    let not_run = response.data == async_graphql::Value::Null
        && !response.errors.is_empty()
        && response.errors.iter().all(|e| e.path.is_empty());
    let only_limited = response.data == async_graphql::Value::Null
        && !response.errors.is_empty()
        && response
            .errors
            .iter()
            .all(|e| has_code(e, ErrorCode::RateLimited));
    let retry_after = retry_after(&response);
    let status = if only_limited && retry_after.is_some() {
        StatusCode::TOO_MANY_REQUESTS
    } else if not_run && media == MediaType::GraphqlResponse {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let mut body = serde_json::to_value(&response).unwrap_or_else(|e| {
        tracing::error!(error = %e, "serializing a GraphQL response");
        serde_json::json!({ "errors": [{ "message": "internal error",
            "extensions": { "code": ErrorCode::Internal.as_str() } }] })
    });
    if not_run
        && media == MediaType::GraphqlResponse
        && let Some(fields) = body.as_object_mut()
    {
        fields.remove("data");
    }
    let mut http = HttpResponse::build(status);
    http.content_type(media.content_type());
    if let Some(seconds) = retry_after {
        http.insert_header((RETRY_AFTER, seconds.to_string()));
    }
    http.body(body.to_string())
}

/// The longest `retryAfterSeconds` among a response's errors, for the
/// `Retry-After` header.
fn retry_after(response: &async_graphql::Response) -> Option<u64> {
    response
        .errors
        .iter()
        .filter_map(|e| match e.extensions.as_ref()?.get("retryAfterSeconds")? {
            async_graphql::Value::Number(n) => n.as_u64(),
            _ => None,
        })
        .max()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use actix_web::test::TestRequest;
    use serde_json::json;

    use super::*;

    #[test]
    fn the_media_type_follows_accept() {
        let of = |accept: Option<&str>| {
            let mut req = TestRequest::default();
            if let Some(accept) = accept {
                req = req.insert_header((ACCEPT, accept));
            }
            MediaType::accepted_by(&req.to_http_request())
        };
        assert_eq!(of(None), MediaType::Json);
        assert_eq!(of(Some("application/json")), MediaType::Json);
        assert_eq!(of(Some("*/*")), MediaType::Json);
        assert_eq!(
            of(Some(
                "application/graphql-response+json;charset=utf-8, application/json;q=0.9"
            )),
            MediaType::GraphqlResponse
        );
    }

    #[test]
    fn a_post_must_be_json() {
        let check = |content_type: Option<&str>| {
            let mut req = TestRequest::post();
            if let Some(ct) = content_type {
                req = req.insert_header((CONTENT_TYPE, ct));
            }
            refuse_non_json(&req.to_http_request()).map(|r| r.status().as_u16())
        };
        assert_eq!(check(Some("application/json")), None);
        assert_eq!(check(Some("Application/JSON; charset=UTF-8")), None);
        assert_eq!(check(None), Some(415));
        assert_eq!(check(Some("text/plain")), Some(415));
        assert_eq!(check(Some("application/json; charset=latin1")), Some(415));
    }

    #[test]
    fn request_parameters_are_checked() {
        assert!(request_from_json(json!({ "query": "{ a }", "variables": null, "operationName": null, "extensions": null })).is_ok());
        assert!(
            request_from_json(
                json!({ "query": "{ a }", "variables": { "x": 1 }, "extensions": { "y": 2 } })
            )
            .is_ok()
        );
        for (body, expected) in [
            (json!([{ "query": "{ a }" }]), "batching is not supported"),
            (json!({ "qeury": "{ a }" }), "no query"),
            (json!({ "query": 0 }), "query must be a string"),
            (
                json!({ "query": "{ a }", "operationName": false }),
                "operationName",
            ),
            (json!({ "query": "{ a }", "variables": "{}" }), "variables"),
            (
                json!({ "query": "{ a }", "extensions": ["x"] }),
                "extensions",
            ),
        ] {
            let message = request_from_json(body.clone()).unwrap_err();
            assert!(message.contains(expected), "{body}: {message}");
        }
    }

    #[test]
    fn a_get_carries_a_query_but_not_a_mutation() {
        let request = request_from_url(
            "query=query+Type(%24name%3A+String!)+%7B+__type(name%3A+%24name)+%7B+name+%7D+%7D&variables=%7B%22name%22%3A%22x%22%7D",
        )
        .unwrap();
        assert_eq!(
            request.query,
            "query Type($name: String!) { __type(name: $name) { name } }"
        );
        let refused = request_from_url("query=mutation+%7B+__typename+%7D").unwrap_err();
        assert_eq!(refused.status(), 405);
        assert_eq!(
            request_from_url("query=%7Ba%7D&variables=nope")
                .unwrap_err()
                .status(),
            400
        );
        assert!(has_query_param("a=1&query=%7Ba%7D"));
        assert!(!has_query_param(""));
    }

    #[test]
    fn a_request_that_did_not_run_is_400_without_data_only_in_the_graphql_media_type() {
        let not_run = || {
            async_graphql::Response::from_errors(vec![async_graphql::ServerError::new(
                "syntax error",
                None,
            )])
        };
        let answer = respond(not_run(), MediaType::GraphqlResponse);
        assert_eq!(answer.status(), 400);
        assert_eq!(
            answer.headers().get(CONTENT_TYPE).unwrap(),
            "application/graphql-response+json; charset=utf-8"
        );
        let answer = respond(not_run(), MediaType::Json);
        assert_eq!(answer.status(), 200);
        assert_eq!(
            answer.headers().get(CONTENT_TYPE).unwrap(),
            "application/json; charset=utf-8"
        );
    }
}
