//! The wire protocol between a host agent and the platform (docs/host-agent.md):
//! the agent's reports, which catalog and the provisioner consume, and the
//! commands the provisioner sends it. Defined once, here: the agent
//! (`workers/host-agent`), catalog and the provisioner all use these types
//! (issue 19); no worker imports another.
//!
//! Every message is a JSON body published to the topic exchange
//! [`EXCHANGE`] with routing key `agent.<machine_id>.<kind>`, the AMQP
//! `user_id` property set to the agent's RabbitMQ user [`username`]
//! (which the broker checks against the connection's user), `type` = kind,
//! `message_id` a UUIDv7 and `content_type` `application/json`.

use crate::ids::{InstanceId, MachineId, TenantId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The exchange agents publish to (`Config::agents_exchange` on the platform
/// side; both default to this name).
pub const EXCHANGE: &str = "gpumarket.agents";

/// The RabbitMQ user of a machine's agent for one token:
/// `agent-<machine_id>.<the first 16 hex digits of the token's SHA-256>`.
/// Each token generation is a user of its own, so retiring a token deletes
/// its user and closes every connection made with it, however young,
/// without touching the new token's (the catalog does the same sum over
/// the hash it stores, docs/host-agent.md).
pub fn username(machine_id: Uuid, token: &str) -> String {
    use sha2::{Digest, Sha256};
    let hash = hex::encode(Sha256::digest(token.as_bytes()));
    format!("agent-{machine_id}.{}", &hash[..16])
}

/// Whether `user` is a user of the machine's agent, of any token
/// generation: `agent-<machine_id>.<16 hex digits>`.
pub fn is_agent_of(user: &str, machine_id: Uuid) -> bool {
    user.strip_prefix(&format!("agent-{machine_id}."))
        .is_some_and(|g| g.len() == 16 && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The queue the platform sends a machine's commands to: `cmd.<machine_id>`,
/// a classic queue the agent declares on connect ([`command_queue_arguments`];
/// `crate::declare_command_queue`). It exists while the agent is connected
/// and for [`COMMAND_QUEUE_EXPIRES_MS`] after it left, so a command survives
/// a reconnect; a machine whose agent is gone has no queue, and a command to
/// it is returned unroutable ("machine <id> is not connected").
pub fn command_queue(machine_id: Uuid) -> String {
    format!("cmd.{machine_id}")
}

/// The machine's command queue before `cmd.<machine_id>`: a durable quorum
/// queue `host.<machine_id>` the catalog declared at registration. Named only
/// to delete it (granting access deletes it; so does removing the machine).
pub fn legacy_command_queue(machine_id: Uuid) -> String {
    format!("host.{machine_id}")
}

/// A command queue unused this long (no consumer, no redeclaration) is
/// deleted by the broker: an agent gone for longer leaves nothing behind.
pub const COMMAND_QUEUE_EXPIRES_MS: i64 = 10 * 60 * 1000;

/// A command waits in its queue at most this long (the provisioner also sets
/// its step timeout as each command's expiration; the shorter one wins).
pub const COMMAND_TTL_MS: i64 = 10 * 60 * 1000;

/// Commands one queue holds at most; one more is refused (`reject-publish`:
/// the publisher gets a nack, "command queue of machine <id> is full").
pub const COMMAND_QUEUE_MAX_LENGTH: i64 = 1000;

/// What an agent reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// On start: the GPUs, driver and CUDA version found.
    Inventory,
    /// Every interval: proof of life plus per-GPU utilisation.
    Heartbeat,
    /// On start: the result of the agent's checks of its GPUs.
    SelfTest,
    /// After each command from `cmd.<machine_id>`: how the step went.
    StepResult,
    /// While a long step runs (an image pull): how far it got.
    StepProgress,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Inventory => "inventory",
            Kind::Heartbeat => "heartbeat",
            Kind::SelfTest => "self_test",
            Kind::StepResult => "step_result",
            Kind::StepProgress => "step_progress",
        }
    }

    pub fn parse(word: &str) -> Option<Kind> {
        match word {
            "inventory" => Some(Kind::Inventory),
            "heartbeat" => Some(Kind::Heartbeat),
            "self_test" => Some(Kind::SelfTest),
            "step_result" => Some(Kind::StepResult),
            "step_progress" => Some(Kind::StepProgress),
            _ => None,
        }
    }
}

/// `agent.<machine_id>.<kind>`.
pub fn routing_key(machine_id: Uuid, kind: Kind) -> String {
    format!("agent.{machine_id}.{}", kind.as_str())
}

/// One GPU as the agent found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub index: u32,
    /// The device name NVML reports, e.g. `NVIDIA GeForce RTX 4090`.
    pub name: String,
    pub uuid: String,
    pub memory_total_mib: u64,
}

/// `agent.<id>.inventory`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryReport {
    pub machine_id: MachineId,
    pub sent_at: DateTime<Utc>,
    pub agent_version: String,
    /// True when the GPUs are simulated (no NVML).
    pub simulated: bool,
    pub gpus: Vec<GpuInfo>,
    /// The CUDA version the driver supports, `major.minor` (e.g. `12.4`).
    pub cuda_version: String,
    pub driver_version: String,
    /// What this agent can do beyond the first protocol ([`CAPABILITY_MIG`],
    /// [`CAPABILITY_GPU_INDICES`]); empty from agents that predate them.
    #[serde(default)]
    pub capabilities: Vec<String>,
}

/// The agent binds exactly the GPU indices a job names.
pub const CAPABILITY_GPU_INDICES: &str = "gpu_indices";
/// The agent creates, hands over and destroys MIG slices. The catalog sells
/// slices only on machines whose agent said so (an older agent would bind a
/// whole GPU for each slice).
pub const CAPABILITY_MIG: &str = "mig";

/// One GPU's live numbers in a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSample {
    pub index: u32,
    pub utilization_percent: u32,
    pub memory_used_mib: u64,
}

/// `agent.<id>.heartbeat`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatReport {
    pub machine_id: MachineId,
    pub sent_at: DateTime<Utc>,
    /// Counts up from 1 within one run of the agent.
    pub seq: u64,
    pub gpus: Vec<GpuSample>,
    /// Names this run of the agent (new at every start), so `(boot_id,
    /// seq)` names one heartbeat for good. Absent from agents that report
    /// no traffic.
    #[serde(default)]
    pub boot_id: Option<Uuid>,
    /// The network counters of the instances on the machine.
    #[serde(default)]
    pub instances: Vec<InstanceCounters>,
    /// Instances whose container stopped on its own (exited, OOM-killed,
    /// crash-looped) while the platform wants it running. Repeated in every
    /// heartbeat until the platform stops the instance, so none is lost to
    /// a reconnect or an agent restart.
    #[serde(default)]
    pub exited: Vec<InstanceExited>,
}

/// A rental's container that stopped being usable without being asked to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceExited {
    pub instance_id: InstanceId,
    /// The provisioning run (attempt) whose container it was.
    pub run: i32,
    /// The engine's exit code (137 after SIGKILL, e.g. an OOM kill).
    pub exit_code: i64,
    pub oom_killed: bool,
    /// When the engine saw the container stop: GPU billing for the run ends
    /// here.
    pub finished_at: DateTime<Utc>,
    /// For the renter: `the container exited with code 1`, `... was killed:
    /// out of memory`, with the last lines of its output.
    pub reason: String,
}

/// One instance's network counters in a heartbeat: bytes since its
/// container's network started counting. They only grow, except that a
/// restart of the container (or of whatever counts) starts them from zero.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceCounters {
    pub instance_id: InstanceId,
    /// Bytes the instance sent.
    pub tx_bytes: u64,
    /// Bytes the instance received.
    pub rx_bytes: u64,
    /// Bytes in the instance's `/workspace`, when measured (the engines'
    /// local volumes enforce no size, so the agent measures use instead;
    /// at most every `--disk-usage-seconds`, else absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_bytes: Option<u64>,
}

/// One check of a self-test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelfTestCheck {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

/// `agent.<id>.self_test`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelfTestReport {
    pub machine_id: MachineId,
    pub sent_at: DateTime<Utc>,
    /// All checks passed.
    pub passed: bool,
    /// The GPUs the test ran on (the catalog compares them with the machine's
    /// registered GPU count and VRAM).
    pub gpus: Vec<GpuInfo>,
    pub checks: Vec<SelfTestCheck>,
}

/// A command from a provisioning worker (the `agent` driver), read from the
/// machine's queue `cmd.<machine_id>`: carry out one step of a job. The
/// worker stops waiting at `deadline`; an agent that finds a command past its
/// deadline drops it unanswered (the step has been retried or given up).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentCommand {
    pub command_id: Uuid,
    pub machine_id: MachineId,
    /// `provision`, `deprovision` or `stop`.
    pub action: String,
    /// The step's name (`bind_gpus`, `wipe_volume`, `stop_instance`, ...).
    pub step: String,
    /// The job's command payload (the platform's `ProvisionInstance`,
    /// `DeprovisionInstance` or `StopInstance`).
    pub job: serde_json::Value,
    /// When the platform decided the job (a stop undoes only what was bound
    /// before it).
    pub issued_at: DateTime<Utc>,
    pub deadline: DateTime<Utc>,
}

/// `agent.<id>.step_result`: the answer to one [`AgentCommand`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepResult {
    pub command_id: Uuid,
    pub machine_id: MachineId,
    pub step: String,
    pub ok: bool,
    pub error: Option<String>,
    pub duration_ms: u64,
    pub sent_at: DateTime<Utc>,
    /// What the renter needs from a step that succeeded (the readiness check
    /// answers with the connection).
    #[serde(default)]
    pub detail: Option<StepDetail>,
}

/// What a step hands back beyond "done".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepDetail {
    /// How the renter logs in: the agent's SSH gateway.
    pub connection: Option<Connection>,
}

/// Where a renter reaches a running instance: the very type ordering stores
/// and the API shows, so the agent's answer is kept as it came (after
/// [`Connection::validate`]).
pub use crate::api::{Connection, PortMapping};

/// `agent.<id>.step_progress`: how far a running step got (pull progress).
/// Informational: sent at most about once a second, never required.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepProgress {
    pub command_id: Uuid,
    pub machine_id: MachineId,
    pub step: String,
    /// `pulled 120 MB of 900 MB`, bounded to 200 characters.
    pub message: String,
    pub sent_at: DateTime<Utc>,
}

/// What the agent reads of a provisioning command's job (the platform's
/// `ProvisionRun`: `ProvisionInstance` and its attempt). Fields the agent
/// does not use are ignored. Its `Debug` leaves the env values out.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RentalSpec {
    pub instance_id: InstanceId,
    pub tenant_id: TenantId,
    pub machine_id: MachineId,
    pub gpu_count: i32,
    pub machine_gpu_count: i32,
    /// The renter's image reference (`registry/name:tag`).
    pub image: String,
    /// The renter's public keys, `authorized_keys` style (one per line).
    pub ssh_public_key: Option<String>,
    /// Replaces the image's command when given.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Environment for the container. Secrets: never logged.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Container ports to publish on host ports.
    #[serde(default)]
    pub ports: Vec<u16>,
    /// The ordered disk, GiB (the `/workspace` volume).
    #[serde(default)]
    pub disk_gib: Option<i32>,
    /// The provisioning attempt (1 = the order's run; 0 from older platforms).
    #[serde(default)]
    pub attempt: i32,
    /// The GPUs the catalog allocated, by index; empty from older
    /// platforms (the agent then chooses).
    #[serde(default)]
    pub gpu_indices: Vec<u32>,
    /// The MIG slice to create and hand over instead of whole GPUs.
    #[serde(default)]
    pub mig: Option<crate::mig::MigSlice>,
}

impl std::fmt::Debug for RentalSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RentalSpec")
            .field("instance_id", &self.instance_id)
            .field("machine_id", &self.machine_id)
            .field("gpu_count", &self.gpu_count)
            .field("image", &self.image)
            .field("command", &self.command)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("ports", &self.ports)
            .field("disk_gib", &self.disk_gib)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// What the agent reads of a deprovisioning or stop command's job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRef {
    pub instance_id: InstanceId,
    pub machine_id: MachineId,
}

/// `12.4` → 12040 (NVML's encoding: major × 1000 + minor × 10).
pub fn cuda_version_code(version: &str) -> Option<i32> {
    let mut parts = version.trim().split('.');
    let major: i32 = parts.next()?.parse().ok()?;
    let minor: i32 = parts.next().unwrap_or("0").parse().ok()?;
    if !(1..=99).contains(&major) || !(0..=99).contains(&minor) {
        return None;
    }
    Some(major * 1000 + minor * 10)
}

/// 12040 → `12.4`.
pub fn cuda_version_string(code: i32) -> String {
    format!("{}.{}", code / 1000, (code % 1000) / 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_versions_round_trip_through_nvml_codes() {
        assert_eq!(cuda_version_code("12.4"), Some(12040));
        assert_eq!(cuda_version_code("11"), Some(11000));
        assert_eq!(cuda_version_code("12.x"), None);
        assert_eq!(cuda_version_string(12040), "12.4");
        assert_eq!(cuda_version_string(11080), "11.8");
    }

    #[test]
    fn command_queues_are_named_after_the_machine() {
        let id = Uuid::nil();
        assert_eq!(
            command_queue(id),
            "cmd.00000000-0000-0000-0000-000000000000"
        );
        assert_eq!(
            legacy_command_queue(id),
            "host.00000000-0000-0000-0000-000000000000"
        );
    }

    #[test]
    fn routing_keys_name_the_machine_and_kind() {
        let id = Uuid::nil();
        assert_eq!(
            routing_key(id, Kind::SelfTest),
            "agent.00000000-0000-0000-0000-000000000000.self_test"
        );
        for kind in [
            Kind::Inventory,
            Kind::Heartbeat,
            Kind::SelfTest,
            Kind::StepResult,
            Kind::StepProgress,
        ] {
            assert_eq!(Kind::parse(kind.as_str()), Some(kind));
        }
    }
}
