//! GPU allocations, all-or-nothing per order and idempotent by order id.
//! Capacity is taken by one conditional `UPDATE ... WHERE gpus_allocated + n
//! <= gpu_count`: the row lock it takes serialises racing orders, and the
//! check constraint on the column is the last line of defence.

use contracts::api::{AllocateRequest, Allocation};
use diesel::prelude::*;
use platform::Db;
use schema::catalog::{allocations, machines};
use uuid::Uuid;

use crate::Error;

fn existing(conn: &mut PgConnection, order_id: Uuid) -> QueryResult<Option<Allocation>> {
    allocations::table
        .inner_join(machines::table)
        .filter(allocations::order_id.eq(order_id))
        .select((
            allocations::order_id,
            allocations::machine_id,
            machines::host_tenant_id,
            allocations::gpu_count,
            allocations::released_at.is_not_null(),
        ))
        .first::<(Uuid, Uuid, Uuid, i32, bool)>(conn)
        .optional()
        .map(|row| {
            row.map(
                |(order_id, machine_id, host_tenant_id, gpu_count, released)| Allocation {
                    order_id,
                    machine_id,
                    host_tenant_id,
                    gpu_count,
                    released,
                },
            )
        })
}

pub async fn allocate(db: &Db, req: AllocateRequest) -> Result<Allocation, Error> {
    if req.gpu_count < 1 {
        return Err(Error::Validation("gpuCount: at least 1".into()));
    }
    let order_id = req.order_id;
    match take(db, req).await {
        // The same order allocated concurrently: the other transaction won
        // and ours rolled back with its capacity; answer what it got.
        Err(Error::Database(diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::UniqueViolation,
            _,
        ))) => db
            .run(move |conn| existing(conn, order_id).map_err(Error::from))
            .await?
            .ok_or_else(|| Error::Conflict("allocation vanished; retry".into())),
        other => other,
    }
}

async fn take(db: &Db, req: AllocateRequest) -> Result<Allocation, Error> {
    db.tx(move |conn| {
        if let Some(found) = existing(conn, req.order_id)? {
            return Ok(found);
        }
        let host: Option<Uuid> = diesel::update(machines::table.find(req.machine_id))
            .filter(machines::listed.eq(true))
            .filter((machines::gpus_allocated + req.gpu_count).le(machines::gpu_count))
            .set((
                machines::gpus_allocated.eq(machines::gpus_allocated + req.gpu_count),
                machines::updated_at.eq(diesel::dsl::now),
            ))
            .returning(machines::host_tenant_id)
            .get_result(conn)
            .optional()?;
        let Some(host_tenant_id) = host else {
            let machine: Option<(i32, i32, bool)> = machines::table
                .find(req.machine_id)
                .select((
                    machines::gpu_count,
                    machines::gpus_allocated,
                    machines::listed,
                ))
                .first(conn)
                .optional()?;
            return Err(match machine {
                None | Some((_, _, false)) => {
                    Error::NotFound(format!("offer {} not found", req.machine_id))
                }
                Some((total, allocated, true)) => Error::InsufficientCapacity(format!(
                    "machine has {} of {total} GPUs free; the order asks for {}",
                    total - allocated,
                    req.gpu_count
                )),
            });
        };
        diesel::insert_into(allocations::table)
            .values((
                allocations::order_id.eq(req.order_id),
                allocations::machine_id.eq(req.machine_id),
                allocations::tenant_id.eq(req.tenant_id),
                allocations::gpu_count.eq(req.gpu_count),
            ))
            .execute(conn)?;
        Ok(Allocation {
            order_id: req.order_id,
            machine_id: req.machine_id,
            host_tenant_id,
            gpu_count: req.gpu_count,
            released: false,
        })
    })
    .await
}

/// Returns an order's GPUs to the machine; releasing twice changes nothing.
pub async fn release(db: &Db, order_id: Uuid) -> Result<(), Error> {
    db.tx(move |conn| {
        let released: Option<(Uuid, i32)> = diesel::update(allocations::table.find(order_id))
            .filter(allocations::released_at.is_null())
            .set(allocations::released_at.eq(diesel::dsl::now))
            .returning((allocations::machine_id, allocations::gpu_count))
            .get_result(conn)
            .optional()?;
        if let Some((machine_id, gpu_count)) = released {
            diesel::update(machines::table.find(machine_id))
                .set((
                    machines::gpus_allocated.eq(machines::gpus_allocated - gpu_count),
                    machines::updated_at.eq(diesel::dsl::now),
                ))
                .execute(conn)?;
        }
        Ok(())
    })
    .await
}
