//! Billing's run totals for Prometheus: what was posted, invoiced, paid out
//! and announced. Amounts are exported as floats in the settlement currency:
//! a dashboard approximation, never an accounting figure (the ledger is).
//!
//! Most calls sit inside the transaction that writes the fact, so a
//! transaction rolled back after the call (a retried delivery) counts twice:
//! rare, and an alert threshold is not moved by it.

use std::sync::LazyLock;

use prometheus::{CounterVec, IntCounterVec, Opts};
use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;

fn amount_counter(name: &str, help: &str, labels: &[&str]) -> CounterVec {
    let c = CounterVec::new(Opts::new(name, help), labels)
        .unwrap_or_else(|e| panic!("metric {name} is malformed: {e}"));
    let _ = platform::metrics::REGISTRY.register(Box::new(c.clone()));
    c
}

static USAGE_POSTINGS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    platform::metrics::register_counter(
        "gpumarket_billing_usage_postings_total",
        "Usage segments posted to the ledger, by meter",
        &["meter"],
    )
});

static USAGE_AMOUNT: LazyLock<CounterVec> = LazyLock::new(|| {
    amount_counter(
        "gpumarket_billing_usage_amount_total",
        "Usage charged to renters, in the settlement currency, by meter",
        &["meter"],
    )
});

static EVENTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    platform::metrics::register_counter(
        "gpumarket_billing_events_total",
        "Billing outcomes by kind: invoice_finalized, statement_finalized, \
         payout_paid, payout_failed, payout_pending, balance_exhausted, \
         spend_cap_reached, runway_low, downtime_credited, top_up_failed, \
         escrow_charged, escrow_cancelled, resale_transferred",
        &["kind"],
    )
});

static AMOUNTS: LazyLock<CounterVec> = LazyLock::new(|| {
    amount_counter(
        "gpumarket_billing_amount_total",
        "Money moved by billing runs, in the settlement currency, by kind \
         (invoiced, host_earnings_stated, paid_out, downtime_credit, escrow_charged, \
         escrow_released, escrow_refunded, escrow_penalty, resale)",
        &["kind"],
    )
});

/// Meters are our own names; anything else folds so labels stay bounded.
fn meter_label(meter: &str) -> &'static str {
    use contracts::meters::{BANDWIDTH_DOWN, BANDWIDTH_UP, GPU, STORAGE};
    match meter {
        GPU => GPU,
        STORAGE => STORAGE,
        BANDWIDTH_UP => BANDWIDTH_UP,
        BANDWIDTH_DOWN => BANDWIDTH_DOWN,
        _ => "other",
    }
}

fn add(counter: &CounterVec, label: &str, amount: Decimal) {
    if let Some(value) = amount.to_f64().filter(|v| v.is_finite() && *v >= 0.0) {
        counter.with_label_values(&[label]).inc_by(value);
    }
}

fn event(kind: &str) {
    EVENTS.with_label_values(&[kind]).inc();
}

pub(crate) fn usage_posted(meter: &str, amount: Decimal) {
    USAGE_POSTINGS
        .with_label_values(&[meter_label(meter)])
        .inc();
    add(&USAGE_AMOUNT, meter_label(meter), amount);
}

pub(crate) fn balance_exhausted() {
    event("balance_exhausted");
}

pub(crate) fn downtime_credited(amount: Decimal) {
    event("downtime_credited");
    add(&AMOUNTS, "downtime_credit", amount);
}

pub(crate) fn invoice_finalized(total: Decimal) {
    event("invoice_finalized");
    add(&AMOUNTS, "invoiced", total);
}

pub(crate) fn statement_finalized(earnings: Decimal) {
    event("statement_finalized");
    add(&AMOUNTS, "host_earnings_stated", earnings);
}

pub(crate) fn payout_paid(amount: Decimal) {
    event("payout_paid");
    add(&AMOUNTS, "paid_out", amount);
}

pub(crate) fn payout_failed() {
    event("payout_failed");
}

pub(crate) fn payout_pending() {
    event("payout_pending");
}

/// A top-up whose PaymentIntent could not be created (Stripe unreachable,
/// refusing, or not configured).
pub(crate) fn top_up_failed() {
    event("top_up_failed");
}

pub(crate) fn spend_cap_reached() {
    event("spend_cap_reached");
}

pub(crate) fn runway_low() {
    event("runway_low");
}

/// A reserved block charged into escrow.
pub(crate) fn escrow_charged(amount: Decimal) {
    event("escrow_charged");
    add(&AMOUNTS, "escrow_charged", amount);
}

/// Escrow released to hosts (their share and the fee).
pub(crate) fn escrow_released(amount: Decimal) {
    add(&AMOUNTS, "escrow_released", amount);
}

/// Escrow refunded to holders (silent seconds, cancellations).
pub(crate) fn escrow_refunded(amount: Decimal) {
    add(&AMOUNTS, "escrow_refunded", amount);
}

/// A block's escrow cancelled, with the host's penalty (zero when the host
/// did not cancel).
pub(crate) fn escrow_cancelled(penalty: Decimal) {
    event("escrow_cancelled");
    add(&AMOUNTS, "escrow_penalty", penalty);
}

pub(crate) fn resale_transferred(amount: Decimal) {
    event("resale_transferred");
    add(&AMOUNTS, "resale", amount);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_register_and_count() {
        usage_posted("gpu", Decimal::new(125, 2));
        usage_posted("a-meter-from-tomorrow", Decimal::ONE);
        payout_failed();
        assert!(USAGE_POSTINGS.with_label_values(&["gpu"]).get() >= 1);
        assert!(USAGE_POSTINGS.with_label_values(&["other"]).get() >= 1);
        assert!(USAGE_AMOUNT.with_label_values(&["gpu"]).get() >= 1.25);
        assert!(EVENTS.with_label_values(&["payout_failed"]).get() >= 1);
    }
}
