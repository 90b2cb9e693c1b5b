//! The instance state machine. Every transition the code makes is checked
//! against [`InstanceState::can_become`]; the database row is updated with a
//! compare-and-set on the state and version it was read with.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InstanceState {
    Pending,
    Allocating,
    Provisioning,
    Running,
    Stopping,
    Stopped,
    Deprovisioning,
    Destroyed,
    Failed,
    HostLost,
    Preempted,
}

impl InstanceState {
    pub const ALL: [InstanceState; 11] = [
        InstanceState::Pending,
        InstanceState::Allocating,
        InstanceState::Provisioning,
        InstanceState::Running,
        InstanceState::Stopping,
        InstanceState::Stopped,
        InstanceState::Deprovisioning,
        InstanceState::Destroyed,
        InstanceState::Failed,
        InstanceState::HostLost,
        InstanceState::Preempted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Pending => "pending",
            InstanceState::Allocating => "allocating",
            InstanceState::Provisioning => "provisioning",
            InstanceState::Running => "running",
            InstanceState::Stopping => "stopping",
            InstanceState::Stopped => "stopped",
            InstanceState::Deprovisioning => "deprovisioning",
            InstanceState::Destroyed => "destroyed",
            InstanceState::Failed => "failed",
            InstanceState::HostLost => "host_lost",
            InstanceState::Preempted => "preempted",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == s)
    }

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
                | (HostLost, Running | Deprovisioning)
                | (Preempted, Deprovisioning)
        )
    }

    /// What a renter may ask for now, as the API reports it. Only actions the
    /// service implements are listed.
    pub fn allowed_actions(self) -> Vec<String> {
        let actions: &[&str] = match self {
            InstanceState::Running => &["stop", "destroy"],
            InstanceState::Stopped => &["start", "destroy"],
            // The GPUs are gone; the disk is still there until destroyed.
            InstanceState::Preempted => &["destroy"],
            // Billing stopped at the last heartbeat; the renter may wait for
            // the host to come back (a new run) or give up on it.
            InstanceState::HostLost => &["destroy"],
            // Cancels the order (or the start) while it is being set up.
            InstanceState::Provisioning => &["destroy"],
            _ => &[],
        };
        actions.iter().map(|a| (*a).to_owned()).collect()
    }
}

impl fmt::Display for InstanceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for state in InstanceState::ALL {
            assert_eq!(InstanceState::parse(state.as_str()), Some(state));
        }
        assert_eq!(InstanceState::parse("bogus"), None);
    }

    #[test]
    fn terminal_states_go_nowhere() {
        for next in InstanceState::ALL {
            assert!(!InstanceState::Destroyed.can_become(next));
            assert!(!InstanceState::Failed.can_become(next));
        }
    }

    /// States reachable from `from` by legal transitions, `from` included.
    fn reachable(from: InstanceState) -> Vec<InstanceState> {
        let mut seen = vec![from];
        let mut i = 0;
        while i < seen.len() {
            for next in InstanceState::ALL {
                if seen[i].can_become(next) && !seen.contains(&next) {
                    seen.push(next);
                }
            }
            i += 1;
        }
        seen
    }

    fn terminal(s: InstanceState) -> bool {
        matches!(s, InstanceState::Destroyed | InstanceState::Failed)
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
                proptest::prop_assert!(!terminal(state), "left terminal {state}");
                if next == InstanceState::Running {
                    proptest::prop_assert!(matches!(state, InstanceState::Provisioning | InstanceState::HostLost));
                }
                state = next;
                proptest::prop_assert!(reachable(state).into_iter().any(terminal), "{state} cannot end");
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
