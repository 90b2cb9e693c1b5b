//! The webhook service's counters for Prometheus.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::IntCounterVec;

static ATTEMPTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    platform::metrics::register_counter(
        "gpumarket_webhook_attempts_total",
        "Webhook delivery attempts by outcome: succeeded (2xx), http_error \
         (another status), no_response (refused, unreachable, timed out)",
        &["outcome"],
    )
});

static SLOW_ATTEMPTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    platform::metrics::register_counter(
        "gpumarket_webhook_slow_attempts_total",
        "Webhook attempts that took longer than 5 s (receivers close to the timeout)",
        &[],
    )
});

static DISABLED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    platform::metrics::register_counter(
        "gpumarket_webhook_endpoints_disabled_total",
        "Endpoints disabled after failing every delivery for the whole retry schedule",
        &[],
    )
});

pub fn attempt(status: Option<u16>, succeeded: bool, latency: Duration) {
    let outcome = match (status, succeeded) {
        (_, true) => "succeeded",
        (Some(_), false) => "http_error",
        (None, _) => "no_response",
    };
    ATTEMPTS.with_label_values(&[outcome]).inc();
    if latency > Duration::from_secs(5) {
        SLOW_ATTEMPTS.with_label_values::<&str>(&[]).inc();
    }
}

pub fn disabled() {
    DISABLED.with_label_values::<&str>(&[]).inc();
}

/// Registers the series at start, so they read 0 before anything happens.
pub fn init() {
    LazyLock::force(&ATTEMPTS);
    LazyLock::force(&SLOW_ATTEMPTS);
    LazyLock::force(&DISABLED);
}
