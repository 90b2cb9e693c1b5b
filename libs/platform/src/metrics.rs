//! Prometheus metrics where an operator looks first: request rates and
//! latencies, messages published and consumed, provisioning steps. One
//! registry per process, served at `/metrics` by every service.

use std::sync::LazyLock;

use actix_web::HttpResponse;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

pub static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::new);

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels)
        .unwrap_or_else(|e| panic!("metric {name} is malformed: {e}"));
    // Registering a name twice is a programming error caught by the tests.
    let _ = REGISTRY.register(Box::new(c.clone()));
    c
}

pub static HTTP_REQUESTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter(
        "gpumarket_http_requests_total",
        "HTTP requests by method and status",
        &["method", "status"],
    )
});

pub static HTTP_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    let h = HistogramVec::new(
        HistogramOpts::new(
            "gpumarket_http_request_duration_seconds",
            "HTTP request latency",
        )
        .buckets(vec![
            0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
        ]),
        &["method"],
    )
    .unwrap_or_else(|e| panic!("histogram is malformed: {e}"));
    let _ = REGISTRY.register(Box::new(h.clone()));
    h
});

pub static MESSAGES_PUBLISHED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter(
        "gpumarket_outbox_published_total",
        "Outbox messages published with a broker confirm",
        &["schema"],
    )
});

pub static MESSAGES_CONSUMED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter(
        "gpumarket_messages_consumed_total",
        "Deliveries handled, by outcome (ack, retry, dead_letter)",
        &["kind", "outcome"],
    )
});

pub static PROVISIONING_STEPS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter(
        "gpumarket_provisioning_steps_total",
        "Provisioning steps run, by outcome",
        &["step", "outcome"],
    )
});

/// `GET /metrics` in the Prometheus text format.
pub async fn handler() -> HttpResponse {
    let mut body = Vec::new();
    match TextEncoder::new().encode(&REGISTRY.gather(), &mut body) {
        Ok(()) => HttpResponse::Ok()
            .content_type("text/plain; version=0.0.4")
            .body(body),
        Err(error) => {
            tracing::error!(%error, "encoding metrics");
            HttpResponse::InternalServerError().finish()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_registers_and_renders() {
        HTTP_REQUESTS.with_label_values(&["GET", "200"]).inc();
        HTTP_SECONDS.with_label_values(&["GET"]).observe(0.01);
        MESSAGES_PUBLISHED.with_label_values(&["ordering"]).inc();
        MESSAGES_CONSUMED.with_label_values(&["x", "ack"]).inc();
        PROVISIONING_STEPS
            .with_label_values(&["bind_gpus", "ok"])
            .inc();
        let mut body = Vec::new();
        TextEncoder::new()
            .encode(&REGISTRY.gather(), &mut body)
            .unwrap();
        let text = String::from_utf8(body).unwrap();
        for name in [
            "gpumarket_http_requests_total",
            "gpumarket_http_request_duration_seconds",
            "gpumarket_outbox_published_total",
            "gpumarket_messages_consumed_total",
            "gpumarket_provisioning_steps_total",
        ] {
            assert!(text.contains(name), "{name} missing");
        }
    }
}
