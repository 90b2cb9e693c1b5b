//! The monthly budget's arithmetic: calendar months in UTC, the spend of a
//! tenant's (or team's) holds within one, and the projection to its end.
//!
//! A hold costs its hourly rate for every whole second it is held inside the
//! month (`contracts::money::rate`, the billing formula). Its month-to-date
//! cost runs to `min(released, now)`; its projected cost runs to
//! `min(released, end of month)`, so a live hold is projected at its rate
//! until the month ends. Costs are rated per hold, then summed, exactly as
//! billing rates per interval.

use chrono::{DateTime, Datelike, TimeZone, Utc};
use contracts::money::{billed_seconds, rate};
use rust_decimal::Decimal;

/// `[start, end)` of the calendar month (UTC) that contains `at`.
pub fn bounds(at: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    let first = |year: i32, month: u32| {
        Utc.with_ymd_and_hms(year, month, 1, 0, 0, 0)
            .single()
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    };
    let (year, month) = (at.year(), at.month());
    let next = if month == 12 {
        first(year + 1, 1)
    } else {
        first(year, month + 1)
    };
    (first(year, month), next)
}

/// Whole seconds of `[from, until)` that fall inside `[lower, upper)`.
pub fn seconds_within(
    from: DateTime<Utc>,
    until: DateTime<Utc>,
    lower: DateTime<Utc>,
    upper: DateTime<Utc>,
) -> i64 {
    let start = from.max(lower);
    let end = until.min(upper);
    billed_seconds(start.timestamp_micros(), end.timestamp_micros())
}

/// One hold as the budget sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hold {
    pub hourly_rate: Decimal,
    pub held_from: DateTime<Utc>,
    pub released_at: Option<DateTime<Utc>>,
}

/// Month-to-date and projected month spend of `holds` at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Spend {
    pub month_to_date: Decimal,
    pub projected: Decimal,
}

pub fn spend(holds: &[Hold], now: DateTime<Utc>) -> Spend {
    let (start, end) = bounds(now);
    holds.iter().fold(Spend::default(), |acc, hold| {
        let released = hold.released_at.unwrap_or(DateTime::<Utc>::MAX_UTC);
        let to_date = seconds_within(hold.held_from, released.min(now), start, end);
        let to_end = seconds_within(hold.held_from, released, start, end);
        Spend {
            month_to_date: acc.month_to_date + rate(to_date, hold.hourly_rate),
            projected: acc.projected + rate(to_end, hold.hourly_rate),
        }
    })
}

/// What a new hold at `hourly_rate` taken at `now` adds to the projection.
pub fn projected_cost_of_new(hourly_rate: Decimal, now: DateTime<Utc>) -> Decimal {
    let (_, end) = bounds(now);
    rate(seconds_within(now, end, now, end), hourly_rate)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use chrono::Duration;
    use proptest::prelude::*;
    use rust_decimal_macros::dec;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn months_roll_over_years_and_leap_februaries() {
        assert_eq!(
            bounds(at("2026-12-31T23:59:59.999999Z")),
            (at("2026-12-01T00:00:00Z"), at("2027-01-01T00:00:00Z"))
        );
        assert_eq!(
            bounds(at("2028-02-29T12:00:00Z")),
            (at("2028-02-01T00:00:00Z"), at("2028-03-01T00:00:00Z"))
        );
        assert_eq!(
            bounds(at("2027-01-01T00:00:00Z")),
            (at("2027-01-01T00:00:00Z"), at("2027-02-01T00:00:00Z"))
        );
    }

    #[test]
    fn a_live_hold_is_projected_to_the_end_of_the_month() {
        let now = at("2026-12-31T22:00:00Z");
        let holds = [Hold {
            hourly_rate: dec!(2.5),
            held_from: at("2026-12-31T20:00:00Z"),
            released_at: None,
        }];
        let s = spend(&holds, now);
        assert_eq!(s.month_to_date, dec!(5));
        assert_eq!(s.projected, dec!(10));
        assert_eq!(projected_cost_of_new(dec!(3), now), dec!(6));
    }

    #[test]
    fn holds_count_only_inside_this_month() {
        let now = at("2026-12-10T00:00:00Z");
        let holds = [
            // Started last month: only December's hours count.
            Hold {
                hourly_rate: dec!(1),
                held_from: at("2026-11-30T00:00:00Z"),
                released_at: Some(at("2026-12-01T01:00:00Z")),
            },
            // Ended last month: nothing.
            Hold {
                hourly_rate: dec!(100),
                held_from: at("2026-11-01T00:00:00Z"),
                released_at: Some(at("2026-11-30T00:00:00Z")),
            },
            // Released this month: its held seconds, in both figures.
            Hold {
                hourly_rate: dec!(3600),
                held_from: at("2026-12-05T00:00:00Z"),
                released_at: Some(at("2026-12-05T00:00:10.9Z")),
            },
        ];
        let s = spend(&holds, now);
        assert_eq!(s.month_to_date, dec!(1) + dec!(10));
        assert_eq!(s.projected, s.month_to_date);
    }

    fn instant() -> impl Strategy<Value = DateTime<Utc>> {
        // 2025-01-01 .. 2030-01-01, microsecond resolution.
        (1_735_689_600_000_000i64..1_893_456_000_000_000i64)
            .prop_map(|us| DateTime::from_timestamp_micros(us).unwrap())
    }

    fn money() -> impl Strategy<Value = Decimal> {
        (0i64..100_000_000_000).prop_map(|n| Decimal::new(n, 9))
    }

    fn hold() -> impl Strategy<Value = Hold> {
        (
            money(),
            instant(),
            proptest::option::of(0i64..90 * 86_400_000_000),
        )
            .prop_map(|(hourly_rate, held_from, held_for)| Hold {
                hourly_rate,
                held_from,
                released_at: held_for.map(|us| held_from + Duration::microseconds(us)),
            })
    }

    proptest! {
        #[test]
        fn a_month_contains_its_instant_and_is_28_to_31_days(now in instant()) {
            let (start, end) = bounds(now);
            prop_assert!(start <= now && now < end);
            let days = (end - start).num_days();
            prop_assert!((28..=31).contains(&days));
            prop_assert_eq!(bounds(start), (start, end));
            prop_assert_eq!(bounds(end).0, end);
        }

        #[test]
        fn projection_is_at_least_the_month_to_date_and_at_most_a_full_month(
            holds in proptest::collection::vec(hold(), 0..8),
            now in instant(),
        ) {
            let s = spend(&holds, now);
            prop_assert!(s.month_to_date >= Decimal::ZERO);
            prop_assert!(s.projected >= s.month_to_date);
            let (start, end) = bounds(now);
            let month_seconds = (end - start).num_seconds();
            let ceiling: Decimal = holds.iter().map(|h| rate(month_seconds, h.hourly_rate)).sum();
            prop_assert!(s.projected <= ceiling);
        }

        #[test]
        fn taking_a_hold_adds_exactly_its_projection(
            holds in proptest::collection::vec(hold(), 0..8),
            rate_per_hour in money(),
            now in instant(),
        ) {
            // The admission check adds the new hold's projection to what is
            // held; that must equal the spend once the hold exists.
            let mut with_new = holds.clone();
            with_new.push(Hold { hourly_rate: rate_per_hour, held_from: now, released_at: None });
            prop_assert_eq!(
                spend(&with_new, now).projected,
                spend(&holds, now).projected + projected_cost_of_new(rate_per_hour, now)
            );
            prop_assert_eq!(spend(&with_new, now).month_to_date, spend(&holds, now).month_to_date);
        }

        #[test]
        fn releasing_a_hold_never_raises_the_projection(
            h in hold(),
            now in instant(),
        ) {
            let live = Hold { released_at: None, ..h };
            let released = Hold { released_at: Some(now), ..h };
            prop_assert!(spend(&[released], now).projected <= spend(&[live], now).projected);
            prop_assert_eq!(spend(&[released], now).month_to_date, spend(&[live], now).month_to_date);
        }
    }
}
