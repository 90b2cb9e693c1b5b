//! The internal HTTP API the gateway calls; every route names the tenant
//! the caller acts for, and every query is limited to it.

use actix_web::web;
use contracts::endpoints::webhooks::{
    DELIVERY_LIST, DELIVERY_REDELIVER, ENDPOINT_CREATE, ENDPOINT_DELETE, ENDPOINT_GET,
    ENDPOINT_LIST, ENDPOINT_ROTATE_SECRET, ENDPOINT_TEST, ENDPOINT_UPDATE,
};
use contracts::ids::{DeliveryId, TenantId, WebhookEndpointId};
use contracts::webhooks::{
    CreateEndpointRequest, DeliveriesQuery, Delivery, Endpoint, EndpointDeleted, EndpointSecret,
    UpdateEndpointRequest,
};
use platform::Db;
use platform::endpoint::{Reply, route};
use platform::internal::ServiceCaller;
use uuid::Uuid;

use crate::egress::{self, Policy};
use crate::signature::SigningSecret;
use crate::{Error, Settings, deliveries, endpoints};

pub fn configure(cfg: &mut web::ServiceConfig) {
    route(cfg, ENDPOINT_LIST, list);
    route(cfg, ENDPOINT_CREATE, create);
    route(cfg, ENDPOINT_GET, get);
    route(cfg, ENDPOINT_UPDATE, update);
    route(cfg, ENDPOINT_DELETE, delete);
    route(cfg, ENDPOINT_ROTATE_SECRET, rotate);
    route(cfg, ENDPOINT_TEST, test);
    route(cfg, DELIVERY_LIST, list_deliveries);
    route(cfg, DELIVERY_REDELIVER, redeliver);
}

fn policy(settings: &Settings) -> Policy {
    Policy {
        allow_local: settings.allow_local,
    }
}

async fn create(
    _: ServiceCaller,
    db: web::Data<Db>,
    settings: web::Data<Settings>,
    path: web::Path<TenantId>,
    body: web::Json<CreateEndpointRequest>,
) -> Result<Reply<EndpointSecret>, Error> {
    let tenant_id = path.into_inner().into_uuid();
    let body = body.into_inner();
    let url = egress::check_url(&body.url, policy(&settings)).await?;
    let description = endpoints::description(&body.description)?;
    let types = endpoints::event_types(&body.event_types)?;
    let secret = SigningSecret::generate();
    let max = settings.max_endpoints_per_tenant;
    let endpoint = {
        let secret = secret.clone();
        db.tx(move |conn| {
            endpoints::create(
                conn,
                TenantId(tenant_id),
                url.as_str(),
                &description,
                &types,
                &secret,
                max,
            )
        })
        .await?
    };
    tracing::info!(tenant.id = %tenant_id, endpoint.id = %endpoint.id, "webhook endpoint created");
    Ok(Reply::created(EndpointSecret {
        endpoint,
        secret: secret.expose().to_owned(),
    }))
}

async fn list(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<TenantId>,
) -> Result<Reply<Vec<Endpoint>>, Error> {
    let tenant_id = path.into_inner().into_uuid();
    let list = db
        .run(move |conn| endpoints::list(conn, TenantId(tenant_id)))
        .await?;
    Ok(Reply::ok(list))
}

async fn get(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<(TenantId, WebhookEndpointId)>,
) -> Result<Reply<Endpoint>, Error> {
    let (tenant_id, id) = ids(path);
    let endpoint = db
        .run(move |conn| endpoints::get(conn, TenantId(tenant_id), id))
        .await?;
    Ok(Reply::ok(endpoint))
}

async fn update(
    _: ServiceCaller,
    db: web::Data<Db>,
    settings: web::Data<Settings>,
    path: web::Path<(TenantId, WebhookEndpointId)>,
    body: web::Json<UpdateEndpointRequest>,
) -> Result<Reply<Endpoint>, Error> {
    let (tenant_id, id) = ids(path);
    let body = body.into_inner();
    let url = match &body.url {
        Some(raw) => Some(egress::check_url(raw, policy(&settings)).await?.to_string()),
        None => None,
    };
    let description = body
        .description
        .as_deref()
        .map(endpoints::description)
        .transpose()?;
    let types = body
        .event_types
        .as_deref()
        .map(endpoints::event_types)
        .transpose()?;
    let enabled = body.enabled;
    let endpoint = db
        .tx(move |conn| {
            endpoints::update(
                conn,
                TenantId(tenant_id),
                id,
                url.as_deref(),
                description.as_deref(),
                types.as_deref(),
                enabled,
            )
        })
        .await?;
    Ok(Reply::ok(endpoint))
}

async fn delete(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<(TenantId, WebhookEndpointId)>,
) -> Result<Reply<EndpointDeleted>, Error> {
    let (tenant_id, id) = ids(path);
    db.tx(move |conn| endpoints::delete(conn, TenantId(tenant_id), id))
        .await?;
    Ok(Reply::ok(EndpointDeleted { deleted: true }))
}

async fn rotate(
    _: ServiceCaller,
    db: web::Data<Db>,
    settings: web::Data<Settings>,
    path: web::Path<(TenantId, WebhookEndpointId)>,
) -> Result<Reply<EndpointSecret>, Error> {
    let (tenant_id, id) = ids(path);
    let secret = SigningSecret::generate();
    let until = chrono::Utc::now()
        + chrono::Duration::from_std(settings.rotation_overlap)
            .unwrap_or_else(|_| chrono::Duration::days(1));
    let endpoint = {
        let secret = secret.clone();
        db.tx(move |conn| endpoints::rotate(conn, TenantId(tenant_id), id, &secret, until))
            .await?
    };
    tracing::info!(tenant.id = %tenant_id, endpoint.id = %id, "webhook secret rotated");
    Ok(Reply::ok(EndpointSecret {
        endpoint,
        secret: secret.expose().to_owned(),
    }))
}

async fn test(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<(TenantId, WebhookEndpointId)>,
) -> Result<Reply<Delivery>, Error> {
    let (tenant_id, id) = ids(path);
    let delivery = db
        .tx(move |conn| deliveries::ping(conn, TenantId(tenant_id), id))
        .await?;
    Ok(Reply::created(delivery))
}

async fn list_deliveries(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<TenantId>,
    query: web::Query<DeliveriesQuery>,
) -> Result<Reply<Vec<Delivery>>, Error> {
    let tenant_id = path.into_inner().into_uuid();
    let query = query.into_inner();
    let limit = query.limit.unwrap_or(50);
    if !(1..=100).contains(&limit) {
        return Err(Error::Validation("limit: between 1 and 100".into()));
    }
    let list = db
        .run(move |conn| {
            deliveries::list(
                conn,
                TenantId(tenant_id),
                query.endpoint_id.map(WebhookEndpointId::into_uuid),
                limit,
            )
        })
        .await?;
    Ok(Reply::ok(list))
}

async fn redeliver(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<(TenantId, DeliveryId)>,
) -> Result<Reply<Delivery>, Error> {
    let (tenant_id, id) = path.into_inner();
    let (tenant_id, id) = (tenant_id.into_uuid(), id.into_uuid());
    let delivery = db
        .tx(move |conn| deliveries::redeliver(conn, TenantId(tenant_id), id))
        .await?;
    Ok(Reply::ok(delivery))
}

/// The tenant's and the endpoint's ids, as the queries take them.
fn ids(path: web::Path<(TenantId, WebhookEndpointId)>) -> (Uuid, Uuid) {
    let (tenant_id, id) = path.into_inner();
    (tenant_id.into_uuid(), id.into_uuid())
}
