//! The arithmetic of booked periods (`catalog.booked_gpus.period`, always
//! `[start, end)`), as pure functions: what a cancellation leaves, what a
//! carve (a resale) leaves of its parent, and which hours may be carved.

use chrono::{DateTime, Utc};
use contracts::reservations::whole_hour;

/// A booked period, `[start, end)`.
pub type Period = (DateTime<Utc>, DateTime<Utc>);

/// What stays booked of `period` when nothing at or after `from` does.
pub fn shorten(period: Period, from: DateTime<Utc>) -> Option<Period> {
    let (start, end) = period;
    if from <= start {
        None
    } else if from >= end {
        Some(period)
    } else {
        Some((start, from))
    }
}

/// The parts of `period` before and after `cut` (which it contains).
pub fn split(period: Period, cut: Period) -> Vec<Period> {
    let (start, end) = period;
    let mut parts = Vec::new();
    if start < cut.0 {
        parts.push((start, cut.0.min(end)));
    }
    if cut.1 < end {
        parts.push((cut.1.max(start), end));
    }
    parts
}

/// Why hours `cut` cannot be carved out of a booking whose booked periods
/// on one of its GPUs are `periods`, if they cannot: they must be whole
/// hours, in the future, and inside one period still booked (hours carved
/// already, cancelled or never booked are not).
pub fn check_carve(periods: &[Period], cut: Period, now: DateTime<Utc>) -> Option<String> {
    let (start, end) = cut;
    if !whole_hour(start) || !whole_hour(end) {
        return Some(
            "startsAt and endsAt must be whole UTC hours (minutes, seconds and fractions 0)".into(),
        );
    }
    if end <= start {
        return Some("endsAt must be after startsAt".into());
    }
    if start <= now {
        return Some(
            "startsAt must be in the future: hours that have started stay the holder's".into(),
        );
    }
    if !periods.iter().any(|&(s, e)| s <= start && end <= e) {
        return Some(
            "those hours are not all booked by this reservation (outside its block, sold already or cancelled)"
                .into(),
        );
    }
    None
}

/// The period of `periods` that contains `at`.
pub fn containing(periods: &[Period], at: DateTime<Utc>) -> Option<Period> {
    periods.iter().copied().find(|&(s, e)| s <= at && at < e)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2027, 1, 4, h, 0, 0).single().unwrap()
    }

    #[test]
    fn shortening_keeps_what_came_before() {
        assert_eq!(shorten((at(10), at(14)), at(12)), Some((at(10), at(12))));
        assert_eq!(shorten((at(10), at(14)), at(10)), None);
        assert_eq!(shorten((at(10), at(14)), at(8)), None);
        assert_eq!(shorten((at(10), at(14)), at(14)), Some((at(10), at(14))));
    }

    #[test]
    fn carving_leaves_the_hours_before_and_after() {
        assert_eq!(
            split((at(10), at(20)), (at(12), at(15))),
            vec![(at(10), at(12)), (at(15), at(20))]
        );
        assert_eq!(
            split((at(10), at(20)), (at(10), at(15))),
            vec![(at(15), at(20))]
        );
        assert_eq!(
            split((at(10), at(20)), (at(12), at(20))),
            vec![(at(10), at(12))]
        );
        assert_eq!(split((at(10), at(20)), (at(10), at(20))), vec![]);
    }

    #[test]
    fn only_future_whole_hours_still_booked_are_carved() {
        let now = at(9) + chrono::Duration::minutes(30);
        let periods = vec![(at(10), at(12)), (at(15), at(20))];
        assert_eq!(check_carve(&periods, (at(16), at(18)), now), None);
        assert_eq!(check_carve(&periods, (at(10), at(12)), now), None);
        // Across the gap (hours sold already).
        assert!(check_carve(&periods, (at(11), at(16)), now).is_some());
        assert!(check_carve(&periods, (at(12), at(15)), now).is_some());
        // Outside the block.
        assert!(check_carve(&periods, (at(19), at(21)), now).is_some());
        // Not whole hours, empty, started.
        let half = at(16) + chrono::Duration::minutes(30);
        assert!(check_carve(&periods, (half, at(18)), now).is_some());
        assert!(check_carve(&periods, (at(18), at(16)), now).is_some());
        assert!(check_carve(&periods, (at(10), at(11)), at(10)).is_some());
        assert_eq!(containing(&periods, at(11)), Some((at(10), at(12))));
        assert_eq!(containing(&periods, at(12)), None);
    }
}
