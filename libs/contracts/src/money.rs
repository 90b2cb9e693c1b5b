//! Money math, written once. Amounts are `Decimal`; the ledger keeps 9
//! fractional digits and invoices round once to the currency's minor unit.
//! Every function rounds half-even (banker's rounding) so that rounding
//! residue does not drift in one direction over many postings.

use rust_decimal::{Decimal, RoundingStrategy};

/// Fractional digits kept in the ledger (`NUMERIC(24,9)`).
pub const LEDGER_SCALE: u32 = 9;

const SECONDS_PER_HOUR: i64 = 3600;

/// The charge for `seconds` at `price_per_hour`:
/// `round_half_even(seconds × price_per_hour / 3600, 9)`.
pub fn rate(seconds: i64, price_per_hour: Decimal) -> Decimal {
    // Multiply before dividing so that whole-hour multiples stay exact.
    let gross = Decimal::from(seconds) * price_per_hour / Decimal::from(SECONDS_PER_HOUR);
    gross.round_dp_with_strategy(LEDGER_SCALE, RoundingStrategy::MidpointNearestEven)
}

/// Splits a charge into the host's share and the platform fee. The host's
/// share is rounded; the fee takes the remainder so the two always add up to
/// `amount` exactly.
pub fn split_fee(amount: Decimal, fee_rate: Decimal) -> FeeSplit {
    let host = (amount * (Decimal::ONE - fee_rate))
        .round_dp_with_strategy(LEDGER_SCALE, RoundingStrategy::MidpointNearestEven);
    FeeSplit {
        host,
        fee: amount - host,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeeSplit {
    pub host: Decimal,
    pub fee: Decimal,
}

/// Digits after the point of a currency's minor unit (ISO 4217).
pub fn minor_unit_digits(currency: &str) -> u32 {
    match currency {
        "JPY" | "KRW" | "VND" | "CLP" | "ISK" => 0,
        "BHD" | "KWD" | "OMR" | "JOD" | "TND" => 3,
        _ => 2,
    }
}

/// Rounds an amount once to the currency's minor unit, half-even.
pub fn round_to_minor(amount: Decimal, currency: &str) -> Decimal {
    amount.round_dp_with_strategy(
        minor_unit_digits(currency),
        RoundingStrategy::MidpointNearestEven,
    )
}

/// Whole seconds `balance` lasts at `per_hour`; None when nothing burns,
/// 0 when the balance is gone.
pub fn runway_seconds(balance: Decimal, per_hour: Decimal) -> Option<i64> {
    use rust_decimal::prelude::ToPrimitive;
    if per_hour <= Decimal::ZERO {
        return None;
    }
    if balance <= Decimal::ZERO {
        return Some(0);
    }
    let seconds = (balance * Decimal::from(3600) / per_hour).floor();
    Some(seconds.to_i64().unwrap_or(i64::MAX))
}

/// Whole seconds between two instants given in microseconds since the epoch:
/// `floor(t1 - t0)`, never negative.
pub fn billed_seconds(t0_micros: i64, t1_micros: i64) -> i64 {
    if t1_micros <= t0_micros {
        return 0;
    }
    (t1_micros - t0_micros).div_euclid(1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rust_decimal_macros::dec;

    #[test]
    fn an_hour_costs_the_hourly_price() {
        assert_eq!(rate(3600, dec!(2.49)), dec!(2.49));
        assert_eq!(rate(0, dec!(2.49)), dec!(0));
    }

    #[test]
    fn per_second_charges_round_half_even_at_nine_digits() {
        // 1 s at 0.0000054 $/h = 0.0000000015: the midpoint goes to the even 2.
        assert_eq!(rate(1, dec!(0.0000054)), dec!(0.000000002));
        // 1 s at 0.0000090 $/h = 0.0000000025: the midpoint stays on the even 2.
        assert_eq!(rate(1, dec!(0.0000090)), dec!(0.000000002));
    }

    #[test]
    fn seconds_are_floored_from_instants() {
        assert_eq!(billed_seconds(0, 999_999), 0);
        assert_eq!(billed_seconds(0, 1_000_000), 1);
        assert_eq!(billed_seconds(1_500_000, 3_499_999), 1);
        assert_eq!(billed_seconds(5, 1), 0);
    }

    #[test]
    fn invoice_rounding_is_bankers() {
        assert_eq!(round_to_minor(dec!(0.125), "USD"), dec!(0.12));
        assert_eq!(round_to_minor(dec!(0.135), "USD"), dec!(0.14));
        assert_eq!(round_to_minor(dec!(12.5), "JPY"), dec!(12));
    }

    fn price() -> impl Strategy<Value = Decimal> {
        // Up to $1000 per hour with cent-and-below precision.
        (0i64..100_000_000).prop_map(|c| Decimal::new(c, 5))
    }

    fn fee_rate() -> impl Strategy<Value = Decimal> {
        (0i64..=10_000).prop_map(|bp| Decimal::new(bp, 4))
    }

    proptest! {
        #[test]
        fn fee_split_always_balances(seconds in 0i64..10_000_000, p in price(), f in fee_rate()) {
            let amount = rate(seconds, p);
            let split = split_fee(amount, f);
            prop_assert_eq!(split.host + split.fee, amount);
            prop_assert!(split.host >= Decimal::ZERO);
            prop_assert!(split.fee >= Decimal::ZERO);
            prop_assert!(amount.scale() <= LEDGER_SCALE);
            prop_assert!(split.host.scale() <= LEDGER_SCALE);
        }

        #[test]
        fn rating_is_within_half_a_nano_of_the_exact_value(seconds in 0i64..10_000_000, p in price()) {
            let exact = Decimal::from(seconds) * p / Decimal::from(3600);
            let diff = (rate(seconds, p) - exact).abs();
            prop_assert!(diff <= Decimal::new(5, 10));
        }

        #[test]
        fn rating_is_monotonic_in_seconds(seconds in 0i64..10_000_000, p in price()) {
            prop_assert!(rate(seconds + 1, p) >= rate(seconds, p));
        }

        #[test]
        fn rating_splits_additively_over_whole_hours(hours in 0i64..1000, p in price()) {
            prop_assert_eq!(rate(hours * 3600, p), p * Decimal::from(hours));
        }
    }
}
