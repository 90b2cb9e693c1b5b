//! The release of escrow as blocks run: every settlement interval, each
//! held escrow is settled from where it stopped up to `min(ends_at, now −
//! lag)` (the lag: a silence shorter than the catalog's grace is not known
//! yet). The seconds inside the machine's heartbeat gaps (the catalog's
//! evidence, `HEARTBEAT_GAPS`; an open gap runs to the chunk's end) are
//! refunded to the holder of each hour; the rest go to the host less the
//! fee kept at booking. A chunk is cut where its holder changes, one
//! posting each (`escrow:<reservation>:<end as unix seconds>`), and the
//! escrow row moves in the same transaction, under its lock and guarded by
//! the `settled_until` it had, so two billing processes never settle a
//! second twice. Without the catalog's answer an escrow waits for the next
//! pass: nothing is released without evidence.

use std::future::Future;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use contracts::api::HeartbeatGapsQuery;
use contracts::endpoints;
use contracts::ids::{MachineId, ReservationId, TenantId};
use diesel::prelude::*;
use platform::internal::InternalClient;
use platform::{Config, Db};
use rust_decimal::Decimal;
use schema::billing_escrow::escrows;
use tracing::Instrument;
use uuid::Uuid;

use super::math::{self, Span};
use super::postings::{self, Detail, EscrowPosting, line};
use super::store::{self, EscrowRow, HELD};
use super::terms::{EscrowPeers, EscrowTerms};
use crate::ledger::{self, AccountKind};
use crate::{Error, Settings};

/// Escrows settled per pass at most (the rest wait for the next one).
const PASS_LIMIT: i64 = 500;

/// The catalog answers at most this many gaps, newest first.
const CATALOG_GAPS_LIMIT: usize = 1000;

/// A machine's heartbeat gap: silent from `started_at` until `ended_at`
/// (None: still silent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

/// Where the evidence of a silent host comes from.
pub trait Evidence: Send + Sync {
    /// The machine's heartbeat gaps that overlap `[from, to)`; an error when
    /// they cannot be had (then nothing is settled on them).
    fn gaps(
        &self,
        machine_id: MachineId,
        host_tenant_id: TenantId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<Gap>, String>> + Send;
}

/// The catalog's heartbeat gaps (`HEARTBEAT_GAPS`, asked as the host).
#[derive(Clone)]
pub struct CatalogEvidence(pub InternalClient);

impl Evidence for CatalogEvidence {
    async fn gaps(
        &self,
        machine_id: MachineId,
        host_tenant_id: TenantId,
        from: DateTime<Utc>,
        _to: DateTime<Utc>,
    ) -> Result<Vec<Gap>, String> {
        let gaps = self
            .0
            .call(
                endpoints::catalog::HEARTBEAT_GAPS,
                machine_id,
                &HeartbeatGapsQuery { host_tenant_id },
            )
            .await
            .map_err(|e| format!("{}: {}", e.code.as_str(), e.message))?;
        // Newest first and capped: when the cap cut gaps that may reach
        // back to `from`, the evidence is incomplete.
        if gaps.len() >= CATALOG_GAPS_LIMIT && gaps.iter().all(|g| g.started_at > from) {
            return Err(format!(
                "the catalog's {CATALOG_GAPS_LIMIT} newest gaps do not reach back to {from}"
            ));
        }
        Ok(gaps
            .into_iter()
            .map(|g| Gap {
                started_at: g.started_at,
                ended_at: g.ended_at,
            })
            .collect())
    }
}

/// The gaps as spans of the block, whole seconds outward (a second touched
/// by a silence is silent); an open gap runs to `open_until`.
pub(crate) fn spans(row: &EscrowRow, gaps: &[Gap], open_until: DateTime<Utc>) -> Vec<Span> {
    let seconds_up = |at: DateTime<Utc>| -> i64 {
        let micros = (at - row.starts_at).num_microseconds().unwrap_or(i64::MAX);
        micros.div_euclid(1_000_000) + i64::from(micros.rem_euclid(1_000_000) != 0)
    };
    gaps.iter()
        .map(|g| {
            let end = g.ended_at.unwrap_or(open_until);
            Span::new(
                row.offset(g.started_at),
                seconds_up(end).clamp(0, row.seconds()),
            )
        })
        .filter(|s| !s.is_empty())
        .collect()
}

/// What settling did to an escrow.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Settled {
    pub chunks: usize,
    pub released: Decimal,
    pub fees: Decimal,
    pub refunded: Decimal,
    pub silent_seconds: i64,
}

/// Settles the locked, held escrow `row` from its `settled_until` up to
/// `target` (seconds of the block) with the silent `spans`, in the caller's
/// transaction: one posting per holder's part, then the row.
pub(crate) fn settle_to(
    conn: &mut PgConnection,
    settings: &Settings,
    row: &EscrowRow,
    target: i64,
    silent: &[Span],
) -> Result<Settled, Error> {
    let from = row.settled();
    let target = target.min(row.seconds());
    if target <= from || !row.held() {
        return Ok(Settled::default());
    }
    let block = row.block()?;
    let holdings = store::holdings(conn, row)?;
    let mut chunks = Vec::new();
    for part in math::holder_cuts(&holdings, Span::new(from, target)) {
        let chunk = math::settle_chunk(block, row.fee_rate, part, silent, &holdings)
            .map_err(|e| internal(row.reservation_id, e))?;
        let holder = holdings
            .iter()
            .find(|h| h.span.contains(part.from))
            .map(|h| h.holder)
            .ok_or_else(|| internal(row.reservation_id, math::MathError::Uncovered(part.from)))?;
        chunks.push((part, holder, chunk));
    }
    let currency = settings.currency.as_str();
    let escrow = ledger::account(
        conn,
        AccountKind::Escrow,
        Some(row.renter_tenant_id.0),
        currency,
    )?;
    let host = ledger::account(
        conn,
        AccountKind::HostEarnings,
        Some(row.host_tenant_id.0),
        currency,
    )?;
    let fee = ledger::account(conn, AccountKind::PlatformFee, None, currency)?;
    let mut accounts = vec![escrow, host, fee];
    let mut balances: Vec<(TenantId, Uuid)> = Vec::new();
    for (_, holder, chunk) in &chunks {
        if !chunk.refunds.is_empty() && !balances.iter().any(|(t, _)| *t == holder.tenant_id) {
            let id = ledger::account(
                conn,
                AccountKind::RenterBalance,
                Some(holder.tenant_id.0),
                currency,
            )?;
            balances.push((holder.tenant_id, id));
            accounts.push(id);
        }
    }
    postings::lock_accounts(conn, &accounts)?;

    let mut settled = Settled::default();
    for (part, holder, chunk) in &chunks {
        let refund = chunk.refunded();
        let mut legs = vec![
            (escrow, -chunk.total()),
            (host, chunk.host),
            (fee, chunk.fee),
        ];
        if let Some((_, balance)) = balances.iter().find(|(t, _)| *t == holder.tenant_id) {
            legs.push((*balance, refund));
        }
        let upto = row.instant(part.to);
        let id = format!("escrow:{}:{}", row.reservation_id, upto.timestamp());
        let description = format!(
            "reserved block {}: {} to {}, {} s heard released to the host ({} less the {} fee), \
             {} s silent refunded ({} {currency})",
            row.reservation_id,
            contracts::time::format(row.instant(part.from)),
            contracts::time::format(upto),
            chunk.heard_seconds,
            chunk.heard.normalize(),
            chunk.fee.normalize(),
            chunk.silent_seconds,
            refund.normalize(),
        );
        let posted = postings::post(
            conn,
            &EscrowPosting {
                id: &id,
                kind: postings::ESCROW_RELEASE,
                tenant_id: holder.tenant_id,
                fee_rate: Some(row.fee_rate),
                description: &description,
                legs,
                detail: Detail {
                    escrow: row.reservation_id,
                    reservation: holder.reservation_id,
                    host_tenant_id: row.host_tenant_id,
                    machine_id: row.machine_id,
                    line: line::REFUND,
                    quantity: chunk.silent_seconds * i64::from(row.gpu_count),
                    unit_price: row.price_per_gpu_hour,
                    heard_seconds: chunk.heard_seconds,
                    started_at: row.instant(part.from),
                    ended_at: upto,
                },
            },
        )?;
        settled.chunks += usize::from(posted);
        settled.released += chunk.host;
        settled.fees += chunk.fee;
        settled.refunded += refund;
        settled.silent_seconds += chunk.silent_seconds;
    }
    let target_at = row.instant(target);
    let state = if target == row.seconds() {
        store::SETTLED
    } else {
        HELD
    };
    let moved = diesel::update(escrows::table.find(row.reservation_id))
        .filter(escrows::settled_until.eq(row.settled_until))
        .filter(escrows::state.eq(HELD))
        .set((
            escrows::settled_until.eq(target_at),
            escrows::released.eq(escrows::released + settled.released),
            escrows::fees.eq(escrows::fees + settled.fees),
            escrows::refunded.eq(escrows::refunded + settled.refunded),
            escrows::silent_seconds.eq(escrows::silent_seconds + settled.silent_seconds),
            escrows::state.eq(state),
        ))
        .execute(conn)?;
    if moved != 1 {
        // Under the row's lock this cannot happen; if it does, nothing of
        // this settlement commits.
        return Err(Error::Conflict(format!(
            "escrow {} was settled concurrently",
            row.reservation_id
        )));
    }
    for (tenant, _) in &balances {
        crate::invoices::pay_open_invoices(conn, *tenant, settings)?;
    }
    if !settled.released.is_zero() || !settled.fees.is_zero() {
        crate::metrics::escrow_released(settled.released + settled.fees);
    }
    if !settled.refunded.is_zero() {
        crate::metrics::escrow_refunded(settled.refunded);
    }
    Ok(settled)
}

fn internal(id: ReservationId, e: math::MathError) -> Error {
    Error::Platform(platform::PlatformError::Other(format!("escrow {id}: {e}")))
}

/// Settles one escrow up to `target` with `gaps`, in its own transaction
/// under its lock: None when it is no longer held.
pub async fn settle_one(
    db: &Db,
    settings: &Settings,
    id: ReservationId,
    target: DateTime<Utc>,
    gaps: Vec<Gap>,
) -> Result<Option<Settled>, Error> {
    let settings = settings.clone();
    db.tx(move |conn| {
        let Some(row) = store::lock(conn, id)? else {
            return Ok(None);
        };
        if !row.held() {
            return Ok(None);
        }
        let silent = spans(&row, &gaps, target);
        settle_to(conn, &settings, &row, row.offset(target), &silent).map(Some)
    })
    .await
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReleaseReport {
    /// Escrows that moved.
    pub escrows: usize,
    /// Escrows left for the next pass (no evidence, or an error).
    pub skipped: usize,
    pub released: Decimal,
    pub refunded: Decimal,
}

/// One release pass at `now`.
pub async fn release_once<E: Evidence>(
    db: &Db,
    settings: &Settings,
    terms: &EscrowTerms,
    evidence: &E,
    now: DateTime<Utc>,
) -> Result<ReleaseReport, Error> {
    let horizon = now - terms.settle_lag;
    let due: Vec<EscrowRow> = db
        .run(move |conn| {
            // `settled_until < least(ends_at, horizon)`.
            escrows::table
                .filter(escrows::state.eq(HELD))
                .filter(escrows::settled_until.lt(horizon))
                .filter(escrows::settled_until.lt(escrows::ends_at))
                .order(escrows::settled_until)
                .limit(PASS_LIMIT)
                .select(EscrowRow::as_select())
                .load(conn)
                .map_err(Error::from)
        })
        .await?;
    let mut report = ReleaseReport::default();
    for row in due {
        let target = row.instant(row.offset(horizon.min(row.ends_at)));
        if target <= row.settled_until {
            continue;
        }
        let gaps = match evidence
            .gaps(
                row.machine_id,
                row.host_tenant_id,
                row.settled_until,
                target,
            )
            .await
        {
            Ok(gaps) => gaps,
            Err(error) => {
                tracing::warn!(reservation.id = %row.reservation_id, machine.id = %row.machine_id, %error, "escrow not released: no heartbeat evidence");
                report.skipped += 1;
                continue;
            }
        };
        match settle_one(db, settings, row.reservation_id, target, gaps).await {
            Ok(Some(s)) => {
                report.escrows += 1;
                report.released += s.released + s.fees;
                report.refunded += s.refunded;
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(reservation.id = %row.reservation_id, %error, "escrow release failed");
                report.skipped += 1;
            }
        }
    }
    Ok(report)
}

/// The release loop: a pass every settlement interval, forever.
pub async fn run_loop(config: Arc<Config>, db: Db) -> Result<(), Error> {
    let settings = Settings::from_config(&config)?;
    let terms = EscrowTerms::from_config(&config)?;
    let evidence = CatalogEvidence(EscrowPeers::from_config(&config).catalog);
    let mut ticker = tokio::time::interval(terms.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let pass = release_once(&db, &settings, &terms, &evidence, contracts::time::now())
            .instrument(tracing::info_span!("escrow_release"));
        match pass.await {
            Ok(r) if r.escrows + r.skipped > 0 => tracing::info!(?r, "escrow release pass"),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "escrow release pass failed"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn row() -> EscrowRow {
        let start = Utc.with_ymd_and_hms(2027, 1, 4, 10, 0, 0).unwrap();
        EscrowRow {
            reservation_id: ReservationId::default(),
            renter_tenant_id: TenantId::default(),
            host_tenant_id: TenantId::default(),
            machine_id: MachineId::default(),
            currency: "USD".into(),
            gpu_count: 1,
            price_per_gpu_hour: Decimal::ONE,
            amount: Decimal::TWO,
            fee_rate: Decimal::ZERO,
            starts_at: start,
            ends_at: start + chrono::Duration::hours(2),
            settled_until: start,
            released: Decimal::ZERO,
            fees: Decimal::ZERO,
            refunded: Decimal::ZERO,
            penalty: Decimal::ZERO,
            silent_seconds: 0,
            state: HELD.into(),
            cancelled_at: None,
            cancelled_by_host: None,
            cancel_reason: None,
            created_at: start,
        }
    }

    #[test]
    fn gaps_become_whole_silent_seconds_outward() {
        let r = row();
        let at = |s: i64, micros: i64| {
            r.starts_at + chrono::Duration::seconds(s) + chrono::Duration::microseconds(micros)
        };
        let gaps = [
            // Before the block, into it.
            Gap {
                started_at: at(-50, 0),
                ended_at: Some(at(10, 1)),
            },
            Gap {
                started_at: at(100, 500_000),
                ended_at: Some(at(200, 0)),
            },
            // Still open: to the chunk's end.
            Gap {
                started_at: at(3000, 0),
                ended_at: None,
            },
            // Entirely before the block.
            Gap {
                started_at: at(-500, 0),
                ended_at: Some(at(-100, 0)),
            },
        ];
        assert_eq!(
            spans(&r, &gaps, at(3600, 0)),
            vec![Span::new(0, 11), Span::new(100, 200), Span::new(3000, 3600)]
        );
    }
}
