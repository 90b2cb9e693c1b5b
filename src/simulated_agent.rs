//! The demo's simulated host agents carry out their commands with the
//! provisioner's simulated driver, on the simulated machine state, exactly
//! as the `simulated` driver would. The adapter lives here, in the binary
//! that runs both, so that no worker crate depends on another (issue 19).

use contracts::ids::{InstanceId, MachineId};
use std::future::Future;
use std::pin::Pin;

use contracts::agent::AgentCommand;
use contracts::events::{DeprovisionInstance, ProvisionInstance, StopInstance};
use provisioner::{Driver, SimulatedDriver, Step};

/// A [`SimulatedDriver`] as a host agent's [`host_agent::Executor`].
pub struct SimulatedAgent(pub SimulatedDriver);

/// The host agent in simulated mode carries out its commands on the
/// simulated machine state, exactly as the `simulated` driver would.
impl host_agent::Executor for SimulatedAgent {
    fn execute<'a>(
        &'a self,
        command: &'a AgentCommand,
        _progress: host_agent::Progress,
    ) -> Pin<
        Box<dyn Future<Output = Result<Option<contracts::agent::StepDetail>, String>> + Send + 'a>,
    > {
        Box::pin(async move {
            let step = Step::parse(&command.step)
                .ok_or_else(|| format!("unknown step {:?}", command.step))?;
            let job = command.job.clone();
            let decode = |e: serde_json::Error| format!("bad {} command: {e}", command.action);
            let outcome = match command.action.as_str() {
                "provision" => {
                    let job: ProvisionInstance = serde_json::from_value(job).map_err(decode)?;
                    self.0.run_step(step, &job).await
                }
                "deprovision" => {
                    let job: DeprovisionInstance = serde_json::from_value(job).map_err(decode)?;
                    self.0.deprovision_step(step, &job).await
                }
                "stop" => {
                    let job: StopInstance = serde_json::from_value(job).map_err(decode)?;
                    self.0.stop(&job, command.issued_at).await
                }
                other => return Err(format!("unknown action {other:?}")),
            };
            outcome.map(|()| None).map_err(|e| e.to_string())
        })
    }

    fn traffic<'a>(
        &'a self,
        machine_id: MachineId,
    ) -> Pin<Box<dyn Future<Output = Vec<contracts::agent::InstanceCounters>> + Send + 'a>> {
        Box::pin(async move {
            match self.0.traffic(machine_id).await {
                Ok(counters) => counters
                    .into_iter()
                    .map(
                        |(instance_id, tx_bytes, rx_bytes)| contracts::agent::InstanceCounters {
                            instance_id: InstanceId(instance_id),
                            tx_bytes,
                            rx_bytes,
                            workspace_bytes: None,
                        },
                    )
                    .collect(),
                Err(error) => {
                    // A heartbeat without counters beats none; the next one
                    // carries them (they are cumulative).
                    tracing::warn!(%error, "reading the simulated traffic failed");
                    Vec::new()
                }
            }
        })
    }
}
