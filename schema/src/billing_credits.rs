//! Billing's credit grants (in the `billing` schema): one row per
//! `grantCredit` idempotency key, with the request it was first used for.

diesel::table! {
    use diesel::sql_types::*;

    billing.credit_grants (idempotency_key) {
        idempotency_key -> Text,
        tenant_id -> Uuid,
        amount -> Numeric,
        reason -> Text,
        transaction_id -> Text,
        created_at -> Timestamptz,
    }
}
