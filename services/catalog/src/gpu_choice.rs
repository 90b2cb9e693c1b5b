//! Which GPU indices of a machine a rental or a reserved block gets, as pure
//! functions of the machine's GPUs (docs/reservations.md, docs/mig.md). The
//! callers load the state under the machine's row lock
//! ([`crate::gpu_state`]) and hold what these choose in the same transaction.
//!
//! - A rental made now (on-demand or interruptible) never gets a GPU in MIG
//!   mode, held by someone else, or inside a booked period that has started
//!   (its block holds it, or will at the sweeper's next pass). Among the
//!   rest it gets the GPUs free of bookings first, then those whose next
//!   booking starts latest, then the lowest indices; it must end by the
//!   earliest next booking over the GPUs it got.
//! - A block gets whole-mode GPUs with no booked period overlapping it,
//!   those no rental holds now first (so fewer rentals are cut short), then
//!   the lowest indices.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// One GPU of a machine as a choice sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuState {
    pub index: u32,
    /// In MIG mode: never rented or booked whole.
    pub mig: bool,
    /// The allocation holding it (a whole rental, a slice, a block), if any.
    pub holder: Option<Uuid>,
    /// Inside a booked period that has started.
    pub booked_now: bool,
    /// The start of its next booked period, if any.
    pub next_booking: Option<DateTime<Utc>>,
}

/// The GPUs a rental made now could get once `victims` (interruptible
/// allocations it preempts) have given theirs back.
pub fn free_for_rental<'a>(states: &'a [GpuState], victims: &[Uuid]) -> Vec<&'a GpuState> {
    states
        .iter()
        .filter(|g| !g.mig && !g.booked_now)
        .filter(|g| g.holder.is_none_or(|h| victims.contains(&h)))
        .collect()
}

/// `n` of `free` for a rental made now, in the preference order above;
/// `None` when there are fewer.
pub fn choose_for_rental(free: &[&GpuState], n: usize) -> Option<Vec<u32>> {
    if free.len() < n {
        return None;
    }
    let mut ranked: Vec<&GpuState> = free.to_vec();
    // No booking ahead first (`false < true`), then the latest booking.
    ranked.sort_by_key(|g| (g.next_booking.is_some(), Reverse(g.next_booking), g.index));
    let mut chosen: Vec<u32> = ranked.iter().take(n).map(|g| g.index).collect();
    chosen.sort_unstable();
    Some(chosen)
}

/// When a rental of `chosen` must end: the earliest next booking over them.
pub fn ends_by(states: &[GpuState], chosen: &[u32]) -> Option<DateTime<Utc>> {
    states
        .iter()
        .filter(|g| chosen.contains(&g.index))
        .filter_map(|g| g.next_booking)
        .min()
}

/// How many GPUs the holders free for a rental made now: their GPUs that
/// are not inside a started booked period (those go to the block).
pub fn usable_from(states: &[GpuState], holder: Uuid) -> usize {
    states
        .iter()
        .filter(|g| g.holder == Some(holder) && !g.mig && !g.booked_now)
        .count()
}

/// `n` GPUs for a block: of `0..gpu_count`, those not in `mig` and not in
/// `booked` (booked in a period overlapping the block), the ones not in
/// `held` (held by a rental now) first, then the lowest. `Err(free)` with
/// how many there are when fewer than `n`.
pub fn choose_for_block(
    gpu_count: u32,
    mig: &BTreeSet<u32>,
    booked: &BTreeSet<u32>,
    held: &BTreeSet<u32>,
    n: usize,
) -> Result<Vec<u32>, usize> {
    let mut free: Vec<u32> = (0..gpu_count)
        .filter(|i| !mig.contains(i) && !booked.contains(i))
        .collect();
    if free.len() < n {
        return Err(free.len());
    }
    free.sort_by_key(|i| (held.contains(i), *i));
    let mut chosen: Vec<u32> = free.into_iter().take(n).collect();
    chosen.sort_unstable();
    Ok(chosen)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2027, 1, 4, h, 0, 0).single().unwrap()
    }

    fn gpu(index: u32) -> GpuState {
        GpuState {
            index,
            mig: false,
            holder: None,
            booked_now: false,
            next_booking: None,
        }
    }

    fn set(v: &[u32]) -> BTreeSet<u32> {
        v.iter().copied().collect()
    }

    #[test]
    fn a_rental_skips_mig_held_and_started_blocks() {
        let other = Uuid::now_v7();
        let states = vec![
            GpuState {
                mig: true,
                ..gpu(0)
            },
            GpuState {
                holder: Some(other),
                ..gpu(1)
            },
            GpuState {
                booked_now: true,
                ..gpu(2)
            },
            gpu(3),
        ];
        let free = free_for_rental(&states, &[]);
        assert_eq!(free.iter().map(|g| g.index).collect::<Vec<_>>(), vec![3]);
        assert_eq!(choose_for_rental(&free, 1), Some(vec![3]));
        assert_eq!(choose_for_rental(&free, 2), None);
        // Preempting the holder frees its GPU, not a started block's.
        let free = free_for_rental(&states, &[other]);
        assert_eq!(choose_for_rental(&free, 2), Some(vec![1, 3]));
        assert_eq!(usable_from(&states, other), 1);
    }

    #[test]
    fn a_rental_prefers_no_booking_then_the_latest_booking() {
        let states = vec![
            GpuState {
                next_booking: Some(at(10)),
                ..gpu(0)
            },
            GpuState {
                next_booking: Some(at(14)),
                ..gpu(1)
            },
            gpu(2),
            GpuState {
                next_booking: Some(at(12)),
                ..gpu(3)
            },
            gpu(4),
        ];
        let free = free_for_rental(&states, &[]);
        let one = choose_for_rental(&free, 1).unwrap();
        assert_eq!(one, vec![2]);
        assert_eq!(ends_by(&states, &one), None);
        let two = choose_for_rental(&free, 2).unwrap();
        assert_eq!(two, vec![2, 4]);
        let three = choose_for_rental(&free, 3).unwrap();
        assert_eq!(three, vec![1, 2, 4]);
        assert_eq!(ends_by(&states, &three), Some(at(14)));
        let four = choose_for_rental(&free, 4).unwrap();
        assert_eq!(four, vec![1, 2, 3, 4]);
        assert_eq!(ends_by(&states, &four), Some(at(12)));
        let five = choose_for_rental(&free, 5).unwrap();
        assert_eq!(ends_by(&states, &five), Some(at(10)));
    }

    #[test]
    fn a_block_takes_unbooked_whole_gpus_unheld_first_then_lowest() {
        // GPU 0 in MIG mode, 2 booked over the block, 1 and 3 rented now.
        let chosen = choose_for_block(6, &set(&[0]), &set(&[2]), &set(&[1, 3]), 2).unwrap();
        assert_eq!(chosen, vec![4, 5]);
        let chosen = choose_for_block(6, &set(&[0]), &set(&[2]), &set(&[1, 3]), 3).unwrap();
        assert_eq!(chosen, vec![1, 4, 5]);
        let chosen = choose_for_block(6, &set(&[0]), &set(&[2]), &set(&[1, 3]), 4).unwrap();
        assert_eq!(chosen, vec![1, 3, 4, 5]);
        assert_eq!(
            choose_for_block(6, &set(&[0]), &set(&[2]), &set(&[]), 5),
            Err(4)
        );
        assert_eq!(
            choose_for_block(2, &set(&[]), &set(&[]), &set(&[]), 2),
            Ok(vec![0, 1])
        );
    }
}
