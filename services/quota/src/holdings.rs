//! What a tenant (or one of its teams) holds now, its spend this month, and
//! its limits as stored: the reads that admission (`reservations`) and the
//! team budgets (`teams`) share.

use contracts::ids::TenantId;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use contracts::api::{QuotaLimits, QuotaUsage};
use diesel::dsl::IntervalDsl;
use diesel::prelude::*;
use rust_decimal::Decimal;
use schema::quota::{reservations, tenant_quotas};
use uuid::Uuid;

use crate::Error;
use crate::limits::Held;
use crate::month::{self, Hold};

/// Per-model limits are stored as a JSON object; the table's CHECK keeps it
/// an object and only this service writes it.
pub fn model_map(value: serde_json::Value) -> BTreeMap<String, i32> {
    serde_json::from_value(value).unwrap_or_default()
}

pub fn model_json(map: &BTreeMap<String, i32>) -> serde_json::Value {
    serde_json::Value::Object(
        map.iter()
            .map(|(model, max)| (model.clone(), serde_json::Value::from(*max)))
            .collect(),
    )
}

type TenantRow = (i32, serde_json::Value, Option<i32>, Option<Decimal>);

fn tenant_limits_from(row: TenantRow) -> QuotaLimits {
    let (max_gpus, per_model, instances, budget) = row;
    QuotaLimits {
        max_gpus: Some(max_gpus),
        max_gpus_per_model: model_map(per_model),
        max_running_instances: instances,
        monthly_budget: budget,
    }
}

/// The tenant's limits; with `lock`, also the row lock that serialises every
/// admission and quota change of the tenant and its teams.
pub fn tenant_limits(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    lock: bool,
) -> Result<QuotaLimits, Error> {
    let query = tenant_quotas::table.find(tenant_id).select((
        tenant_quotas::max_gpus,
        tenant_quotas::max_gpus_per_model,
        tenant_quotas::max_running_instances,
        tenant_quotas::monthly_budget,
    ));
    let row: Option<TenantRow> = if lock {
        query.for_update().first(conn).optional()?
    } else {
        query.first(conn).optional()?
    };
    row.map(tenant_limits_from)
        .ok_or_else(|| Error::NotFound("tenant not found".into()))
}

/// What the tenant (or one of its teams) holds at `now`, and its spend this
/// month as [`month::spend`] measures it.
pub fn held(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    team_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<(Held, month::Spend), Error> {
    let mut live = reservations::table
        .filter(reservations::tenant_id.eq(tenant_id))
        .filter(reservations::released_at.is_null())
        .select((reservations::gpu_model, reservations::gpu_eighths))
        .into_boxed();
    if let Some(team) = team_id {
        live = live.filter(reservations::team_id.eq(team));
    }
    let live: Vec<(String, i32)> = live.load(conn)?;

    // Holds that cost something this month. A hold released within a second
    // costs nothing (whole seconds), which leaves out the many orders that
    // lose a capacity race, so this stays the size of real usage.
    let (start, end) = month::bounds(now);
    let mut costing = reservations::table
        .filter(reservations::tenant_id.eq(tenant_id))
        .filter(reservations::hourly_rate.gt(Decimal::ZERO))
        .filter(reservations::created_at.lt(end))
        .filter(reservations::released_at.is_null().or(
            reservations::released_at.gt(start).and(
                reservations::released_at.ge((reservations::created_at + 1.second()).nullable()),
            ),
        ))
        .select((
            reservations::hourly_rate,
            reservations::created_at,
            reservations::released_at,
        ))
        .into_boxed();
    if let Some(team) = team_id {
        costing = costing.filter(reservations::team_id.eq(team));
    }
    let holds: Vec<Hold> = costing
        .load::<(Decimal, DateTime<Utc>, Option<DateTime<Utc>>)>(conn)?
        .into_iter()
        .map(|(hourly_rate, held_from, released_at)| Hold {
            hourly_rate,
            held_from,
            released_at,
        })
        .collect();
    let spend = month::spend(&holds, now);

    let mut held = Held {
        instances: live.len() as i32,
        projected_spend: spend.projected,
        ..Held::default()
    };
    for (model, eighths) in live {
        let gpus = Decimal::from(eighths) / Decimal::from(8);
        held.gpus += gpus;
        *held.gpus_by_model.entry(model).or_default() += gpus;
    }
    // Holds from before per-model accounting have no model.
    held.gpus_by_model.remove("");
    Ok((held, spend))
}

/// The GPU-equivalents rounded up, for the integer fields that predate
/// MIG slices (two half-GPU slices on two GPUs show 1).
pub fn whole_gpus(gpus: Decimal) -> i32 {
    i32::try_from(gpus.ceil()).unwrap_or(i32::MAX)
}

pub fn usage(held: Held, spend: month::Spend, currency: &str) -> QuotaUsage {
    QuotaUsage {
        gpus: whole_gpus(held.gpus),
        gpu_equivalents: held.gpus.normalize(),
        gpus_by_model: held
            .gpus_by_model
            .into_iter()
            .map(|(model, gpus)| (model, whole_gpus(gpus)))
            .collect(),
        running_instances: held.instances,
        month_to_date_spend: spend.month_to_date.normalize(),
        projected_month_spend: spend.projected.normalize(),
        currency: currency.to_owned(),
    }
}
