//! How the escrow writes to the ledger: each posting touches at most one
//! renter balance and is made under that renter's tenant, so that invoices
//! find it the way they find usage (the renter leg's tenant is the
//! posting's); its facts go to `billing.escrow_postings` for the invoice
//! and statement lines. Accounts are locked in id order before any leg is
//! written, as every writer of balances locks them.

use chrono::{DateTime, Utc};
use contracts::ids::{MachineId, ReservationId, TenantId};
use diesel::prelude::*;
use rust_decimal::Decimal;
use schema::billing_escrow::escrow_postings;
use uuid::Uuid;

use crate::Error;
use crate::ledger::{self, Posting};

pub(crate) use crate::escrow_kinds::{
    ESCROW_PENALTY, ESCROW_REFUND, ESCROW_RELEASE, RESALE, RESERVATION, line,
};

/// What a reservation posting was for (`billing.escrow_postings`).
pub(crate) struct Detail<'a> {
    pub escrow: ReservationId,
    /// The reservation the renter's line names.
    pub reservation: ReservationId,
    pub host_tenant_id: TenantId,
    pub machine_id: MachineId,
    pub line: &'a str,
    /// GPU-seconds on the renter's line.
    pub quantity: i64,
    /// Per GPU-hour.
    pub unit_price: Decimal,
    /// Seconds released to the host.
    pub heard_seconds: i64,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
}

/// One reservation posting: its legs (zero legs are left out) and facts.
pub(crate) struct EscrowPosting<'a> {
    pub id: &'a str,
    pub kind: &'a str,
    /// The renter whose balance leg it has (or would have).
    pub tenant_id: TenantId,
    pub fee_rate: Option<Decimal>,
    pub description: &'a str,
    pub legs: Vec<(Uuid, Decimal)>,
    pub detail: Detail<'a>,
}

/// Posts it with its details; false (and nothing written) when every leg
/// is zero. A posting that exists already is a CONFLICT: every caller
/// posts under the escrow's lock after checking that it did not.
pub(crate) fn post(conn: &mut PgConnection, p: &EscrowPosting<'_>) -> Result<bool, Error> {
    let legs: Vec<(Uuid, Decimal)> = p
        .legs
        .iter()
        .copied()
        .filter(|(_, amount)| !amount.is_zero())
        .collect();
    if legs.is_empty() {
        return Ok(false);
    }
    let posted = ledger::post(
        conn,
        &Posting {
            id: p.id,
            kind: p.kind,
            tenant_id: Some(p.tenant_id.into()),
            instance_id: None,
            fee_rate: p.fee_rate,
            description: p.description,
            legs: &legs,
        },
    )?;
    if !posted {
        return Err(Error::Conflict(format!("posting {} exists already", p.id)));
    }
    let d = &p.detail;
    diesel::insert_into(escrow_postings::table)
        .values((
            escrow_postings::transaction_id.eq(p.id),
            escrow_postings::escrow_reservation_id.eq(d.escrow),
            escrow_postings::reservation_id.eq(d.reservation),
            escrow_postings::tenant_id.eq(p.tenant_id),
            escrow_postings::host_tenant_id.eq(d.host_tenant_id),
            escrow_postings::machine_id.eq(d.machine_id),
            escrow_postings::line.eq(d.line),
            escrow_postings::quantity.eq(d.quantity),
            escrow_postings::unit_price.eq(d.unit_price),
            escrow_postings::heard_seconds.eq(d.heard_seconds),
            escrow_postings::started_at.eq(d.started_at),
            escrow_postings::ended_at.eq(d.ended_at),
        ))
        .execute(conn)?;
    Ok(true)
}

/// Locks `accounts` in id order (`FOR NO KEY UPDATE`, as
/// `ledger::move_balances` does) so that the postings that follow in this
/// transaction, whatever their order, never take an account out of order.
pub(crate) fn lock_accounts(conn: &mut PgConnection, accounts: &[Uuid]) -> QueryResult<()> {
    let mut ids = accounts.to_vec();
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        return Ok(());
    }
    diesel::sql_query(
        "SELECT id FROM billing.accounts WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE",
    )
    .bind::<diesel::sql_types::Array<diesel::sql_types::Uuid>, _>(&ids)
    .execute(conn)?;
    Ok(())
}

/// Locks the tenant's month-to-date spend row (created when missing) and
/// returns what it holds: taken before any account, as usage ingest takes
/// it, so a charge and an ingest batch of one renter queue instead of
/// deadlocking.
pub(crate) fn lock_month_spend(
    conn: &mut PgConnection,
    tenant_id: TenantId,
    month: chrono::NaiveDate,
    currency: &str,
) -> QueryResult<Decimal> {
    use schema::billing_spend::monthly_spend;
    diesel::insert_into(monthly_spend::table)
        .values((
            monthly_spend::tenant_id.eq(tenant_id),
            monthly_spend::month.eq(month),
            monthly_spend::currency.eq(currency),
            monthly_spend::spent.eq(Decimal::ZERO),
        ))
        .on_conflict_do_nothing()
        .execute(conn)?;
    monthly_spend::table
        .find((tenant_id, month))
        .select(monthly_spend::spent)
        .for_update()
        .first(conn)
}
