//! A host's terms for reserved blocks on a machine (`catalog.reserved_terms`,
//! docs/reservations.md): the price per GPU-hour charged up front, how far
//! ahead the machine can be booked, and the shortest block. Withdrawing the
//! terms stops new bookings; booked blocks stay.

use std::collections::BTreeMap;

use contracts::FieldErrors;
use contracts::ids::MachineId;
use contracts::reservations::{
    MAX_BLOCK_HOURS, MAX_LEAD_DAYS, ReservedTerms, ReservedTermsInput, SetReservedTermsRequest,
};
use diesel::prelude::*;
use platform::Db;
use rust_decimal::Decimal;
use schema::catalog::machines;
use schema::catalog_bookings::reserved_terms;
use uuid::Uuid;

use crate::Error;

/// Every field that is wrong, at once (the portal marks each).
fn validate(input: &ReservedTermsInput) -> Result<(), Error> {
    let mut errors = FieldErrors::new();
    if let Err(e) =
        contracts::bounds::check(input.price_per_gpu_hour, contracts::bounds::GPU_HOUR_BID)
    {
        errors.add("pricePerGpuHour", e.0);
    }
    errors.check(
        (1..=MAX_LEAD_DAYS).contains(&input.max_lead_days),
        "maxLeadDays",
        format!("must be between 1 and {MAX_LEAD_DAYS}"),
    );
    errors.check(
        (1..=MAX_BLOCK_HOURS).contains(&i64::from(input.min_block_hours)),
        "minBlockHours",
        format!("must be between 1 and {MAX_BLOCK_HOURS}"),
    );
    // A block starts at the next whole hour at the earliest and must end
    // within the lead time: a shortest block longer than that is never bookable.
    if errors.is_empty() {
        errors.check(
            i64::from(input.min_block_hours) < i64::from(input.max_lead_days) * 24,
            "minBlockHours",
            format!(
                "a block of {} hours never fits within {} days ahead",
                input.min_block_hours, input.max_lead_days
            ),
        );
    }
    errors.into_result()?;
    Ok(())
}

/// Sets or withdraws the terms of a host's machine; another host's machine
/// (or a deleted one) answers like a random id. Answers the terms in force.
pub async fn set(
    db: &Db,
    machine_id: MachineId,
    req: SetReservedTermsRequest,
) -> Result<Option<ReservedTerms>, Error> {
    if let Some(input) = &req.terms {
        validate(input)?;
    }
    db.tx(move |conn| {
        // The machine's row lock: a booking reads the terms under it.
        let currency: Option<String> = machines::table
            .find(machine_id)
            .filter(machines::host_tenant_id.eq(req.host_tenant_id))
            .filter(machines::deleted_at.is_null())
            .select(machines::currency)
            .for_update()
            .first(conn)
            .optional()?;
        let Some(currency) = currency else {
            return Err(Error::NotFound(format!("machine {machine_id} not found")));
        };
        match &req.terms {
            Some(input) => {
                diesel::insert_into(reserved_terms::table)
                    .values((
                        reserved_terms::machine_id.eq(machine_id),
                        reserved_terms::price_per_gpu_hour.eq(input.price_per_gpu_hour),
                        reserved_terms::max_lead_days.eq(input.max_lead_days),
                        reserved_terms::min_block_hours.eq(input.min_block_hours),
                    ))
                    .on_conflict(reserved_terms::machine_id)
                    .do_update()
                    .set((
                        reserved_terms::price_per_gpu_hour.eq(input.price_per_gpu_hour),
                        reserved_terms::max_lead_days.eq(input.max_lead_days),
                        reserved_terms::min_block_hours.eq(input.min_block_hours),
                        reserved_terms::updated_at.eq(diesel::dsl::now),
                    ))
                    .execute(conn)?;
            }
            None => {
                diesel::delete(reserved_terms::table.find(machine_id)).execute(conn)?;
            }
        }
        tracing::info!(machine.id = %machine_id, offered = req.terms.is_some(), "reserved terms set");
        Ok(of(conn, machine_id.into(), &currency)?)
    })
    .await
}

type Row = (Uuid, Decimal, i32, i32);

fn terms(row: Row, currency: &str) -> ReservedTerms {
    let (_, price, lead, min) = row;
    ReservedTerms {
        price_per_gpu_hour: price.normalize(),
        max_lead_days: lead,
        min_block_hours: min,
        currency: currency.to_owned(),
    }
}

fn columns() -> (
    reserved_terms::machine_id,
    reserved_terms::price_per_gpu_hour,
    reserved_terms::max_lead_days,
    reserved_terms::min_block_hours,
) {
    (
        reserved_terms::machine_id,
        reserved_terms::price_per_gpu_hour,
        reserved_terms::max_lead_days,
        reserved_terms::min_block_hours,
    )
}

/// A machine's terms, in its currency; `None`: not offered.
pub fn of(
    conn: &mut PgConnection,
    machine_id: Uuid,
    currency: &str,
) -> QueryResult<Option<ReservedTerms>> {
    let row: Option<Row> = reserved_terms::table
        .find(machine_id)
        .select(columns())
        .first(conn)
        .optional()?;
    Ok(row.map(|r| terms(r, currency)))
}

/// The terms of many machines (an offer page), in `currency`.
pub fn of_many(
    conn: &mut PgConnection,
    machine_ids: &[Uuid],
    currency: &BTreeMap<Uuid, String>,
) -> QueryResult<BTreeMap<Uuid, ReservedTerms>> {
    if machine_ids.is_empty() {
        return Ok(BTreeMap::new());
    }
    let rows: Vec<Row> = reserved_terms::table
        .filter(reserved_terms::machine_id.eq_any(machine_ids))
        .select(columns())
        .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let id = r.0;
            let c = currency.get(&id).map_or("", String::as_str);
            (id, terms(r, c))
        })
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn input(price: &str, lead: i32, min: i32) -> ReservedTermsInput {
        ReservedTermsInput {
            price_per_gpu_hour: price.parse().unwrap(),
            max_lead_days: lead,
            min_block_hours: min,
        }
    }

    #[test]
    fn terms_are_bounded() {
        assert!(validate(&input("1.5", 30, 4)).is_ok());
        assert!(validate(&input("1000", 365, 2160)).is_ok());
        for bad in [
            input("0", 30, 4),
            input("-1", 30, 4),
            input("1000.000000001", 30, 4),
            input("1.0000000001", 30, 4),
            input("1", 0, 4),
            input("1", 366, 4),
            input("1", 30, 0),
            input("1", 30, 2161),
            input("1", 1, 24),
        ] {
            assert!(matches!(validate(&bad), Err(Error::Fields(_))), "{bad:?}");
        }
    }
}
