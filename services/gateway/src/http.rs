//! The actix side: routes, the credential handed to the schema, health.

use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::Server;
use actix_web::http::header::{AUTHORIZATION, UPGRADE};
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, middleware, web};
use async_graphql::http::GraphiQLSource;
use async_graphql_actix_web::GraphQLSubscription;
use platform::Config;
use platform::internal::InternalClient;
use tracing::Instrument;

use crate::auth::{Credential, JwtKeys, RequestAuth};
use crate::caller::{self, BadCredentials, ClientAddress, ConcurrencyGate, LoginThrottle};
use crate::clients::Clients;
use crate::error::GatewayError;
use crate::graphql::{self, GatewaySchema};
use crate::over_http;
use crate::rate_limit::{RateLimiter, retry_after_seconds};

/// A readiness probe must answer well before the orchestrator's own timeout.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// The largest `/graphql` body. A real query with its variables is a few
/// KiB; a bigger one is refused with 413 before it is parsed.
const GRAPHQL_BODY_LIMIT: usize = 256 * 1024;

/// Open subscription WebSockets per client address. A browser tab holds
/// one; a client holding this many is opening, not using, them.
const SOCKETS_PER_ADDRESS: usize = 32;

struct AppState {
    schema: GatewaySchema,
    quota: InternalClient,
    limiter: RateLimiter,
    keys: JwtKeys,
    clients: Clients,
    bad_credentials: BadCredentials,
    /// Open WebSockets per client address ([`SOCKETS_PER_ADDRESS`]).
    sockets: Arc<ConcurrencyGate>,
    /// GraphiQL at `GET /graphql`: off in production.
    graphiql: bool,
}

pub fn serve(config: Arc<Config>) -> Result<(Server, u16), GatewayError> {
    let settings = config
        .settings::<crate::GatewaySettings>()
        .map_err(|e| GatewayError::Config(e.to_string()))?;
    let keys = JwtKeys::new(&settings.jwt_keys, settings.jwt_ttl_seconds)?;
    let clients = Clients::new(&config, &settings);
    // Live instance events for `instanceEvents`, fed from the broker.
    let hub = Arc::new(crate::hub::Hub::default());
    tokio::spawn(crate::hub::run_hub(config.clone(), hub.clone()));
    let mut builder = graphql::builder();
    if config.production {
        builder = builder.extension(crate::introspection::LoggedInOnly);
    }
    let state = web::Data::new(AppState {
        quota: clients.quota.clone(),
        limiter: RateLimiter::new(settings.rate_limit_per_minute, settings.rate_limit_burst),
        keys: keys.clone(),
        clients: clients.clone(),
        bad_credentials: BadCredentials::default(),
        sockets: Arc::new(ConcurrencyGate::default()),
        graphiql: !config.production,
        schema: builder
            .data(keys)
            .data(clients)
            .data(LoginThrottle::default())
            .data(Arc::new(ConcurrencyGate::default()))
            .data(hub)
            .data(graphql::platform::StripePublishableKey(
                settings.stripe_publishable_key.clone(),
            ))
            .data(graphql::payouts::PublicUrl(settings.public_url.clone()))
            .finish(),
    });

    let addr = format!("{}:{}", config.bind_host, config.ports.get("gateway"));
    let listen_error = |e: std::io::Error| GatewayError::Listen {
        addr: addr.clone(),
        source: Arc::new(e),
    };
    let (listener, port) = platform::http::listen(&config.bind_host, config.ports.get("gateway"))
        .map_err(listen_error)?;
    let stripe_forward =
        web::Data::new(crate::webhooks::StripeForward::new(&config.url("billing")));
    let web_dir = std::path::PathBuf::from(&settings.web_dir);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(stripe_forward.clone())
            .app_data(web::PayloadConfig::new(GRAPHQL_BODY_LIMIT))
            .wrap(middleware::from_fn(platform::http::correlation))
            .route("/graphql", web::post().to(graphql))
            .route("/graphql", web::get().to(graphql_get))
            .route("/webhooks/stripe", web::post().to(crate::webhooks::stripe))
            .route("/healthz", web::get().to(healthz))
            .route("/readyz", web::get().to(readyz))
            .route("/metrics", web::get().to(platform::metrics::handler))
            .configure(|cfg| crate::web::configure(cfg, web_dir.clone()))
    })
    // As every service: `gpumarket serve` handles SIGINT and SIGTERM and
    // stops the server through its handle; open subscriptions are closed
    // after the timeout.
    .disable_signals()
    .shutdown_timeout(platform::http::SHUTDOWN_TIMEOUT.as_secs())
    .listen(listener)
    .map_err(listen_error)?
    .run();
    tracing::info!(port, "gateway listening");
    Ok((server, port))
}

// The body arrives as bytes rather than through async-graphql-actix-web's
// extractor so that actix's payload limit applies to it. The request and
// answer follow the GraphQL-over-HTTP specification (`crate::over_http`).
async fn graphql(state: web::Data<AppState>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    if let Some(limited) = rate_limited(&state, &req) {
        return limited;
    }
    if let Some(refused) = over_http::refuse_non_json(&req) {
        return refused;
    }
    let request = match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(value) => over_http::request_from_json(value),
        Err(error) => Err(format!("the body is not JSON: {error}")),
    };
    match request {
        Ok(request) => run(&state, &req, request).await,
        Err(message) => over_http::bad_request(&message),
    }
}

/// `GET /graphql?query=...`: a query (never a mutation) from the URL.
async fn graphql_url(state: &AppState, req: &HttpRequest) -> HttpResponse {
    if let Some(limited) = rate_limited(state, req) {
        return limited;
    }
    match over_http::request_from_url(req.query_string()) {
        Ok(request) => run(state, req, request).await,
        Err(refused) => *refused,
    }
}

/// Runs one request for its caller (checked first: an invalid credential
/// runs nothing) and answers it in the media type the client accepts.
async fn run(state: &AppState, req: &HttpRequest, request: async_graphql::Request) -> HttpResponse {
    let media = over_http::MediaType::accepted_by(req);
    let address = client_address(req);
    // A header that is not text is as unusable as a missing scheme.
    let header = req
        .headers()
        .get(AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or_default());
    let (auth, caller) = match caller::identify(
        header,
        &address,
        &state.keys,
        &state.clients,
        &state.bad_credentials,
    )
    .await
    {
        Ok(identified) => identified,
        Err(refused) => return refused,
    };
    let request = request.data(ClientAddress(address)).data(caller);
    let span = tracing::info_span!(
        "graphql",
        operation = request.operation_name.as_deref().unwrap_or("")
    );
    let response = graphql::execute(&state.schema, request, auth)
        .instrument(span)
        .await;
    over_http::respond(response, media)
}

/// The client's address as the rate limits and throttles key it.
fn client_address(req: &HttpRequest) -> String {
    req.peer_addr()
        .map_or_else(|| "unknown".to_owned(), |a| a.ip().to_string())
}

/// `GET /graphql`: a WebSocket upgrade is a subscription connection
/// (graphql-transport-ws), anything else gets GraphiQL.
async fn graphql_get(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> actix_web::Result<HttpResponse> {
    let upgrade = req
        .headers()
        .get(UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !upgrade {
        if over_http::has_query_param(req.query_string()) {
            return Ok(graphql_url(&state, &req).await);
        }
        return Ok(if state.graphiql {
            graphiql()
        } else {
            HttpResponse::NotFound().body("GraphiQL is off in production; POST /graphql")
        });
    }
    if let Some(limited) = rate_limited(&state, &req) {
        return Ok(limited);
    }
    // Held for the socket's life: the init callback owns it until the
    // connection starts, then the connection's data does.
    let Some(socket_pass) = state.sockets.enter(
        caller::CallerKey::address(&client_address(&req)),
        SOCKETS_PER_ADDRESS,
    ) else {
        tracing::info!("WebSocket refused: too many open from this address");
        return Ok(HttpResponse::TooManyRequests().json(serde_json::json!({
            "data": null,
            "errors": [{
                "message": format!(
                    "too many open WebSockets from this address (at most {SOCKETS_PER_ADDRESS})"
                ),
                "extensions": { "code": contracts::ErrorCode::RateLimited.as_str() },
            }],
        })));
    };
    // Browsers cannot set headers on a WebSocket: the token comes in the
    // `connection_init` payload (`{"authorization": "Bearer ..."}`), or, for
    // other clients, in the upgrade request's Authorization header.
    let header = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (keys, clients) = (state.keys.clone(), state.clients.clone());
    GraphQLSubscription::new(crate::ws::CodedExecutor(state.schema.clone()))
        .on_connection_init(move |init: serde_json::Value| async move {
            let from_payload = ["authorization", "Authorization"]
                .iter()
                .find_map(|k| init.get(*k).and_then(|v| v.as_str()).map(str::to_owned));
            let credential = Credential::from_header(from_payload.or(header).as_deref());
            let anonymous = matches!(credential, Credential::None);
            let auth = RequestAuth::new(credential);
            // A credential given must be good: a forged, expired or revoked
            // one closes the socket at `connection_init` (as a bad header
            // refuses an HTTP request) instead of connecting as anonymous.
            // No credential connects, and each subscription answers
            // UNAUTHENTICATED on its own.
            if !anonymous && let Err(refused) = auth.resolve(&keys, &clients).await {
                tracing::info!(error = %refused, "WebSocket refused at connection_init");
                return Err(async_graphql::Error::new(refused.to_string()));
            }
            let mut data = async_graphql::Data::default();
            data.insert(auth);
            data.insert(socket_pass);
            Ok(data)
        })
        .start(&req, payload)
}

/// The 429 answer when the caller's bucket is empty: GraphQL-shaped so a
/// client reads `extensions.code` as for any other error.
fn rate_limited(state: &AppState, req: &HttpRequest) -> Option<HttpResponse> {
    let peer = req.peer_addr().map(|a| a.ip().to_string());
    let key = RateLimiter::key(
        req.headers().get(AUTHORIZATION).map(|v| v.as_bytes()),
        peer.as_deref(),
    );
    let wait = state.limiter.check(key).err()?;
    let seconds = retry_after_seconds(wait);
    Some(
        HttpResponse::TooManyRequests()
            .insert_header((actix_web::http::header::RETRY_AFTER, seconds.to_string()))
            .json(serde_json::json!({
                "data": null,
                "errors": [{
                    "message": format!("rate limit exceeded; retry in {seconds} s"),
                    "extensions": {
                        "code": contracts::ErrorCode::RateLimited.as_str(),
                        "retryAfterSeconds": seconds,
                    },
                }],
            })),
    )
}

fn graphiql() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(
            GraphiQLSource::build()
                .endpoint("/graphql")
                .subscription_endpoint("/graphql")
                .finish(),
        )
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
}

// The gateway holds no state of its own; it is useful only when quota, which
// every login and key check needs, answers.
async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let probe = state.quota.call(contracts::endpoints::HEALTHZ, (), &());
    match tokio::time::timeout(READY_TIMEOUT, probe).await {
        Ok(Ok(_)) => HttpResponse::Ok().json(serde_json::json!({ "status": "ready" })),
        Ok(Err(error)) => {
            tracing::warn!(%error, "not ready: quota unavailable");
            HttpResponse::ServiceUnavailable()
                .json(serde_json::json!({ "status": "quota unavailable" }))
        }
        Err(_) => {
            tracing::warn!("not ready: quota timed out");
            HttpResponse::ServiceUnavailable()
                .json(serde_json::json!({ "status": "quota unavailable" }))
        }
    }
}
