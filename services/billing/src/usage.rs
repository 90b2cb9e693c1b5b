//! Usage posted one event at a time, credits, and the reads renters and hosts see (balances, funds checks, earnings); rating lives in `rating`.

use chrono::{DateTime, Utc};
use contracts::ids::{InstanceId, TenantId};
use contracts::{Envelope, api, money};
use diesel::prelude::*;
use platform::Db;
use platform::consumer::HandlerError;
use rust_decimal::Decimal;
use schema::billing::{accounts, entries, transactions};
use schema::billing_credits::credit_grants;
use uuid::Uuid;

use crate::ledger::{self, AccountKind, Posting};
use crate::{Error, Settings};

/// Posts one usage segment (or credits one downtime): a batch of one through
/// [`crate::ingest::apply_batch`], the path the consumer takes for many.
pub fn apply_event(
    conn: &mut PgConnection,
    envelope: &Envelope,
    settings: &Settings,
) -> Result<(), HandlerError> {
    crate::ingest::apply_batch(conn, &[envelope], settings)
}

pub async fn grant_credit(
    db: &Db,
    settings: &Settings,
    req: api::GrantCreditRequest,
) -> Result<api::Balance, Error> {
    if req.amount <= Decimal::ZERO || req.amount.scale() > 9 {
        return Err(Error::Validation(
            "amount: a positive amount with at most 9 decimals".into(),
        ));
    }
    if req.idempotency_key.is_empty() || req.idempotency_key.len() > 200 {
        return Err(Error::Validation(
            "idempotencyKey: 1 to 200 characters".into(),
        ));
    }
    let currency = settings.currency.clone();
    let settings = settings.clone();
    db.tx(move |conn| {
        // The key names one grant: a replay with the same tenant, amount and
        // reason answers again, anything else is a CONFLICT.
        let same_grant = |conn: &mut PgConnection| -> Result<(), Error> {
            let first: Option<(Uuid, Decimal, String)> = credit_grants::table
                .find(&req.idempotency_key)
                .select((
                    credit_grants::tenant_id,
                    credit_grants::amount,
                    credit_grants::reason,
                ))
                .first(conn)
                .optional()?;
            match first {
                Some((tenant, amount, reason))
                    if tenant == req.tenant_id && amount == req.amount && reason == req.reason =>
                {
                    Ok(())
                }
                _ => Err(Error::Conflict(
                    "idempotencyKey: already used for another credit grant".into(),
                )),
            }
        };
        let granted_before: i64 = credit_grants::table
            .filter(credit_grants::idempotency_key.eq(&req.idempotency_key))
            .count()
            .get_result(conn)?;
        if granted_before > 0 {
            same_grant(conn)?;
        } else {
            let renter = ledger::account(
                conn,
                AccountKind::RenterBalance,
                Some(req.tenant_id.into()),
                &currency,
            )?;
            let clearing = ledger::account(conn, AccountKind::PaymentClearing, None, &currency)?;
            let id = format!("credit:{}:{}", req.tenant_id, req.idempotency_key);
            let posted = ledger::post(
                conn,
                &Posting {
                    id: &id,
                    kind: "credit",
                    tenant_id: Some(req.tenant_id.into()),
                    instance_id: None,
                    fee_rate: None,
                    description: &req.reason,
                    legs: &[(clearing, -req.amount), (renter, req.amount)],
                },
            )?;
            let recorded = posted
                && diesel::insert_into(credit_grants::table)
                    .values((
                        credit_grants::idempotency_key.eq(&req.idempotency_key),
                        credit_grants::tenant_id.eq(req.tenant_id),
                        credit_grants::amount.eq(req.amount),
                        credit_grants::reason.eq(&req.reason),
                        credit_grants::transaction_id.eq(&id),
                    ))
                    .on_conflict_do_nothing()
                    .execute(conn)?
                    == 1;
            if !recorded {
                // A concurrent grant with this key committed first: compare
                // with it (an error rolls back this one's posting).
                same_grant(conn)?;
            }
        }
        crate::invoices::pay_open_invoices(conn, req.tenant_id, &settings)?;
        Ok(api::Balance {
            tenant_id: req.tenant_id,
            amount: ledger::balance(conn, AccountKind::RenterBalance, req.tenant_id, &currency)?,
            currency,
        })
    })
    .await
}

pub async fn balance(
    db: &Db,
    settings: &Settings,
    tenant_id: TenantId,
) -> Result<api::Balance, Error> {
    let currency = settings.currency.clone();
    db.run(move |conn| {
        Ok(api::Balance {
            tenant_id,
            amount: ledger::balance(conn, AccountKind::RenterBalance, tenant_id, &currency)?,
            currency,
        })
    })
    .await
}

pub async fn funds_check(
    db: &Db,
    settings: &Settings,
    req: api::FundsCheckRequest,
) -> Result<api::Balance, Error> {
    let balance = balance(db, settings, req.tenant_id).await?;
    if balance.amount < req.required {
        return Err(Error::InsufficientFunds(format!(
            "balance {} {} is below the {} {} needed to start this order",
            money::round_to_minor(balance.amount, &balance.currency),
            balance.currency,
            money::round_to_minor(req.required, &balance.currency),
            balance.currency
        )));
    }
    Ok(balance)
}

/// One entry of a posting that touched a host's earnings: transaction id,
/// instance, fee rate, time, account kind, account tenant, amount.
type Leg = (
    String,
    Option<Uuid>,
    Option<Decimal>,
    DateTime<Utc>,
    String,
    Option<Uuid>,
    Decimal,
);

pub async fn earnings(
    db: &Db,
    settings: &Settings,
    host_tenant_id: TenantId,
) -> Result<api::HostEarnings, Error> {
    let currency = settings.currency.clone();
    db.run(move |conn| {
        let total = ledger::balance(conn, AccountKind::HostEarnings, host_tenant_id, &currency)?;
        // Every transaction touching the host's account, with all its legs, so
        // each line shows gross, fee and net side by side.
        let host_txns: Vec<String> = entries::table
            .inner_join(accounts::table)
            .filter(accounts::kind.eq(AccountKind::HostEarnings.as_str()))
            .filter(accounts::tenant_id.eq(host_tenant_id))
            .order(entries::id.desc())
            .limit(1000)
            .select(entries::transaction_id)
            .load(conn)?;
        let legs: Vec<Leg> = entries::table
            .inner_join(transactions::table)
            .inner_join(accounts::table)
            .filter(entries::transaction_id.eq_any(host_txns))
            .order((transactions::created_at.desc(), transactions::id.asc()))
            .select((
                transactions::id,
                transactions::instance_id,
                transactions::fee_rate,
                transactions::created_at,
                accounts::kind,
                accounts::tenant_id,
                entries::amount,
            ))
            .load(conn)?;
        let mut postings: Vec<api::EarningPosting> = Vec::new();
        for (txn, instance_id, fee_rate, at, kind, tenant, amount) in legs {
            if postings.last().is_none_or(|p| p.transaction_id != txn) {
                postings.push(api::EarningPosting {
                    transaction_id: txn,
                    instance_id: instance_id.map(InstanceId),
                    gross: Decimal::ZERO,
                    fee: Decimal::ZERO,
                    net: Decimal::ZERO,
                    fee_rate: fee_rate.unwrap_or_default(),
                    posted_at: at,
                });
            }
            let Some(line) = postings.last_mut() else {
                continue;
            };
            match kind.as_str() {
                "host_earnings" if tenant == Some(host_tenant_id.into()) => line.net += amount,
                "platform_fee" => line.fee += amount,
                _ => {}
            }
            line.gross = line.net + line.fee;
        }
        Ok(api::HostEarnings {
            host_tenant_id,
            total,
            currency,
            postings,
        })
    })
    .await
}
