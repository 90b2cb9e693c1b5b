//! Instances: reads, and the transitions that happen after the saga (ready,
//! failed, stop). Each transition locks the row, checks the state machine,
//! bumps the version and writes its message to the outbox in one transaction.

use chrono::{DateTime, Utc};
use contracts::events::{
    INSTANCE_DOWNTIME, INSTANCE_FAILED, INSTANCE_RUNNING, INSTANCE_STOPPED, INSTANCE_STORAGE_ENDED,
    INSTANCE_STORAGE_STARTED, InstanceDowntime, InstanceFailed, InstanceRunning, InstanceStopped,
    InstanceStorageEnded, InstanceStorageStarted, PROVISION_INSTANCE, ProvisionInstance,
    ProvisionRun, STOP_INSTANCE, StopInstance,
};
use contracts::{Envelope, api};
use diesel::prelude::*;
use platform::Db;
use rust_decimal::Decimal;
use schema::ordering::{instance_transitions, instances};
use serde::Serialize;
use uuid::Uuid;

use crate::{Deps, Error, SCHEMA};
use contracts::states::{InstanceState, RentalType};

#[derive(Queryable, Selectable, Clone)]
#[diesel(table_name = instances)]
pub struct InstanceRow {
    pub id: Uuid,
    pub order_id: Uuid,
    pub tenant_id: Uuid,
    pub host_tenant_id: Uuid,
    pub machine_id: Uuid,
    pub gpu_model: String,
    pub gpu_count: i32,
    pub rental_type: RentalType,
    pub price_per_gpu_hour: Decimal,
    pub currency: String,
    pub image: String,
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
}

impl InstanceRow {
    pub fn state(&self) -> Result<InstanceState, Error> {
        // A text no state names fails the row's load (`contracts::states`).
        Ok(self.state)
    }
}

/// GPU allocations and quota reservations are idempotent by key. The first
/// provisioning attempt (the order's) holds them under the order id (the
/// saga's key); every start after a stop is a new attempt that takes fresh
/// ones under a key derived from the order id and the attempt number, so a
/// repeated start request finds what it took, and a new attempt never
/// collides with the released holdings of an earlier one.
pub fn holding_key(order_id: Uuid, attempt: i32) -> Uuid {
    use sha2::{Digest, Sha256};
    if attempt <= 1 {
        return order_id;
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
    Ok(holding_key(row.order_id, attempt(conn, row.id)?))
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

pub(crate) fn lock(conn: &mut PgConnection, id: Uuid) -> Result<InstanceRow, Error> {
    instances::table
        .find(id)
        .select(InstanceRow::as_select())
        .for_update()
        .first(conn)
        .optional()?
        .ok_or_else(|| Error::NotFound(format!("instance {id} not found")))
}

/// Writes a message to this service's outbox.
pub fn publish<P: Serialize>(
    conn: &mut PgConnection,
    exchange: &str,
    kind: &str,
    at: DateTime<Utc>,
    tenant_id: Uuid,
    payload: &P,
) -> Result<(), Error> {
    let envelope = Envelope::new(
        kind,
        at,
        Some(tenant_id),
        platform::http::current_correlation_id(),
        payload,
    )
    .map_err(platform::PlatformError::from)?;
    platform::outbox::enqueue(conn, SCHEMA, exchange, kind, &envelope)?;
    Ok(())
}

/// `ordering.instance.running` for run `run_seq` of `row`, opening its
/// meter at `running_at`.
pub fn publish_running(
    conn: &mut PgConnection,
    exchange: &str,
    row: &InstanceRow,
    run_seq: i32,
    running_at: DateTime<Utc>,
) -> Result<(), Error> {
    publish(
        conn,
        exchange,
        INSTANCE_RUNNING,
        running_at,
        row.tenant_id,
        &InstanceRunning {
            instance_id: row.id,
            tenant_id: row.tenant_id,
            host_tenant_id: row.host_tenant_id,
            machine_id: row.machine_id,
            gpu_model: row.gpu_model.clone(),
            gpu_count: row.gpu_count,
            rental_type: row.rental_type,
            price_per_gpu_hour: row.price_per_gpu_hour,
            currency: row.currency.clone(),
            run_seq,
            running_at,
        },
    )
}

/// `ordering.instance.stopped` for run `run_seq` of `row`: its meter stops
/// at `stopped_at`.
pub fn publish_stopped(
    conn: &mut PgConnection,
    exchange: &str,
    row: &InstanceRow,
    run_seq: i32,
    stopped_at: DateTime<Utc>,
    reason: &str,
) -> Result<(), Error> {
    publish(
        conn,
        exchange,
        INSTANCE_STOPPED,
        stopped_at,
        row.tenant_id,
        &InstanceStopped {
            instance_id: row.id,
            tenant_id: row.tenant_id,
            run_seq,
            stopped_at,
            reason: reason.into(),
        },
    )
}

/// The storage snapshot of an instance; None for one from before the
/// storage meter.
fn storage_of(row: &InstanceRow) -> Option<InstanceStorageStarted> {
    let disk_gib = row.disk_gib?;
    Some(InstanceStorageStarted {
        instance_id: row.id,
        tenant_id: row.tenant_id,
        host_tenant_id: row.host_tenant_id,
        machine_id: row.machine_id,
        gpu_model: row.gpu_model.clone(),
        disk_gib,
        storage_price_per_gb_month: row.storage_price_per_gb_month,
        bandwidth_up_price_per_tb: row.bandwidth_up_price_per_tb,
        bandwidth_down_price_per_tb: row.bandwidth_down_price_per_tb,
        currency: row.currency.clone(),
        started_at: row.created_at,
    })
}

/// `ordering.instance.storage_started`: the instance's disk bills from its
/// creation (`created_at`), running or stopped.
pub fn publish_storage_started(
    conn: &mut PgConnection,
    exchange: &str,
    row: &InstanceRow,
) -> Result<(), Error> {
    let Some(storage) = storage_of(row) else {
        return Ok(());
    };
    publish(
        conn,
        exchange,
        INSTANCE_STORAGE_STARTED,
        row.created_at,
        row.tenant_id,
        &storage,
    )
}

/// `ordering.instance.storage_ended`: the disk stops billing at `ended_at`.
/// It repeats the start (the creation instant and the snapshots), so
/// metering can close the interval whichever of the two arrives first.
pub fn publish_storage_ended(
    conn: &mut PgConnection,
    exchange: &str,
    row: &InstanceRow,
    ended_at: DateTime<Utc>,
    reason: &str,
) -> Result<(), Error> {
    let Some(storage) = storage_of(row) else {
        return Ok(());
    };
    publish(
        conn,
        exchange,
        INSTANCE_STORAGE_ENDED,
        ended_at,
        row.tenant_id,
        &InstanceStorageEnded {
            storage,
            ended_at,
            reason: reason.to_owned(),
        },
    )
}

/// Announces the end of a lost host's outage under `row` (still the
/// `host_lost` row: `stopped_at` is the last good heartbeat, where billing
/// stopped): billing credits the renter for the downtime, charged to the
/// host (DESIGN 4.8). Nothing when the loss instant is unknown.
pub fn publish_downtime(
    conn: &mut PgConnection,
    events: &str,
    row: &InstanceRow,
    until: DateTime<Utc>,
    ended_by: &str,
) -> Result<(), Error> {
    let Some(from) = row.stopped_at else {
        return Ok(());
    };
    let seconds =
        contracts::money::billed_seconds(from.timestamp_micros(), until.timestamp_micros());
    publish(
        conn,
        events,
        INSTANCE_DOWNTIME,
        until,
        row.tenant_id,
        &InstanceDowntime {
            instance_id: row.id,
            tenant_id: row.tenant_id,
            host_tenant_id: row.host_tenant_id,
            machine_id: row.machine_id,
            run_seq: row.run_seq,
            down_from: from,
            down_until: until,
            seconds,
            price_per_hour: row.price_per_gpu_hour * Decimal::from(row.gpu_count),
            currency: row.currency.clone(),
            ended_by: ended_by.to_owned(),
        },
    )
}

/// The provisioning command of `row` as the order asked for it: image,
/// keys, command, env (the renter's secrets: they go to the machine and
/// nowhere else) and ports, read from the instance.
pub fn provision_instance(
    conn: &mut PgConnection,
    row: &InstanceRow,
    machine_gpu_count: i32,
) -> Result<ProvisionInstance, Error> {
    type Spec = (
        Option<String>,
        Option<serde_json::Value>,
        serde_json::Value,
        Vec<i32>,
    );
    let (ssh_public_key, command, env, ports): Spec = instances::table
        .find(row.id)
        .select((
            instances::ssh_public_key,
            instances::command,
            instances::env,
            instances::ports,
        ))
        .first(conn)?;
    let command: Option<Vec<String>> = command.and_then(|c| serde_json::from_value(c).ok());
    let env: std::collections::BTreeMap<String, String> =
        serde_json::from_value(env).unwrap_or_default();
    Ok(ProvisionInstance {
        instance_id: row.id,
        order_id: row.order_id,
        tenant_id: row.tenant_id,
        machine_id: row.machine_id,
        gpu_count: row.gpu_count,
        machine_gpu_count,
        image: row.image.clone(),
        ssh_public_key,
        command,
        env,
        ports: ports
            .into_iter()
            .filter_map(|p| u16::try_from(p).ok())
            .collect(),
        disk_gib: row.disk_gib,
    })
}

/// Sends provisioning attempt `attempt` of `row` on its (current) machine
/// through the outbox. `never_ran`: a re-placed first run, whose dead
/// attempt the worker cleans up like the order's own.
pub fn publish_attempt(
    conn: &mut PgConnection,
    commands: &str,
    row: &InstanceRow,
    machine_gpu_count: i32,
    attempt: i32,
    never_ran: bool,
    at: DateTime<Utc>,
) -> Result<(), Error> {
    let instance = provision_instance(conn, row, machine_gpu_count)?;
    publish(
        conn,
        commands,
        PROVISION_INSTANCE,
        at,
        row.tenant_id,
        &ProvisionRun {
            instance,
            attempt,
            never_ran,
        },
    )
}

/// Moves `row` to `next` if the state machine allows it, with a
/// compare-and-set on the version read, and records the transition and its
/// instance event (published through the outbox) in the caller's transaction.
/// Columns that change with the transition (`running_at`, `stopped_at`) are
/// best written before calling it, so the event's snapshot shows them.
pub fn transition(
    conn: &mut PgConnection,
    row: &InstanceRow,
    next: InstanceState,
    reason: Option<&str>,
    at: DateTime<Utc>,
) -> Result<(), Error> {
    let current = row.state()?;
    if !current.can_become(next) {
        return Err(Error::Conflict(format!(
            "instance is {current} and cannot become {next}"
        )));
    }
    let updated = diesel::update(instances::table.find(row.id))
        .filter(instances::state.eq(&row.state))
        .filter(instances::version.eq(row.version))
        .set((
            instances::state.eq(next.as_str()),
            instances::status_reason.eq(reason),
            instances::version.eq(row.version + 1),
            instances::updated_at.eq(at),
        ))
        .execute(conn)?;
    if updated != 1 {
        return Err(Error::Conflict(
            "instance changed concurrently; retry".into(),
        ));
    }
    // A connection belongs to one run: whatever ends or precedes a run
    // (stop, failure, destroy, preemption, a new start) forgets it. A lost
    // host keeps it (hidden while `host_lost`): when the host comes back,
    // the same container runs on and the connection shows again.
    if !matches!(next, InstanceState::Running | InstanceState::HostLost) {
        diesel::update(instances::table.find(row.id))
            .set(instances::connection.eq(None::<serde_json::Value>))
            .execute(conn)?;
    }
    diesel::insert_into(instance_transitions::table)
        .values((
            instance_transitions::instance_id.eq(row.id),
            instance_transitions::from_state.eq(Some(current.as_str())),
            instance_transitions::to_state.eq(next.as_str()),
            instance_transitions::reason.eq(reason),
            instance_transitions::at.eq(at),
        ))
        .execute(conn)?;
    // Every instance leaves the states that keep its disk exactly once, by
    // one of these two transitions, whatever path led there: the disk stops
    // billing then (at the destroy request, not when the cleanup ends).
    match next {
        InstanceState::Deprovisioning => {
            publish_storage_ended(conn, crate::events::exchange(), row, at, "destroyed")?;
        }
        InstanceState::Failed => {
            publish_storage_ended(conn, crate::events::exchange(), row, at, "failed")?;
        }
        _ => {}
    }
    crate::events::record(
        conn,
        row.id,
        contracts::states::InstanceEventKind::StateChanged,
        crate::events::Detail {
            from_state: Some(current),
            to_state: Some(next),
            reason,
            ..Default::default()
        },
        at,
    )?;
    Ok(())
}

pub async fn get(db: &Db, id: Uuid, tenant_id: Uuid) -> Result<api::Instance, Error> {
    db.run(move |conn| {
        load(conn, id)?
            // Another tenant's instance is reported exactly like a missing one.
            .filter(|row| row.tenant_id == tenant_id)
            .map(api::Instance::from)
            .ok_or_else(|| Error::NotFound(format!("instance {id} not found")))
    })
    .await
}

pub async fn list(db: &Db, tenant_id: Uuid) -> Result<Vec<api::Instance>, Error> {
    db.run(move |conn| {
        let rows: Vec<InstanceRow> = instances::table
            .filter(instances::tenant_id.eq(tenant_id))
            .order(instances::created_at.desc())
            .limit(500)
            .select(InstanceRow::as_select())
            .load(conn)?;
        Ok(rows.into_iter().map(api::Instance::from).collect())
    })
    .await
}

/// How many instances on `machine_id` of `host_tenant_id` are neither
/// destroyed nor failed: a stopped, preempted or host-lost instance still
/// keeps its disk there (and its renter pays for it), so the machine must
/// not go away under it. Another host's machine counts none, so the answer
/// tells a host nothing about machines that are not theirs.
pub async fn live_on_machine(
    db: &Db,
    machine_id: Uuid,
    host_tenant_id: Uuid,
) -> Result<api::MachineLiveInstances, Error> {
    let live_instances = db
        .run(move |conn| {
            instances::table
                .filter(instances::machine_id.eq(machine_id))
                .filter(instances::host_tenant_id.eq(host_tenant_id))
                .filter(instances::state.ne_all([InstanceState::Destroyed, InstanceState::Failed]))
                .count()
                .get_result::<i64>(conn)
                .map_err(Error::from)
        })
        .await?;
    Ok(api::MachineLiveInstances {
        machine_id,
        live_instances,
    })
}

/// The provisioner reports the instance user-ready: it is `running` from now
/// (T0), and the event that opens the meter leaves in the same transaction. A
/// repeated report changes nothing, so exactly one `running` event exists per run.
pub async fn mark_ready(
    db: &Db,
    deps: &Deps,
    id: Uuid,
    connection: Option<api::Connection>,
) -> Result<api::Instance, Error> {
    let exchange = deps.config.events_exchange.clone();
    // The provisioner checked it; a connection that is not this instance's
    // is dropped here too rather than shown to the renter.
    let connection = connection.filter(|c| match c.validate(id) {
        Ok(()) => true,
        Err(problem) => {
            tracing::warn!(instance.id = %id, %problem, "connection dropped");
            false
        }
    });
    db.tx(move |conn| {
        let row = lock(conn, id)?;
        if row.state()? != InstanceState::Provisioning {
            return Ok(row.into());
        }
        let at = contracts::time::now();
        let run_seq = row.run_seq + 1;
        let connection = connection
            .as_ref()
            .and_then(|c| serde_json::to_value(c).ok());
        diesel::update(instances::table.find(id))
            .set((
                instances::running_at.eq(at),
                instances::stopped_at.eq(None::<DateTime<Utc>>),
                instances::run_seq.eq(run_seq),
                instances::connection.eq(connection),
            ))
            .execute(conn)?;
        transition(conn, &row, InstanceState::Running, None, at)?;
        publish_running(conn, &exchange, &row, run_seq, at)?;
        tracing::info!(instance.id = %id, "instance running");
        load(conn, id)?
            .map(api::Instance::from)
            .ok_or_else(|| Error::NotFound(id.to_string()))
    })
    .await
}

/// The provisioner gave up. On a first run the instance failed, nothing is
/// charged, and its GPUs and quota go back. On a start after a stop the
/// renter's disk is still on the machine: the instance goes back to `stopped`
/// with the reason (it can be started again or destroyed), whatever the
/// failed run bound is unbound, and the run's GPUs and quota go back.
pub async fn mark_failed(
    db: &Db,
    deps: &Deps,
    id: Uuid,
    reason: String,
) -> Result<api::Instance, Error> {
    // An order by constraints moves to another machine instead (its quota
    // stays held); it fails only when it may not or cannot.
    if let Some(moved) = crate::replacement::try_replace(db, deps, id, &reason).await? {
        return Ok(moved);
    }
    let events = deps.config.events_exchange.clone();
    let commands = deps.config.commands_exchange.clone();
    let (row, key, failed_now) = db
        .tx(move |conn| -> Result<(InstanceRow, Uuid, bool), Error> {
            let row = lock(conn, id)?;
            let key = current_holding_key(conn, &row)?;
            if row.state()? != InstanceState::Provisioning {
                return Ok((row, key, false));
            }
            let at = contracts::time::now();
            if row.run_seq >= 1 {
                let reason = format!("start failed: {reason}");
                transition(conn, &row, InstanceState::Stopped, Some(&reason), at)?;
                publish(
                    conn,
                    &commands,
                    STOP_INSTANCE,
                    at,
                    row.tenant_id,
                    &StopInstance {
                        instance_id: row.id,
                        machine_id: row.machine_id,
                    },
                )?;
                return Ok((row, key, true));
            }
            transition(conn, &row, InstanceState::Failed, Some(&reason), at)?;
            publish(
                conn,
                &events,
                INSTANCE_FAILED,
                at,
                row.tenant_id,
                &InstanceFailed {
                    instance_id: row.id,
                    tenant_id: row.tenant_id,
                    reason: reason.clone(),
                },
            )?;
            Ok((row, key, true))
        })
        .await?;
    // Only the call that failed the run gives its holdings back; a late
    // report about an instance that is running must not free its GPUs.
    if failed_now {
        crate::saga::release_holdings(deps, key).await?;
    }
    get(db, id, row.tenant_id).await
}

/// Stops billing now (T1) and gives the GPUs back; the disk stays. The
/// `stopped` event leaves in the transaction that records T1; capacity and
/// quota are released after it commits, and a repeated stop resumes there.
pub async fn stop(db: &Db, deps: &Deps, id: Uuid, tenant_id: Uuid) -> Result<api::Instance, Error> {
    stop_because(db, deps, id, tenant_id, "stop requested").await
}

/// [`stop`] with the reason the instance's status and events will show (a
/// renter's request, or a lifecycle rule).
pub async fn stop_because(
    db: &Db,
    deps: &Deps,
    id: Uuid,
    tenant_id: Uuid,
    reason: &'static str,
) -> Result<api::Instance, Error> {
    let events = deps.config.events_exchange.clone();
    let commands = deps.config.commands_exchange.clone();
    let (_, key) = db
        .tx(move |conn| -> Result<(InstanceRow, Uuid), Error> {
            let row = lock(conn, id)?;
            if row.tenant_id != tenant_id {
                return Err(Error::NotFound(format!("instance {id} not found")));
            }
            let key = current_holding_key(conn, &row)?;
            match row.state()? {
                InstanceState::Running => {}
                InstanceState::Stopping | InstanceState::Stopped => return Ok((row, key)),
                other => {
                    return Err(Error::Conflict(format!(
                        "instance is {other}; it can be stopped only while running"
                    )));
                }
            }
            let at = contracts::time::now();
            diesel::update(instances::table.find(id))
                .set(instances::stopped_at.eq(at))
                .execute(conn)?;
            transition(conn, &row, InstanceState::Stopping, Some(reason), at)?;
            publish_stopped(conn, &events, &row, row.run_seq, at, reason)?;
            publish(
                conn,
                &commands,
                STOP_INSTANCE,
                at,
                row.tenant_id,
                &StopInstance {
                    instance_id: row.id,
                    machine_id: row.machine_id,
                },
            )?;
            Ok((row, key))
        })
        .await?;
    crate::saga::release_holdings(deps, key).await?;
    db.tx(move |conn| {
        let row = lock(conn, id)?;
        if row.state()? == InstanceState::Stopping {
            // The status keeps saying why it stopped (the renter, the
            // balance, the spend cap, a lifecycle rule), whoever finishes
            // the stop: the reason the stop was made with is on the row.
            let why = row
                .status_reason
                .clone()
                .unwrap_or_else(|| reason.to_owned());
            transition(
                conn,
                &row,
                InstanceState::Stopped,
                Some(&why),
                contracts::time::now(),
            )?;
        }
        load(conn, id)?
            .map(api::Instance::from)
            .ok_or_else(|| Error::NotFound(id.to_string()))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_attempt_holds_under_the_order_id_and_later_ones_under_fresh_keys() {
        let order = Uuid::now_v7();
        assert_eq!(holding_key(order, 1), order);
        let second = holding_key(order, 2);
        assert_ne!(second, order);
        assert_eq!(holding_key(order, 2), second);
        assert_ne!(holding_key(order, 3), second);
        assert_ne!(holding_key(Uuid::now_v7(), 2), second);
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
