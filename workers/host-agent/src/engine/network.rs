//! `attach_network` and `detach_network`: each instance gets a bridge
//! network of its own, `gpm-net-<instance>`, so no other renter's container
//! shares it. Docker isolates bridge networks from each other; Podman's
//! netavark does only for networks created with the `isolate` option (all
//! of ours), so two instances cannot reach each other by IP either way.
//!
//! Netavark 1.4 (Debian 12's) also deletes the `FORWARD -j
//! NETAVARK_ISOLATION_1` jump that all isolated networks share whenever it
//! tears down any one of them (checked: stopping one instance's container
//! opened every other instance's network). On Podman the executor puts the
//! jump back ([`repair_isolation`]) after each stop or removal, at each
//! start and with each heartbeat; it needs the agent to run as root with
//! `iptables` (as rootful Podman itself does).
//!
//! On Podman, networks are read through its own API ([`super::libpod`]):
//! a read through the compatible API strips `isolate` from the service's
//! copy of the network.
//!
//! The host ports for the order's ports are chosen here and kept as the
//! network's [`LABEL_PORTS`] label, so a redelivered step, the container's
//! creation and the readiness check's connection all read the same ones.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use bollard::Docker;
use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::ListNetworksOptionsBuilder;
use uuid::Uuid;

use super::{EngineError, is_not_found, labels};
use crate::names;
use crate::protocol::PortMapping;

/// The network label with the instance's published ports, `8888:40001,22:40002`.
pub const LABEL_PORTS: &str = "gpumarket.ports";

/// How networks are read: `libpod` is Podman's socket (None on Docker).
#[derive(Clone, Copy)]
pub struct Reader<'a> {
    pub docker: &'a Docker,
    pub libpod: Option<&'a Path>,
}

impl Reader<'_> {
    /// The labels of network `name`, None when absent.
    pub async fn labels(&self, name: &str) -> Result<Option<HashMap<String, String>>, EngineError> {
        if let Some(socket) = self.libpod {
            return Ok(super::libpod::network(socket, name)
                .await?
                .map(|n| n.labels.unwrap_or_default()));
        }
        match self.docker.inspect_network(name, None).await {
            Ok(network) => Ok(Some(network.labels.unwrap_or_default())),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Name and labels of the networks carrying `label` (`key=value`).
    pub async fn list(
        &self,
        label: String,
    ) -> Result<Vec<(String, HashMap<String, String>)>, EngineError> {
        if let Some(socket) = self.libpod {
            return Ok(super::libpod::networks(socket, &label)
                .await?
                .into_iter()
                .map(|n| (n.name, n.labels.unwrap_or_default()))
                .collect());
        }
        let filters = labels::filters(vec![label]);
        let networks = self
            .docker
            .list_networks(Some(
                ListNetworksOptionsBuilder::default()
                    .filters(&filters)
                    .build(),
            ))
            .await?;
        Ok(networks
            .into_iter()
            .map(|n| (n.name.unwrap_or_default(), n.labels.unwrap_or_default()))
            .collect())
    }
}

/// Creates the instance's network unless it exists, with host ports for
/// `ports`; returns the port mappings.
pub async fn attach_network(
    reader: Reader<'_>,
    mut labels: HashMap<String, String>,
    instance: Uuid,
    ports: &[u16],
    range: (u16, u16),
    isolate_option: bool,
) -> Result<Vec<PortMapping>, EngineError> {
    let name = names::network(instance);
    if let Some(existing) = mappings(reader, instance).await? {
        return Ok(existing);
    }
    let used = used_host_ports(reader).await?;
    let wanted: BTreeSet<u16> = ports.iter().copied().collect();
    let mut mappings = Vec::new();
    let mut candidates = (range.0..=range.1).filter(|p| !used.contains(p));
    for container_port in wanted {
        let host_port = candidates
            .by_ref()
            .find(|p| is_free_on_host(*p))
            .ok_or(EngineError::NoFreePorts)?;
        mappings.push(PortMapping {
            container_port,
            host_port,
        });
    }
    labels.insert(LABEL_PORTS.into(), format_ports(&mappings));
    let mut options = HashMap::new();
    if isolate_option {
        options.insert("isolate".to_owned(), "true".to_owned());
    }
    let request = NetworkCreateRequest {
        name: name.clone(),
        driver: Some("bridge".into()),
        internal: Some(false),
        options: Some(options),
        labels: Some(labels),
        ..Default::default()
    };
    match reader.docker.create_network(request).await {
        Ok(_) => Ok(mappings),
        // Made by a concurrent delivery of the same step: use its ports.
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409, ..
        }) => Ok(self::mappings(reader, instance).await?.unwrap_or_default()),
        Err(e) => Err(e.into()),
    }
}

/// The instance's port mappings, None when it has no network.
pub async fn mappings(
    reader: Reader<'_>,
    instance: Uuid,
) -> Result<Option<Vec<PortMapping>>, EngineError> {
    Ok(reader
        .labels(&names::network(instance))
        .await?
        .map(|labels| parse_ports(labels.get(LABEL_PORTS).map_or("", String::as_str))))
}

/// Removes the instance's network; absent is fine.
pub async fn detach_network(docker: &Docker, instance: Uuid) -> Result<(), EngineError> {
    match docker.remove_network(&names::network(instance)).await {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Host ports any managed network has claimed.
async fn used_host_ports(reader: Reader<'_>) -> Result<BTreeSet<u16>, EngineError> {
    Ok(reader
        .list(labels::managed_filter())
        .await?
        .iter()
        .filter_map(|(_, labels)| labels.get(LABEL_PORTS))
        .flat_map(|text| parse_ports(text))
        .map(|m| m.host_port)
        .collect())
}

/// Whether nothing listens on `port` on the host (TCP, all addresses).
fn is_free_on_host(port: u16) -> bool {
    std::net::TcpListener::bind(("0.0.0.0", port)).is_ok()
}

pub fn format_ports(mappings: &[PortMapping]) -> String {
    mappings
        .iter()
        .map(|m| format!("{}:{}", m.container_port, m.host_port))
        .collect::<Vec<_>>()
        .join(",")
}

pub fn parse_ports(text: &str) -> Vec<PortMapping> {
    text.split(',')
        .filter_map(|pair| {
            let (c, h) = pair.split_once(':')?;
            Some(PortMapping {
                container_port: c.trim().parse().ok()?,
                host_port: h.trim().parse().ok()?,
            })
        })
        .collect()
}

/// The chain netavark sends traffic leaving an isolated network through.
const ISOLATION_CHAIN: &str = "NETAVARK_ISOLATION_1";

/// Puts back netavark's jump to its isolation chain when the chain exists
/// and the jump is gone (see the module's doc). Best effort: logged, never
/// fails a step.
pub async fn repair_isolation() {
    let iptables = |args: &[&str]| {
        let mut command = tokio::process::Command::new("iptables");
        command
            .arg("-w")
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        command
    };
    let jump = ["FORWARD", "-j", ISOLATION_CHAIN];
    match iptables(&[&["-C"][..], &jump[..]].concat()).status().await {
        Ok(status) if status.success() => return,
        Ok(_) => {}
        Err(error) => {
            tracing::debug!(%error, "iptables not runnable; isolation jump not checked");
            return;
        }
    }
    let chain_exists = iptables(&["-n", "-L", ISOLATION_CHAIN])
        .status()
        .await
        .is_ok_and(|s| s.success());
    if !chain_exists {
        return;
    }
    match iptables(&[&["-I"][..], &jump[..]].concat()).status().await {
        Ok(status) if status.success() => {
            tracing::warn!("netavark's isolation jump was gone (netavark 1.4 teardown); put back")
        }
        Ok(status) => tracing::error!(%status, "putting back netavark's isolation jump failed"),
        Err(error) => tracing::error!(%error, "putting back netavark's isolation jump failed"),
    }
}
