//! Billing's Stripe tables (in the `billing` schema): the Stripe customer of
//! each renter tenant, top-ups (one PaymentIntent each) and the inbox of
//! Stripe webhook events already handled.

diesel::table! {
    use diesel::sql_types::*;

    billing.stripe_customers (tenant_id) {
        tenant_id -> Uuid,
        customer_id -> Text,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.top_ups (id) {
        id -> Uuid,
        tenant_id -> Uuid,
        idempotency_key -> Text,
        amount -> Numeric,
        currency -> Text,
        amount_minor -> Int8,
        status -> Text,
        payment_intent_id -> Nullable<Text>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        succeeded_at -> Nullable<Timestamptz>,
        failure_reason -> Nullable<Text>,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.stripe_events (event_id) {
        event_id -> Text,
        #[sql_name = "type"]
        kind -> Text,
        object_id -> Nullable<Text>,
        outcome -> Text,
        received_at -> Timestamptz,
    }
}
