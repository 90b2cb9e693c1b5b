//! A booking's stored rows, read by the booking endpoints ([`crate::bookings`]),
//! the block sweeper ([`crate::blocks`]) and allocations inside a block
//! ([`crate::block_allocations`]): a module of its own so that those,
//! which call one another's writers, share no reader in a loop.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{Int4, Timestamptz, Uuid as SqlUuid};
use rust_decimal::Decimal;
use schema::catalog_bookings::bookings;
use uuid::Uuid;

use crate::booked_periods::Period;

/// A booking as stored.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = bookings)]
pub struct BookingRow {
    pub reservation_id: Uuid,
    pub tenant_id: Uuid,
    pub machine_id: Uuid,
    pub host_tenant_id: Uuid,
    pub gpu_model: String,
    pub gpu_indices: Vec<i16>,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub price_per_gpu_hour: Decimal,
    pub currency: String,
    pub storage_price_per_gb_month: Decimal,
    pub bandwidth_up_price_per_tb: Decimal,
    pub bandwidth_down_price_per_tb: Decimal,
    pub parent_id: Option<Uuid>,
    pub cancelled_from: Option<DateTime<Utc>>,
    pub activated_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

pub fn load(conn: &mut PgConnection, id: Uuid) -> QueryResult<Option<BookingRow>> {
    bookings::table
        .find(id)
        .select(BookingRow::as_select())
        .first(conn)
        .optional()
}

pub fn indices(row: &BookingRow) -> Vec<u32> {
    row.gpu_indices
        .iter()
        .filter_map(|&i| u32::try_from(i).ok())
        .collect()
}

#[derive(QueryableByName)]
struct PeriodRow {
    #[diesel(sql_type = Int4)]
    gpu_index: i32,
    #[diesel(sql_type = Timestamptz)]
    starts_at: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    ends_at: DateTime<Utc>,
}

/// A booking's booked periods, per GPU index.
pub fn periods(conn: &mut PgConnection, id: Uuid) -> QueryResult<BTreeMap<u32, Vec<Period>>> {
    let rows: Vec<PeriodRow> = diesel::sql_query(
        "SELECT gpu_index::int4 AS gpu_index, lower(period) AS starts_at, upper(period) AS ends_at
         FROM catalog.booked_gpus WHERE reservation_id = $1 ORDER BY gpu_index, lower(period)",
    )
    .bind::<SqlUuid, _>(id)
    .load(conn)?;
    let mut out: BTreeMap<u32, Vec<Period>> = BTreeMap::new();
    for r in rows {
        if let Ok(index) = u32::try_from(r.gpu_index) {
            out.entry(index).or_default().push((r.starts_at, r.ends_at));
        }
    }
    Ok(out)
}
