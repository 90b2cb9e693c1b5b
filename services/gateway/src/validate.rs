//! Cheap input checks made before a service is called, so that an obviously
//! bad request fails with the GraphQL field it came from rather than with a
//! service's internal field name.

use async_graphql::ID;
use chrono::{DateTime, Duration, Utc};
use contracts::reservations::{MAX_BLOCK_HOURS, MAX_LEAD_DAYS, whole_hour};
use rust_decimal::Decimal;
use uuid::Uuid;

use crate::error::GatewayError;

pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 200;

/// The longest MIG profile name taken. NVIDIA's are about ten characters
/// (`7g.141gb`); the bound keeps a long string from travelling to the
/// catalog and back in an error message.
pub const MAX_MIG_PROFILE_LEN: usize = 32;

/// The longest free-text reason taken (a host's cancellation): enough for
/// a sentence or two, short enough to show in a table.
pub const MAX_REASON_LEN: usize = 500;

/// The most GPUs one request may ask for: no machine has more (the highest
/// GPU index a host sets is 63).
pub const MAX_GPU_COUNT: i32 = 64;

/// The longest GPU model name taken in a filter: catalog names are about
/// twenty characters (`H100 80GB SXM`).
pub const MAX_GPU_MODEL_LEN: usize = 100;

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

/// Free text that must say something and stay within `max` characters.
pub fn text(field: &'static str, value: &str, max: usize) -> Result<(), GatewayError> {
    not_blank(field, value)?;
    if value.chars().count() > max {
        return Err(GatewayError::validation(
            field,
            format!("must be at most {max} characters"),
        ));
    }
    Ok(())
}

/// A range of whole future UTC hours, `[starts_at, ends_at)`: the shape
/// every reserved block and resale listing has. Whether the hours fit the
/// machine's terms or the reservation is the owning service's to say.
pub fn future_hours(
    starts_field: &'static str,
    starts_at: DateTime<Utc>,
    ends_field: &'static str,
    ends_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<(), GatewayError> {
    const WHOLE: &str = "must be a whole UTC hour (minutes, seconds and fractions 0)";
    if !whole_hour(starts_at) {
        return Err(GatewayError::validation(starts_field, WHOLE));
    }
    if !whole_hour(ends_at) {
        return Err(GatewayError::validation(ends_field, WHOLE));
    }
    if starts_at <= now {
        return Err(GatewayError::validation(
            starts_field,
            "must be in the future",
        ));
    }
    if ends_at <= starts_at {
        return Err(GatewayError::validation(
            ends_field,
            format!("must be after {starts_field}"),
        ));
    }
    Ok(())
}

/// A reserved block as a renter asks for it: [`future_hours`], at most
/// [`MAX_BLOCK_HOURS`] long and ending within [`MAX_LEAD_DAYS`] of now (the
/// widest terms any machine may set; the machine's own are the catalog's).
pub fn block(
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<(), GatewayError> {
    future_hours("startsAt", starts_at, "endsAt", ends_at, now)?;
    if ends_at - starts_at > Duration::hours(MAX_BLOCK_HOURS) {
        return Err(GatewayError::validation(
            "endsAt",
            format!("a block is at most {MAX_BLOCK_HOURS} hours"),
        ));
    }
    if ends_at > now + Duration::days(i64::from(MAX_LEAD_DAYS)) {
        return Err(GatewayError::validation(
            "endsAt",
            format!("no machine can be booked more than {MAX_LEAD_DAYS} days ahead"),
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
    fn reasons_are_bounded_text() {
        assert!(text("reason", "power maintenance", MAX_REASON_LEN).is_ok());
        assert!(text("reason", &"é".repeat(500), MAX_REASON_LEN).is_ok());
        assert_eq!(field_of(text("reason", " \n", MAX_REASON_LEN)), "reason");
        assert_eq!(
            field_of(text("reason", &"x".repeat(501), MAX_REASON_LEN)),
            "reason"
        );
    }

    #[test]
    fn blocks_are_whole_future_hours_within_the_widest_terms() {
        let now: DateTime<Utc> = "2027-01-04T09:30:00Z".parse().unwrap();
        let at = |s: &str| -> DateTime<Utc> { s.parse().unwrap() };
        assert!(block(at("2027-01-04T10:00:00Z"), at("2027-01-04T14:00:00Z"), now).is_ok());
        let cases = [
            ("2027-01-04T10:30:00Z", "2027-01-04T14:00:00Z", "startsAt"),
            ("2027-01-04T10:00:00Z", "2027-01-04T14:00:01Z", "endsAt"),
            ("2027-01-04T09:00:00Z", "2027-01-04T14:00:00Z", "startsAt"),
            ("2027-01-04T14:00:00Z", "2027-01-04T14:00:00Z", "endsAt"),
            ("2027-01-04T14:00:00Z", "2027-01-04T10:00:00Z", "endsAt"),
            // 91 days long.
            ("2027-01-05T00:00:00Z", "2027-04-06T00:00:00Z", "endsAt"),
            // Within 90 days but ending past a year ahead.
            ("2027-12-30T00:00:00Z", "2028-01-06T00:00:00Z", "endsAt"),
        ];
        for (starts, ends, field) in cases {
            assert_eq!(
                field_of(block(at(starts), at(ends), now)),
                field,
                "{starts} to {ends}"
            );
        }
        // 90 days exactly is a block.
        assert!(block(at("2027-01-05T00:00:00Z"), at("2027-04-05T00:00:00Z"), now).is_ok());
        assert_eq!(
            field_of(future_hours(
                "startsAt",
                at("2027-01-04T09:00:00Z"),
                "endsAt",
                at("2027-01-04T11:00:00Z"),
                now
            )),
            "startsAt"
        );
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
