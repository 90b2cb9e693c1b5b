use chrono::{DateTime, Utc};
use contracts::events::{MeteredUsage, USAGE_RECORDED, UsageRecorded};
use contracts::ids::{InstanceId, MachineId, TenantId};
use contracts::{Envelope, api, money};
use diesel::prelude::*;
use platform::Db;
use platform::consumer::HandlerError;
use rust_decimal::Decimal;
use schema::metering::intervals;
use uuid::Uuid;

use crate::{Error, SCHEMA};

pub use contracts::meters::{BANDWIDTH_DOWN, BANDWIDTH_UP, GPU, STORAGE};
/// The meters measured in seconds between two instants.
pub const TIME_METERS: [&str; 2] = [GPU, STORAGE];
/// What a bandwidth segment's `seconds` count.
pub const BYTE: &str = "byte";

pub fn is_bandwidth(meter: &str) -> bool {
    meter == BANDWIDTH_UP || meter == BANDWIDTH_DOWN
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = intervals)]
pub(crate) struct IntervalRow {
    pub(crate) id: Uuid,
    pub(crate) instance_id: InstanceId,
    pub(crate) tenant_id: TenantId,
    pub(crate) host_tenant_id: Option<Uuid>,
    pub(crate) meter: String,
    pub(crate) started_at: Option<DateTime<Utc>>,
    pub(crate) ended_at: Option<DateTime<Utc>>,
    pub(crate) seconds: Option<i64>,
    pub(crate) price_per_hour: Option<Decimal>,
    pub(crate) currency: Option<String>,
    pub(crate) recorded_at: Option<DateTime<Utc>>,
    pub(crate) settled_seconds: i64,
    pub(crate) machine_id: Option<Uuid>,
    pub(crate) gpu_model: Option<String>,
    pub(crate) disk_gib: Option<i32>,
    pub(crate) unit_price: Option<Decimal>,
    /// The correlation id of the event that opened the interval: what the
    /// segments metering announces on its own (settlement) are sent under.
    pub(crate) correlation_id: Option<String>,
    pub(crate) run_seq: i32,
}

/// Once both instants are known, fixes the billed seconds and announces what
/// settlement has not announced yet, once: `recorded_at` marks it done.
pub(crate) fn close_if_complete(
    conn: &mut PgConnection,
    id: Uuid,
    events_exchange: &str,
    correlation_id: Option<String>,
) -> Result<(), HandlerError> {
    let row: IntervalRow = intervals::table
        .find(id)
        .select(IntervalRow::as_select())
        .for_update()
        .first(conn)?;
    let (Some(t0), Some(t1), None) = (row.started_at, row.ended_at, row.recorded_at) else {
        return Ok(());
    };
    let seconds = money::billed_seconds(t0.timestamp_micros(), t1.timestamp_micros());
    let now = contracts::time::now();
    diesel::update(intervals::table.find(id))
        .set((
            intervals::seconds.eq(seconds),
            intervals::settled_seconds.eq(seconds),
            intervals::recorded_at.eq(now),
        ))
        .execute(conn)?;
    // The rest of the interval, under the id of the event that closed it;
    // or, when a settlement ran ahead of a stop that had already happened,
    // the correction (negative seconds), under the interval's own id like
    // the settlement segments it corrects.
    let correlation_id = if seconds < row.settled_seconds {
        row.correlation_id.clone().or(correlation_id)
    } else {
        correlation_id
    };
    announce(
        conn,
        &row,
        row.settled_seconds,
        seconds,
        None,
        events_exchange,
        correlation_id,
    )?;
    tracing::info!(instance.id = %row.instance_id, seconds, "usage recorded");
    Ok(())
}

/// Announces seconds `[from, to)` of an interval to billing (nothing when
/// they are equal; a correction when `to < from`); bytes for a bandwidth
/// interval, dated `bytes_seen_at`. Needs the start, the host and the rate,
/// which the `running` (or `storage_started`) event brought. Without a
/// `correlation_id` of its own (a settlement tick), the segment goes out
/// under the interval's.
pub(crate) fn announce(
    conn: &mut PgConnection,
    row: &IntervalRow,
    from: i64,
    to: i64,
    bytes_seen_at: Option<DateTime<Utc>>,
    events_exchange: &str,
    correlation_id: Option<String>,
) -> Result<(), diesel::result::Error> {
    if from == to {
        return Ok(());
    }
    let (Some(t0), Some(host), Some(currency)) =
        (row.started_at, row.host_tenant_id, row.currency.clone())
    else {
        return Ok(());
    };
    let at = |s: i64| t0 + chrono::Duration::seconds(s);
    let by_bytes = is_bandwidth(&row.meter);
    // Bytes have no instants of their own: a bandwidth segment is dated by
    // the newest sample that revealed them.
    let (started_at, ended_at) = match bytes_seen_at {
        Some(seen) if by_bytes => (seen, seen),
        _ => (at(from.min(to)), at(from.max(to))),
    };
    let price = match (by_bytes, row.price_per_hour) {
        (true, _) => Decimal::ZERO,
        (false, Some(price)) => price,
        (false, None) => return Ok(()),
    };
    let usage = MeteredUsage {
        usage: UsageRecorded {
            interval_id: row.id,
            instance_id: row.instance_id,
            tenant_id: row.tenant_id,
            host_tenant_id: TenantId(host),
            // The column takes only these names (its CHECK); a row with any
            // other is a broken database, not a message to guess at.
            meter: row
                .meter
                .parse()
                .map_err(|e: contracts::states::UnknownName| {
                    diesel::result::Error::DeserializationError(Box::new(e))
                })?,
            started_at,
            ended_at,
            seconds: to - from,
            price_per_hour: price,
            currency,
            offset_seconds: from,
            machine_id: row.machine_id.map(MachineId),
            gpu_model: row.gpu_model.clone(),
        },
        unit: by_bytes.then(|| BYTE.to_owned()),
        unit_price: if row.meter == GPU {
            None
        } else {
            row.unit_price
        },
        disk_gib: row.disk_gib,
    };
    let envelope = Envelope::new(
        contracts::events::kinds::USAGE_RECORDED,
        contracts::time::now(),
        Some(row.tenant_id),
        correlation_id.or_else(|| row.correlation_id.clone()),
        &usage,
    )
    .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
    platform::outbox::enqueue(conn, SCHEMA, events_exchange, USAGE_RECORDED, &envelope)?;
    Ok(())
}

/// Intervals settled per transaction.
const SETTLE_PAGE: i64 = 500;

/// Settles every open interval up to `now`: each announces the whole seconds
/// it ran since its last settlement, so a running rental is charged as it
/// runs (DESIGN 5: at least every settlement interval), not only when it
/// stops. Safe with several replicas (`SKIP LOCKED`) and against a stop
/// arriving meanwhile (the close locks the same row). Returns how many
/// intervals were settled.
pub async fn settle_open(
    db: &Db,
    now: DateTime<Utc>,
    events_exchange: &str,
) -> Result<usize, Error> {
    let mut settled = 0;
    let mut after = Uuid::nil();
    loop {
        let exchange = events_exchange.to_owned();
        let (n, last, full) = db
            .tx(move |conn| -> Result<(usize, Option<Uuid>, bool), Error> {
                let rows: Vec<IntervalRow> = intervals::table
                    .filter(intervals::recorded_at.is_null())
                    .filter(intervals::ended_at.is_null())
                    .filter(intervals::started_at.is_not_null())
                    // Bandwidth counts bytes, announced as samples arrive.
                    .filter(intervals::meter.eq_any(TIME_METERS))
                    .filter(intervals::id.gt(after))
                    .order(intervals::id)
                    .limit(SETTLE_PAGE)
                    .for_update()
                    .skip_locked()
                    .select(IntervalRow::as_select())
                    .load(conn)?;
                let full = rows.len() as i64 == SETTLE_PAGE;
                let last = rows.last().map(|r| r.id);
                let mut n = 0;
                for row in rows {
                    let Some(t0) = row.started_at else { continue };
                    let due = money::billed_seconds(t0.timestamp_micros(), now.timestamp_micros());
                    if due <= row.settled_seconds {
                        continue;
                    }
                    diesel::update(intervals::table.find(row.id))
                        .set(intervals::settled_seconds.eq(due))
                        .execute(conn)?;
                    // Under the id of the order's `running` event.
                    let cid = row.correlation_id.clone();
                    announce(conn, &row, row.settled_seconds, due, None, &exchange, cid)?;
                    n += 1;
                }
                Ok((n, last, full))
            })
            .await?;
        settled += n;
        match last {
            Some(id) if full => after = id,
            _ => return Ok(settled),
        }
    }
}

/// Instance, run, start and end of an interval.
type RunBounds = (Uuid, i32, Option<DateTime<Utc>>, Option<DateTime<Utc>>);

/// The GPU intervals of `instance_ids` (every run of each), for ordering's
/// reconciler to compare with the runs it recorded.
pub async fn lookup(db: &Db, instance_ids: Vec<Uuid>) -> Result<Vec<api::GpuInterval>, Error> {
    if instance_ids.len() > api::RECONCILE_LOOKUP_MAX {
        return Err(Error::Validation(format!(
            "instance_ids: at most {}",
            api::RECONCILE_LOOKUP_MAX
        )));
    }
    db.run(move |conn| {
        let rows: Vec<RunBounds> = intervals::table
            .filter(intervals::instance_id.eq_any(instance_ids))
            .filter(intervals::meter.eq(GPU))
            .order((intervals::instance_id, intervals::run_seq))
            .select((
                intervals::instance_id,
                intervals::run_seq,
                intervals::started_at,
                intervals::ended_at,
            ))
            .load(conn)?;
        Ok(rows
            .into_iter()
            .map(
                |(instance_id, run_seq, started_at, ended_at)| api::GpuInterval {
                    instance_id: InstanceId(instance_id),
                    run_seq,
                    started_at,
                    ended_at,
                },
            )
            .collect())
    })
    .await
}

/// The sum of the hourly rates of the tenant's open GPU intervals: what its
/// balance burns per hour now.
pub async fn burn_rate(db: &Db, tenant_id: TenantId) -> Result<api::BurnRate, Error> {
    db.run(move |conn| {
        // Storage burns too, while the instance is stopped as well; traffic
        // has no rate (it is billed by the byte as it is reported).
        let rates: Vec<(String, Option<Decimal>)> = intervals::table
            .filter(intervals::tenant_id.eq(tenant_id))
            .filter(intervals::meter.eq_any([GPU, STORAGE]))
            .filter(intervals::started_at.is_not_null())
            .filter(intervals::ended_at.is_null())
            .filter(intervals::recorded_at.is_null())
            .select((intervals::meter, intervals::price_per_hour))
            .load(conn)?;
        Ok(api::BurnRate {
            tenant_id,
            per_hour: rates.iter().filter_map(|(_, rate)| *rate).sum(),
            running_intervals: rates.iter().filter(|(meter, _)| meter == GPU).count() as i64,
        })
    })
    .await
}

pub async fn usage(
    db: &Db,
    tenant_id: TenantId,
    instance_id: Option<Uuid>,
) -> Result<Vec<api::UsageInterval>, Error> {
    db.run(move |conn| {
        let mut query = intervals::table
            .filter(intervals::tenant_id.eq(tenant_id))
            .order(intervals::created_at.desc())
            .limit(1000)
            .select(IntervalRow::as_select())
            .into_boxed();
        if let Some(instance_id) = instance_id {
            query = query.filter(intervals::instance_id.eq(instance_id));
        }
        let rows: Vec<IntervalRow> = query.load(conn)?;
        Ok(rows
            .into_iter()
            .map(|row| api::UsageInterval {
                id: row.id,
                instance_id: row.instance_id,
                meter: row.meter,
                started_at: row.started_at,
                ended_at: row.ended_at,
                seconds: row.seconds,
                price_per_hour: row.price_per_hour.unwrap_or_default(),
                currency: row.currency.unwrap_or_default(),
                run_seq: row.run_seq,
            })
            .collect())
    })
    .await
}
