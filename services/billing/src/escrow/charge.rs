//! `ESCROW_CHARGE`: a booked block paid up front, renter balance → the
//! renter's escrow account (posting `reservation:<id>`), with the escrow
//! row and its first holder (the renter, for the whole block), in one
//! transaction. The balance is checked under the account's lock, so two
//! charges (or a charge and usage) never overdraw it between them, and the
//! charge counts as the month's spend, refused past the monthly budget.

use chrono::{DateTime, Utc};
use contracts::endpoints;
use contracts::ids::TenantId;
use contracts::reservations::{self, Escrow, EscrowChargeRequest};
use diesel::prelude::*;
use platform::internal::InternalClient;
use rust_decimal::Decimal;
use schema::billing_escrow::escrows;
use schema::billing_spend::spend_caps;

use super::math::{self, Block};
use super::postings::{self, Detail, EscrowPosting, line};
use super::store::{self, EscrowRow, HELD};
use crate::ledger::{self, AccountKind};
use crate::{Error, Settings};

/// The highest price per GPU-hour an escrow takes (the catalog's prices are
/// far below; this only keeps the arithmetic bounded).
pub const MAX_PRICE_PER_GPU_HOUR: i64 = 1_000_000;

/// The most GPUs one reservation books (a machine has fewer).
pub const MAX_GPUS: i32 = 1024;

/// The tenant's monthly budget as quota says now: `Some(None)` for no
/// budget, None when quota did not answer (the copy billing keeps is used).
pub async fn live_budget(quota: &InternalClient, tenant_id: TenantId) -> Option<Option<Decimal>> {
    match quota
        .call(endpoints::quota::TENANT_QUOTA, tenant_id, &())
        .await
    {
        Ok(q) => Some(q.limits.monthly_budget),
        Err(error) => {
            tracing::warn!(tenant.id = %tenant_id, %error, "quota did not answer; the budget copy is used");
            None
        }
    }
}

/// Refuses `amount` more spend this month past the tenant's budget
/// (`QUOTA_EXCEEDED`, the code budgets are refused with), `spent` being the
/// month's spend read under its row lock.
pub(crate) fn check_budget(
    conn: &mut PgConnection,
    settings: &Settings,
    tenant_id: TenantId,
    spent: Decimal,
    amount: Decimal,
    live: Option<Option<Decimal>>,
) -> Result<(), Error> {
    let cap = match live {
        Some(cap) => cap,
        None => spend_caps::table
            .find(tenant_id)
            .select(spend_caps::monthly_cap)
            .first::<Option<Decimal>>(conn)
            .optional()?
            .flatten(),
    };
    if let Some(cap) = cap
        && spent + amount > cap
    {
        let c = &settings.currency;
        return Err(Error::QuotaExceeded(format!(
            "quota monthly_budget exceeded: spent {} {c} this month, {} {c} more would pass the budget of {} {c}",
            spent.normalize(),
            amount.normalize(),
            cap.normalize()
        )));
    }
    Ok(())
}

/// The request's shape, checked before anything is read.
fn check(settings: &Settings, req: &EscrowChargeRequest) -> Result<i64, Error> {
    if !(1..=MAX_GPUS).contains(&req.gpu_count) {
        return Err(Error::Validation(format!(
            "gpuCount: between 1 and {MAX_GPUS}"
        )));
    }
    if !reservations::whole_hour(req.starts_at) || !reservations::whole_hour(req.ends_at) {
        return Err(Error::Validation(
            "startsAt and endsAt must be whole UTC hours".into(),
        ));
    }
    if req.ends_at <= req.starts_at {
        return Err(Error::Validation("endsAt must be after startsAt".into()));
    }
    let hours = reservations::hours(req.starts_at, req.ends_at);
    if hours > reservations::MAX_BLOCK_HOURS {
        return Err(Error::Validation(format!(
            "a block is at most {} hours",
            reservations::MAX_BLOCK_HOURS
        )));
    }
    if req.price_per_gpu_hour <= Decimal::ZERO
        || req.price_per_gpu_hour > Decimal::from(MAX_PRICE_PER_GPU_HOUR)
        || math::nanos(req.price_per_gpu_hour).is_none()
    {
        return Err(Error::Validation(format!(
            "pricePerGpuHour: positive, at most {MAX_PRICE_PER_GPU_HOUR}, with at most 9 decimals"
        )));
    }
    let expected = math::block_amount(req.price_per_gpu_hour, req.gpu_count, hours)
        .ok_or_else(|| Error::Validation("amount: out of range".into()))?;
    if req.amount != expected {
        return Err(Error::Validation(format!(
            "amount: {} is not pricePerGpuHour × gpuCount × hours = {} × {} × {} = {}",
            req.amount.normalize(),
            req.price_per_gpu_hour.normalize(),
            req.gpu_count,
            hours,
            expected.normalize()
        )));
    }
    if req.currency != settings.currency {
        return Err(Error::Validation(format!(
            "currency: the ledger settles in {}, not {}",
            settings.currency, req.currency
        )));
    }
    // The math takes it (amount and length within bounds).
    Block::new(req.amount, hours * 3600).map_err(|e| Error::Validation(format!("amount: {e}")))?;
    Ok(hours)
}

/// Whether an existing escrow is the one this request asks for.
fn same(row: &EscrowRow, req: &EscrowChargeRequest) -> bool {
    row.renter_tenant_id == req.renter_tenant_id
        && row.host_tenant_id == req.host_tenant_id
        && row.machine_id == req.machine_id
        && row.gpu_count == req.gpu_count
        && row.starts_at == req.starts_at
        && row.ends_at == req.ends_at
        && row.price_per_gpu_hour == req.price_per_gpu_hour
        && row.amount == req.amount
        && row.currency == req.currency
}

/// Charges the block into escrow, in the caller's transaction; the same
/// escrow again for the same request (a retry), CONFLICT for another
/// request under the same reservation id.
pub fn charge_in(
    conn: &mut PgConnection,
    settings: &Settings,
    req: &EscrowChargeRequest,
    live_budget: Option<Option<Decimal>>,
    now: DateTime<Utc>,
) -> Result<Escrow, Error> {
    let hours = check(settings, req)?;
    let currency = settings.currency.as_str();
    let renter = req.renter_tenant_id;
    let month = crate::spend::month_of(now);
    let answer = |row: EscrowRow| {
        if same(&row, req) {
            Ok(row.to_api())
        } else {
            Err(Error::Conflict(format!(
                "reservation {} is charged already, with other terms",
                req.reservation_id
            )))
        }
    };
    // A retry of a charge made: answered without taking any lock.
    if let Some(row) = store::find(conn, req.reservation_id)? {
        return answer(row);
    }
    // Spend row, then accounts (in id order), as ingest takes them.
    let spent = postings::lock_month_spend(conn, renter, month, currency)?;
    let balance_account =
        ledger::account(conn, AccountKind::RenterBalance, Some(renter.0), currency)?;
    let escrow_account = ledger::account(conn, AccountKind::Escrow, Some(renter.0), currency)?;
    postings::lock_accounts(conn, &[balance_account, escrow_account])?;
    // After the locks: a concurrent charge of this id has committed by now.
    if let Some(row) = store::find(conn, req.reservation_id)? {
        return answer(row);
    }
    if req.starts_at <= now {
        return Err(Error::Validation("startsAt must be in the future".into()));
    }
    let balance = ledger::balance(conn, AccountKind::RenterBalance, renter, currency)?;
    if balance < req.amount {
        return Err(Error::InsufficientFunds(format!(
            "balance {} {currency} does not cover the block's {} {currency}",
            balance.normalize(),
            req.amount.normalize()
        )));
    }
    check_budget(conn, settings, renter, spent, req.amount, live_budget)?;

    let id = format!("reservation:{}", req.reservation_id);
    let description = format!(
        "reserved block {}: {} GPU × {} h at {} {currency}/GPU-hour, {} to {}, into escrow",
        req.reservation_id,
        req.gpu_count,
        hours,
        req.price_per_gpu_hour.normalize(),
        contracts::time::format(req.starts_at),
        contracts::time::format(req.ends_at),
    );
    // The escrow row first: the details row names it. The same id charged
    // concurrently for another renter (other accounts, so not serialised
    // by their locks) meets this insert: answered as a conflict.
    let inserted = diesel::insert_into(escrows::table)
        .values((
            escrows::reservation_id.eq(req.reservation_id),
            escrows::renter_tenant_id.eq(renter),
            escrows::host_tenant_id.eq(req.host_tenant_id),
            escrows::machine_id.eq(req.machine_id),
            escrows::currency.eq(currency),
            escrows::gpu_count.eq(req.gpu_count),
            escrows::price_per_gpu_hour.eq(req.price_per_gpu_hour),
            escrows::amount.eq(req.amount),
            escrows::fee_rate.eq(settings.fee_rate),
            escrows::starts_at.eq(req.starts_at),
            escrows::ends_at.eq(req.ends_at),
            escrows::settled_until.eq(req.starts_at),
            escrows::state.eq(HELD),
        ))
        .on_conflict_do_nothing()
        .execute(conn)?;
    if inserted == 0 {
        let row = store::find(conn, req.reservation_id)?.ok_or_else(|| {
            Error::Conflict(format!(
                "reservation {} is being charged",
                req.reservation_id
            ))
        })?;
        return answer(row);
    }
    postings::post(
        conn,
        &EscrowPosting {
            id: &id,
            kind: postings::RESERVATION,
            tenant_id: renter,
            fee_rate: None,
            description: &description,
            legs: vec![(balance_account, -req.amount), (escrow_account, req.amount)],
            detail: Detail {
                escrow: req.reservation_id,
                reservation: req.reservation_id,
                host_tenant_id: req.host_tenant_id,
                machine_id: req.machine_id,
                line: line::PURCHASE,
                quantity: i64::from(req.gpu_count) * hours * 3600,
                unit_price: req.price_per_gpu_hour,
                heard_seconds: 0,
                started_at: req.starts_at,
                ended_at: req.ends_at,
            },
        },
    )?;
    let row = store::find(conn, req.reservation_id)?
        .ok_or_else(|| Error::NotFound(format!("escrow {} vanished", req.reservation_id)))?;
    store::replace_holdings(
        conn,
        &row,
        &[math::Holding {
            span: math::Span::new(0, row.seconds()),
            holder: store::Holder {
                tenant_id: renter,
                reservation_id: req.reservation_id,
            },
        }],
    )?;
    crate::spend::charges_posted(
        conn,
        settings,
        &[crate::spend::Charge {
            tenant_id: renter,
            amount: req.amount,
            usage_at: now,
            correlation_id: None,
        }],
    )
    .map_err(|e| Error::Platform(platform::PlatformError::Other(e.to_string())))?;
    tracing::info!(reservation.id = %req.reservation_id, tenant.id = %renter, amount = %req.amount, "reserved block charged into escrow");
    crate::metrics::escrow_charged(req.amount);
    Ok(row.to_api())
}

/// `ESCROW_CHARGE`.
pub async fn charge(
    db: &platform::Db,
    settings: &Settings,
    quota: &InternalClient,
    req: EscrowChargeRequest,
) -> Result<Escrow, Error> {
    check(settings, &req)?;
    let live = live_budget(quota, req.renter_tenant_id).await;
    let settings = settings.clone();
    db.tx(move |conn| charge_in(conn, &settings, &req, live, contracts::time::now()))
        .await
}
