//! `POST /internal/machines/heartbeats`: the liveness of a batch of machines
//! by the catalog's own rule (online iff the last heartbeat is younger than
//! the grace period, `reliability::online_sql`). Ordering's reconciler asks
//! it which hosts of its running instances went silent and which came back;
//! ordering never reads the catalog's tables, so the rule stays here.

use actix_web::web;
use chrono::{DateTime, Utc};
use contracts::api::{MachineHeartbeat, MachineHeartbeatsRequest, RECONCILE_LOOKUP_MAX};
use contracts::ids::MachineId;
use diesel::prelude::*;
use diesel::sql_types::{Array, Bool, Nullable, Timestamptz, Uuid as SqlUuid};
use platform::Db;
use platform::endpoint::Reply;
use platform::internal::ServiceCaller;
use uuid::Uuid;

use crate::Error;
use crate::market::Market;

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = SqlUuid)]
    id: Uuid,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    last_heartbeat_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Bool)]
    online: bool,
}

/// The liveness of `machine_ids` (unknown ids are left out), by id.
pub async fn heartbeats(
    db: &Db,
    market: &Market,
    machine_ids: Vec<Uuid>,
) -> Result<Vec<MachineHeartbeat>, Error> {
    if machine_ids.len() > RECONCILE_LOOKUP_MAX {
        return Err(Error::Validation(format!(
            "machine_ids: at most {RECONCILE_LOOKUP_MAX}"
        )));
    }
    let sql = format!(
        "SELECT id, last_heartbeat_at, {} AS online
         FROM catalog.machines WHERE id = ANY($1) ORDER BY id",
        market.online_sql()
    );
    let rows: Vec<Row> = db
        .run(move |conn| {
            diesel::sql_query(sql)
                .bind::<Array<SqlUuid>, _>(machine_ids)
                .load(conn)
                .map_err(Error::from)
        })
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| MachineHeartbeat {
            machine_id: MachineId(r.id),
            last_heartbeat_at: r.last_heartbeat_at,
            online: r.online,
        })
        .collect())
}

pub async fn heartbeats_route(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    body: web::Json<MachineHeartbeatsRequest>,
) -> Result<Reply<Vec<MachineHeartbeat>>, Error> {
    let body = body.into_inner();
    let ids = body
        .machine_ids
        .into_iter()
        .map(MachineId::into_uuid)
        .collect();
    Ok(Reply::ok(heartbeats(&db, &market, ids).await?))
}
