//! Billing's invoice tables (in the `billing` schema): the structured facts
//! of each usage posting, renters' invoices with their lines, which posting
//! went on which invoice, credit notes, and the per-tenant counters.

diesel::table! {
    use diesel::sql_types::*;

    billing.usage_details (transaction_id) {
        transaction_id -> Text,
        interval_id -> Uuid,
        meter -> Text,
        offset_seconds -> Int8,
        seconds -> Int8,
        price_per_hour -> Numeric,
        started_at -> Timestamptz,
        ended_at -> Timestamptz,
        host_tenant_id -> Nullable<Uuid>,
        machine_id -> Nullable<Uuid>,
        gpu_model -> Nullable<Text>,
        tenant_id -> Nullable<Uuid>,
        unit -> Text,
        quantity -> Nullable<Int8>,
        unit_price -> Nullable<Numeric>,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.invoice_counters (tenant_id) {
        tenant_id -> Uuid,
        last_number -> Int8,
        last_credit_note_number -> Int8,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.invoices (id) {
        id -> Uuid,
        tenant_id -> Uuid,
        number -> Int8,
        period_start -> Timestamptz,
        period_end -> Timestamptz,
        status -> Text,
        currency -> Text,
        subtotal -> Numeric,
        total -> Numeric,
        exact_total -> Numeric,
        rounding -> Numeric,
        rounding_transaction_id -> Nullable<Text>,
        created_at -> Timestamptz,
        finalized_at -> Nullable<Timestamptz>,
        paid_at -> Nullable<Timestamptz>,
        voided_at -> Nullable<Timestamptz>,
        void_reason -> Nullable<Text>,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.invoice_lines (id) {
        id -> Int8,
        invoice_id -> Uuid,
        position -> Int4,
        instance_id -> Uuid,
        meter -> Text,
        quantity -> Int8,
        unit -> Text,
        unit_price_per_hour -> Numeric,
        earlier_period -> Bool,
        charge_period_start -> Timestamptz,
        charge_period_end -> Timestamptz,
        postings -> Int4,
        exact_amount -> Numeric,
        amount -> Numeric,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.invoice_items (transaction_id) {
        transaction_id -> Text,
        invoice_id -> Uuid,
        line_id -> Int8,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.credit_notes (id) {
        id -> Uuid,
        tenant_id -> Uuid,
        invoice_id -> Uuid,
        number -> Int8,
        amount -> Numeric,
        currency -> Text,
        reason -> Text,
        idempotency_key -> Text,
        transaction_id -> Text,
        created_at -> Timestamptz,
    }
}

diesel::joinable!(invoice_lines -> invoices (invoice_id));
diesel::joinable!(credit_notes -> invoices (invoice_id));
diesel::joinable!(invoice_items -> invoices (invoice_id));
diesel::joinable!(invoice_items -> invoice_lines (line_id));
diesel::allow_tables_to_appear_in_same_query!(
    usage_details,
    invoice_counters,
    invoices,
    invoice_lines,
    invoice_items,
    credit_notes
);
