//! Bounds on every money amount a caller may send, written once. The ledger and
//! the price columns are `NUMERIC(24,9)`: an amount with more than 15 integer
//! digits overflows the column (PostgreSQL answers "numeric field overflow"),
//! and one with more than 9 fractional digits would be rounded silently. Each
//! input therefore has a documented maximum far below the column's limit (so
//! that sums of many amounts still fit) and at most [`MAX_DECIMAL_PLACES`]
//! places. The gateway checks them before it calls a service; services check
//! again so that an internal caller cannot reach the column either.
//! docs/orders.md ("Money inputs") lists the bounds.

use rust_decimal::Decimal;

/// Fractional digits an amount may carry: the ledger's scale
/// ([`crate::money::LEDGER_SCALE`]).
pub const MAX_DECIMAL_PLACES: u32 = crate::money::LEDGER_SCALE;

/// Whether 0 is a valid amount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Minimum {
    /// 0 and up (a price of 0 gives a machine away; a cap of 0 stops spending).
    Zero,
    /// Greater than 0 (credits, top-ups, bids).
    Positive,
}

/// The bounds of one kind of money input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoneyBound {
    pub minimum: Minimum,
    /// Inclusive, in whole currency units.
    pub max_units: i64,
}

impl MoneyBound {
    pub fn max(&self) -> Decimal {
        Decimal::from(self.max_units)
    }
}

/// Prices per GPU hour: a listing price, a minimum bid, a bid, a renter's
/// maximum price. Catalog has refused listings above 1000 since it began (a
/// guard against a typo of a few zeros); a renter's maximum or bid above any
/// possible listing price means nothing.
pub const GPU_HOUR_PRICE: MoneyBound = MoneyBound {
    minimum: Minimum::Zero,
    max_units: 1_000,
};
/// A bid per GPU hour: as a price, but never 0.
pub const GPU_HOUR_BID: MoneyBound = MoneyBound {
    minimum: Minimum::Positive,
    max_units: 1_000,
};
/// Storage price per GB-month.
pub const STORAGE_PRICE: MoneyBound = MoneyBound {
    minimum: Minimum::Zero,
    max_units: 1_000,
};
/// Bandwidth price per TB (up or down).
pub const BANDWIDTH_PRICE: MoneyBound = MoneyBound {
    minimum: Minimum::Zero,
    max_units: 1_000,
};
/// One top-up (card payment): the ceiling; billing's configured maximum
/// (`GPUMARKET_TOP_UP_MAX_AMOUNT`, default 10000) is usually lower.
pub const TOP_UP: MoneyBound = MoneyBound {
    minimum: Minimum::Positive,
    max_units: 1_000_000,
};
/// One operator credit grant or credit note.
pub const CREDIT: MoneyBound = MoneyBound {
    minimum: Minimum::Positive,
    max_units: 1_000_000_000,
};
/// A monthly budget (spend cap) of a quota.
pub const MONTHLY_BUDGET: MoneyBound = MoneyBound {
    minimum: Minimum::Zero,
    max_units: 1_000_000_000,
};

/// Why an amount is out of bounds, in words that name the bound. The caller
/// puts the field name in front.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OutOfBounds(pub String);

/// Checks `value` against `bound`: the minimum, the maximum and the number of
/// decimal places as written (trailing zeros count: "1.0000000000" has 10
/// places and is refused like any other amount the ledger would round).
pub fn check(value: Decimal, bound: MoneyBound) -> Result<Decimal, OutOfBounds> {
    let lower = match bound.minimum {
        Minimum::Zero if value < Decimal::ZERO => Some("must not be negative"),
        Minimum::Positive if value <= Decimal::ZERO => Some("must be greater than 0"),
        _ => None,
    };
    if let Some(lower) = lower {
        return Err(OutOfBounds(lower.to_owned()));
    }
    if value > bound.max() || value.scale() > MAX_DECIMAL_PLACES {
        return Err(OutOfBounds(describe(bound)));
    }
    Ok(value)
}

/// "must be at most 1000 with at most 9 decimal places".
pub fn describe(bound: MoneyBound) -> String {
    format!(
        "must be at most {} with at most {MAX_DECIMAL_PLACES} decimal places",
        bound.max_units
    )
}

/// Checks an optional amount.
pub fn check_opt(value: Option<Decimal>, bound: MoneyBound) -> Result<(), OutOfBounds> {
    value.map(|v| check(v, bound)).transpose().map(|_| ())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn parse(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    #[test]
    fn within_bounds_passes() {
        assert!(check(parse("0"), GPU_HOUR_PRICE).is_ok());
        assert!(check(parse("1000"), GPU_HOUR_PRICE).is_ok());
        assert!(check(parse("2.123456789"), GPU_HOUR_PRICE).is_ok());
        assert!(check(parse("1000000000"), CREDIT).is_ok());
    }

    #[test]
    fn too_large_names_the_bound() {
        let err = check(parse("1000000000000000"), GPU_HOUR_PRICE).unwrap_err();
        assert_eq!(err.0, "must be at most 1000 with at most 9 decimal places");
        assert!(check(parse("9999999999999999"), GPU_HOUR_BID).is_err());
        assert!(check(parse("1000000000000000"), CREDIT).is_err());
        assert!(check(parse("1000.000000001"), GPU_HOUR_PRICE).is_err());
    }

    #[test]
    fn more_than_nine_places_is_refused_not_rounded() {
        assert!(check(parse("0.0000000001"), GPU_HOUR_PRICE).is_err());
        assert!(check(parse("1.0000000000"), GPU_HOUR_PRICE).is_err());
    }

    #[test]
    fn exponent_forms_are_refused_when_they_need_more_places() {
        // async-graphql's Decimal scalar parses strings with `Decimal::from_str`
        // and JSON numbers through a binary float; a tiny amount must not become 0.
        let tiny = Decimal::from_str("1e-30").or_else(|_| Decimal::from_scientific("1e-30"));
        if let Ok(tiny) = tiny {
            assert!(check(tiny, GPU_HOUR_PRICE).is_err(), "{tiny:?}");
        }
        // Past 28 places `from_str` rounds to a zero that keeps scale 28.
        let tiny = parse("0.00000000000000000000000000000001");
        assert!(check(tiny, GPU_HOUR_PRICE).is_err(), "{tiny:?}");
        // A JSON number goes through a binary float and 1e-30 arrives as exactly 0: the
        // gateway refuses such numbers before coercion (schema/numbers.rs).
        let huge = Decimal::from_scientific("1e15").unwrap();
        assert!(check(huge, GPU_HOUR_PRICE).is_err());
    }

    #[test]
    fn minimums() {
        assert_eq!(
            check(parse("-0.01"), GPU_HOUR_PRICE).unwrap_err().0,
            "must not be negative"
        );
        assert_eq!(
            check(parse("0"), TOP_UP).unwrap_err().0,
            "must be greater than 0"
        );
    }
}
