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
/// `GPUMARKET_<NAME>_PORT` and `_URL` or the service's default.
pub fn configure(config: &mut platform::Config) -> Result<(), platform::PlatformError> {
    for service in SERVICES {
        config.configure_service(service.name(), service.default_port())?;
    }
    Ok(())
}

/// Every service's name, in start order.
pub fn names() -> Vec<&'static str> {
    SERVICES.iter().map(|s| s.name()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        let mut names = names();
        names.sort_unstable();
        let count = names.len();
        names.dedup();
        assert_eq!(names.len(), count);
    }
}
