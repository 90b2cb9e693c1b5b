//! Instants. Postgres keeps microseconds, so every instant the system records
//! is truncated to microseconds before it is stored or sent: the value in an
//! event and the value in the table are then the same value.

use chrono::{DateTime, Utc};

pub fn now() -> DateTime<Utc> {
    truncate(Utc::now())
}

pub fn truncate(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap_or(t)
}

/// RFC 3339 with microseconds and `Z`, the form the API reports.
pub fn format(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}
