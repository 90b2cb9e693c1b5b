//! The webhook service's own group of settings, read from `GPUMARKET_WEBHOOKS_*`
//! variables. Every default works on a developer machine; production mode
//! refuses the development switch.

use std::time::Duration;

use crate::Error;

/// The published retry schedule (docs/webhooks.md): the delay before each
/// attempt after the first, in seconds. About three days in all; each delay
/// gets up to ±10 % jitter.
pub const DEFAULT_SCHEDULE: [u64; 9] = [
    5,      // 5 s
    300,    // 5 min
    1_800,  // 30 min
    7_200,  // 2 h
    18_000, // 5 h
    36_000, // 10 h
    50_400, // 14 h
    72_000, // 20 h
    86_400, // 24 h
];

#[derive(Debug, Clone)]
pub struct Settings {
    /// Delays between attempts (`GPUMARKET_WEBHOOKS_RETRY_SCHEDULE`, seconds,
    /// comma-separated). A delivery gets one attempt more than delays.
    pub schedule: Vec<Duration>,
    /// Development switch: endpoints may use `http` and loopback addresses
    /// (`GPUMARKET_WEBHOOKS_ALLOW_LOCAL`). Private, link-local and metadata
    /// addresses stay refused either way. Refused in production.
    pub allow_local: bool,
    /// Endpoints one tenant may have (`GPUMARKET_WEBHOOKS_MAX_ENDPOINTS`).
    pub max_endpoints_per_tenant: i64,
    /// Whole request, from connect to the last byte read
    /// (`GPUMARKET_WEBHOOKS_TIMEOUT_MS`).
    pub request_timeout: Duration,
    /// How long a sender waits for an idle moment before it looks for due
    /// deliveries again (`GPUMARKET_WEBHOOKS_POLL_MS`).
    pub poll: Duration,
    /// Deliveries one sender process sends at once
    /// (`GPUMARKET_WEBHOOKS_CONCURRENCY`).
    pub concurrency: usize,
    /// How long the previous secret keeps signing after a rotation
    /// (`GPUMARKET_WEBHOOKS_ROTATION_OVERLAP_SECONDS`).
    pub rotation_overlap: Duration,
    /// The consumer's queue on the events exchange
    /// (`GPUMARKET_WEBHOOKS_QUEUE`).
    pub queue: String,
}

use platform::settings::optional as var;

/// `name` parsed; unset or blank, `default`.
fn parsed<T: std::str::FromStr>(name: &str, default: T) -> Result<T, Error> {
    match var(name) {
        None => Ok(default),
        Some(_) => Ok(platform::settings::parsed(name, default)?),
    }
}

/// `5,300,1800` → delays; empty entries are refused.
pub fn parse_schedule(raw: &str) -> Result<Vec<Duration>, Error> {
    raw.split(',')
        .map(|part| {
            part.trim()
                .parse::<u64>()
                .map(Duration::from_secs)
                .map_err(|_| {
                    Error::Config(format!(
                        "GPUMARKET_WEBHOOKS_RETRY_SCHEDULE: {part:?} is not a number of seconds"
                    ))
                })
        })
        .collect()
}

impl platform::settings::ServiceSettings for Settings {
    fn from_env(production: bool) -> Result<Self, platform::PlatformError> {
        Self::load(production).map_err(|e| match e {
            Error::Platform(inner) => inner,
            other => platform::PlatformError::Config(other.to_string()),
        })
    }
}

impl Settings {
    /// Reads the group from `GPUMARKET_WEBHOOKS_*`.
    pub fn load(production: bool) -> Result<Self, Error> {
        let schedule = match var("GPUMARKET_WEBHOOKS_RETRY_SCHEDULE") {
            Some(raw) => parse_schedule(&raw)?,
            None => DEFAULT_SCHEDULE
                .iter()
                .map(|s| Duration::from_secs(*s))
                .collect(),
        };
        if schedule.len() > 30 {
            return Err(Error::Config(
                "GPUMARKET_WEBHOOKS_RETRY_SCHEDULE: at most 30 retries".into(),
            ));
        }
        let allow_local = parsed("GPUMARKET_WEBHOOKS_ALLOW_LOCAL", false)?;
        if production && allow_local {
            return Err(Error::Config(
                "GPUMARKET_ENV=production refuses GPUMARKET_WEBHOOKS_ALLOW_LOCAL=true (plain http and loopback receivers)"
                    .into(),
            ));
        }
        Ok(Self {
            schedule,
            allow_local,
            max_endpoints_per_tenant: parsed("GPUMARKET_WEBHOOKS_MAX_ENDPOINTS", 20)?,
            request_timeout: Duration::from_millis(parsed(
                "GPUMARKET_WEBHOOKS_TIMEOUT_MS",
                15_000,
            )?),
            poll: Duration::from_millis(parsed("GPUMARKET_WEBHOOKS_POLL_MS", 1_000)?),
            concurrency: parsed("GPUMARKET_WEBHOOKS_CONCURRENCY", 16usize)?.max(1),
            rotation_overlap: Duration::from_secs(parsed(
                "GPUMARKET_WEBHOOKS_ROTATION_OVERLAP_SECONDS",
                86_400,
            )?),
            queue: var("GPUMARKET_WEBHOOKS_QUEUE").unwrap_or_else(|| "gpumarket.webhooks".into()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_schedule_spans_about_three_days() {
        let total: u64 = DEFAULT_SCHEDULE.iter().sum();
        assert!((216_000..=302_400).contains(&total), "{total}");
    }

    #[test]
    fn a_schedule_is_parsed_or_refused() {
        assert_eq!(
            parse_schedule("1, 2,3").unwrap(),
            [1, 2, 3].map(Duration::from_secs).to_vec()
        );
        assert!(parse_schedule("1,,2").is_err());
        assert!(parse_schedule("-1").is_err());
    }
}
