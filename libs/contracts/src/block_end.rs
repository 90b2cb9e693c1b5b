//! What becomes of an instance launched on a reservation when its block
//! ends (issue 20, docs/reservations.md "When the block ends"): in a module
//! of its own because orders (`api`) and reservations both name it.

use serde::{Deserialize, Serialize};

/// What becomes of an instance launched on a reservation when the block's
/// GPUs stop being the reservation's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "graphql", derive(async_graphql::Enum))]
pub enum WhenBlockEnds {
    /// Stopped at the block's end (billing ends there; the disk stays until
    /// the renter destroys it).
    #[default]
    Stop,
    /// Keeps running on the same GPUs at the machine's on-demand price from
    /// the block's end on, when those GPUs are not booked by anyone else,
    /// the machine is still listed, its price is at most the order's
    /// `max_price_per_gpu_hour` and the renter's quota admits it; otherwise
    /// stopped, with the reason.
    OnDemand,
}

impl WhenBlockEnds {
    pub fn as_str(self) -> &'static str {
        match self {
            WhenBlockEnds::Stop => "stop",
            WhenBlockEnds::OnDemand => "on_demand",
        }
    }
}
