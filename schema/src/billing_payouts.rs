//! Billing's host statements and Stripe Connect payouts (in the `billing`
//! schema): statements with their lines and the postings on them, each
//! host's connected account, and payouts.

diesel::table! {
    use diesel::sql_types::*;

    billing.statement_counters (host_tenant_id) {
        host_tenant_id -> Uuid,
        last_number -> Int8,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.statements (id) {
        id -> Uuid,
        host_tenant_id -> Uuid,
        number -> Int8,
        period_start -> Timestamptz,
        period_end -> Timestamptz,
        status -> Text,
        currency -> Text,
        seconds -> Int8,
        gross -> Numeric,
        fee -> Numeric,
        net -> Numeric,
        downtime_credits -> Numeric,
        earnings -> Numeric,
        adjustments -> Numeric,
        payouts -> Numeric,
        opening_balance -> Numeric,
        closing_balance -> Numeric,
        created_at -> Timestamptz,
        finalized_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.statement_lines (id) {
        id -> Int8,
        statement_id -> Uuid,
        position -> Int4,
        machine_id -> Nullable<Uuid>,
        gpu_model -> Nullable<Text>,
        meter -> Text,
        earlier_period -> Bool,
        seconds -> Int8,
        gross -> Numeric,
        fee -> Numeric,
        net -> Numeric,
        downtime_credits -> Numeric,
        amount -> Numeric,
        postings -> Int4,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.statement_items (transaction_id) {
        transaction_id -> Text,
        statement_id -> Uuid,
        line_id -> Nullable<Int8>,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.payout_accounts (host_tenant_id) {
        host_tenant_id -> Uuid,
        stripe_account_id -> Text,
        country -> Text,
        email -> Nullable<Text>,
        transfers_status -> Text,
        payouts_enabled -> Bool,
        details_submitted -> Bool,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.payouts (id) {
        id -> Uuid,
        host_tenant_id -> Uuid,
        stripe_account_id -> Text,
        amount -> Numeric,
        amount_minor -> Int8,
        currency -> Text,
        status -> Text,
        stripe_transfer_id -> Nullable<Text>,
        transaction_id -> Nullable<Text>,
        failure_reason -> Nullable<Text>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        paid_at -> Nullable<Timestamptz>,
    }
}

diesel::joinable!(statement_lines -> statements (statement_id));
diesel::joinable!(statement_items -> statements (statement_id));
diesel::allow_tables_to_appear_in_same_query!(statements, statement_lines, statement_items);
