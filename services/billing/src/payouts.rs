//! Host payouts through Stripe Connect (docs/payouts.md). A host with a
//! connected account whose available earnings reach the minimum is paid the
//! minor-unit floor of them by a Stripe transfer, and the ledger records it
//! as one posting `payout:{id}` (host_earnings → payouts); the sub-minor-unit
//! residue stays in the earnings for the next payout.
//!
//! Crash safety: the payout is written `pending` (with its amount) before
//! Stripe is called, and the transfer's idempotency key derives from its id.
//! A host has at most one pending payout, and a run resumes it rather than
//! computing a new amount, so whatever dies between the Stripe call and the
//! `paid` update is repaired by the next run: Stripe answers the same key
//! with the same transfer, and the posting is made once (its id is the
//! payout's). A transfer Stripe refuses leaves the earnings untouched and the
//! payout `failed` with Stripe's reason.

use contracts::ids::TenantId;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use contracts::states::PayoutStatus;
use contracts::{api, money};
use diesel::prelude::*;
use platform::{Config, Db};
use rust_decimal::Decimal;
use schema::billing::{accounts, entries, transactions};
use schema::billing_payouts::{payout_accounts, payouts};
use uuid::Uuid;

use crate::ledger::{self, AccountKind, Posting};
use crate::stripe::connect::{AccountView, ConnectApi, NewTransfer, TransferError};
use crate::stripe::minor_units;
use crate::{Error, Settings};

/// Payouts a listing returns at most.
const LIST_LIMIT: i64 = 100;

/// The payout side of billing's settings, checked once at start-up.
#[derive(Debug, Clone)]
pub struct PayoutSettings {
    /// The smallest payout, in the settlement currency.
    pub minimum: Decimal,
    /// Earnings credited less than this long ago are not paid out yet.
    pub hold_seconds: i64,
    /// Between two runs of the payout loop; None: no loop.
    pub interval: Option<Duration>,
}

impl PayoutSettings {
    pub fn from_config(config: &Config) -> Result<Self, Error> {
        let settings = config.settings::<crate::BillingSettings>()?;
        let minimum = settings
            .payout_minimum
            .parse::<Decimal>()
            .ok()
            .filter(|m| *m > Decimal::ZERO)
            .ok_or_else(|| {
                Error::Validation(format!(
                    "GPUMARKET_PAYOUT_MINIMUM: {:?} is not a positive decimal",
                    settings.payout_minimum
                ))
            })?;
        if settings.payout_hold_seconds < 0 {
            return Err(Error::Validation(
                "GPUMARKET_PAYOUT_HOLD_SECONDS: must not be negative".into(),
            ));
        }
        Ok(Self {
            minimum,
            hold_seconds: settings.payout_hold_seconds,
            interval: (settings.payout_interval_secs > 0)
                .then(|| Duration::from_secs(settings.payout_interval_secs)),
        })
    }
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = payout_accounts)]
struct AccountRow {
    host_tenant_id: TenantId,
    stripe_account_id: String,
    country: String,
    email: Option<String>,
    transfers_status: String,
    payouts_enabled: bool,
    details_submitted: bool,
    created_at: DateTime<Utc>,
}

impl From<AccountRow> for api::PayoutAccount {
    fn from(a: AccountRow) -> Self {
        Self {
            host_tenant_id: a.host_tenant_id,
            stripe_account_id: a.stripe_account_id,
            country: a.country,
            email: a.email,
            transfers_status: a.transfers_status,
            payouts_enabled: a.payouts_enabled,
            details_submitted: a.details_submitted,
            created_at: a.created_at,
        }
    }
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = payouts)]
struct PayoutRow {
    id: Uuid,
    host_tenant_id: TenantId,
    stripe_account_id: String,
    amount: Decimal,
    amount_minor: i64,
    currency: String,
    status: PayoutStatus,
    stripe_transfer_id: Option<String>,
    transaction_id: Option<String>,
    failure_reason: Option<String>,
    created_at: DateTime<Utc>,
    paid_at: Option<DateTime<Utc>>,
}

impl From<PayoutRow> for api::Payout {
    fn from(p: PayoutRow) -> Self {
        Self {
            id: p.id,
            host_tenant_id: p.host_tenant_id,
            stripe_account_id: p.stripe_account_id,
            amount: minor_units::from_minor(p.amount_minor, &p.currency),
            currency: p.currency,
            status: p.status,
            stripe_transfer_id: p.stripe_transfer_id,
            transaction_id: p.transaction_id,
            failure_reason: p.failure_reason,
            created_at: p.created_at,
            paid_at: p.paid_at,
        }
    }
}

fn check_country(country: &str) -> Result<String, Error> {
    let upper = country.trim().to_ascii_uppercase();
    if upper.len() != 2 || !upper.chars().all(|c| c.is_ascii_uppercase()) {
        return Err(Error::Validation(
            "country: an ISO 3166-1 alpha-2 code such as US or DE".into(),
        ));
    }
    Ok(upper)
}

fn find_account(conn: &mut PgConnection, host: Uuid) -> QueryResult<Option<AccountRow>> {
    payout_accounts::table
        .find(host)
        .select(AccountRow::as_select())
        .first(conn)
        .optional()
}

/// Stores what Stripe says of the account now.
async fn store_view(db: &Db, host: Uuid, view: AccountView) -> Result<AccountRow, Error> {
    db.run(move |conn| {
        diesel::update(payout_accounts::table.find(host))
            .filter(payout_accounts::stripe_account_id.eq(&view.id))
            .set((
                payout_accounts::transfers_status.eq(&view.transfers_status),
                payout_accounts::payouts_enabled.eq(view.payouts_enabled),
                payout_accounts::details_submitted.eq(view.details_submitted),
                payout_accounts::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)?;
        find_account(conn, host)?
            .ok_or_else(|| Error::NotFound("the host has no payout account".into()))
    })
    .await
}

/// The host's connected account, created at Stripe on the first call.
/// Concurrent or repeated first calls send the same Stripe idempotency key
/// and so get the same account; the row is written once. A repeat with
/// another country returns the account as it is (`CONFLICT` would strand a
/// host whose first answer was lost).
pub async fn create_account(
    db: &Db,
    api: &ConnectApi,
    req: api::CreatePayoutAccountRequest,
) -> Result<api::PayoutAccount, Error> {
    let country = check_country(&req.country)?;
    let email = match req.email.map(|e| e.trim().to_owned()) {
        Some(e) if e.is_empty() => None,
        Some(e) if e.len() > 320 || !e.contains('@') => {
            return Err(Error::Validation("email: an e-mail address".into()));
        }
        other => other,
    };
    let host = req.host_tenant_id;
    if let Some(row) = db
        .run(move |conn| Ok::<_, Error>(find_account(conn, host.into())?))
        .await?
    {
        return Ok(row.into());
    }
    let view = api.create_account(host, &country, email.as_deref()).await?;
    let row = db
        .run(move |conn| {
            diesel::insert_into(payout_accounts::table)
                .values((
                    payout_accounts::host_tenant_id.eq(host),
                    payout_accounts::stripe_account_id.eq(&view.id),
                    payout_accounts::country.eq(view.country.as_deref().unwrap_or(&country)),
                    payout_accounts::email.eq(view.email.as_ref().or(email.as_ref())),
                    payout_accounts::transfers_status.eq(&view.transfers_status),
                    payout_accounts::payouts_enabled.eq(view.payouts_enabled),
                    payout_accounts::details_submitted.eq(view.details_submitted),
                ))
                .on_conflict_do_nothing()
                .execute(conn)?;
            find_account(conn, host.into())?
                .ok_or_else(|| Error::NotFound("the host has no payout account".into()))
        })
        .await?;
    tracing::info!(host.id = %host, stripe.account = %row.stripe_account_id, "payout account created");
    Ok(row.into())
}

/// The host's connected account, refreshed from Stripe when it answers (the
/// stored state otherwise).
pub async fn get_account(
    db: &Db,
    api: &ConnectApi,
    host: Uuid,
) -> Result<api::PayoutAccount, Error> {
    let row = db
        .run(move |conn| Ok::<_, Error>(find_account(conn, host)?))
        .await?
        .ok_or_else(|| Error::NotFound("the host has no payout account".into()))?;
    match api.retrieve_account(&row.stripe_account_id).await {
        Ok(view) => Ok(store_view(db, host, view).await?.into()),
        Err(error) => {
            tracing::warn!(host.id = %host, %error, "payout account not refreshed from Stripe");
            Ok(row.into())
        }
    }
}

/// A link to Stripe's hosted onboarding of the host's connected account.
/// The account must exist (`create_account`); what the host submits there
/// shows in the account's state the next time it is read from Stripe.
pub async fn onboarding_link(
    db: &Db,
    api: &ConnectApi,
    host: Uuid,
    req: api::OnboardingLinkRequest,
) -> Result<api::OnboardingLink, Error> {
    for (field, url) in [
        ("returnUrl", &req.return_url),
        ("refreshUrl", &req.refresh_url),
    ] {
        if !(url.starts_with("https://") || url.starts_with("http://")) || url.len() > 2048 {
            return Err(Error::Validation(format!(
                "{field}: an absolute http(s) URL"
            )));
        }
    }
    let row = db
        .run(move |conn| Ok::<_, Error>(find_account(conn, host)?))
        .await?
        .ok_or_else(|| Error::NotFound("the host has no payout account".into()))?;
    let (url, expires_at) = api
        .create_onboarding_link(&row.stripe_account_id, &req.return_url, &req.refresh_url)
        .await?;
    Ok(api::OnboardingLink {
        url,
        expires_at: DateTime::from_timestamp(expires_at, 0).unwrap_or_else(Utc::now),
    })
}

/// What the host may be paid now: the earnings balance less the credits of
/// the hold-back window (never more than the balance, never below zero).
fn available(
    conn: &mut PgConnection,
    host: Uuid,
    currency: &str,
    hold_seconds: i64,
) -> QueryResult<Decimal> {
    let balance = ledger::balance(conn, AccountKind::HostEarnings, TenantId(host), currency)?;
    let since = Utc::now() - chrono::Duration::seconds(hold_seconds);
    let held: Option<Decimal> = entries::table
        .inner_join(accounts::table)
        .inner_join(transactions::table)
        .filter(accounts::kind.eq(AccountKind::HostEarnings.as_str()))
        .filter(accounts::tenant_id.eq(host))
        .filter(accounts::currency.eq(currency))
        .filter(entries::amount.gt(Decimal::ZERO))
        .filter(transactions::created_at.gt(since))
        .select(diesel::dsl::sum(entries::amount))
        .first(conn)?;
    Ok((balance - held.unwrap_or_default()).max(Decimal::ZERO))
}

/// `amount` rounded down to a whole number of minor units; None when that
/// does not fit Stripe's integer.
fn floor_minor(amount: Decimal, currency: &str) -> Option<i64> {
    let scale = Decimal::from(10_i64.pow(money::minor_unit_digits(currency)));
    i64::try_from(amount.checked_mul(scale)?.floor()).ok()
}

/// What the first step of a host's payout decided.
enum Intent {
    /// A new payout to send.
    Send(PayoutRow),
    /// A pending payout left by an earlier run: Stripe may have its transfer.
    Resume(PayoutRow),
    /// Nothing to send, and why.
    Skip(String),
}

/// Step one, in one transaction: resume the host's pending payout, or write
/// a new one for the floor of what is available. The account row is locked,
/// so concurrent runs for one host take turns here.
fn intent(
    conn: &mut PgConnection,
    settings: &Settings,
    payout: &PayoutSettings,
    host: Uuid,
) -> Result<(Intent, Decimal), Error> {
    let currency = settings.currency.as_str();
    let account: Option<AccountRow> = payout_accounts::table
        .find(host)
        .select(AccountRow::as_select())
        .for_update()
        .first(conn)
        .optional()?;
    // The pending payout before the balance: a payout turns `paid` and
    // debits the earnings in one commit, so read in this order the two
    // cannot straddle it (a balance still holding a payout that then reads
    // as paid would pay the same earnings twice). `mark_paid` also takes the
    // account row, so with the lock above no such commit falls in between.
    let pending: Option<PayoutRow> = payouts::table
        .filter(payouts::host_tenant_id.eq(host))
        .filter(payouts::status.eq(PayoutStatus::Pending))
        .select(PayoutRow::as_select())
        .first(conn)
        .optional()?;
    let available = available(conn, host, currency, payout.hold_seconds)?;
    let Some(account) = account else {
        return Ok((
            Intent::Skip("the host has no payout account".into()),
            available,
        ));
    };
    if let Some(pending) = pending {
        return Ok((Intent::Resume(pending), available));
    }
    if account.transfers_status != "active" {
        return Ok((
            Intent::Skip(format!(
                "the connected account cannot receive transfers yet (transfers capability: {})",
                account.transfers_status
            )),
            available,
        ));
    }
    let Some(amount_minor) = floor_minor(available, currency) else {
        return Err(Error::Validation(format!(
            "available earnings {available} {currency} do not fit a Stripe amount"
        )));
    };
    let amount = minor_units::from_minor(amount_minor, currency);
    if amount_minor <= 0 || amount < payout.minimum {
        return Ok((
            Intent::Skip(format!(
                "{amount} {currency} available is below the payout minimum of {} {currency}",
                payout.minimum
            )),
            available,
        ));
    }
    let row: PayoutRow = diesel::insert_into(payouts::table)
        .values((
            payouts::id.eq(Uuid::now_v7()),
            payouts::host_tenant_id.eq(host),
            payouts::stripe_account_id.eq(&account.stripe_account_id),
            payouts::amount.eq(amount),
            payouts::amount_minor.eq(amount_minor),
            payouts::currency.eq(currency),
            payouts::status.eq(PayoutStatus::Pending),
        ))
        .returning(PayoutRow::as_returning())
        .get_result(conn)?;
    tracing::info!(host.id = %host, payout.id = %row.id, %amount, "payout pending");
    Ok((Intent::Send(row), available))
}

/// Step three, after Stripe made the transfer: the posting and `paid`, once.
fn mark_paid(
    conn: &mut PgConnection,
    settings: &Settings,
    id: Uuid,
    transfer_id: &str,
) -> Result<PayoutRow, Error> {
    // The host's account row first, as `intent` takes it: a run deciding
    // what to pay this host waits for this debit, or this debit for it.
    let host: Uuid = payouts::table
        .find(id)
        .select(payouts::host_tenant_id)
        .first(conn)?;
    payout_accounts::table
        .find(host)
        .select(payout_accounts::host_tenant_id)
        .for_update()
        .first::<Uuid>(conn)
        .optional()?;
    let row: PayoutRow = payouts::table
        .find(id)
        .select(PayoutRow::as_select())
        .for_update()
        .first(conn)?;
    if row.status != PayoutStatus::Pending {
        return Ok(row);
    }
    let currency = settings.currency.as_str();
    let earnings = ledger::account(
        conn,
        AccountKind::HostEarnings,
        Some(row.host_tenant_id.into()),
        currency,
    )?;
    let paid_out = ledger::account(conn, AccountKind::Payouts, None, currency)?;
    let txn = format!("payout:{id}");
    let description = format!(
        "payout of {} {currency} to Stripe account {} (transfer {transfer_id})",
        row.amount, row.stripe_account_id
    );
    ledger::post(
        conn,
        &Posting {
            id: &txn,
            kind: "payout",
            tenant_id: Some(row.host_tenant_id.into()),
            instance_id: None,
            fee_rate: None,
            description: &description,
            legs: &[(earnings, -row.amount), (paid_out, row.amount)],
        },
    )?;
    let paid: PayoutRow = diesel::update(payouts::table.find(id))
        .set((
            payouts::status.eq(PayoutStatus::Paid),
            payouts::stripe_transfer_id.eq(Some(transfer_id)),
            payouts::transaction_id.eq(Some(&txn)),
            payouts::paid_at.eq(Some(Utc::now())),
            payouts::updated_at.eq(diesel::dsl::now),
        ))
        .returning(PayoutRow::as_returning())
        .get_result(conn)?;
    announce(conn, settings, &paid)?;
    Ok(paid)
}

/// `billing.payout.paid` or `billing.payout.failed`, in the transaction
/// that settled the payout (its hosts' webhooks, docs/webhooks.md).
fn announce(conn: &mut PgConnection, settings: &Settings, row: &PayoutRow) -> Result<(), Error> {
    let kind = if row.status == PayoutStatus::Paid {
        contracts::events::kinds::PAYOUT_PAID
    } else {
        contracts::events::kinds::PAYOUT_FAILED
    };
    let event = contracts::events::PayoutSettled {
        host_tenant_id: row.host_tenant_id,
        payout_id: row.id,
        amount: row.amount,
        currency: row.currency.clone(),
        status: row.status,
        stripe_transfer_id: row.stripe_transfer_id.clone(),
        failure_reason: row.failure_reason.clone(),
        at: contracts::time::now(),
        sequence: platform::sequence::next(
            conn,
            crate::SCHEMA,
            &contracts::events::resource::payout(row.id),
        )?,
    };
    crate::events::publish(
        conn,
        &settings.events_exchange,
        kind,
        row.host_tenant_id,
        None,
        &event,
    )?;
    Ok(())
}

fn mark_failed(
    conn: &mut PgConnection,
    settings: &Settings,
    id: Uuid,
    reason: &str,
) -> Result<PayoutRow, Error> {
    let row: PayoutRow = payouts::table
        .find(id)
        .select(PayoutRow::as_select())
        .for_update()
        .first(conn)?;
    if row.status != PayoutStatus::Pending {
        return Ok(row);
    }
    let failed: PayoutRow = diesel::update(payouts::table.find(id))
        .set((
            payouts::status.eq(PayoutStatus::Failed),
            payouts::failure_reason.eq(Some(reason)),
            payouts::updated_at.eq(diesel::dsl::now),
        ))
        .returning(PayoutRow::as_returning())
        .get_result(conn)?;
    announce(conn, settings, &failed)?;
    Ok(failed)
}

/// Pays one host, or says why not.
pub async fn pay_host(
    db: &Db,
    api: &ConnectApi,
    settings: &Settings,
    payout: &PayoutSettings,
    host: Uuid,
) -> Result<api::PayoutOutcome, Error> {
    // The capability may have become active since the account was made.
    let stored = db
        .run(move |conn| Ok::<_, Error>(find_account(conn, host)?))
        .await?;
    if let Some(account) = stored.filter(|a| a.transfers_status != "active") {
        match api.retrieve_account(&account.stripe_account_id).await {
            Ok(view) => {
                store_view(db, host, view).await?;
            }
            Err(error) => {
                tracing::warn!(host.id = %host, %error, "payout account not refreshed from Stripe");
            }
        }
    }
    let (s, p) = (settings.clone(), payout.clone());
    let (intent, available) = db.tx(move |conn| intent(conn, &s, &p, host)).await?;
    let (row, resumed) = match intent {
        Intent::Skip(reason) => {
            return Ok(api::PayoutOutcome {
                host_tenant_id: TenantId(host),
                outcome: "skipped".into(),
                available,
                payout: None,
                reason: Some(reason),
            });
        }
        Intent::Send(row) => (row, false),
        Intent::Resume(row) => (row, true),
    };
    // A resumed payout's transfer may exist already, made by an attempt
    // whose answer was lost, possibly longer ago than Stripe keeps keys.
    let known = if resumed {
        api.find_transfer(row.id).await.map(Some)
    } else {
        Ok(None)
    };
    let sent = match known {
        Ok(Some(Some(transfer_id))) => Ok(transfer_id),
        Ok(_) => {
            api.create_transfer(&NewTransfer {
                payout_id: row.id,
                host_tenant_id: TenantId(host),
                destination: &row.stripe_account_id,
                amount_minor: row.amount_minor,
                currency: &row.currency,
            })
            .await
        }
        Err(unknown) => Err(unknown),
    };
    let id = row.id;
    let (outcome, row, reason) = match sent {
        Ok(transfer_id) => {
            let s = settings.clone();
            let row = db
                .tx(move |conn| mark_paid(conn, &s, id, &transfer_id))
                .await?;
            tracing::info!(host.id = %host, payout.id = %id, amount = %row.amount, "payout paid");
            crate::metrics::payout_paid(row.amount);
            ("paid", row, None)
        }
        Err(TransferError::Refused(reason)) => {
            let (r, s) = (reason.clone(), settings.clone());
            let row = db.tx(move |conn| mark_failed(conn, &s, id, &r)).await?;
            tracing::warn!(host.id = %host, payout.id = %id, %reason, "payout failed");
            crate::metrics::payout_failed();
            ("failed", row, Some(reason))
        }
        // The transfer may exist: the payout stays pending and the next run
        // asks again under the same key.
        Err(TransferError::Unavailable(reason)) => {
            tracing::warn!(host.id = %host, payout.id = %id, %reason, "payout pending: Stripe unavailable");
            crate::metrics::payout_pending();
            ("pending", row, Some(reason))
        }
    };
    Ok(api::PayoutOutcome {
        host_tenant_id: TenantId(host),
        outcome: if row.status == PayoutStatus::Pending {
            outcome.to_owned()
        } else {
            row.status.to_string()
        },
        available,
        payout: Some(row.into()),
        reason,
    })
}

/// A payout run: every host with a connected account (or one host), each on
/// its own. One host's trouble does not stop the others'.
pub async fn run_payouts(
    db: &Db,
    api: &ConnectApi,
    settings: &Settings,
    payout: &PayoutSettings,
    req: api::RunPayoutsRequest,
) -> Result<api::RunPayoutsResult, Error> {
    let hosts: Vec<Uuid> = match req.host_tenant_id {
        Some(h) => vec![h.into()],
        None => {
            db.run(|conn| {
                Ok::<_, Error>(
                    payout_accounts::table
                        .order(payout_accounts::host_tenant_id)
                        .select(payout_accounts::host_tenant_id)
                        .load(conn)?,
                )
            })
            .await?
        }
    };
    let single = req.host_tenant_id.is_some();
    let mut outcomes = Vec::with_capacity(hosts.len());
    for host in hosts {
        match pay_host(db, api, settings, payout, host).await {
            Ok(outcome) => outcomes.push(outcome),
            Err(error) if !single => {
                tracing::error!(host.id = %host, %error, "payout run: host not paid");
                outcomes.push(api::PayoutOutcome {
                    host_tenant_id: TenantId(host),
                    outcome: "error".into(),
                    available: Decimal::ZERO,
                    payout: None,
                    reason: Some(error.to_string()),
                });
            }
            Err(error) => return Err(error),
        }
    }
    Ok(api::RunPayoutsResult { outcomes })
}

/// The host's payouts, newest first (at most 100).
pub async fn list(db: &Db, host: Uuid) -> Result<Vec<api::Payout>, Error> {
    db.run(move |conn| {
        let rows = payouts::table
            .filter(payouts::host_tenant_id.eq(host))
            .order((payouts::created_at.desc(), payouts::id.desc()))
            .limit(LIST_LIMIT)
            .select(PayoutRow::as_select())
            .load(conn)?;
        Ok(rows.into_iter().map(Into::into).collect())
    })
    .await
}

/// Billing's payout schedule: a run every `GPUMARKET_PAYOUT_INTERVAL_SECS`
/// (the first one interval after start, so a restart loop cannot pay in a
/// burst). Never returns: with no interval it waits forever, because the
/// service treats an ended background task as fatal.
pub async fn run_loop(config: Arc<Config>, db: Db) {
    let setup = (|| {
        Ok::<_, Error>((
            Settings::from_config(&config)?,
            PayoutSettings::from_config(&config)?,
            ConnectApi::from_config(&config)?,
        ))
    })();
    let (settings, payout, api) = match setup {
        Ok(parts) => parts,
        Err(error) => {
            tracing::error!(%error, "payout loop not started");
            return std::future::pending().await;
        }
    };
    let Some(interval) = payout.interval else {
        tracing::info!("payout loop off (GPUMARKET_PAYOUT_INTERVAL_SECS=0)");
        return std::future::pending().await;
    };
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match run_payouts(
            &db,
            &api,
            &settings,
            &payout,
            api::RunPayoutsRequest::default(),
        )
        .await
        {
            Ok(run) => {
                let paid = run.outcomes.iter().filter(|o| o.outcome == "paid").count();
                tracing::info!(hosts = run.outcomes.len(), paid, "payout run done");
            }
            Err(error) => tracing::error!(%error, "payout run failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_keeps_the_residue_in_earnings() {
        assert_eq!(
            floor_minor(Decimal::new(12_345_678_999, 9), "USD"),
            Some(1234)
        );
        assert_eq!(floor_minor(Decimal::new(999_999_999, 9), "JPY"), Some(0));
        assert_eq!(
            floor_minor(Decimal::new(1_234_567_891, 9), "KWD"),
            Some(1234)
        );
        assert_eq!(floor_minor(Decimal::ZERO, "USD"), Some(0));
    }

    /// A payout run racing the previous run's `paid` never pays the same
    /// earnings twice: it either resumes the pending payout or, once that is
    /// paid, sees the earnings it took. Real Postgres; the run's reads fall
    /// around the other's commit differently on each round.
    #[test]
    fn a_run_beside_the_previous_payouts_paid_never_pays_the_same_earnings_twice() {
        use std::sync::{Arc, Barrier};

        let db = platform::test_db::TestDb::new("payouts").expect("test database");
        let settings = Settings {
            fee_rate: Decimal::new(15, 2),
            currency: "USD".into(),
            events_exchange: "gpumarket.events".into(),
            downtime_credit_multiple: Decimal::ONE,
        };
        let payout = PayoutSettings {
            minimum: Decimal::ONE,
            hold_seconds: 0,
            interval: None,
        };
        let earned = Decimal::new(10, 0);
        let mut conn = db.conn().expect("connect");
        let mut doubled = Vec::new();
        for round in 0..300 {
            let host = Uuid::now_v7();
            conn.transaction::<_, Error, _>(|c| {
                diesel::insert_into(payout_accounts::table)
                    .values((
                        payout_accounts::host_tenant_id.eq(host),
                        payout_accounts::stripe_account_id.eq(format!("acct_{}", host.simple())),
                        payout_accounts::country.eq("DE"),
                        payout_accounts::transfers_status.eq("active"),
                        payout_accounts::payouts_enabled.eq(true),
                        payout_accounts::details_submitted.eq(true),
                    ))
                    .execute(c)?;
                let earnings = ledger::account(c, AccountKind::HostEarnings, Some(host), "USD")?;
                let fees = ledger::account(c, AccountKind::PlatformFee, None, "USD")?;
                ledger::post(
                    c,
                    &Posting {
                        id: &format!("earned:{host}"),
                        kind: "usage",
                        tenant_id: Some(host),
                        instance_id: None,
                        fee_rate: None,
                        description: "earned",
                        legs: &[(earnings, earned), (fees, -earned)],
                    },
                )?;
                Ok(())
            })
            .expect("setup");
            // Earlier than the hold-back's `now()`: all of it is available.
            std::thread::sleep(Duration::from_millis(2));
            let Intent::Send(first) = conn
                .transaction(|c| intent(c, &settings, &payout, host))
                .expect("first run")
                .0
            else {
                panic!("round {round}: the first run sent nothing");
            };

            let barrier = Arc::new(Barrier::new(2));
            let paying = {
                let (url, barrier, settings) = (db.url.clone(), barrier.clone(), settings.clone());
                std::thread::spawn(move || {
                    let mut conn = PgConnection::establish(&url).expect("connect");
                    barrier.wait();
                    let transfer = format!("tr_{}", first.id.simple());
                    conn.transaction(|c| mark_paid(c, &settings, first.id, &transfer))
                        .expect("paid");
                })
            };
            let mut other = PgConnection::establish(&db.url).expect("connect");
            barrier.wait();
            let (second, _) = other
                .transaction(|c| intent(c, &settings, &payout, host))
                .expect("second run");
            paying.join().expect("paying thread");
            if let Intent::Send(again) = second {
                doubled.push((round, again.amount));
            }
        }
        assert!(
            doubled.is_empty(),
            "a second payout of the same earnings (round, amount): {doubled:?}"
        );
    }

    #[test]
    fn countries_are_two_letters() {
        assert_eq!(check_country(" de ").ok(), Some("DE".to_owned()));
        assert!(check_country("DEU").is_err());
        assert!(check_country("1A").is_err());
    }
}
