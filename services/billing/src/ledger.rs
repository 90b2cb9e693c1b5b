//! The double-entry ledger. A posting is a transaction row with a
//! client-chosen id plus entries that sum to zero, written by one statement
//! (a per-statement trigger rejects the insert otherwise, migration 000200);
//! posting the same id twice is a no-op. Account balances are kept in the
//! posting's transaction, moved in account id order.

use contracts::ids::TenantId;
use std::collections::{BTreeMap, HashMap};

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
    /// A renter's reserved blocks paid and not yet released or refunded
    /// (docs/settlement.md); without a tenant, the transfer account a
    /// resale's two halves meet in.
    Escrow,
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
            AccountKind::Escrow => "escrow",
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
    tenant_id: TenantId,
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
/// Its legs go in with one statement (the database checks per statement
/// that each posting's legs sum to zero), and the balances move in account
/// id order, the order every writer locks accounts in.
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
    let legs: Vec<_> = posting
        .legs
        .iter()
        .map(|(account_id, amount)| {
            (
                entries::transaction_id.eq(posting.id),
                entries::account_id.eq(*account_id),
                entries::amount.eq(*amount),
            )
        })
        .collect();
    diesel::insert_into(entries::table)
        .values(&legs)
        .execute(conn)?;
    let mut deltas: BTreeMap<Uuid, Decimal> = BTreeMap::new();
    for (account_id, amount) in posting.legs {
        *deltas.entry(*account_id).or_default() += *amount;
    }
    move_balances(conn, &deltas)?;
    Ok(true)
}

#[derive(QueryableByName)]
struct Moved {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    id: Uuid,
    #[diesel(sql_type = diesel::sql_types::Numeric)]
    balance: Decimal,
}

/// Moves each account's balance by its delta; returns the balances after.
/// The accounts are locked in id order first (an `UPDATE ... FROM` locks in
/// its plan's order): every writer that moves balances goes through here or
/// locks the same way, so two transactions sharing accounts (the fee
/// account, always) queue instead of deadlocking. `FOR NO KEY UPDATE`, the
/// update's own lock: legs inserted just before hold `KEY SHARE` on their
/// accounts (the foreign key), which a plain `FOR UPDATE` would wait on
/// across transactions.
pub fn move_balances(
    conn: &mut PgConnection,
    deltas: &BTreeMap<Uuid, Decimal>,
) -> QueryResult<HashMap<Uuid, Decimal>> {
    use diesel::sql_types::{Array, Numeric, Uuid as SqlUuid};
    if deltas.is_empty() {
        return Ok(HashMap::new());
    }
    let ids: Vec<Uuid> = deltas.keys().copied().collect();
    let amounts: Vec<Decimal> = deltas.values().copied().collect();
    diesel::sql_query(
        "SELECT id, balance FROM billing.accounts WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE",
    )
    .bind::<Array<SqlUuid>, _>(&ids)
    .load::<Moved>(conn)?;
    let moved = diesel::sql_query(
        "UPDATE billing.accounts a SET balance = a.balance + d.delta \
         FROM unnest($1::uuid[], $2::numeric[]) AS d(id, delta) \
         WHERE a.id = d.id RETURNING a.id, a.balance",
    )
    .bind::<Array<SqlUuid>, _>(&ids)
    .bind::<Array<Numeric>, _>(&amounts)
    .load::<Moved>(conn)?;
    Ok(moved.into_iter().map(|m| (m.id, m.balance)).collect())
}
