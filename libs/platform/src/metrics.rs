//! Prometheus metrics where an operator looks first: request rates and
//! latencies, messages published and consumed, queue depth, outbox backlog,
//! provisioning steps. One registry per process, served at `/metrics` by
//! every service. Labels never carry ids (order, instance, machine, tenant):
//! a series per id would grow without bound; ids belong in logs and traces.

use std::sync::LazyLock;
use std::time::Duration;

use actix_web::HttpResponse;
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

pub static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::new);

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels)
        .unwrap_or_else(|e| panic!("metric {name} is malformed: {e}"));
    // Registering a name twice is a programming error caught by the tests.
    let _ = REGISTRY.register(Box::new(c.clone()));
    c
}

fn int_gauge(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels)
        .unwrap_or_else(|e| panic!("metric {name} is malformed: {e}"));
    let _ = REGISTRY.register(Box::new(g.clone()));
    g
}

fn histogram(name: &str, help: &str, labels: &[&str], buckets: Vec<f64>) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
        .unwrap_or_else(|e| panic!("metric {name} is malformed: {e}"));
    let _ = REGISTRY.register(Box::new(h.clone()));
    h
}

/// Registers a counter for a crate outside platform (billing's run totals)
/// in the one registry `/metrics` serves.
pub fn register_counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    counter(name, help, labels)
}

/// Request-sized latencies: a millisecond to ten seconds.
const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

pub static HTTP_REQUESTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter(
        "gpumarket_http_requests_total",
        "HTTP requests by service, route pattern, method and status class",
        &["service", "route", "method", "status"],
    )
});

pub static HTTP_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    histogram(
        "gpumarket_http_request_duration_seconds",
        "HTTP request latency by service, route pattern and method",
        &["service", "route", "method"],
        LATENCY_BUCKETS.to_vec(),
    )
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
        "Deliveries handled, by queue, kind and outcome (ack, retry, dead_letter)",
        &["queue", "kind", "outcome"],
    )
});

pub static MESSAGES_REDELIVERED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter(
        "gpumarket_messages_redelivered_total",
        "Deliveries that the broker had delivered before (retries, crashed consumers)",
        &["queue", "kind"],
    )
});

pub static MESSAGE_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    histogram(
        "gpumarket_message_handling_duration_seconds",
        "Time from delivery to settled (handler and ack), by queue and kind",
        &["queue", "kind"],
        LATENCY_BUCKETS.to_vec(),
    )
});

pub static QUEUE_READY: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    int_gauge(
        "gpumarket_queue_messages_ready",
        "Messages waiting in the queue (consumer lag), from the management API",
        &["queue"],
    )
});

pub static QUEUE_UNACKED: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    int_gauge(
        "gpumarket_queue_messages_unacked",
        "Messages delivered and not yet acknowledged, from the management API",
        &["queue"],
    )
});

pub static QUEUE_CONSUMERS: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    int_gauge(
        "gpumarket_queue_consumers",
        "Consumers attached to the queue, from the management API",
        &["queue"],
    )
});

pub static QUEUE_SCRAPE_UP: LazyLock<IntGauge> = LazyLock::new(|| {
    let g = IntGauge::new(
        "gpumarket_queue_stats_up",
        "1 when the last read of the RabbitMQ management API succeeded",
    )
    .unwrap_or_else(|e| panic!("queue stats gauge is malformed: {e}"));
    let _ = REGISTRY.register(Box::new(g.clone()));
    g
});

pub static OUTBOX_BACKLOG: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    int_gauge(
        "gpumarket_outbox_backlog",
        "Outbox rows not yet published, by schema",
        &["schema"],
    )
});

pub static OUTBOX_OLDEST_SECONDS: LazyLock<GaugeVec> = LazyLock::new(|| {
    let g = GaugeVec::new(
        Opts::new(
            "gpumarket_outbox_oldest_unpublished_seconds",
            "Age of the oldest unpublished outbox row (0 when none), by schema",
        ),
        &["schema"],
    )
    .unwrap_or_else(|e| panic!("outbox age gauge is malformed: {e}"));
    let _ = REGISTRY.register(Box::new(g.clone()));
    g
});

pub static PROVISIONING_STEPS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter(
        "gpumarket_provisioning_steps_total",
        "Provisioning steps run, by outcome",
        &["step", "outcome"],
    )
});

pub static PROVISIONING_STEP_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    histogram(
        "gpumarket_provisioning_step_duration_seconds",
        "Provisioning step duration, by step and outcome",
        &["step", "outcome"],
        // Steps range from a database write to an image pull of minutes.
        vec![
            0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
        ],
    )
});

/// Records one provisioning step's outcome and duration.
pub fn provisioning_step(step: &str, outcome: &str, elapsed: Duration) {
    PROVISIONING_STEPS.with_label_values(&[step, outcome]).inc();
    PROVISIONING_STEP_SECONDS
        .with_label_values(&[step, outcome])
        .observe(elapsed.as_secs_f64());
}

/// `2xx`, `4xx`...: the class is what alerts need, and it bounds the series.
pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// Only methods we serve get their own label; anything else (a scanner's
/// `PROPFIND`) is folded so a client cannot mint series.
pub fn method_label(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}

/// How often queue depth is read from the management API: often enough for
/// a 1-minute alert window, cheap enough (one GET of a few columns).
const QUEUE_POLL: Duration = Duration::from_secs(5);

/// Starts, once per process and vhost, a task that copies queue depth from
/// the RabbitMQ management API into the queue gauges. Polling in the
/// background, not at scrape time, keeps a slow or absent management API
/// from slowing or failing a scrape: the gauges keep their last values and
/// `gpumarket_queue_stats_up` drops to 0.
pub fn watch_queues(config: &crate::Config) {
    static STARTED: LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
        LazyLock::new(Default::default);
    let Ok(vhost) = config.amqp_vhost() else {
        return;
    };
    let admin = match crate::rabbitmq_admin::RabbitAdmin::new(&config.rabbitmq_management_url) {
        Ok(admin) => admin,
        Err(error) => {
            tracing::warn!(%error, "queue depth metrics disabled");
            return;
        }
    };
    {
        let mut started = STARTED.lock().unwrap_or_else(|p| p.into_inner());
        if !started.insert(vhost.clone()) {
            return;
        }
    }
    tokio::spawn(async move {
        let up = &*QUEUE_SCRAPE_UP;
        loop {
            match admin.queues(&vhost).await {
                Ok(queues) => {
                    let mut totals: std::collections::BTreeMap<String, (i64, i64, i64)> =
                        Default::default();
                    for q in queues {
                        let t = totals.entry(queue_label(&q.name)).or_default();
                        t.0 += q.messages_ready;
                        t.1 += q.messages_unacknowledged;
                        t.2 += q.consumers;
                    }
                    for (queue, (ready, unacked, consumers)) in totals {
                        QUEUE_READY.with_label_values(&[&queue]).set(ready);
                        QUEUE_UNACKED.with_label_values(&[&queue]).set(unacked);
                        QUEUE_CONSUMERS.with_label_values(&[&queue]).set(consumers);
                    }
                    up.set(1);
                }
                Err(error) => {
                    tracing::debug!(%error, "reading queue depth");
                    up.set(0);
                }
            }
            tokio::time::sleep(QUEUE_POLL).await;
        }
    });
}

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

/// The queue as a metric label: the per-machine command queues
/// (`cmd.<machine_id>`, and the legacy `host.<machine_id>` until they are
/// gone) fold into one series `cmd.*`, the broker-named queues of gateway
/// subscriptions (`amq.gen-...`) into `amq.*`, so 100,000 machines do not
/// make 100,000 series.
pub fn queue_label(queue: &str) -> String {
    match queue.split_once('.') {
        Some(("cmd" | "host", _)) => "cmd.*".to_owned(),
        Some(("amq", _)) => "amq.*".to_owned(),
        _ => queue.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_registers_and_renders() {
        HTTP_REQUESTS
            .with_label_values(&["catalog", "/offers", "GET", "2xx"])
            .inc();
        HTTP_SECONDS
            .with_label_values(&["catalog", "/offers", "GET"])
            .observe(0.01);
        MESSAGES_PUBLISHED.with_label_values(&["ordering"]).inc();
        MESSAGES_CONSUMED
            .with_label_values(&["q", "x", "ack"])
            .inc();
        MESSAGES_REDELIVERED.with_label_values(&["q", "x"]).inc();
        MESSAGE_SECONDS.with_label_values(&["q", "x"]).observe(0.01);
        QUEUE_READY.with_label_values(&["q"]).set(1);
        QUEUE_UNACKED.with_label_values(&["q"]).set(0);
        QUEUE_CONSUMERS.with_label_values(&["q"]).set(1);
        QUEUE_SCRAPE_UP.set(1);
        OUTBOX_BACKLOG.with_label_values(&["ordering"]).set(0);
        OUTBOX_OLDEST_SECONDS
            .with_label_values(&["ordering"])
            .set(0.0);
        provisioning_step("bind_gpus", "ok", Duration::from_millis(5));
        let _ = register_counter("gpumarket_test_total", "test", &["x"]);
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
            "gpumarket_messages_redelivered_total",
            "gpumarket_message_handling_duration_seconds",
            "gpumarket_queue_messages_ready",
            "gpumarket_queue_messages_unacked",
            "gpumarket_queue_consumers",
            "gpumarket_queue_stats_up",
            "gpumarket_outbox_backlog",
            "gpumarket_outbox_oldest_unpublished_seconds",
            "gpumarket_provisioning_steps_total",
            "gpumarket_provisioning_step_duration_seconds",
        ] {
            assert!(text.contains(name), "{name} missing");
        }
    }

    #[test]
    fn labels_are_bounded() {
        assert_eq!(status_class(204), "2xx");
        assert_eq!(status_class(503), "5xx");
        assert_eq!(method_label("PROPFIND"), "other");
        let id = "0193a5b4-7c1d-7000-8000-000000000001";
        assert_eq!(queue_label(&format!("cmd.{id}")), "cmd.*");
        assert_eq!(queue_label(&format!("host.{id}")), "cmd.*");
        assert_eq!(queue_label("amq.gen-x1"), "amq.*");
        assert_eq!(queue_label("provisioner.jobs"), "provisioner.jobs");
    }
}
