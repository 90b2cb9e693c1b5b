//! Cheap input checks made before a service is called, so that an obviously
//! bad request fails with the GraphQL field it came from rather than with a
//! service's internal field name.

use async_graphql::ID;
use rust_decimal::Decimal;
use uuid::Uuid;

use crate::error::GatewayError;

pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 200;

/// The longest MIG profile name taken. NVIDIA's are about ten characters
/// (`7g.141gb`); the bound keeps a long string from travelling to the
/// catalog and back in an error message.
pub const MAX_MIG_PROFILE_LEN: usize = 32;

pub fn id(field: &'static str, value: &ID) -> Result<Uuid, GatewayError> {
    Uuid::parse_str(value.as_str())
        .map_err(|_| GatewayError::validation(field, "is not a valid id"))
}

pub fn idempotency_key(field: &'static str, value: &str) -> Result<(), GatewayError> {
    if value.trim().is_empty() {
        return Err(GatewayError::validation(field, "must not be empty"));
    }
    if value.chars().count() > MAX_IDEMPOTENCY_KEY_LEN {
        return Err(GatewayError::validation(
            field,
            format!("must be at most {MAX_IDEMPOTENCY_KEY_LEN} characters"),
        ));
    }
    Ok(())
}

pub fn not_blank(field: &'static str, value: &str) -> Result<(), GatewayError> {
    if value.trim().is_empty() {
        return Err(GatewayError::validation(field, "must not be empty"));
    }
    Ok(())
}

/// A MIG profile name as a caller gives it: not blank, at most
/// [`MAX_MIG_PROFILE_LEN`] characters. Whether the machine's model has the
/// profile is the catalog's to say.
pub fn mig_profile(field: &'static str, value: &str) -> Result<(), GatewayError> {
    not_blank(field, value)?;
    if value.chars().count() > MAX_MIG_PROFILE_LEN {
        return Err(GatewayError::validation(
            field,
            format!("must be at most {MAX_MIG_PROFILE_LEN} characters"),
        ));
    }
    Ok(())
}

/// An integer within `min..=max`.
pub fn within(field: &'static str, value: i32, min: i32, max: i32) -> Result<(), GatewayError> {
    if !(min..=max).contains(&value) {
        return Err(GatewayError::validation(
            field,
            format!("must be between {min} and {max}"),
        ));
    }
    Ok(())
}

/// A list of at most `max` entries.
pub fn at_most_items<T>(field: &'static str, items: &[T], max: usize) -> Result<(), GatewayError> {
    if items.len() > max {
        return Err(GatewayError::validation(
            field,
            format!("at most {max} entries"),
        ));
    }
    Ok(())
}

pub fn at_least(field: &'static str, value: i32, min: i32) -> Result<(), GatewayError> {
    if value < min {
        return Err(GatewayError::validation(
            field,
            format!("must be at least {min}"),
        ));
    }
    Ok(())
}

// Money inputs use `money` (their bounds include the sign); these stay for
// decimals that are not money.
#[allow(dead_code)]
pub fn non_negative(field: &'static str, value: Decimal) -> Result<(), GatewayError> {
    if value < Decimal::ZERO {
        return Err(GatewayError::validation(field, "must not be negative"));
    }
    Ok(())
}

#[allow(dead_code)]
pub fn positive(field: &'static str, value: Decimal) -> Result<(), GatewayError> {
    if value <= Decimal::ZERO {
        return Err(GatewayError::validation(field, "must be greater than 0"));
    }
    Ok(())
}

/// A money amount within its documented bounds (contracts::bounds): the
/// minimum, the maximum and at most 9 decimal places. Without this an amount
/// past the ledger's `NUMERIC(24,9)` failed in the service as INTERNAL
/// ("numeric field overflow") and extra places were rounded silently.
pub fn money(
    field: &'static str,
    value: Decimal,
    bound: contracts::bounds::MoneyBound,
) -> Result<Decimal, GatewayError> {
    contracts::bounds::check(value, bound).map_err(|e| GatewayError::validation(field, e.0))
}

/// [`money`] for an optional amount.
pub fn money_opt(
    field: &'static str,
    value: Option<Decimal>,
    bound: contracts::bounds::MoneyBound,
) -> Result<(), GatewayError> {
    value
        .map(|v| money(field, v, bound))
        .transpose()
        .map(|_| ())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn field_of(result: Result<impl std::fmt::Debug, GatewayError>) -> &'static str {
        match result.unwrap_err() {
            GatewayError::Validation { field, .. } => field,
            other => panic!("not a validation error: {other:?}"),
        }
    }

    #[test]
    fn ids_must_be_uuids() {
        let uuid = Uuid::now_v7();
        assert_eq!(id("offerId", &ID::from(uuid)).unwrap(), uuid);
        assert_eq!(field_of(id("offerId", &ID::from("nope"))), "offerId");
    }

    #[test]
    fn idempotency_keys_are_bounded() {
        assert!(idempotency_key("idempotencyKey", "k-1").is_ok());
        assert!(idempotency_key("idempotencyKey", &"x".repeat(200)).is_ok());
        assert_eq!(
            field_of(idempotency_key("idempotencyKey", "")),
            "idempotencyKey"
        );
        assert_eq!(
            field_of(idempotency_key("idempotencyKey", &"x".repeat(201))),
            "idempotencyKey"
        );
    }

    #[test]
    fn numbers_and_text() {
        assert!(at_least("gpuCount", 1, 1).is_ok());
        assert_eq!(field_of(at_least("gpuCount", 0, 1)), "gpuCount");
        assert!(non_negative("price", Decimal::ZERO).is_ok());
        assert!(non_negative("price", Decimal::new(-0, 2)).is_ok());
        assert_eq!(
            field_of(non_negative("price", Decimal::new(-1, 2))),
            "price"
        );
        assert_eq!(field_of(positive("amount", Decimal::ZERO)), "amount");
    }

    #[test]
    fn mig_profiles_ranges_and_lists_are_bounded() {
        assert!(mig_profile("migProfile", "3g.40gb").is_ok());
        assert!(mig_profile("migProfile", &"x".repeat(32)).is_ok());
        assert_eq!(field_of(mig_profile("migProfile", " ")), "migProfile");
        assert_eq!(
            field_of(mig_profile("migProfile", &"x".repeat(33))),
            "migProfile"
        );
        assert!(within("gpuIndex", 0, 0, 63).is_ok());
        assert!(within("gpuIndex", 63, 0, 63).is_ok());
        assert_eq!(field_of(within("gpuIndex", 64, 0, 63)), "gpuIndex");
        assert_eq!(field_of(within("gpuIndex", -1, 0, 63)), "gpuIndex");
        assert!(at_most_items("prices", &[1, 2], 2).is_ok());
        assert_eq!(field_of(at_most_items("prices", &[1, 2, 3], 2)), "prices");
    }

    #[test]
    fn money_names_the_field_and_the_bound() {
        use contracts::bounds::GPU_HOUR_PRICE;
        assert!(money("maxPricePerGpuHour", Decimal::new(249, 2), GPU_HOUR_PRICE).is_ok());
        let err = money(
            "maxPricePerGpuHour",
            Decimal::from(1_000_000_000_000_000i64),
            GPU_HOUR_PRICE,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "maxPricePerGpuHour: must be at most 1000 with at most 9 decimal places"
        );
        assert_eq!(
            field_of(money_opt(
                "bidPerGpuHour",
                Some(Decimal::new(1, 10)),
                GPU_HOUR_PRICE
            )),
            "bidPerGpuHour"
        );
    }
}
