//! The money of an escrow as pure functions (no database, no clock): what
//! seconds of a block are worth, how a settled chunk splits between the
//! host, the platform and the holders of its silent seconds, what a
//! cancellation refunds, the host's penalty, and how a resale moves hours
//! between holders. `escrow::release`, `escrow::cancel` and
//! `escrow::resale` apply them to the ledger.
//!
//! The one valuation: seconds `[a, b)` of a block of `D` seconds and amount
//! `A` are worth `f(b) − f(a)` with `f(s) = round_half_even(A × s / D, 9)`,
//! computed in integer nanos (exact). Every piece of every chunk is valued
//! with the same `f`, so whatever the settlement passes, outages,
//! cancellation and resales, the pieces telescope: `amount = released +
//! fees + refunded + remaining` to the last decimal, and a second is worth
//! the same whoever holds it (property-tested below).

use contracts::money;
use rust_decimal::{Decimal, RoundingStrategy};

/// Nanos in one unit of the currency: the ledger's 9 decimals.
const NANOS: i128 = 1_000_000_000;

/// The largest escrow amount the math takes (well above any block: the
/// products below stay far inside `i128`).
pub const MAX_AMOUNT: i64 = 1_000_000_000_000_000;

/// The longest block the math takes, in seconds (ten years; blocks are at
/// most 90 days).
pub const MAX_SECONDS: i64 = 10 * 366 * 24 * 3600;

/// Why the math refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MathError {
    #[error("the amount must be positive, below {MAX_AMOUNT} and have at most 9 decimals")]
    Amount,
    #[error("the block must last between 1 second and {MAX_SECONDS} seconds")]
    Duration,
    /// A second of the block that no holder holds (the holder rows must
    /// cover the block).
    #[error("second {0} of the block has no holder")]
    Uncovered(i64),
    /// A resale of hours the seller does not hold (all of them).
    #[error("the seller does not hold every second of [{0}, {1})")]
    NotHeld(i64, i64),
}

/// Seconds `[from, to)` of a block, counted from its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span {
    pub from: i64,
    pub to: i64,
}

impl Span {
    pub const fn new(from: i64, to: i64) -> Self {
        Self { from, to }
    }

    pub fn seconds(self) -> i64 {
        (self.to - self.from).max(0)
    }

    pub fn is_empty(self) -> bool {
        self.to <= self.from
    }

    pub fn contains(self, second: i64) -> bool {
        self.from <= second && second < self.to
    }

    /// The part of `self` inside `within` (empty when they do not meet).
    pub fn clip(self, within: Span) -> Span {
        Span::new(self.from.max(within.from), self.to.min(within.to))
    }
}

/// Who holds the refunds of some seconds of a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding<H> {
    pub span: Span,
    pub holder: H,
}

/// A block's money: `amount` paid for `seconds` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    amount_nanos: i128,
    seconds: i64,
}

impl Block {
    pub fn new(amount: Decimal, seconds: i64) -> Result<Self, MathError> {
        if !(1..=MAX_SECONDS).contains(&seconds) {
            return Err(MathError::Duration);
        }
        let amount_nanos = nanos(amount).ok_or(MathError::Amount)?;
        if amount_nanos <= 0 || amount_nanos > i128::from(MAX_AMOUNT) * NANOS {
            return Err(MathError::Amount);
        }
        Ok(Self {
            amount_nanos,
            seconds,
        })
    }

    pub fn seconds(self) -> i64 {
        self.seconds
    }

    pub fn amount(self) -> Decimal {
        decimal(self.amount_nanos)
    }

    /// `f(s)` in nanos, `s` clamped to the block.
    fn cumulative_nanos(self, s: i64) -> i128 {
        let s = i128::from(s.clamp(0, self.seconds));
        div_half_even(self.amount_nanos * s, i128::from(self.seconds))
    }

    /// `f(s) = round_half_even(A × s / D, 9)`: what the first `s` seconds
    /// are worth.
    pub fn cumulative(self, s: i64) -> Decimal {
        decimal(self.cumulative_nanos(s))
    }

    /// What seconds `span` are worth: `f(to) − f(from)`.
    pub fn value(self, span: Span) -> Decimal {
        if span.is_empty() {
            return Decimal::ZERO;
        }
        decimal(self.cumulative_nanos(span.to) - self.cumulative_nanos(span.from))
    }

    /// What is not settled yet when every second before `settled` is:
    /// `A − f(settled)`.
    pub fn remaining(self, settled: i64) -> Decimal {
        decimal(self.amount_nanos - self.cumulative_nanos(settled))
    }
}

/// `amount` in nanos, None when it has more than 9 decimals (or is out of
/// range).
pub fn nanos(amount: Decimal) -> Option<i128> {
    let amount = amount.normalize();
    let scale = amount.scale();
    if scale > money::LEDGER_SCALE {
        return None;
    }
    amount
        .mantissa()
        .checked_mul(10i128.pow(money::LEDGER_SCALE - scale))
}

/// Nanos as an amount with the ledger's 9 decimals.
pub fn decimal(nanos: i128) -> Decimal {
    Decimal::from_i128_with_scale(nanos, money::LEDGER_SCALE)
}

/// `n / d` rounded half to even (`d > 0`).
fn div_half_even(n: i128, d: i128) -> i128 {
    let (q, r) = (n.div_euclid(d), n.rem_euclid(d));
    match (2 * r).cmp(&d) {
        std::cmp::Ordering::Greater => q + 1,
        std::cmp::Ordering::Equal if q % 2 != 0 => q + 1,
        _ => q,
    }
}

/// `round_half_even(x, 9)`.
fn ledger_round(x: Decimal) -> Decimal {
    x.round_dp_with_strategy(money::LEDGER_SCALE, RoundingStrategy::MidpointNearestEven)
}

/// `price × gpus × hours`, exactly; None on an overflow.
pub fn block_amount(price_per_gpu_hour: Decimal, gpu_count: i32, hours: i64) -> Option<Decimal> {
    price_per_gpu_hour
        .checked_mul(Decimal::from(gpu_count))?
        .checked_mul(Decimal::from(hours))
}

/// The host's penalty for cancelling: `round_half_even(refund × rate, 9)`.
pub fn penalty(refund: Decimal, rate: Decimal) -> Decimal {
    ledger_round(refund * rate)
}

/// The platform's fee of a resale: `round_half_even(amount × rate, 9)`.
pub fn resale_fee(amount: Decimal, rate: Decimal) -> Decimal {
    ledger_round(amount * rate)
}

/// The silent spans inside `within`: clipped, sorted, overlaps merged.
pub fn silent_within(gaps: &[Span], within: Span) -> Vec<Span> {
    let mut spans: Vec<Span> = gaps
        .iter()
        .map(|g| g.clip(within))
        .filter(|g| !g.is_empty())
        .collect();
    spans.sort();
    let mut merged: Vec<Span> = Vec::with_capacity(spans.len());
    for s in spans {
        match merged.last_mut() {
            Some(last) if s.from <= last.to => last.to = last.to.max(s.to),
            _ => merged.push(s),
        }
    }
    merged
}

/// `span` cut where its holder changes: each part has one holder (the
/// release posts one chunk per part, so each posting refunds one holder).
pub fn holder_cuts<H>(holdings: &[Holding<H>], span: Span) -> Vec<Span> {
    let mut points: Vec<i64> = holdings
        .iter()
        .flat_map(|h| [h.span.from, h.span.to])
        .filter(|p| span.from < *p && *p < span.to)
        .collect();
    points.push(span.from);
    points.push(span.to);
    points.sort_unstable();
    points.dedup();
    points
        .windows(2)
        .map(|w| Span::new(w[0], w[1]))
        .filter(|s| !s.is_empty())
        .collect()
}

/// What one holder gets back from a chunk or a cancellation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refund<H> {
    pub holder: H,
    pub amount: Decimal,
    /// The seconds refunded.
    pub seconds: i64,
    /// From the first to the last second refunded.
    pub span: Span,
}

/// Adds `amount` for `span` to `holder`'s refund (first appearance order).
fn add_refund<H: Clone + PartialEq>(
    refunds: &mut Vec<Refund<H>>,
    holder: &H,
    span: Span,
    amount: Decimal,
) {
    match refunds.iter_mut().find(|r| r.holder == *holder) {
        Some(r) => {
            r.amount += amount;
            r.seconds += span.seconds();
            r.span = Span::new(r.span.from.min(span.from), r.span.to.max(span.to));
        }
        None => refunds.push(Refund {
            holder: holder.clone(),
            amount,
            seconds: span.seconds(),
            span,
        }),
    }
}

/// The holder of `second`.
fn holder_at<H>(holdings: &[Holding<H>], second: i64) -> Result<&H, MathError> {
    holdings
        .iter()
        .find(|h| h.span.contains(second))
        .map(|h| &h.holder)
        .ok_or(MathError::Uncovered(second))
}

/// One settled chunk: the heard seconds go to the host less the fee, the
/// silent ones back to their holders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk<H> {
    pub span: Span,
    /// What the heard seconds are worth: `host + fee`.
    pub heard: Decimal,
    pub host: Decimal,
    pub fee: Decimal,
    pub heard_seconds: i64,
    pub silent_seconds: i64,
    /// Per holder of silent seconds, in time order of first appearance.
    pub refunds: Vec<Refund<H>>,
}

impl<H> Chunk<H> {
    /// Everything the chunk takes out of escrow: `f(to) − f(from)`.
    pub fn total(&self) -> Decimal {
        self.heard + self.refunds.iter().map(|r| r.amount).sum::<Decimal>()
    }

    pub fn refunded(&self) -> Decimal {
        self.refunds.iter().map(|r| r.amount).sum()
    }
}

/// Settles seconds `span` of a block: cut into heard and silent pieces (the
/// `gaps`, in block seconds, are where the host was silent) and at holder
/// boundaries, each valued with `f`, in time order. The heard value is
/// split with `contracts::money::split_fee` at `fee_rate` (once per chunk);
/// each silent piece is refunded to the holder of its seconds.
pub fn settle_chunk<H: Clone + PartialEq>(
    block: Block,
    fee_rate: Decimal,
    span: Span,
    gaps: &[Span],
    holdings: &[Holding<H>],
) -> Result<Chunk<H>, MathError> {
    let span = span.clip(Span::new(0, block.seconds()));
    let silent = silent_within(gaps, span);
    let mut points: Vec<i64> = silent.iter().flat_map(|s| [s.from, s.to]).collect();
    points.extend(
        holdings
            .iter()
            .flat_map(|h| [h.span.from, h.span.to])
            .filter(|p| span.from < *p && *p < span.to),
    );
    points.push(span.from);
    points.push(span.to);
    points.sort_unstable();
    points.dedup();
    let mut chunk = Chunk {
        span,
        heard: Decimal::ZERO,
        host: Decimal::ZERO,
        fee: Decimal::ZERO,
        heard_seconds: 0,
        silent_seconds: 0,
        refunds: Vec::new(),
    };
    for w in points.windows(2) {
        let piece = Span::new(w[0], w[1]);
        if piece.is_empty() {
            continue;
        }
        let value = block.value(piece);
        if silent.iter().any(|s| s.contains(piece.from)) {
            let holder = holder_at(holdings, piece.from)?;
            add_refund(&mut chunk.refunds, holder, piece, value);
            chunk.silent_seconds += piece.seconds();
        } else {
            chunk.heard += value;
            chunk.heard_seconds += piece.seconds();
        }
    }
    let split = money::split_fee(chunk.heard, fee_rate);
    chunk.host = split.host;
    chunk.fee = split.fee;
    Ok(chunk)
}

/// What a cancellation gives back: everything not settled, to the holders
/// of its seconds, and the host's penalty on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancellation<H> {
    /// Per holder, in time order of first appearance.
    pub refunds: Vec<Refund<H>>,
    /// The sum of the refunds: the escrow's remaining.
    pub refund: Decimal,
    /// `round_half_even(refund × rate, 9)`; zero when the host did not cancel.
    pub penalty: Decimal,
    /// The penalty shared among the holders in proportion to their refunds,
    /// by cumulative rounding in time order so the shares add up to it
    /// exactly; same order as `refunds`.
    pub penalties: Vec<(H, Decimal)>,
}

/// Cancels a block settled up to `settled`: the seconds `[settled, D)` are
/// refunded to their holders (valued with `f`, so the refunds add up to
/// `A − f(settled)`), and with `penalty_rate` (the host cancelled) the host
/// pays `penalty(refund, rate)`, shared among the holders.
pub fn cancel<H: Clone + PartialEq>(
    block: Block,
    settled: i64,
    holdings: &[Holding<H>],
    penalty_rate: Option<Decimal>,
) -> Result<Cancellation<H>, MathError> {
    let rest = Span::new(settled.clamp(0, block.seconds()), block.seconds());
    let mut refunds: Vec<Refund<H>> = Vec::new();
    let mut penalties: Vec<(H, Decimal)> = Vec::new();
    let (mut cumulative, mut shared) = (Decimal::ZERO, Decimal::ZERO);
    for piece in holder_cuts(holdings, rest) {
        let holder = holder_at(holdings, piece.from)?;
        let value = block.value(piece);
        add_refund(&mut refunds, holder, piece, value);
        cumulative += value;
        if let Some(rate) = penalty_rate {
            let upto = penalty(cumulative, rate);
            let share = upto - shared;
            shared = upto;
            match penalties.iter_mut().find(|(h, _)| h == holder) {
                Some((_, p)) => *p += share,
                None => penalties.push((holder.clone(), share)),
            }
        }
    }
    let refund: Decimal = refunds.iter().map(|r| r.amount).sum();
    Ok(Cancellation {
        penalty: penalty_rate.map_or(Decimal::ZERO, |rate| penalty(refund, rate)),
        refunds,
        refund,
        penalties,
    })
}

/// Moves seconds `span` to `buyer`: every one of them must be held by a
/// holder `is_seller` accepts. The holdings around it keep their holders
/// (split at its bounds); the result is in time order.
pub fn transfer<H: Clone>(
    holdings: &[Holding<H>],
    span: Span,
    is_seller: impl Fn(&H) -> bool,
    buyer: H,
) -> Result<Vec<Holding<H>>, MathError> {
    let mut covered = 0i64;
    for h in holdings {
        let part = h.span.clip(span);
        if part.is_empty() {
            continue;
        }
        if !is_seller(&h.holder) {
            return Err(MathError::NotHeld(span.from, span.to));
        }
        covered += part.seconds();
    }
    if span.is_empty() || covered != span.seconds() {
        return Err(MathError::NotHeld(span.from, span.to));
    }
    let mut out: Vec<Holding<H>> = Vec::with_capacity(holdings.len() + 2);
    for h in holdings {
        for part in [
            Span::new(h.span.from, h.span.to.min(span.from)),
            Span::new(h.span.from.max(span.to), h.span.to),
        ] {
            if !part.is_empty() {
                out.push(Holding {
                    span: part,
                    holder: h.holder.clone(),
                });
            }
        }
    }
    out.push(Holding {
        span,
        holder: buyer,
    });
    out.sort_by_key(|h| h.span);
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    #[test]
    fn thirds_of_ten_add_up_to_ten() {
        let block = Block::new(Decimal::TEN, 3).unwrap();
        assert_eq!(block.cumulative(1), d("3.333333333"));
        assert_eq!(block.cumulative(2), d("6.666666667"));
        assert_eq!(block.value(Span::new(0, 1)), d("3.333333333"));
        assert_eq!(block.value(Span::new(1, 2)), d("3.333333334"));
        assert_eq!(block.value(Span::new(2, 3)), d("3.333333333"));
        assert_eq!(block.remaining(1), d("6.666666667"));
        assert_eq!(block.remaining(3), Decimal::ZERO);
        // Clamped to the block.
        assert_eq!(block.value(Span::new(-5, 10)), Decimal::TEN);
    }

    #[test]
    fn amounts_need_nine_decimals_at_most() {
        assert!(Block::new(d("0.0000000001"), 10).is_err());
        assert!(Block::new(Decimal::ZERO, 10).is_err());
        assert!(Block::new(Decimal::ONE, 0).is_err());
        assert_eq!(nanos(d("1.5")), Some(1_500_000_000));
        assert_eq!(nanos(d("1.500000000000")), Some(1_500_000_000));
        assert_eq!(block_amount(d("2.25"), 4, 3), Some(d("27")));
    }

    #[test]
    fn a_chunk_refunds_its_silent_seconds_to_their_holder() {
        // 36 USD over an hour: 0.01 a second. Silent [600, 900).
        let block = Block::new(d("36"), 3600).unwrap();
        let holdings = [Holding {
            span: Span::new(0, 3600),
            holder: "renter",
        }];
        let chunk = settle_chunk(
            block,
            d("0.15"),
            Span::new(0, 1200),
            &[Span::new(600, 900), Span::new(-100, 0)],
            &holdings,
        )
        .unwrap();
        assert_eq!(chunk.heard, d("9"));
        assert_eq!(chunk.host, d("7.65"));
        assert_eq!(chunk.fee, d("1.35"));
        assert_eq!(chunk.silent_seconds, 300);
        assert_eq!(chunk.heard_seconds, 900);
        assert_eq!(chunk.refunds.len(), 1);
        assert_eq!(chunk.refunds[0].amount, d("3"));
        assert_eq!(chunk.refunds[0].span, Span::new(600, 900));
        assert_eq!(chunk.total(), block.value(Span::new(0, 1200)));
    }

    #[test]
    fn a_host_cancellation_pays_the_penalty_to_each_holder_by_share() {
        let block = Block::new(d("30"), 3 * 3600).unwrap();
        let holdings = transfer(
            &[Holding {
                span: Span::new(0, 3 * 3600),
                holder: 1,
            }],
            Span::new(3600, 7200),
            |h| *h == 1,
            2,
        )
        .unwrap();
        assert_eq!(holdings.len(), 3);
        let c = cancel(block, 1800, &holdings, Some(d("0.10"))).unwrap();
        assert_eq!(c.refund, d("25"));
        assert_eq!(c.penalty, d("2.5"));
        assert_eq!(c.refunds[0].holder, 1);
        assert_eq!(c.refunds[0].amount, d("15"));
        assert_eq!(c.refunds[1].amount, d("10"));
        assert_eq!(c.penalties, vec![(1, d("1.5")), (2, d("1"))]);
        // Not the seller's: refused.
        assert!(transfer(&holdings, Span::new(3000, 4000), |h| *h == 1, 3).is_err());
        assert!(cancel(block, 0, &holdings[..1], None).is_err());
    }

    /// What one step of the simulation does.
    #[derive(Debug, Clone)]
    enum Step {
        /// A settlement pass up to this second.
        Settle(i64),
        /// A resale of hours `[from, from + len)` to a buyer.
        Resale(i64, i64, u8),
    }

    fn steps(hours: i64) -> impl Strategy<Value = Vec<Step>> {
        let d = hours * 3600;
        proptest::collection::vec(
            prop_oneof![
                2 => (0..=d).prop_map(Step::Settle),
                2 => (0..hours, 1..=hours, 1u8..5).prop_map(|(h, l, b)| Step::Resale(h * 3600, l * 3600, b)),
            ],
            0..16,
        )
    }

    /// Price (nanos), GPUs, hours, fee and penalty (basis points), outages
    /// (start, length), steps, and a cancellation (instant, by the host).
    type Scenario = (
        i64,
        i32,
        i64,
        i64,
        i64,
        Vec<(i64, i64)>,
        Vec<Step>,
        Option<(i64, bool)>,
    );

    fn scenario() -> impl Strategy<Value = Scenario> {
        (1i64..=6).prop_flat_map(|hours| {
            let d = hours * 3600;
            (
                // Price per GPU-hour in nanos: up to 1000.
                1i64..1_000_000_000_000,
                1i32..=8,
                Just(hours),
                0i64..5_000,
                0i64..10_000,
                proptest::collection::vec((-3600..d + 3600, 0i64..7_200), 0..6),
                steps(hours),
                proptest::option::of((0..=d + 600, any::<bool>())),
            )
        })
    }

    /// The state a simulated escrow keeps, as billing's row does.
    struct Sim {
        block: Block,
        fee_rate: Decimal,
        holdings: Vec<Holding<u8>>,
        settled: i64,
        released: Decimal,
        fees: Decimal,
        refunded: Decimal,
        silent_seconds: i64,
        refunds: std::collections::BTreeMap<u8, Decimal>,
    }

    impl Sim {
        /// A settlement pass up to `to`, one chunk per holder as the release
        /// does; checks conservation after each chunk.
        fn settle(&mut self, to: i64, gaps: &[Span]) -> Result<(), TestCaseError> {
            let to = to.min(self.block.seconds());
            if to <= self.settled {
                return Ok(());
            }
            for part in holder_cuts(&self.holdings, Span::new(self.settled, to)) {
                let chunk =
                    settle_chunk(self.block, self.fee_rate, part, gaps, &self.holdings).unwrap();
                prop_assert_eq!(chunk.host + chunk.fee, chunk.heard);
                prop_assert!(chunk.host >= Decimal::ZERO && chunk.fee >= Decimal::ZERO);
                prop_assert_eq!(chunk.total(), self.block.value(part));
                prop_assert!(chunk.refunds.len() <= 1, "one holder per part");
                if chunk.heard_seconds == 0 {
                    prop_assert_eq!(chunk.heard, Decimal::ZERO);
                }
                self.released += chunk.host;
                self.fees += chunk.fee;
                self.refunded += chunk.refunded();
                self.silent_seconds += chunk.silent_seconds;
                for r in &chunk.refunds {
                    *self.refunds.entry(r.holder).or_default() += r.amount;
                }
                self.settled = part.to;
                self.conserved()?;
            }
            Ok(())
        }

        fn conserved(&self) -> Result<(), TestCaseError> {
            let amount = self.block.amount();
            prop_assert_eq!(
                self.released + self.fees + self.refunded + self.block.remaining(self.settled),
                amount
            );
            prop_assert_eq!(
                self.released + self.fees + self.refunded,
                self.block.cumulative(self.settled)
            );
            Ok(())
        }
    }

    proptest! {
        /// Over random blocks, outages, settlement passes, resales of hour
        /// ranges and a cancellation (by the host or not): the escrow is
        /// conserved to the last decimal at every step; each holder gets
        /// back exactly what its silent (or, at cancellation, remaining)
        /// seconds are worth and nothing else; nothing is released for a
        /// silent second; the penalty is the published rate of the refund,
        /// shared exactly among the holders.
        #[test]
        fn escrow_money_is_conserved(
            (price_nanos, gpus, hours, fee_bp, penalty_bp, gaps, steps, cancellation) in scenario(),
        ) {
            let d = hours * 3600;
            let price = decimal(i128::from(price_nanos));
            let amount = block_amount(price, gpus, hours).unwrap();
            let block = Block::new(amount, d).unwrap();
            let gaps: Vec<Span> = gaps.iter().map(|(s, l)| Span::new(*s, s + l)).collect();
            let mut sim = Sim {
                block,
                fee_rate: Decimal::new(fee_bp, 4),
                holdings: vec![Holding { span: Span::new(0, d), holder: 0 }],
                settled: 0,
                released: Decimal::ZERO,
                fees: Decimal::ZERO,
                refunded: Decimal::ZERO,
                silent_seconds: 0,
                refunds: Default::default(),
            };
            // Resales only of hours not settled yet (they have not started).
            for step in &steps {
                match *step {
                    Step::Settle(to) => sim.settle(to, &gaps)?,
                    Step::Resale(from, len, buyer) => {
                        let span = Span::new(from, (from + len).min(d));
                        if span.from < sim.settled {
                            continue;
                        }
                        let seller = holder_at(&sim.holdings, span.from).copied().unwrap();
                        if buyer == seller {
                            continue;
                        }
                        let uniform = sim.holdings.iter().all(|h| h.span.clip(span).is_empty() || h.holder == seller);
                        match transfer(&sim.holdings, span, |h| *h == seller, buyer) {
                            Ok(next) => {
                                prop_assert!(uniform);
                                let total: i64 = next.iter().map(|h| h.span.seconds()).sum();
                                prop_assert_eq!(total, d);
                                prop_assert!(next.windows(2).all(|w| w[0].span.to == w[1].span.from));
                                sim.holdings = next;
                            }
                            Err(_) => prop_assert!(!uniform),
                        }
                    }
                }
            }
            let mut cancel_refunds: std::collections::BTreeMap<u8, Decimal> = Default::default();
            let mut cancelled_from = d;
            match cancellation {
                Some((at, by_host)) => {
                    sim.settle(at, &gaps)?;
                    cancelled_from = sim.settled;
                    let rate = Decimal::new(penalty_bp, 4);
                    let c = cancel(block, sim.settled, &sim.holdings, by_host.then_some(rate)).unwrap();
                    prop_assert_eq!(c.refund, block.remaining(sim.settled));
                    sim.refunded += c.refund;
                    for r in &c.refunds {
                        *cancel_refunds.entry(r.holder).or_default() += r.amount;
                    }
                    if by_host {
                        prop_assert_eq!(c.penalty, penalty(c.refund, rate));
                        let shared: Decimal = c.penalties.iter().map(|(_, p)| *p).sum();
                        prop_assert_eq!(shared, c.penalty);
                        for (holder, share) in &c.penalties {
                            prop_assert!(*share >= Decimal::ZERO);
                            if cancel_refunds.get(holder).copied().unwrap_or_default() == Decimal::ZERO {
                                prop_assert_eq!(*share, Decimal::ZERO);
                            }
                        }
                    } else {
                        prop_assert_eq!(c.penalty, Decimal::ZERO);
                        prop_assert!(c.penalties.is_empty());
                    }
                    prop_assert_eq!(sim.released + sim.fees + sim.refunded, amount);
                }
                None => {
                    sim.settle(d, &gaps)?;
                    prop_assert_eq!(sim.released + sim.fees + sim.refunded, amount);
                }
            }
            // The oracle, second by second: what each second is worth does
            // not depend on how the block was cut.
            let mut heard = Decimal::ZERO;
            let mut silent = 0i64;
            let mut expected: std::collections::BTreeMap<u8, Decimal> = Default::default();
            let mut expected_cancel: std::collections::BTreeMap<u8, Decimal> = Default::default();
            for s in 0..d {
                let unit = block.value(Span::new(s, s + 1));
                let holder = holder_at(&sim.holdings, s).copied().unwrap();
                if s >= cancelled_from {
                    *expected_cancel.entry(holder).or_default() += unit;
                } else if gaps.iter().any(|g| g.contains(s)) {
                    *expected.entry(holder).or_default() += unit;
                    silent += 1;
                } else {
                    heard += unit;
                }
            }
            prop_assert_eq!(sim.released + sim.fees, heard);
            prop_assert_eq!(sim.silent_seconds, silent);
            expected.retain(|_, v| !v.is_zero());
            sim.refunds.retain(|_, v| !v.is_zero());
            prop_assert_eq!(&sim.refunds, &expected);
            expected_cancel.retain(|_, v| !v.is_zero());
            cancel_refunds.retain(|_, v| !v.is_zero());
            prop_assert_eq!(&cancel_refunds, &expected_cancel);
        }
    }
}
