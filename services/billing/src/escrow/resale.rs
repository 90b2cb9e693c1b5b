//! `RESALE_TRANSFER`: a buyer pays the seller for future hours of a
//! reservation, less the published resale fee (`GPUMARKET_RESALE_FEE_RATE`,
//! `round_half_even(amount × rate, 9)`), and from then on the refunds of
//! those hours go to the buyer (the holder rows are split at the hours'
//! bounds). The escrow stays the original reservation's: the host is paid
//! for the hours as before. Idempotent per listing; one transaction.
//!
//! The money is two postings, each with one renter balance (so each is on
//! its renter's invoice, as every reservation posting is): the buyer's half
//! `resale:<listing>` (buyer −amount → the platform's escrow account) and
//! the seller's half `resale:<listing>:sale` (that account −amount → seller
//! +amount − fee, platform fee +fee). The platform's escrow account is the
//! transfer account docs/scaling.md describes for postings split by tenant;
//! it is back to zero at every commit.

use chrono::{DateTime, Utc};
use contracts::ids::{ReservationId, TenantId};
use contracts::reservations::{self, ResaleTransfer, ResaleTransferRequest};
use diesel::prelude::*;
use platform::internal::InternalClient;
use rust_decimal::{Decimal, RoundingStrategy};
use schema::billing_escrow::resale_transfers;

use super::charge::{check_budget, live_budget};
use super::math::{self, Span};
use super::postings::{self, Detail, EscrowPosting, line};
use super::store::{self, Holder};
use super::terms::EscrowTerms;
use crate::ledger::{self, AccountKind};
use crate::{Error, Settings};

#[derive(Queryable, Selectable)]
#[diesel(table_name = resale_transfers)]
struct TransferRow {
    escrow_reservation_id: ReservationId,
    child_reservation_id: ReservationId,
    buyer_tenant_id: TenantId,
    seller_tenant_id: TenantId,
    amount: Decimal,
    fee: Decimal,
    seller_credit: Decimal,
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
}

fn check(req: &ResaleTransferRequest) -> Result<(), Error> {
    if req.amount <= Decimal::ZERO
        || req.amount > Decimal::from(math::MAX_AMOUNT)
        || math::nanos(req.amount).is_none()
    {
        return Err(Error::Validation(
            "amount: positive, with at most 9 decimals".into(),
        ));
    }
    if !reservations::whole_hour(req.starts_at) || !reservations::whole_hour(req.ends_at) {
        return Err(Error::Validation(
            "startsAt and endsAt must be whole UTC hours".into(),
        ));
    }
    if req.ends_at <= req.starts_at {
        return Err(Error::Validation("endsAt must be after startsAt".into()));
    }
    if req.buyer_tenant_id == req.seller_tenant_id {
        return Err(Error::Validation(
            "buyerTenantId: a tenant cannot buy its own hours".into(),
        ));
    }
    if req.child_reservation_id == req.escrow_reservation_id {
        return Err(Error::Validation(
            "childReservationId: must not be the escrow's reservation".into(),
        ));
    }
    Ok(())
}

fn answer(listing: &ResaleTransferRequest, t: &TransferRow) -> ResaleTransfer {
    ResaleTransfer {
        listing_id: listing.listing_id,
        amount: t.amount,
        seller_credit: t.seller_credit,
        fee: t.fee,
    }
}

/// The transfer in the caller's transaction.
pub fn transfer_in(
    conn: &mut PgConnection,
    settings: &Settings,
    terms: &EscrowTerms,
    req: &ResaleTransferRequest,
    live_budget: Option<Option<Decimal>>,
    now: DateTime<Utc>,
) -> Result<ResaleTransfer, Error> {
    check(req)?;
    let currency = settings.currency.as_str();
    let buyer = req.buyer_tenant_id;
    let seller = req.seller_tenant_id;
    let existing = |conn: &mut PgConnection| -> Result<Option<ResaleTransfer>, Error> {
        let found: Option<TransferRow> = resale_transfers::table
            .find(req.listing_id)
            .select(TransferRow::as_select())
            .first(conn)
            .optional()?;
        let Some(t) = found else {
            return Ok(None);
        };
        let same = t.escrow_reservation_id == req.escrow_reservation_id
            && t.child_reservation_id == req.child_reservation_id
            && t.buyer_tenant_id == buyer
            && t.seller_tenant_id == seller
            && t.amount == req.amount
            && t.starts_at == req.starts_at
            && t.ends_at == req.ends_at;
        if same {
            Ok(Some(answer(req, &t)))
        } else {
            Err(Error::Conflict(format!(
                "listing {} was transferred already, with other terms",
                req.listing_id
            )))
        }
    };
    // A retry of a transfer made: answered without taking any lock.
    if let Some(done) = existing(conn)? {
        return Ok(done);
    }
    // The buyer's spend row, then the escrow, then the accounts.
    let spent = postings::lock_month_spend(conn, buyer, crate::spend::month_of(now), currency)?;
    let row = store::lock(conn, req.escrow_reservation_id)?;
    // After the escrow's lock: a concurrent transfer of this listing has
    // committed by now.
    if let Some(done) = existing(conn)? {
        return Ok(done);
    }
    let not_found = || {
        Error::NotFound(format!(
            "reservation {} not found",
            req.escrow_reservation_id
        ))
    };
    let row = row.ok_or_else(not_found)?;
    let child_taken: i64 = resale_transfers::table
        .filter(resale_transfers::child_reservation_id.eq(req.child_reservation_id))
        .count()
        .get_result(conn)?;
    if child_taken > 0 {
        return Err(Error::Conflict(format!(
            "childReservationId: reservation {} bought other hours already",
            req.child_reservation_id
        )));
    }
    let holdings = store::holdings(conn, &row)?;
    // A seller holding none of it is told what a random id gets.
    if !holdings.iter().any(|h| h.holder.tenant_id == seller) {
        return Err(not_found());
    }
    if !row.held() {
        return Err(Error::Conflict(format!(
            "reservation {} is {}: its hours cannot be sold",
            row.reservation_id, row.state
        )));
    }
    if req.starts_at < row.starts_at || req.ends_at > row.ends_at {
        return Err(Error::Validation(
            "startsAt and endsAt: hours inside the reservation's block".into(),
        ));
    }
    if req.starts_at <= now || req.starts_at < row.settled_until {
        return Err(Error::Validation(
            "startsAt: hours that have started cannot be bought".into(),
        ));
    }
    let span = Span::new(row.offset(req.starts_at), row.offset(req.ends_at));
    let next = math::transfer(
        &holdings,
        span,
        |h| h.tenant_id == seller,
        Holder {
            tenant_id: buyer,
            reservation_id: req.child_reservation_id,
        },
    )
    .map_err(|_| {
        Error::Conflict(
            "the seller does not hold every one of these hours (sold or cancelled)".into(),
        )
    })?;
    // The seller's own reservation for these hours, named on its line.
    let seller_reservation = holdings
        .iter()
        .find(|h| h.span.contains(span.from))
        .map(|h| h.holder.reservation_id)
        .unwrap_or(row.reservation_id);

    let buyer_account = ledger::account(conn, AccountKind::RenterBalance, Some(buyer.0), currency)?;
    let seller_account =
        ledger::account(conn, AccountKind::RenterBalance, Some(seller.0), currency)?;
    let transfer_account = ledger::account(conn, AccountKind::Escrow, None, currency)?;
    let fee_account = ledger::account(conn, AccountKind::PlatformFee, None, currency)?;
    postings::lock_accounts(
        conn,
        &[buyer_account, seller_account, transfer_account, fee_account],
    )?;
    let balance = ledger::balance(conn, AccountKind::RenterBalance, buyer, currency)?;
    if balance < req.amount {
        return Err(Error::InsufficientFunds(format!(
            "balance {} {currency} does not cover these hours' {} {currency}",
            balance.normalize(),
            req.amount.normalize()
        )));
    }
    check_budget(conn, settings, buyer, spent, req.amount, live_budget)?;

    let fee = math::resale_fee(req.amount, terms.resale_fee_rate);
    let credit = req.amount - fee;
    let hours = reservations::hours(req.starts_at, req.ends_at);
    let gpu_seconds = i64::from(row.gpu_count) * span.seconds();
    let unit_price = (req.amount / Decimal::from(i64::from(row.gpu_count) * hours))
        .round_dp_with_strategy(9, RoundingStrategy::MidpointNearestEven);
    let detail = |line: &'static str, reservation: ReservationId| Detail {
        escrow: row.reservation_id,
        reservation,
        host_tenant_id: row.host_tenant_id,
        machine_id: row.machine_id,
        line,
        quantity: gpu_seconds,
        unit_price,
        heard_seconds: 0,
        started_at: req.starts_at,
        ended_at: req.ends_at,
    };
    let hours_text = format!(
        "{} to {} of reserved block {}",
        contracts::time::format(req.starts_at),
        contracts::time::format(req.ends_at),
        row.reservation_id
    );
    let id = format!("resale:{}", req.listing_id);
    let bought = format!(
        "bought on resale (listing {}): {hours_text}",
        req.listing_id
    );
    postings::post(
        conn,
        &EscrowPosting {
            id: &id,
            kind: postings::RESALE,
            tenant_id: buyer,
            fee_rate: None,
            description: &bought,
            legs: vec![(buyer_account, -req.amount), (transfer_account, req.amount)],
            detail: detail(line::RESALE_PURCHASE, req.child_reservation_id),
        },
    )?;
    let sale_id = format!("resale:{}:sale", req.listing_id);
    let sold = format!(
        "sold on resale (listing {}): {hours_text}, less the {} resale fee",
        req.listing_id,
        terms.resale_fee_rate.normalize()
    );
    postings::post(
        conn,
        &EscrowPosting {
            id: &sale_id,
            kind: postings::RESALE,
            tenant_id: seller,
            fee_rate: Some(terms.resale_fee_rate),
            description: &sold,
            legs: vec![
                (transfer_account, -req.amount),
                (seller_account, credit),
                (fee_account, fee),
            ],
            detail: detail(line::RESALE_SALE, seller_reservation),
        },
    )?;
    store::replace_holdings(conn, &row, &next)?;
    diesel::insert_into(resale_transfers::table)
        .values((
            resale_transfers::listing_id.eq(req.listing_id),
            resale_transfers::escrow_reservation_id.eq(req.escrow_reservation_id),
            resale_transfers::child_reservation_id.eq(req.child_reservation_id),
            resale_transfers::buyer_tenant_id.eq(buyer),
            resale_transfers::seller_tenant_id.eq(seller),
            resale_transfers::amount.eq(req.amount),
            resale_transfers::fee.eq(fee),
            resale_transfers::seller_credit.eq(credit),
            resale_transfers::starts_at.eq(req.starts_at),
            resale_transfers::ends_at.eq(req.ends_at),
            resale_transfers::transaction_id.eq(&id),
        ))
        .execute(conn)?;
    crate::spend::charges_posted(
        conn,
        settings,
        &[crate::spend::Charge {
            tenant_id: buyer,
            amount: req.amount,
            usage_at: now,
            correlation_id: None,
        }],
    )
    .map_err(|e| Error::Platform(platform::PlatformError::Other(e.to_string())))?;
    crate::invoices::pay_open_invoices(conn, seller, settings)?;
    tracing::info!(listing.id = %req.listing_id, reservation.id = %row.reservation_id, amount = %req.amount, %fee, "resale transferred");
    crate::metrics::resale_transferred(req.amount);
    Ok(ResaleTransfer {
        listing_id: req.listing_id,
        amount: req.amount,
        seller_credit: credit,
        fee,
    })
}

/// `RESALE_TRANSFER`.
pub async fn transfer(
    db: &platform::Db,
    settings: &Settings,
    terms: &EscrowTerms,
    quota: &InternalClient,
    req: ResaleTransferRequest,
) -> Result<ResaleTransfer, Error> {
    check(&req)?;
    let live = live_budget(quota, req.buyer_tenant_id).await;
    let (settings, terms) = (settings.clone(), terms.clone());
    db.tx(move |conn| transfer_in(conn, &settings, &terms, &req, live, contracts::time::now()))
        .await
}
