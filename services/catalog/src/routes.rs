use actix_web::{HttpResponse, web};
use contracts::api::{
    AllocateRequest, HostMachineRequest, OfferSearch, RegisterMachineRequest, SetPricingRequest,
    SetVerificationRequest, UpdateHostProfileRequest,
};
use platform::Db;
use platform::internal::ServiceCaller;
use serde::Deserialize;
use uuid::Uuid;

use crate::agents::AgentAccess;
use crate::market::Market;
use crate::{Error, allocations, gpu_models, hosts, machines, offers};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/internal")
            .route("/gpu-models", web::get().to(gpu_model_list))
            .route("/gpu-supply", web::get().to(crate::supply::supply_route))
            .route("/hosts/{tenant_id}/profile", web::get().to(host_profile))
            .route(
                "/hosts/{tenant_id}/profile",
                web::put().to(update_host_profile),
            )
            .route(
                "/hosts/{tenant_id}/verification",
                web::put().to(set_verification),
            )
            .route("/machines", web::post().to(register))
            .route("/machines", web::get().to(host_machines))
            .route(
                "/machines/heartbeats",
                web::post().to(crate::liveness::heartbeats_route),
            )
            .route("/machines/{id}/pricing", web::put().to(set_pricing))
            .route("/machines/{id}/list", web::post().to(list))
            .route("/machines/{id}/unlist", web::post().to(unlist))
            .route(
                "/machines/{id}/agent-token/revoke",
                web::post().to(crate::agents::revoke_route),
            )
            .route(
                "/machines/{id}/heartbeat-gaps",
                web::get().to(crate::heartbeats::gaps_route),
            )
            .route(
                "/machines/{id}/gpu-activity",
                web::get().to(crate::heartbeats::gpu_activity_route),
            )
            .route(
                "/machines/{id}/agent-token/rotate",
                web::post().to(rotate_token),
            )
            .route("/machines/{id}/delete", web::post().to(delete_machine))
            .route("/offers/search", web::post().to(search))
            .route("/offers/placement", web::post().to(placement))
            .route("/offers/{id}", web::get().to(get_offer))
            .route("/allocations", web::post().to(allocate))
            .route("/allocations/{order_id}/release", web::post().to(release)),
    );
}

type Reply = Result<HttpResponse, Error>;

async fn gpu_model_list(_: ServiceCaller, db: web::Data<Db>) -> Reply {
    Ok(HttpResponse::Ok().json(gpu_models::all(&db).await?))
}

async fn host_profile(_: ServiceCaller, db: web::Data<Db>, path: web::Path<Uuid>) -> Reply {
    Ok(HttpResponse::Ok().json(hosts::get(&db, path.into_inner()).await?))
}

async fn update_host_profile(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<Uuid>,
    body: web::Json<UpdateHostProfileRequest>,
) -> Reply {
    Ok(HttpResponse::Ok().json(hosts::update(&db, path.into_inner(), body.into_inner()).await?))
}

#[derive(Deserialize)]
struct OperatorQuery {
    operator_id: Option<Uuid>,
}

async fn set_verification(
    _: ServiceCaller,
    db: web::Data<Db>,
    events: web::Data<allocations::Events>,
    path: web::Path<Uuid>,
    q: web::Query<OperatorQuery>,
    body: web::Json<SetVerificationRequest>,
) -> Reply {
    let profile = hosts::set_verification(
        &db,
        &events.0,
        path.into_inner(),
        q.operator_id,
        body.into_inner(),
    )
    .await?;
    tracing::info!(tenant.id = %profile.tenant_id, verification = ?profile.verification, "host verification set");
    Ok(HttpResponse::Ok().json(profile))
}

async fn register(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    agents: web::Data<AgentAccess>,
    body: web::Json<RegisterMachineRequest>,
) -> Reply {
    let registered = machines::register_machine(
        &db,
        &market,
        body.into_inner(),
        async |id, token| agents.grant(id, &token).await,
        async |id, hash| agents.remove(id, &hash).await,
    )
    .await?;
    tracing::info!(machine.id = %registered.machine.id, "machine registered");
    Ok(HttpResponse::Created().json(registered))
}

#[derive(Deserialize)]
struct HostQuery {
    host_tenant_id: Uuid,
}

async fn host_machines(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    q: web::Query<HostQuery>,
) -> Reply {
    Ok(HttpResponse::Ok().json(machines::host_machines(&db, &market, q.host_tenant_id).await?))
}

async fn set_pricing(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    path: web::Path<Uuid>,
    body: web::Json<SetPricingRequest>,
) -> Reply {
    Ok(HttpResponse::Ok()
        .json(machines::set_pricing(&db, &market, path.into_inner(), body.into_inner()).await?))
}

async fn list(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    path: web::Path<Uuid>,
    body: web::Json<HostMachineRequest>,
) -> Reply {
    let machine =
        machines::list_machine(&db, &market, path.into_inner(), body.host_tenant_id, true).await?;
    Ok(HttpResponse::Ok().json(machine))
}

async fn unlist(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    path: web::Path<Uuid>,
    body: web::Json<HostMachineRequest>,
) -> Reply {
    let machine =
        machines::list_machine(&db, &market, path.into_inner(), body.host_tenant_id, false).await?;
    Ok(HttpResponse::Ok().json(machine))
}

async fn rotate_token(
    _: ServiceCaller,
    db: web::Data<Db>,
    agents: web::Data<AgentAccess>,
    path: web::Path<Uuid>,
    body: web::Json<HostMachineRequest>,
) -> Reply {
    let machine_id = path.into_inner();
    let token = machines::rotate_agent_token(
        &db,
        machine_id,
        body.host_tenant_id,
        async |id, token| agents.grant(id, &token).await,
        async |id, old| agents.retire(id, &old, "agent token replaced").await,
        async |id, new| agents.remove(id, &new).await,
    )
    .await?;
    Ok(HttpResponse::Ok()
        .json(serde_json::json!({ "machine_id": machine_id, "agent_token": token })))
}

async fn delete_machine(
    _: ServiceCaller,
    db: web::Data<Db>,
    agents: web::Data<AgentAccess>,
    path: web::Path<Uuid>,
    body: web::Json<HostMachineRequest>,
) -> Reply {
    let machine_id = path.into_inner();
    machines::delete_machine(&db, machine_id, body.host_tenant_id, async |id, hash| {
        agents.remove(id, &hash).await
    })
    .await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "machine_id": machine_id, "deleted": true })))
}

async fn search(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    body: web::Json<OfferSearch>,
) -> Reply {
    Ok(HttpResponse::Ok().json(offers::search(&db, &market, body.into_inner()).await?))
}

async fn get_offer(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    path: web::Path<Uuid>,
) -> Reply {
    Ok(HttpResponse::Ok().json(offers::get(&db, &market, path.into_inner()).await?))
}

async fn placement(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    body: web::Json<contracts::api::PlacementSearch>,
) -> Reply {
    Ok(HttpResponse::Ok()
        .json(offers::placement_candidates(&db, &market, body.into_inner()).await?))
}

async fn allocate(
    _: ServiceCaller,
    db: web::Data<Db>,
    events: web::Data<allocations::Events>,
    body: web::Json<AllocateRequest>,
) -> Reply {
    Ok(HttpResponse::Ok().json(allocations::allocate(&db, &events, body.into_inner()).await?))
}

async fn release(
    _: ServiceCaller,
    db: web::Data<Db>,
    events: web::Data<allocations::Events>,
    path: web::Path<Uuid>,
) -> Reply {
    allocations::release(&db, &events, path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "released": true })))
}
