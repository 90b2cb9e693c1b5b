//! Quota holds: one per provisioning attempt (idempotent by its key), taken
//! under a row lock on the tenant's quota so that concurrent orders of one
//! tenant (and of all its teams) are admitted one at a time against every
//! dimension: GPUs, GPUs per model, running instances, the monthly budget.
//! A hold is released when its instance stops, fails or is destroyed.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use contracts::api::{
    QuotaLimits, QuotaReservation, QuotaUsage, ReserveQuotaRequest, SetTenantQuotaRequest,
    TenantQuota,
};
use diesel::dsl::IntervalDsl;
use diesel::prelude::*;
use platform::Db;
use rust_decimal::Decimal;
use schema::quota::{reservations, tenant_quotas};
use uuid::Uuid;

use crate::limits::{self, Demand, Held, Level};
use crate::month::{self, Hold};
use crate::{Error, teams};

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
    tenant_id: Uuid,
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
    tenant_id: Uuid,
    team_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<(Held, month::Spend), Error> {
    let mut live = reservations::table
        .filter(reservations::tenant_id.eq(tenant_id))
        .filter(reservations::released_at.is_null())
        .select((reservations::gpu_model, reservations::gpu_count))
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
    for (model, gpus) in live {
        held.gpus += gpus;
        *held.gpus_by_model.entry(model).or_default() += gpus;
    }
    // Holds from before per-model accounting have no model.
    held.gpus_by_model.remove("");
    Ok((held, spend))
}

pub fn usage(held: Held, spend: month::Spend, currency: &str) -> QuotaUsage {
    QuotaUsage {
        gpus: held.gpus,
        gpus_by_model: held.gpus_by_model,
        running_instances: held.instances,
        month_to_date_spend: spend.month_to_date.normalize(),
        projected_month_spend: spend.projected.normalize(),
        currency: currency.to_owned(),
    }
}

fn validate(req: &ReserveQuotaRequest) -> Result<(), Error> {
    if req.gpu_count < 1 {
        return Err(Error::Validation("gpuCount: at least 1".into()));
    }
    // An empty model (an order from before per-model accounting) counts in
    // every dimension but the per-model one.
    if req.gpu_model.len() > 100 {
        return Err(Error::Validation("gpuModel: at most 100 characters".into()));
    }
    if req.hourly_rate < Decimal::ZERO {
        return Err(Error::Validation("hourlyRate: must not be negative".into()));
    }
    Ok(())
}

type ReservationRow = (
    Uuid,
    i32,
    Option<DateTime<Utc>>,
    String,
    Decimal,
    Option<Uuid>,
);

fn reservation_from(order_id: Uuid, row: ReservationRow) -> QuotaReservation {
    let (tenant_id, gpu_count, released_at, gpu_model, hourly_rate, team_id) = row;
    QuotaReservation {
        order_id,
        tenant_id,
        gpu_count,
        released: released_at.is_some(),
        gpu_model,
        hourly_rate,
        team_id,
    }
}

fn find(conn: &mut PgConnection, order_id: Uuid) -> QueryResult<Option<ReservationRow>> {
    reservations::table
        .find(order_id)
        .select((
            reservations::tenant_id,
            reservations::gpu_count,
            reservations::released_at,
            reservations::gpu_model,
            reservations::hourly_rate,
            reservations::team_id,
        ))
        .first(conn)
        .optional()
}

pub async fn reserve(
    db: &Db,
    currency: String,
    req: ReserveQuotaRequest,
) -> Result<QuotaReservation, Error> {
    validate(&req)?;
    db.tx(move |conn| {
        let tenant = tenant_limits(conn, req.tenant_id, true)?;
        if let Some(existing) = find(conn, req.order_id)? {
            if existing.0 != req.tenant_id {
                return Err(Error::Conflict("order belongs to another tenant".into()));
            }
            return Ok(reservation_from(req.order_id, existing));
        }
        let now = contracts::time::now();
        // A re-placed order's hold moves: released here and admitted again
        // below in its place, in this transaction, so a refusal rolls the
        // release back and nobody else can take the quota in between (the
        // tenant row is locked).
        let moved = match req.moves {
            Some(previous) => {
                let row = find(conn, previous)?.filter(|row| row.0 == req.tenant_id);
                diesel::update(reservations::table.find(previous))
                    .filter(reservations::tenant_id.eq(req.tenant_id))
                    .filter(reservations::released_at.is_null())
                    .set(reservations::released_at.eq(now))
                    .execute(conn)?;
                row
            }
            None => None,
        };
        // A start after a stop (or a move) counts against the team of the
        // earlier hold.
        let team_id = match (moved, req.renews) {
            (Some(row), _) => row.5,
            (None, Some(previous)) => find(conn, previous)?
                .filter(|row| row.0 == req.tenant_id)
                .and_then(|row| row.5),
            (None, None) => req.team_id,
        };
        let team = team_id
            .map(|id| teams::load(conn, req.tenant_id, id))
            .transpose()?;

        let demand = Demand {
            gpus: req.gpu_count,
            model: &req.gpu_model,
            projected_cost: month::projected_cost_of_new(req.hourly_rate, now),
        };
        if let Some(team) = &team {
            let (held, _) = held(conn, req.tenant_id, Some(team.id), now)?;
            let ceiling = limits::with_borrowing(&team.limits, &team.borrowing_limit);
            let level = Level::Team {
                id: team.id,
                name: team.name.clone(),
            };
            limits::admit(&level, &ceiling, &held, &demand, &currency)
                .map_err(Error::QuotaExceeded)?;
        }
        let (held, _) = held(conn, req.tenant_id, None, now)?;
        limits::admit(&Level::Tenant, &tenant, &held, &demand, &currency)
            .map_err(Error::QuotaExceeded)?;

        // Held from the instant the projection was made, so the spend right
        // after equals the spend checked.
        diesel::insert_into(reservations::table)
            .values((
                reservations::order_id.eq(req.order_id),
                reservations::tenant_id.eq(req.tenant_id),
                reservations::gpu_count.eq(req.gpu_count),
                reservations::gpu_model.eq(&req.gpu_model),
                reservations::hourly_rate.eq(req.hourly_rate),
                reservations::team_id.eq(team_id),
                reservations::created_at.eq(now),
            ))
            .execute(conn)?;
        Ok(QuotaReservation {
            order_id: req.order_id,
            tenant_id: req.tenant_id,
            gpu_count: req.gpu_count,
            released: false,
            gpu_model: req.gpu_model.clone(),
            hourly_rate: req.hourly_rate,
            team_id,
        })
    })
    .await
}

/// Releases a hold; releasing twice (or one never made) is fine.
pub async fn release(db: &Db, order_id: Uuid) -> Result<(), Error> {
    db.run(move |conn| {
        diesel::update(reservations::table.find(order_id))
            .filter(reservations::released_at.is_null())
            .set(reservations::released_at.eq(contracts::time::now()))
            .execute(conn)
            .map(|_| ())
            .map_err(Error::from)
    })
    .await
}

fn tenant_quota(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    limits: QuotaLimits,
    currency: &str,
) -> Result<TenantQuota, Error> {
    let now = contracts::time::now();
    let (held, spend) = held(conn, tenant_id, None, now)?;
    let teams = teams::all(conn, tenant_id, now, currency)?;
    Ok(TenantQuota {
        tenant_id,
        max_gpus: limits.max_gpus.unwrap_or(0),
        gpus_in_use: held.gpus,
        limits,
        usage: usage(held, spend, currency),
        teams,
    })
}

pub async fn get_quota(db: &Db, currency: String, tenant_id: Uuid) -> Result<TenantQuota, Error> {
    db.tx(move |conn| {
        let limits = tenant_limits(conn, tenant_id, false)?;
        tenant_quota(conn, tenant_id, limits, &currency)
    })
    .await
}

/// Sets a tenant's quota. Holds already taken stay (a lowered limit refuses
/// new orders until usage is under it); teams' nominal quotas are lowered
/// to fit, in the same transaction.
pub async fn set_quota(
    db: &Db,
    currency: String,
    tenant_id: Uuid,
    req: SetTenantQuotaRequest,
) -> Result<TenantQuota, Error> {
    match (&req.limits, req.max_gpus) {
        (Some(limits), None) => {
            limits::validate("limits", limits)?;
            if limits.max_gpus.is_none() {
                return Err(Error::Validation(
                    "limits.maxGpus: a tenant's quota always limits its GPUs".into(),
                ));
            }
        }
        (None, Some(max_gpus)) => {
            if max_gpus < 0 {
                return Err(Error::Validation("maxGpus: must not be negative".into()));
            }
        }
        _ => {
            return Err(Error::Validation(
                "limits: give either limits or maxGpus".into(),
            ));
        }
    }
    db.tx(move |conn| {
        let current = tenant_limits(conn, tenant_id, true)?;
        let limits = match req.limits {
            Some(limits) => limits,
            None => QuotaLimits {
                max_gpus: req.max_gpus,
                ..current
            },
        };
        let max_gpus = limits.max_gpus.unwrap_or(0);
        diesel::update(tenant_quotas::table.find(tenant_id))
            .set((
                tenant_quotas::max_gpus.eq(max_gpus),
                tenant_quotas::max_gpus_per_model.eq(model_json(&limits.max_gpus_per_model)),
                tenant_quotas::max_running_instances.eq(limits.max_running_instances),
                tenant_quotas::monthly_budget.eq(limits.monthly_budget),
                tenant_quotas::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)?;
        teams::clamp_all(conn, tenant_id, &limits)?;
        tenant_quota(conn, tenant_id, limits, &currency)
    })
    .await
}
