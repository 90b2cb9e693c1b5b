//! GPU quota: a tenant's limit and the reservations that count against it.
//! A reservation is taken per order (idempotent by order id) under a row lock
//! on the tenant's quota, so concurrent orders cannot overshoot it.

use contracts::api::{QuotaReservation, ReserveQuotaRequest, TenantQuota};
use diesel::prelude::*;
use platform::Db;
use schema::quota::{reservations, tenant_quotas};
use uuid::Uuid;

use crate::Error;

fn in_use(conn: &mut PgConnection, tenant_id: Uuid) -> QueryResult<i32> {
    let sum: Option<i64> = reservations::table
        .filter(reservations::tenant_id.eq(tenant_id))
        .filter(reservations::released_at.is_null())
        .select(diesel::dsl::sum(reservations::gpu_count))
        .first(conn)?;
    Ok(sum.unwrap_or(0) as i32)
}

pub async fn reserve(db: &Db, req: ReserveQuotaRequest) -> Result<QuotaReservation, Error> {
    if req.gpu_count < 1 {
        return Err(Error::Validation("gpuCount: at least 1".into()));
    }
    db.tx(move |conn| {
        // The lock serialises reservations of one tenant.
        let max_gpus: Option<i32> = tenant_quotas::table
            .find(req.tenant_id)
            .select(tenant_quotas::max_gpus)
            .for_update()
            .first(conn)
            .optional()?;
        let max_gpus = max_gpus.ok_or_else(|| Error::NotFound("tenant not found".into()))?;
        let existing: Option<(Uuid, i32, Option<chrono::DateTime<chrono::Utc>>)> =
            reservations::table
                .find(req.order_id)
                .select((
                    reservations::tenant_id,
                    reservations::gpu_count,
                    reservations::released_at,
                ))
                .first(conn)
                .optional()?;
        if let Some((tenant_id, gpu_count, released_at)) = existing {
            if tenant_id != req.tenant_id {
                return Err(Error::Conflict("order belongs to another tenant".into()));
            }
            return Ok(QuotaReservation {
                order_id: req.order_id,
                tenant_id,
                gpu_count,
                released: released_at.is_some(),
            });
        }
        let used = in_use(conn, req.tenant_id)?;
        if used + req.gpu_count > max_gpus {
            return Err(Error::QuotaExceeded(format!(
                "max_gpus: tenant holds {used} of {max_gpus} GPUs and the order asks for {}",
                req.gpu_count
            )));
        }
        diesel::insert_into(reservations::table)
            .values((
                reservations::order_id.eq(req.order_id),
                reservations::tenant_id.eq(req.tenant_id),
                reservations::gpu_count.eq(req.gpu_count),
            ))
            .execute(conn)?;
        Ok(QuotaReservation {
            order_id: req.order_id,
            tenant_id: req.tenant_id,
            gpu_count: req.gpu_count,
            released: false,
        })
    })
    .await
}

/// Releases an order's reservation; releasing twice (or one never made) is fine.
pub async fn release(db: &Db, order_id: Uuid) -> Result<(), Error> {
    db.run(move |conn| {
        diesel::update(reservations::table.find(order_id))
            .filter(reservations::released_at.is_null())
            .set(reservations::released_at.eq(diesel::dsl::now))
            .execute(conn)
            .map(|_| ())
            .map_err(Error::from)
    })
    .await
}

pub async fn get_quota(db: &Db, tenant_id: Uuid) -> Result<TenantQuota, Error> {
    db.run(move |conn| {
        let max_gpus: i32 = tenant_quotas::table
            .find(tenant_id)
            .select(tenant_quotas::max_gpus)
            .first(conn)
            .optional()?
            .ok_or_else(|| Error::NotFound("tenant not found".into()))?;
        Ok(TenantQuota {
            tenant_id,
            max_gpus,
            gpus_in_use: in_use(conn, tenant_id)?,
        })
    })
    .await
}

pub async fn set_quota(db: &Db, tenant_id: Uuid, max_gpus: i32) -> Result<TenantQuota, Error> {
    if max_gpus < 0 {
        return Err(Error::Validation("maxGpus: must not be negative".into()));
    }
    db.tx(move |conn| {
        let n = diesel::update(tenant_quotas::table.find(tenant_id))
            .set((
                tenant_quotas::max_gpus.eq(max_gpus),
                tenant_quotas::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)?;
        if n == 0 {
            return Err(Error::NotFound("tenant not found".into()));
        }
        Ok(TenantQuota {
            tenant_id,
            max_gpus,
            gpus_in_use: in_use(conn, tenant_id)?,
        })
    })
    .await
}
