//! GPU supply now, per GPU model, for the operators' marketplace overview
//! (docs/dashboards.md, "Operator overview"): GPUs on listed machines, those
//! of them on machines online by the catalog's own rule (heard from within
//! the heartbeat grace), and GPUs held by live allocations. The catalog is
//! the only writer of capacity, so these are the numbers placement uses.

use actix_web::web;
use contracts::operator::{GpuSupply, GpuSupplyModel};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use platform::Db;
use platform::endpoint::Reply;
use platform::internal::ServiceCaller;

use crate::Error;
use crate::market::Market;

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = Text)]
    gpu_model: String,
    #[diesel(sql_type = BigInt)]
    listed_machines: i64,
    #[diesel(sql_type = BigInt)]
    listed_gpus: i64,
    #[diesel(sql_type = BigInt)]
    online_gpus: i64,
    #[diesel(sql_type = BigInt)]
    rented_gpus: i64,
    #[diesel(sql_type = BigInt)]
    rented_listed_gpus: i64,
}

/// Listed as the offer search counts it: listed, and its listing not past
/// the end the host set.
const LISTED_SQL: &str = "(catalog.machines.listed AND (catalog.machines.list_until IS NULL \
     OR catalog.machines.list_until > now()))";

/// Every model with a listed machine or a live allocation. Rented GPUs are
/// the live allocations (not yet released: held from allocation until the
/// instance stops, or until its machine validates clean after a destroy),
/// on any machine: a machine unlisted under a running rental still rents.
/// A running reserved block counts once, by its own hold: the instances
/// inside it use the block's GPUs.
pub async fn supply(db: &Db, market: &Market) -> Result<GpuSupply, Error> {
    // Unaliased, so the catalog's own online predicate applies as written.
    let sql = format!(
        "SELECT catalog.machines.gpu_model, \
                count(*) FILTER (WHERE {listed}) AS listed_machines, \
                coalesce(sum(catalog.machines.gpu_count) FILTER (WHERE {listed}), 0)::bigint AS listed_gpus, \
                coalesce(sum(catalog.machines.gpu_count) FILTER (WHERE {listed} AND {online}), 0)::bigint AS online_gpus, \
                coalesce(sum(a.gpus), 0)::bigint AS rented_gpus, \
                coalesce(sum(a.gpus) FILTER (WHERE {listed}), 0)::bigint AS rented_listed_gpus \
         FROM catalog.machines \
         LEFT JOIN (SELECT machine_id, \
                           coalesce(sum(gpu_count) FILTER (WHERE mig_profile IS NULL), 0) \
                           + count(DISTINCT mig_gpu_index) AS gpus \
                    FROM catalog.allocations \
                    WHERE released_at IS NULL AND reservation_id IS NULL \
                    GROUP BY machine_id) a \
                ON a.machine_id = catalog.machines.id \
         WHERE {listed} OR a.gpus > 0 \
         GROUP BY catalog.machines.gpu_model \
         ORDER BY catalog.machines.gpu_model",
        online = market.online_sql(),
        listed = LISTED_SQL,
    );
    let (rows, at) = db
        .run(move |conn| {
            let rows: Vec<Row> = diesel::sql_query(sql).load(conn)?;
            Ok::<_, Error>((rows, contracts::time::now()))
        })
        .await?;
    let models: Vec<GpuSupplyModel> = rows
        .into_iter()
        .map(|r| GpuSupplyModel {
            gpu_model: r.gpu_model,
            listed_machines: r.listed_machines,
            listed_gpus: r.listed_gpus,
            online_gpus: r.online_gpus,
            rented_gpus: r.rented_gpus,
            rented_listed_gpus: r.rented_listed_gpus,
        })
        .collect();
    Ok(GpuSupply {
        at,
        listed_gpus: models.iter().map(|m| m.listed_gpus).sum(),
        online_gpus: models.iter().map(|m| m.online_gpus).sum(),
        rented_gpus: models.iter().map(|m| m.rented_gpus).sum(),
        rented_listed_gpus: models.iter().map(|m| m.rented_listed_gpus).sum(),
        models,
    })
}

pub async fn supply_route(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
) -> Result<Reply<GpuSupply>, Error> {
    Ok(Reply::ok(supply(&db, &market).await?))
}
