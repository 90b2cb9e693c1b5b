//! Escrow rows and their holders in the database, and the escrow as the
//! contract shows it (`contracts::reservations::Escrow`).

use chrono::{DateTime, Utc};
use contracts::ids::{MachineId, ReservationId, TenantId};
use contracts::reservations::{Escrow, EscrowQuery, EscrowState};
use diesel::prelude::*;
use diesel::sql_types::{Timestamptz, Uuid as SqlUuid};
use platform::Db;
use rust_decimal::Decimal;
use schema::billing_escrow::escrows;
use uuid::Uuid;

use super::math::{Block, Holding, Span};
use crate::Error;

/// Escrows a listing returns at most.
const LIST_LIMIT: i64 = 200;

/// One row of `billing.escrows`.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = escrows)]
pub(crate) struct EscrowRow {
    pub reservation_id: ReservationId,
    pub renter_tenant_id: TenantId,
    pub host_tenant_id: TenantId,
    pub machine_id: MachineId,
    pub currency: String,
    pub gpu_count: i32,
    pub price_per_gpu_hour: Decimal,
    pub amount: Decimal,
    pub fee_rate: Decimal,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub settled_until: DateTime<Utc>,
    pub released: Decimal,
    pub fees: Decimal,
    pub refunded: Decimal,
    pub penalty: Decimal,
    pub silent_seconds: i64,
    pub state: String,
    #[allow(dead_code)]
    pub cancelled_at: Option<DateTime<Utc>>,
    #[allow(dead_code)]
    pub cancelled_by_host: Option<bool>,
    #[allow(dead_code)]
    pub cancel_reason: Option<String>,
    #[allow(dead_code)]
    pub created_at: DateTime<Utc>,
}

pub(crate) const HELD: &str = "held";
pub(crate) const SETTLED: &str = "settled";
pub(crate) const CANCELLED: &str = "cancelled";

impl EscrowRow {
    pub fn held(&self) -> bool {
        self.state == HELD
    }

    pub fn state(&self) -> EscrowState {
        match self.state.as_str() {
            SETTLED => EscrowState::Settled,
            CANCELLED => EscrowState::Cancelled,
            _ => EscrowState::Held,
        }
    }

    /// The block's money for the math.
    pub fn block(&self) -> Result<Block, Error> {
        Block::new(self.amount, self.seconds()).map_err(|e| {
            Error::Platform(platform::PlatformError::Other(format!(
                "escrow {}: {e}",
                self.reservation_id
            )))
        })
    }

    /// The block's length in seconds.
    pub fn seconds(&self) -> i64 {
        (self.ends_at - self.starts_at).num_seconds()
    }

    /// `at` as seconds from the block's start, whole seconds down, clamped
    /// to the block.
    pub fn offset(&self, at: DateTime<Utc>) -> i64 {
        let micros = (at - self.starts_at)
            .num_microseconds()
            .unwrap_or(if at < self.starts_at {
                i64::MIN
            } else {
                i64::MAX
            });
        micros.div_euclid(1_000_000).clamp(0, self.seconds())
    }

    /// The instant `seconds` after the block's start.
    pub fn instant(&self, seconds: i64) -> DateTime<Utc> {
        self.starts_at + chrono::Duration::seconds(seconds)
    }

    /// How far the block is settled, in seconds from its start.
    pub fn settled(&self) -> i64 {
        self.offset(self.settled_until)
    }

    pub fn remaining(&self) -> Decimal {
        self.amount - self.released - self.fees - self.refunded
    }

    pub fn to_api(&self) -> Escrow {
        Escrow {
            reservation_id: self.reservation_id,
            renter_tenant_id: self.renter_tenant_id,
            host_tenant_id: self.host_tenant_id,
            machine_id: self.machine_id,
            currency: self.currency.clone(),
            amount: self.amount,
            released: self.released,
            fees: self.fees,
            refunded: self.refunded,
            penalty: self.penalty,
            remaining: self.remaining(),
            settled_until: self.settled_until,
            starts_at: self.starts_at,
            ends_at: self.ends_at,
            silent_seconds: self.silent_seconds,
            state: self.state(),
        }
    }
}

pub(crate) fn find(conn: &mut PgConnection, id: ReservationId) -> QueryResult<Option<EscrowRow>> {
    escrows::table
        .find(id)
        .select(EscrowRow::as_select())
        .first(conn)
        .optional()
}

/// The escrow row, locked for the rest of the transaction: every change to
/// an escrow (release, cancellation, resale) takes this lock first, then the
/// ledger accounts in id order.
pub(crate) fn lock(conn: &mut PgConnection, id: ReservationId) -> QueryResult<Option<EscrowRow>> {
    escrows::table
        .find(id)
        .select(EscrowRow::as_select())
        .for_update()
        .first(conn)
        .optional()
}

/// Who holds some hours of an escrow: the tenant, and its own reservation
/// (the escrow's for the renter, a resale's child for a buyer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holder {
    pub tenant_id: TenantId,
    pub reservation_id: ReservationId,
}

#[derive(QueryableByName)]
struct HolderRow {
    #[diesel(sql_type = Timestamptz)]
    starts_at: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    ends_at: DateTime<Utc>,
    #[diesel(sql_type = SqlUuid)]
    tenant_id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    holder_reservation_id: Uuid,
}

/// The escrow's holders, in time order, as spans of its block (read under
/// the escrow's lock: only writers holding it change them).
pub(crate) fn holdings(
    conn: &mut PgConnection,
    row: &EscrowRow,
) -> QueryResult<Vec<Holding<Holder>>> {
    let rows: Vec<HolderRow> = diesel::sql_query(
        "SELECT lower(period) AS starts_at, upper(period) AS ends_at, tenant_id, holder_reservation_id \
         FROM billing.escrow_holders WHERE reservation_id = $1 ORDER BY lower(period)",
    )
    .bind::<SqlUuid, _>(row.reservation_id)
    .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|h| Holding {
            span: Span::new(row.offset(h.starts_at), row.offset(h.ends_at)),
            holder: Holder {
                tenant_id: TenantId(h.tenant_id),
                reservation_id: ReservationId(h.holder_reservation_id),
            },
        })
        .collect())
}

/// Replaces the escrow's holder rows with `holdings` (a resale's split).
pub(crate) fn replace_holdings(
    conn: &mut PgConnection,
    row: &EscrowRow,
    holdings: &[Holding<Holder>],
) -> QueryResult<()> {
    use diesel::sql_types::Array;
    diesel::sql_query("DELETE FROM billing.escrow_holders WHERE reservation_id = $1")
        .bind::<SqlUuid, _>(row.reservation_id)
        .execute(conn)?;
    let starts: Vec<DateTime<Utc>> = holdings.iter().map(|h| row.instant(h.span.from)).collect();
    let ends: Vec<DateTime<Utc>> = holdings.iter().map(|h| row.instant(h.span.to)).collect();
    let tenants: Vec<Uuid> = holdings.iter().map(|h| h.holder.tenant_id.0).collect();
    let reservations: Vec<Uuid> = holdings.iter().map(|h| h.holder.reservation_id.0).collect();
    diesel::sql_query(
        "INSERT INTO billing.escrow_holders (reservation_id, period, tenant_id, holder_reservation_id) \
         SELECT $1, tstzrange(h.s, h.e, '[)'), h.t, h.r \
         FROM unnest($2::timestamptz[], $3::timestamptz[], $4::uuid[], $5::uuid[]) AS h(s, e, t, r)",
    )
    .bind::<SqlUuid, _>(row.reservation_id)
    .bind::<Array<Timestamptz>, _>(&starts)
    .bind::<Array<Timestamptz>, _>(&ends)
    .bind::<Array<SqlUuid>, _>(&tenants)
    .bind::<Array<SqlUuid>, _>(&reservations)
    .execute(conn)?;
    Ok(())
}

/// One reservation's escrow (`ESCROW`). The path carries no tenant: the
/// caller (ordering, the gateway) answers another tenant's reservation as
/// not found before asking.
pub async fn get(db: &Db, id: ReservationId) -> Result<Escrow, Error> {
    db.run(move |conn| {
        find(conn, id)?
            .map(|row| row.to_api())
            .ok_or_else(|| Error::NotFound(format!("reservation {id} has no escrow")))
    })
    .await
}

/// A renter's or a host's escrows, newest block first (`ESCROW_LIST`).
pub async fn list(db: &Db, query: EscrowQuery) -> Result<Vec<Escrow>, Error> {
    if query.renter_tenant_id.is_none() && query.host_tenant_id.is_none() {
        return Err(Error::Validation(
            "renterTenantId or hostTenantId: one is needed".into(),
        ));
    }
    db.run(move |conn| {
        let mut q = escrows::table.select(EscrowRow::as_select()).into_boxed();
        if let Some(renter) = query.renter_tenant_id {
            q = q.filter(escrows::renter_tenant_id.eq(renter));
        }
        if let Some(host) = query.host_tenant_id {
            q = q.filter(escrows::host_tenant_id.eq(host));
        }
        let rows: Vec<EscrowRow> = q
            .order((escrows::starts_at.desc(), escrows::reservation_id.desc()))
            .limit(LIST_LIMIT)
            .load(conn)?;
        Ok(rows.iter().map(EscrowRow::to_api).collect())
    })
    .await
}
