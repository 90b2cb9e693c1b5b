//! The reconciler: a periodic task that makes billing agree with what the
//! renter actually had (DESIGN 4.8, issue 4).
//!
//! Each pass has two halves, both safe with several ordering replicas:
//!
//! 1. **Liveness.** The hosts of `running` and `host_lost` instances are
//!    looked up in the catalog (`POST /internal/machines/heartbeats`, the
//!    catalog's own liveness rule; ordering never reads its tables).
//!    - *Host lost*: a `running` instance whose machine is offline becomes
//!      `host_lost`. Billing stops at the last good heartbeat (never before
//!      the run started): `stopped_at` is set to that instant and
//!      `ordering.instance.stopped` for the current run leaves in the same
//!      transaction. GPUs and quota stay held: the renter's instance is still
//!      on that machine.
//!    - *Host back*: a `host_lost` instance whose machine is online again
//!      with a heartbeat newer than the loss runs again as a new run
//!      (`run_seq + 1`, `running_at = now`), announced by
//!      `ordering.instance.running`; the outage is not billed.
//! 2. **Meter cross-check.** For instances that can still matter (running,
//!    host lost, or changed in the last day, with at least one run) the GPU
//!    intervals are looked up in metering (`POST /internal/intervals/lookup`)
//!    and compared with ordering's runs:
//!    - *running but unbilled*: the current run has no interval with a start
//!      → `ordering.instance.running` is sent again with the run's original
//!      `running_at`;
//!    - *billed but not running*: an interval is open while ordering's
//!      instance no longer runs that run → `ordering.instance.stopped` is
//!      sent again with the instant ordering recorded (`stopped_at`, or
//!      `preempted_at`; for an earlier run, the stop ordering published for
//!      it, found in its outbox), which stops the meter.
//!
//!    Both only act on changes older than `reconcile_settle_seconds`, so the
//!    outbox path (which normally delivers within a fraction of a second)
//!    gets there first. Metering's upsert on (instance, meter, run) makes a
//!    re-sent event idempotent: the interval gets the same instants.
//!
//! Replicas: every repair re-reads the instance under `FOR UPDATE SKIP
//! LOCKED` (a row another replica holds is skipped this pass) and decides
//! again from the locked row, so a transition happens once; a re-sent event
//! may at worst be sent twice by two replicas, which metering absorbs.
//! The decisions are pure functions ([`liveness_repair`], [`meter_repairs`]).

use contracts::ids::{InstanceId, MachineId};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use contracts::Envelope;
use contracts::api::{
    GpuInterval, IntervalLookupRequest, MachineHeartbeat, MachineHeartbeatsRequest,
};
use contracts::endpoints;
use contracts::events::{INSTANCE_STOPPED, InstanceStopped};
use diesel::prelude::*;
use diesel::sql_types::{Integer, Jsonb, Text};
use platform::Db;
use platform::internal::InternalClient;
use prometheus::{IntCounterVec, Opts};
use schema::ordering::instances;
use tracing::Instrument;
use uuid::Uuid;

use crate::instances::{InstanceRow, publish_running, publish_stopped, transition};
use crate::{Deps, Error};
use contracts::states::InstanceState;

/// Instances are read, and looked up elsewhere, in pages of this many.
const PAGE: i64 = contracts::api::RECONCILE_LOOKUP_MAX as i64;

/// Instances that stopped running longer ago than this are not
/// cross-checked with metering any more (history is not rescanned forever).
const RECENT: TimeDelta = TimeDelta::hours(24);

static REPAIRS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    let counter = IntCounterVec::new(
        Opts::new(
            "gpumarket_reconciler_repairs_total",
            "Repairs made by ordering's reconciler, by kind",
        ),
        &["kind"],
    )
    .unwrap_or_else(|e| panic!("metric gpumarket_reconciler_repairs_total is malformed: {e}"));
    // Registered once per process (LazyLock); a second registration would
    // only fail, leaving this counter unexported, never wrong.
    let _ = platform::metrics::REGISTRY.register(Box::new(counter.clone()));
    counter
});

/// What the reconciler needs of an instance.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceView {
    pub id: Uuid,
    pub machine_id: MachineId,
    pub state: InstanceState,
    pub run_seq: i32,
    pub running_at: Option<DateTime<Utc>>,
    pub stopped_at: Option<DateTime<Utc>>,
    pub preempted_at: Option<DateTime<Utc>>,
    /// The last transition (every transition stamps it).
    pub updated_at: DateTime<Utc>,
}

impl InstanceView {
    fn of(row: &InstanceRow) -> Result<Self, Error> {
        Ok(Self {
            id: row.id.into(),
            machine_id: row.machine_id,
            state: row.state,
            run_seq: row.run_seq,
            running_at: row.running_at,
            stopped_at: row.stopped_at,
            preempted_at: row.preempted_at,
            updated_at: row.updated_at,
        })
    }
}

/// One thing the reconciler does to an instance.
#[derive(Debug, Clone, PartialEq)]
pub enum Repair {
    /// `running → host_lost`; the run is billed until `billed_until`.
    HostLost {
        billed_until: DateTime<Utc>,
        last_heartbeat_at: Option<DateTime<Utc>>,
    },
    /// `host_lost → running` as a new run.
    HostBack,
    /// Send `ordering.instance.running` of `run_seq` again.
    ResendRunning {
        run_seq: i32,
        running_at: DateTime<Utc>,
    },
    /// Send `ordering.instance.stopped` of the current run again.
    ResendStopped {
        run_seq: i32,
        stopped_at: DateTime<Utc>,
    },
    /// Send the stop ordering published for an earlier run again.
    CloseEarlierRun { run_seq: i32 },
}

impl Repair {
    /// The metric label and log word.
    pub fn kind(&self) -> &'static str {
        match self {
            Repair::HostLost { .. } => "host_lost",
            Repair::HostBack => "host_back",
            Repair::ResendRunning { .. } => "resend_running",
            Repair::ResendStopped { .. } => "resend_stopped",
            Repair::CloseEarlierRun { .. } => "close_earlier_run",
        }
    }
}

/// Host lost or back, given the catalog's view of the instance's machine
/// (None: the catalog does not know it, and nothing is concluded).
pub fn liveness_repair(view: &InstanceView, machine: Option<&MachineHeartbeat>) -> Option<Repair> {
    let machine = machine?;
    match view.state {
        InstanceState::Running if !machine.online => {
            // The run cannot be billed before it started, nor after the last
            // heartbeat that proved the machine alive.
            let start = view.running_at.unwrap_or(view.updated_at);
            let billed_until = machine.last_heartbeat_at.map_or(start, |hb| hb.max(start));
            Some(Repair::HostLost {
                billed_until,
                last_heartbeat_at: machine.last_heartbeat_at,
            })
        }
        InstanceState::HostLost if machine.online => {
            // Only a heartbeat after the loss proves the machine is back.
            let lost_at = view.stopped_at.unwrap_or(view.updated_at);
            machine
                .last_heartbeat_at
                .is_some_and(|hb| hb > lost_at)
                .then_some(Repair::HostBack)
        }
        _ => None,
    }
}

/// The re-sends that make metering's intervals of one instance agree with
/// ordering's runs, acting only on changes at least `settle` old.
pub fn meter_repairs(
    view: &InstanceView,
    intervals: &[GpuInterval],
    now: DateTime<Utc>,
    settle: TimeDelta,
) -> Vec<Repair> {
    let settled = |t: DateTime<Utc>| t <= now - settle;
    let mut repairs = Vec::new();
    let n = view.run_seq;
    if n < 1 {
        return repairs;
    }
    let current = intervals
        .iter()
        .find(|i| i.instance_id == view.id && i.run_seq == n);
    // The current run's start: metering must know it, whatever the state now
    // (a stopped run whose start got lost is unbilled too).
    if let Some(t0) = view.running_at
        && settled(t0)
        && current.is_none_or(|i| i.started_at.is_none())
    {
        repairs.push(Repair::ResendRunning {
            run_seq: n,
            running_at: t0,
        });
    }
    // The current run's end, once it is no longer running. A run metering
    // never heard of gets its stop too: the re-sent start above pairs with it.
    if view.state != InstanceState::Running
        && settled(view.updated_at)
        && current.is_none_or(|i| i.ended_at.is_none())
        && let Some(t1) = view.stopped_at.or(view.preempted_at)
    {
        repairs.push(Repair::ResendStopped {
            run_seq: n,
            stopped_at: t1,
        });
    }
    // Earlier runs ended before the current one started.
    if view.running_at.is_some_and(settled) {
        for earlier in intervals.iter().filter(|i| {
            i.instance_id == view.id
                && i.run_seq < n
                && i.started_at.is_some()
                && i.ended_at.is_none()
        }) {
            repairs.push(Repair::CloseEarlierRun {
                run_seq: earlier.run_seq,
            });
        }
    }
    repairs
}

/// The reconciler of one ordering process.
#[derive(Clone)]
struct Reconciler {
    deps: Deps,
    db: Db,
    metering: InternalClient,
    resent: Arc<Resent>,
}

/// The longest a re-send of the same event waits for the next one.
const MAX_BACKOFF: Duration = Duration::from_secs(30 * 60);

/// When each event was last re-sent. While metering is down, every re-send
/// waits in the broker until it is back, so re-sending the same event every
/// pass would pile up duplicates; instead the wait doubles from the settle
/// time up to [`MAX_BACKOFF`]. Per process: two replicas may each re-send
/// once per wait, which metering absorbs.
#[derive(Default)]
struct Resent(Mutex<HashMap<ResendKey, (Instant, u32)>>);

/// Instance, run and kind of a re-sent event.
type ResendKey = (Uuid, i32, &'static str);

impl Resent {
    fn key(id: Uuid, repair: &Repair) -> Option<ResendKey> {
        match *repair {
            Repair::ResendRunning { run_seq, .. }
            | Repair::ResendStopped { run_seq, .. }
            | Repair::CloseEarlierRun { run_seq } => Some((id, run_seq, repair.kind())),
            Repair::HostLost { .. } | Repair::HostBack => None,
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<ResendKey, (Instant, u32)>> {
        // A panic elsewhere while holding the lock leaves a map that is still
        // a valid record of re-sends.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `repair` of instance `id` may be attempted now.
    fn due(&self, id: Uuid, repair: &Repair, base: Duration, now: Instant) -> bool {
        let Some(key) = Self::key(id, repair) else {
            return true;
        };
        match self.entries().get(&key) {
            None => true,
            Some((at, attempts)) => {
                let wait = base
                    .saturating_mul(1 << (*attempts).min(16))
                    .min(MAX_BACKOFF);
                now.saturating_duration_since(*at) >= wait
            }
        }
    }

    fn attempted(&self, id: Uuid, repair: &Repair, now: Instant) {
        if let Some(key) = Self::key(id, repair) {
            let mut entries = self.entries();
            let attempts = entries.get(&key).map_or(0, |(_, n)| n.saturating_add(1));
            entries.insert(key, (now, attempts));
        }
    }

    /// Forgets re-sends too old to delay anything.
    fn prune(&self) {
        self.entries()
            .retain(|_, (at, _)| at.elapsed() < MAX_BACKOFF.saturating_mul(2));
    }
}

/// Starts the reconciler for this service.
pub fn spawn(deps: Deps, db: Db) -> tokio::task::JoinHandle<()> {
    let metering = InternalClient::new(
        deps.config.url("metering"),
        deps.config.service_token.clone(),
    );
    tokio::spawn(run(Reconciler {
        deps,
        db,
        metering,
        resent: Arc::default(),
    }))
}

async fn run(r: Reconciler) {
    let every = r.deps.settings.reconcile_interval;
    loop {
        let span = tracing::info_span!("reconcile");
        pass(&r).instrument(span).await;
        tokio::time::sleep(every).await;
    }
}

/// One pass: liveness, then the meter cross-check (which then sees the
/// host-lost stops of this pass as too recent to judge).
async fn pass(r: &Reconciler) {
    let mut repairs = 0;
    match liveness_pass(r).await {
        Ok(n) => repairs += n,
        Err(error) => tracing::warn!(%error, "reconciler: liveness check failed"),
    }
    match meter_pass(r).await {
        Ok(n) => repairs += n,
        Err(error) => tracing::warn!(%error, "reconciler: meter cross-check failed"),
    }
    r.resent.prune();
    if repairs > 0 {
        tracing::info!(repairs, "reconciler pass");
    } else {
        tracing::debug!("reconciler pass: nothing to repair");
    }
}

/// Which instances a half of the pass reads.
#[derive(Clone, Copy)]
enum Scope {
    /// `running` and `host_lost`.
    Live,
    /// Those plus any instance with a run that changed since the instant.
    Metered(DateTime<Utc>),
}

fn page(
    conn: &mut PgConnection,
    scope: Scope,
    after: Option<Uuid>,
) -> QueryResult<Vec<InstanceRow>> {
    let live = [InstanceState::Running, InstanceState::HostLost];
    let mut query = instances::table
        .select(InstanceRow::as_select())
        .order(instances::id)
        .limit(PAGE)
        .into_boxed();
    query = match scope {
        Scope::Live => query.filter(instances::state.eq_any(live)),
        Scope::Metered(since) => query.filter(
            instances::run_seq.ge(1).and(
                instances::state
                    .eq_any(live)
                    .or(instances::updated_at.gt(since)),
            ),
        ),
    };
    if let Some(after) = after {
        query = query.filter(instances::id.gt(after));
    }
    query.load(conn)
}

/// Pages through `scope`, calling `each` per page; returns the repairs made.
async fn pages<F, Fut>(r: &Reconciler, scope: Scope, mut each: F) -> Result<usize, Error>
where
    F: FnMut(Vec<InstanceRow>) -> Fut,
    Fut: Future<Output = Result<usize, Error>>,
{
    let mut after = None;
    let mut repairs = 0;
    loop {
        let rows =
            r.db.run(move |conn| Ok::<_, Error>(page(conn, scope, after)?))
                .await?;
        let full = rows.len() as i64 == PAGE;
        after = rows.last().map(|row| row.id.into_uuid());
        repairs += each(rows).await?;
        if !full {
            return Ok(repairs);
        }
    }
}

async fn liveness_pass(r: &Reconciler) -> Result<usize, Error> {
    pages(r, Scope::Live, |rows| async move {
        let machine_ids: Vec<MachineId> = rows
            .iter()
            .map(|row| row.machine_id)
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let machines = r
            .deps
            .catalog
            .call(
                endpoints::catalog::MACHINE_HEARTBEATS,
                (),
                &MachineHeartbeatsRequest { machine_ids },
            )
            .await?;
        let machines: HashMap<MachineId, MachineHeartbeat> =
            machines.into_iter().map(|m| (m.machine_id, m)).collect();
        let mut repairs = 0;
        for row in rows {
            let view = InstanceView::of(&row)?;
            let machine = machines.get(&row.machine_id).cloned();
            if liveness_repair(&view, machine.as_ref()).is_none() {
                continue;
            }
            repairs += act(r, row.id.into(), move |view| {
                liveness_repair(view, machine.as_ref())
                    .into_iter()
                    .collect()
            })
            .await
            .len();
        }
        Ok(repairs)
    })
    .await
}

async fn meter_pass(r: &Reconciler) -> Result<usize, Error> {
    let settle = TimeDelta::seconds(r.deps.settings.reconcile_settle_seconds);
    let backoff = Duration::from_secs(r.deps.settings.reconcile_settle_seconds.max(1) as u64);
    let since = contracts::time::now() - RECENT;
    pages(r, Scope::Metered(since), |rows| async move {
        let instance_ids: Vec<InstanceId> = rows.iter().map(|row| row.id).collect();
        let intervals: Vec<GpuInterval> = r
            .metering
            .call(
                endpoints::metering::INTERVALS_LOOKUP,
                (),
                &IntervalLookupRequest { instance_ids },
            )
            .await?;
        let mut by_instance: HashMap<InstanceId, Vec<GpuInterval>> = HashMap::new();
        for interval in intervals {
            by_instance
                .entry(interval.instance_id)
                .or_default()
                .push(interval);
        }
        let mut repairs = 0;
        for row in rows {
            let view = InstanceView::of(&row)?;
            let intervals = by_instance.remove(&row.id).unwrap_or_default();
            let wanted: Vec<Repair> =
                meter_repairs(&view, &intervals, contracts::time::now(), settle)
                    .into_iter()
                    .filter(|repair| r.resent.due(row.id.into(), repair, backoff, Instant::now()))
                    .collect();
            if wanted.is_empty() {
                continue;
            }
            for repair in &wanted {
                r.resent.attempted(row.id.into(), repair, Instant::now());
            }
            // Decided again under the row lock; only what was due is sent.
            repairs += act(r, row.id.into(), move |view| {
                meter_repairs(view, &intervals, contracts::time::now(), settle)
                    .into_iter()
                    .filter(|repair| wanted.contains(repair))
                    .collect()
            })
            .await
            .len();
        }
        Ok(repairs)
    })
    .await
}

/// Locks the instance (skipping it when another replica holds it), decides
/// again from the locked row and applies the repairs in one transaction;
/// logs and counts them after the commit. Returns those made; a failure is
/// logged and leaves the instance to the next pass.
async fn act<F>(r: &Reconciler, id: Uuid, decide: F) -> Vec<Repair>
where
    F: FnOnce(&InstanceView) -> Vec<Repair> + Send + 'static,
{
    let exchange = r.deps.config.events_exchange.clone();
    let done =
        r.db.tx(move |conn| -> Result<Vec<Repair>, Error> {
            let Some(row) = instances::table
                .find(id)
                .select(InstanceRow::as_select())
                .for_update()
                .skip_locked()
                .first::<InstanceRow>(conn)
                .optional()?
            else {
                return Ok(Vec::new());
            };
            let mut done = Vec::new();
            for repair in decide(&InstanceView::of(&row)?) {
                if apply(conn, &exchange, &row, &repair)? {
                    done.push(repair);
                }
            }
            Ok(done)
        })
        .await;
    match done {
        Ok(done) => {
            for repair in &done {
                REPAIRS.with_label_values(&[repair.kind()]).inc();
                tracing::info!(instance.id = %id, repair = repair.kind(), detail = ?repair, "reconciler repaired an instance");
            }
            done
        }
        Err(error) => {
            tracing::warn!(instance.id = %id, %error, "reconciler could not repair an instance");
            Vec::new()
        }
    }
}

/// Applies one repair to the locked `row`; false when there was nothing to
/// do after all (an earlier run whose stop cannot be found).
fn apply(
    conn: &mut PgConnection,
    exchange: &str,
    row: &InstanceRow,
    repair: &Repair,
) -> Result<bool, Error> {
    match *repair {
        Repair::HostLost {
            billed_until,
            last_heartbeat_at,
        } => {
            let now = contracts::time::now();
            diesel::update(instances::table.find(row.id))
                .set(instances::stopped_at.eq(billed_until))
                .execute(conn)?;
            let reason = match last_heartbeat_at {
                Some(hb) => format!(
                    "host lost: no heartbeat since {}",
                    contracts::time::format(hb)
                ),
                None => "host lost: the machine was never heard from".to_owned(),
            };
            transition(conn, row, InstanceState::HostLost, Some(&reason), now)?;
            publish_stopped(conn, exchange, row, row.run_seq, billed_until, "host lost")?;
        }
        Repair::HostBack => {
            // GPUs taken back while the host was silent: the preemption
            // (being) consumed makes the instance `preempted`; it does not
            // run again on them.
            let key = crate::instances::current_holding_key(conn, row)?;
            if crate::holdings::preempted(conn, key)? {
                return Ok(false);
            }
            let at = contracts::time::now();
            let run_seq = row.run_seq + 1;
            diesel::update(instances::table.find(row.id))
                .set((
                    instances::running_at.eq(at),
                    instances::stopped_at.eq(None::<DateTime<Utc>>),
                    instances::run_seq.eq(run_seq),
                ))
                .execute(conn)?;
            transition(
                conn,
                row,
                InstanceState::Running,
                Some("host back: heartbeats resumed; a new run starts"),
                at,
            )?;
            // The outage is over: the renter's downtime credit.
            crate::instances::publish_downtime(conn, exchange, row, at, "host_back")?;
            publish_running(conn, exchange, row, run_seq, at)?;
        }
        Repair::ResendRunning {
            run_seq,
            running_at,
        } => publish_running(conn, exchange, row, run_seq, running_at)?,
        Repair::ResendStopped {
            run_seq,
            stopped_at,
        } => publish_stopped(
            conn,
            exchange,
            row,
            run_seq,
            stopped_at,
            "stop re-sent by the reconciler",
        )?,
        Repair::CloseEarlierRun { run_seq } => {
            let Some(stopped_at) = published_stop(conn, row.id.into(), run_seq)? else {
                tracing::warn!(
                    instance.id = %row.id,
                    run_seq,
                    "metering has an open interval for an earlier run whose stop ordering never published"
                );
                return Ok(false);
            };
            publish_stopped(
                conn,
                exchange,
                row,
                run_seq,
                stopped_at,
                "stop re-sent by the reconciler",
            )?;
        }
    }
    Ok(true)
}

#[derive(QueryableByName)]
struct Published {
    #[diesel(sql_type = Jsonb)]
    body: serde_json::Value,
}

/// The instant of the last stop ordering published for run `run_seq` of the
/// instance (its own outbox keeps every message it sent). Only read for the
/// rare open interval of an earlier run, so the scan is acceptable.
fn published_stop(
    conn: &mut PgConnection,
    id: Uuid,
    run_seq: i32,
) -> Result<Option<DateTime<Utc>>, Error> {
    let found: Option<Published> = diesel::sql_query(
        "SELECT body FROM ordering.outbox
         WHERE routing_key = $1
           AND body->'payload'->>'instance_id' = $2
           AND (body->'payload'->>'run_seq')::int = $3
         ORDER BY seq DESC LIMIT 1",
    )
    .bind::<Text, _>(INSTANCE_STOPPED)
    .bind::<Text, _>(id.to_string())
    .bind::<Integer, _>(run_seq)
    .get_result(conn)
    .optional()?;
    let Some(found) = found else {
        return Ok(None);
    };
    let envelope: Envelope = serde_json::from_value(found.body)
        .map_err(|e| Error::Conflict(format!("undecodable outbox message: {e}")))?;
    let stopped: InstanceStopped = envelope
        .payload()
        .map_err(|e| Error::Conflict(format!("undecodable stop in the outbox: {e}")))?;
    Ok(Some(stopped.stopped_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn view(state: InstanceState) -> InstanceView {
        InstanceView {
            id: Uuid::now_v7(),
            machine_id: MachineId::new(),
            state,
            run_seq: 1,
            running_at: Some(at(0)),
            stopped_at: None,
            preempted_at: None,
            updated_at: at(0),
        }
    }

    fn machine(v: &InstanceView, hb: Option<i64>, online: bool) -> MachineHeartbeat {
        MachineHeartbeat {
            machine_id: v.machine_id,
            last_heartbeat_at: hb.map(at),
            online,
        }
    }

    fn interval(
        v: &InstanceView,
        run_seq: i32,
        started: Option<i64>,
        ended: Option<i64>,
    ) -> GpuInterval {
        GpuInterval {
            instance_id: InstanceId(v.id),
            run_seq,
            started_at: started.map(at),
            ended_at: ended.map(at),
        }
    }

    const SETTLE: TimeDelta = TimeDelta::seconds(30);

    #[test]
    fn re_sends_of_one_event_back_off_but_others_are_not_delayed() {
        let resent = Resent::default();
        let id = Uuid::now_v7();
        let running = Repair::ResendRunning {
            run_seq: 1,
            running_at: at(0),
        };
        let base = Duration::from_secs(30);
        let t = Instant::now();
        let after = |s: u64| t + Duration::from_secs(s);
        assert!(resent.due(id, &running, base, t));
        resent.attempted(id, &running, t);
        assert!(!resent.due(id, &running, base, after(29)));
        // Another run, another kind, another instance: not delayed.
        let stopped = Repair::ResendStopped {
            run_seq: 1,
            stopped_at: at(5),
        };
        assert!(resent.due(id, &stopped, base, after(1)));
        assert!(resent.due(Uuid::now_v7(), &running, base, after(1)));
        // Transitions never wait.
        resent.attempted(id, &Repair::HostBack, t);
        assert!(resent.due(id, &Repair::HostBack, base, after(1)));
        assert!(resent.due(id, &running, base, after(30)));
        // The second wait is twice the first, and the wait is capped.
        resent.attempted(id, &running, after(30));
        assert!(!resent.due(id, &running, base, after(89)));
        assert!(resent.due(id, &running, base, after(90)));
        for n in 0..20 {
            resent.attempted(id, &running, after(100 + n));
        }
        assert!(!resent.due(id, &running, base, after(119 + 1799)));
        assert!(resent.due(id, &running, base, after(119 + 1800)));
    }

    #[test]
    fn a_silent_host_is_billed_until_its_last_heartbeat_but_never_before_the_run() {
        let v = view(InstanceState::Running);
        assert_eq!(
            liveness_repair(&v, Some(&machine(&v, Some(50), true))),
            None
        );
        assert_eq!(
            liveness_repair(&v, Some(&machine(&v, Some(50), false))),
            Some(Repair::HostLost {
                billed_until: at(50),
                last_heartbeat_at: Some(at(50)),
            })
        );
        // Silent since before the run started: nothing of the run is billed.
        assert_eq!(
            liveness_repair(&v, Some(&machine(&v, Some(-10), false))),
            Some(Repair::HostLost {
                billed_until: at(0),
                last_heartbeat_at: Some(at(-10)),
            })
        );
        assert_eq!(
            liveness_repair(&v, Some(&machine(&v, None, false))),
            Some(Repair::HostLost {
                billed_until: at(0),
                last_heartbeat_at: None,
            })
        );
        // A machine the catalog does not know proves nothing.
        assert_eq!(liveness_repair(&v, None), None);
        // Other states are not the liveness check's business.
        let stopped = view(InstanceState::Stopped);
        assert_eq!(
            liveness_repair(&stopped, Some(&machine(&stopped, None, false))),
            None
        );
    }

    #[test]
    fn a_lost_host_is_back_only_with_a_heartbeat_after_the_loss() {
        let mut v = view(InstanceState::HostLost);
        v.stopped_at = Some(at(50));
        v.updated_at = at(120);
        assert_eq!(
            liveness_repair(&v, Some(&machine(&v, Some(50), false))),
            None
        );
        // Online by the catalog's rule but no newer heartbeat: not back.
        assert_eq!(
            liveness_repair(&v, Some(&machine(&v, Some(50), true))),
            None
        );
        assert_eq!(
            liveness_repair(&v, Some(&machine(&v, Some(130), true))),
            Some(Repair::HostBack)
        );
    }

    #[test]
    fn a_running_instance_without_a_started_interval_is_resent_once_settled() {
        let v = view(InstanceState::Running);
        // Too recent: the outbox may still be on its way.
        assert!(meter_repairs(&v, &[], at(10), SETTLE).is_empty());
        let resend = vec![Repair::ResendRunning {
            run_seq: 1,
            running_at: at(0),
        }];
        assert_eq!(meter_repairs(&v, &[], at(30), SETTLE), resend);
        // A stop that arrived alone (interval without a start) is unbilled too.
        assert_eq!(
            meter_repairs(&v, &[interval(&v, 1, None, Some(5))], at(30), SETTLE),
            resend
        );
        // Billed: nothing to do.
        assert!(meter_repairs(&v, &[interval(&v, 1, Some(0), None)], at(300), SETTLE).is_empty());
        // An interval of another run does not count for this one.
        let mut second = v.clone();
        second.run_seq = 2;
        assert_eq!(
            meter_repairs(
                &second,
                &[interval(&v, 1, Some(0), Some(5))],
                at(30),
                SETTLE
            ),
            vec![Repair::ResendRunning {
                run_seq: 2,
                running_at: at(0),
            }]
        );
    }

    #[test]
    fn an_open_interval_of_a_run_that_ended_gets_its_recorded_stop() {
        let open = |v: &InstanceView| vec![interval(v, 1, Some(0), None)];
        for state in [
            InstanceState::Stopping,
            InstanceState::Stopped,
            InstanceState::HostLost,
            InstanceState::Deprovisioning,
            InstanceState::Destroyed,
            InstanceState::Provisioning,
        ] {
            let mut v = view(state);
            v.stopped_at = Some(at(40));
            v.updated_at = at(41);
            assert!(
                meter_repairs(&v, &open(&v), at(60), SETTLE).is_empty(),
                "{state}: too recent"
            );
            assert_eq!(
                meter_repairs(&v, &open(&v), at(71), SETTLE),
                vec![Repair::ResendStopped {
                    run_seq: 1,
                    stopped_at: at(40),
                }],
                "{state}"
            );
            // Closed already: nothing.
            assert!(
                meter_repairs(&v, &[interval(&v, 1, Some(0), Some(40))], at(300), SETTLE)
                    .is_empty()
            );
        }
        // Preempted: the preemption instant.
        let mut v = view(InstanceState::Preempted);
        v.preempted_at = Some(at(20));
        assert_eq!(
            meter_repairs(&v, &open(&v), at(300), SETTLE),
            vec![Repair::ResendStopped {
                run_seq: 1,
                stopped_at: at(20),
            }]
        );
        // Running: the interval is rightly open.
        let v = view(InstanceState::Running);
        assert!(meter_repairs(&v, &open(&v), at(300), SETTLE).is_empty());
    }

    #[test]
    fn a_run_metering_never_heard_of_is_sent_whole_and_earlier_runs_are_closed() {
        let mut v = view(InstanceState::Stopped);
        v.stopped_at = Some(at(40));
        v.updated_at = at(40);
        assert_eq!(
            meter_repairs(&v, &[], at(300), SETTLE),
            vec![
                Repair::ResendRunning {
                    run_seq: 1,
                    running_at: at(0),
                },
                Repair::ResendStopped {
                    run_seq: 1,
                    stopped_at: at(40),
                },
            ]
        );
        // Run 3 running; run 1 left open in metering, run 2 closed.
        let mut v = view(InstanceState::Running);
        v.run_seq = 3;
        v.running_at = Some(at(100));
        let intervals = [
            interval(&v, 1, Some(0), None),
            interval(&v, 2, Some(50), Some(60)),
            interval(&v, 3, Some(100), None),
        ];
        assert!(meter_repairs(&v, &intervals, at(120), SETTLE).is_empty());
        assert_eq!(
            meter_repairs(&v, &intervals, at(130), SETTLE),
            vec![Repair::CloseEarlierRun { run_seq: 1 }]
        );
        // Never ran: nothing to meter.
        let mut v = view(InstanceState::Failed);
        v.run_seq = 0;
        v.running_at = None;
        assert!(meter_repairs(&v, &[], at(300), SETTLE).is_empty());
    }
}
