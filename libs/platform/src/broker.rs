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

/// A queue a service or worker consumes, as it describes it (its
/// `Service::queues`): a durable quorum queue, dead-lettered after
/// `delivery_limit` deliveries, with its bindings. The registry puts every
/// process's queues on [`Config::queues`], and each process declares them
/// all before it publishes or consumes: a message sent to an exchange with
/// no queue bound yet would be dropped, so start order must not matter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpec {
    pub name: String,
    pub bindings: Vec<Binding>,
    /// Bindings an earlier version declared and this one removes (bindings
    /// are durable: one stays until it is removed).
    pub unbind: Vec<Binding>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub exchange: String,
    pub key: String,
}

impl QueueSpec {
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            bindings: Vec::new(),
            unbind: Vec::new(),
        }
    }

    /// Adds a binding of `key` on `exchange`.
    pub fn bind(mut self, exchange: &str, key: &str) -> Self {
        self.bindings.push(Binding {
            exchange: exchange.to_owned(),
            key: key.to_owned(),
        });
        self
    }

    /// Adds a binding of each of `keys` on `exchange`.
    pub fn bind_all(mut self, exchange: &str, keys: &[&str]) -> Self {
        for key in keys {
            self = self.bind(exchange, key);
        }
        self
    }

    /// Removes an old binding of `key` on `exchange` when declared.
    pub fn unbind(mut self, exchange: &str, key: &str) -> Self {
        self.unbind.push(Binding {
            exchange: exchange.to_owned(),
            key: key.to_owned(),
        });
        self
    }
}

/// Declares the exchanges, the dead-letter queue, and every queue on
/// [`Config::queues`] with its bindings. Idempotent.
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

    for queue in &config.queues {
        declare_queue(channel, config, queue).await?;
    }
    Ok(())
}

/// Declares one consumer's queue, its bindings, and removes its old ones.
pub async fn declare_queue(
    channel: &Channel,
    config: &Config,
    queue: &QueueSpec,
) -> Result<(), PlatformError> {
    declare_quorum(
        channel,
        &queue.name,
        Some(&config.dead_letter_exchange),
        config.delivery_limit,
    )
    .await?;
    for binding in &queue.bindings {
        bind(channel, &queue.name, &binding.exchange, &binding.key).await?;
    }
    // RabbitMQ answers the unbinding of a missing binding with success.
    for binding in &queue.unbind {
        channel
            .queue_unbind(
                queue.name.as_str().into(),
                binding.exchange.as_str().into(),
                binding.key.as_str().into(),
                FieldTable::default(),
            )
            .await?;
    }
    Ok(())
}

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
