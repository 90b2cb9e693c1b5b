//! HTTP pieces every service mounts: the JSON error shape, `/healthz` and
//! `/readyz`, the request span with its correlation id, and binding a
//! listener (port 0 allowed, so tests run services on random ports).

use std::net::TcpListener;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use actix_web::{HttpResponse, ResponseError, web};
use contracts::ErrorCode;
use tracing::Instrument;

use crate::Db;
use crate::correlation::CORRELATION_HEADER;

pub use crate::api_error::ApiError;
pub use crate::correlation::{current_correlation_id, in_correlation_scope, with_correlation_id};

/// The service an app serves, as app data: the `service` label of its HTTP
/// metrics (one process may serve every service, `gpumarket dev`).
#[derive(Clone, Copy, Debug)]
pub struct ServiceName(pub &'static str);

/// The label of an app without [`ServiceName`]: only the gateway builds its
/// own app (it mounts GraphQL) instead of going through [`serve_named`].
const UNNAMED_SERVICE: &str = "gateway";

/// Middleware: one span per request carrying the correlation id (taken from
/// `X-Correlation-Id` or made fresh), echoed on the response.
pub async fn correlation(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let cid = req
        .headers()
        .get(CORRELATION_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let method = crate::metrics::method_label(req.method().as_str());
    let service = req
        .app_data::<web::Data<ServiceName>>()
        .map_or(UNNAMED_SERVICE, |name| name.0);
    let span = tracing::info_span!(
        "http.request",
        method = %req.method(),
        path = %req.path(),
        correlation_id = %cid,
        status = tracing::field::Empty,
    );
    let started = std::time::Instant::now();
    let mut res = with_correlation_id(cid.clone(), next.call(req))
        .instrument(span.clone())
        .await?;
    span.record("status", res.status().as_u16());
    // The route pattern (`/internal/orders/{id}`), never the raw path: ids
    // in labels would make a series per order.
    let route = res
        .request()
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_owned());
    let status = crate::metrics::status_class(res.status().as_u16());
    crate::metrics::HTTP_REQUESTS
        .with_label_values(&[service, route.as_str(), method, status])
        .inc();
    crate::metrics::HTTP_SECONDS
        .with_label_values(&[service, route.as_str(), method])
        .observe(started.elapsed().as_secs_f64());
    if let Ok(value) = actix_web::http::header::HeaderValue::from_str(&cid) {
        res.headers_mut().insert(
            actix_web::http::header::HeaderName::from_static(CORRELATION_HEADER),
            value,
        );
    }
    span.in_scope(|| {
        tracing::debug!(
            duration_ms = started.elapsed().as_millis() as u64,
            "request done"
        );
    });
    Ok(res)
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
}

async fn readyz(db: web::Data<Db>) -> HttpResponse {
    match db.ping().await {
        Ok(()) => HttpResponse::Ok().json(serde_json::json!({ "status": "ready" })),
        Err(error) => {
            tracing::warn!(%error, "not ready");
            HttpResponse::ServiceUnavailable()
                .json(serde_json::json!({ "status": "database unavailable" }))
        }
    }
}

/// Mounts `/healthz` (the process is up), `/readyz` (its database answers)
/// and `/metrics`.
pub fn health(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz))
        .route("/metrics", web::get().to(crate::metrics::handler));
}

/// How long a stopping server waits for requests in flight (and idle
/// keep-alive connections) before it closes them: well inside Kubernetes'
/// default 30 s termination grace period.
pub const SHUTDOWN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Binds `host:port` and reports the port actually bound.
pub fn listen(host: &str, port: u16) -> std::io::Result<(TcpListener, u16)> {
    let listener = TcpListener::bind((host, port))?;
    let port = listener.local_addr()?.port();
    Ok((listener, port))
}

/// Turns a JSON body extractor error into our error shape.
pub fn json_config() -> web::JsonConfig {
    web::JsonConfig::default()
        .limit(256 * 1024)
        .error_handler(|err, _| ApiError::new(ErrorCode::Validation, err.to_string()).into())
}

/// Same for query strings.
pub fn query_config() -> web::QueryConfig {
    web::QueryConfig::default()
        .error_handler(|err, _| ApiError::new(ErrorCode::Validation, err.to_string()).into())
}

/// Same for path segments (a malformed id is a 404-worthy validation error).
pub fn path_config() -> web::PathConfig {
    web::PathConfig::default()
        .error_handler(|err, _| ApiError::new(ErrorCode::Validation, err.to_string()).into())
}

/// Starts an HTTP server on `host:port` with the pieces every service shares
/// (correlation span, error shapes, health probes, the service token) and the
/// service's own routes from `configure`. Returns the server, not yet awaited,
/// and the port it bound.
pub fn serve<F>(
    host: &str,
    port: u16,
    db: Db,
    service_token: crate::settings::SecretString,
    configure: F,
) -> std::io::Result<(actix_web::dev::Server, u16)>
where
    F: Fn(&mut web::ServiceConfig) + Send + Clone + 'static,
{
    serve_named("unnamed", host, port, db, service_token, configure)
}

/// [`serve`] with the service's name on its HTTP metrics.
pub fn serve_named<F>(
    service: &'static str,
    host: &str,
    port: u16,
    db: Db,
    service_token: crate::settings::SecretString,
    configure: F,
) -> std::io::Result<(actix_web::dev::Server, u16)>
where
    F: Fn(&mut web::ServiceConfig) + Send + Clone + 'static,
{
    let name = web::Data::new(ServiceName(service));
    let (listener, port) = listen(host, port)?;
    let db = web::Data::new(db);
    let token = web::Data::new(crate::internal::ServiceToken(
        service_token.expose().to_owned(),
    ));
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new()
            .wrap(actix_web::middleware::from_fn(correlation))
            .app_data(json_config())
            .app_data(query_config())
            .app_data(path_config())
            .app_data(db.clone())
            .app_data(token.clone())
            .app_data(name.clone())
            .configure(health)
            .configure(configure.clone())
    })
    .workers(2)
    // The process decides when to stop (SIGINT or SIGTERM, `gpumarket serve`)
    // and stops the server through its handle.
    .disable_signals()
    .shutdown_timeout(SHUTDOWN_TIMEOUT.as_secs())
    .listen(listener)?
    .run();
    Ok((server, port))
}

/// The response for a service error with `code`: the message for the caller's
/// mistakes, an opaque one (and a log line with the cause) for ours.
pub fn error_response(code: ErrorCode, error: &dyn std::fmt::Display) -> HttpResponse {
    error_response_with_details(code, error, None)
}

/// [`error_response`] with structured detail for the client; dropped with
/// the message when the error is internal.
pub fn error_response_with_details(
    code: ErrorCode,
    error: &dyn std::fmt::Display,
    details: Option<serde_json::Value>,
) -> HttpResponse {
    let internal = matches!(code, ErrorCode::Internal | ErrorCode::Unavailable);
    let message = if internal {
        tracing::error!(error = %error, "internal error");
        "internal error".to_owned()
    } else {
        error.to_string()
    };
    let mut api = ApiError::new(code, message);
    if !internal {
        api.details = details;
    }
    api.error_response()
}

/// The HTTP status for `code`.
pub fn status_for(code: ErrorCode) -> StatusCode {
    StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}
