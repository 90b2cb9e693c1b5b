use actix_web::{HttpResponse, web};
use contracts::api::{CreateOrderRequest, ProvisioningResult, TenantRequest};
use platform::Db;
use platform::internal::ServiceCaller;
use serde::Deserialize;
use uuid::Uuid;

use crate::{Deps, Error, instances, saga};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/internal")
            .route("/orders", web::post().to(create_order))
            .route("/instances", web::get().to(list))
            .route("/instances/{id}", web::get().to(get))
            .route("/instances/{id}/stop", web::post().to(stop))
            .route(
                "/instances/{id}/provisioning-result",
                web::post().to(provisioning_result),
            ),
    );
}

type Reply = Result<HttpResponse, Error>;

#[derive(Deserialize)]
struct TenantQuery {
    tenant_id: Uuid,
}

async fn create_order(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    body: web::Json<CreateOrderRequest>,
) -> Reply {
    Ok(HttpResponse::Ok().json(saga::create_order(&db, &deps, body.into_inner()).await?))
}

async fn list(_: ServiceCaller, db: web::Data<Db>, q: web::Query<TenantQuery>) -> Reply {
    Ok(HttpResponse::Ok().json(instances::list(&db, q.tenant_id).await?))
}

async fn get(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<Uuid>,
    q: web::Query<TenantQuery>,
) -> Reply {
    Ok(HttpResponse::Ok().json(instances::get(&db, path.into_inner(), q.tenant_id).await?))
}

async fn stop(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    path: web::Path<Uuid>,
    body: web::Json<TenantRequest>,
) -> Reply {
    Ok(HttpResponse::Ok()
        .json(instances::stop(&db, &deps, path.into_inner(), body.tenant_id).await?))
}

async fn provisioning_result(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    path: web::Path<Uuid>,
    body: web::Json<ProvisioningResult>,
) -> Reply {
    let id = path.into_inner();
    let body = body.into_inner();
    let instance = if body.ready {
        instances::mark_ready(&db, &deps, id).await?
    } else {
        let reason = body.reason.unwrap_or_else(|| "provisioning failed".into());
        instances::mark_failed(&db, &deps, id, reason).await?
    };
    Ok(HttpResponse::Ok().json(instance))
}
