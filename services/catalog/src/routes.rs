use actix_web::{HttpResponse, web};
use contracts::api::{
    AllocateRequest, HostMachineRequest, OfferQuery, RegisterMachineRequest, SetPricingRequest,
};
use platform::Db;
use platform::internal::ServiceCaller;
use serde::Deserialize;
use uuid::Uuid;

use crate::{Error, allocations, machines, offers};

/// The settlement currency every price is in.
pub struct Currency(pub String);

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/internal")
            .route("/machines", web::post().to(register))
            .route("/machines", web::get().to(host_machines))
            .route("/machines/{id}/pricing", web::put().to(set_pricing))
            .route("/machines/{id}/list", web::post().to(list))
            .route("/machines/{id}/unlist", web::post().to(unlist))
            .route("/offers", web::get().to(search))
            .route("/offers/{id}", web::get().to(get_offer))
            .route("/allocations", web::post().to(allocate))
            .route("/allocations/{order_id}/release", web::post().to(release)),
    );
}

type Reply = Result<HttpResponse, Error>;

async fn register(
    _: ServiceCaller,
    db: web::Data<Db>,
    currency: web::Data<Currency>,
    body: web::Json<RegisterMachineRequest>,
) -> Reply {
    let registered = machines::register_machine(&db, body.into_inner(), currency.0.clone()).await?;
    tracing::info!(machine.id = %registered.machine.id, "machine registered");
    Ok(HttpResponse::Created().json(registered))
}

#[derive(Deserialize)]
struct HostQuery {
    host_tenant_id: Uuid,
}

async fn host_machines(_: ServiceCaller, db: web::Data<Db>, q: web::Query<HostQuery>) -> Reply {
    Ok(HttpResponse::Ok().json(machines::host_machines(&db, q.host_tenant_id).await?))
}

async fn set_pricing(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<Uuid>,
    body: web::Json<SetPricingRequest>,
) -> Reply {
    let machine = machines::set_pricing(
        &db,
        path.into_inner(),
        body.host_tenant_id,
        body.price_per_gpu_hour,
    )
    .await?;
    Ok(HttpResponse::Ok().json(machine))
}

async fn list(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<Uuid>,
    body: web::Json<HostMachineRequest>,
) -> Reply {
    Ok(HttpResponse::Ok()
        .json(machines::list_machine(&db, path.into_inner(), body.host_tenant_id, true).await?))
}

async fn unlist(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<Uuid>,
    body: web::Json<HostMachineRequest>,
) -> Reply {
    Ok(HttpResponse::Ok()
        .json(machines::list_machine(&db, path.into_inner(), body.host_tenant_id, false).await?))
}

async fn search(_: ServiceCaller, db: web::Data<Db>, q: web::Query<OfferQuery>) -> Reply {
    Ok(HttpResponse::Ok().json(offers::search(&db, q.into_inner()).await?))
}

async fn get_offer(_: ServiceCaller, db: web::Data<Db>, path: web::Path<Uuid>) -> Reply {
    Ok(HttpResponse::Ok().json(offers::get(&db, path.into_inner()).await?))
}

async fn allocate(_: ServiceCaller, db: web::Data<Db>, body: web::Json<AllocateRequest>) -> Reply {
    Ok(HttpResponse::Ok().json(allocations::allocate(&db, body.into_inner()).await?))
}

async fn release(_: ServiceCaller, db: web::Data<Db>, path: web::Path<Uuid>) -> Reply {
    allocations::release(&db, path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "released": true })))
}
