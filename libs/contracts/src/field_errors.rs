//! Every invalid field of one request, so that a form can mark them all at
//! once instead of one per round trip.

use serde::Serialize;

/// One input field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

/// The invalid fields of a request, in the order they were checked. Shown as
/// `field: message; field: message`; a VALIDATION error that carries them has
/// them in its details as `fieldErrors` (GraphQL `extensions.fieldErrors`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldErrors(Vec<FieldError>);

impl FieldErrors {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, field: &str, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.to_owned(),
            message: message.into(),
        });
    }

    /// Records `message` for `field` unless `ok`.
    pub fn check(&mut self, ok: bool, field: &str, message: impl Into<String>) {
        if !ok {
            self.add(field, message);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn fields(&self) -> &[FieldError] {
        &self.0
    }

    /// `Ok(())` when nothing was recorded, else the errors.
    pub fn into_result(self) -> Result<(), Self> {
        if self.is_empty() { Ok(()) } else { Err(self) }
    }

    /// The details of the VALIDATION error body.
    pub fn details(&self) -> serde_json::Value {
        serde_json::json!({ "fieldErrors": self.0 })
    }
}

impl std::fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}: {}", e.field, e.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for FieldErrors {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failed_check_is_kept_in_order_and_shown_as_field_message() {
        let mut errors = FieldErrors::new();
        errors.check(true, "name", "1 to 200 characters");
        errors.check(false, "gpuCount", "must be between 1 and 64");
        errors.add("country", "an ISO 3166-1 alpha-2 code such as US");
        assert_eq!(
            errors.to_string(),
            "gpuCount: must be between 1 and 64; country: an ISO 3166-1 alpha-2 code such as US"
        );
        assert_eq!(
            errors.details(),
            serde_json::json!({ "fieldErrors": [
                { "field": "gpuCount", "message": "must be between 1 and 64" },
                { "field": "country", "message": "an ISO 3166-1 alpha-2 code such as US" },
            ] })
        );
        assert!(errors.into_result().is_err());
        assert_eq!(FieldErrors::new().into_result(), Ok(()));
    }
}
