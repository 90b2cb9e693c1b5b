//! Reserved capacity's money (issue 20; docs/reservations.md "Money" and
//! "Resale", docs/settlement.md "Reserved blocks"). A booked block is
//! charged up front into the renter's `escrow` account ([`charge`]); every
//! settlement interval the seconds the host was heard are released to its
//! earnings less the platform fee and the seconds it was silent are
//! refunded to whoever held them ([`release`]); a cancellation settles up
//! to its instant and refunds the rest, with the host's penalty when the
//! host cancelled ([`cancel`]); a resale moves money from the buyer to the
//! seller and the refunds of the hours to the buyer ([`resale`]). The
//! arithmetic is pure and property-tested ([`math`]); the rest writes it to
//! the ledger, one row lock on the escrow serialising every change to it.

pub mod cancel;
pub mod charge;
pub mod math;
pub(crate) mod postings;
pub mod release;
pub mod resale;
mod store;
mod terms;

pub use release::{CatalogEvidence, Evidence, Gap};
pub use store::{get, list};
pub use terms::{EscrowPeers, EscrowTerms};
