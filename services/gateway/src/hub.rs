//! The live-event hub (transport): each gateway process consumes the events
//! exchange through its own exclusive, auto-delete queue bound to
//! `ordering.instance.event` and `provisioner.instance.step`, and fans the
//! messages out through a broadcast channel per instance, which the
//! `instanceEvents` subscriptions join. It knows nothing of GraphQL.

use contracts::ids::InstanceId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use contracts::Envelope;
use contracts::events::{self, INSTANCE_EVENT, PROVISIONING_STEP};
use futures_util::StreamExt;
use lapin::options::{BasicConsumeOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use platform::Config;
use tokio::sync::broadcast;

/// Events buffered per instance for a slow subscriber.
pub const CHANNEL_CAPACITY: usize = 256;

/// A message about one instance, as it came off the broker.
#[derive(Debug, Clone)]
pub enum Live {
    Instance(Box<events::InstanceEvent>),
    Step(events::ProvisioningStep),
}

/// Broadcast channels per instance, created by the first subscriber and
/// dropped once the last one left.
#[derive(Default)]
pub struct Hub {
    channels: Mutex<HashMap<InstanceId, broadcast::Sender<Live>>>,
}

impl Hub {
    pub fn subscribe(&self, instance_id: InstanceId) -> broadcast::Receiver<Live> {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        // Channels whose subscribers all left go here, not only on their
        // next event: an instance that never changes again sends none.
        channels.retain(|_, sender| sender.receiver_count() > 0);
        channels
            .entry(instance_id)
            .or_insert_with(|| broadcast::channel(CHANNEL_CAPACITY).0)
            .subscribe()
    }

    fn publish(&self, instance_id: InstanceId, event: Live) {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sender) = channels.get(&instance_id)
            && sender.send(event).is_err()
        {
            // Nobody listens any more.
            channels.remove(&instance_id);
        }
    }

    /// Hands one broker message to the subscribers of its instance.
    pub fn dispatch(&self, routing_key: &str, body: &[u8]) {
        let Ok(envelope) = serde_json::from_slice::<Envelope>(body) else {
            tracing::warn!(routing_key, "undecodable event ignored");
            return;
        };
        let decoded = match routing_key {
            INSTANCE_EVENT => serde_json::from_value::<events::InstanceEvent>(envelope.payload)
                .map(|e| (e.instance_id, Live::Instance(Box::new(e)))),
            PROVISIONING_STEP => {
                serde_json::from_value::<events::ProvisioningStep>(envelope.payload)
                    .map(|s| (s.instance_id, Live::Step(s)))
            }
            _ => return,
        };
        match decoded {
            Ok((id, live)) => self.publish(id, live),
            Err(error) => tracing::warn!(routing_key, %error, "undecodable event payload ignored"),
        }
    }
}

/// Consumes instance events into `hub` forever, reconnecting after broker
/// errors. The queue is this process's own (exclusive, deleted with the
/// connection): live fan-out only; the history lives in ordering.
pub async fn run_hub(config: Arc<Config>, hub: Arc<Hub>) {
    loop {
        if let Err(error) = consume(&config, &hub).await {
            tracing::warn!(%error, "instance event fan-out restarting");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn consume(config: &Config, hub: &Hub) -> Result<(), platform::PlatformError> {
    let conn = platform::broker::connect(&config.amqp_url).await;
    let channel = conn.create_channel().await?;
    platform::broker::declare_topology(&channel, config).await?;
    let queue = channel
        .queue_declare(
            "".into(),
            QueueDeclareOptions {
                exclusive: true,
                auto_delete: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    for key in [INSTANCE_EVENT, PROVISIONING_STEP] {
        channel
            .queue_bind(
                queue.name().clone(),
                config.events_exchange.as_str().into(),
                key.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
    }
    let mut deliveries = channel
        .basic_consume(
            queue.name().clone(),
            "gateway-instance-events".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    while let Some(delivery) = deliveries.next().await {
        let delivery = delivery?;
        hub.dispatch(delivery.routing_key.as_str(), &delivery.data);
    }
    Ok(())
}
