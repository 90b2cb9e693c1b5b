//! The provisioning worker's own settings, read once per process
//! ([`platform::settings`]).

use std::time::Duration;

use platform::PlatformError;
use platform::settings::{ServiceSettings, parsed, var};

#[derive(Debug, Clone)]
pub struct ProvisionerSettings {
    /// The workers' queue of provisioning commands.
    /// `GPUMARKET_PROVISIONER_QUEUE`.
    pub queue: String,
    /// The workers' queue of host agents' step results and progress.
    /// `GPUMARKET_AGENT_RESULTS_QUEUE`.
    pub agent_results_queue: String,
    /// The worker's HTTP port (`/metrics`, `/healthz`, `/readyz`; 0 = any
    /// free port). No service calls the worker, and `gpumarket dev` serves
    /// its metrics on every service port instead.
    /// `GPUMARKET_PROVISIONER_PORT`.
    pub port: u16,
    /// `simulated`, or `agent` (commands go to the host agent of the
    /// machine). `GPUMARKET_PROVISIONER_DRIVER`.
    pub driver: String,
    /// Starts of one provisioning step before the job fails (at least 1).
    /// `GPUMARKET_STEP_ATTEMPTS`.
    pub step_attempts: u32,
    /// How long a worker's claim on a job lasts unless renewed; a killed
    /// worker's jobs are taken over after it. `GPUMARKET_JOB_LEASE_MS`.
    pub job_lease: Duration,
    /// A job not finished this long after it arrived is failed (and its
    /// command dead-lettered). `GPUMARKET_JOB_DEADLINE_SECONDS`.
    pub job_deadline_seconds: i64,
    /// How often an idle worker looks for runnable jobs.
    /// `GPUMARKET_JOB_POLL_MS`.
    pub job_poll: Duration,
    /// Jobs one worker process runs at once. `GPUMARKET_WORKER_CONCURRENCY`.
    pub concurrency: usize,
    /// How long the `agent` driver waits for a host agent to answer a step.
    /// `GPUMARKET_AGENT_STEP_TIMEOUT_MS`.
    pub agent_step_timeout: Duration,
    /// Per-step latency of the simulated driver, `step=ms,step=ms`.
    /// `GPUMARKET_SIM_STEP_LATENCY_MS`.
    pub sim_step_latency_ms: String,
    /// Injected failures of the simulated driver, `step=n`: the first n
    /// attempts of that step fail. `GPUMARKET_SIM_STEP_FAILURES`.
    pub sim_step_failures: String,
    /// Bytes per second each simulated container sends (it receives four
    /// times as much); 0 reports no traffic.
    /// `GPUMARKET_SIM_TRAFFIC_BYTES_PER_SECOND`.
    pub sim_traffic_bytes_per_second: u64,
}

impl ServiceSettings for ProvisionerSettings {
    fn from_env(_production: bool) -> Result<Self, PlatformError> {
        let job_lease_ms: u64 = parsed("GPUMARKET_JOB_LEASE_MS", 10_000)?;
        if job_lease_ms < 300 {
            return Err(PlatformError::Config(
                "GPUMARKET_JOB_LEASE_MS must be at least 300".into(),
            ));
        }
        let driver = var("GPUMARKET_PROVISIONER_DRIVER", "simulated");
        if !matches!(driver.as_str(), "simulated" | "agent") {
            return Err(PlatformError::Config(format!(
                "GPUMARKET_PROVISIONER_DRIVER: {driver:?} is not simulated or agent"
            )));
        }
        Ok(Self {
            queue: var("GPUMARKET_PROVISIONER_QUEUE", "provisioner.jobs"),
            agent_results_queue: var("GPUMARKET_AGENT_RESULTS_QUEUE", "provisioner.agent-results"),
            port: parsed("GPUMARKET_PROVISIONER_PORT", 8086)?,
            driver,
            step_attempts: parsed("GPUMARKET_STEP_ATTEMPTS", 3u32)?.max(1),
            job_lease: Duration::from_millis(job_lease_ms),
            job_deadline_seconds: parsed("GPUMARKET_JOB_DEADLINE_SECONDS", 1800i64)?.max(1),
            job_poll: Duration::from_millis(parsed("GPUMARKET_JOB_POLL_MS", 500u64)?.max(10)),
            concurrency: parsed("GPUMARKET_WORKER_CONCURRENCY", 8usize)?.max(1),
            agent_step_timeout: Duration::from_millis(
                parsed("GPUMARKET_AGENT_STEP_TIMEOUT_MS", 30_000u64)?.max(1),
            ),
            sim_step_latency_ms: var("GPUMARKET_SIM_STEP_LATENCY_MS", ""),
            sim_step_failures: var("GPUMARKET_SIM_STEP_FAILURES", ""),
            sim_traffic_bytes_per_second: parsed("GPUMARKET_SIM_TRAFFIC_BYTES_PER_SECOND", 0)?,
        })
    }
}
