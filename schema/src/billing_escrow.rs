//! Billing's reserved-capacity tables (in the `billing` schema, migration
//! 2026-12-07-000510_reserved_billing, docs/settlement.md): each
//! reservation's escrow, who holds which of its hours, what each of its
//! postings was for, and the resale transfers.

diesel::table! {
    use diesel::sql_types::*;

    billing.escrows (reservation_id) {
        reservation_id -> Uuid,
        renter_tenant_id -> Uuid,
        host_tenant_id -> Uuid,
        machine_id -> Uuid,
        currency -> Text,
        gpu_count -> Int4,
        price_per_gpu_hour -> Numeric,
        amount -> Numeric,
        fee_rate -> Numeric,
        starts_at -> Timestamptz,
        ends_at -> Timestamptz,
        settled_until -> Timestamptz,
        released -> Numeric,
        fees -> Numeric,
        refunded -> Numeric,
        penalty -> Numeric,
        silent_seconds -> Int8,
        state -> Text,
        cancelled_at -> Nullable<Timestamptz>,
        cancelled_by_host -> Nullable<Bool>,
        cancel_reason -> Nullable<Text>,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.escrow_holders (reservation_id, period) {
        reservation_id -> Uuid,
        period -> Tstzrange,
        tenant_id -> Uuid,
        holder_reservation_id -> Uuid,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.escrow_postings (transaction_id) {
        transaction_id -> Text,
        escrow_reservation_id -> Uuid,
        reservation_id -> Uuid,
        tenant_id -> Uuid,
        host_tenant_id -> Uuid,
        machine_id -> Uuid,
        line -> Text,
        quantity -> Int8,
        unit_price -> Numeric,
        heard_seconds -> Int8,
        started_at -> Timestamptz,
        ended_at -> Timestamptz,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    billing.resale_transfers (listing_id) {
        listing_id -> Uuid,
        escrow_reservation_id -> Uuid,
        child_reservation_id -> Uuid,
        buyer_tenant_id -> Uuid,
        seller_tenant_id -> Uuid,
        amount -> Numeric,
        fee -> Numeric,
        seller_credit -> Numeric,
        starts_at -> Timestamptz,
        ends_at -> Timestamptz,
        transaction_id -> Text,
        created_at -> Timestamptz,
    }
}

diesel::joinable!(escrow_holders -> escrows (reservation_id));
diesel::joinable!(escrow_postings -> escrows (escrow_reservation_id));
diesel::joinable!(resale_transfers -> escrows (escrow_reservation_id));
diesel::allow_tables_to_appear_in_same_query!(
    escrows,
    escrow_holders,
    escrow_postings,
    resale_transfers
);
