//! Message payloads. The routing key of an event is its `type`.

use crate::ids::{InstanceId, InvoiceId, MachineId, OrderId, StatementId, TenantId};
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::states::{
    InstanceEventKind, InstanceState, InvoiceStatus, JobKind, LifecycleRule, Meter, PayoutStatus,
    RuleAction, StepStatus,
};

pub const INSTANCE_RUNNING: &str = "ordering.instance.running";
pub const INSTANCE_STOPPED: &str = "ordering.instance.stopped";
pub const INSTANCE_FAILED: &str = "ordering.instance.failed";
pub const USAGE_RECORDED: &str = "metering.usage.recorded";
pub const PROVISION_INSTANCE: &str = "provisioner.jobs.provision";

/// Ordering says an instance became usable at `running_at` (T0). `run_seq`
/// counts the instance's runs (a stop and start makes a new run), so that
/// metering can pair each start with its stop whatever order they arrive in.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceRunning {
    pub instance_id: InstanceId,
    pub tenant_id: TenantId,
    pub host_tenant_id: TenantId,
    pub machine_id: MachineId,
    /// The rented GPU model (`H100_SXM`); empty in events from before it was
    /// carried.
    #[serde(default)]
    pub gpu_model: String,
    pub gpu_count: i32,
    pub rental_type: crate::states::RentalType,
    pub price_per_gpu_hour: Decimal,
    pub currency: String,
    pub run_seq: i32,
    pub running_at: DateTime<Utc>,
}

/// Ordering says the instance's GPUs stopped being billable at `stopped_at` (T1).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceStopped {
    pub instance_id: InstanceId,
    pub tenant_id: TenantId,
    pub run_seq: i32,
    pub stopped_at: DateTime<Utc>,
    pub reason: String,
}

/// Ordering says the instance failed before it ran: nothing is billed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceFailed {
    pub instance_id: InstanceId,
    pub tenant_id: TenantId,
    pub reason: String,
}

/// Metering closed a usage interval: whole seconds between the two instants.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UsageRecorded {
    pub interval_id: Uuid,
    pub instance_id: InstanceId,
    pub tenant_id: TenantId,
    pub host_tenant_id: TenantId,
    pub meter: Meter,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
    pub seconds: i64,
    /// Price of the whole rental per hour (GPU price × GPU count).
    pub price_per_hour: Decimal,
    pub currency: String,
    /// A running interval is settled in segments: this one covers seconds
    /// `[offset_seconds, offset_seconds + seconds)` of the interval (so
    /// `started_at`/`ended_at` are the segment's). Negative `seconds` is a
    /// correction: a settlement ran ahead of a stop that had already
    /// happened. Rated cumulatively, the segments of an interval add up to
    /// exactly the rating of its whole.
    #[serde(default)]
    pub offset_seconds: i64,
    /// The machine and GPU model the usage ran on, for dashboards and host
    /// statements (absent in events from before they were carried).
    #[serde(default)]
    pub machine_id: Option<MachineId>,
    #[serde(default)]
    pub gpu_model: Option<String>,
}

pub const INSTANCE_DOWNTIME: &str = "ordering.instance.downtime";

/// A running rental's host went silent and the outage is over (the host is
/// back, or the renter destroyed the instance): billing stopped at the last
/// good heartbeat (`down_from`), and the renter is owed a credit for the
/// downtime, charged to the host's earnings. The heartbeat gap
/// `[down_from, down_until)` is the evidence (the catalog records it too).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceDowntime {
    pub instance_id: InstanceId,
    pub tenant_id: TenantId,
    pub host_tenant_id: TenantId,
    pub machine_id: MachineId,
    /// The run the outage interrupted.
    pub run_seq: i32,
    pub down_from: DateTime<Utc>,
    pub down_until: DateTime<Utc>,
    /// Whole seconds of downtime, `floor(down_until − down_from)`.
    pub seconds: i64,
    /// The rental's all-in GPU rate per hour (price × GPU count).
    pub price_per_hour: Decimal,
    pub currency: String,
    /// `host_back` or `destroyed`.
    pub ended_by: String,
}

pub const BALANCE_EXHAUSTED: &str = "billing.balance.exhausted";

/// A usage charge took a renter's prepaid balance below zero: ordering stops
/// the tenant's running instances (the charge itself stands: the usage
/// happened).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BalanceExhausted {
    pub tenant_id: TenantId,
    pub balance: Decimal,
    pub currency: String,
    pub at: DateTime<Utc>,
    /// The event's number within its resource, the renter's balance, [`resource::tenant`]: from 1,
    /// increasing in the order the changes committed (0 in events from
    /// before it was carried).
    #[serde(default)]
    pub sequence: i64,
}

/// Command to the provisioning workers: make this instance user-ready.
/// Its `Debug` leaves the env values out (they are the renter's secrets).
#[derive(Clone, Serialize, Deserialize, PartialEq)]
pub struct ProvisionInstance {
    pub instance_id: InstanceId,
    pub order_id: OrderId,
    pub tenant_id: TenantId,
    pub machine_id: MachineId,
    pub gpu_count: i32,
    /// GPUs the machine has, so a driver can check the indices it binds.
    pub machine_gpu_count: i32,
    pub image: String,
    /// `authorized_keys` text: one key per line.
    pub ssh_public_key: Option<String>,
    /// Replaces the image's command when given.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// The container's environment. Secrets: never logged.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Container ports to publish on host ports.
    #[serde(default)]
    pub ports: Vec<u16>,
    /// The ordered disk, GiB (the `/workspace` volume).
    #[serde(default)]
    pub disk_gib: Option<i32>,
    /// The GPUs the catalog allocated, by index: the driver binds exactly
    /// these. Empty from an earlier release: the driver chooses.
    #[serde(default)]
    pub gpu_indices: Vec<u32>,
    /// The MIG slice to create and hand over instead of whole GPUs.
    #[serde(default)]
    pub mig: Option<crate::mig::MigSlice>,
}

impl std::fmt::Debug for ProvisionInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProvisionInstance")
            .field("instance_id", &self.instance_id)
            .field("order_id", &self.order_id)
            .field("tenant_id", &self.tenant_id)
            .field("machine_id", &self.machine_id)
            .field("gpu_count", &self.gpu_count)
            .field("machine_gpu_count", &self.machine_gpu_count)
            .field("image", &self.image)
            .field("ssh_public_key", &self.ssh_public_key.is_some())
            .field("command", &self.command)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("ports", &self.ports)
            .field("disk_gib", &self.disk_gib)
            .field("gpu_indices", &self.gpu_indices)
            .field("mig", &self.mig)
            .finish()
    }
}

pub const STOP_INSTANCE: &str = "provisioner.jobs.stop";

/// Command to the provisioning workers: unbind a stopped instance's GPUs and
/// container; its volume stays.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StopInstance {
    pub instance_id: InstanceId,
    pub machine_id: MachineId,
}

/// A provisioning command for one attempt of an instance, published under
/// [`PROVISION_INSTANCE`] when a stopped instance is started again. `attempt`
/// numbers the instance's provisioning attempts (1 is the order's, 2 the
/// first start after a stop); a plain [`ProvisionInstance`] decodes as this
/// with `attempt` 0, so the worker can key its job per attempt.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProvisionRun {
    #[serde(flatten)]
    pub instance: ProvisionInstance,
    /// Left out at 0 (the order's own command), so that command's body is
    /// exactly a [`ProvisionInstance`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempt: i32,
    /// The instance has never run: this attempt re-places an order whose
    /// first run failed on another machine. Like the order's own attempt,
    /// a dead one leaves nothing of the renter's behind (the worker cleans
    /// up); a dead start after a stop keeps the renter's disk.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub never_ran: bool,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// The order's own provisioning command (attempt 0 on the wire: absent).
impl From<ProvisionInstance> for ProvisionRun {
    fn from(instance: ProvisionInstance) -> Self {
        Self {
            instance,
            attempt: 0,
            never_ran: false,
        }
    }
}

pub const DEPROVISION_INSTANCE: &str = "provisioner.jobs.deprovision";

/// Command to the provisioning workers: take everything of a destroyed
/// instance off its machine (credentials, network, tenant data, container,
/// GPU bindings) and validate that nothing is left.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeprovisionInstance {
    pub instance_id: InstanceId,
    pub machine_id: MachineId,
    pub tenant_id: TenantId,
}

/// Every change an instance goes through, as the renter sees it: state
/// transitions (from ordering) and provisioning steps (from the workers).
/// `instanceEvents` streams these; `seq` orders one instance's events as
/// ordering recorded them (0 for worker step events, which carry `at`).
pub const INSTANCE_EVENT: &str = "ordering.instance.event";
pub const PROVISIONING_STEP: &str = "provisioner.instance.step";

/// One provisioning or deprovisioning step of a worker job.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProvisioningStep {
    pub instance_id: InstanceId,
    /// `provision`, `provision:N` (a start after a stop), `deprovision`,
    /// `cleanup[:N]` or `stop:<command id>`.
    pub job_kind: JobKind,
    pub step: String,
    /// `started`, `finished`, `failed` or `progress` (a long step's
    /// report of how far it got, in `detail`).
    pub status: StepStatus,
    pub attempt: i32,
    pub duration_ms: Option<i64>,
    pub error: Option<String>,
    pub at: DateTime<Utc>,
    /// A `progress` event's message (`pulled 120 MB of 900 MB`), at most
    /// [`MAX_PROGRESS_DETAIL`] characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The bound on [`ProvisioningStep::detail`].
pub const MAX_PROGRESS_DETAIL: usize = 200;

pub const BOOKINGS_CANCELLED: &str = "catalog.bookings.cancelled";

/// The catalog cancelled bookings because their machine left the market
/// (unlisted or deleted by its host): ordering cancels the reservations and
/// has billing refund them with the host's penalty. Sent in the transaction
/// that gave the GPU time back.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BookingsCancelled {
    pub machine_id: MachineId,
    pub host_tenant_id: TenantId,
    pub reservation_ids: Vec<crate::ids::ReservationId>,
    pub cancelled_at: DateTime<Utc>,
    pub reason: String,
}

pub const ALLOCATION_ENDING_SOON: &str = "catalog.allocation.ending_soon";

/// An allocation's GPUs are booked from `ends_at` on (a reserved block), or
/// its block ends then: the instance is stopped at that instant. Sent once,
/// [`crate::reservations::WARNING_SECONDS`] ahead (or at once when booked
/// later than that).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AllocationEndingSoon {
    pub allocation_key: Uuid,
    pub instance_id: Option<InstanceId>,
    pub tenant_id: TenantId,
    pub machine_id: MachineId,
    pub ends_at: DateTime<Utc>,
    pub reason: String,
}

pub const ALLOCATION_CONTINUED: &str = "catalog.allocation.continued";

/// An allocation inside a reserved block that asked to go on at the block's
/// end ([`crate::reservations::WhenBlockEnds::OnDemand`]) became an
/// on-demand rental of the same GPUs at `continued_at`, in the transaction
/// that gave the block's GPUs back: from that instant the renter pays
/// `price_per_gpu_hour` (the machine's on-demand price then). Ordering
/// closes the run at `continued_at` and opens the next at that price.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AllocationContinued {
    pub allocation_key: Uuid,
    pub instance_id: Option<InstanceId>,
    pub tenant_id: TenantId,
    pub machine_id: MachineId,
    pub reservation_id: crate::ids::ReservationId,
    pub gpu_count: i32,
    pub price_per_gpu_hour: Decimal,
    pub currency: String,
    pub continued_at: DateTime<Utc>,
}

pub const ALLOCATION_PREEMPTED: &str = "catalog.allocation.preempted";

/// The catalog took an interruptible allocation's GPUs back for an order of
/// higher priority (on-demand, or a higher bid), in the transaction that gave
/// them to that order. `preempted_at` is when the GPUs stopped being the
/// renter's: billing ends there. `notice_seconds` is 0: the GPUs are gone at
/// once (a graceful notice window is a documented follow-up).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AllocationPreempted {
    /// The holding key of the preempted allocation (an order id, or a start
    /// attempt's key).
    pub allocation_key: Uuid,
    /// The instance, when the allocation was made for an existing one.
    pub instance_id: Option<InstanceId>,
    pub tenant_id: TenantId,
    pub machine_id: MachineId,
    pub gpu_count: i32,
    pub bid_per_gpu_hour: Decimal,
    pub preempted_at: DateTime<Utc>,
    pub notice_seconds: i64,
    pub reason: String,
    /// The holding key of the order that got the GPUs.
    pub preempted_by: Uuid,
}

/// One recorded change of an instance, published under [`INSTANCE_EVENT`]
/// in the transaction that records it, and what the history of
/// `instanceEvents` replays. `kind` is `state_changed`, `provisioning_step`,
/// `rule_warning`, `rule_enforced` or `rules_changed`; `seq` numbers one
/// instance's events (from 1) in the order ordering recorded them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceEvent {
    pub instance_id: InstanceId,
    pub tenant_id: TenantId,
    pub seq: i32,
    pub kind: InstanceEventKind,
    pub from_state: Option<InstanceState>,
    pub to_state: Option<InstanceState>,
    pub reason: Option<String>,
    /// Set on `provisioning_step` events.
    pub step: Option<ProvisioningStep>,
    /// Set on `rule_warning` and `rule_enforced` events.
    pub rule: Option<RuleNotice>,
    /// The instance as it was after the event, with its rental type and rates.
    pub instance: crate::api::Instance,
    pub at: DateTime<Utc>,
}

/// A lifecycle rule that is about to act (or acts): which rule, what it does
/// and when.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RuleNotice {
    /// `max_duration`, `idle` or `auto_destroy`.
    pub rule: LifecycleRule,
    /// `stop` or `destroy`.
    pub action: RuleAction,
    pub due_at: DateTime<Utc>,
}

pub const RUNWAY_LOW: &str = "billing.runway.low";

/// A renter's balance covers less than the warning time
/// (`GPUMARKET_RUNWAY_WARNING_SECONDS`) at what its running rentals burn
/// now. Announced once per crossing: the warning clears when the runway
/// recovers (a top-up, or rentals stopped), and a later drop announces again.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunwayLow {
    pub tenant_id: TenantId,
    pub balance: Decimal,
    pub currency: String,
    pub burn_rate_per_hour: Decimal,
    /// Whole seconds the balance lasts at that burn (0 when it is gone).
    pub runway_seconds: i64,
    pub warn_below_seconds: i64,
    pub at: DateTime<Utc>,
    /// The event's number within its resource, the renter's balance, [`resource::tenant`]: from 1,
    /// increasing in the order the changes committed (0 in events from
    /// before it was carried).
    #[serde(default)]
    pub sequence: i64,
}

pub const SPEND_CAP_REACHED: &str = "billing.balance.cap_reached";

/// A renter's usage charges this calendar month (UTC) reached its monthly
/// budget (the quota's `monthlyBudget`): ordering stops the tenant's running
/// instances, as for an exhausted balance. The routing key sits under
/// `billing.balance.*` so ordering's existing binding receives it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpendCapReached {
    pub tenant_id: TenantId,
    /// First day of the month (UTC) the cap applies to.
    pub month: chrono::NaiveDate,
    pub spent: Decimal,
    pub monthly_cap: Decimal,
    pub currency: String,
    pub at: DateTime<Utc>,
    /// The event's number within its resource, the renter's balance, [`resource::tenant`]: from 1,
    /// increasing in the order the changes committed (0 in events from
    /// before it was carried).
    #[serde(default)]
    pub sequence: i64,
}

pub const INSTANCE_STORAGE_STARTED: &str = "ordering.instance.storage_started";
pub const INSTANCE_STORAGE_ENDED: &str = "ordering.instance.storage_ended";

/// Ordering created an instance: its disk exists (and bills) from
/// `started_at`, whether the instance runs or is stopped, until
/// [`InstanceStorageEnded`]. Carries the rental's storage and bandwidth price
/// snapshots, which metering rates the instance's disk and traffic at.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceStorageStarted {
    pub instance_id: InstanceId,
    pub tenant_id: TenantId,
    pub host_tenant_id: TenantId,
    pub machine_id: MachineId,
    pub gpu_model: String,
    pub disk_gib: i32,
    pub storage_price_per_gb_month: Decimal,
    pub bandwidth_up_price_per_tb: Decimal,
    pub bandwidth_down_price_per_tb: Decimal,
    pub currency: String,
    pub started_at: DateTime<Utc>,
}

/// Ordering says the instance's disk stopped being billable at `ended_at`:
/// the renter destroyed it (the destroy request, not the end of the cleanup),
/// or it failed before it ever ran. It repeats the start's fields, so the
/// end alone closes the interval whichever event metering sees first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceStorageEnded {
    #[serde(flatten)]
    pub storage: InstanceStorageStarted,
    pub ended_at: DateTime<Utc>,
    /// `destroyed` or `failed`.
    pub reason: String,
}

pub const INSTANCE_TRAFFIC: &str = "catalog.instance.traffic";

/// One sample of an instance's network counters, as its host's agent read
/// them and the catalog accepted them (the agent is the machine's). That the
/// instance runs on that machine, and that the counters fit the machine's
/// declared bandwidth, metering checks (docs/metering.md). The counters are cumulative
/// since `boot_id` began and may reset (a container restart): metering turns
/// samples into bytes, see docs/metering.md. `(instance_id, boot_id, seq)`
/// names the sample: a repeat is the same sample.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceTraffic {
    pub instance_id: InstanceId,
    pub machine_id: MachineId,
    /// Changes whenever the agent restarts.
    pub boot_id: Uuid,
    /// The heartbeat's `seq` within `boot_id`.
    pub seq: i64,
    pub sent_at: DateTime<Utc>,
    /// Bytes the instance sent (upload).
    pub tx_bytes: i64,
    /// Bytes the instance received (download).
    pub rx_bytes: i64,
    /// The reporting machine's declared upload bandwidth (Mbit/s), which
    /// bounds how fast `tx_bytes` may grow (docs/metering.md); absent in
    /// samples from before the bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_mbps: Option<i32>,
    /// The declared download bandwidth (Mbit/s), bounding `rx_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download_mbps: Option<i32>,
}

/// The payload of `metering.usage.recorded` as metering writes it since the
/// storage and bandwidth meters: a [`UsageRecorded`] and what rates a meter
/// other than `gpu`. The extra fields are optional, so a plain
/// `UsageRecorded` (older messages) decodes as this, and this decodes as a
/// `UsageRecorded` (the extra fields are ignored).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MeteredUsage {
    #[serde(flatten)]
    pub usage: UsageRecorded,
    /// What `seconds` and `offset_seconds` count: `second` when absent (the
    /// `gpu` and `storage` meters), `byte` for `bandwidth_up`/`bandwidth_down`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// The meter's list price in its own unit, which billing rates at
    /// exactly: per GB-month of `disk_gib` (storage), per TB of 10^12 bytes
    /// (bandwidth). Absent for `gpu`, rated at `price_per_hour`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_price: Option<Decimal>,
    /// The disk a `storage` segment is for, in GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_gib: Option<i32>,
}

/// Usage of a meter rated per hour (GPU time, older messages): no unit,
/// no unit price, no disk.
impl From<UsageRecorded> for MeteredUsage {
    fn from(usage: UsageRecorded) -> Self {
        Self {
            usage,
            unit: None,
            unit_price: None,
            disk_gib: None,
        }
    }
}

pub const INSTANCE_EXITED: &str = "catalog.instance.exited";

/// The bound on [`InstanceExited::reason`], in characters.
pub const MAX_EXIT_REASON: usize = 500;

/// A machine's agent reported that an instance's container stopped on its
/// own (exited, OOM-killed, crash-looped), as the catalog accepted it from
/// the machine's heartbeat. Ordering checks that the instance runs on that
/// machine in that run before it acts; agents repeat the report in every
/// heartbeat, so the same exit arrives many times.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceExited {
    pub machine_id: MachineId,
    pub instance_id: InstanceId,
    /// The provisioning run (attempt) whose container it was.
    pub run: i32,
    pub exit_code: i64,
    pub oom_killed: bool,
    /// When the engine saw the container stop.
    pub finished_at: DateTime<Utc>,
    /// For the renter, at most [`MAX_EXIT_REASON`] characters.
    pub reason: String,
}

pub const INSTANCE_DISK_USAGE: &str = "catalog.instance.disk_usage";

/// How much of its disk a rental's `/workspace` holds, measured by the
/// machine's agent (the engines' local volumes enforce no size) and vouched
/// for by the catalog. Ordering keeps the latest measurement of an instance
/// on the reporting machine.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceDiskUsage {
    pub machine_id: MachineId,
    pub instance_id: InstanceId,
    pub bytes: i64,
    /// The heartbeat's `sent_at`.
    pub measured_at: DateTime<Utc>,
}

pub const TOP_UP_SUCCEEDED: &str = "billing.top_up.succeeded";

/// A renter's card top-up was credited to its prepaid balance, once (in
/// the transaction of the ledger posting).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopUpSucceeded {
    pub tenant_id: TenantId,
    pub top_up_id: Uuid,
    /// What Stripe collected, in the settlement currency.
    pub amount: Decimal,
    pub currency: String,
    pub at: DateTime<Utc>,
    /// The event's number within its resource, the renter's balance, [`resource::tenant`]: from 1,
    /// increasing in the order the changes committed (0 in events from
    /// before it was carried).
    #[serde(default)]
    pub sequence: i64,
}

pub const PAYOUT_PAID: &str = "billing.payout.paid";
pub const PAYOUT_FAILED: &str = "billing.payout.failed";

/// A host's payout left `pending`: paid (the transfer was made and posted)
/// or failed (Stripe refused it; the earnings stay on the account).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PayoutSettled {
    pub host_tenant_id: TenantId,
    pub payout_id: Uuid,
    pub amount: Decimal,
    pub currency: String,
    /// `paid` or `failed`.
    pub status: PayoutStatus,
    pub stripe_transfer_id: Option<String>,
    pub failure_reason: Option<String>,
    pub at: DateTime<Utc>,
    /// The event's number within its resource, the payout, [`resource::payout`]: from 1,
    /// increasing in the order the changes committed (0 in events from
    /// before it was carried).
    #[serde(default)]
    pub sequence: i64,
}

pub const MACHINE_RENTED: &str = "catalog.machine.rented";
pub const MACHINE_RELEASED: &str = "catalog.machine.released";

/// GPUs of a host's machine were allocated to a rental, or given back (the
/// rental ended, or was preempted by a higher-priority order), announced in
/// the transaction that changed the machine's allocation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MachineRental {
    pub host_tenant_id: TenantId,
    pub machine_id: MachineId,
    /// The allocation (one per rental order); pairs a release with its rent.
    pub allocation_id: Uuid,
    pub gpu_count: i32,
    /// On a release: whether it was a preemption.
    pub preempted: bool,
    pub at: DateTime<Utc>,
    /// The event's number within its resource, the machine, [`resource::machine`] (shared with its liveness events): from 1,
    /// increasing in the order the changes committed (0 in events from
    /// before it was carried).
    #[serde(default)]
    pub sequence: i64,
    /// A MIG slice rented or given back (then `gpu_count` is 1 and the slice
    /// says how much of which GPU); None for whole GPUs.
    #[serde(default)]
    pub mig: Option<crate::mig::MigSlice>,
}

pub const MACHINE_OFFLINE: &str = "catalog.machine.offline";
pub const MACHINE_ONLINE: &str = "catalog.machine.online";

/// A listed machine went silent past the heartbeat grace (the catalog's
/// offline sweeper opened its heartbeat gap), or heartbeats again after
/// such a silence (its open gap closed or, when the heartbeat was only
/// late, dropped).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MachineLiveness {
    pub host_tenant_id: TenantId,
    pub machine_id: MachineId,
    pub online: bool,
    /// The last heartbeat before the silence (or the listing's start).
    pub silent_since: DateTime<Utc>,
    /// On `online`: the heartbeat that ended the silence.
    pub back_at: Option<DateTime<Utc>>,
    pub at: DateTime<Utc>,
    /// The event's number within its resource, the machine, [`resource::machine`] (shared with its rental events): from 1,
    /// increasing in the order the changes committed (0 in events from
    /// before it was carried).
    #[serde(default)]
    pub sequence: i64,
}

pub const INVOICE_FINALIZED: &str = "billing.invoice.finalized";
pub const INVOICE_PAID: &str = "billing.invoice.paid";

/// A renter's invoice was finalized (numbered; `status` is `paid` when the
/// prepaid balance covered it, `finalized` while it is open), or became
/// paid (at finalization, by a credit or top-up, or by an operator).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InvoiceChanged {
    pub tenant_id: TenantId,
    pub invoice_id: InvoiceId,
    pub number: i64,
    pub total: Decimal,
    pub currency: String,
    pub status: InvoiceStatus,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub at: DateTime<Utc>,
    /// The event's number within its resource, the invoice, [`resource::invoice`] (finalized 1, paid 2, or both in one run: 1 then 2): from 1,
    /// increasing in the order the changes committed (0 in events from
    /// before it was carried).
    #[serde(default)]
    pub sequence: i64,
}

pub const STATEMENT_FINALIZED: &str = "billing.statement.finalized";

/// A host's statement of a period was finalized (numbered, never changes).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StatementFinalized {
    pub host_tenant_id: TenantId,
    pub statement_id: StatementId,
    pub number: i64,
    /// What the host's machines earned in the period, net of fees and credits.
    pub earnings: Decimal,
    pub currency: String,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub at: DateTime<Utc>,
    /// The event's number within its resource, the statement, [`resource::statement`]: from 1,
    /// increasing in the order the changes committed (0 in events from
    /// before it was carried).
    #[serde(default)]
    pub sequence: i64,
}

pub const HOST_VERIFICATION: &str = "catalog.host.verification";

/// An operator set a host's verification (`verified`, `unverified` or
/// `suspended`, with the reason), announced in the same transaction.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HostVerification {
    pub host_tenant_id: TenantId,
    pub verification: String,
    pub reason: String,
    pub at: DateTime<Utc>,
    /// The event's number within its resource, the host, [`resource::host`]: from 1,
    /// increasing in the order the changes committed (0 in events from
    /// before it was carried).
    #[serde(default)]
    pub sequence: i64,
}

/// The resources billing's and the catalog's webhook-facing events are
/// numbered by (their `sequence`, platform::sequence): one counter per
/// key, so a receiver orders the events of one key by it.
pub mod resource {
    use uuid::Uuid;

    /// A renter's prepaid balance and spend: [`super::RunwayLow`],
    /// [`super::BalanceExhausted`], [`super::SpendCapReached`] and
    /// [`super::TopUpSucceeded`].
    pub fn tenant(tenant_id: Uuid) -> String {
        format!("tenant:{tenant_id}")
    }

    /// One invoice: [`super::InvoiceChanged`].
    pub fn invoice(invoice_id: Uuid) -> String {
        format!("invoice:{invoice_id}")
    }

    /// One host statement: [`super::StatementFinalized`].
    pub fn statement(statement_id: Uuid) -> String {
        format!("statement:{statement_id}")
    }

    /// One payout: [`super::PayoutSettled`].
    pub fn payout(payout_id: Uuid) -> String {
        format!("payout:{payout_id}")
    }

    /// One machine, its liveness and its rentals together:
    /// [`super::MachineLiveness`] and [`super::MachineRental`].
    pub fn machine(machine_id: Uuid) -> String {
        format!("machine:{machine_id}")
    }

    /// A host's verification: [`super::HostVerification`].
    pub fn host(host_tenant_id: Uuid) -> String {
        format!("host:{host_tenant_id}")
    }

    /// A webhook endpoint (the webhook service's own `endpoint.disabled`).
    pub fn endpoint(endpoint_id: Uuid) -> String {
        format!("endpoint:{endpoint_id}")
    }
}

/// Every kind above with the payload type it carries: what
/// [`crate::Envelope::new`] takes, so that no kind is ever sent with
/// another kind's payload. The names stay plain `&str` constants above for
/// routing keys and `match` arms.
pub mod kinds {
    use super::*;
    use crate::Kind;

    pub const INSTANCE_RUNNING: Kind<InstanceRunning> = Kind::new(super::INSTANCE_RUNNING);
    pub const INSTANCE_STOPPED: Kind<InstanceStopped> = Kind::new(super::INSTANCE_STOPPED);
    pub const INSTANCE_FAILED: Kind<InstanceFailed> = Kind::new(super::INSTANCE_FAILED);
    pub const USAGE_RECORDED: Kind<MeteredUsage> = Kind::new(super::USAGE_RECORDED);
    pub const PROVISION_INSTANCE: Kind<ProvisionRun> = Kind::new(super::PROVISION_INSTANCE);
    pub const INSTANCE_DOWNTIME: Kind<InstanceDowntime> = Kind::new(super::INSTANCE_DOWNTIME);
    pub const BALANCE_EXHAUSTED: Kind<BalanceExhausted> = Kind::new(super::BALANCE_EXHAUSTED);
    pub const STOP_INSTANCE: Kind<StopInstance> = Kind::new(super::STOP_INSTANCE);
    pub const DEPROVISION_INSTANCE: Kind<DeprovisionInstance> =
        Kind::new(super::DEPROVISION_INSTANCE);
    pub const INSTANCE_EVENT: Kind<InstanceEvent> = Kind::new(super::INSTANCE_EVENT);
    pub const PROVISIONING_STEP: Kind<ProvisioningStep> = Kind::new(super::PROVISIONING_STEP);
    pub const ALLOCATION_PREEMPTED: Kind<AllocationPreempted> =
        Kind::new(super::ALLOCATION_PREEMPTED);
    pub const BOOKINGS_CANCELLED: Kind<BookingsCancelled> = Kind::new(super::BOOKINGS_CANCELLED);
    pub const ALLOCATION_ENDING_SOON: Kind<AllocationEndingSoon> =
        Kind::new(super::ALLOCATION_ENDING_SOON);
    pub const ALLOCATION_CONTINUED: Kind<AllocationContinued> =
        Kind::new(super::ALLOCATION_CONTINUED);
    pub const RUNWAY_LOW: Kind<RunwayLow> = Kind::new(super::RUNWAY_LOW);
    pub const SPEND_CAP_REACHED: Kind<SpendCapReached> = Kind::new(super::SPEND_CAP_REACHED);
    pub const INSTANCE_STORAGE_STARTED: Kind<InstanceStorageStarted> =
        Kind::new(super::INSTANCE_STORAGE_STARTED);
    pub const INSTANCE_STORAGE_ENDED: Kind<InstanceStorageEnded> =
        Kind::new(super::INSTANCE_STORAGE_ENDED);
    pub const INSTANCE_TRAFFIC: Kind<InstanceTraffic> = Kind::new(super::INSTANCE_TRAFFIC);
    pub const INSTANCE_EXITED: Kind<InstanceExited> = Kind::new(super::INSTANCE_EXITED);
    pub const INSTANCE_DISK_USAGE: Kind<InstanceDiskUsage> = Kind::new(super::INSTANCE_DISK_USAGE);
    pub const TOP_UP_SUCCEEDED: Kind<TopUpSucceeded> = Kind::new(super::TOP_UP_SUCCEEDED);
    pub const PAYOUT_PAID: Kind<PayoutSettled> = Kind::new(super::PAYOUT_PAID);
    pub const PAYOUT_FAILED: Kind<PayoutSettled> = Kind::new(super::PAYOUT_FAILED);
    pub const MACHINE_RENTED: Kind<MachineRental> = Kind::new(super::MACHINE_RENTED);
    pub const MACHINE_RELEASED: Kind<MachineRental> = Kind::new(super::MACHINE_RELEASED);
    pub const MACHINE_OFFLINE: Kind<MachineLiveness> = Kind::new(super::MACHINE_OFFLINE);
    pub const MACHINE_ONLINE: Kind<MachineLiveness> = Kind::new(super::MACHINE_ONLINE);
    pub const INVOICE_FINALIZED: Kind<InvoiceChanged> = Kind::new(super::INVOICE_FINALIZED);
    pub const INVOICE_PAID: Kind<InvoiceChanged> = Kind::new(super::INVOICE_PAID);
    pub const STATEMENT_FINALIZED: Kind<StatementFinalized> = Kind::new(super::STATEMENT_FINALIZED);
    pub const HOST_VERIFICATION: Kind<HostVerification> = Kind::new(super::HOST_VERIFICATION);
}
