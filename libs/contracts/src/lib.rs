//! Types every gpumarket process agrees on and that know nothing of HTTP or SQL:
//! money math, message envelopes and payloads, internal API bodies and the
//! error codes the public API reports.

pub mod agent;
pub mod api;
pub mod block_end;
pub mod bounds;
pub mod endpoints;
pub mod envelope;
pub mod error_code;
pub mod events;
pub mod field_errors;
pub mod ids;
pub mod meters;
pub mod mig;
pub mod money;
pub mod offer_query;
pub mod operator;
pub mod reservations;
pub mod states;
pub mod time;
pub mod webhooks;

pub use envelope::{Envelope, Kind};
pub use error_code::{ErrorBody, ErrorCode};
pub use field_errors::FieldErrors;
