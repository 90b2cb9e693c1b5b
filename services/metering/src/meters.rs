//! The storage and bandwidth meters (docs/metering.md).
//!
//! **Storage** is one interval per instance (`meter = 'storage'`, run 0)
//! from the instance's creation to its destroy request (or its failure
//! before it ever ran), running or stopped. Both events carry the whole
//! snapshot, so whichever arrives first opens the interval and the end
//! closes it; it is settled like GPU time.
//!
//! **Bandwidth** is one interval per instance and direction
//! (`bandwidth_up`, `bandwidth_down`, run 0) whose `settled_seconds` counts
//! the bytes announced so far. Counter samples are kept, keyed by (instance,
//! boot, seq); the total is recomputed from all of them on every change and
//! the difference from what was announced is announced, so duplicated, late
//! or reordered samples give the same total, and a late one yields an extra
//! segment (or a negative correction), never an edit.

use chrono::{DateTime, Utc};
use contracts::Envelope;
use contracts::events::{
    INSTANCE_STORAGE_ENDED, InstanceStorageEnded, InstanceStorageStarted, InstanceTraffic,
};
use contracts::ids::{InstanceId, MachineId};
use diesel::prelude::*;
use platform::Db;
use platform::consumer::HandlerError;
use rust_decimal::{Decimal, RoundingStrategy};
use schema::metering::intervals;
use schema::meters::traffic_samples;
use uuid::Uuid;

use crate::Error;
use crate::intervals::{
    BANDWIDTH_DOWN, BANDWIDTH_UP, IntervalRow, STORAGE, announce, close_if_complete, is_bandwidth,
};
/// The hours-per-month convention of storage prices (the catalog prices
/// offers with the same one): 365 × 24 / 12.
pub const HOURS_PER_MONTH: i64 = 730;

/// Storage and bandwidth intervals are always the instance's only run.
const RUN: i32 = 0;

fn bad(kind: &str) -> impl Fn(serde_json::Error) -> HandlerError + '_ {
    move |e| HandlerError::Permanent(format!("bad {kind} payload: {e}"))
}

/// `storage_started` or `storage_ended`: opens (or finds) the instance's
/// storage and bandwidth intervals; an end also closes the storage one.
/// A meter whose price is zero bills nothing and gets no interval.
pub fn apply_storage(
    conn: &mut PgConnection,
    envelope: &Envelope,
    events_exchange: &str,
) -> Result<(), HandlerError> {
    let (p, ended) = if envelope.kind == INSTANCE_STORAGE_ENDED {
        let e: InstanceStorageEnded = envelope.payload().map_err(bad(&envelope.kind))?;
        (e.storage, Some(e.ended_at))
    } else {
        let s: InstanceStorageStarted = envelope.payload().map_err(bad(&envelope.kind))?;
        (s, None)
    };
    let correlation_id = envelope.correlation_id.clone();
    // Before the intervals' row locks, in the order `apply_traffic` takes
    // them: a sample is judged against the instance's placement either
    // before this event commits or after (its end included), never beside.
    lock_traffic(conn, p.instance_id)?;
    if p.storage_price_per_gb_month > Decimal::ZERO && p.disk_gib > 0 {
        let hourly = (p.storage_price_per_gb_month * Decimal::from(p.disk_gib)
            / Decimal::from(HOURS_PER_MONTH))
        .round_dp_with_strategy(9, RoundingStrategy::MidpointNearestEven);
        let id = open(
            conn,
            &p,
            STORAGE,
            Some(hourly),
            p.storage_price_per_gb_month,
            Some(p.disk_gib),
            ended,
            correlation_id.as_deref(),
        )?;
        if let Some(end) = ended {
            // The first end stands: a repeat cannot move it.
            diesel::update(intervals::table.find(id))
                .filter(intervals::ended_at.is_null())
                .set(intervals::ended_at.eq(end))
                .execute(conn)?;
        }
        close_if_complete(conn, id, events_exchange, correlation_id.clone())?;
    }
    let mut any_bandwidth = false;
    for (meter, price) in [
        (BANDWIDTH_UP, p.bandwidth_up_price_per_tb),
        (BANDWIDTH_DOWN, p.bandwidth_down_price_per_tb),
    ] {
        if price > Decimal::ZERO {
            let id = open(
                conn,
                &p,
                meter,
                None,
                price,
                None,
                ended,
                correlation_id.as_deref(),
            )?;
            if let Some(end) = ended {
                // The instance is gone: no traffic after this counts (the
                // bound of its counters stops growing, see `judge`).
                diesel::update(intervals::table.find(id))
                    .filter(intervals::ended_at.is_null())
                    .set(intervals::ended_at.eq(end))
                    .execute(conn)?;
            }
            any_bandwidth = true;
        }
    }
    if any_bandwidth {
        settle_traffic(conn, p.instance_id, events_exchange, correlation_id)?;
    }
    Ok(())
}

/// The interval of `meter` for the instance, created from the snapshot when
/// it does not exist yet (with the correlation id of the event that created
/// it); its id.
#[allow(clippy::too_many_arguments)]
fn open(
    conn: &mut PgConnection,
    p: &InstanceStorageStarted,
    meter: &str,
    price_per_hour: Option<Decimal>,
    unit_price: Decimal,
    disk_gib: Option<i32>,
    ended_at: Option<DateTime<Utc>>,
    correlation_id: Option<&str>,
) -> QueryResult<Uuid> {
    diesel::insert_into(intervals::table)
        .values((
            intervals::id.eq(Uuid::now_v7()),
            intervals::instance_id.eq(p.instance_id),
            intervals::tenant_id.eq(p.tenant_id),
            intervals::host_tenant_id.eq(p.host_tenant_id),
            intervals::meter.eq(meter),
            intervals::run_seq.eq(RUN),
            intervals::started_at.eq(p.started_at),
            intervals::ended_at.eq(ended_at),
            intervals::price_per_hour.eq(price_per_hour),
            intervals::unit_price.eq(unit_price),
            intervals::disk_gib.eq(disk_gib),
            intervals::currency.eq(&p.currency),
            intervals::machine_id.eq(p.machine_id),
            intervals::gpu_model.eq((!p.gpu_model.is_empty()).then_some(&p.gpu_model)),
            intervals::correlation_id.eq(correlation_id),
        ))
        .on_conflict((intervals::instance_id, intervals::meter, intervals::run_seq))
        .do_nothing()
        .execute(conn)?;
    intervals::table
        .filter(intervals::instance_id.eq(p.instance_id))
        .filter(intervals::meter.eq(meter))
        .filter(intervals::run_seq.eq(RUN))
        .select(intervals::id)
        .for_update()
        .first(conn)
}

/// Where and since when an instance runs, as its intervals say: the machine
/// of its storage, bandwidth or GPU intervals, and the earliest start (its
/// counters start at zero then). `None` until an event of the instance has
/// reached metering.
fn placement(conn: &mut PgConnection, instance_id: InstanceId) -> QueryResult<Option<Placement>> {
    type Row = (
        String,
        Option<Uuid>,
        Option<DateTime<Utc>>,
        Option<DateTime<Utc>>,
    );
    let rows: Vec<Row> = intervals::table
        .filter(intervals::instance_id.eq(instance_id))
        .filter(intervals::machine_id.is_not_null())
        .select((
            intervals::meter,
            intervals::machine_id,
            intervals::started_at,
            intervals::ended_at,
        ))
        .load(conn)?;
    let machines: Vec<Uuid> = rows.iter().filter_map(|(_, m, _, _)| *m).collect();
    let Some(start) = rows.iter().filter_map(|(_, _, t, _)| *t).min() else {
        return Ok(None);
    };
    // Storage and bandwidth intervals last the instance's whole life; once
    // one has ended, the instance is destroyed.
    let end = rows
        .iter()
        .filter(|(meter, ..)| meter.as_str() == STORAGE || is_bandwidth(meter))
        .filter_map(|(_, _, _, end)| *end)
        .max();
    Ok(Some(Placement {
        machines,
        start,
        end,
    }))
}

/// See [`placement`].
struct Placement {
    machines: Vec<Uuid>,
    start: DateTime<Utc>,
    end: Option<DateTime<Utc>>,
}

fn refuse(p: &InstanceTraffic, refusal: Refusal) {
    crate::metrics::traffic_sample_refused(refusal.reason());
    tracing::warn!(
        machine.id = %p.machine_id,
        instance.id = %p.instance_id,
        boot_id = %p.boot_id,
        seq = p.seq,
        tx_bytes = p.tx_bytes,
        rx_bytes = p.rx_bytes,
        reason = refusal.reason(),
        "traffic sample refused: {refusal}"
    );
}

/// One traffic sample: kept once per (instance, boot, seq), then the
/// instance's bandwidth is brought up to date. A sample is refused (not
/// kept, logged, counted) when the instance does not run on the reporting
/// machine, or when its counters grew faster than the machine's declared
/// bandwidth allows ([`judge`]). A sample for an instance metering has not
/// heard of yet waits unscreened (with the bandwidth the catalog attached);
/// the instance's first event then screens it ([`screen_waiting`]), and
/// only screened samples count.
pub fn apply_traffic(
    conn: &mut PgConnection,
    envelope: &Envelope,
    events_exchange: &str,
) -> Result<(), HandlerError> {
    let p: InstanceTraffic = envelope.payload().map_err(bad(&envelope.kind))?;
    if p.tx_bytes < 0 || p.rx_bytes < 0 || p.seq < 0 {
        return Err(HandlerError::Permanent(
            "traffic counters and seq must not be negative".into(),
        ));
    }
    // One instance's samples are judged one at a time: each is checked
    // against every sample kept before it, so two sent at once cannot each
    // pass alone and add up past the link (held to the end of the
    // transaction that keeps the sample).
    lock_traffic(conn, p.instance_id)?;
    let placed = placement(conn, p.instance_id)?;
    let screened = placed.is_some();
    if let Some(placed) = placed {
        if !placed.machines.contains(&p.machine_id.into_uuid()) {
            refuse(&p, Refusal::ForeignMachine);
            return Ok(());
        }
        let limits = Limits {
            start: placed.start,
            end: placed.end,
            up_mbps: p.upload_mbps,
            down_mbps: p.download_mbps,
        };
        // Those that waited for the placement come first, as they arrived.
        screen_waiting(conn, p.instance_id)?;
        let existing = load_samples(conn, p.instance_id)?;
        let new = Sample {
            boot_id: p.boot_id,
            seq: p.seq,
            sent_at: p.sent_at,
            tx: p.tx_bytes,
            rx: p.rx_bytes,
        };
        if let Err(refusal) = judge(&existing, new, contracts::time::now(), &limits) {
            refuse(&p, refusal);
            return Ok(());
        }
    }
    diesel::insert_into(traffic_samples::table)
        .values((
            traffic_samples::instance_id.eq(p.instance_id),
            traffic_samples::boot_id.eq(p.boot_id),
            traffic_samples::seq.eq(p.seq),
            traffic_samples::machine_id.eq(p.machine_id),
            traffic_samples::sent_at.eq(p.sent_at),
            traffic_samples::tx_bytes.eq(p.tx_bytes),
            traffic_samples::rx_bytes.eq(p.rx_bytes),
            traffic_samples::screened.eq(screened),
            traffic_samples::upload_mbps.eq(p.upload_mbps),
            traffic_samples::download_mbps.eq(p.download_mbps),
        ))
        .on_conflict_do_nothing()
        .execute(conn)?;
    settle_traffic(
        conn,
        p.instance_id,
        events_exchange,
        envelope.correlation_id.clone(),
    )?;
    Ok(())
}

/// Announces the difference between the bytes the instance's samples add
/// up to and what was announced. Locks the instance's bandwidth intervals,
/// so two samples of one instance are settled one after the other; without
/// them (the start has not arrived, or bandwidth is free) samples only wait.
fn settle_traffic(
    conn: &mut PgConnection,
    instance_id: InstanceId,
    events_exchange: &str,
    correlation_id: Option<String>,
) -> QueryResult<()> {
    // Held already when called from `apply_traffic` or `apply_storage`
    // (advisory locks nest within a transaction).
    lock_traffic(conn, instance_id)?;
    let rows: Vec<IntervalRow> = intervals::table
        .filter(intervals::instance_id.eq(instance_id))
        .filter(intervals::meter.eq_any([BANDWIDTH_UP, BANDWIDTH_DOWN]))
        .filter(intervals::run_seq.eq(RUN))
        .order(intervals::meter)
        .for_update()
        .select(IntervalRow::as_select())
        .load(conn)?;
    if rows.is_empty() {
        return Ok(());
    }
    // Samples that arrived before metering knew the instance's machine
    // waited unchecked: those of another machine go now, before counting.
    let machines: Vec<Uuid> = rows.iter().filter_map(|r| r.machine_id).collect();
    if !machines.is_empty() {
        let foreign: Vec<(Uuid, i64, Uuid)> = diesel::delete(
            traffic_samples::table
                .filter(traffic_samples::instance_id.eq(instance_id))
                .filter(traffic_samples::machine_id.ne_all(machines.clone())),
        )
        .returning((
            traffic_samples::boot_id,
            traffic_samples::seq,
            traffic_samples::machine_id,
        ))
        .get_results(conn)?;
        for (boot_id, seq, machine_id) in foreign {
            crate::metrics::traffic_sample_refused(Refusal::ForeignMachine.reason());
            tracing::warn!(
                machine.id = %machine_id,
                instance.id = %instance_id,
                %boot_id,
                seq,
                reason = Refusal::ForeignMachine.reason(),
                "traffic sample refused: {}",
                Refusal::ForeignMachine
            );
        }
    }
    screen_waiting(conn, instance_id)?;
    let samples = load_samples(conn, instance_id)?;
    let Some(newest) = samples.iter().map(|s| s.sent_at).max() else {
        return Ok(());
    };
    let total = totals(&samples);
    for row in rows {
        let bytes = if row.meter == BANDWIDTH_UP {
            total.tx
        } else {
            total.rx
        };
        if bytes == row.settled_seconds {
            continue;
        }
        diesel::update(intervals::table.find(row.id))
            .set(intervals::settled_seconds.eq(bytes))
            .execute(conn)?;
        // Dated no earlier than the interval's start, which the segment
        // belongs to.
        let seen = row.started_at.map_or(newest, |t0| newest.max(t0));
        announce(
            conn,
            &row,
            row.settled_seconds,
            bytes,
            Some(seen),
            events_exchange,
            correlation_id.clone(),
        )?;
        tracing::info!(instance.id = %instance_id, meter = %row.meter, bytes, "bandwidth recorded");
    }
    Ok(())
}

/// Serialises the judging of one instance's samples (and the events that
/// change what they are judged against) until the transaction ends.
fn lock_traffic(conn: &mut PgConnection, instance_id: InstanceId) -> QueryResult<()> {
    diesel::sql_query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind::<diesel::sql_types::Text, _>(format!("metering.traffic:{instance_id}"))
        .execute(conn)
        .map(|_| ())
}

/// Judges the samples that waited for the instance's placement, in the
/// order they arrived, each against the screened ones and dated no later
/// than its own arrival, exactly as [`apply_traffic`] judges a sample that
/// arrives after the placement: a waiting sample that does not fit the link
/// is refused (deleted, logged, counted), the others count from now on.
/// Nothing to do until metering knows where the instance runs.
fn screen_waiting(conn: &mut PgConnection, instance_id: InstanceId) -> QueryResult<()> {
    type Waiting = (
        Uuid,
        i64,
        Uuid,
        DateTime<Utc>,
        i64,
        i64,
        DateTime<Utc>,
        Option<i32>,
        Option<i32>,
    );
    let waiting: Vec<Waiting> = traffic_samples::table
        .filter(traffic_samples::instance_id.eq(instance_id))
        .filter(traffic_samples::screened.eq(false))
        .order((
            traffic_samples::received_at,
            traffic_samples::boot_id,
            traffic_samples::seq,
        ))
        .select((
            traffic_samples::boot_id,
            traffic_samples::seq,
            traffic_samples::machine_id,
            traffic_samples::sent_at,
            traffic_samples::tx_bytes,
            traffic_samples::rx_bytes,
            traffic_samples::received_at,
            traffic_samples::upload_mbps,
            traffic_samples::download_mbps,
        ))
        .load(conn)?;
    if waiting.is_empty() {
        return Ok(());
    }
    let Some(placed) = placement(conn, instance_id)? else {
        return Ok(());
    };
    let mut kept = load_samples(conn, instance_id)?;
    for (boot_id, seq, machine_id, sent_at, tx, rx, received_at, up_mbps, down_mbps) in waiting {
        let sample = Sample {
            boot_id,
            seq,
            sent_at,
            tx,
            rx,
        };
        let limits = Limits {
            start: placed.start,
            end: placed.end,
            up_mbps,
            down_mbps,
        };
        let key = traffic_samples::table.find((instance_id, boot_id, seq));
        let verdict = if placed.machines.contains(&machine_id) {
            judge(&kept, sample, received_at, &limits)
        } else {
            Err(Refusal::ForeignMachine)
        };
        match verdict {
            Ok(()) => {
                diesel::update(key)
                    .set(traffic_samples::screened.eq(true))
                    .execute(conn)?;
                kept.push(sample);
            }
            Err(refusal) => {
                diesel::delete(key).execute(conn)?;
                let waited = InstanceTraffic {
                    instance_id,
                    machine_id: MachineId(machine_id),
                    boot_id,
                    seq,
                    sent_at,
                    tx_bytes: tx,
                    rx_bytes: rx,
                    upload_mbps: up_mbps,
                    download_mbps: down_mbps,
                };
                refuse(&waited, refusal);
            }
        }
    }
    Ok(())
}

/// Every screened sample of the instance (those that count).
fn load_samples(conn: &mut PgConnection, instance_id: InstanceId) -> QueryResult<Vec<Sample>> {
    Ok(traffic_samples::table
        .filter(traffic_samples::instance_id.eq(instance_id))
        .filter(traffic_samples::screened.eq(true))
        .select((
            traffic_samples::boot_id,
            traffic_samples::seq,
            traffic_samples::sent_at,
            traffic_samples::tx_bytes,
            traffic_samples::rx_bytes,
        ))
        .load::<(Uuid, i64, DateTime<Utc>, i64, i64)>(conn)?
        .into_iter()
        .map(|(boot_id, seq, sent_at, tx, rx)| Sample {
            boot_id,
            seq,
            sent_at,
            tx,
            rx,
        })
        .collect())
}

/// Brings up to date the bandwidth of every instance that received samples
/// since `since`: a sample that committed while the instance's start was
/// being applied (and so found no interval to settle) is counted here.
pub async fn settle_recent_traffic(
    db: &Db,
    since: DateTime<Utc>,
    events_exchange: &str,
) -> Result<usize, Error> {
    let instances: Vec<Uuid> = db
        .run(move |conn| -> Result<Vec<Uuid>, Error> {
            Ok(traffic_samples::table
                .filter(traffic_samples::received_at.ge(since))
                .select(traffic_samples::instance_id)
                .distinct()
                .limit(10_000)
                .load(conn)?)
        })
        .await?;
    let n = instances.len();
    for instance_id in instances {
        let exchange = events_exchange.to_owned();
        db.tx(move |conn| -> Result<(), Error> {
            // No message behind it: each segment goes out under its interval's id.
            settle_traffic(conn, InstanceId(instance_id), &exchange, None)?;
            Ok(())
        })
        .await?;
    }
    Ok(n)
}

/// One sample of an instance's cumulative counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub boot_id: Uuid,
    pub seq: i64,
    pub sent_at: DateTime<Utc>,
    pub tx: i64,
    pub rx: i64,
}

/// Bytes sent and received.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub tx: i64,
    pub rx: i64,
}

/// The published slack of the bandwidth bound (docs/metering.md): counters
/// may grow by at most the declared rate × elapsed time × 11/10 …
pub const SLACK_PERCENT: i128 = 110;
/// … plus this many bytes (64 MB), which absorbs clock skew between the
/// agent and the platform and the jitter of when counters are read.
pub const SLACK_BYTES: i128 = 64_000_000;

/// What bounds an instance's counters: when they started (at zero), and the
/// reporting machine's declared bandwidth (no bound without it: samples
/// from before the bound was announced).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub start: DateTime<Utc>,
    /// When the instance was destroyed: no time after it adds to what its
    /// counters may have moved, and a sample sent well after it is refused.
    pub end: Option<DateTime<Utc>>,
    pub up_mbps: Option<i32>,
    pub down_mbps: Option<i32>,
}

/// Why a sample was refused; `reason()` is the metric's label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the instance does not run on the reporting machine")]
    ForeignMachine,
    #[error("the counters grew faster than the machine's declared bandwidth")]
    OverBandwidth,
    #[error("the sample is dated before the sample it follows")]
    OutOfOrder,
    #[error("the instance had been destroyed when the sample was sent")]
    AfterEnd,
}

/// How long after an instance's destruction its last counters may still be
/// sent (a heartbeat in flight when the instance went away).
pub const AFTER_END_GRACE_SECONDS: i64 = 60;

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::ForeignMachine => "foreign_machine",
            Refusal::OverBandwidth => "over_bandwidth",
            Refusal::OutOfOrder => "out_of_order",
            Refusal::AfterEnd => "after_end",
        }
    }
}

/// The most bytes a link of `mbps` Mbit/s moves in `micros` µs, with slack.
fn allowance(mbps: i32, micros: i64) -> i128 {
    let bytes_per_second = i128::from(mbps.max(0)) * 125_000;
    bytes_per_second * i128::from(micros.max(0)) * SLACK_PERCENT / 100 / 1_000_000 + SLACK_BYTES
}

/// Whether `new` may join the instance's `kept` samples. Samples are put in
/// the order [`totals`] counts them in, each dated by its `sent_at`, no
/// earlier than the start and no later than `now` (an agent's clock cannot
/// buy it time). In that order dates must not go back, and what the
/// counters moved must fit the declared bandwidth over the elapsed time,
/// both from the sample before to the new one, from the new one to the one
/// after (a late sample changes what its successor counts), and from the
/// start to every sample from the new one on (so many small steps cannot
/// add up to more than the link carries). A repeat of a kept sample is
/// accepted (it changes nothing).
pub fn judge(
    kept: &[Sample],
    new: Sample,
    now: DateTime<Utc>,
    limits: &Limits,
) -> Result<(), Refusal> {
    if kept
        .iter()
        .any(|s| s.boot_id == new.boot_id && s.seq == new.seq)
    {
        return Ok(());
    }
    if let Some(end) = limits.end
        && new.sent_at.min(now) > end + chrono::Duration::seconds(AFTER_END_GRACE_SECONDS)
    {
        return Err(Refusal::AfterEnd);
    }
    let mut all: Vec<Sample> = kept.to_vec();
    all.push(new);
    let mut boot_start: std::collections::HashMap<Uuid, DateTime<Utc>> =
        std::collections::HashMap::new();
    for s in &all {
        boot_start
            .entry(s.boot_id)
            .and_modify(|t| *t = (*t).min(s.sent_at))
            .or_insert(s.sent_at);
    }
    all.sort_by_key(|s| (boot_start.get(&s.boot_id).copied(), s.boot_id, s.seq));
    all.dedup_by_key(|s| (s.boot_id, s.seq));
    // No later than now (an agent's clock cannot buy it time) nor than the
    // instance's end (a destroyed instance moves no bytes).
    let until = limits.end.map_or(now, |end| end.min(now));
    let at = |s: &Sample| s.sent_at.min(until).max(limits.start);
    let micros = |from: DateTime<Utc>, to: DateTime<Utc>| (to - from).num_microseconds();
    let fits = |from: DateTime<Utc>, to: DateTime<Utc>, tx: i64, rx: i64| {
        // Beyond i64 µs (~292 000 years) the bound is moot.
        let Some(us) = micros(from, to) else {
            return true;
        };
        limits
            .up_mbps
            .is_none_or(|up| i128::from(tx) <= allowance(up, us))
            && limits
                .down_mbps
                .is_none_or(|down| i128::from(rx) <= allowance(down, us))
    };
    let Some(i) = all
        .iter()
        .position(|s| s.boot_id == new.boot_id && s.seq == new.seq)
    else {
        return Ok(());
    };
    let origin = Sample {
        boot_id: Uuid::nil(),
        seq: 0,
        sent_at: limits.start,
        tx: 0,
        rx: 0,
    };
    let prev = if i == 0 { origin } else { all[i - 1] };
    let mut pairs = vec![(prev, new)];
    if let Some(next) = all.get(i + 1) {
        pairs.push((new, *next));
    }
    for (a, b) in pairs {
        if at(&b) < at(&a) {
            return Err(Refusal::OutOfOrder);
        }
        if !fits(
            at(&a),
            at(&b),
            counter_delta(a.tx, b.tx),
            counter_delta(a.rx, b.rx),
        ) {
            return Err(Refusal::OverBandwidth);
        }
    }
    let (mut total, mut last) = (Totals::default(), Totals::default());
    for (j, s) in all.iter().enumerate() {
        total.tx = total.tx.saturating_add(counter_delta(last.tx, s.tx));
        total.rx = total.rx.saturating_add(counter_delta(last.rx, s.rx));
        last = Totals { tx: s.tx, rx: s.rx };
        if j >= i && !fits(limits.start, at(s), total.tx, total.rx) {
            return Err(Refusal::OverBandwidth);
        }
    }
    Ok(())
}

/// What a counter moved from `prev` to `cur`: the difference, or, when it
/// went down, `cur` (it was reset and counted from zero since).
pub fn counter_delta(prev: i64, cur: i64) -> i64 {
    if cur >= prev { cur - prev } else { cur }
}

/// The bytes a set of samples adds up to, whatever order they came in and
/// however often each came. Samples are put in the order they were taken:
/// boots by their earliest sample (then by id), a boot's samples by `seq`;
/// one (boot, seq) counts once. The counters start at zero when the
/// instance is created.
pub fn totals(samples: &[Sample]) -> Totals {
    let mut boot_start: std::collections::HashMap<Uuid, DateTime<Utc>> =
        std::collections::HashMap::new();
    for s in samples {
        boot_start
            .entry(s.boot_id)
            .and_modify(|t| *t = (*t).min(s.sent_at))
            .or_insert(s.sent_at);
    }
    let mut ordered: Vec<&Sample> = samples.iter().collect();
    ordered.sort_by_key(|s| (boot_start.get(&s.boot_id).copied(), s.boot_id, s.seq));
    ordered.dedup_by_key(|s| (s.boot_id, s.seq));
    let (mut total, mut prev) = (Totals::default(), Totals::default());
    for s in ordered {
        total.tx = total.tx.saturating_add(counter_delta(prev.tx, s.tx));
        total.rx = total.rx.saturating_add(counter_delta(prev.rx, s.rx));
        prev = Totals { tx: s.tx, rx: s.rx };
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_800_000_000 + s, 0).unwrap_or_default()
    }

    fn sample(boot: u128, seq: i64, secs: i64, tx: i64, rx: i64) -> Sample {
        Sample {
            boot_id: Uuid::from_u128(boot),
            seq,
            sent_at: at(secs),
            tx,
            rx,
        }
    }

    /// 100 Mbit/s up and down: 12.5 MB/s, 13.75 MB/s with the slack.
    fn limits() -> Limits {
        Limits {
            start: at(0),
            end: None,
            up_mbps: Some(100),
            down_mbps: Some(100),
        }
    }

    #[test]
    fn counters_may_grow_only_as_fast_as_the_declared_bandwidth() {
        let now = at(100);
        let l = limits();
        let per_second = 12_500_000i64 * 11 / 10;
        let slack = SLACK_BYTES as i64;
        // 10 s in: 10 s of the link plus the constant, not a byte more.
        let ok = sample(1, 1, 10, 10 * per_second + slack, 0);
        assert_eq!(judge(&[], ok, now, &l), Ok(()));
        let over = sample(1, 1, 10, 10 * per_second + slack + 1, 0);
        assert_eq!(judge(&[], over, now, &l), Err(Refusal::OverBandwidth));
        // Download is bounded by its own rate.
        let down = sample(1, 1, 10, 0, 10 * per_second + slack + 1);
        assert_eq!(judge(&[], down, now, &l), Err(Refusal::OverBandwidth));
        // The repro's terabyte, a moment after the start.
        let tb = sample(1, 1, 2, 1_000_000_000_000, 1_000_000_000_000);
        assert_eq!(judge(&[], tb, now, &l), Err(Refusal::OverBandwidth));
        // A date in the future buys no time: it counts as now.
        let future = sample(1, 1, 10_000, 200 * per_second, 0);
        assert_eq!(judge(&[], future, now, &l), Err(Refusal::OverBandwidth));
        // Without a declared bandwidth (an old sample), only the machine counts.
        let unbounded = Limits {
            up_mbps: None,
            down_mbps: None,
            ..l
        };
        assert_eq!(judge(&[], tb, now, &unbounded), Ok(()));
    }

    #[test]
    fn a_step_is_bounded_by_its_own_elapsed_time_and_the_whole_by_the_lifetime() {
        let now = at(100);
        let l = limits();
        let per_second = 12_500_000i64 * 11 / 10;
        let kept = [sample(1, 1, 10, 1000, 1000)];
        // One second later, ten seconds' worth: refused (from the sample before).
        let burst = sample(1, 2, 11, 1000 + 10 * per_second, 1000);
        assert_eq!(judge(&kept, burst, now, &l), Err(Refusal::OverBandwidth));
        // A late sample between two kept ones that would make its successor
        // look like a reset (and count it whole) is judged against it too.
        let kept = [sample(1, 1, 10, 1000, 0), sample(1, 3, 12, 2000, 0)];
        let late = sample(1, 2, 11, 1500, 0);
        assert_eq!(judge(&kept, late, now, &l), Ok(()));
        let dated_back = sample(1, 2, 5, 1500, 0);
        assert_eq!(judge(&kept, dated_back, now, &l), Err(Refusal::OutOfOrder));
        // Many steps each under the slack cannot add up past the lifetime's
        // bound: the total from the start is checked too.
        let mut kept = Vec::new();
        let step = SLACK_BYTES as i64 - 1;
        let mut refused = false;
        for seq in 1..50 {
            let s = sample(1, seq, 1, seq * step, 0);
            match judge(&kept, s, now, &l) {
                Ok(()) => kept.push(s),
                Err(r) => {
                    assert_eq!(r, Refusal::OverBandwidth);
                    refused = true;
                    break;
                }
            }
        }
        assert!(refused, "small steps added up unbounded");
        // A repeat of a kept sample is no news.
        assert_eq!(judge(&kept, kept[0], now, &l), Ok(()));
    }

    #[test]
    fn a_destroyed_instance_moves_no_more_bytes() {
        // Destroyed 40 s in; the host keeps reporting long after.
        let l = Limits {
            end: Some(at(40)),
            ..limits()
        };
        let per_second = 12_500_000i64 * 11 / 10;
        let slack = SLACK_BYTES as i64;
        let now = at(40 + 600);
        let kept = [sample(1, 1, 40, 40 * per_second, 0)];
        // Ten minutes on, a step that ten minutes of the link would allow is
        // measured against the instance's life, not the time since.
        let later = sample(1, 2, 40 + 50, 40 * per_second + 2 * slack, 0);
        assert_eq!(judge(&kept, later, now, &l), Err(Refusal::OverBandwidth));
        // Its last counters, in flight at the end, still count …
        let last = sample(1, 2, 41, 40 * per_second + slack / 2, 0);
        assert_eq!(judge(&kept, last, now, &l), Ok(()));
        // … but a sample sent past the grace is refused whatever it says.
        let stale = sample(1, 2, 40 + AFTER_END_GRACE_SECONDS + 1, 40 * per_second, 0);
        assert_eq!(judge(&kept, stale, now, &l), Err(Refusal::AfterEnd));
        // Counters reset under a new boot cannot restart the allowance.
        let reboot = sample(2, 1, 45, 40 * per_second - 1, 0);
        assert_eq!(judge(&kept, reboot, now, &l), Err(Refusal::OverBandwidth));
    }

    #[test]
    fn a_reset_counts_from_zero() {
        assert_eq!(counter_delta(100, 150), 50);
        assert_eq!(counter_delta(100, 30), 30);
        assert_eq!(counter_delta(0, 0), 0);
        let boot = Uuid::from_u128(1);
        let s = |seq: i64, tx: i64| Sample {
            boot_id: boot,
            seq,
            sent_at: at(seq),
            tx,
            rx: 0,
        };
        // 100, then a container restart at 40 going on to 70: 170 bytes.
        let samples = [s(1, 60), s(2, 100), s(3, 40), s(4, 70)];
        assert_eq!(totals(&samples).tx, 170);
        let mut shuffled = vec![samples[3], samples[1], samples[0], samples[3], samples[2]];
        assert_eq!(totals(&shuffled).tx, 170);
        shuffled.reverse();
        assert_eq!(totals(&shuffled).tx, 170);
    }

    /// Lifetimes of a counter (each from zero), sampled; each lifetime after
    /// the first begins in a new agent boot or the same one (a container
    /// restart), and its first sample is below the last sample of the one
    /// before (otherwise a reset cannot be told from traffic).
    fn lifetimes() -> impl Strategy<Value = Vec<(bool, Vec<(i64, i64)>)>> {
        proptest::collection::vec(
            (
                any::<bool>(),
                proptest::collection::vec((0i64..1_000_000, 0i64..1_000_000), 1..8),
            ),
            1..6,
        )
    }

    proptest! {
        /// Samples duplicated and shuffled add up to what they add up to in
        /// order, which is the sum of each counter lifetime's last sample.
        #[test]
        fn duplicates_and_order_do_not_change_the_total(
            lives in lifetimes(),
            dupes in proptest::collection::vec(any::<proptest::sample::Index>(), 0..20),
            seed in any::<u64>(),
        ) {
            let mut samples = Vec::new();
            let (mut boot, mut seq, mut t) = (0u128, 0i64, 0i64);
            let (mut last_tx, mut last_rx) = (0i64, 0i64);
            let mut expected = Totals::default();
            for (i, (new_boot, increments)) in lives.iter().enumerate() {
                if i > 0 && *new_boot {
                    boot += 1;
                    seq = 0;
                }
                let (mut tx, mut rx) = (0i64, 0i64);
                for (j, (dtx, drx)) in increments.iter().enumerate() {
                    tx += dtx;
                    rx += drx;
                    if i > 0 && j == 0 {
                        // The first sample after a reset is below the last.
                        if last_tx > 0 { tx %= last_tx; }
                        if last_rx > 0 { rx %= last_rx; }
                    }
                    seq += 1;
                    t += 1;
                    samples.push(Sample { boot_id: Uuid::from_u128(boot), seq, sent_at: at(t), tx, rx });
                }
                expected.tx += tx;
                expected.rx += rx;
                last_tx = tx;
                last_rx = rx;
            }
            prop_assert_eq!(totals(&samples), expected);
            let mut mixed = samples.clone();
            for d in &dupes {
                mixed.push(*d.get(&samples));
            }
            // A deterministic shuffle from the seed.
            let mut state = seed | 1;
            for i in (1..mixed.len()).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                mixed.swap(i, (state % (i as u64 + 1)) as usize);
            }
            prop_assert_eq!(totals(&mixed), expected);
        }
    }
}
