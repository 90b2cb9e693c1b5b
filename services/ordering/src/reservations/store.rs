//! Reservation and listing rows, and how they read as the contract's types.

use chrono::{DateTime, Utc};
use contracts::ids::{MachineId, ResaleListingId, ReservationId, TenantId};
use contracts::reservations::{
    HourRange, ListingState, ResaleListing, Reservation, ReservationState,
};
use diesel::prelude::*;
use rust_decimal::Decimal;
use schema::ordering_reservations::{resale_listings, reservations};
use uuid::Uuid;

use crate::Error;

/// What ordering stores of a reservation's progress; the state the API
/// shows adds the clock (`booked` reads as booked, active or ended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pending,
    Booked,
    Cancelled,
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Booked => "booked",
            Status::Cancelled => "cancelled",
            Status::Failed => "failed",
        }
    }

    fn parse(text: &str) -> Result<Self, Error> {
        Ok(match text {
            "pending" => Status::Pending,
            "booked" => Status::Booked,
            "cancelled" => Status::Cancelled,
            "failed" => Status::Failed,
            other => {
                return Err(Error::Validation(format!(
                    "unknown reservation status {other:?} in the database"
                )));
            }
        })
    }
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = reservations)]
pub struct ReservationRow {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub request_fingerprint: String,
    pub machine_id: Option<Uuid>,
    pub host_tenant_id: Option<Uuid>,
    pub gpu_model: Option<String>,
    pub gpu_count: i32,
    pub gpu_indices: Vec<i32>,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub price_per_gpu_hour: Option<Decimal>,
    pub amount: Option<Decimal>,
    pub currency: Option<String>,
    pub status: String,
    pub parent_id: Option<Uuid>,
    pub reason: Option<String>,
    pub failure_code: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl ReservationRow {
    pub fn status(&self) -> Result<Status, Error> {
        Status::parse(&self.status)
    }

    pub fn state(&self, now: DateTime<Utc>) -> Result<ReservationState, Error> {
        Ok(match self.status()? {
            Status::Pending => ReservationState::Pending,
            Status::Failed => ReservationState::Failed,
            Status::Cancelled => ReservationState::Cancelled,
            Status::Booked if now < self.starts_at => ReservationState::Booked,
            Status::Booked if now < self.ends_at => ReservationState::Active,
            Status::Booked => ReservationState::Ended,
        })
    }

    pub fn to_contract(
        &self,
        sold: Vec<HourRange>,
        now: DateTime<Utc>,
    ) -> Result<Reservation, Error> {
        Ok(Reservation {
            id: ReservationId(self.id),
            tenant_id: TenantId(self.tenant_id),
            machine_id: MachineId(self.machine_id.unwrap_or_default()),
            host_tenant_id: TenantId(self.host_tenant_id.unwrap_or_default()),
            gpu_model: self.gpu_model.clone().unwrap_or_default(),
            gpu_count: self.gpu_count,
            gpu_indices: self
                .gpu_indices
                .iter()
                .filter_map(|&i| u32::try_from(i).ok())
                .collect(),
            starts_at: self.starts_at,
            ends_at: self.ends_at,
            price_per_gpu_hour: self.price_per_gpu_hour.unwrap_or_default(),
            amount: self.amount.unwrap_or_default(),
            currency: self.currency.clone().unwrap_or_default(),
            state: self.state(now)?,
            parent_id: self.parent_id.map(ReservationId),
            sold,
            created_at: self.created_at,
            reason: self.reason.clone(),
        })
    }
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = resale_listings)]
pub struct ListingRow {
    pub id: Uuid,
    pub reservation_id: Uuid,
    pub seller_tenant_id: Uuid,
    pub machine_id: Uuid,
    pub gpu_model: String,
    pub gpu_count: i32,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub price_per_gpu_hour: Decimal,
    pub amount: Decimal,
    pub currency: String,
    pub state: String,
    pub buyer_tenant_id: Option<Uuid>,
    pub buyer_key: Option<String>,
    pub child_reservation_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

pub fn listing_state(text: &str) -> Result<ListingState, Error> {
    Ok(match text {
        "open" => ListingState::Open,
        "selling" => ListingState::Selling,
        "sold" => ListingState::Sold,
        "withdrawn" => ListingState::Withdrawn,
        "expired" => ListingState::Expired,
        other => {
            return Err(Error::Validation(format!(
                "unknown listing state {other:?} in the database"
            )));
        }
    })
}

impl ListingRow {
    /// `seller`: whether the caller is the seller (who alone sees who sells).
    pub fn to_contract(&self, seller: bool) -> Result<ResaleListing, Error> {
        Ok(ResaleListing {
            id: ResaleListingId(self.id),
            reservation_id: ReservationId(self.reservation_id),
            machine_id: MachineId(self.machine_id),
            gpu_model: self.gpu_model.clone(),
            gpu_count: self.gpu_count,
            starts_at: self.starts_at,
            ends_at: self.ends_at,
            price_per_gpu_hour: self.price_per_gpu_hour,
            amount: self.amount,
            currency: self.currency.clone(),
            state: listing_state(&self.state)?,
            seller_tenant_id: seller.then_some(TenantId(self.seller_tenant_id)),
            created_at: self.created_at,
        })
    }
}

/// One reservation of `tenant_id`; another tenant's answers like a random id.
pub fn owned(
    conn: &mut PgConnection,
    id: Uuid,
    tenant_id: TenantId,
) -> Result<ReservationRow, Error> {
    reservations::table
        .find(id)
        .filter(reservations::tenant_id.eq(tenant_id.into_uuid()))
        .select(ReservationRow::as_select())
        .first(conn)
        .optional()?
        .ok_or_else(|| not_found(id))
}

pub fn not_found(id: Uuid) -> Error {
    Error::NotFound(format!("reservation {id} not found"))
}

/// The hours sold out of each of `ids`, by reservation.
pub fn sold(
    conn: &mut PgConnection,
    ids: &[Uuid],
) -> Result<std::collections::HashMap<Uuid, Vec<HourRange>>, Error> {
    let rows: Vec<(Uuid, DateTime<Utc>, DateTime<Utc>)> = resale_listings::table
        .filter(resale_listings::reservation_id.eq_any(ids))
        .filter(resale_listings::state.eq("sold"))
        .order(resale_listings::starts_at)
        .select((
            resale_listings::reservation_id,
            resale_listings::starts_at,
            resale_listings::ends_at,
        ))
        .load(conn)?;
    let mut out: std::collections::HashMap<Uuid, Vec<HourRange>> = Default::default();
    for (id, starts_at, ends_at) in rows {
        out.entry(id)
            .or_default()
            .push(HourRange { starts_at, ends_at });
    }
    Ok(out)
}

/// Rows as the contract's reservations, with their sold hours.
pub fn many(conn: &mut PgConnection, rows: Vec<ReservationRow>) -> Result<Vec<Reservation>, Error> {
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let mut sold = sold(conn, &ids)?;
    let now = contracts::time::now();
    rows.into_iter()
        .map(|r| {
            let s = sold.remove(&r.id).unwrap_or_default();
            r.to_contract(s, now)
        })
        .collect()
}

pub fn one(conn: &mut PgConnection, row: ReservationRow) -> Result<Reservation, Error> {
    many(conn, vec![row])?
        .pop()
        .ok_or_else(|| Error::NotFound("reservation not found".into()))
}

pub fn load(conn: &mut PgConnection, id: Uuid) -> Result<ReservationRow, Error> {
    reservations::table
        .find(id)
        .select(ReservationRow::as_select())
        .first(conn)
        .optional()?
        .ok_or_else(|| not_found(id))
}

/// The original reservation of a chain of resales: the one whose escrow
/// pays for the hours, and whose block a host's cancellation cancels.
pub fn root(conn: &mut PgConnection, id: Uuid) -> Result<Uuid, Error> {
    let mut current = load(conn, id)?;
    // Each resale adds one level; a chain longer than a block's hours
    // cannot exist, the bound only guards a corrupt loop.
    for _ in 0..=contracts::reservations::MAX_BLOCK_HOURS {
        match current.parent_id {
            Some(parent) => current = load(conn, parent)?,
            None => return Ok(current.id),
        }
    }
    Err(Error::Conflict(format!(
        "reservation {id} has no original booking"
    )))
}
