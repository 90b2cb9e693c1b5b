//! What offers say about reserved blocks (docs/reservations.md): the host's
//! reserved terms, until when an on-demand rental placed now could run
//! (`available_until`, the earliest next booking over the GPUs it would
//! get), and from when GPUs are free (`available_from`: now, else the end
//! of the earliest block holding the machine's GPUs). Filled in for the
//! offers of a page after the search's own statement, in two statements
//! for the whole page, so the search's filtering and paging are unchanged.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use contracts::api::Offer;
use diesel::prelude::*;
use diesel::sql_types::{Array, Timestamptz, Uuid as SqlUuid};
use uuid::Uuid;

use crate::Error;
use crate::gpu_choice::{self, GpuState};

#[derive(QueryableByName)]
struct BlockEnd {
    #[diesel(sql_type = SqlUuid)]
    machine_id: Uuid,
    #[diesel(sql_type = Timestamptz)]
    ends_at: DateTime<Utc>,
}

/// The end of the earliest booked period running at `at`, per machine.
fn running_block_ends(
    conn: &mut PgConnection,
    machine_ids: &[Uuid],
    at: DateTime<Utc>,
) -> QueryResult<BTreeMap<Uuid, DateTime<Utc>>> {
    let rows: Vec<BlockEnd> = diesel::sql_query(
        "SELECT machine_id, min(upper(period)) AS ends_at FROM catalog.booked_gpus
         WHERE machine_id = ANY($1) AND period @> $2 GROUP BY machine_id",
    )
    .bind::<Array<SqlUuid>, _>(machine_ids)
    .bind::<Timestamptz, _>(at)
    .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|r| (r.machine_id, r.ends_at))
        .collect())
}

/// `(available_from, available_until)` of one machine for a rental of
/// `gpus` GPUs at `at`.
pub fn window(
    states: &[GpuState],
    gpus: usize,
    running_block_end: Option<DateTime<Utc>>,
    at: DateTime<Utc>,
) -> (Option<DateTime<Utc>>, Option<DateTime<Utc>>) {
    let free = gpu_choice::free_for_rental(states, &[]);
    if free.is_empty() {
        return (running_block_end, None);
    }
    let until = gpu_choice::choose_for_rental(&free, gpus.clamp(1, free.len()))
        .and_then(|chosen| gpu_choice::ends_by(states, &chosen));
    (Some(at), until)
}

/// Fills `reserved`, `available_from` and `available_until` of `offers`
/// for a rental of `gpus` GPUs.
pub fn fill(conn: &mut PgConnection, offers: &mut [Offer], gpus: i32) -> Result<(), Error> {
    if offers.is_empty() {
        return Ok(());
    }
    let at = contracts::time::now();
    let ids: Vec<Uuid> = offers.iter().map(|o| o.id.into_uuid()).collect();
    let currency: BTreeMap<Uuid, String> = offers
        .iter()
        .map(|o| (o.id.into_uuid(), o.currency.clone()))
        .collect();
    let mut terms = crate::reserved_terms::of_many(conn, &ids, &currency)?;
    let states = crate::gpu_state::load(conn, &ids, at)?;
    let ends = running_block_ends(conn, &ids, at)?;
    let gpus = usize::try_from(gpus).unwrap_or(1);
    for offer in offers.iter_mut() {
        let id = offer.id.into_uuid();
        offer.reserved = terms.remove(&id);
        let on_machine = states.get(&id).map_or(&[][..], Vec::as_slice);
        (offer.available_from, offer.available_until) =
            window(on_machine, gpus, ends.get(&id).copied(), at);
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2027, 1, 4, h, 0, 0).single().unwrap()
    }

    fn gpu(index: u32, booked_now: bool, next: Option<DateTime<Utc>>) -> GpuState {
        GpuState {
            index,
            mig: false,
            holder: None,
            booked_now,
            next_booking: next,
        }
    }

    #[test]
    fn free_gpus_are_available_now_until_the_next_booking_of_those_chosen() {
        let states = vec![gpu(0, false, Some(at(12))), gpu(1, false, None)];
        assert_eq!(window(&states, 1, None, at(9)), (Some(at(9)), None));
        assert_eq!(window(&states, 2, None, at(9)), (Some(at(9)), Some(at(12))));
        // More GPUs than are free: the window of those there are.
        assert_eq!(window(&states, 4, None, at(9)), (Some(at(9)), Some(at(12))));
    }

    #[test]
    fn a_machine_taken_by_a_block_is_available_from_its_end() {
        let states = vec![gpu(0, true, None), gpu(1, true, None)];
        assert_eq!(
            window(&states, 1, Some(at(15)), at(9)),
            (Some(at(15)), None)
        );
        assert_eq!(window(&[], 1, None, at(9)), (None, None));
    }
}
