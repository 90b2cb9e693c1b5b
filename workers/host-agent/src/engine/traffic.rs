//! Network counters of the running rentals: one-shot engine stats per
//! managed container, all interfaces summed.

use bollard::Docker;
use bollard::query_parameters::StatsOptionsBuilder;
use contracts::ids::InstanceId;
use futures_util::StreamExt;
use uuid::Uuid;

use super::labels;
use crate::names;
use crate::protocol::InstanceCounters;

/// The counters of `machine`'s running managed containers. `swapped`: the
/// engine reports them from the host's side (old Podman), so rx and tx are
/// exchanged back.
pub async fn traffic(docker: &Docker, machine: Uuid, swapped: bool) -> Vec<InstanceCounters> {
    let mut counters = Vec::new();
    for instance in labels::managed_instances(docker, machine, false, "traffic").await {
        let options = StatsOptionsBuilder::default()
            .stream(false)
            .one_shot(true)
            .build();
        let mut stream = docker.stats(&names::container(instance), Some(options));
        let stats = match stream.next().await {
            Some(Ok(stats)) => stats,
            Some(Err(error)) => {
                tracing::debug!(instance.id = %instance, %error, "stats failed");
                continue;
            }
            None => continue,
        };
        let (mut tx_bytes, mut rx_bytes) = (0u64, 0u64);
        for network in stats.networks.unwrap_or_default().values() {
            tx_bytes = tx_bytes.saturating_add(network.tx_bytes.unwrap_or(0));
            rx_bytes = rx_bytes.saturating_add(network.rx_bytes.unwrap_or(0));
        }
        if swapped {
            std::mem::swap(&mut tx_bytes, &mut rx_bytes);
        }
        counters.push(InstanceCounters {
            instance_id: InstanceId(instance),
            tx_bytes,
            rx_bytes,
            // Measured separately, less often ([`super::ContainerExecutor`]).
            workspace_bytes: None,
        });
    }
    counters
}
