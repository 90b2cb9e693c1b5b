//! The operators' marketplace reads (docs/dashboards.md, "Operator
//! overview"): what renters were charged for usage and what the platform
//! kept, per bucket over a range, and the renters whose credit is gone or
//! running out. Read from the ledger, aggregated in Postgres, exact.
//!
//! Usage counts, whole, in the bucket its segment started in, as in the
//! renters' usage series and the hosts' earnings: the marketplace's volume
//! over a range is then the sum of every renter's series over it, and its
//! fees the sum of the fee columns of every host's earnings. The fee account
//! also carries credit notes (refunds from the platform's revenue); they have
//! no usage segment and count where they were posted, as `fee_adjustments`,
//! so `fees + fee_adjustments` is everything the fee account received.

use actix_web::web;
use chrono::{DateTime, Duration, Utc};
use contracts::api::SeriesBucket;
use contracts::ids::TenantId;
use contracts::operator::{
    CreditRisk, CreditRisks, MAX_LISTED_TENANTS, MarketVolume, MarketVolumePoint, MarketVolumeQuery,
};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Numeric, Text, Timestamptz};
use platform::Db;
use platform::endpoint::Reply;
use platform::internal::ServiceCaller;
use rust_decimal::Decimal;

use crate::dashboards::{MAX_BUCKETS, bucket_count};
use crate::{Error, Settings};

#[derive(QueryableByName)]
struct VolumeRow {
    #[diesel(sql_type = Timestamptz)]
    bucket_start: DateTime<Utc>,
    #[diesel(sql_type = Numeric)]
    volume: Decimal,
    #[diesel(sql_type = Numeric)]
    host_earnings: Decimal,
    #[diesel(sql_type = Numeric)]
    fees: Decimal,
    #[diesel(sql_type = BigInt)]
    postings: i64,
    #[diesel(sql_type = BigInt)]
    seconds: i64,
}

#[derive(QueryableByName)]
struct AdjustmentRow {
    #[diesel(sql_type = Timestamptz)]
    bucket_start: DateTime<Utc>,
    #[diesel(sql_type = Numeric)]
    amount: Decimal,
}

fn unit(bucket: SeriesBucket) -> (&'static str, Duration) {
    match bucket {
        SeriesBucket::Hour => ("hour", Duration::hours(1)),
        SeriesBucket::Day => ("day", Duration::days(1)),
    }
}

/// Marketplace volume and fees per bucket over `[from, to)`.
pub async fn volume(
    db: &Db,
    settings: &Settings,
    query: MarketVolumeQuery,
) -> Result<MarketVolume, Error> {
    let (unit, width) = unit(query.bucket);
    bucket_count(query.from, query.to, width, "buckets", MAX_BUCKETS)?;
    // `unit` is a fixed fragment chosen by enum, never caller text. Each
    // usage posting has exactly one renter leg, so seconds and postings
    // counted on it count each posting once.
    let usage_sql = format!(
        "SELECT date_trunc('{unit}', d.started_at, 'UTC') AS bucket_start, \
                coalesce(-sum(e.amount) FILTER (WHERE a.kind = 'renter_balance'), 0) AS volume, \
                coalesce(sum(e.amount) FILTER (WHERE a.kind = 'host_earnings'), 0) AS host_earnings, \
                coalesce(sum(e.amount) FILTER (WHERE a.kind = 'platform_fee'), 0) AS fees, \
                count(*) FILTER (WHERE a.kind = 'renter_balance') AS postings, \
                coalesce(sum(d.seconds) FILTER (WHERE a.kind = 'renter_balance'), 0)::bigint AS seconds \
         FROM billing.usage_details d \
         JOIN billing.transactions t ON t.id = d.transaction_id AND t.kind = 'usage' \
         JOIN billing.entries e ON e.transaction_id = d.transaction_id \
         JOIN billing.accounts a ON a.id = e.account_id AND a.currency = $3 \
         WHERE d.started_at >= $1 AND d.started_at < $2 \
         GROUP BY 1 ORDER BY 1"
    );
    let adjustments_sql = format!(
        "SELECT date_trunc('{unit}', t.created_at, 'UTC') AS bucket_start, sum(e.amount) AS amount \
         FROM billing.accounts a \
         JOIN billing.entries e ON e.account_id = a.id \
         JOIN billing.transactions t ON t.id = e.transaction_id \
         WHERE a.kind = 'platform_fee' AND a.tenant_id IS NULL AND a.currency = $3 \
           AND t.kind <> 'usage' AND t.created_at >= $1 AND t.created_at < $2 \
         GROUP BY 1 ORDER BY 1"
    );
    let currency = settings.currency.clone();
    let (from, to) = (query.from, query.to);
    let (usage, adjustments) = db
        .run(move |conn| {
            // One snapshot, so the two halves describe the same ledger.
            conn.build_transaction()
                .read_only()
                .repeatable_read()
                .run(|conn| {
                    let usage: Vec<VolumeRow> = diesel::sql_query(&usage_sql)
                        .bind::<Timestamptz, _>(from)
                        .bind::<Timestamptz, _>(to)
                        .bind::<Text, _>(&currency)
                        .load(conn)?;
                    let adjustments: Vec<AdjustmentRow> = diesel::sql_query(&adjustments_sql)
                        .bind::<Timestamptz, _>(from)
                        .bind::<Timestamptz, _>(to)
                        .bind::<Text, _>(&currency)
                        .load(conn)?;
                    Ok::<_, Error>((usage, adjustments))
                })
        })
        .await?;
    let mut points: Vec<MarketVolumePoint> = usage
        .into_iter()
        .map(|r| MarketVolumePoint {
            bucket_start: r.bucket_start,
            volume: r.volume,
            host_earnings: r.host_earnings,
            fees: r.fees,
            fee_adjustments: Decimal::ZERO,
            postings: r.postings,
            seconds: r.seconds,
        })
        .collect();
    for a in adjustments {
        match points.iter_mut().find(|p| p.bucket_start == a.bucket_start) {
            Some(p) => p.fee_adjustments += a.amount,
            None => points.push(MarketVolumePoint {
                bucket_start: a.bucket_start,
                volume: Decimal::ZERO,
                host_earnings: Decimal::ZERO,
                fees: Decimal::ZERO,
                fee_adjustments: a.amount,
                postings: 0,
                seconds: 0,
            }),
        }
    }
    points.sort_by_key(|p| p.bucket_start);
    Ok(MarketVolume {
        bucket: query.bucket,
        from,
        to,
        currency: settings.currency.clone(),
        total_volume: points.iter().map(|p| p.volume).sum(),
        total_host_earnings: points.iter().map(|p| p.host_earnings).sum(),
        total_fees: points.iter().map(|p| p.fees).sum(),
        total_fee_adjustments: points.iter().map(|p| p.fee_adjustments).sum(),
        total_postings: points.iter().map(|p| p.postings).sum(),
        total_seconds: points.iter().map(|p| p.seconds).sum(),
        points,
    })
}

#[derive(QueryableByName)]
struct RiskRow {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    tenant_id: TenantId,
    #[diesel(sql_type = Numeric)]
    balance: Decimal,
    #[diesel(sql_type = Nullable<Numeric>)]
    burn_per_hour: Option<Decimal>,
    #[diesel(sql_type = Nullable<BigInt>)]
    runway_seconds: Option<i64>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    low_since: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    last_charged_at: Option<DateTime<Utc>>,
}

/// Renters whose balance is at or below zero, or who have a low-runway
/// warning in force (billing's spend watch raises it below
/// `GPUMARKET_RUNWAY_WARNING_SECONDS` and clears it when the runway
/// recovers), lowest balance first.
pub async fn credit_risks(db: &Db, settings: &Settings) -> Result<CreditRisks, Error> {
    let currency = settings.currency.clone();
    let limit = i64::try_from(MAX_LISTED_TENANTS).unwrap_or(i64::MAX);
    let rows: Vec<RiskRow> = db
        .run(move |conn| {
            diesel::sql_query(
                "SELECT a.tenant_id AS tenant_id, a.balance, r.burn_per_hour, r.runway_seconds, \
                        r.low_since, \
                        (SELECT max(t.created_at) FROM billing.transactions t \
                          WHERE t.tenant_id = a.tenant_id AND t.kind = 'usage') AS last_charged_at \
                 FROM billing.accounts a \
                 LEFT JOIN billing.runway_alerts r ON r.tenant_id = a.tenant_id \
                 WHERE a.kind = 'renter_balance' AND a.currency = $1 AND a.tenant_id IS NOT NULL \
                   AND (a.balance <= 0 OR r.tenant_id IS NOT NULL) \
                 ORDER BY a.balance, a.tenant_id \
                 LIMIT $2",
            )
            .bind::<Text, _>(&currency)
            .bind::<BigInt, _>(limit)
            .load(conn)
            .map_err(Error::from)
        })
        .await?;
    Ok(CreditRisks {
        currency: settings.currency.clone(),
        tenants: rows
            .into_iter()
            .map(|r| CreditRisk {
                tenant_id: r.tenant_id,
                balance: r.balance,
                burn_per_hour: r.burn_per_hour,
                runway_seconds: r.runway_seconds,
                low_since: r.low_since,
                last_charged_at: r.last_charged_at,
            })
            .collect(),
    })
}

pub async fn volume_route(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
    query: web::Query<MarketVolumeQuery>,
) -> Result<Reply<MarketVolume>, Error> {
    Ok(Reply::ok(volume(&db, &s, query.into_inner()).await?))
}

pub async fn credit_risks_route(
    _: ServiceCaller,
    db: web::Data<Db>,
    s: web::Data<Settings>,
) -> Result<Reply<CreditRisks>, Error> {
    Ok(Reply::ok(credit_risks(&db, &s).await?))
}
