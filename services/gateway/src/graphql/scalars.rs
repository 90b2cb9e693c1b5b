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

use crate::error::GatewayError;

/// Instants as the API shows them: RFC 3339, microseconds, UTC.
pub(super) fn instant(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// An RFC 3339 instant given as text (the deprecated arguments).
pub(super) fn parse_instant(field: &'static str, raw: &str) -> Result<DateTime<Utc>, GatewayError> {
    DateTime::parse_from_rfc3339(raw)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            GatewayError::validation(field, "an RFC 3339 instant such as 2027-01-01T00:00:00Z")
        })
}

/// An instant argument given as its deprecated text (`text_name`) or as its
/// typed twin (`typed_name`, a `DateTime`): at most one of the two.
pub(super) fn instant_arg(
    text_name: &'static str,
    text: Option<String>,
    typed_name: &'static str,
    typed: Option<DateTime<Utc>>,
) -> Result<Option<DateTime<Utc>>, GatewayError> {
    match (text, typed) {
        (Some(_), Some(_)) => Err(GatewayError::validation(
            typed_name,
            format!("give {typed_name} or the deprecated {text_name}, not both"),
        )),
        (Some(text), None) => parse_instant(text_name, &text).map(Some),
        (None, typed) => Ok(typed),
    }
}

/// A required instant argument: its text or its typed twin, exactly one.
pub(super) fn required_instant(
    text_name: &'static str,
    text: Option<String>,
    typed_name: &'static str,
    typed: Option<DateTime<Utc>>,
) -> Result<DateTime<Utc>, GatewayError> {
    instant_arg(text_name, text, typed_name, typed)?
        .ok_or_else(|| GatewayError::validation(typed_name, "required (an RFC 3339 DateTime)"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_argument_is_its_text_or_its_twin_never_both() {
        let at: DateTime<Utc> = "2027-01-01T00:00:00Z".parse().unwrap();
        let text = || Some("2027-01-01T00:00:00Z".to_owned());
        assert_eq!(
            instant_arg("from", text(), "fromUtc", None).unwrap(),
            Some(at)
        );
        assert_eq!(
            instant_arg("from", None, "fromUtc", Some(at)).unwrap(),
            Some(at)
        );
        assert_eq!(instant_arg("from", None, "fromUtc", None).unwrap(), None);
        assert!(instant_arg("from", text(), "fromUtc", Some(at)).is_err());
        assert!(instant_arg("from", Some("yesterday".into()), "fromUtc", None).is_err());
        assert!(required_instant("to", None, "toUtc", None).is_err());
    }
}
