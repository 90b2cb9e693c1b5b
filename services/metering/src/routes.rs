use actix_web::web;
use contracts::api::{BurnRate, GpuInterval, IntervalLookupRequest, UsageInterval, UsageQuery};
use contracts::endpoints::metering::{BURN_RATE, INTERVALS_LOOKUP, USAGE};
use contracts::ids::{InstanceId, TenantId};
use platform::Db;
use platform::endpoint::{Reply, route};
use platform::internal::ServiceCaller;

use crate::{Error, intervals};

pub fn configure(cfg: &mut web::ServiceConfig) {
    route(cfg, USAGE, usage);
    route(cfg, INTERVALS_LOOKUP, lookup);
    route(cfg, BURN_RATE, burn_rate);
}

async fn usage(
    _: ServiceCaller,
    db: web::Data<Db>,
    q: web::Query<UsageQuery>,
) -> Result<Reply<Vec<UsageInterval>>, Error> {
    Ok(Reply::ok(
        intervals::usage(&db, q.tenant_id, q.instance_id.map(InstanceId::into_uuid)).await?,
    ))
}

/// `POST /internal/intervals/lookup`: the GPU intervals of the instances
/// named, for ordering's reconciler.
async fn lookup(
    _: ServiceCaller,
    db: web::Data<Db>,
    body: web::Json<IntervalLookupRequest>,
) -> Result<Reply<Vec<GpuInterval>>, Error> {
    let ids = body
        .into_inner()
        .instance_ids
        .into_iter()
        .map(InstanceId::into_uuid)
        .collect();
    Ok(Reply::ok(intervals::lookup(&db, ids).await?))
}

/// `GET /internal/burn-rates/{tenant_id}`: what the tenant's running
/// rentals cost per hour now, for its runway.
async fn burn_rate(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<TenantId>,
) -> Result<Reply<BurnRate>, Error> {
    Ok(Reply::ok(
        intervals::burn_rate(&db, path.into_inner()).await?,
    ))
}
