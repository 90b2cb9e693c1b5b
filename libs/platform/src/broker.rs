//! The RabbitMQ side: connecting (and reconnecting) and the topology every
//! process declares on start. Declarations are idempotent, so each process
//! declares all of it and start order does not matter.

use std::time::Duration;

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};

use crate::{Config, PlatformError};

/// The largest AMQP frame this side proposes (`frame_max`; the connection
/// uses the smaller of both sides' values, and RabbitMQ proposes 128 KiB).
/// lapin keeps a receive and a send ring of 32 frames per connection, which
/// at 128 KiB held 8 MiB per connection once traffic had gone round them:
/// about 90 MB of the all-in-one stack's ~20 connections (issue 17, goal 6).
/// Our messages are JSON envelopes of a few KiB; a larger body simply
/// travels in several frames.
pub const FRAME_MAX: u32 = 16 * 1024;

/// `url` with `frame_max` set to [`FRAME_MAX`] unless it sets its own.
pub fn with_frame_max(url: &str) -> String {
    if url.contains("frame_max=") {
        return url.to_owned();
    }
    let joiner = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joiner}frame_max={FRAME_MAX}")
}

/// Connects, retrying with capped exponential backoff until the broker
/// answers: a broker restart must not take a service down with it.
pub async fn connect(url: &str) -> Connection {
    let url = with_frame_max(url);
    let mut delay = Duration::from_millis(100);
    loop {
        match Connection::connect(&url, ConnectionProperties::default()).await {
            Ok(conn) => return conn,
            Err(error) => {
                tracing::warn!(%error, retry_in_ms = delay.as_millis() as u64, "broker connect failed");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}

fn table(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert(ShortString::from(*k), v.clone());
    }
    t
}

fn text(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

/// Declares exchanges, queues and bindings.
pub async fn declare_topology(channel: &Channel, config: &Config) -> Result<(), PlatformError> {
    // Durable: exchanges survive a broker restart, so publishers never hit a
    // missing exchange after one.
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    for name in [
        &config.events_exchange,
        &config.commands_exchange,
        &config.dead_letter_exchange,
        // Host agents publish their reports here (`agent.<machine_id>.<kind>`);
        // their RabbitMQ users may write to no other exchange.
        &config.agents_exchange,
    ] {
        channel
            .exchange_declare(
                name.as_str().into(),
                ExchangeKind::Topic,
                durable,
                FieldTable::default(),
            )
            .await?;
    }

    // Where messages go after `delivery_limit` failed deliveries or when they
    // cannot be decoded: kept for an operator to inspect, never looped.
    let dead_queue = format!("{}.dead", config.dead_letter_exchange);
    declare_quorum(channel, &dead_queue, None, 0).await?;
    bind(channel, &dead_queue, &config.dead_letter_exchange, "#").await?;

    let consumers = [
        (
            &config.provisioner_queue,
            &config.commands_exchange,
            "provisioner.jobs.#",
        ),
        // Instances' network counters, vouched for by the catalog.
        (
            &config.metering_queue,
            &config.events_exchange,
            "catalog.instance.traffic",
        ),
        (
            &config.billing_queue,
            &config.events_exchange,
            "metering.usage.*",
        ),
        // Downtime credits for rentals whose host went silent.
        (
            &config.billing_queue,
            &config.events_exchange,
            "ordering.instance.downtime",
        ),
        // Preemptions decided by the catalog, and renters out of money.
        (
            &config.ordering_queue,
            &config.events_exchange,
            "catalog.allocation.*",
        ),
        (
            &config.ordering_queue,
            &config.events_exchange,
            "billing.balance.*",
        ),
        // Rentals' containers that stopped on their own, vouched for by the
        // catalog.
        (
            &config.ordering_queue,
            &config.events_exchange,
            "catalog.instance.exited",
        ),
        // How much of its disk each rental uses, as its agent measured it.
        (
            &config.ordering_queue,
            &config.events_exchange,
            "catalog.instance.disk_usage",
        ),
        // Inventory, heartbeats and self-tests of every host agent (named
        // kinds only: step results are the provisioners').
        (
            &config.agents_queue,
            &config.agents_exchange,
            "agent.*.inventory",
        ),
        (
            &config.agents_queue,
            &config.agents_exchange,
            "agent.*.heartbeat",
        ),
        (
            &config.agents_queue,
            &config.agents_exchange,
            "agent.*.self_test",
        ),
        // Host agents' answers to the `agent` driver's commands.
        (
            &config.agent_results_queue,
            &config.agents_exchange,
            "agent.*.step_result",
        ),
        // And how far their long steps got (image pulls).
        (
            &config.agent_results_queue,
            &config.agents_exchange,
            "agent.*.step_progress",
        ),
    ];
    for (queue, exchange, key) in consumers {
        declare_quorum(
            channel,
            queue,
            Some(&config.dead_letter_exchange),
            config.delivery_limit,
        )
        .await?;
        bind(channel, queue, exchange, key).await?;
    }
    // Metering's queue (declared above) takes the instance events it acts
    // on by name.
    for key in METERING_INSTANCE_EVENTS {
        bind(
            channel,
            &config.metering_queue,
            &config.events_exchange,
            key,
        )
        .await?;
    }
    // Bindings are durable: one an earlier version made stays until removed
    // (RabbitMQ answers the unbinding of a missing binding with success).
    for key in METERING_UNBOUND {
        channel
            .queue_unbind(
                config.metering_queue.as_str().into(),
                config.events_exchange.as_str().into(),
                key.into(),
                FieldTable::default(),
            )
            .await?;
    }
    Ok(())
}

/// The four instance events metering acts on. A wildcard
/// (`ordering.instance.*`) also matched `ordering.instance.event`, the
/// renters' history feed (two per provisioning step), which metering took
/// through its inbox only to ignore.
const METERING_INSTANCE_EVENTS: [&str; 4] = [
    contracts::events::INSTANCE_RUNNING,
    contracts::events::INSTANCE_STOPPED,
    contracts::events::INSTANCE_STORAGE_STARTED,
    contracts::events::INSTANCE_STORAGE_ENDED,
];

/// Bindings of metering's queue that earlier versions declared and this one
/// removes.
const METERING_UNBOUND: [&str; 1] = ["ordering.instance.*"];

/// A durable quorum queue (replicated, survives node loss; the broker counts
/// deliveries and dead-letters past `x-delivery-limit`).
pub async fn declare_quorum(
    channel: &Channel,
    name: &str,
    dead_letter_exchange: Option<&str>,
    delivery_limit: u32,
) -> Result<(), PlatformError> {
    let mut args = vec![("x-queue-type", text("quorum"))];
    if let Some(dlx) = dead_letter_exchange {
        args.push(("x-dead-letter-exchange", text(dlx)));
        args.push((
            "x-delivery-limit",
            AMQPValue::LongInt(delivery_limit as i32),
        ));
    }
    channel
        .queue_declare(
            name.into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            table(&args),
        )
        .await?;
    Ok(())
}

/// Binds `queue` to `exchange` for `key` (idempotent).
pub async fn bind(
    channel: &Channel,
    queue: &str,
    exchange: &str,
    key: &str,
) -> Result<(), PlatformError> {
    channel
        .queue_bind(
            queue.into(),
            exchange.into(),
            key.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_max_is_added_unless_the_url_sets_one() {
        assert_eq!(
            with_frame_max("amqp://guest:guest@127.0.0.1:5672/%2f"),
            "amqp://guest:guest@127.0.0.1:5672/%2f?frame_max=16384"
        );
        assert_eq!(
            with_frame_max("amqp://h/v?heartbeat=10"),
            "amqp://h/v?heartbeat=10&frame_max=16384"
        );
        assert_eq!(
            with_frame_max("amqp://h/v?frame_max=65536"),
            "amqp://h/v?frame_max=65536"
        );
        let uri: lapin::uri::AMQPUri = with_frame_max("amqp://h/v").parse().unwrap();
        assert_eq!(uri.query.frame_max, Some(FRAME_MAX));
    }
}
