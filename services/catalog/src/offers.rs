//! Offers: listed, priced machines with free GPUs, as renters search them.
//! Pages are keyset-paginated on (price, id), so a page boundary stays put
//! while other offers change.

use contracts::api::{Offer, OfferPage, OfferQuery};
use diesel::prelude::*;
use platform::Db;
use rust_decimal::Decimal;
use schema::catalog::machines;
use uuid::Uuid;

use crate::Error;
use crate::machines::MachineRow;

const MAX_PAGE: i64 = 100;

fn offer(m: MachineRow) -> Option<Offer> {
    Some(Offer {
        id: m.id,
        machine_id: m.id,
        host_tenant_id: m.host_tenant_id,
        gpus_free: m.gpu_count - m.gpus_allocated,
        gpu_model: m.gpu_model,
        gpu_count: m.gpu_count,
        vram_gib: m.vram_gib,
        cpu_cores: m.cpu_cores,
        ram_gib: m.ram_gib,
        disk_gib: m.disk_gib,
        country: m.country,
        price_per_gpu_hour: m.price_per_gpu_hour?.normalize(),
        currency: m.currency,
    })
}

fn encode_cursor(price: Decimal, id: Uuid) -> String {
    hex::encode(format!("{price}|{id}"))
}

fn decode_cursor(cursor: &str) -> Result<(Decimal, Uuid), Error> {
    let bad = || Error::Validation("after: not a cursor from this API".into());
    let raw = String::from_utf8(hex::decode(cursor).map_err(|_| bad())?).map_err(|_| bad())?;
    let (price, id) = raw.split_once('|').ok_or_else(bad)?;
    Ok((
        price.parse().map_err(|_| bad())?,
        id.parse().map_err(|_| bad())?,
    ))
}

pub async fn search(db: &Db, q: OfferQuery) -> Result<OfferPage, Error> {
    let first = q.first.unwrap_or(20);
    if !(1..=MAX_PAGE).contains(&first) {
        return Err(Error::Validation(format!(
            "first: must be between 1 and {MAX_PAGE}"
        )));
    }
    if let Some(n) = q.min_gpus
        && n < 1
    {
        return Err(Error::Validation("minGpus: at least 1".into()));
    }
    if let Some(p) = q.max_price_per_gpu_hour
        && p < Decimal::ZERO
    {
        return Err(Error::Validation(
            "maxPricePerGpuHour: must not be negative".into(),
        ));
    }
    let after = q.after.as_deref().map(decode_cursor).transpose()?;
    db.run(move |conn| {
        let min_free = q.min_gpus.unwrap_or(1);
        let mut query = machines::table
            .filter(machines::listed.eq(true))
            .filter(machines::price_per_gpu_hour.is_not_null())
            .filter((machines::gpu_count - machines::gpus_allocated).ge(min_free))
            .select(MachineRow::as_select())
            .order((machines::price_per_gpu_hour.asc(), machines::id.asc()))
            .limit(first + 1)
            .into_boxed();
        if let Some(model) = q
            .gpu_model
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty())
        {
            query = query
                .filter(machines::gpu_model.ilike(model.replace('%', "\\%").replace('_', "\\_")));
        }
        if let Some(max) = q.max_price_per_gpu_hour {
            query = query.filter(machines::price_per_gpu_hour.le(max));
        }
        if let Some((price, id)) = after {
            query = query.filter(
                machines::price_per_gpu_hour
                    .gt(price)
                    .or(machines::price_per_gpu_hour
                        .eq(price)
                        .and(machines::id.gt(id))),
            );
        }
        let mut rows: Vec<MachineRow> = query.load(conn)?;
        let has_next_page = rows.len() as i64 > first;
        rows.truncate(first as usize);
        let offers: Vec<Offer> = rows.into_iter().filter_map(offer).collect();
        let end_cursor = offers
            .last()
            .map(|o| encode_cursor(o.price_per_gpu_hour, o.id));
        Ok(OfferPage {
            offers,
            end_cursor,
            has_next_page,
        })
    })
    .await
}

/// One offer by id, whether or not it has free GPUs right now (the order
/// saga decides about capacity); an unlisted machine is not an offer.
pub async fn get(db: &Db, id: Uuid) -> Result<Offer, Error> {
    db.run(move |conn| {
        let row: Option<MachineRow> = machines::table
            .find(id)
            .filter(machines::listed.eq(true))
            .select(MachineRow::as_select())
            .first(conn)
            .optional()?;
        row.and_then(offer)
            .ok_or_else(|| Error::NotFound(format!("offer {id} not found")))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let id = Uuid::now_v7();
        let price: Decimal = "2.49".parse().unwrap();
        assert_eq!(
            decode_cursor(&encode_cursor(price, id)).unwrap(),
            (price, id)
        );
        assert!(decode_cursor("zz").is_err());
        assert!(decode_cursor(&hex::encode("nothing")).is_err());
    }
}
