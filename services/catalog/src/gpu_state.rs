//! Each GPU of a machine as the choices of [`crate::gpu_choice`] see it: in
//! MIG mode or not, who holds it, whether a booked period has started on it
//! and when its next one starts. One statement for any number of machines
//! (the allocation's, or an offer page's).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{Array, Bool, Int4, Nullable, Timestamptz, Uuid as SqlUuid};
use uuid::Uuid;

use crate::gpu_choice::GpuState;

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = SqlUuid)]
    machine_id: Uuid,
    #[diesel(sql_type = Int4)]
    gpu_index: i32,
    #[diesel(sql_type = Bool)]
    mig: bool,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    holder: Option<Uuid>,
    #[diesel(sql_type = Bool)]
    booked_now: bool,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    next_booking: Option<DateTime<Utc>>,
}

/// The GPUs of `machine_ids` at `at`, per machine, by index.
pub fn load(
    conn: &mut PgConnection,
    machine_ids: &[Uuid],
    at: DateTime<Utc>,
) -> QueryResult<BTreeMap<Uuid, Vec<GpuState>>> {
    if machine_ids.is_empty() {
        return Ok(BTreeMap::new());
    }
    let rows: Vec<Row> = diesel::sql_query(
        "SELECT m.id AS machine_id, i AS gpu_index,
                EXISTS (SELECT 1 FROM catalog.mig_gpus mg
                        WHERE mg.machine_id = m.id AND mg.gpu_index = i) AS mig,
                (SELECT h.holder FROM catalog.gpu_holds h
                 WHERE h.machine_id = m.id AND h.gpu_index = i LIMIT 1) AS holder,
                EXISTS (SELECT 1 FROM catalog.booked_gpus g
                        WHERE g.machine_id = m.id AND g.gpu_index = i AND g.period @> $2) AS booked_now,
                (SELECT min(lower(g.period)) FROM catalog.booked_gpus g
                 WHERE g.machine_id = m.id AND g.gpu_index = i AND lower(g.period) > $2) AS next_booking
         FROM catalog.machines m CROSS JOIN LATERAL generate_series(0, m.gpu_count - 1) AS i
         WHERE m.id = ANY($1)
         ORDER BY m.id, i",
    )
    .bind::<Array<SqlUuid>, _>(machine_ids)
    .bind::<Timestamptz, _>(at)
    .load(conn)?;
    let mut out: BTreeMap<Uuid, Vec<GpuState>> = BTreeMap::new();
    for r in rows {
        let Ok(index) = u32::try_from(r.gpu_index) else {
            continue;
        };
        out.entry(r.machine_id).or_default().push(GpuState {
            index,
            mig: r.mig,
            holder: r.holder,
            booked_now: r.booked_now,
            next_booking: r.next_booking,
        });
    }
    Ok(out)
}

/// The GPUs of one machine at `at`.
pub fn load_one(
    conn: &mut PgConnection,
    machine_id: Uuid,
    at: DateTime<Utc>,
) -> QueryResult<Vec<GpuState>> {
    Ok(load(conn, &[machine_id], at)?
        .remove(&machine_id)
        .unwrap_or_default())
}
