//! The internal HTTP API the gateway calls; every route names the tenant
//! the caller acts for, and every query is limited to it.

use actix_web::{HttpResponse, web};
use contracts::webhooks::{
    CreateEndpointRequest, DeliveriesQuery, EndpointSecret, UpdateEndpointRequest,
};
use platform::Db;
use platform::internal::ServiceCaller;
use uuid::Uuid;

use crate::egress::{self, Policy};
use crate::signature::SigningSecret;
use crate::{Error, Settings, deliveries, endpoints};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/internal/tenants/{tenant_id}/webhooks")
            .route("/endpoints", web::get().to(list))
            .route("/endpoints", web::post().to(create))
            .route("/endpoints/{id}", web::get().to(get))
            .route("/endpoints/{id}", web::put().to(update))
            .route("/endpoints/{id}/delete", web::post().to(delete))
            .route("/endpoints/{id}/rotate-secret", web::post().to(rotate))
            .route("/endpoints/{id}/test", web::post().to(test))
            .route("/deliveries", web::get().to(list_deliveries))
            .route("/deliveries/{id}/redeliver", web::post().to(redeliver)),
    );
}

type Reply = Result<HttpResponse, Error>;

fn policy(settings: &Settings) -> Policy {
    Policy {
        allow_local: settings.allow_local,
    }
}

async fn create(
    _: ServiceCaller,
    db: web::Data<Db>,
    settings: web::Data<Settings>,
    path: web::Path<Uuid>,
    body: web::Json<CreateEndpointRequest>,
) -> Reply {
    let tenant_id = path.into_inner();
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
                tenant_id,
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
    Ok(HttpResponse::Created().json(EndpointSecret {
        endpoint,
        secret: secret.expose().to_owned(),
    }))
}

async fn list(_: ServiceCaller, db: web::Data<Db>, path: web::Path<Uuid>) -> Reply {
    let tenant_id = path.into_inner();
    let list = db.run(move |conn| endpoints::list(conn, tenant_id)).await?;
    Ok(HttpResponse::Ok().json(list))
}

async fn get(_: ServiceCaller, db: web::Data<Db>, path: web::Path<(Uuid, Uuid)>) -> Reply {
    let (tenant_id, id) = path.into_inner();
    let endpoint = db
        .run(move |conn| endpoints::get(conn, tenant_id, id))
        .await?;
    Ok(HttpResponse::Ok().json(endpoint))
}

async fn update(
    _: ServiceCaller,
    db: web::Data<Db>,
    settings: web::Data<Settings>,
    path: web::Path<(Uuid, Uuid)>,
    body: web::Json<UpdateEndpointRequest>,
) -> Reply {
    let (tenant_id, id) = path.into_inner();
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
                tenant_id,
                id,
                url.as_deref(),
                description.as_deref(),
                types.as_deref(),
                enabled,
            )
        })
        .await?;
    Ok(HttpResponse::Ok().json(endpoint))
}

async fn delete(_: ServiceCaller, db: web::Data<Db>, path: web::Path<(Uuid, Uuid)>) -> Reply {
    let (tenant_id, id) = path.into_inner();
    db.tx(move |conn| endpoints::delete(conn, tenant_id, id))
        .await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "deleted": true })))
}

async fn rotate(
    _: ServiceCaller,
    db: web::Data<Db>,
    settings: web::Data<Settings>,
    path: web::Path<(Uuid, Uuid)>,
) -> Reply {
    let (tenant_id, id) = path.into_inner();
    let secret = SigningSecret::generate();
    let until = chrono::Utc::now()
        + chrono::Duration::from_std(settings.rotation_overlap)
            .unwrap_or_else(|_| chrono::Duration::days(1));
    let endpoint = {
        let secret = secret.clone();
        db.tx(move |conn| endpoints::rotate(conn, tenant_id, id, &secret, until))
            .await?
    };
    tracing::info!(tenant.id = %tenant_id, endpoint.id = %id, "webhook secret rotated");
    Ok(HttpResponse::Ok().json(EndpointSecret {
        endpoint,
        secret: secret.expose().to_owned(),
    }))
}

async fn test(_: ServiceCaller, db: web::Data<Db>, path: web::Path<(Uuid, Uuid)>) -> Reply {
    let (tenant_id, id) = path.into_inner();
    let delivery = db
        .tx(move |conn| deliveries::ping(conn, tenant_id, id))
        .await?;
    Ok(HttpResponse::Created().json(delivery))
}

async fn list_deliveries(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<Uuid>,
    query: web::Query<DeliveriesQuery>,
) -> Reply {
    let tenant_id = path.into_inner();
    let query = query.into_inner();
    let limit = query.limit.unwrap_or(50);
    if !(1..=100).contains(&limit) {
        return Err(Error::Validation("limit: between 1 and 100".into()));
    }
    let list = db
        .run(move |conn| deliveries::list(conn, tenant_id, query.endpoint_id, limit))
        .await?;
    Ok(HttpResponse::Ok().json(list))
}

async fn redeliver(_: ServiceCaller, db: web::Data<Db>, path: web::Path<(Uuid, Uuid)>) -> Reply {
    let (tenant_id, id) = path.into_inner();
    let delivery = db
        .tx(move |conn| deliveries::redeliver(conn, tenant_id, id))
        .await?;
    Ok(HttpResponse::Ok().json(delivery))
}
