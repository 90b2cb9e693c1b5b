//! Ingestion of the host agents' reports from the `catalog.agents` queue:
//! inventory (driver and CUDA version), self-tests and heartbeats
//! (`machines.last_heartbeat_at`, heartbeat gaps, reliability).
//!
//! A report is accepted only from its machine's own broker user: the routing
//! key names the machine (`agent.<machine_id>.<kind>`), the broker allows
//! each agent user to publish only its own routing keys, and this consumer
//! dead-letters any message whose broker-validated `user_id` is not the
//! user of the machine's current token (`agent-<machine_id>.<generation>`),
//! so no agent can report for another machine, nor with a retired token.
//!
//! Every effect is idempotent by nature: a heartbeat is dated by its
//! `sent_at` (clamped to the database clock) and only ever moves
//! `last_heartbeat_at` forward, so applying one twice changes nothing.

use contracts::ids::{MachineId, TenantId};
use std::sync::Arc;

use actix_web::web;
use chrono::{DateTime, SubsecRound, TimeDelta, Utc};
use contracts::Envelope;
use contracts::api::{GpuActivity, GpuActivityQuery, HeartbeatGap, HeartbeatGapsQuery};
use contracts::events::{
    INSTANCE_DISK_USAGE, INSTANCE_EXITED, INSTANCE_TRAFFIC, InstanceDiskUsage, InstanceExited,
    InstanceTraffic, MAX_EXIT_REASON, MachineLiveness,
};
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::{Jsonb, Nullable, Timestamptz, Uuid as SqlUuid};
use platform::consumer::{HandlerError, RawMessage};
use platform::endpoint::Reply;
use platform::internal::ServiceCaller;
use platform::{Config, Db};
use schema::catalog::{heartbeat_gaps, machines};
use serde::Deserialize;
use uuid::Uuid;

use crate::Error;
// The agent's reports, as the agent defines them (one definition,
// `contracts::agent`); a report missing a field is refused, never guessed.
use crate::agents::{AgentAccess, agent_username, ensure_owner};
use crate::reliability::{self, Settings};
use contracts::agent::{
    HeartbeatReport as Heartbeat, InventoryReport as Inventory, SelfTestReport as SelfTest,
};

/// What an agent reports (the last word of the routing key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Inventory,
    Heartbeat,
    SelfTest,
}

/// Exits a heartbeat may carry that are announced; more are cut (the agent
/// repeats them, so the rest come once the first are handled).
const MAX_EXITS_PER_HEARTBEAT: usize = 64;

/// Counters a heartbeat may carry at most (a machine runs a few instances).
const MAX_INSTANCES_PER_HEARTBEAT: usize = 256;

fn permanent(reason: impl Into<String>) -> HandlerError {
    HandlerError::Permanent(reason.into())
}

/// The machine and kind of a report, provided its sender is that machine's
/// agent: `agent.<machine_id>.<kind>` published by `agent-<machine_id>`.
pub fn sender(message: &RawMessage) -> Result<(Uuid, Kind), HandlerError> {
    let words: Vec<&str> = message.routing_key.split('.').collect();
    let ["agent", id, kind] = words.as_slice() else {
        return Err(permanent(format!(
            "routing key {:?} is not agent.<machine_id>.<kind>",
            message.routing_key
        )));
    };
    let machine_id: MachineId = id
        .parse()
        .map_err(|_| permanent(format!("routing key names no machine: {id:?}")))?;
    let kind = match *kind {
        "inventory" => Kind::Inventory,
        "heartbeat" => Kind::Heartbeat,
        "self_test" => Kind::SelfTest,
        other => return Err(permanent(format!("unknown agent report kind {other:?}"))),
    };
    let prefix = format!("agent-{machine_id}.");
    let generation = message
        .user_id
        .as_deref()
        .and_then(|u| u.strip_prefix(prefix.as_str()))
        .filter(|g| g.len() == 16 && g.bytes().all(|b| b.is_ascii_hexdigit()));
    if generation.is_none() {
        tracing::warn!(
            routing_key = %message.routing_key,
            user_id = message.user_id.as_deref().unwrap_or(""),
            "agent report rejected: its sender is not the machine's agent"
        );
        return Err(permanent(format!(
            "user_id {:?} may not report for machine {machine_id}",
            message.user_id
        )));
    }
    Ok((machine_id.into(), kind))
}

/// Whether the report's sender is the machine's *current* token generation
/// (`machines.agent_token_sha256`): a connection of a rotated or revoked
/// token that the broker has not closed yet cannot report any more. A
/// deleted machine has no current generation: its reports (still queued, or
/// sent before the broker closed the connection) are refused.
async fn ensure_current(db: &Db, machine_id: MachineId, user_id: &str) -> Result<(), HandlerError> {
    let found: Option<(String, Option<DateTime<Utc>>)> = db
        .run(move |conn| {
            machines::table
                .find(machine_id)
                .select((machines::agent_token_sha256, machines::deleted_at))
                .first(conn)
                .optional()
                .map_err(HandlerError::from)
        })
        .await?;
    let Some((hash, deleted_at)) = found else {
        return Err(permanent(format!("machine {machine_id} does not exist")));
    };
    if deleted_at.is_some() {
        return Err(refuse_deleted(machine_id));
    }
    if agent_username(machine_id, &hash) != user_id {
        tracing::warn!(
            machine.id = %machine_id,
            user_id,
            "agent report rejected: sent with a retired agent token"
        );
        return Err(permanent(format!(
            "user_id {user_id:?} is not the current agent token of machine {machine_id}"
        )));
    }
    Ok(())
}

fn decode<'a, T: Deserialize<'a>>(
    message: &'a RawMessage,
    machine_id: MachineId,
    body_machine: impl Fn(&T) -> Uuid,
) -> Result<T, HandlerError> {
    let body: T = serde_json::from_slice(&message.data)
        .map_err(|e| permanent(format!("undecodable agent report: {e}")))?;
    if body_machine(&body) != machine_id {
        return Err(permanent(
            "the body names another machine than the routing key",
        ));
    }
    Ok(body)
}

/// Consumes `catalog.agents` forever.
pub async fn run_consumer(config: Arc<Config>, db: Db) -> Result<(), platform::PlatformError> {
    let catalog = config.settings::<crate::CatalogSettings>()?;
    let settings = Settings::from(&*catalog);
    let queue = catalog.agents_queue.clone();
    let retention = catalog.gpu_activity_retention_seconds;
    let events: Arc<str> = config.events_exchange.as_str().into();
    platform::consumer::run_raw(config, queue, move |message: RawMessage| {
        let db = db.clone();
        let events = events.clone();
        async move { handle_report(&db, settings, retention, &events, message).await }
    })
    .await;
    Ok(())
}

pub use crate::settings::DEFAULT_GPU_ACTIVITY_RETENTION_SECONDS;

/// Applies one agent report.
pub async fn handle(db: &Db, settings: Settings, message: RawMessage) -> Result<(), HandlerError> {
    handle_with_events(db, settings, DEFAULT_EVENTS_EXCHANGE, message).await
}

/// The events exchange [`handle`] announces traffic to.
pub const DEFAULT_EVENTS_EXCHANGE: &str = "gpumarket.events";

/// [`handle`], announcing instances' traffic to `events_exchange`.
pub async fn handle_with_events(
    db: &Db,
    settings: Settings,
    events_exchange: &str,
    message: RawMessage,
) -> Result<(), HandlerError> {
    handle_report(
        db,
        settings,
        DEFAULT_GPU_ACTIVITY_RETENTION_SECONDS,
        events_exchange,
        message,
    )
    .await
}

/// [`handle`], keeping GPU utilisation for `retention_seconds`.
pub async fn handle_report(
    db: &Db,
    settings: Settings,
    retention_seconds: i64,
    events_exchange: &str,
    message: RawMessage,
) -> Result<(), HandlerError> {
    let (machine_id, kind) = sender(&message)?;
    ensure_current(
        db,
        MachineId(machine_id),
        message.user_id.as_deref().unwrap_or(""),
    )
    .await?;
    let raw: serde_json::Value = serde_json::from_slice(&message.data)
        .map_err(|e| permanent(format!("undecodable agent report: {e}")))?;
    match kind {
        Kind::Heartbeat => {
            let body: Heartbeat = decode(&message, MachineId(machine_id), |b: &Heartbeat| {
                b.machine_id.into()
            })?;
            // The busiest GPU stands for the machine (see `gpu_activity`).
            let busiest = body
                .gpus
                .iter()
                .map(|g| g.utilization_percent.min(100) as i32)
                .max();
            let traffic = traffic_of(MachineId(machine_id), &body)?;
            let exits = exits_of(MachineId(machine_id), &body);
            let disk = disk_usage_of(MachineId(machine_id), &body);
            let events = events_exchange.to_owned();
            db.tx(move |conn| {
                // Even a stale or repeated heartbeat's counters count: they
                // are samples of what happened, and metering keeps each once.
                announce_traffic(conn, &events, MachineId(machine_id), &traffic)?;
                announce_exits(conn, &events, &exits)?;
                announce_disk_usage(conn, &events, &disk)?;
                apply_heartbeat(
                    conn,
                    settings,
                    &events,
                    MachineId(machine_id),
                    body.sent_at,
                    &raw,
                )?;
                record_utilisation(
                    conn,
                    MachineId(machine_id),
                    body.sent_at,
                    busiest,
                    retention_seconds,
                )
            })
            .await
        }
        Kind::Inventory => {
            let body: Inventory = decode(&message, MachineId(machine_id), |b: &Inventory| {
                b.machine_id.into()
            })?;
            let code = cuda_code(&body.cuda_version).ok_or_else(|| {
                permanent(format!(
                    "cuda_version {:?} is not major.minor",
                    body.cuda_version
                ))
            })?;
            let driver = body.driver_version.trim().to_owned();
            if driver.is_empty() || driver.len() > 64 {
                return Err(permanent("driver_version: 1 to 64 characters"));
            }
            db.tx(move |conn| {
                apply_inventory(
                    conn,
                    MachineId(machine_id),
                    body.sent_at,
                    code,
                    &driver,
                    &raw,
                )
            })
            .await
        }
        Kind::SelfTest => {
            let body: SelfTest = decode(&message, MachineId(machine_id), |b: &SelfTest| {
                b.machine_id.into()
            })?;
            db.tx(move |conn| apply_self_test(conn, MachineId(machine_id), &body, &raw))
                .await
        }
    }
}

/// The traffic samples of a heartbeat. Counters come only from the
/// machine's own agent (see [`sender`]); a heartbeat without a `boot_id`
/// (an agent that reports no traffic) has none.
fn traffic_of(
    machine_id: MachineId,
    body: &Heartbeat,
) -> Result<Vec<InstanceTraffic>, HandlerError> {
    let Some(boot_id) = body.boot_id else {
        return Ok(Vec::new());
    };
    if body.instances.len() > MAX_INSTANCES_PER_HEARTBEAT {
        return Err(permanent(format!(
            "a heartbeat carries at most {MAX_INSTANCES_PER_HEARTBEAT} instances"
        )));
    }
    let too_big = |_| permanent("a traffic counter beyond 2^63 bytes");
    let seq = i64::try_from(body.seq).map_err(too_big)?;
    body.instances
        .iter()
        .map(|c| {
            Ok(InstanceTraffic {
                instance_id: c.instance_id,
                machine_id,
                boot_id,
                seq,
                sent_at: body.sent_at.trunc_subsecs(6),
                tx_bytes: i64::try_from(c.tx_bytes).map_err(too_big)?,
                rx_bytes: i64::try_from(c.rx_bytes).map_err(too_big)?,
                // Filled in from the machine's row when announced.
                upload_mbps: None,
                download_mbps: None,
            })
        })
        .collect()
}

/// The exits a heartbeat reports, bounded: at most
/// [`MAX_EXITS_PER_HEARTBEAT`], reasons cut to [`MAX_EXIT_REASON`]
/// characters (control characters but newlines dropped).
fn exits_of(machine_id: MachineId, body: &Heartbeat) -> Vec<InstanceExited> {
    if body.exited.len() > MAX_EXITS_PER_HEARTBEAT {
        tracing::warn!(%machine_id, reported = body.exited.len(), "too many exits in a heartbeat; the rest wait for the next");
    }
    body.exited
        .iter()
        .take(MAX_EXITS_PER_HEARTBEAT)
        .map(|e| InstanceExited {
            machine_id,
            instance_id: e.instance_id,
            run: e.run,
            exit_code: e.exit_code,
            oom_killed: e.oom_killed,
            finished_at: e.finished_at.trunc_subsecs(6),
            reason: e
                .reason
                .chars()
                .filter(|c| *c == '\n' || !c.is_control())
                .take(MAX_EXIT_REASON)
                .collect(),
        })
        .collect()
}

/// The `/workspace` measurements of a heartbeat's counters (already bounded
/// in number by [`traffic_of`]); a size beyond 2^63 bytes is dropped.
fn disk_usage_of(machine_id: MachineId, body: &Heartbeat) -> Vec<InstanceDiskUsage> {
    body.instances
        .iter()
        .take(MAX_INSTANCES_PER_HEARTBEAT)
        .filter_map(|c| {
            let bytes = i64::try_from(c.workspace_bytes?).ok()?;
            Some(InstanceDiskUsage {
                machine_id,
                instance_id: c.instance_id,
                bytes,
                measured_at: body.sent_at.trunc_subsecs(6),
            })
        })
        .collect()
}

/// `catalog.instance.disk_usage` for each measurement (ordering keeps the
/// latest of an instance on the reporting machine).
fn announce_disk_usage(
    conn: &mut PgConnection,
    events_exchange: &str,
    usage: &[InstanceDiskUsage],
) -> Result<(), HandlerError> {
    for measured in usage {
        let envelope = Envelope::new(
            contracts::events::kinds::INSTANCE_DISK_USAGE,
            measured.measured_at,
            None,
            None,
            measured,
        )
        .map_err(|e| permanent(e.to_string()))?;
        platform::outbox::enqueue(
            conn,
            crate::SCHEMA,
            events_exchange,
            INSTANCE_DISK_USAGE,
            &envelope,
        )?;
    }
    Ok(())
}

/// `catalog.instance.exited` for each exit, through the outbox in the
/// heartbeat's transaction: the catalog vouches for the sender (the
/// machine's current agent); whether the instance runs on this machine, in
/// that run, is ordering's to check.
fn announce_exits(
    conn: &mut PgConnection,
    events_exchange: &str,
    exits: &[InstanceExited],
) -> Result<(), HandlerError> {
    for exit in exits {
        let envelope = Envelope::new(
            contracts::events::kinds::INSTANCE_EXITED,
            contracts::time::now(),
            None,
            None,
            exit,
        )
        .map_err(|e| permanent(e.to_string()))?;
        platform::outbox::enqueue(
            conn,
            crate::SCHEMA,
            events_exchange,
            INSTANCE_EXITED,
            &envelope,
        )?;
    }
    Ok(())
}

/// `catalog.instance.traffic` for each sample, through the outbox in the
/// heartbeat's transaction: metering owns usage and turns samples into
/// bytes; the catalog owns the agents and vouches for the sender, and
/// attaches the machine's declared bandwidth, which metering bounds the
/// counters by. Whether the instance runs on this machine is metering's to
/// check (it knows each instance's machine; the catalog does not).
fn announce_traffic(
    conn: &mut PgConnection,
    events_exchange: &str,
    machine_id: MachineId,
    traffic: &[InstanceTraffic],
) -> Result<(), HandlerError> {
    if traffic.is_empty() {
        return Ok(());
    }
    let declared: Option<(i32, i32)> = machines::table
        .find(machine_id)
        .select((machines::upload_mbps, machines::download_mbps))
        .first(conn)
        .optional()?;
    let Some((up, down)) = declared else {
        return Err(permanent(format!("machine {machine_id} does not exist")));
    };
    for sample in traffic {
        let sample = InstanceTraffic {
            upload_mbps: Some(up),
            download_mbps: Some(down),
            ..sample.clone()
        };
        let sample = &sample;
        let envelope = Envelope::new(
            contracts::events::kinds::INSTANCE_TRAFFIC,
            sample.sent_at,
            None,
            None,
            sample,
        )
        .map_err(|e| permanent(e.to_string()))?;
        platform::outbox::enqueue(
            conn,
            crate::SCHEMA,
            events_exchange,
            INSTANCE_TRAFFIC,
            &envelope,
        )?;
    }
    Ok(())
}

/// `12.4` → 12040 (NVML's encoding: major × 1000 + minor × 10).
fn cuda_code(version: &str) -> Option<i32> {
    let mut parts = version.trim().split('.');
    let major: i32 = parts.next()?.parse().ok()?;
    let minor: i32 = parts.next().unwrap_or("0").parse().ok()?;
    if !(1..=99).contains(&major) || !(0..=99).contains(&minor) {
        return None;
    }
    Some(major * 1000 + minor * 10)
}

#[derive(QueryableByName)]
struct Locked {
    #[diesel(sql_type = SqlUuid)]
    host_tenant_id: TenantId,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    last_heartbeat_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Timestamptz)]
    now: DateTime<Utc>,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    deleted: bool,
}

/// Locks the machine row (heartbeats of one machine apply one at a time, and
/// the sweeper skips it meanwhile); returns its last heartbeat and the
/// database's now. A machine that does not exist, or was deleted (checked
/// again under the lock `delete_machine` takes: it may have been deleted
/// since [`ensure_current`]), is a permanent failure.
fn lock_machine(conn: &mut PgConnection, machine_id: MachineId) -> Result<Locked, HandlerError> {
    let row: Option<Locked> = diesel::sql_query(
        "SELECT host_tenant_id, last_heartbeat_at, now() AS now, deleted_at IS NOT NULL AS deleted
         FROM catalog.machines WHERE id = $1 FOR UPDATE",
    )
    .bind::<SqlUuid, _>(machine_id)
    .get_result(conn)
    .optional()?;
    let row = row.ok_or_else(|| permanent(format!("machine {machine_id} does not exist")))?;
    if row.deleted {
        return Err(refuse_deleted(machine_id));
    }
    Ok(row)
}

/// A report for a deleted machine: logged and dead-lettered, never applied.
fn refuse_deleted(machine_id: MachineId) -> HandlerError {
    tracing::warn!(machine.id = %machine_id, "agent report refused: the machine is deleted");
    permanent(format!("machine {machine_id} is deleted"))
}

/// The instant a report counts at: its `sent_at`, never later than now.
fn dated(sent_at: DateTime<Utc>, now: DateTime<Utc>) -> DateTime<Utc> {
    sent_at.min(now).trunc_subsecs(6)
}

/// A heartbeat at `t`: moves `last_heartbeat_at` forward to `t`; closes the
/// open gap (or drops it, when the silence turns out shorter than the grace:
/// the heartbeat was only late in the queue), or records a closed gap when
/// the previous heartbeat is older than the grace; recomputes reliability.
/// Heartbeats older than the grace at arrival prove nothing about now and
/// cannot shorten recorded downtime: they are ignored, as are heartbeats not
/// newer than the last one (duplicates, reordering).
fn apply_heartbeat(
    conn: &mut PgConnection,
    settings: Settings,
    events: &str,
    machine_id: MachineId,
    sent_at: DateTime<Utc>,
    raw: &serde_json::Value,
) -> Result<(), HandlerError> {
    let locked = lock_machine(conn, machine_id)?;
    let grace = TimeDelta::seconds(settings.grace_seconds);
    let t = dated(sent_at, locked.now);
    if t < locked.now - grace {
        tracing::info!(machine.id = %machine_id, %sent_at, "stale heartbeat ignored");
        return Ok(());
    }
    if locked.last_heartbeat_at.is_some_and(|last| t <= last) {
        tracing::debug!(machine.id = %machine_id, "heartbeat not newer than the last one");
        return Ok(());
    }
    let open: Option<DateTime<Utc>> = heartbeat_gaps::table
        .filter(heartbeat_gaps::machine_id.eq(machine_id))
        .filter(heartbeat_gaps::ended_at.is_null())
        .select(heartbeat_gaps::started_at)
        .first(conn)
        .optional()?;
    let open_gap = heartbeat_gaps::table
        .filter(heartbeat_gaps::machine_id.eq(machine_id))
        .filter(heartbeat_gaps::ended_at.is_null());
    // The sweeper announced an open gap as `machine.offline`: whichever way
    // it ends, the machine is announced back.
    let back = |conn: &mut PgConnection, started: DateTime<Utc>| {
        reliability::announce_liveness(
            conn,
            events,
            MachineLiveness {
                host_tenant_id: locked.host_tenant_id,
                machine_id,
                online: true,
                silent_since: started,
                back_at: Some(t),
                at: contracts::time::now(),
                sequence: 0,
            },
        )
        .map_err(HandlerError::from)
    };
    match (open, locked.last_heartbeat_at) {
        (Some(started), _) if t - started > grace => {
            diesel::update(open_gap)
                .set(heartbeat_gaps::ended_at.eq(t))
                .execute(conn)?;
            back(conn, started)?;
            tracing::info!(machine.id = %machine_id, seconds = (t - started).num_seconds(), "machine back online");
        }
        (Some(started), _) => {
            diesel::delete(open_gap).execute(conn)?;
            back(conn, started)?;
        }
        (None, Some(last)) if t - last > grace => {
            diesel::insert_into(heartbeat_gaps::table)
                .values((
                    heartbeat_gaps::machine_id.eq(machine_id),
                    heartbeat_gaps::started_at.eq(last),
                    heartbeat_gaps::ended_at.eq(Some(t)),
                    heartbeat_gaps::detected_by.eq("heartbeat"),
                ))
                .on_conflict_do_nothing()
                .execute(conn)?;
            tracing::info!(machine.id = %machine_id, seconds = (t - last).num_seconds(), "heartbeat gap recorded");
        }
        (None, _) => {}
    }
    diesel::update(machines::table.find(machine_id))
        .set(machines::last_heartbeat_at.eq(Some(t)))
        .execute(conn)?;
    diesel::sql_query(
        "INSERT INTO catalog.agent_reports (machine_id, last_sample, last_sample_at)
         VALUES ($1, $2, $3)
         ON CONFLICT (machine_id) DO UPDATE
         SET last_sample = EXCLUDED.last_sample, last_sample_at = EXCLUDED.last_sample_at
         WHERE agent_reports.last_sample_at IS NULL
            OR agent_reports.last_sample_at < EXCLUDED.last_sample_at",
    )
    .bind::<SqlUuid, _>(machine_id)
    .bind::<Jsonb, _>(raw)
    .bind::<Timestamptz, _>(t)
    .execute(conn)?;
    reliability::recompute(conn, Some(machine_id.into()), settings.window_days)?;
    Ok(())
}

/// The newest inventory sets the machine's driver and CUDA version.
fn apply_inventory(
    conn: &mut PgConnection,
    machine_id: MachineId,
    sent_at: DateTime<Utc>,
    cuda_version_code: i32,
    driver_version: &str,
    raw: &serde_json::Value,
) -> Result<(), HandlerError> {
    let locked = lock_machine(conn, machine_id)?;
    let t = dated(sent_at, locked.now);
    if store_if_newer(conn, machine_id, Report::Inventory, raw, t)? {
        diesel::update(machines::table.find(machine_id))
            .set((
                machines::cuda_version_code.eq(Some(cuda_version_code)),
                machines::driver_version.eq(Some(driver_version)),
            ))
            .execute(conn)?;
        tracing::info!(machine.id = %machine_id, cuda_version_code, driver_version, "inventory reported");
    }
    Ok(())
}

/// The reports kept per machine in `catalog.agent_reports`.
#[derive(Clone, Copy)]
enum Report {
    Inventory,
    SelfTest,
}

/// Keeps `raw` as the machine's latest report of its kind unless a newer one
/// is stored already; true when it was stored (so its effects apply).
fn store_if_newer(
    conn: &mut PgConnection,
    machine_id: MachineId,
    report: Report,
    raw: &serde_json::Value,
    at: DateTime<Utc>,
) -> QueryResult<bool> {
    let column = match report {
        Report::Inventory => "inventory",
        Report::SelfTest => "self_test",
    };
    let stored = diesel::sql_query(format!(
        "INSERT INTO catalog.agent_reports (machine_id, {column}, {column}_at)
         VALUES ($1, $2, $3)
         ON CONFLICT (machine_id) DO UPDATE
         SET {column} = EXCLUDED.{column}, {column}_at = EXCLUDED.{column}_at
         WHERE agent_reports.{column}_at IS NULL
            OR agent_reports.{column}_at < EXCLUDED.{column}_at"
    ))
    .bind::<SqlUuid, _>(machine_id)
    .bind::<Jsonb, _>(raw)
    .bind::<Timestamptz, _>(at)
    .execute(conn)?;
    Ok(stored == 1)
}

/// The newest self-test sets `self_test_passed_at` to its instant when it
/// passed on at least the registered number of GPUs, each with at least 90 %
/// of the registered VRAM (drivers report a little less than the marketing
/// size), and clears it otherwise.
fn apply_self_test(
    conn: &mut PgConnection,
    machine_id: MachineId,
    body: &SelfTest,
    raw: &serde_json::Value,
) -> Result<(), HandlerError> {
    let locked = lock_machine(conn, machine_id)?;
    let t = dated(body.sent_at, locked.now);
    if !store_if_newer(conn, machine_id, Report::SelfTest, raw, t)? {
        return Ok(());
    }
    let (gpu_count, vram_gib): (i32, i32) = machines::table
        .find(machine_id)
        .select((machines::gpu_count, machines::vram_gib))
        .first(conn)?;
    let min_mib = u64::try_from(vram_gib).unwrap_or(0) * 1024 * 9 / 10;
    let enough_gpus = body.gpus.len() >= usize::try_from(gpu_count).unwrap_or(usize::MAX);
    let enough_vram = body.gpus.iter().all(|g| g.memory_total_mib >= min_mib);
    let passed = body.passed && enough_gpus && enough_vram;
    if !passed {
        tracing::warn!(
            machine.id = %machine_id,
            reported_passed = body.passed,
            gpus = body.gpus.len(),
            gpu_count,
            enough_vram,
            "self-test not passed"
        );
    }
    diesel::update(machines::table.find(machine_id))
        .set(machines::self_test_passed_at.eq(passed.then_some(t)))
        .execute(conn)?;
    Ok(())
}

/// Keeps the busiest GPU's utilisation of an accepted heartbeat (dated like
/// the heartbeat) and forgets samples older than the retention.
fn record_utilisation(
    conn: &mut PgConnection,
    machine_id: MachineId,
    sent_at: DateTime<Utc>,
    busiest: Option<i32>,
    retention_seconds: i64,
) -> Result<(), HandlerError> {
    let Some(percent) = busiest else {
        return Ok(());
    };
    diesel::sql_query(
        "INSERT INTO catalog.gpu_utilisation (machine_id, at, max_percent)
         SELECT $1, least($2, now()), $3
         ON CONFLICT DO NOTHING",
    )
    .bind::<SqlUuid, _>(machine_id)
    .bind::<Timestamptz, _>(sent_at.trunc_subsecs(6))
    .bind::<diesel::sql_types::Integer, _>(percent)
    .execute(conn)?;
    diesel::sql_query(
        "DELETE FROM catalog.gpu_utilisation
         WHERE machine_id = $1 AND at < now() - make_interval(secs => $2)",
    )
    .bind::<SqlUuid, _>(machine_id)
    .bind::<diesel::sql_types::Double, _>(retention_seconds as f64)
    .execute(conn)?;
    Ok(())
}

#[derive(QueryableByName)]
struct Activity {
    #[diesel(sql_type = Nullable<Timestamptz>)]
    last_sample_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    last_busy_at: Option<DateTime<Utc>>,
}

/// `GET /internal/machines/{id}/gpu-activity?threshold=&since=`: the newest
/// heartbeat since `since`, and the newest one in which any GPU of the
/// machine was at or above `threshold` percent. Ordering's idle-stop rule
/// reads it; utilisation is per machine, so another renter's busy GPU keeps
/// an instance from being called idle, never the reverse.
pub async fn gpu_activity_route(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<MachineId>,
    query: web::Query<GpuActivityQuery>,
) -> Result<Reply<GpuActivity>, Error> {
    let machine_id = path.into_inner().into_uuid();
    let GpuActivityQuery { threshold, since } = query.into_inner();
    if !(0..=100).contains(&threshold) {
        return Err(Error::Validation("threshold: 0 to 100".into()));
    }
    let activity = db
        .run(move |conn| {
            diesel::sql_query(
                "SELECT max(at) AS last_sample_at,
                        max(at) FILTER (WHERE max_percent >= $3) AS last_busy_at
                 FROM catalog.gpu_utilisation
                 WHERE machine_id = $1 AND at >= $2",
            )
            .bind::<SqlUuid, _>(machine_id)
            .bind::<Timestamptz, _>(since)
            .bind::<diesel::sql_types::Integer, _>(threshold)
            .get_result::<Activity>(conn)
            .map_err(Error::from)
        })
        .await?;
    Ok(Reply::ok(GpuActivity {
        machine_id: MachineId(machine_id),
        last_sample_at: activity.last_sample_at,
        last_busy_at: activity.last_busy_at,
    }))
}

/// `GET /internal/machines/{id}/heartbeat-gaps?host_tenant_id=`: the gaps
/// reliability is computed from, within the window, newest first, as
/// `[{started_at, ended_at, seconds}]` (`ended_at` null while still silent).
/// The host must own the machine (404 otherwise).
pub async fn gaps_route(
    _: ServiceCaller,
    db: web::Data<Db>,
    access: web::Data<AgentAccess>,
    path: web::Path<MachineId>,
    query: web::Query<HeartbeatGapsQuery>,
) -> Result<Reply<Vec<HeartbeatGap>>, Error> {
    let machine_id = path.into_inner().into_uuid();
    ensure_owner(&db, MachineId(machine_id), query.host_tenant_id).await?;
    let window_days = access.settings().window_days;
    let gaps = db
        .run(move |conn| {
            reliability::gaps(conn, MachineId(machine_id), window_days).map_err(Error::from)
        })
        .await?;
    Ok(Reply::ok(
        gaps.into_iter()
            .map(|gap| HeartbeatGap {
                started_at: gap.started_at,
                ended_at: gap.ended_at,
                seconds: gap.seconds,
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(routing_key: &str, user_id: Option<&str>) -> RawMessage {
        RawMessage {
            routing_key: routing_key.into(),
            user_id: user_id.map(Into::into),
            message_id: None,
            data: b"{}".to_vec(),
            delivery_count: 0,
        }
    }

    #[test]
    fn only_the_machines_own_agent_may_report_for_it() {
        let a = Uuid::now_v7();
        let b = Uuid::now_v7();
        let user_a = agent_username(MachineId(a), &crate::agents::token_sha256("gpa_a"));
        let ok = message(&format!("agent.{a}.heartbeat"), Some(&user_a));
        assert_eq!(sender(&ok).unwrap(), (a, Kind::Heartbeat));
        for bad in [
            message(&format!("agent.{b}.heartbeat"), Some(&user_a)),
            message(&format!("agent.{a}.heartbeat"), None),
            message(&format!("agent.{a}.heartbeat"), Some("guest")),
            // The pre-generation name, and generations that are not one.
            message(&format!("agent.{a}.heartbeat"), Some(&format!("agent-{a}"))),
            message(
                &format!("agent.{a}.heartbeat"),
                Some(&format!("agent-{a}.xyz")),
            ),
            message(&format!("agent.{a}.reboot"), Some(&user_a)),
            message(&format!("agent.{a}.heartbeat.x"), Some(&user_a)),
            message("agent.nope.heartbeat", Some("agent-nope")),
        ] {
            assert!(matches!(sender(&bad), Err(HandlerError::Permanent(_))));
        }
    }

    #[test]
    fn cuda_versions_become_nvml_codes() {
        assert_eq!(cuda_code("12.4"), Some(12040));
        assert_eq!(cuda_code("11.8"), Some(11080));
        assert_eq!(cuda_code("12"), Some(12000));
        assert_eq!(cuda_code("twelve"), None);
    }
}
