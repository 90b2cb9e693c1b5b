//! Rating: what a usage segment or a lost host's downtime costs, as pure
//! functions of the message and the published terms. The ingest posts what
//! this rates; nothing here touches the database.

use contracts::events::{InstanceDowntime, MeteredUsage};
use contracts::ids::{InstanceId, TenantId};
use contracts::{Envelope, money};
use platform::consumer::HandlerError;
use rust_decimal::{Decimal, RoundingStrategy};

use crate::Settings;

/// What seconds `[offset, offset + seconds)` of an interval cost: rated
/// cumulatively (the rating of where the segment ends less the rating of
/// where it starts), so however an interval is cut into settlement segments
/// their amounts add up to exactly the rating of the whole, and a correction
/// (negative seconds) gives back exactly what was over-charged.
pub fn segment_amount(offset: i64, seconds: i64, price_per_hour: Decimal) -> Decimal {
    money::rate(offset + seconds, price_per_hour) - money::rate(offset, price_per_hour)
}

pub use contracts::meters::{BYTES_PER_TB, STORAGE_SECONDS_PER_MONTH};

/// How a meter's usage is rated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rating {
    /// Seconds at a price per hour (GPU time).
    Hourly(Decimal),
    /// Seconds of `disk_gib` GiB at a price per GB-month (730 h).
    Storage {
        disk_gib: i32,
        per_gb_month: Decimal,
    },
    /// Bytes at a price per TB (10^12 bytes).
    Bytes { per_tb: Decimal },
}

impl Rating {
    /// The rating a usage message asks for: by bytes when its unit is
    /// `byte`, by GiB and month for `storage` with its disk and price, and
    /// per hour otherwise (every GPU message, old or new).
    pub fn of(usage: &MeteredUsage) -> Result<Rating, String> {
        match (usage.unit.as_deref(), usage.usage.meter.as_str()) {
            (Some("byte"), _) => match usage.unit_price {
                Some(per_tb) => Ok(Rating::Bytes { per_tb }),
                None => Err("byte usage without a unit price".into()),
            },
            (None | Some("second"), "storage") => match (usage.disk_gib, usage.unit_price) {
                (Some(disk_gib), Some(per_gb_month)) => Ok(Rating::Storage {
                    disk_gib,
                    per_gb_month,
                }),
                _ => Ok(Rating::Hourly(usage.usage.price_per_hour)),
            },
            (None | Some("second"), _) => Ok(Rating::Hourly(usage.usage.price_per_hour)),
            (Some(other), _) => Err(format!("unknown usage unit {other:?}")),
        }
    }

    /// What the first `quantity` units of an interval cost, rounded
    /// half-even to the ledger's 9 decimals from the exact value. None on an
    /// overflow (beyond any real usage).
    pub fn cumulative(self, quantity: i64) -> Option<Decimal> {
        let q = Decimal::from(quantity);
        let exact = match self {
            Rating::Hourly(price) => return Some(money::rate(quantity, price)),
            // A 28-digit quotient rounds to the same 9 decimals as the
            // exact one: the exact value is a multiple of 1/(657 × 10^9 ×
            // 4), never within 10^-19 of a rounding midpoint.
            Rating::Storage {
                disk_gib,
                per_gb_month,
            } => q
                .checked_mul(Decimal::from(disk_gib))?
                .checked_mul(per_gb_month)?
                .checked_div(Decimal::from(STORAGE_SECONDS_PER_MONTH))?,
            // Exact: dividing by 10^12 only moves the decimal point.
            Rating::Bytes { per_tb } => q
                .checked_mul(per_tb)?
                .checked_div(Decimal::from(BYTES_PER_TB))?,
        };
        Some(
            exact
                .round_dp_with_strategy(money::LEDGER_SCALE, RoundingStrategy::MidpointNearestEven),
        )
    }

    /// [`segment_amount`] for any meter: units `[offset, offset + quantity)`
    /// rated cumulatively, so the segments of an interval (corrections
    /// included) add up to the rating of its whole.
    pub fn segment(self, offset: i64, quantity: i64) -> Option<Decimal> {
        if let Rating::Hourly(price) = self {
            return Some(segment_amount(offset, quantity, price));
        }
        Some(self.cumulative(offset.checked_add(quantity)?)? - self.cumulative(offset)?)
    }
}

/// A lost host's downtime credit, rated and described, ready to post with
/// its batch ([`crate::ingest::apply_batch`]).
pub(crate) struct DowntimeCredit {
    pub posting_id: String,
    pub tenant_id: TenantId,
    pub host_tenant_id: TenantId,
    pub instance_id: InstanceId,
    pub amount: Decimal,
    pub seconds: i64,
    pub description: String,
}

/// A lost host's downtime credit: `seconds × price_per_hour × multiple /
/// 3600` (the published multiple, `GPUMARKET_DOWNTIME_CREDIT_MULTIPLE`),
/// from the host's earnings to the renter's balance, once per interrupted
/// run (posting id `downtime:{instance}:{run}`). The renter was not billed
/// for the outage either (billing stopped at the last heartbeat): the credit
/// is compensation, which the host's SLA pays for. None when there is
/// nothing to credit.
pub(crate) fn downtime_credit(
    envelope: &Envelope,
    settings: &Settings,
) -> Result<Option<DowntimeCredit>, HandlerError> {
    let down: InstanceDowntime = envelope
        .payload()
        .map_err(|e| HandlerError::Permanent(format!("bad downtime payload: {e}")))?;
    if down.currency != settings.currency {
        return Err(HandlerError::Permanent(format!(
            "downtime in {} but the ledger settles in {}",
            down.currency, settings.currency
        )));
    }
    let amount = money::rate(
        down.seconds.max(0),
        down.price_per_hour * settings.downtime_credit_multiple,
    );
    if amount <= Decimal::ZERO {
        return Ok(None);
    }
    let description = format!(
        "downtime credit: host silent from {} to {} ({} s, {}) at {}× {} {}/h",
        contracts::time::format(down.down_from),
        contracts::time::format(down.down_until),
        down.seconds,
        down.ended_by,
        settings.downtime_credit_multiple,
        down.price_per_hour,
        settings.currency
    );
    Ok(Some(DowntimeCredit {
        posting_id: format!("downtime:{}:{}", down.instance_id, down.run_seq),
        tenant_id: down.tenant_id,
        host_tenant_id: down.host_tenant_id,
        instance_id: down.instance_id,
        amount,
        seconds: down.seconds,
        description,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// However settlement cuts an interval (and whatever corrections
        /// follow a settlement that ran ahead), the segments cost exactly
        /// what the whole interval costs, and every segment's split balances.
        #[test]
        fn segments_add_up_to_the_whole_interval(
            price_micros in 1i64..10_000_000_000,
            cuts in proptest::collection::vec(0i64..200_000, 0..12),
            overshoot in 0i64..30,
            fee_bp in 0i64..5_000,
        ) {
            let price = Decimal::new(price_micros, 6);
            let fee_rate = Decimal::new(fee_bp, 4);
            let mut cuts = cuts;
            cuts.sort();
            let total = cuts.last().copied().unwrap_or(0);
            // Settlements at each cut, one that ran `overshoot` seconds past
            // the stop, then the close's correction back to the total.
            let mut points = vec![0];
            points.extend(cuts);
            points.push(total + overshoot);
            points.push(total);
            let mut sum = Decimal::ZERO;
            for pair in points.windows(2) {
                let amount = segment_amount(pair[0], pair[1] - pair[0], price);
                let split = money::split_fee(amount, fee_rate);
                proptest::prop_assert_eq!(split.host + split.fee, amount);
                sum += amount;
            }
            proptest::prop_assert_eq!(sum, money::rate(total, price));
        }

        /// Storage and bandwidth segments add up to the rating of the whole,
        /// which is the exact rational amount rounded half-even to 9
        /// decimals (checked in integers).
        #[test]
        fn storage_and_bytes_segments_add_up_exactly(
            price_nanos in 0i64..100_000_000_000,
            disk_gib in 1i32..100_000,
            cuts in proptest::collection::vec(0i64..100_000_000, 0..10),
            bytes in proptest::collection::vec(0i64..10_000_000_000_000, 0..10),
        ) {
            let price = Decimal::new(price_nanos, 9);
            let exact = |num: i128, den: i128| -> Decimal {
                // round_half_even(num / den) in nanos.
                let (q, r) = (num.div_euclid(den), num.rem_euclid(den));
                let q = match (2 * r).cmp(&den) {
                    std::cmp::Ordering::Greater => q + 1,
                    std::cmp::Ordering::Equal if q % 2 != 0 => q + 1,
                    _ => q,
                };
                Decimal::from_i128_with_scale(q, 9)
            };
            let storage = Rating::Storage { disk_gib, per_gb_month: price };
            let mut cuts = cuts;
            cuts.sort();
            let mut sum = Decimal::ZERO;
            let mut from = 0;
            for &to in &cuts {
                sum += storage.segment(from, to - from).expect("in range");
                from = to;
            }
            let total = cuts.last().copied().unwrap_or(0);
            // seconds × GiB × price_nanos / (730 × 3600) nanos.
            let whole = exact(
                i128::from(total) * i128::from(disk_gib) * i128::from(price_nanos),
                i128::from(STORAGE_SECONDS_PER_MONTH),
            );
            proptest::prop_assert_eq!(sum, whole);

            let per_tb = Rating::Bytes { per_tb: price };
            let mut sum = Decimal::ZERO;
            let mut from = 0i64;
            for b in &bytes {
                sum += per_tb.segment(from, *b).expect("in range");
                from += b;
            }
            let whole = exact(
                i128::from(from) * i128::from(price_nanos),
                i128::from(BYTES_PER_TB),
            );
            proptest::prop_assert_eq!(sum, whole);
        }
    }
}
