//! What ordering announces about an instance, written to the outbox in the
//! caller's transaction: its run starting and ending, its disk's life, a
//! lost host's downtime, and the provisioner's commands.

use chrono::{DateTime, Utc};
use contracts::Envelope;
use contracts::events::{
    InstanceDowntime, InstanceRunning, InstanceStopped, InstanceStorageEnded,
    InstanceStorageStarted, ProvisionInstance, ProvisionRun, StopInstance,
};
use contracts::ids::TenantId;
use diesel::prelude::*;
use rust_decimal::Decimal;
use schema::ordering::instances;
use serde::Serialize;

use crate::{Error, SCHEMA};

use crate::store::InstanceRow;

/// Writes a message to this service's outbox.
pub fn publish<P: Serialize>(
    conn: &mut PgConnection,
    exchange: &str,
    kind: contracts::Kind<P>,
    at: DateTime<Utc>,
    tenant_id: TenantId,
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
    platform::outbox::enqueue(conn, SCHEMA, exchange, kind.name(), &envelope)?;
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
        contracts::events::kinds::INSTANCE_RUNNING,
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

/// The worker's command to stop `row`'s container and unbind its GPUs (the
/// disk stays until the instance is destroyed).
pub fn publish_stop_command(
    conn: &mut PgConnection,
    commands: &str,
    row: &InstanceRow,
    at: DateTime<Utc>,
) -> Result<(), Error> {
    publish(
        conn,
        commands,
        contracts::events::kinds::STOP_INSTANCE,
        at,
        row.tenant_id,
        &StopInstance {
            instance_id: row.id,
            machine_id: row.machine_id,
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
        contracts::events::kinds::INSTANCE_STOPPED,
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
        contracts::events::kinds::INSTANCE_STORAGE_STARTED,
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
        contracts::events::kinds::INSTANCE_STORAGE_ENDED,
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
        contracts::events::kinds::INSTANCE_DOWNTIME,
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
        (Vec<i32>, Option<serde_json::Value>),
    );
    let (ssh_public_key, command, env, ports, (gpu_indices, mig)): Spec = instances::table
        .find(row.id)
        .select((
            instances::ssh_public_key,
            instances::command,
            instances::env,
            instances::ports,
            (instances::gpu_indices, instances::mig_slice),
        ))
        .first(conn)?;
    let command: Option<Vec<String>> = command.and_then(|c| serde_json::from_value(c).ok());
    let env: std::collections::BTreeMap<String, String> =
        serde_json::from_value(env).unwrap_or_default();
    Ok(ProvisionInstance {
        gpu_indices: gpu_indices
            .into_iter()
            .filter_map(|i| u32::try_from(i).ok())
            .collect(),
        mig: mig.and_then(|m| serde_json::from_value(m).ok()),
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

/// The MIG slice the instance holds (as its last allocation recorded it).
pub fn held_slice(
    conn: &mut PgConnection,
    id: contracts::ids::InstanceId,
) -> Result<Option<contracts::mig::MigSlice>, Error> {
    let slice: Option<serde_json::Value> = instances::table
        .find(id)
        .select(instances::mig_slice)
        .first(conn)?;
    Ok(slice.and_then(|s| serde_json::from_value(s).ok()))
}

/// Records on the instance the GPUs (by index) or the MIG slice its current
/// allocation holds, so each provisioning attempt sends exactly those.
pub fn record_allocation(
    conn: &mut PgConnection,
    id: contracts::ids::InstanceId,
    allocation: &contracts::api::Allocation,
) -> Result<(), Error> {
    let slice = allocation
        .mig
        .as_ref()
        .map(serde_json::to_value)
        .transpose()
        .map_err(platform::PlatformError::from)?;
    diesel::update(instances::table.find(id))
        .set((
            instances::gpu_indices.eq(allocation
                .gpu_indices
                .iter()
                .filter_map(|&i| i32::try_from(i).ok())
                .collect::<Vec<_>>()),
            instances::mig_profile.eq(allocation.mig.as_ref().map(|m| m.profile.clone())),
            instances::mig_slice.eq(slice),
        ))
        .execute(conn)?;
    Ok(())
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
        contracts::events::kinds::PROVISION_INSTANCE,
        at,
        row.tenant_id,
        &ProvisionRun {
            instance,
            attempt,
            never_ran,
        },
    )
}
