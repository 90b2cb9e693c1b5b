//! How values look on the public API, in one place:
//! - instants: `DateTime` (async-graphql's chrono scalar, RFC 3339 UTC) on
//!   typed fields; the deprecated String fields keep [`instant`]'s text
//!   (microseconds, `Z`) until they are removed (api-specs/README.md);
//! - money and prices: `Decimal` (a string such as `"0.42"`; a number is
//!   accepted only when exact, see `extensions::numbers`);
//! - ids: `ID` (lower-case UUIDs);
//! - states and kinds: the enums of `contracts::states`, which derive
//!   their GraphQL enum there (feature `graphql`).

use chrono::{DateTime, Utc};

/// Instants as the API shows them: RFC 3339, microseconds, UTC.
pub(super) fn instant(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}
