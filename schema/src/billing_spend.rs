//! Billing's spend-control tables (in the `billing` schema): month-to-date
//! usage charges per renter, the copy of each renter's monthly cap, and the
//! low-runway warnings in force.

diesel::table! {
    use diesel::sql_types::*;

    billing.monthly_spend (tenant_id, month) {
        tenant_id -> Uuid,
        month -> Date,
        currency -> Text,
        spent -> Numeric,
        last_charged_at -> Timestamptz,
        cap_reached_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.spend_caps (tenant_id) {
        tenant_id -> Uuid,
        monthly_cap -> Nullable<Numeric>,
        synced_at -> Timestamptz,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.runway_alerts (tenant_id) {
        tenant_id -> Uuid,
        low_since -> Timestamptz,
        balance -> Numeric,
        burn_per_hour -> Numeric,
        runway_seconds -> Int8,
    }
}

diesel::allow_tables_to_appear_in_same_query!(monthly_spend, spend_caps, runway_alerts);
