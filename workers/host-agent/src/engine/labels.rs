//! The labels the executor puts on what it creates (names in
//! [`crate::names`]) and the filters that find them again.

use std::collections::HashMap;

use uuid::Uuid;

use crate::names::{LABEL_INSTANCE, LABEL_MACHINE, LABEL_MANAGED, LABEL_RUN};

/// instance, machine, run and managed.
pub fn base(machine: Uuid, instance: Uuid, run: i32) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_INSTANCE.to_owned(), instance.to_string()),
        (LABEL_MACHINE.to_owned(), machine.to_string()),
        (LABEL_RUN.to_owned(), run.to_string()),
        (LABEL_MANAGED.to_owned(), "true".to_owned()),
    ])
}

/// `gpumarket.managed=true`.
pub fn managed_filter() -> String {
    format!("{LABEL_MANAGED}=true")
}

/// `gpumarket.machine=<id>`.
pub fn machine_filter(machine: Uuid) -> String {
    format!("{LABEL_MACHINE}={machine}")
}

/// `gpumarket.instance=<id>`.
pub fn instance_filter(instance: Uuid) -> String {
    format!("{LABEL_INSTANCE}={instance}")
}

/// A `label` filter for list calls.
pub fn filters(values: Vec<String>) -> HashMap<&'static str, Vec<String>> {
    HashMap::from([("label", values)])
}

/// The instances of `machine`'s managed containers, running ones only
/// unless `all`. A failed listing is logged (as `what`) and gives none: the
/// callers report with every heartbeat, and the next one tries again.
pub async fn managed_instances(
    docker: &bollard::Docker,
    machine: Uuid,
    all: bool,
    what: &str,
) -> Vec<Uuid> {
    let filters = filters(vec![managed_filter(), machine_filter(machine)]);
    let options = bollard::query_parameters::ListContainersOptionsBuilder::default()
        .all(all)
        .filters(&filters)
        .build();
    match docker.list_containers(Some(options)).await {
        Ok(containers) => containers
            .into_iter()
            .filter_map(|summary| {
                summary
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_INSTANCE))
                    .and_then(|i| Uuid::parse_str(i).ok())
            })
            .collect(),
        Err(error) => {
            tracing::warn!(%error, "listing containers for {what} failed");
            Vec::new()
        }
    }
}
