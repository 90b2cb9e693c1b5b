//! The states and kinds that cross a process, as enums (issue 19): an
//! instance's lifecycle state and what its renter may do in it, the status of
//! invoices, statements, payouts and provisioning steps, the kinds of an
//! instance's events, lifecycle rules and their actions, meters, and the
//! provisioner's job kinds. On the wire each is the same snake_case text as
//! before (`"host_lost"`), so no message or body changes shape; in code a
//! state is matched, never compared as a string. A text that names none of
//! them does not parse: a message carrying one is refused, never guessed.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A text that names no value of the enum it was parsed as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what}: {text:?}")]
pub struct UnknownName {
    pub what: &'static str,
    pub text: String,
}

/// Defines a wire enum of unit variants: serde as snake_case text, `ALL`,
/// `as_str`, `parse`, `Display` and `FromStr`, all with the same names.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $name:ident, $what:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[cfg_attr(feature = "diesel", derive(diesel::AsExpression, diesel::FromSqlRow))]
        #[cfg_attr(feature = "diesel", diesel(sql_type = diesel::sql_types::Text))]
        #[cfg_attr(feature = "graphql", derive(async_graphql::Enum))]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $text)] $variant, )+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;

            fn from_str(text: &str) -> Result<Self, UnknownName> {
                Self::parse(text).ok_or_else(|| UnknownName {
                    what: $what,
                    text: text.to_owned(),
                })
            }
        }

        text_column!($name);
    };
}

/// Stores a wire enum in a `TEXT` column (checked by the database against
/// the same names) under its wire name; a row holding any other text fails
/// to load instead of being guessed.
macro_rules! text_column {
    ($name:ident) => {
        #[cfg(feature = "diesel")]
        impl diesel::deserialize::FromSql<diesel::sql_types::Text, diesel::pg::Pg> for $name {
            fn from_sql(bytes: diesel::pg::PgValue<'_>) -> diesel::deserialize::Result<Self> {
                let text = <String as diesel::deserialize::FromSql<
                    diesel::sql_types::Text,
                    diesel::pg::Pg,
                >>::from_sql(bytes)?;
                Ok(text.parse::<$name>()?)
            }
        }

        #[cfg(feature = "diesel")]
        impl diesel::serialize::ToSql<diesel::sql_types::Text, diesel::pg::Pg> for $name {
            fn to_sql<'b>(
                &'b self,
                out: &mut diesel::serialize::Output<'b, '_, diesel::pg::Pg>,
            ) -> diesel::serialize::Result {
                use std::io::Write;
                out.write_all(self.to_string().as_bytes())?;
                Ok(diesel::serialize::IsNull::No)
            }
        }
    };
}

wire_enum! {
    /// An instance's lifecycle state (DESIGN section 4). Every transition
    /// ordering makes is checked against [`InstanceState::can_become`].
    InstanceState, "instance state" {
        Pending = "pending",
        Allocating = "allocating",
        Provisioning = "provisioning",
        Running = "running",
        Stopping = "stopping",
        Stopped = "stopped",
        Deprovisioning = "deprovisioning",
        Destroyed = "destroyed",
        Failed = "failed",
        HostLost = "host_lost",
        Preempted = "preempted",
    }
}

impl InstanceState {
    /// The legal transitions of DESIGN section 4.
    pub fn can_become(self, next: InstanceState) -> bool {
        use InstanceState::*;
        matches!(
            (self, next),
            (Pending, Allocating | Failed)
                | (Allocating, Provisioning | Failed)
                // Stopped: a start after a stop that failed to provision.
                // Preempted: the catalog gave the GPUs to a higher-priority order.
                // Provisioning again: a first run that failed re-placed on
                // another machine (a new attempt).
                | (Provisioning, Provisioning | Running | Failed | Deprovisioning | Stopped | Preempted)
                | (Running, Stopping | Deprovisioning | HostLost | Preempted)
                | (Stopping, Stopped)
                | (Stopped, Provisioning | Deprovisioning)
                | (Deprovisioning, Destroyed)
                // Preempted: its GPUs were taken back while the host was
                // silent (a block started or ended): it must not run again
                // on them when the host is back.
                | (HostLost, Running | Deprovisioning | Preempted)
                | (Preempted, Deprovisioning)
        )
    }

    /// No way out: the instance is gone for good.
    pub fn is_terminal(self) -> bool {
        matches!(self, InstanceState::Destroyed | InstanceState::Failed)
    }

    /// What a renter may ask for now, as the API reports it. Only actions the
    /// service implements are listed.
    pub fn allowed_actions(self) -> Vec<InstanceAction> {
        use InstanceAction::*;
        match self {
            InstanceState::Running => vec![Stop, Destroy],
            InstanceState::Stopped => vec![Start, Destroy],
            // The GPUs are gone; the disk is still there until destroyed.
            InstanceState::Preempted => vec![Destroy],
            // Billing stopped at the last heartbeat; the renter may wait for
            // the host to come back (a new run) or give up on it.
            InstanceState::HostLost => vec![Destroy],
            // Cancels the order (or the start) while it is being set up.
            InstanceState::Provisioning => vec![Destroy],
            _ => Vec::new(),
        }
    }
}

wire_enum! {
    /// How GPUs are rented: at the on-demand price until the renter stops,
    /// or interruptible at a bid, preempted by any order of higher priority.
    RentalType, "rental type" {
        OnDemand = "on_demand",
        Interruptible = "interruptible",
    }
}

// `wire_enum!` derives no `Default` (only this enum has one).
#[allow(clippy::derivable_impls)]
impl Default for RentalType {
    fn default() -> Self {
        RentalType::OnDemand
    }
}

wire_enum! {
    /// What a renter may do to an instance (`allowedActions`).
    InstanceAction, "instance action" {
        Start = "start",
        Stop = "stop",
        Destroy = "destroy",
    }
}

wire_enum! {
    /// A renter's invoice: a `draft` is a preview and never stored;
    /// `finalized` may become `paid` or `void`, and nothing else changes.
    InvoiceStatus, "invoice status" {
        Draft = "draft",
        Finalized = "finalized",
        Paid = "paid",
        Void = "void",
    }
}

wire_enum! {
    /// A host's statement: a `draft` is a preview and never stored.
    StatementStatus, "statement status" {
        Draft = "draft",
        Finalized = "finalized",
    }
}

wire_enum! {
    /// A host's payout: `pending` until Stripe's transfer answered.
    PayoutStatus, "payout status" {
        Pending = "pending",
        Paid = "paid",
        Failed = "failed",
    }
}

wire_enum! {
    /// One report of a provisioning step: it `started`, `finished` or
    /// `failed`, or a long step reports `progress`.
    StepStatus, "step status" {
        Started = "started",
        Finished = "finished",
        Failed = "failed",
        Progress = "progress",
    }
}

wire_enum! {
    /// What one recorded change of an instance is (`instanceEvents`).
    InstanceEventKind, "instance event kind" {
        StateChanged = "state_changed",
        ProvisioningStep = "provisioning_step",
        RuleWarning = "rule_warning",
        RuleEnforced = "rule_enforced",
        RulesChanged = "rules_changed",
    }
}

wire_enum! {
    /// A renter's lifecycle rule of an instance.
    LifecycleRule, "lifecycle rule" {
        MaxDuration = "max_duration",
        Idle = "idle",
        AutoDestroy = "auto_destroy",
    }
}

wire_enum! {
    /// What a lifecycle rule does when it is due.
    RuleAction, "rule action" {
        Stop = "stop",
        Destroy = "destroy",
    }
}

wire_enum! {
    /// What usage is measured in (see [`crate::meters`] for units and
    /// prices).
    ///
    /// Declared in the order of their names, so that lines sorted by meter
    /// come in the same order from Rust and from SQL.
    Meter, "meter" {
        BandwidthDown = "bandwidth_down",
        BandwidthUp = "bandwidth_up",
        Gpu = "gpu",
        Storage = "storage",
    }
}

/// A provisioner job's kind, which is also part of the job's unique key and
/// of each step event (`provision`, `provision:2`, `deprovision`, `cleanup`,
/// `cleanup:3`, `stop:<command id>`). Parsed, never guessed: any other text
/// is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "diesel", derive(diesel::AsExpression, diesel::FromSqlRow))]
#[cfg_attr(feature = "diesel", diesel(sql_type = diesel::sql_types::Text))]
pub enum JobKind {
    /// A provisioning attempt: the order's first keeps the plain kind
    /// (`provision`), each start after a stop gets its own job and step
    /// log (`provision:<attempt>`).
    Provision(i32),
    /// The instance's destroy (`deprovision`).
    Deprovision,
    /// A dead never-run attempt's cleanup, one per attempt (`cleanup`,
    /// `cleanup:<attempt>`): a re-placed order's attempts ran on different
    /// machines.
    Cleanup(i32),
    /// One stop decision (`stop:<command id>`): an instance is stopped once
    /// per run.
    Stop(Uuid),
}

text_column!(JobKind);

/// What a job does, without its attempt or command id (the public API's
/// `ProvisioningStep.job`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "graphql", derive(async_graphql::Enum))]
pub enum JobType {
    Provision,
    Deprovision,
    Cleanup,
    Stop,
}

impl JobKind {
    pub fn parse(raw: &str) -> Option<Self> {
        // Attempt 1 is the plain kind, so `provision:1` is not a kind.
        let later = |n: &str| n.parse::<i32>().ok().filter(|n| *n >= 2);
        match raw.split_once(':') {
            None => match raw {
                "provision" => Some(Self::Provision(1)),
                "deprovision" => Some(Self::Deprovision),
                "cleanup" => Some(Self::Cleanup(1)),
                _ => None,
            },
            Some(("provision", n)) => later(n).map(Self::Provision),
            Some(("cleanup", n)) => later(n).map(Self::Cleanup),
            Some(("stop", id)) => Uuid::parse_str(id).ok().map(Self::Stop),
            Some(_) => None,
        }
    }

    pub fn job_type(self) -> JobType {
        match self {
            Self::Provision(_) => JobType::Provision,
            Self::Deprovision => JobType::Deprovision,
            Self::Cleanup(_) => JobType::Cleanup,
            Self::Stop(_) => JobType::Stop,
        }
    }
}

impl fmt::Display for JobKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Provision(attempt) if *attempt <= 1 => f.write_str("provision"),
            Self::Provision(attempt) => write!(f, "provision:{attempt}"),
            Self::Deprovision => f.write_str("deprovision"),
            Self::Cleanup(attempt) if *attempt <= 1 => f.write_str("cleanup"),
            Self::Cleanup(attempt) => write!(f, "cleanup:{attempt}"),
            Self::Stop(id) => write!(f, "stop:{id}"),
        }
    }
}

impl FromStr for JobKind {
    type Err = UnknownName;

    fn from_str(text: &str) -> Result<Self, UnknownName> {
        Self::parse(text).ok_or_else(|| UnknownName {
            what: "job kind",
            text: text.to_owned(),
        })
    }
}

impl Serialize for JobKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for JobKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn serde_matches_names<T>(all: &[T])
    where
        T: Serialize + for<'de> Deserialize<'de> + fmt::Display + PartialEq + fmt::Debug,
    {
        for value in all {
            let json = serde_json::to_string(value).unwrap();
            assert_eq!(json, format!("\"{value}\""));
            assert_eq!(&serde_json::from_str::<T>(&json).unwrap(), value);
        }
    }

    #[test]
    fn wire_names_round_trip() {
        serde_matches_names(InstanceState::ALL);
        serde_matches_names(InstanceAction::ALL);
        serde_matches_names(InvoiceStatus::ALL);
        serde_matches_names(StatementStatus::ALL);
        serde_matches_names(PayoutStatus::ALL);
        serde_matches_names(StepStatus::ALL);
        serde_matches_names(InstanceEventKind::ALL);
        serde_matches_names(LifecycleRule::ALL);
        serde_matches_names(RuleAction::ALL);
        serde_matches_names(Meter::ALL);
        let mut by_name = Meter::ALL.to_vec();
        by_name.sort_by_key(|m| m.as_str());
        assert_eq!(by_name, Meter::ALL, "meters sort as their names do");
        assert!(Meter::ALL.is_sorted());
        for state in InstanceState::ALL {
            assert_eq!(InstanceState::parse(state.as_str()), Some(*state));
        }
        assert_eq!(InstanceState::parse("bogus"), None);
        assert!(serde_json::from_str::<InstanceState>("\"bogus\"").is_err());
    }

    #[test]
    fn job_kinds_round_trip_and_refuse_the_rest() {
        let stop = Uuid::now_v7();
        for kind in [
            JobKind::Provision(1),
            JobKind::Provision(3),
            JobKind::Deprovision,
            JobKind::Cleanup(1),
            JobKind::Cleanup(2),
            JobKind::Stop(stop),
        ] {
            assert_eq!(JobKind::parse(&kind.to_string()), Some(kind));
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(serde_json::from_str::<JobKind>(&json).unwrap(), kind);
        }
        for bad in [
            "",
            "provision:1",
            "provision:x",
            "cleanup:0",
            "stop:nope",
            "stopping",
            "reboot",
        ] {
            assert_eq!(JobKind::parse(bad), None, "{bad}");
            assert!(serde_json::from_str::<JobKind>(&format!("\"{bad}\"")).is_err());
        }
    }

    #[test]
    fn terminal_states_go_nowhere() {
        for next in InstanceState::ALL {
            assert!(!InstanceState::Destroyed.can_become(*next));
            assert!(!InstanceState::Failed.can_become(*next));
        }
    }

    /// States reachable from `from` by legal transitions, `from` included.
    fn reachable(from: InstanceState) -> Vec<InstanceState> {
        let mut seen = vec![from];
        let mut i = 0;
        while i < seen.len() {
            for next in InstanceState::ALL {
                if seen[i].can_become(*next) && !seen.contains(next) {
                    seen.push(*next);
                }
            }
            i += 1;
        }
        seen
    }

    proptest::proptest! {
        /// Random walks that try any transition and take only the legal ones:
        /// a terminal state is never left, `running` is entered only once
        /// provisioning (or a returning host) says the machine is ready, and
        /// every state on the way can still reach a terminal state (no
        /// instance can get stuck holding GPUs forever).
        #[test]
        fn random_walks_keep_the_lifecycle_invariants(tries in proptest::collection::vec(0usize..11, 1..60)) {
            let mut state = InstanceState::Pending;
            for t in tries {
                let next = InstanceState::ALL[t];
                if !state.can_become(next) {
                    continue;
                }
                proptest::prop_assert!(!state.is_terminal(), "left terminal {state}");
                if next == InstanceState::Running {
                    proptest::prop_assert!(matches!(state, InstanceState::Provisioning | InstanceState::HostLost));
                }
                state = next;
                proptest::prop_assert!(reachable(state).into_iter().any(InstanceState::is_terminal), "{state} cannot end");
            }
        }
    }

    #[test]
    fn billing_states_are_reached_only_through_provisioning() {
        for from in InstanceState::ALL {
            if from.can_become(InstanceState::Running) {
                assert!(matches!(
                    from,
                    InstanceState::Provisioning | InstanceState::HostLost
                ));
            }
        }
        assert!(!InstanceState::Stopped.can_become(InstanceState::Running));
    }
}
