//! `ESCROW_CANCEL`: a block cancelled at `at` (the host cancelled, or its
//! machine left the market). First the seconds before `min(at, now,
//! ends_at)` are settled as the release settles them (heard ones to the
//! host, silent ones back, on the catalog's evidence: without it the
//! cancellation is refused `UNAVAILABLE` and nothing changes, so the caller
//! retries). Then everything remaining goes back to the holder of each
//! hour (`escrow_refund:<reservation>:<holder's reservation>`), and when the
//! host cancelled it pays the published penalty, `round_half_even(refund ×
//! rate, 9)`, from its earnings to the holders in proportion to their
//! refunds (`escrow_penalty:<reservation>:<holder's reservation>`). One
//! transaction; a cancelled or settled escrow answers as it is.
//!
//! The last seconds before now (within the settle lag) are settled on the
//! evidence as it stands: a silence that recent is shorter than the
//! catalog's grace, which is no silence under the rules (the host is paid
//! for it as for on-demand rentals), and a longer one is an open gap that
//! runs to the cancellation.

use chrono::{DateTime, Utc};
use contracts::ids::{ReservationId, TenantId};
use contracts::reservations::{Escrow, EscrowCancelRequest};
use diesel::prelude::*;
use rust_decimal::Decimal;
use schema::billing_escrow::escrows;
use uuid::Uuid;

use super::math;
use super::postings::{self, Detail, EscrowPosting, line};
use super::release::{self, Evidence};
use super::store::{self, CANCELLED, HELD};
use super::terms::EscrowTerms;
use crate::ledger::{self, AccountKind};
use crate::{Error, Settings};

/// Cancels the escrow in the caller's transaction, with the evidence
/// `gaps` for the seconds up to `cut` (the cancellation's instant, at most
/// now).
fn cancel_in(
    conn: &mut PgConnection,
    settings: &Settings,
    terms: &EscrowTerms,
    id: ReservationId,
    req: &EscrowCancelRequest,
    cut: DateTime<Utc>,
    gaps: &[release::Gap],
) -> Result<Escrow, Error> {
    let row = store::lock(conn, id)?
        .ok_or_else(|| Error::NotFound(format!("reservation {id} has no escrow")))?;
    if !row.held() {
        return Ok(row.to_api());
    }
    let target = row.offset(cut);
    let silent = release::spans(&row, gaps, cut);
    release::settle_to(conn, settings, &row, target, &silent)?;
    let row = store::find(conn, id)?
        .ok_or_else(|| Error::NotFound(format!("reservation {id} has no escrow")))?;
    if !row.held() {
        // Settled to its end: nothing is left to cancel.
        return Ok(row.to_api());
    }
    let block = row.block()?;
    let holdings = store::holdings(conn, &row)?;
    let rate = req.by_host.then_some(terms.penalty_rate);
    let c = math::cancel(block, row.settled(), &holdings, rate).map_err(|e| {
        Error::Platform(platform::PlatformError::Other(format!("escrow {id}: {e}")))
    })?;

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
    let mut accounts = vec![escrow, host];
    let mut balances: Vec<(TenantId, Uuid)> = Vec::new();
    for r in &c.refunds {
        if !balances.iter().any(|(t, _)| *t == r.holder.tenant_id) {
            let a = ledger::account(
                conn,
                AccountKind::RenterBalance,
                Some(r.holder.tenant_id.0),
                currency,
            )?;
            balances.push((r.holder.tenant_id, a));
            accounts.push(a);
        }
    }
    postings::lock_accounts(conn, &accounts)?;
    let reason = req.reason.trim();
    let now = contracts::time::now();
    for r in &c.refunds {
        // Found, not created: opened and locked above with the others.
        let balance = ledger::account(
            conn,
            AccountKind::RenterBalance,
            Some(r.holder.tenant_id.0),
            currency,
        )?;
        let posting_id = format!("escrow_refund:{id}:{}", r.holder.reservation_id);
        let description = format!(
            "reserved block {id} cancelled{}: {} to {} refunded ({reason})",
            if req.by_host { " by the host" } else { "" },
            contracts::time::format(row.instant(r.span.from)),
            contracts::time::format(row.instant(r.span.to)),
        );
        postings::post(
            conn,
            &EscrowPosting {
                id: &posting_id,
                kind: postings::ESCROW_REFUND,
                tenant_id: r.holder.tenant_id,
                fee_rate: None,
                description: &description,
                legs: vec![(escrow, -r.amount), (balance, r.amount)],
                detail: Detail {
                    escrow: id,
                    reservation: r.holder.reservation_id,
                    host_tenant_id: row.host_tenant_id,
                    machine_id: row.machine_id,
                    line: line::REFUND,
                    quantity: r.seconds * i64::from(row.gpu_count),
                    unit_price: row.price_per_gpu_hour,
                    heard_seconds: 0,
                    started_at: row.instant(r.span.from),
                    ended_at: row.instant(r.span.to),
                },
            },
        )?;
    }
    for (holder, share) in &c.penalties {
        // The penalty goes to refund holders, whose accounts are open and locked.
        let balance = ledger::account(
            conn,
            AccountKind::RenterBalance,
            Some(holder.tenant_id.0),
            currency,
        )?;
        let posting_id = format!("escrow_penalty:{id}:{}", holder.reservation_id);
        let description = format!(
            "reserved block {id} cancelled by the host: penalty of {} on the refund ({reason})",
            terms.penalty_rate.normalize()
        );
        postings::post(
            conn,
            &EscrowPosting {
                id: &posting_id,
                kind: postings::ESCROW_PENALTY,
                tenant_id: holder.tenant_id,
                fee_rate: None,
                description: &description,
                legs: vec![(host, -*share), (balance, *share)],
                detail: Detail {
                    escrow: id,
                    reservation: holder.reservation_id,
                    host_tenant_id: row.host_tenant_id,
                    machine_id: row.machine_id,
                    line: line::PENALTY,
                    quantity: 0,
                    unit_price: Decimal::ZERO,
                    heard_seconds: 0,
                    started_at: now,
                    ended_at: now,
                },
            },
        )?;
    }
    let moved = diesel::update(escrows::table.find(id))
        .filter(escrows::state.eq(HELD))
        .filter(escrows::settled_until.eq(row.settled_until))
        .set((
            escrows::refunded.eq(escrows::refunded + c.refund),
            escrows::penalty.eq(c.penalty),
            escrows::state.eq(CANCELLED),
            escrows::cancelled_at.eq(cut),
            escrows::cancelled_by_host.eq(req.by_host),
            escrows::cancel_reason.eq(reason),
        ))
        .execute(conn)?;
    if moved != 1 {
        return Err(Error::Conflict(format!("escrow {id} changed concurrently")));
    }
    for (tenant, _) in &balances {
        crate::invoices::pay_open_invoices(conn, *tenant, settings)?;
    }
    tracing::info!(reservation.id = %id, refund = %c.refund, penalty = %c.penalty, by_host = req.by_host, "escrow cancelled");
    crate::metrics::escrow_refunded(c.refund);
    crate::metrics::escrow_cancelled(c.penalty);
    let row = store::find(conn, id)?
        .ok_or_else(|| Error::NotFound(format!("reservation {id} has no escrow")))?;
    Ok(row.to_api())
}

/// `ESCROW_CANCEL` at `now`.
pub async fn cancel<E: Evidence>(
    db: &platform::Db,
    settings: &Settings,
    terms: &EscrowTerms,
    evidence: &E,
    id: ReservationId,
    req: EscrowCancelRequest,
    now: DateTime<Utc>,
) -> Result<Escrow, Error> {
    let reason = req.reason.trim();
    if reason.is_empty() || reason.chars().count() > 500 {
        return Err(Error::Validation("reason: 1 to 500 characters".into()));
    }
    let row = db
        .run(move |conn| store::find(conn, id).map_err(Error::from))
        .await?
        .ok_or_else(|| Error::NotFound(format!("reservation {id} has no escrow")))?;
    if !row.held() {
        return Ok(row.to_api());
    }
    // Seconds after now are not run yet: they are refunded, whatever `at`.
    let cut = req.at.min(now).min(row.ends_at);
    let gaps = if cut > row.settled_until {
        evidence
            .gaps(row.machine_id, row.host_tenant_id, row.settled_until, cut)
            .await
            .map_err(|error| {
                tracing::warn!(reservation.id = %id, %error, "cancellation refused: no heartbeat evidence");
                Error::Unavailable(format!(
                    "the machine's heartbeat record cannot be read now to settle reservation {id} \
                     before cancelling it; nothing was changed, try again"
                ))
            })?
    } else {
        Vec::new()
    };
    let (settings, terms) = (settings.clone(), terms.clone());
    db.tx(move |conn| cancel_in(conn, &settings, &terms, id, &req, cut, &gaps))
        .await
}
