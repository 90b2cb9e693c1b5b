//! Reserved capacity (issue 20, docs/reservations.md): ordering's side.
//!
//! Ordering owns the renter's record of a reservation and its saga (the
//! catalog books the GPU time, quota holds the GPUs, billing charges the
//! block into escrow), the resale listings and their purchases, a host's
//! cancellation, and orders launched on a reservation's GPUs. The catalog
//! decides what happens to GPUs in time (it starts and ends blocks and
//! preempts what runs on their GPUs); billing moves the money.

mod book;
mod cancel;
mod continued;
pub(crate) mod launch;
mod resale;
mod routes;
mod store;
mod sweeper;

pub(crate) use cancel::{bookings_cancelled, ending_soon};
pub(crate) use continued::continued;
pub(crate) use routes::configure;
pub(crate) use sweeper::spawn;
