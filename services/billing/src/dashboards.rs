//! Billing dashboards (docs/dashboards.md): a renter's balance history with
//! its running balance, a renter's usage and spend as a time series, and a
//! host's earnings by machine and day. Everything is read from the ledger
//! (entries are the money) and `usage_details` (what a usage posting was
//! for), aggregated in Postgres.
//!
//! A usage posting belongs, whole, to the bucket its segment *started* in.
//! Segments are short (one settlement interval, 10 s by default) and an
//! amount is never split: a split would have to be re-rated and rounded, and
//! then the buckets would no longer add up to the ledger. With whole
//! postings, the points of a series add up exactly (to the 9th decimal) to
//! the renter legs of the postings whose segment started in `[from, to)`.

use chrono::{DateTime, Duration, DurationRound, Utc};
use contracts::api::{
    self, BalanceHistoryEntry, BalanceHistoryPage, MachineDayEarnings, MachineEarnings,
    SeriesBucket, SeriesGroupBy, UsagePoint, UsageSeries,
};
use contracts::ids::{InstanceId, MachineId, TenantId};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Numeric, Text, Timestamptz};
use platform::Db;
use rust_decimal::Decimal;
use uuid::Uuid;

use crate::ledger::{self, AccountKind};
use crate::{Error, Settings};

/// Buckets a series may span at most: 2000 hours is about 83 days, 2000
/// days about five and a half years.
pub const MAX_BUCKETS: i64 = 2000;
/// Days an earnings report may span at most.
pub const MAX_EARNINGS_DAYS: i64 = 2000;
pub const DEFAULT_PAGE: i64 = 50;
pub const MAX_PAGE: i64 = 200;

fn bucket_width(bucket: SeriesBucket) -> Duration {
    match bucket {
        SeriesBucket::Hour => Duration::hours(1),
        SeriesBucket::Day => Duration::days(1),
    }
}

fn bucket_sql(bucket: SeriesBucket) -> &'static str {
    match bucket {
        SeriesBucket::Hour => "hour",
        SeriesBucket::Day => "day",
    }
}

/// How many buckets of `width` (called `unit` in messages) `[from, to)`
/// touches, counted from the start of the bucket `from` falls in; an error a
/// caller can act on when the range is empty or too long.
pub fn bucket_count(
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    width: Duration,
    unit: &str,
    max: i64,
) -> Result<i64, Error> {
    if to <= from {
        return Err(Error::Validation(format!(
            "to: must be after from ({} is not after {})",
            contracts::time::format(to),
            contracts::time::format(from)
        )));
    }
    let start = from
        .duration_trunc(width)
        .map_err(|e| Error::Validation(format!("from: {e}")))?;
    let span = (to - start).num_microseconds().ok_or_else(|| {
        Error::Validation(format!("to: at most {max} {unit} between from and to"))
    })?;
    let per = width.num_microseconds().unwrap_or(i64::MAX).max(1);
    let count = (span + per - 1) / per;
    if count > max {
        return Err(Error::Validation(format!(
            "to: {count} {unit} between from and to; at most {max} (narrow the range or use a wider bucket)"
        )));
    }
    Ok(count)
}

// ---------------------------------------------------------------- balance history

#[derive(QueryableByName)]
struct HistoryRow {
    #[diesel(sql_type = BigInt)]
    entry_id: i64,
    #[diesel(sql_type = Numeric)]
    amount: Decimal,
    #[diesel(sql_type = Text)]
    transaction_id: String,
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = Text)]
    description: String,
    #[diesel(sql_type = Nullable<diesel::sql_types::Uuid>)]
    instance_id: Option<Uuid>,
    #[diesel(sql_type = Timestamptz)]
    posted_at: DateTime<Utc>,
}

#[derive(QueryableByName)]
struct Sum {
    #[diesel(sql_type = Numeric)]
    amount: Decimal,
}

/// A page of the renter balance's entries, newest first (entry id order,
/// which is the order the ledger wrote them in), each with the balance right
/// after it. The cursor is the last entry id of the page.
pub async fn balance_history(
    db: &Db,
    settings: &Settings,
    tenant_id: TenantId,
    query: api::BalanceHistoryQuery,
) -> Result<BalanceHistoryPage, Error> {
    let first = query.first.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&first) {
        return Err(Error::Validation(format!(
            "first: must be between 1 and {MAX_PAGE}"
        )));
    }
    let after = match query.after.as_deref().filter(|a| !a.is_empty()) {
        None => None,
        Some(raw) => Some(raw.parse::<i64>().map_err(|_| {
            Error::Validation("after: not a cursor from this list (endCursor)".into())
        })?),
    };
    let currency = settings.currency.clone();
    db.run(move |conn| {
        // One snapshot: the balance and the entries it sums must agree, or a
        // posting committed between two reads would skew every running
        // balance on the page.
        conn.build_transaction()
            .read_only()
            .repeatable_read()
            .run(|conn| {
                let balance =
                    ledger::balance(conn, AccountKind::RenterBalance, tenant_id, &currency)?;
                let rows: Vec<HistoryRow> = diesel::sql_query(
                    "SELECT e.id AS entry_id, e.amount, t.id AS transaction_id, t.kind, \
                            t.description, t.instance_id, t.created_at AS posted_at \
                     FROM billing.accounts a \
                     JOIN billing.entries e ON e.account_id = a.id \
                     JOIN billing.transactions t ON t.id = e.transaction_id \
                     WHERE a.kind = 'renter_balance' AND a.tenant_id = $1 AND a.currency = $2 \
                       AND ($3::bigint IS NULL OR e.id < $3) \
                     ORDER BY e.id DESC \
                     LIMIT $4",
                )
                .bind::<diesel::sql_types::Uuid, _>(tenant_id)
                .bind::<Text, _>(&currency)
                .bind::<Nullable<BigInt>, _>(after)
                .bind::<BigInt, _>(first + 1)
                .load(conn)?;
                // The balance after the newest entry of this page is the
                // balance less everything newer: nothing on the first page,
                // the earlier pages' entries on later ones.
                let newer = match after {
                    None => Decimal::ZERO,
                    Some(cursor) => {
                        let sums: Vec<Sum> = diesel::sql_query(
                            "SELECT coalesce(sum(e.amount), 0) AS amount \
                             FROM billing.accounts a \
                             JOIN billing.entries e ON e.account_id = a.id \
                             WHERE a.kind = 'renter_balance' AND a.tenant_id = $1 \
                               AND a.currency = $2 AND e.id >= $3",
                        )
                        .bind::<diesel::sql_types::Uuid, _>(tenant_id)
                        .bind::<Text, _>(&currency)
                        .bind::<BigInt, _>(cursor)
                        .load(conn)?;
                        sums.first().map(|s| s.amount).unwrap_or_default()
                    }
                };
                let has_next_page = rows.len() as i64 > first;
                let mut running = balance - newer;
                let entries: Vec<BalanceHistoryEntry> = rows
                    .into_iter()
                    .take(usize::try_from(first).unwrap_or(usize::MAX))
                    .map(|r| {
                        let after_entry = running;
                        running -= r.amount;
                        BalanceHistoryEntry {
                            entry_id: r.entry_id,
                            transaction_id: r.transaction_id,
                            kind: r.kind,
                            description: r.description,
                            instance_id: r.instance_id.map(InstanceId),
                            amount: r.amount,
                            balance_after: after_entry,
                            posted_at: r.posted_at,
                        }
                    })
                    .collect();
                Ok::<_, Error>(BalanceHistoryPage {
                    tenant_id,
                    currency: currency.clone(),
                    balance,
                    end_cursor: entries.last().map(|e| e.entry_id.to_string()),
                    has_next_page,
                    entries,
                })
            })
    })
    .await
}

// ---------------------------------------------------------------- usage series

#[derive(QueryableByName)]
struct PointRow {
    #[diesel(sql_type = Timestamptz)]
    bucket_start: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Text>)]
    key: Option<String>,
    #[diesel(sql_type = BigInt)]
    seconds: i64,
    #[diesel(sql_type = Numeric)]
    spend: Decimal,
    #[diesel(sql_type = BigInt)]
    postings: i64,
}

/// The renter's usage postings whose segment started in `[from, to)`, summed
/// per bucket (UTC) and key. Spend is the exact renter legs, as a positive
/// charge; corrections (negative seconds) count in the bucket they start in.
pub async fn usage_series(
    db: &Db,
    settings: &Settings,
    tenant_id: TenantId,
    query: api::UsageSeriesQuery,
) -> Result<UsageSeries, Error> {
    bucket_count(
        query.from,
        query.to,
        bucket_width(query.bucket),
        "buckets",
        MAX_BUCKETS,
    )?;
    // Fixed fragments chosen by enum, never caller text.
    let key = match query.group_by {
        SeriesGroupBy::Instance => "t.instance_id::text",
        SeriesGroupBy::GpuModel => "d.gpu_model",
        SeriesGroupBy::Meter => "d.meter",
    };
    let unit = bucket_sql(query.bucket);
    // Rows since migration 000024 carry their tenant (an index range per
    // tenant); older ones are found through the posting's tenant.
    let sql = format!(
        "SELECT date_trunc('{unit}', u.started_at, 'UTC') AS bucket_start, u.key, \
                sum(u.seconds)::bigint AS seconds, -sum(e.amount) AS spend, \
                count(*) AS postings \
         FROM ( \
             SELECT d.transaction_id, d.started_at, d.seconds, {key} AS key \
             FROM billing.usage_details d \
             JOIN billing.transactions t ON t.id = d.transaction_id \
             WHERE d.tenant_id = $1 AND d.started_at >= $2 AND d.started_at < $3 \
             UNION ALL \
             SELECT d.transaction_id, d.started_at, d.seconds, {key} AS key \
             FROM billing.usage_details d \
             JOIN billing.transactions t ON t.id = d.transaction_id \
             WHERE d.tenant_id IS NULL AND t.tenant_id = $1 \
               AND d.started_at >= $2 AND d.started_at < $3 \
         ) u \
         JOIN billing.entries e ON e.transaction_id = u.transaction_id \
         JOIN billing.accounts a ON a.id = e.account_id \
              AND a.kind = 'renter_balance' AND a.tenant_id = $1 AND a.currency = $4 \
         GROUP BY 1, 2 \
         ORDER BY 1, 2 NULLS LAST"
    );
    let currency = settings.currency.clone();
    let (from, to) = (query.from, query.to);
    let rows: Vec<PointRow> = db
        .run(move |conn| {
            diesel::sql_query(sql)
                .bind::<diesel::sql_types::Uuid, _>(tenant_id)
                .bind::<Timestamptz, _>(from)
                .bind::<Timestamptz, _>(to)
                .bind::<Text, _>(&currency)
                .load(conn)
                .map_err(Error::from)
        })
        .await?;
    let points: Vec<UsagePoint> = rows
        .into_iter()
        .map(|r| UsagePoint {
            bucket_start: r.bucket_start,
            key: r.key,
            seconds: r.seconds,
            spend: r.spend,
            postings: r.postings,
        })
        .collect();
    Ok(UsageSeries {
        tenant_id,
        bucket: query.bucket,
        group_by: query.group_by,
        from,
        to,
        currency: settings.currency.clone(),
        total_seconds: points.iter().map(|p| p.seconds).sum(),
        total_spend: points.iter().map(|p| p.spend).sum(),
        points,
    })
}

// ---------------------------------------------------------------- host earnings

#[derive(QueryableByName)]
struct EarningsRow {
    #[diesel(sql_type = Timestamptz)]
    day: DateTime<Utc>,
    #[diesel(sql_type = Nullable<diesel::sql_types::Uuid>)]
    machine_id: Option<Uuid>,
    #[diesel(sql_type = Nullable<Text>)]
    gpu_model: Option<String>,
    #[diesel(sql_type = BigInt)]
    seconds: i64,
    #[diesel(sql_type = Numeric)]
    net: Decimal,
    #[diesel(sql_type = Numeric)]
    fee: Decimal,
}

#[derive(QueryableByName)]
struct CreditRow {
    #[diesel(sql_type = Timestamptz)]
    day: DateTime<Utc>,
    #[diesel(sql_type = Nullable<diesel::sql_types::Uuid>)]
    machine_id: Option<Uuid>,
    #[diesel(sql_type = Numeric)]
    credits: Decimal,
}

/// A host's earnings per machine and UTC day: the host and fee legs of the
/// usage postings whose segment started in `[from, to)`, and the downtime
/// credits taken from the host's earnings that were posted in `[from, to)`
/// (their machine is the one the instance's usage ran on).
pub async fn machine_earnings(
    db: &Db,
    settings: &Settings,
    host_tenant_id: TenantId,
    query: api::MachineEarningsQuery,
) -> Result<MachineEarnings, Error> {
    bucket_count(
        query.from,
        query.to,
        Duration::days(1),
        "days",
        MAX_EARNINGS_DAYS,
    )?;
    let currency = settings.currency.clone();
    let (from, to) = (query.from, query.to);
    let (usage, credits) = db
        .run(move |conn| {
            conn.build_transaction()
                .read_only()
                .repeatable_read()
                .run(|conn| {
                    // Each posting has one host leg and at most one fee leg,
                    // so seconds counted on the host leg count each once.
                    let usage: Vec<EarningsRow> = diesel::sql_query(
                        "SELECT date_trunc('day', d.started_at, 'UTC') AS day, d.machine_id, \
                                max(d.gpu_model) AS gpu_model, \
                                coalesce(sum(d.seconds) FILTER (WHERE a.kind = 'host_earnings'), 0)::bigint AS seconds, \
                                coalesce(sum(e.amount) FILTER (WHERE a.kind = 'host_earnings'), 0) AS net, \
                                coalesce(sum(e.amount) FILTER (WHERE a.kind = 'platform_fee'), 0) AS fee \
                         FROM billing.usage_details d \
                         JOIN billing.entries e ON e.transaction_id = d.transaction_id \
                         JOIN billing.accounts a ON a.id = e.account_id AND a.currency = $4 \
                              AND ((a.kind = 'host_earnings' AND a.tenant_id = $1) \
                                   OR a.kind = 'platform_fee') \
                         WHERE d.host_tenant_id = $1 AND d.started_at >= $2 AND d.started_at < $3 \
                         GROUP BY 1, 2 \
                         ORDER BY 1, 2 NULLS LAST",
                    )
                    .bind::<diesel::sql_types::Uuid, _>(host_tenant_id)
                    .bind::<Timestamptz, _>(from)
                    .bind::<Timestamptz, _>(to)
                    .bind::<Text, _>(&currency)
                    .load(conn)?;
                    let credits: Vec<CreditRow> = diesel::sql_query(
                        "SELECT date_trunc('day', t.created_at, 'UTC') AS day, \
                                (SELECT d.machine_id FROM billing.transactions u \
                                 JOIN billing.usage_details d ON d.transaction_id = u.id \
                                 WHERE u.kind = 'usage' AND u.instance_id = t.instance_id \
                                   AND d.machine_id IS NOT NULL \
                                 LIMIT 1) AS machine_id, \
                                -sum(e.amount) AS credits \
                         FROM billing.transactions t \
                         JOIN billing.entries e ON e.transaction_id = t.id \
                         JOIN billing.accounts a ON a.id = e.account_id \
                              AND a.kind = 'host_earnings' AND a.tenant_id = $1 AND a.currency = $4 \
                         WHERE t.kind = 'downtime_credit' AND t.created_at >= $2 AND t.created_at < $3 \
                         GROUP BY 1, 2",
                    )
                    .bind::<diesel::sql_types::Uuid, _>(host_tenant_id)
                    .bind::<Timestamptz, _>(from)
                    .bind::<Timestamptz, _>(to)
                    .bind::<Text, _>(&currency)
                    .load(conn)?;
                    Ok::<_, Error>((usage, credits))
                })
        })
        .await?;
    let mut days: Vec<MachineDayEarnings> = usage
        .into_iter()
        .map(|r| MachineDayEarnings {
            day: r.day,
            machine_id: r.machine_id.map(MachineId),
            gpu_model: r.gpu_model,
            seconds: r.seconds,
            gross: r.net + r.fee,
            fee: r.fee,
            net: r.net,
            downtime_credits: Decimal::ZERO,
            total: r.net,
        })
        .collect();
    for c in credits {
        match days
            .iter_mut()
            .find(|d| d.day == c.day && d.machine_id == c.machine_id.map(MachineId))
        {
            Some(d) => d.downtime_credits += c.credits,
            None => days.push(MachineDayEarnings {
                day: c.day,
                machine_id: c.machine_id.map(MachineId),
                gpu_model: None,
                seconds: 0,
                gross: Decimal::ZERO,
                fee: Decimal::ZERO,
                net: Decimal::ZERO,
                downtime_credits: c.credits,
                total: Decimal::ZERO,
            }),
        }
    }
    for d in &mut days {
        d.total = d.net - d.downtime_credits;
    }
    // Machines without a known id (usage from before the dimension) last.
    days.sort_by_key(|d| (d.day, d.machine_id.is_none(), d.machine_id));
    Ok(MachineEarnings {
        host_tenant_id,
        from,
        to,
        currency: settings.currency.clone(),
        total_gross: days.iter().map(|d| d.gross).sum(),
        total_fee: days.iter().map(|d| d.fee).sum(),
        total_net: days.iter().map(|d| d.net).sum(),
        total_downtime_credits: days.iter().map(|d| d.downtime_credits).sum(),
        total: days.iter().map(|d| d.total).sum(),
        days,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn buckets_are_counted_from_the_start_of_the_first_one() {
        let hour = Duration::hours(1);
        let count = |a: &str, b: &str| bucket_count(at(a), at(b), hour, "hours", MAX_BUCKETS).ok();
        assert_eq!(
            count("2026-12-01T10:00:00Z", "2026-12-01T11:00:00Z"),
            Some(1)
        );
        assert_eq!(
            count("2026-12-01T10:30:00Z", "2026-12-01T11:00:00Z"),
            Some(1)
        );
        assert_eq!(
            count("2026-12-01T10:30:00Z", "2026-12-01T11:00:01Z"),
            Some(2)
        );
        assert_eq!(
            count("2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z"),
            Some(24)
        );
        let day = Duration::days(1);
        assert_eq!(
            bucket_count(
                at("2026-12-01T23:00:00Z"),
                at("2026-12-02T01:00:00Z"),
                day,
                "days",
                10
            )
            .ok(),
            Some(2)
        );
    }

    #[test]
    fn an_empty_or_too_long_range_is_refused() {
        let hour = Duration::hours(1);
        let t = at("2026-12-01T10:00:00Z");
        assert!(matches!(
            bucket_count(t, t, hour, "hours", MAX_BUCKETS),
            Err(Error::Validation(m)) if m.starts_with("to:")
        ));
        assert!(bucket_count(t, t - hour, hour, "hours", MAX_BUCKETS).is_err());
        assert!(bucket_count(t, t + hour * 2000, hour, "hours", MAX_BUCKETS).is_ok());
        assert!(matches!(
            bucket_count(
                t,
                t + hour * 2000 + Duration::seconds(1),
                hour,
                "hours",
                MAX_BUCKETS
            ),
            Err(Error::Validation(m)) if m.contains("at most 2000")
        ));
    }
}
