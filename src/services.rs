//! The registry: every service of the marketplace, one line each, in the
//! order they start (a service after those it calls). `gpumarket dev`,
//! `gpumarket serve`, `gpumarket services` (run-split, the deploy checks)
//! and the test harness take the list from here.

use platform::service::Service;

pub static SERVICES: [&dyn Service; 7] = [
    &catalog::SERVICE,
    &quota::SERVICE,
    &metering::SERVICE,
    &billing::SERVICE,
    &webhooks::SERVICE,
    &ordering::SERVICE,
    &gateway::SERVICE,
];

/// The service called `name`.
pub fn find(name: &str) -> Option<&'static dyn Service> {
    SERVICES.iter().copied().find(|s| s.name() == name)
}

/// Fills `config` with every service's port and URL, from
/// `GPUMARKET_<NAME>_PORT` and `_URL` or the service's default, and with
/// every queue the services and the provisioning worker consume: each
/// process declares them all before it publishes, so none is missed by a
/// consumer that starts later.
pub fn configure(config: &mut platform::Config) -> anyhow::Result<()> {
    for service in SERVICES {
        config.configure_service(service.name(), service.default_port())?;
    }
    configure_queues(config)
}

/// Puts every queue the services and the worker consume on `config.queues`,
/// named as their settings (on `config`, or the environment's) say.
pub fn configure_queues(config: &mut platform::Config) -> anyhow::Result<()> {
    let mut queues = Vec::new();
    for service in SERVICES {
        queues.extend(
            service
                .queues(config)
                .map_err(|e| anyhow::anyhow!("{}'s queues: {e}", service.name()))?,
        );
    }
    queues.extend(provisioner::queues(config)?);
    config.queues = queues;
    Ok(())
}

/// The development secrets (variables) `service`, or every service when
/// None, would start with; a production process refuses to start with any.
pub fn development_secrets(
    config: &platform::Config,
    service: Option<&str>,
) -> anyhow::Result<Vec<&'static str>> {
    let mut found = Vec::new();
    for s in SERVICES {
        if service.is_none_or(|name| name == s.name()) {
            found.extend(
                s.development_secrets(config)
                    .map_err(|e| anyhow::anyhow!("{}'s settings: {e}", s.name()))?,
            );
        }
    }
    if service.is_none() {
        // `gpumarket dev` runs the worker too.
        found.extend(config.development_secrets(&platform::config::Secret::ALL));
    }
    found.sort_unstable();
    found.dedup();
    Ok(found)
}

/// The broker topology every process declares, as JSON: the exchanges,
/// the dead-letter queue and each consumer's queue with its bindings, as
/// `config` names them. `deploy/topology.json` is this for the default
/// configuration (a test keeps it so), and `deploy/validate.py` checks
/// api-specs/asyncapi.yaml against it.
pub fn topology(config: &platform::Config) -> serde_json::Value {
    let binding = |b: &platform::broker::Binding| serde_json::json!({ "exchange": b.exchange, "routingKey": b.key });
    serde_json::json!({
        "exchanges": [
            config.events_exchange,
            config.commands_exchange,
            config.dead_letter_exchange,
            config.agents_exchange,
        ],
        "deadLetterQueue": {
            "name": format!("{}.dead", config.dead_letter_exchange),
            "bindings": [{ "exchange": config.dead_letter_exchange, "routingKey": "#" }],
        },
        "deliveryLimit": config.delivery_limit,
        "publishers": publishers()
            .into_iter()
            .map(|(name, kinds)| (name.to_owned(), serde_json::json!(kinds)))
            .collect::<serde_json::Map<_, _>>(),
        "queues": config.queues.iter().map(|q| serde_json::json!({
            "name": q.name,
            "bindings": q.bindings.iter().map(binding).collect::<Vec<_>>(),
            "unbound": q.unbind.iter().map(binding).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// What each process publishes, by service (and `provisioner`, the worker).
pub fn publishers() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut all: Vec<(&'static str, Vec<&'static str>)> = SERVICES
        .iter()
        .map(|s| (s.name(), s.publishes().to_vec()))
        .collect();
    all.push(("provisioner", provisioner::PUBLISHES.to_vec()));
    all
}

/// Every service's name, in start order.
pub fn names() -> Vec<&'static str> {
    SERVICES.iter().map(|s| s.name()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_queue_is_declared_once_and_bound() {
        let mut config = platform::Config::from_env().unwrap();
        configure(&mut config).unwrap();
        let mut names: Vec<&str> = config.queues.iter().map(|q| q.name.as_str()).collect();
        names.sort_unstable();
        let count = names.len();
        names.dedup();
        assert_eq!(names.len(), count, "{names:?}");
        for queue in &config.queues {
            assert!(!queue.bindings.is_empty(), "{} has no binding", queue.name);
        }
        // Every consumer of the system has its queue here.
        for expected in [
            "catalog.agents",
            "metering.lifecycle",
            "billing.usage",
            "ordering.catalog",
            "ordering.instance-steps",
            "gpumarket.webhooks",
            "provisioner.jobs",
            "provisioner.agent-results",
        ] {
            assert!(
                names.contains(&expected),
                "{expected} missing from {names:?}"
            );
        }
    }

    /// `deploy/topology.json` is the registry's topology; with
    /// `GPUMARKET_BLESS=1` this test writes it.
    #[test]
    fn the_checked_in_topology_is_the_registrys() {
        let mut config = platform::Config::from_env().unwrap();
        configure(&mut config).unwrap();
        let actual = serde_json::to_string_pretty(&topology(&config)).unwrap() + "\n";
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/topology.json");
        if std::env::var_os("GPUMARKET_BLESS").is_some() {
            std::fs::write(&path, &actual).unwrap();
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            expected == actual,
            "deploy/topology.json differs from the registry's queues; run \
             GPUMARKET_BLESS=1 cargo nextest run -p gpumarket --lib services, \
             then update api-specs/asyncapi.yaml (bash deploy/validate.sh checks it):\n{actual}"
        );
    }

    #[test]
    fn names_are_unique() {
        let mut names = names();
        names.sort_unstable();
        let count = names.len();
        names.dedup();
        assert_eq!(names.len(), count);
    }
}
