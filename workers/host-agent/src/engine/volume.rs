//! The instance's `/workspace`: a named volume `gpm-vol-<instance>` of the
//! engine's `local` driver, kept across a stop and removed by
//! `wipe_volume`.
//!
//! Its size is not enforced: the `local` driver takes a size (`o=size`)
//! only on XFS with project quotas (Podman) or not at all (Docker), and
//! where it is not supported the create fails. The ordered size is kept as
//! the volume's [`LABEL_DISK_GIB`] label, and the use is measured instead:
//! [`disk_usage`] runs `du` in the running container (what the platform
//! compares with the order).

use std::collections::HashMap;

use bollard::Docker;
use bollard::models::VolumeCreateRequest;
use bollard::query_parameters::RemoveVolumeOptionsBuilder;
use uuid::Uuid;

use super::{EngineError, is_not_found};
use crate::names;

/// The volume label with the ordered disk, GiB.
pub const LABEL_DISK_GIB: &str = "gpumarket.disk_gib";

/// Creates the instance's volume unless it exists.
pub async fn create_volume(
    docker: &Docker,
    mut labels: HashMap<String, String>,
    instance: Uuid,
    disk_gib: Option<i32>,
) -> Result<(), EngineError> {
    let name = names::volume(instance);
    match docker.inspect_volume(&name).await {
        Ok(_) => return Ok(()),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e.into()),
    }
    if let Some(gib) = disk_gib {
        labels.insert(LABEL_DISK_GIB.into(), gib.to_string());
    }
    match docker
        .create_volume(VolumeCreateRequest {
            name: Some(name),
            driver: Some("local".into()),
            labels: Some(labels),
            ..Default::default()
        })
        .await
    {
        Ok(_) => Ok(()),
        // Made by a concurrent delivery of the same step.
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409, ..
        }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Removes the instance's volume and what it holds; absent is fine.
pub async fn wipe_volume(docker: &Docker, instance: Uuid) -> Result<(), EngineError> {
    let options = RemoveVolumeOptionsBuilder::default().force(true).build();
    match docker
        .remove_volume(&names::volume(instance), Some(options))
        .await
    {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Bytes used in the instance's `/workspace`, measured with `du` in its
/// running container (the image needs `du`: coreutils or busybox).
pub async fn disk_usage(docker: &Docker, instance: Uuid) -> Result<u64, EngineError> {
    let (code, output) = super::container::exec(
        docker,
        &names::container(instance),
        &["du", "-s", "-k", names::WORKSPACE],
    )
    .await?;
    let kib: Option<u64> = output
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok());
    match (code, kib) {
        (0, Some(kib)) => Ok(kib.saturating_mul(1024)),
        _ => Err(EngineError::NotMeasured(output.chars().take(200).collect())),
    }
}
