//! What the agent calls the things it creates for a rental, and the labels
//! that mark them. Every container, network and volume the agent makes
//! carries [`LABEL_INSTANCE`] (and [`LABEL_MACHINE`], [`LABEL_RUN`]), so a
//! redelivered step finds what it already did and `validate_clean` can tell
//! whether anything of an instance is left. The SSH gateway finds an
//! instance's container by [`container`].

use uuid::Uuid;

/// The instance a resource belongs to.
pub const LABEL_INSTANCE: &str = "gpumarket.instance";
/// The machine (agent) that made it.
pub const LABEL_MACHINE: &str = "gpumarket.machine";
/// The provisioning run (attempt) that made it.
pub const LABEL_RUN: &str = "gpumarket.run";
/// Marks everything the agent made (for a sweep by label).
pub const LABEL_MANAGED: &str = "gpumarket.managed";
/// The GPU indices a container was created with, `0,1`; for a MIG slice
/// its GPU, memory slices and MIG device, `0:4+4 MIG-<uuid>`.
pub const LABEL_GPUS: &str = "gpumarket.gpus";

/// `gpm-<instance>`: the instance's container.
pub fn container(instance: Uuid) -> String {
    format!("gpm-{instance}")
}

/// `gpm-net-<instance>`: the instance's own network.
pub fn network(instance: Uuid) -> String {
    format!("gpm-net-{instance}")
}

/// `gpm-vol-<instance>`: the instance's `/workspace` volume.
pub fn volume(instance: Uuid) -> String {
    format!("gpm-vol-{instance}")
}

/// Where the instance's volume is mounted in its container.
pub const WORKSPACE: &str = "/workspace";
