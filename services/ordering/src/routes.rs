use actix_web::{HttpResponse, web};
use contracts::api::{
    CreateOrderWithRules, DeprovisioningResult, ProvisioningResult, SetInstanceRulesRequest,
    TenantRequest,
};
use platform::Db;
use platform::internal::ServiceCaller;
use serde::Deserialize;
use uuid::Uuid;

use crate::{Deps, Error, events, instances, lifecycle, rules, saga};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/internal")
            .route("/orders", web::post().to(create_order))
            .route("/instances", web::get().to(list))
            .route("/instances/{id}", web::get().to(get))
            .route("/instances/{id}/events", web::get().to(instance_events))
            .route("/instances/{id}/rules", web::get().to(get_rules))
            .route("/instances/{id}/rules", web::put().to(set_rules))
            .route("/instances/{id}/stop", web::post().to(stop))
            .route("/instances/{id}/start", web::post().to(start))
            .route("/instances/{id}/destroy", web::post().to(destroy))
            .route(
                "/machines/{id}/live-instances",
                web::get().to(machine_live_instances),
            )
            .route(
                "/instances/{id}/deprovisioning-result",
                web::post().to(deprovisioning_result),
            )
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

/// Which provisioning attempt a report is about (absent: the current one).
#[derive(Deserialize)]
struct AttemptQuery {
    attempt: Option<i32>,
}

async fn create_order(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    body: web::Json<CreateOrderWithRules>,
) -> Reply {
    let CreateOrderWithRules { order, rules } = body.into_inner();
    // Bad rules must fail the order before it takes anything.
    if let Some(rules) = &rules {
        rules::validate(rules, deps.settings.gpu_activity_retention_seconds)?;
    }
    let tenant_id = order.tenant_id;
    let instance = saga::create_order(&db, &deps, order).await?;
    // Attached after the saga's commit: a failure here fails the request,
    // and repeating it (same idempotency key) finds the instance and attaches
    // them then. The rules task acts seconds later at the earliest.
    if let Some(rules) = rules {
        rules::attach_to_order(&db, instance.id, tenant_id, rules).await?;
    }
    Ok(HttpResponse::Ok().json(instance))
}

async fn instance_events(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<Uuid>,
    q: web::Query<TenantQuery>,
) -> Reply {
    Ok(HttpResponse::Ok().json(events::history(&db, path.into_inner(), q.tenant_id).await?))
}

async fn get_rules(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<Uuid>,
    q: web::Query<TenantQuery>,
) -> Reply {
    Ok(HttpResponse::Ok().json(rules::get(&db, path.into_inner(), q.tenant_id).await?))
}

async fn set_rules(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    path: web::Path<Uuid>,
    body: web::Json<SetInstanceRulesRequest>,
) -> Reply {
    let body = body.into_inner();
    Ok(HttpResponse::Ok()
        .json(rules::set(&db, &deps, path.into_inner(), body.tenant_id, body.rules).await?))
}

async fn list(_: ServiceCaller, db: web::Data<Db>, q: web::Query<TenantQuery>) -> Reply {
    Ok(HttpResponse::Ok().json(instances::list(&db, q.tenant_id).await?))
}

#[derive(Deserialize)]
struct HostQuery {
    host_tenant_id: Uuid,
}

/// Asked before a host's machine is deleted (the gateway's `deleteMachine`).
async fn machine_live_instances(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<Uuid>,
    q: web::Query<HostQuery>,
) -> Reply {
    Ok(HttpResponse::Ok()
        .json(instances::live_on_machine(&db, path.into_inner(), q.host_tenant_id).await?))
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

async fn start(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    path: web::Path<Uuid>,
    body: web::Json<TenantRequest>,
) -> Reply {
    Ok(HttpResponse::Ok()
        .json(lifecycle::start(&db, &deps, path.into_inner(), body.tenant_id).await?))
}

async fn destroy(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    path: web::Path<Uuid>,
    body: web::Json<TenantRequest>,
) -> Reply {
    Ok(HttpResponse::Ok()
        .json(lifecycle::destroy(&db, &deps, path.into_inner(), body.tenant_id).await?))
}

async fn deprovisioning_result(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    path: web::Path<Uuid>,
    body: web::Json<DeprovisioningResult>,
) -> Reply {
    Ok(HttpResponse::Ok().json(
        lifecycle::deprovisioning_result(&db, &deps, path.into_inner(), body.into_inner()).await?,
    ))
}

async fn provisioning_result(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    path: web::Path<Uuid>,
    body: web::Json<ProvisioningResult>,
    q: web::Query<AttemptQuery>,
) -> Reply {
    let id = path.into_inner();
    let body = body.into_inner();
    // A late report about an earlier provisioning attempt changes nothing.
    if let Some(attempt) = q.attempt
        && let Some(current) = instances::stale_report(&db, id, attempt).await?
    {
        return Ok(HttpResponse::Ok().json(current));
    }
    let instance = if body.ready {
        instances::mark_ready(&db, &deps, id, body.connection).await?
    } else {
        let reason = body.reason.unwrap_or_else(|| "provisioning failed".into());
        instances::mark_failed(&db, &deps, id, reason).await?
    };
    Ok(HttpResponse::Ok().json(instance))
}
