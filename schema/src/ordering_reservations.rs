//! Ordering's reserved-capacity tables (migration
//! 2026-12-07-000520_reserved_ordering, docs/reservations.md).

diesel::table! {
    use diesel::sql_types::*;

    ordering.reservations (id) {
        id -> Uuid,
        tenant_id -> Uuid,
        user_id -> Uuid,
        team_id -> Nullable<Uuid>,
        idempotency_key -> Text,
        request_fingerprint -> Text,
        machine_id -> Nullable<Uuid>,
        host_tenant_id -> Nullable<Uuid>,
        gpu_model -> Nullable<Text>,
        gpu_count -> Int4,
        gpu_indices -> Array<Int4>,
        starts_at -> Timestamptz,
        ends_at -> Timestamptz,
        price_per_gpu_hour -> Nullable<Numeric>,
        amount -> Nullable<Numeric>,
        currency -> Nullable<Text>,
        status -> Text,
        parent_id -> Nullable<Uuid>,
        listing_id -> Nullable<Uuid>,
        reason -> Nullable<Text>,
        failure_code -> Nullable<Text>,
        quota_released_at -> Nullable<Timestamptz>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    ordering.resale_listings (id) {
        id -> Uuid,
        reservation_id -> Uuid,
        seller_tenant_id -> Uuid,
        machine_id -> Uuid,
        gpu_model -> Text,
        gpu_count -> Int4,
        starts_at -> Timestamptz,
        ends_at -> Timestamptz,
        price_per_gpu_hour -> Numeric,
        amount -> Numeric,
        currency -> Text,
        state -> Text,
        buyer_tenant_id -> Nullable<Uuid>,
        buyer_key -> Nullable<Text>,
        buyer_fingerprint -> Nullable<Text>,
        child_reservation_id -> Nullable<Uuid>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
    }
}

diesel::joinable!(resale_listings -> reservations (reservation_id));
diesel::allow_tables_to_appear_in_same_query!(reservations, resale_listings);
