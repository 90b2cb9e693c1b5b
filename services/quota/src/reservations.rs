//! Quota holds: one per provisioning attempt (idempotent by its key), taken
//! under a row lock on the tenant's quota so that concurrent orders of one
//! tenant (and of all its teams) are admitted one at a time against every
//! dimension: GPUs, GPUs per model, running instances, the monthly budget.
//! A hold is released when its instance stops, fails or is destroyed.

use chrono::{DateTime, Utc};
use contracts::api::{
    QuotaLimits, QuotaReservation, ReserveQuotaRequest, SetTenantQuotaRequest, TenantQuota,
};
use contracts::ids::{OrderId, TeamId, TenantId};
use diesel::prelude::*;
use platform::Db;
use rust_decimal::Decimal;
use schema::quota::{reservations, tenant_quotas};
use uuid::Uuid;

use crate::holdings::{held, model_json, tenant_limits, usage};
use crate::limits::{self, Demand, Level};
use crate::month;
use crate::{Error, teams};

fn validate(req: &ReserveQuotaRequest) -> Result<(), Error> {
    if req.gpu_count < 1 {
        return Err(Error::Validation("gpuCount: at least 1".into()));
    }
    // An empty model (an order from before per-model accounting) counts in
    // every dimension but the per-model one.
    if req.gpu_model.len() > 100 {
        return Err(Error::Validation("gpuModel: at most 100 characters".into()));
    }
    if let Some(eighths) = req.gpu_eighths
        && !(1..=req.gpu_count.saturating_mul(8)).contains(&eighths)
    {
        return Err(Error::Validation(
            "gpuEighths: between 1 and 8 per GPU".into(),
        ));
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

fn reservation_from(order_id: OrderId, row: ReservationRow) -> QuotaReservation {
    let (tenant_id, gpu_count, released_at, gpu_model, hourly_rate, team_id) = row;
    QuotaReservation {
        order_id,
        tenant_id: TenantId(tenant_id),
        gpu_count,
        released: released_at.is_some(),
        gpu_model,
        hourly_rate,
        team_id: team_id.map(TeamId),
    }
}

fn find(conn: &mut PgConnection, order_id: OrderId) -> QueryResult<Option<ReservationRow>> {
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
                let row = find(conn, OrderId(previous))?.filter(|row| row.0 == req.tenant_id);
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
            (None, Some(previous)) => find(conn, OrderId(previous))?
                .filter(|row| row.0 == req.tenant_id)
                .and_then(|row| row.5),
            (None, None) => req.team_id.map(TeamId::into_uuid),
        };
        let team = team_id
            .map(|id| teams::load(conn, req.tenant_id, id))
            .transpose()?;

        let eighths = req.gpu_eighths.unwrap_or(req.gpu_count.saturating_mul(8));
        let demand = Demand {
            gpus: Decimal::from(eighths) / Decimal::from(8),
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
                reservations::gpu_eighths.eq(eighths),
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
            team_id: team_id.map(TeamId),
        })
    })
    .await
}

/// Releases a hold; releasing twice (or one never made) is fine.
pub async fn release(db: &Db, order_id: OrderId) -> Result<(), Error> {
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
    tenant_id: TenantId,
    limits: QuotaLimits,
    currency: &str,
) -> Result<TenantQuota, Error> {
    let now = contracts::time::now();
    let (held, spend) = held(conn, tenant_id, None, now)?;
    let teams = teams::all(conn, tenant_id, now, currency)?;
    Ok(TenantQuota {
        tenant_id,
        max_gpus: limits.max_gpus.unwrap_or(0),
        gpus_in_use: crate::holdings::whole_gpus(held.gpus),
        limits,
        usage: usage(held, spend, currency),
        teams,
    })
}

pub async fn get_quota(
    db: &Db,
    currency: String,
    tenant_id: TenantId,
) -> Result<TenantQuota, Error> {
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
    tenant_id: TenantId,
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
