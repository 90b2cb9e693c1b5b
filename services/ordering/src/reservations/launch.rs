//! `createOrder(reservationId)`: an instance on GPUs of a running block.
//! The block is paid, so the order's GPU rate is 0 and it holds no quota of
//! its own (the reservation's hold counts the GPUs); storage and bandwidth
//! are metered at the booking's rates. The catalog picks GPUs of the block
//! that its other instances do not use, and preempts the instance when the
//! block ends, unless it asked to go on on demand (`whenBlockEnds`) and may
//! ([`super::continued`]).

use contracts::api::{CreateOrderRequest, RentalType};
use contracts::ids::{MachineId, ReservationId};
use contracts::reservations::WhenBlockEnds;
use diesel::prelude::*;
use platform::Db;
use rust_decimal::Decimal;
use schema::ordering_reservations::resale_listings;

use super::store::{self, Status};
use crate::Error;

pub(crate) fn validate(req: &CreateOrderRequest) -> Result<(), Error> {
    if req.offer_id.is_some() || req.constraints.is_some() {
        return Err(Error::Validation(
            "reservationId: an order on a reservation runs on its machine; give no offerId or constraints"
                .into(),
        ));
    }
    if req.rental_type != RentalType::OnDemand || req.bid_per_gpu_hour.is_some() {
        return Err(Error::Validation(
            "rentalType: an order on a reservation is on-demand (its GPUs are paid)".into(),
        ));
    }
    if req.mig_profile.is_some() {
        return Err(Error::Validation(
            "migProfile: reservations hold whole GPUs".into(),
        ));
    }
    if req.when_block_ends == Some(WhenBlockEnds::OnDemand) {
        match req.max_price_per_gpu_hour {
            Some(max) if max > Decimal::ZERO => {}
            Some(_) => {
                return Err(Error::Validation(
                    "maxPricePerGpuHour: must be positive".into(),
                ));
            }
            None => {
                return Err(Error::Validation(
                    "maxPricePerGpuHour: required with whenBlockEnds ON_DEMAND (the most the instance may cost per GPU-hour after the block)"
                        .into(),
                ));
            }
        }
    }
    Ok(())
}

/// The ceiling an order on a reservation goes on at after its block, when
/// it asked to (`whenBlockEnds: ON_DEMAND`); None: it stops with the block.
pub(crate) fn continue_up_to(req: &CreateOrderRequest) -> Option<Decimal> {
    match (req.reservation_id, req.when_block_ends) {
        (Some(_), Some(WhenBlockEnds::OnDemand)) => req.max_price_per_gpu_hour,
        _ => None,
    }
}

/// What an order on a reservation is quoted at: no GPU price, the
/// reservation's machine and model.
pub(crate) struct Reserved {
    pub currency: String,
    pub gpu_model: String,
    pub machine_id: MachineId,
}

/// The quote of an order on `reservation_id`: the caller's, booked, its
/// block running now, the hour not sold, and no more GPUs than it holds.
pub(crate) async fn quote(
    db: &Db,
    req: &CreateOrderRequest,
    reservation_id: ReservationId,
) -> Result<Reserved, Error> {
    let tenant_id = req.tenant_id;
    let gpu_count = req.gpu_count;
    db.run(move |conn| {
        let row = store::owned(conn, reservation_id.into_uuid(), tenant_id)?;
        let now = contracts::time::now();
        match row.status()? {
            Status::Booked => {}
            Status::Pending => {
                return Err(Error::Conflict(format!(
                    "reservation {reservation_id} is still being booked"
                )));
            }
            Status::Cancelled | Status::Failed => {
                return Err(Error::Conflict(format!(
                    "reservation {reservation_id} is {}; nothing runs on it",
                    row.status
                )));
            }
        }
        if now < row.starts_at {
            return Err(Error::Conflict(format!(
                "reservation {reservation_id}'s block starts at {}",
                row.starts_at.to_rfc3339()
            )));
        }
        if now >= row.ends_at {
            return Err(Error::Conflict(format!(
                "reservation {reservation_id}'s block ended at {}",
                row.ends_at.to_rfc3339()
            )));
        }
        let sold_now: i64 = resale_listings::table
            .filter(resale_listings::reservation_id.eq(row.id))
            .filter(resale_listings::state.eq("sold"))
            .filter(resale_listings::starts_at.le(now))
            .filter(resale_listings::ends_at.gt(now))
            .count()
            .get_result(conn)?;
        if sold_now > 0 {
            return Err(Error::Conflict(format!(
                "the current hours of reservation {reservation_id} were sold"
            )));
        }
        if gpu_count > row.gpu_count {
            return Err(Error::Validation(format!(
                "gpuCount: reservation {reservation_id} holds {} GPUs",
                row.gpu_count
            )));
        }
        let (Some(machine_id), Some(currency), Some(gpu_model)) =
            (row.machine_id, row.currency.clone(), row.gpu_model.clone())
        else {
            return Err(Error::Conflict(format!(
                "reservation {reservation_id} has no booking"
            )));
        };
        Ok(Reserved {
            currency,
            gpu_model,
            machine_id: MachineId(machine_id),
        })
    })
    .await
}
