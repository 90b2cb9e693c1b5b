//! Metering's counters for Prometheus.

use std::sync::LazyLock;

use prometheus::IntCounterVec;

static TRAFFIC_SAMPLES_REFUSED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    platform::metrics::register_counter(
        "gpumarket_traffic_samples_refused_total",
        "Traffic counter samples refused, by reason: foreign_machine (the \
         instance does not run on the reporting machine), over_bandwidth \
         (faster than the machine's declared bandwidth with slack), \
         out_of_order (dated before the sample it follows)",
        &["reason"],
    )
});

/// One sample refused; `reason` is one of [`crate::meters::Refusal`]'s.
pub fn traffic_sample_refused(reason: &'static str) {
    TRAFFIC_SAMPLES_REFUSED.with_label_values(&[reason]).inc();
}

/// Registers the counters at start, so that they read 0 before anything is
/// refused (an alert on their rate needs the series).
pub fn init() {
    LazyLock::force(&TRAFFIC_SAMPLES_REFUSED);
}
