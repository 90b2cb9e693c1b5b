//! Instance storage: the instance row as ordering stores it, how it is
//! read and locked, and the keys of what each provisioning attempt holds.

use chrono::{DateTime, Utc};
use contracts::api;
use contracts::ids::{InstanceId, MachineId, OrderId, TenantId};
use diesel::prelude::*;
use platform::Db;
use rust_decimal::Decimal;
use schema::ordering::{instance_transitions, instances};
use uuid::Uuid;

use crate::Error;
use contracts::states::{InstanceState, RentalType};

#[derive(Queryable, Selectable, Clone)]
#[diesel(table_name = instances)]
pub struct InstanceRow {
    pub id: InstanceId,
    pub order_id: OrderId,
    pub tenant_id: TenantId,
    pub host_tenant_id: TenantId,
    pub machine_id: MachineId,
    pub gpu_model: String,
    pub gpu_count: i32,
    pub rental_type: RentalType,
    pub price_per_gpu_hour: Decimal,
    pub currency: String,
    pub image: String,
    /// A text no state names fails the row's load (`contracts::states`).
    pub state: InstanceState,
    pub status_reason: Option<String>,
    pub version: i32,
    pub run_seq: i32,
    pub running_at: Option<DateTime<Utc>>,
    pub stopped_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub storage_price_per_gb_month: Decimal,
    pub bandwidth_up_price_per_tb: Decimal,
    pub bandwidth_down_price_per_tb: Decimal,
    pub preempted_at: Option<DateTime<Utc>>,
    /// None for instances from before the storage meter (not metered).
    pub disk_gib: Option<i32>,
    /// The current run's [`api::Connection`], as the agent reported it.
    pub connection: Option<serde_json::Value>,
    /// `/workspace` in use as the agent last measured it, and when.
    pub disk_used_bytes: Option<i64>,
    pub disk_measured_at: Option<DateTime<Utc>>,
    /// The MIG slice's profile; None for whole GPUs.
    pub mig_profile: Option<String>,
    /// The reservation whose block it runs in (issue 20).
    pub reservation_id: Option<Uuid>,
    /// Inside a block: go on on demand at its end, up to this per GPU-hour.
    pub continue_up_to_per_gpu_hour: Option<Decimal>,
}

/// GPU allocations and quota reservations are idempotent by key. The first
/// provisioning attempt (the order's) holds them under the order id (the
/// saga's key); every start after a stop is a new attempt that takes fresh
/// ones under a key derived from the order id and the attempt number, so a
/// repeated start request finds what it took, and a new attempt never
/// collides with the released holdings of an earlier one.
pub fn holding_key(order_id: OrderId, attempt: i32) -> Uuid {
    use sha2::{Digest, Sha256};
    if attempt <= 1 {
        return order_id.into();
    }
    let digest = Sha256::digest(format!("gpumarket:attempt:{order_id}:{attempt}").as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_sha1_bytes(bytes).into_uuid()
}

/// The instance's latest provisioning attempt: 1 for the order's, plus one
/// per start (each start is a transition into `provisioning`; the order's
/// instance is created in it).
pub fn attempt(conn: &mut PgConnection, id: Uuid) -> QueryResult<i32> {
    let starts: i64 = instance_transitions::table
        .filter(instance_transitions::instance_id.eq(id))
        .filter(instance_transitions::to_state.eq(InstanceState::Provisioning))
        .count()
        .get_result(conn)?;
    Ok(1 + starts as i32)
}

/// The instance as it is when a provisioning report names an attempt other
/// than the latest (a late duplicate); None when the report is current.
pub async fn stale_report(
    db: &Db,
    id: Uuid,
    reported: i32,
) -> Result<Option<api::Instance>, Error> {
    db.run(move |conn| {
        let row = load(conn, id)?.ok_or_else(|| Error::NotFound(format!("instance {id} not found")))?;
        if attempt(conn, id)? == reported {
            return Ok(None);
        }
        tracing::warn!(instance.id = %id, reported, "ignoring a report about an earlier provisioning attempt");
        Ok(Some(row.into()))
    })
    .await
}

/// The key of what the instance's latest attempt holds (or held).
pub fn current_holding_key(conn: &mut PgConnection, row: &InstanceRow) -> QueryResult<Uuid> {
    Ok(holding_key(row.order_id, attempt(conn, row.id.into())?))
}

impl From<InstanceRow> for api::Instance {
    fn from(row: InstanceRow) -> Self {
        let allowed_actions = row.state.allowed_actions();
        // Only a running instance can be logged in to; a stale column
        // (cleared with the run's end anyway) never shows.
        let connection = if row.state == InstanceState::Running {
            row.connection
                .clone()
                .and_then(|c| serde_json::from_value(c).ok())
        } else {
            None
        };
        api::Instance {
            reservation_id: row.reservation_id.map(contracts::ids::ReservationId),
            continue_up_to_per_gpu_hour: row.continue_up_to_per_gpu_hour,
            mig_profile: row.mig_profile.clone(),
            id: row.id,
            order_id: row.order_id,
            tenant_id: row.tenant_id,
            machine_id: row.machine_id,
            gpu_model: row.gpu_model,
            gpu_count: row.gpu_count,
            rental_type: row.rental_type,
            price_per_hour_total: (row.price_per_gpu_hour * Decimal::from(row.gpu_count))
                .normalize(),
            price_per_gpu_hour: row.price_per_gpu_hour.normalize(),
            storage_price_per_gb_month: row.storage_price_per_gb_month.normalize(),
            bandwidth_up_price_per_tb: row.bandwidth_up_price_per_tb.normalize(),
            bandwidth_down_price_per_tb: row.bandwidth_down_price_per_tb.normalize(),
            currency: row.currency,
            preempted_at: row.preempted_at,
            status: row.state,
            status_reason: row.status_reason,
            allowed_actions,
            image: row.image,
            run_seq: row.run_seq,
            running_at: row.running_at,
            stopped_at: row.stopped_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
            connection,
            disk_used_bytes: row.disk_used_bytes,
            disk_measured_at: row.disk_measured_at,
        }
    }
}

pub fn load(conn: &mut PgConnection, id: Uuid) -> QueryResult<Option<InstanceRow>> {
    instances::table
        .find(id)
        .select(InstanceRow::as_select())
        .first(conn)
        .optional()
}

/// The instance an allocation was made for: the one it names (a start),
/// or the order's (a first run, whose allocation came before its instance).
pub(crate) fn instance_of_allocation(
    conn: &mut PgConnection,
    instance_id: Option<contracts::ids::InstanceId>,
    allocation_key: Uuid,
) -> QueryResult<Option<Uuid>> {
    match instance_id {
        Some(id) => Ok(Some(id.into_uuid())),
        None => instances::table
            .filter(instances::order_id.eq(allocation_key))
            .select(instances::id)
            .first(conn)
            .optional(),
    }
}

pub(crate) fn lock(conn: &mut PgConnection, id: Uuid) -> Result<InstanceRow, Error> {
    instances::table
        .find(id)
        .select(InstanceRow::as_select())
        .for_update()
        .first(conn)
        .optional()?
        .ok_or_else(|| Error::NotFound(format!("instance {id} not found")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_attempt_holds_under_the_order_id_and_later_ones_under_fresh_keys() {
        let order = Uuid::now_v7();
        assert_eq!(holding_key(OrderId(order), 1), order);
        let second = holding_key(OrderId(order), 2);
        assert_ne!(second, order);
        assert_eq!(holding_key(OrderId(order), 2), second);
        assert_ne!(holding_key(OrderId(order), 3), second);
        assert_ne!(holding_key(OrderId(Uuid::now_v7()), 2), second);
    }

    #[test]
    fn renters_are_offered_start_and_destroy_where_they_work() {
        use contracts::states::InstanceAction;
        assert_eq!(
            InstanceState::Running.allowed_actions(),
            vec![InstanceAction::Stop, InstanceAction::Destroy]
        );
        assert_eq!(
            InstanceState::Stopped.allowed_actions(),
            vec![InstanceAction::Start, InstanceAction::Destroy]
        );
        assert!(InstanceState::Deprovisioning.allowed_actions().is_empty());
        assert!(InstanceState::Destroyed.allowed_actions().is_empty());
    }
}
