//! Amounts between the ledger (`Decimal` in the settlement currency) and
//! Stripe (integers in the currency's minor unit: cents for USD, yen for
//! JPY). The conversion is exact or refused: an amount with more decimals
//! than the currency has would otherwise be rounded into a different charge.

use contracts::money::minor_unit_digits;
use rust_decimal::Decimal;

use crate::Error;

/// `amount` in minor units of `currency` (ISO code), exactly.
pub fn to_minor(amount: Decimal, currency: &str) -> Result<i64, Error> {
    let digits = minor_unit_digits(currency);
    // Trailing zeros are not extra precision: 10.50 USD is 1050 cents.
    let normalized = amount.normalize();
    if normalized.scale() > digits {
        return Err(Error::Validation(format!(
            "amount: {currency} has {digits} decimal places; {amount} has more"
        )));
    }
    let scaled = normalized
        .checked_mul(Decimal::from(10_i64.pow(digits)))
        .ok_or_else(|| Error::Validation("amount: too large".into()))?;
    i64::try_from(scaled).map_err(|_| Error::Validation("amount: too large".into()))
}

/// `minor` units of `currency` as a decimal amount.
pub fn from_minor(minor: i64, currency: &str) -> Decimal {
    Decimal::new(minor, minor_unit_digits(currency))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;
    use rust_decimal_macros::dec;

    use super::*;

    #[test]
    fn amounts_convert_exactly_per_currency() {
        assert_eq!(to_minor(dec!(10.5), "USD").unwrap(), 1050);
        assert_eq!(to_minor(dec!(10.50), "USD").unwrap(), 1050);
        assert_eq!(to_minor(dec!(10.500000000), "USD").unwrap(), 1050);
        assert_eq!(to_minor(dec!(0.01), "EUR").unwrap(), 1);
        assert_eq!(to_minor(dec!(1500), "JPY").unwrap(), 1500);
        assert_eq!(to_minor(dec!(1.234), "KWD").unwrap(), 1234);
        assert_eq!(from_minor(1050, "USD"), dec!(10.50));
        assert_eq!(from_minor(1500, "JPY"), dec!(1500));
    }

    #[test]
    fn more_decimals_than_the_currency_has_are_refused() {
        for (amount, currency) in [
            (dec!(10.001), "USD"),
            (dec!(1.5), "JPY"),
            (dec!(0.0001), "KWD"),
        ] {
            let error = to_minor(amount, currency).unwrap_err();
            assert!(error.to_string().starts_with("amount:"), "{error}");
        }
    }

    #[test]
    fn amounts_beyond_an_i64_of_minor_units_are_refused() {
        assert!(to_minor(Decimal::MAX, "USD").is_err());
    }

    proptest! {
        #[test]
        fn minor_units_round_trip(minor in 1_i64..1_000_000_000_000, currency in prop::sample::select(vec!["USD", "JPY", "KWD", "EUR"])) {
            let amount = from_minor(minor, currency);
            prop_assert_eq!(to_minor(amount, currency).unwrap(), minor);
        }

        #[test]
        fn an_extra_digit_is_always_refused(minor in 1_i64..1_000_000_000, extra in 1_i64..10) {
            // One more decimal than USD has, never zero in that place.
            let amount = Decimal::new(minor * 10 + extra, 3);
            prop_assert!(to_minor(amount, "USD").is_err());
        }
    }
}
