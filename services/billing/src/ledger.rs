//! The double-entry ledger. A posting is a transaction row with a
//! client-chosen id plus entries that sum to zero (a deferred constraint
//! trigger rejects the commit otherwise); posting the same id twice is a
//! no-op. Account balances are kept in the posting's transaction.

use diesel::prelude::*;
use rust_decimal::Decimal;
use schema::billing::{accounts, entries, transactions};
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccountKind {
    RenterBalance,
    HostEarnings,
    PlatformFee,
    PaymentClearing,
    Payouts,
    Rounding,
}

impl AccountKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AccountKind::RenterBalance => "renter_balance",
            AccountKind::HostEarnings => "host_earnings",
            AccountKind::PlatformFee => "platform_fee",
            AccountKind::PaymentClearing => "payment_clearing",
            AccountKind::Payouts => "payouts",
            AccountKind::Rounding => "rounding",
        }
    }
}

/// The account of `kind` for `tenant_id` (None for platform accounts),
/// created on first use.
pub fn account(
    conn: &mut PgConnection,
    kind: AccountKind,
    tenant_id: Option<Uuid>,
    currency: &str,
) -> QueryResult<Uuid> {
    diesel::insert_into(accounts::table)
        .values((
            accounts::id.eq(Uuid::now_v7()),
            accounts::kind.eq(kind.as_str()),
            accounts::tenant_id.eq(tenant_id),
            accounts::currency.eq(currency),
        ))
        .on_conflict_do_nothing()
        .execute(conn)?;
    let mut query = accounts::table
        .filter(accounts::kind.eq(kind.as_str()))
        .filter(accounts::currency.eq(currency))
        .select(accounts::id)
        .into_boxed();
    query = match tenant_id {
        Some(t) => query.filter(accounts::tenant_id.eq(t)),
        None => query.filter(accounts::tenant_id.is_null()),
    };
    query.first(conn)
}

pub fn balance(
    conn: &mut PgConnection,
    kind: AccountKind,
    tenant_id: Uuid,
    currency: &str,
) -> QueryResult<Decimal> {
    Ok(accounts::table
        .filter(accounts::kind.eq(kind.as_str()))
        .filter(accounts::tenant_id.eq(tenant_id))
        .filter(accounts::currency.eq(currency))
        .select(accounts::balance)
        .first::<Decimal>(conn)
        .optional()?
        .unwrap_or(Decimal::ZERO))
}

/// What a posting is about.
pub struct Posting<'a> {
    pub id: &'a str,
    pub kind: &'a str,
    pub tenant_id: Option<Uuid>,
    pub instance_id: Option<Uuid>,
    pub fee_rate: Option<Decimal>,
    pub description: &'a str,
    pub legs: &'a [(Uuid, Decimal)],
}

/// Records a posting; false when a posting with this id already exists.
/// Must run inside a transaction: the balance check runs at its commit.
pub fn post(conn: &mut PgConnection, posting: &Posting<'_>) -> QueryResult<bool> {
    let inserted = diesel::insert_into(transactions::table)
        .values((
            transactions::id.eq(posting.id),
            transactions::kind.eq(posting.kind),
            transactions::tenant_id.eq(posting.tenant_id),
            transactions::instance_id.eq(posting.instance_id),
            transactions::fee_rate.eq(posting.fee_rate),
            transactions::description.eq(posting.description),
        ))
        .on_conflict_do_nothing()
        .execute(conn)?;
    if inserted == 0 {
        return Ok(false);
    }
    for (account_id, amount) in posting.legs {
        diesel::insert_into(entries::table)
            .values((
                entries::transaction_id.eq(posting.id),
                entries::account_id.eq(account_id),
                entries::amount.eq(amount),
            ))
            .execute(conn)?;
        diesel::update(accounts::table.find(account_id))
            .set(accounts::balance.eq(accounts::balance + amount))
            .execute(conn)?;
    }
    Ok(true)
}
