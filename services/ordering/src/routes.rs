use actix_web::web;
use contracts::api::{
    CreateOrderWithRules, DeprovisioningResult, HostQuery, Instance, InstanceRules,
    MachineLiveInstances, ProvisioningResult, SetInstanceRulesRequest, TenantQuery, TenantRequest,
};
use contracts::endpoints::ordering::{
    CREATE_ORDER, DEPROVISIONING_RESULT, DESTROY, INSTANCE, INSTANCE_EVENTS, INSTANCE_LIST,
    INSTANCE_RULES, MACHINE_LIVE_INSTANCES, PROVISIONING_RESULT, SET_INSTANCE_RULES, START, STOP,
};
use contracts::events::InstanceEvent;
use contracts::ids::{InstanceId, MachineId};
use platform::Db;
use platform::endpoint::{Reply, route};
use platform::internal::ServiceCaller;

use crate::{Deps, Error, events, instances, lifecycle, rules, saga};

pub fn configure(cfg: &mut web::ServiceConfig) {
    route(cfg, CREATE_ORDER, create_order);
    route(cfg, INSTANCE_LIST, list);
    route(cfg, INSTANCE, get);
    route(cfg, INSTANCE_EVENTS, instance_events);
    route(cfg, INSTANCE_RULES, get_rules);
    route(cfg, SET_INSTANCE_RULES, set_rules);
    route(cfg, STOP, stop);
    route(cfg, START, start);
    route(cfg, DESTROY, destroy);
    route(cfg, MACHINE_LIVE_INSTANCES, machine_live_instances);
    route(cfg, DEPROVISIONING_RESULT, deprovisioning_result);
    route(cfg, PROVISIONING_RESULT, provisioning_result);
    crate::reservations::configure(cfg);
}

type Answer<R> = Result<Reply<R>, Error>;

/// `?attempt=`, as a provisioner of the previous release sends it (now in
/// the body); read for one release, during a rolling deploy.
#[derive(serde::Deserialize)]
struct AttemptQuery {
    attempt: Option<i32>,
}

async fn create_order(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    body: web::Json<CreateOrderWithRules>,
) -> Answer<Instance> {
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
        rules::attach_to_order(&db, instance.id.into(), tenant_id, rules).await?;
    }
    Ok(Reply::ok(instance))
}

async fn instance_events(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<InstanceId>,
    q: web::Query<TenantQuery>,
) -> Answer<Vec<InstanceEvent>> {
    Ok(Reply::ok(
        events::history(&db, path.into_inner().into_uuid(), q.tenant_id).await?,
    ))
}

async fn get_rules(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<InstanceId>,
    q: web::Query<TenantQuery>,
) -> Answer<InstanceRules> {
    Ok(Reply::ok(
        rules::get(&db, path.into_inner().into_uuid(), q.tenant_id).await?,
    ))
}

async fn set_rules(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    path: web::Path<InstanceId>,
    body: web::Json<SetInstanceRulesRequest>,
) -> Answer<InstanceRules> {
    let body = body.into_inner();
    Ok(Reply::ok(
        rules::set(
            &db,
            &deps,
            path.into_inner().into_uuid(),
            body.tenant_id,
            body.rules,
        )
        .await?,
    ))
}

async fn list(
    _: ServiceCaller,
    db: web::Data<Db>,
    q: web::Query<TenantQuery>,
) -> Answer<Vec<Instance>> {
    Ok(Reply::ok(instances::list(&db, q.tenant_id).await?))
}

/// Asked before a host's machine is deleted (the gateway's `deleteMachine`).
async fn machine_live_instances(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<MachineId>,
    q: web::Query<HostQuery>,
) -> Answer<MachineLiveInstances> {
    Ok(Reply::ok(
        instances::live_on_machine(&db, path.into_inner(), q.host_tenant_id).await?,
    ))
}

async fn get(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<InstanceId>,
    q: web::Query<TenantQuery>,
) -> Answer<Instance> {
    Ok(Reply::ok(
        instances::get(&db, path.into_inner().into_uuid(), q.tenant_id).await?,
    ))
}

async fn stop(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    path: web::Path<InstanceId>,
    body: web::Json<TenantRequest>,
) -> Answer<Instance> {
    Ok(Reply::ok(
        instances::stop(&db, &deps, path.into_inner().into_uuid(), body.tenant_id).await?,
    ))
}

async fn start(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    path: web::Path<InstanceId>,
    body: web::Json<TenantRequest>,
) -> Answer<Instance> {
    Ok(Reply::ok(
        lifecycle::start(&db, &deps, path.into_inner().into_uuid(), body.tenant_id).await?,
    ))
}

async fn destroy(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    path: web::Path<InstanceId>,
    body: web::Json<TenantRequest>,
) -> Answer<Instance> {
    Ok(Reply::ok(
        lifecycle::destroy(&db, &deps, path.into_inner().into_uuid(), body.tenant_id).await?,
    ))
}

async fn deprovisioning_result(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    path: web::Path<InstanceId>,
    body: web::Json<DeprovisioningResult>,
) -> Answer<Instance> {
    Ok(Reply::ok(
        lifecycle::deprovisioning_result(
            &db,
            &deps,
            path.into_inner().into_uuid(),
            body.into_inner(),
        )
        .await?,
    ))
}

async fn provisioning_result(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    path: web::Path<InstanceId>,
    body: web::Json<ProvisioningResult>,
    q: web::Query<AttemptQuery>,
) -> Answer<Instance> {
    let id = path.into_inner().into_uuid();
    let body = body.into_inner();
    // A late report about an earlier provisioning attempt changes nothing.
    if let Some(attempt) = body.attempt.or(q.attempt)
        && let Some(current) = instances::stale_report(&db, id, attempt).await?
    {
        return Ok(Reply::ok(current));
    }
    let instance = if body.ready {
        instances::mark_ready(&db, &deps, id, body.connection).await?
    } else {
        let reason = body.reason.unwrap_or_else(|| "provisioning failed".into());
        instances::mark_failed(&db, &deps, id, reason).await?
    };
    Ok(Reply::ok(instance))
}
