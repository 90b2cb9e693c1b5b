use actix_web::web;
use contracts::api::{
    ApiKeyCaller, ApiKeyCreated, ApiKeyInfo, AuthenticateKeyRequest, CreateApiKeyRequest,
    CreateTeamRequest, ListApiKeysRequest, LoginRequest, Principal, QuotaReservation,
    ReservationReleased, ReserveQuotaRequest, RotateApiKeyRequest, SetTeamQuotaRequest,
    SetTenantQuotaRequest, SignUpRequest, Team, TenantQuota,
};
use contracts::endpoints::quota::{
    API_KEY_AUTHENTICATE, API_KEY_CREATE, API_KEY_LIST, API_KEY_REVOKE, API_KEY_ROTATE, LOGIN,
    QUOTA_PRESSURE, RESERVATION_RELEASE, RESERVE, SET_TEAM_QUOTA, SET_TENANT_QUOTA, SIGN_UP,
    TEAM_CREATE, TEAM_LIST, TENANT_NAMES, TENANT_QUOTA,
};
use contracts::ids::{ApiKeyId, OrderId, TeamId, TenantId};
use platform::Db;
use platform::endpoint::{Reply, route};
use platform::internal::ServiceCaller;

use crate::{Error, State, api_keys, reservations, teams, tenants};

pub fn configure(cfg: &mut web::ServiceConfig) {
    route(cfg, SIGN_UP, sign_up);
    route(cfg, LOGIN, login);
    route(cfg, API_KEY_CREATE, create_api_key);
    route(cfg, API_KEY_AUTHENTICATE, authenticate);
    route(cfg, API_KEY_LIST, list_api_keys);
    route(cfg, API_KEY_REVOKE, revoke_api_key);
    route(cfg, API_KEY_ROTATE, rotate_api_key);
    route(cfg, RESERVE, reserve);
    route(cfg, QUOTA_PRESSURE, crate::pressure::pressure_route);
    route(cfg, TENANT_NAMES, crate::pressure::names_route);
    route(cfg, RESERVATION_RELEASE, release);
    route(cfg, TENANT_QUOTA, get_quota);
    route(cfg, SET_TENANT_QUOTA, set_quota);
    route(cfg, TEAM_LIST, list_teams);
    route(cfg, TEAM_CREATE, create_team);
    route(cfg, SET_TEAM_QUOTA, set_team_quota);
}

async fn sign_up(
    _: ServiceCaller,
    db: web::Data<Db>,
    state: web::Data<State>,
    body: web::Json<SignUpRequest>,
) -> Result<Reply<Principal>, Error> {
    let principal = tenants::sign_up(&db, body.into_inner(), state.default_max_gpus).await?;
    tracing::info!(tenant.id = %principal.tenant_id, "tenant signed up");
    Ok(Reply::created(principal))
}

async fn login(
    _: ServiceCaller,
    db: web::Data<Db>,
    body: web::Json<LoginRequest>,
) -> Result<Reply<Principal>, Error> {
    let LoginRequest { email, password } = body.into_inner();
    Ok(Reply::ok(tenants::login(&db, email, password).await?))
}

async fn create_api_key(
    _: ServiceCaller,
    db: web::Data<Db>,
    body: web::Json<CreateApiKeyRequest>,
) -> Result<Reply<ApiKeyCreated>, Error> {
    Ok(Reply::created(
        api_keys::create_api_key(&db, body.into_inner()).await?,
    ))
}

async fn list_api_keys(
    _: ServiceCaller,
    db: web::Data<Db>,
    body: web::Json<ListApiKeysRequest>,
) -> Result<Reply<Vec<ApiKeyInfo>>, Error> {
    Ok(Reply::ok(api_keys::list(&db, body.into_inner()).await?))
}

async fn revoke_api_key(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<ApiKeyId>,
    body: web::Json<ApiKeyCaller>,
) -> Result<Reply<ApiKeyInfo>, Error> {
    let key = api_keys::revoke(&db, path.into_inner().into_uuid(), body.into_inner()).await?;
    Ok(Reply::ok(key))
}

async fn rotate_api_key(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<ApiKeyId>,
    body: web::Json<RotateApiKeyRequest>,
) -> Result<Reply<ApiKeyCreated>, Error> {
    let key = api_keys::rotate(&db, path.into_inner().into_uuid(), body.into_inner()).await?;
    Ok(Reply::created(key))
}

async fn authenticate(
    _: ServiceCaller,
    db: web::Data<Db>,
    body: web::Json<AuthenticateKeyRequest>,
) -> Result<Reply<Principal>, Error> {
    Ok(Reply::ok(
        api_keys::authenticate(&db, body.into_inner().secret).await?,
    ))
}

async fn reserve(
    _: ServiceCaller,
    db: web::Data<Db>,
    state: web::Data<State>,
    body: web::Json<ReserveQuotaRequest>,
) -> Result<Reply<QuotaReservation>, Error> {
    let currency = state.currency.clone();
    Ok(Reply::ok(
        reservations::reserve(&db, currency, body.into_inner()).await?,
    ))
}

async fn release(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<OrderId>,
) -> Result<Reply<ReservationReleased>, Error> {
    reservations::release(&db, path.into_inner()).await?;
    Ok(Reply::ok(ReservationReleased { released: true }))
}

async fn get_quota(
    _: ServiceCaller,
    db: web::Data<Db>,
    state: web::Data<State>,
    path: web::Path<TenantId>,
) -> Result<Reply<TenantQuota>, Error> {
    let currency = state.currency.clone();
    Ok(Reply::ok(
        reservations::get_quota(&db, currency, path.into_inner()).await?,
    ))
}

async fn set_quota(
    _: ServiceCaller,
    db: web::Data<Db>,
    state: web::Data<State>,
    path: web::Path<TenantId>,
    body: web::Json<SetTenantQuotaRequest>,
) -> Result<Reply<TenantQuota>, Error> {
    let currency = state.currency.clone();
    let quota =
        reservations::set_quota(&db, currency, path.into_inner(), body.into_inner()).await?;
    Ok(Reply::ok(quota))
}

async fn list_teams(
    _: ServiceCaller,
    db: web::Data<Db>,
    state: web::Data<State>,
    path: web::Path<TenantId>,
) -> Result<Reply<Vec<Team>>, Error> {
    let currency = state.currency.clone();
    Ok(Reply::ok(
        teams::list(&db, currency, path.into_inner()).await?,
    ))
}

async fn create_team(
    _: ServiceCaller,
    db: web::Data<Db>,
    state: web::Data<State>,
    path: web::Path<TenantId>,
    body: web::Json<CreateTeamRequest>,
) -> Result<Reply<Team>, Error> {
    let currency = state.currency.clone();
    let team = teams::create(&db, currency, path.into_inner(), body.into_inner()).await?;
    Ok(Reply::created(team))
}

async fn set_team_quota(
    _: ServiceCaller,
    db: web::Data<Db>,
    state: web::Data<State>,
    path: web::Path<(TenantId, TeamId)>,
    body: web::Json<SetTeamQuotaRequest>,
) -> Result<Reply<Team>, Error> {
    let (tenant_id, team_id) = path.into_inner();
    let currency = state.currency.clone();
    let team = teams::set_quota(
        &db,
        currency,
        tenant_id,
        team_id.into_uuid(),
        body.into_inner(),
    )
    .await?;
    Ok(Reply::ok(team))
}
