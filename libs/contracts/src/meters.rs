//! The meters usage is measured and priced in, by name (the names are
//! [`Meter`]'s, as text for SQL and routing): what a quantity
//! counts and what a price is per. Metering measures, billing rates,
//! invoices and the FOCUS export show them; all read the same table here.

use rust_decimal::{Decimal, RoundingStrategy};

use crate::money::LEDGER_SCALE;
use crate::states::Meter;

/// GPU time: seconds at a price per hour (all the rental's GPUs).
pub const GPU: &str = Meter::Gpu.as_str();
/// Disk: seconds of the rental's GiB (GiB-seconds on invoices) at a price
/// per GB-month.
pub const STORAGE: &str = Meter::Storage.as_str();
/// Traffic: bytes at a price per TB.
pub const BANDWIDTH_UP: &str = Meter::BandwidthUp.as_str();
pub const BANDWIDTH_DOWN: &str = Meter::BandwidthDown.as_str();

/// The hours-per-month convention of storage prices (365 × 24 / 12; the
/// catalog prices offers with the same one), in seconds.
pub const STORAGE_SECONDS_PER_MONTH: i64 = 730 * 3600;
/// Bytes in the TB bandwidth is priced per (decimal, 10^12).
pub const BYTES_PER_TB: i64 = 1_000_000_000_000;

/// What an invoice line's quantity of `meter` counts.
pub fn unit(meter: &str) -> &'static str {
    match meter {
        STORAGE => "gib_second",
        BANDWIDTH_UP | BANDWIDTH_DOWN => "byte",
        _ => "second",
    }
}

/// What the price of `meter` is per.
pub fn pricing_unit(meter: &str) -> &'static str {
    match meter {
        STORAGE => "gib_month",
        BANDWIDTH_UP | BANDWIDTH_DOWN => "tb",
        _ => "hour",
    }
}

/// `quantity` (in [`unit`]) expressed in [`pricing_unit`]s: hours or
/// GiB-months to the ledger's 9 decimals (half-even; they repeat), TB
/// exactly (dividing by 10^12 only moves the decimal point, and a few KB
/// would round away at 9 decimals).
pub fn pricing_quantity(meter: &str, quantity: i64) -> Decimal {
    let per = match meter {
        STORAGE => STORAGE_SECONDS_PER_MONTH,
        BANDWIDTH_UP | BANDWIDTH_DOWN => {
            return (Decimal::from(quantity) / Decimal::from(BYTES_PER_TB)).normalize();
        }
        _ => 3600,
    };
    (Decimal::from(quantity) / Decimal::from(per))
        .round_dp_with_strategy(LEDGER_SCALE, RoundingStrategy::MidpointNearestEven)
        .normalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_meter_has_its_units() {
        assert_eq!((unit(GPU), pricing_unit(GPU)), ("second", "hour"));
        assert_eq!(
            (unit(STORAGE), pricing_unit(STORAGE)),
            ("gib_second", "gib_month")
        );
        assert_eq!(
            (unit(BANDWIDTH_DOWN), pricing_unit(BANDWIDTH_DOWN)),
            ("byte", "tb")
        );
        assert_eq!(pricing_quantity(GPU, 5400), Decimal::new(15, 1));
        assert_eq!(pricing_quantity(STORAGE, 2_628_000 * 50), Decimal::from(50));
        assert_eq!(pricing_quantity(BANDWIDTH_UP, 3_800), Decimal::new(38, 10));
    }
}
