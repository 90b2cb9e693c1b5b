use actix_web::{HttpResponse, web};
use contracts::api::{
    ApiKeyCaller, AuthenticateKeyRequest, CreateApiKeyRequest, CreateTeamRequest,
    ListApiKeysRequest, LoginRequest, ReserveQuotaRequest, RotateApiKeyRequest,
    SetTeamQuotaRequest, SetTenantQuotaRequest, SignUpRequest,
};
use platform::Db;
use platform::internal::ServiceCaller;
use uuid::Uuid;

use crate::{Error, State, api_keys, reservations, teams, tenants};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/internal")
            .route("/signup", web::post().to(sign_up))
            .route("/login", web::post().to(login))
            .route("/api-keys", web::post().to(create_api_key))
            .route("/api-keys/authenticate", web::post().to(authenticate))
            .route("/api-keys/list", web::post().to(list_api_keys))
            .route("/api-keys/{id}/revoke", web::post().to(revoke_api_key))
            .route("/api-keys/{id}/rotate", web::post().to(rotate_api_key))
            .route("/reservations", web::post().to(reserve))
            .route(
                "/quota-pressure",
                web::get().to(crate::pressure::pressure_route),
            )
            .route(
                "/tenant-names",
                web::post().to(crate::pressure::names_route),
            )
            .route("/reservations/{order_id}/release", web::post().to(release))
            .route("/tenants/{tenant_id}/quota", web::get().to(get_quota))
            .route("/tenants/{tenant_id}/quota", web::put().to(set_quota))
            .route("/tenants/{tenant_id}/teams", web::get().to(list_teams))
            .route("/tenants/{tenant_id}/teams", web::post().to(create_team))
            .route(
                "/tenants/{tenant_id}/teams/{team_id}/quota",
                web::put().to(set_team_quota),
            ),
    );
}

type Reply = Result<HttpResponse, Error>;

async fn sign_up(
    _: ServiceCaller,
    db: web::Data<Db>,
    state: web::Data<State>,
    body: web::Json<SignUpRequest>,
) -> Reply {
    let principal = tenants::sign_up(&db, body.into_inner(), state.default_max_gpus).await?;
    tracing::info!(tenant.id = %principal.tenant_id, "tenant signed up");
    Ok(HttpResponse::Created().json(principal))
}

async fn login(_: ServiceCaller, db: web::Data<Db>, body: web::Json<LoginRequest>) -> Reply {
    let LoginRequest { email, password } = body.into_inner();
    Ok(HttpResponse::Ok().json(tenants::login(&db, email, password).await?))
}

async fn create_api_key(
    _: ServiceCaller,
    db: web::Data<Db>,
    body: web::Json<CreateApiKeyRequest>,
) -> Reply {
    Ok(HttpResponse::Created().json(api_keys::create_api_key(&db, body.into_inner()).await?))
}

async fn list_api_keys(
    _: ServiceCaller,
    db: web::Data<Db>,
    body: web::Json<ListApiKeysRequest>,
) -> Reply {
    Ok(HttpResponse::Ok().json(api_keys::list(&db, body.into_inner()).await?))
}

async fn revoke_api_key(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<Uuid>,
    body: web::Json<ApiKeyCaller>,
) -> Reply {
    let key = api_keys::revoke(&db, path.into_inner(), body.into_inner()).await?;
    Ok(HttpResponse::Ok().json(key))
}

async fn rotate_api_key(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<Uuid>,
    body: web::Json<RotateApiKeyRequest>,
) -> Reply {
    let key = api_keys::rotate(&db, path.into_inner(), body.into_inner()).await?;
    Ok(HttpResponse::Created().json(key))
}

async fn authenticate(
    _: ServiceCaller,
    db: web::Data<Db>,
    body: web::Json<AuthenticateKeyRequest>,
) -> Reply {
    Ok(HttpResponse::Ok().json(api_keys::authenticate(&db, body.into_inner().secret).await?))
}

async fn reserve(
    _: ServiceCaller,
    db: web::Data<Db>,
    state: web::Data<State>,
    body: web::Json<ReserveQuotaRequest>,
) -> Reply {
    let currency = state.currency.clone();
    Ok(HttpResponse::Ok().json(reservations::reserve(&db, currency, body.into_inner()).await?))
}

async fn release(_: ServiceCaller, db: web::Data<Db>, path: web::Path<Uuid>) -> Reply {
    reservations::release(&db, path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "released": true })))
}

async fn get_quota(
    _: ServiceCaller,
    db: web::Data<Db>,
    state: web::Data<State>,
    path: web::Path<Uuid>,
) -> Reply {
    let currency = state.currency.clone();
    Ok(HttpResponse::Ok().json(reservations::get_quota(&db, currency, path.into_inner()).await?))
}

async fn set_quota(
    _: ServiceCaller,
    db: web::Data<Db>,
    state: web::Data<State>,
    path: web::Path<Uuid>,
    body: web::Json<SetTenantQuotaRequest>,
) -> Reply {
    let currency = state.currency.clone();
    let quota =
        reservations::set_quota(&db, currency, path.into_inner(), body.into_inner()).await?;
    Ok(HttpResponse::Ok().json(quota))
}

async fn list_teams(
    _: ServiceCaller,
    db: web::Data<Db>,
    state: web::Data<State>,
    path: web::Path<Uuid>,
) -> Reply {
    let currency = state.currency.clone();
    Ok(HttpResponse::Ok().json(teams::list(&db, currency, path.into_inner()).await?))
}

async fn create_team(
    _: ServiceCaller,
    db: web::Data<Db>,
    state: web::Data<State>,
    path: web::Path<Uuid>,
    body: web::Json<CreateTeamRequest>,
) -> Reply {
    let currency = state.currency.clone();
    let team = teams::create(&db, currency, path.into_inner(), body.into_inner()).await?;
    Ok(HttpResponse::Created().json(team))
}

async fn set_team_quota(
    _: ServiceCaller,
    db: web::Data<Db>,
    state: web::Data<State>,
    path: web::Path<(Uuid, Uuid)>,
    body: web::Json<SetTeamQuotaRequest>,
) -> Reply {
    let (tenant_id, team_id) = path.into_inner();
    let currency = state.currency.clone();
    let team = teams::set_quota(&db, currency, tenant_id, team_id, body.into_inner()).await?;
    Ok(HttpResponse::Ok().json(team))
}
