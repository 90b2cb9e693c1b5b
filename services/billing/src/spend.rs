//! Spend control beyond the prepaid floor (docs/spend-control.md):
//!
//! - **Monthly spend caps.** Every usage charge adds to the renter's
//!   month-to-date spend in the posting's transaction; the charge that
//!   reaches the quota's `monthlyBudget` announces
//!   `billing.balance.cap_reached` from that same transaction, and ordering
//!   stops the tenant's instances as it does for an exhausted balance. So a
//!   cap is overshot by at most one settlement segment, like the floor.
//!   Quota owns the budget; billing keeps a copy (`billing.spend_caps`)
//!   refreshed every settlement interval for the tenants it charges.
//! - **Low-runway warnings.** Every settlement interval, each tenant being
//!   charged has its balance set against what its running rentals burn now
//!   (metering's burn rate); a runway under
//!   `GPUMARKET_RUNWAY_WARNING_SECONDS` announces `billing.runway.low` once,
//!   and the warning re-arms when the runway recovers.

use contracts::ids::TenantId;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Datelike, NaiveDate, Utc};
use contracts::events::{RunwayLow, SpendCapReached};
use contracts::{api, endpoints, money};
use diesel::prelude::*;
use platform::consumer::HandlerError;
use platform::internal::InternalClient;
use platform::{Config, Db};
use rust_decimal::Decimal;
use schema::billing_spend::{monthly_spend, runway_alerts, spend_caps};
use tracing::Instrument;
use uuid::Uuid;

use crate::ledger::{self, AccountKind};
use crate::{Error, Settings};

/// The first day (UTC) of the month that contains `at`: usage belongs to the
/// month its segment started in.
pub fn month_of(at: DateTime<Utc>) -> NaiveDate {
    NaiveDate::from_ymd_opt(at.year(), at.month(), 1).unwrap_or(NaiveDate::MIN)
}

/// A posted usage charge as spend sees it: `amount` (negative for a
/// correction) for the month its segment started in.
pub struct Charge {
    pub tenant_id: TenantId,
    pub amount: Decimal,
    pub usage_at: DateTime<Utc>,
    pub correlation_id: Option<String>,
}

/// A batch's charges to one tenant and month: their sum, and the
/// correlation id of the last positive charge (None: corrections only).
type MonthCharge = (Decimal, Option<Option<String>>);

#[derive(QueryableByName)]
struct SpentRow {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    tenant_id: TenantId,
    #[diesel(sql_type = diesel::sql_types::Date)]
    month: NaiveDate,
    #[diesel(sql_type = diesel::sql_types::Numeric)]
    spent: Decimal,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    cap_reached_at: Option<DateTime<Utc>>,
}

/// Adds a batch of posted usage charges to the renters' month-to-date spend
/// (one upsert for the batch, each tenant and month moved once by its sum),
/// and announces the cap of every tenant a charge of this batch took to it.
/// Runs in the postings' transaction.
pub fn charges_posted(
    conn: &mut PgConnection,
    settings: &Settings,
    charges: &[Charge],
) -> Result<(), HandlerError> {
    use diesel::sql_types::{Array, Date, Numeric, Text, Timestamptz, Uuid as SqlUuid};
    // Per tenant and month: the sum, whether anything was charged (not only
    // corrected), and the correlation id of the last charge.
    let mut rows: std::collections::BTreeMap<(Uuid, NaiveDate), MonthCharge> =
        std::collections::BTreeMap::new();
    for c in charges {
        let row = rows
            .entry((c.tenant_id.into(), month_of(c.usage_at)))
            .or_insert((Decimal::ZERO, None));
        row.0 += c.amount;
        if c.amount > Decimal::ZERO {
            row.1 = Some(c.correlation_id.clone());
        }
    }
    if rows.is_empty() {
        return Ok(());
    }
    // In key order (the map's), so concurrent batches lock rows in one order.
    let tenants: Vec<Uuid> = rows.keys().map(|(t, _)| *t).collect();
    let months: Vec<NaiveDate> = rows.keys().map(|(_, m)| *m).collect();
    let sums: Vec<Decimal> = rows.values().map(|(sum, _)| *sum).collect();
    let now = contracts::time::now();
    let spent: Vec<SpentRow> = diesel::sql_query(
        "INSERT INTO billing.monthly_spend (tenant_id, month, currency, spent, last_charged_at) \
         SELECT t.tenant_id, t.month, $4, t.amount, $5 \
         FROM unnest($1::uuid[], $2::date[], $3::numeric[]) AS t(tenant_id, month, amount) \
         ON CONFLICT (tenant_id, month) DO UPDATE \
         SET spent = monthly_spend.spent + excluded.spent, last_charged_at = excluded.last_charged_at \
         RETURNING tenant_id, month, spent, cap_reached_at",
    )
    .bind::<Array<SqlUuid>, _>(&tenants)
    .bind::<Array<Date>, _>(&months)
    .bind::<Array<Numeric>, _>(&sums)
    .bind::<Text, _>(&settings.currency)
    .bind::<Timestamptz, _>(now)
    .load(conn)?;
    // Only a charge can reach a cap, and a cap is announced once per crossing.
    let candidates: Vec<(SpentRow, Option<String>)> = spent
        .into_iter()
        .filter(|row| row.cap_reached_at.is_none())
        .filter_map(|row| {
            let charged = rows.get(&(row.tenant_id.into(), row.month))?.1.clone()?;
            Some((row, charged))
        })
        .collect();
    if candidates.is_empty() {
        return Ok(());
    }
    let ids: Vec<TenantId> = candidates.iter().map(|(row, _)| row.tenant_id).collect();
    let caps: std::collections::HashMap<TenantId, Decimal> = spend_caps::table
        .filter(spend_caps::tenant_id.eq_any(&ids))
        .filter(spend_caps::monthly_cap.is_not_null())
        .select((spend_caps::tenant_id, spend_caps::monthly_cap))
        .load::<(TenantId, Option<Decimal>)>(conn)?
        .into_iter()
        .filter_map(|(tenant, cap)| Some((tenant, cap?)))
        .collect();
    for (row, correlation_id) in candidates {
        match caps.get(&row.tenant_id) {
            Some(&cap) if row.spent >= cap => {
                announce_cap(
                    conn,
                    settings,
                    row.tenant_id,
                    row.month,
                    row.spent,
                    cap,
                    correlation_id,
                )?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Marks the month's cap reached and writes the announcement to the outbox,
/// once per crossing (`cap_reached_at` is cleared when the cap is raised
/// above the spend again).
fn announce_cap(
    conn: &mut PgConnection,
    settings: &Settings,
    tenant_id: TenantId,
    month: NaiveDate,
    spent: Decimal,
    cap: Decimal,
    correlation_id: Option<String>,
) -> Result<bool, diesel::result::Error> {
    let at = contracts::time::now();
    let marked = diesel::update(monthly_spend::table.find((tenant_id, month)))
        .filter(monthly_spend::cap_reached_at.is_null())
        .set(monthly_spend::cap_reached_at.eq(at))
        .execute(conn)?;
    if marked == 0 {
        return Ok(false);
    }
    let event = SpendCapReached {
        tenant_id,
        month,
        spent,
        monthly_cap: cap,
        currency: settings.currency.clone(),
        at,
        sequence: next_sequence(conn, tenant_id)?,
    };
    enqueue(
        conn,
        settings,
        contracts::events::kinds::SPEND_CAP_REACHED,
        tenant_id,
        correlation_id,
        &event,
    )?;
    tracing::warn!(tenant.id = %tenant_id, %spent, %cap, "monthly spend cap reached; the tenant's instances will be stopped");
    crate::metrics::spend_cap_reached();
    Ok(true)
}

/// The next number of the renter's balance events (webhook ordering,
/// docs/webhooks.md), in the caller's transaction: only when an event is
/// published, never per charge.
pub fn next_sequence(
    conn: &mut PgConnection,
    tenant_id: TenantId,
) -> Result<i64, diesel::result::Error> {
    platform::sequence::next(
        conn,
        crate::SCHEMA,
        &contracts::events::resource::tenant(tenant_id.into()),
    )
}

fn enqueue<T: serde::Serialize>(
    conn: &mut PgConnection,
    settings: &Settings,
    kind: contracts::Kind<T>,
    tenant_id: TenantId,
    correlation_id: Option<String>,
    payload: &T,
) -> Result<(), diesel::result::Error> {
    crate::events::publish(
        conn,
        &settings.events_exchange,
        kind,
        tenant_id,
        correlation_id,
        payload,
    )
}

/// What the watch needs from the other services, per tenant.
#[derive(Debug, Clone)]
pub struct Observed {
    pub tenant_id: TenantId,
    /// The quota's monthly budget (None: no budget).
    pub monthly_cap: Option<Decimal>,
    pub burn: api::BurnRate,
}

/// What one watch pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WatchReport {
    pub tenants: usize,
    pub runway_warnings: usize,
    pub caps_reached: usize,
}

/// How far back a charge makes a tenant worth watching: a running rental is
/// charged every settlement interval, so a few intervals without a charge
/// means nothing of the tenant runs.
fn lookback(settlement_interval: Duration) -> chrono::Duration {
    let window = (settlement_interval * 3).max(Duration::from_secs(60));
    chrono::Duration::from_std(window).unwrap_or(chrono::Duration::minutes(1))
}

/// Tenants charged recently, or with a warning in force (to clear it).
pub async fn watched_tenants(
    db: &Db,
    now: DateTime<Utc>,
    settlement_interval: Duration,
) -> Result<Vec<Uuid>, Error> {
    let since = now - lookback(settlement_interval);
    db.run(move |conn| {
        let mut tenants: Vec<Uuid> = monthly_spend::table
            .filter(monthly_spend::last_charged_at.ge(since))
            .select(monthly_spend::tenant_id)
            .distinct()
            .load(conn)?;
        let warned: Vec<Uuid> = runway_alerts::table
            .select(runway_alerts::tenant_id)
            .load(conn)?;
        tenants.extend(warned);
        tenants.sort_unstable();
        tenants.dedup();
        Ok(tenants)
    })
    .await
}

/// Applies one tenant's observations: refreshes the cap copy, announces a
/// cap the spend already passed (a budget lowered under a running rental),
/// re-arms a cap that was raised, and raises or clears the runway warning.
pub async fn apply_observed(
    db: &Db,
    settings: &Settings,
    warn_below_seconds: i64,
    observed: Observed,
    now: DateTime<Utc>,
) -> Result<WatchReport, Error> {
    let settings = settings.clone();
    db.tx(move |conn| -> Result<WatchReport, Error> {
        let tenant_id = observed.tenant_id;
        let mut report = WatchReport {
            tenants: 1,
            ..WatchReport::default()
        };
        diesel::insert_into(spend_caps::table)
            .values((
                spend_caps::tenant_id.eq(tenant_id),
                spend_caps::monthly_cap.eq(observed.monthly_cap),
                spend_caps::synced_at.eq(now),
            ))
            .on_conflict(spend_caps::tenant_id)
            .do_update()
            .set((
                spend_caps::monthly_cap.eq(observed.monthly_cap),
                spend_caps::synced_at.eq(now),
            ))
            .execute(conn)?;

        let month = month_of(now);
        let spend: Option<(Decimal, Option<DateTime<Utc>>)> = monthly_spend::table
            .find((tenant_id, month))
            .select((monthly_spend::spent, monthly_spend::cap_reached_at))
            .for_update()
            .first(conn)
            .optional()?;
        if let Some((spent, reached)) = spend {
            match (observed.monthly_cap, reached) {
                (Some(cap), None) if spent >= cap && observed.burn.running_intervals > 0 => {
                    let announced =
                        announce_cap(conn, &settings, tenant_id, month, spent, cap, None)?;
                    report.caps_reached += usize::from(announced);
                }
                // Reached and announced, or reached with nothing running.
                (Some(cap), _) if spent >= cap => {}
                // The cap was raised above the spend, or removed: re-arm.
                (_, Some(_)) => {
                    diesel::update(monthly_spend::table.find((tenant_id, month)))
                        .set(monthly_spend::cap_reached_at.eq(None::<DateTime<Utc>>))
                        .execute(conn)?;
                }
                _ => {}
            }
        }

        let balance = ledger::balance(
            conn,
            AccountKind::RenterBalance,
            tenant_id,
            &settings.currency,
        )?;
        let runway = money::runway_seconds(balance, observed.burn.per_hour);
        match runway {
            Some(seconds) if seconds < warn_below_seconds => {
                let raised = diesel::insert_into(runway_alerts::table)
                    .values((
                        runway_alerts::tenant_id.eq(tenant_id),
                        runway_alerts::low_since.eq(now),
                        runway_alerts::balance.eq(balance),
                        runway_alerts::burn_per_hour.eq(observed.burn.per_hour),
                        runway_alerts::runway_seconds.eq(seconds),
                    ))
                    .on_conflict_do_nothing()
                    .execute(conn)?;
                if raised == 1 {
                    let event = RunwayLow {
                        tenant_id,
                        balance,
                        currency: settings.currency.clone(),
                        burn_rate_per_hour: observed.burn.per_hour,
                        runway_seconds: seconds,
                        warn_below_seconds,
                        at: now,
                        sequence: next_sequence(conn, tenant_id)?,
                    };
                    enqueue(
                        conn,
                        &settings,
                        contracts::events::kinds::RUNWAY_LOW,
                        tenant_id,
                        None,
                        &event,
                    )?;
                    tracing::warn!(tenant.id = %tenant_id, %balance, runway_seconds = seconds, "runway low");
                    crate::metrics::runway_low();
                    report.runway_warnings += 1;
                }
            }
            // Enough runway, or nothing burning: the warning (if any) is over.
            _ => {
                diesel::delete(runway_alerts::table.find(tenant_id)).execute(conn)?;
            }
        }
        Ok(report)
    })
    .await
}

/// The other services billing asks during a watch pass.
pub struct Peers {
    pub quota: InternalClient,
    pub metering: InternalClient,
}

impl Peers {
    pub fn from_config(config: &Config) -> Self {
        Self {
            quota: InternalClient::new(config.url("quota"), config.service_token.clone()),
            metering: InternalClient::new(config.url("metering"), config.service_token.clone()),
        }
    }

    async fn observe(&self, tenant_id: TenantId) -> Result<Observed, Error> {
        let (quota, burn) = tokio::try_join!(
            self.quota
                .call(endpoints::quota::TENANT_QUOTA, tenant_id, &()),
            self.metering
                .call(endpoints::metering::BURN_RATE, tenant_id, &()),
        )?;
        Ok(Observed {
            tenant_id,
            monthly_cap: quota.limits.monthly_budget,
            burn,
        })
    }
}

/// One watch pass over the tenants charged recently. A tenant whose peers
/// do not answer is skipped until the next pass (its charges are still
/// capped by the copy billing already has).
pub async fn watch_once(
    db: &Db,
    settings: &Settings,
    peers: &Peers,
    warn_below_seconds: i64,
    settlement_interval: Duration,
) -> Result<WatchReport, Error> {
    let now = contracts::time::now();
    let mut report = WatchReport::default();
    for tenant_id in watched_tenants(db, now, settlement_interval).await? {
        let observed = match peers.observe(TenantId(tenant_id)).await {
            Ok(observed) => observed,
            Err(error) => {
                tracing::warn!(tenant.id = %tenant_id, %error, "spend watch: peers did not answer");
                continue;
            }
        };
        let r = apply_observed(db, settings, warn_below_seconds, observed, now).await?;
        report.tenants += r.tenants;
        report.runway_warnings += r.runway_warnings;
        report.caps_reached += r.caps_reached;
    }
    Ok(report)
}

/// Watches every settlement interval, forever.
pub async fn run_watch(config: Arc<Config>, db: Db) -> Result<(), Error> {
    let settings = Settings::from_config(&config)?;
    let peers = Peers::from_config(&config);
    let billing = config.settings::<crate::BillingSettings>()?;
    let interval = billing.spend_watch_interval;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let pass = watch_once(
            &db,
            &settings,
            &peers,
            billing.runway_warning_seconds,
            interval,
        )
        .instrument(tracing::info_span!("spend_watch"));
        match pass.await {
            Ok(report) if report.runway_warnings + report.caps_reached > 0 => {
                tracing::info!(?report, "spend watch")
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "spend watch failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn usage_belongs_to_the_month_its_segment_started_in() {
        let at = |y, m, d, h| {
            Utc.with_ymd_and_hms(y, m, d, h, 0, 0)
                .single()
                .expect("time")
        };
        assert_eq!(
            month_of(at(2026, 12, 31, 23)),
            NaiveDate::from_ymd_opt(2026, 12, 1).expect("date")
        );
        assert_eq!(
            month_of(at(2027, 1, 1, 0)),
            NaiveDate::from_ymd_opt(2027, 1, 1).expect("date")
        );
    }

    #[test]
    fn a_tenant_is_watched_for_a_few_settlement_intervals_after_a_charge() {
        assert_eq!(
            lookback(Duration::from_secs(10)),
            chrono::Duration::seconds(60)
        );
        assert_eq!(
            lookback(Duration::from_secs(30)),
            chrono::Duration::seconds(90)
        );
    }
}
