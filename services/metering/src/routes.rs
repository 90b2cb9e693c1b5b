use actix_web::{HttpResponse, web};
use platform::Db;
use platform::internal::ServiceCaller;
use serde::Deserialize;
use uuid::Uuid;

use crate::{Error, intervals};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/internal")
            .route("/usage", web::get().to(usage))
            .route("/intervals/lookup", web::post().to(lookup))
            .route("/burn-rates/{tenant_id}", web::get().to(burn_rate)),
    );
}

#[derive(Deserialize)]
struct UsageQuery {
    tenant_id: Uuid,
    instance_id: Option<Uuid>,
}

async fn usage(
    _: ServiceCaller,
    db: web::Data<Db>,
    q: web::Query<UsageQuery>,
) -> Result<HttpResponse, Error> {
    Ok(HttpResponse::Ok().json(intervals::usage(&db, q.tenant_id, q.instance_id).await?))
}

/// `POST /internal/intervals/lookup`: the GPU intervals of the instances
/// named, for ordering's reconciler.
async fn lookup(
    _: ServiceCaller,
    db: web::Data<Db>,
    body: web::Json<contracts::api::IntervalLookupRequest>,
) -> Result<HttpResponse, Error> {
    let ids = body.into_inner().instance_ids;
    Ok(HttpResponse::Ok().json(intervals::lookup(&db, ids).await?))
}

/// `GET /internal/burn-rates/{tenant_id}`: what the tenant's running
/// rentals cost per hour now, for its runway.
async fn burn_rate(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<Uuid>,
) -> Result<HttpResponse, Error> {
    Ok(HttpResponse::Ok().json(intervals::burn_rate(&db, path.into_inner()).await?))
}
