//! The instance event history: every change of an instance its renter may
//! watch, recorded in `ordering.instance_events` and published under
//! [`INSTANCE_EVENT`] in the transaction that makes the change.
//!
//! State changes are recorded by [`crate::instances::transition`] (and the
//! instance's creation), so no transition can skip its event. Provisioning
//! steps arrive from the workers as [`PROVISIONING_STEP`] events; this
//! service records them too (idempotently, keyed by job, step, status and
//! attempt) so that the history `instanceEvents` replays is complete: a
//! subscriber who arrives after the worker started still sees every step.
//!
//! `seq` numbers one instance's events from 1. It is taken under the
//! instance's row lock (every writer locks the row first), and the unique
//! `(instance_id, seq)` constraint backs that up.

use contracts::ids::{InstanceId, TenantId};
use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Utc};
use contracts::events::{INSTANCE_EVENT, InstanceEvent, ProvisioningStep, RuleNotice};
use contracts::states::{InstanceEventKind, InstanceState, StepStatus};
use contracts::{Envelope, api};
use diesel::prelude::*;
use platform::consumer::HandlerError;
use platform::{Config, Db};
use schema::ordering::{instance_events, instances};
use uuid::Uuid;

use crate::store::{InstanceRow, load};
use crate::{Error, SCHEMA};

/// The exchange instance events go to. Set once from the configuration when
/// the service starts: a process publishes to one events exchange.
static EVENTS_EXCHANGE: OnceLock<String> = OnceLock::new();

pub(crate) fn configure(config: &Config) {
    let _ = EVENTS_EXCHANGE.set(config.events_exchange.clone());
}

pub(crate) fn exchange() -> &'static str {
    EVENTS_EXCHANGE
        .get()
        .map(String::as_str)
        .unwrap_or("gpumarket.events")
}

/// The queue of provisioning steps this service records.
pub const STEPS_QUEUE: &str = "ordering.instance-steps";

/// What one event says besides its kind.
#[derive(Default)]
pub(crate) struct Detail<'a> {
    pub from_state: Option<InstanceState>,
    pub to_state: Option<InstanceState>,
    pub reason: Option<&'a str>,
    pub step: Option<&'a ProvisioningStep>,
    pub rule: Option<&'a RuleNotice>,
    /// Recorded at most once per key (None: always recorded).
    pub dedupe_key: Option<String>,
}

#[derive(Queryable)]
struct EventRow {
    instance_id: InstanceId,
    seq: i32,
    kind: InstanceEventKind,
    from_state: Option<InstanceState>,
    to_state: Option<InstanceState>,
    reason: Option<String>,
    detail: Option<serde_json::Value>,
    snapshot: serde_json::Value,
    at: DateTime<Utc>,
}

fn to_event(row: EventRow, tenant_id: TenantId) -> Result<InstanceEvent, Error> {
    let bad = |e: serde_json::Error| Error::Conflict(format!("stored instance event: {e}"));
    let (step, rule) = match (row.kind, row.detail) {
        (InstanceEventKind::ProvisioningStep, Some(d)) => {
            (Some(serde_json::from_value(d).map_err(bad)?), None)
        }
        (InstanceEventKind::RuleWarning | InstanceEventKind::RuleEnforced, Some(d)) => {
            (None, Some(serde_json::from_value(d).map_err(bad)?))
        }
        _ => (None, None),
    };
    Ok(InstanceEvent {
        instance_id: row.instance_id,
        tenant_id,
        seq: row.seq,
        kind: row.kind,
        from_state: row.from_state,
        to_state: row.to_state,
        reason: row.reason,
        step,
        rule,
        instance: serde_json::from_value(row.snapshot).map_err(bad)?,
        at: row.at,
    })
}

/// Records an event of instance `id` (whose row the caller has locked or
/// just created) and writes its message to the outbox. Returns None when an
/// event with the same dedupe key was recorded before.
pub(crate) fn record(
    conn: &mut PgConnection,
    id: Uuid,
    kind: InstanceEventKind,
    detail: Detail<'_>,
    at: DateTime<Utc>,
) -> Result<Option<InstanceEvent>, Error> {
    let row: InstanceRow =
        load(conn, id)?.ok_or_else(|| Error::NotFound(format!("instance {id} not found")))?;
    if let Some(key) = &detail.dedupe_key {
        let seen: i64 = instance_events::table
            .filter(instance_events::instance_id.eq(id))
            .filter(instance_events::dedupe_key.eq(key))
            .count()
            .get_result(conn)?;
        if seen > 0 {
            return Ok(None);
        }
    }
    let last: Option<i32> = instance_events::table
        .filter(instance_events::instance_id.eq(id))
        .select(diesel::dsl::max(instance_events::seq))
        .first(conn)?;
    let seq = last.unwrap_or(0) + 1;
    let tenant_id = row.tenant_id;
    let snapshot: api::Instance = row.into();
    let to_json = |v: serde_json::Result<serde_json::Value>| {
        v.map_err(|e| Error::Platform(platform::PlatformError::from(e)))
    };
    let stored_detail = match (detail.step, detail.rule) {
        (Some(step), _) => Some(to_json(serde_json::to_value(step))?),
        (None, Some(rule)) => Some(to_json(serde_json::to_value(rule))?),
        (None, None) => None,
    };
    diesel::insert_into(instance_events::table)
        .values((
            instance_events::instance_id.eq(id),
            instance_events::seq.eq(seq),
            instance_events::kind.eq(kind),
            instance_events::from_state.eq(detail.from_state),
            instance_events::to_state.eq(detail.to_state),
            instance_events::reason.eq(detail.reason),
            instance_events::detail.eq(&stored_detail),
            instance_events::snapshot.eq(to_json(serde_json::to_value(&snapshot))?),
            instance_events::dedupe_key.eq(&detail.dedupe_key),
            instance_events::at.eq(at),
        ))
        .execute(conn)?;
    let event = InstanceEvent {
        instance_id: InstanceId(id),
        tenant_id,
        seq,
        kind,
        from_state: detail.from_state,
        to_state: detail.to_state,
        reason: detail.reason.map(str::to_owned),
        step: detail.step.cloned(),
        rule: detail.rule.cloned(),
        instance: snapshot,
        at,
    };
    let envelope = Envelope::new(
        contracts::events::kinds::INSTANCE_EVENT,
        at,
        Some(tenant_id),
        platform::http::current_correlation_id(),
        &event,
    )
    .map_err(platform::PlatformError::from)?;
    platform::outbox::enqueue(conn, SCHEMA, exchange(), INSTANCE_EVENT, &envelope)?;
    Ok(Some(event))
}

/// The instance's creation (it starts in `to`).
pub(crate) fn created(
    conn: &mut PgConnection,
    id: Uuid,
    to: InstanceState,
    at: DateTime<Utc>,
) -> Result<(), Error> {
    record(
        conn,
        id,
        InstanceEventKind::StateChanged,
        Detail {
            to_state: Some(to),
            reason: Some("order placed"),
            ..Detail::default()
        },
        at,
    )?;
    Ok(())
}

/// The instance's events in order; another tenant's instance is reported
/// like a missing one.
pub async fn history(db: &Db, id: Uuid, tenant_id: TenantId) -> Result<Vec<InstanceEvent>, Error> {
    db.run(move |conn| {
        let owner: Option<Uuid> = instances::table
            .find(id)
            .select(instances::tenant_id)
            .first(conn)
            .optional()?;
        if owner != Some(tenant_id.into()) {
            return Err(Error::NotFound(format!("instance {id} not found")));
        }
        let rows: Vec<EventRow> = instance_events::table
            .filter(instance_events::instance_id.eq(id))
            .order(instance_events::seq.asc())
            .select((
                instance_events::instance_id,
                instance_events::seq,
                instance_events::kind,
                instance_events::from_state,
                instance_events::to_state,
                instance_events::reason,
                instance_events::detail,
                instance_events::snapshot,
                instance_events::at,
            ))
            .load(conn)?;
        rows.into_iter().map(|r| to_event(r, tenant_id)).collect()
    })
    .await
}

/// The key that makes a redelivered (or re-run and re-reported) step
/// report count once; the gateway dedupes live step events by the same key.
pub fn step_key(step: &ProvisioningStep) -> String {
    let key = format!(
        "step:{}:{}:{}:{}",
        step.job_kind, step.step, step.status, step.attempt
    );
    // A step reports progress many times: each report is its own event
    // (a redelivered one has the same instant).
    if step.status == StepStatus::Progress {
        format!("{key}:{}", step.at.timestamp_micros())
    } else {
        key
    }
}

/// Records one provisioning step report (idempotent by [`step_key`]).
fn apply_step(conn: &mut PgConnection, envelope: &Envelope) -> Result<(), HandlerError> {
    let step: ProvisioningStep = serde_json::from_value(envelope.payload.clone())
        .map_err(|e| HandlerError::Permanent(format!("bad provisioning step: {e}")))?;
    // Lock the instance: seq is taken under its row lock.
    let locked = instances::table
        .find(step.instance_id)
        .select(instances::id)
        .for_update()
        .first::<Uuid>(conn)
        .optional()?;
    if locked.is_none() {
        return Err(HandlerError::Permanent(format!(
            "provisioning step for unknown instance {}",
            step.instance_id
        )));
    }
    let reason = step.error.clone();
    record(
        conn,
        step.instance_id.into(),
        InstanceEventKind::ProvisioningStep,
        Detail {
            reason: reason.as_deref(),
            step: Some(&step),
            dedupe_key: Some(step_key(&step)),
            ..Detail::default()
        },
        step.at,
    )
    .map_err(|e| match e {
        Error::Database(db) => HandlerError::from(db),
        other => HandlerError::Transient(other.to_string()),
    })?;
    Ok(())
}

/// Records the workers' provisioning steps forever (the queue is declared
/// with the rest of the topology: [`crate::OrderingService`]'s queues).
pub async fn run_step_consumer(config: Arc<Config>, db: Db) {
    platform::consumer::run_inbox(config, db, STEPS_QUEUE.to_owned(), SCHEMA, apply_step).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_keyed_by_job_step_status_and_attempt() {
        let step = ProvisioningStep {
            instance_id: InstanceId(Uuid::now_v7()),
            job_kind: contracts::states::JobKind::Provision(1),
            step: "image".into(),
            status: StepStatus::Finished,
            attempt: 2,
            duration_ms: Some(5),
            error: None,
            at: Utc::now(),
            detail: None,
        };
        assert_eq!(step_key(&step), "step:provision:image:finished:2");
        let retried = ProvisioningStep {
            attempt: 3,
            ..step.clone()
        };
        assert_ne!(step_key(&retried), step_key(&step));
    }
}
