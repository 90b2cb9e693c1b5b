//! Catalog's reserved-capacity tables (migration
//! 2026-12-07-000500_reserved_catalog, docs/reservations.md): a host's
//! reserved terms, one booking per reservation, its booked GPU periods
//! (under an exclusion constraint), which GPU of a running block each
//! instance uses, and the ending-soon warnings sent.

diesel::table! {
    use diesel::sql_types::*;

    catalog.reserved_terms (machine_id) {
        machine_id -> Uuid,
        price_per_gpu_hour -> Numeric,
        max_lead_days -> Int4,
        min_block_hours -> Int4,
        updated_at -> Timestamptz,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    catalog.bookings (reservation_id) {
        reservation_id -> Uuid,
        tenant_id -> Uuid,
        machine_id -> Uuid,
        host_tenant_id -> Uuid,
        gpu_model -> Text,
        gpu_indices -> Array<Int2>,
        starts_at -> Timestamptz,
        ends_at -> Timestamptz,
        price_per_gpu_hour -> Numeric,
        currency -> Text,
        storage_price_per_gb_month -> Numeric,
        bandwidth_up_price_per_tb -> Numeric,
        bandwidth_down_price_per_tb -> Numeric,
        parent_id -> Nullable<Uuid>,
        cancelled_from -> Nullable<Timestamptz>,
        activated_at -> Nullable<Timestamptz>,
        finished_at -> Nullable<Timestamptz>,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    catalog.booked_gpus (reservation_id, gpu_index, period) {
        reservation_id -> Uuid,
        machine_id -> Uuid,
        gpu_index -> Int2,
        period -> Tstzrange,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    catalog.block_gpu_uses (machine_id, gpu_index) {
        machine_id -> Uuid,
        gpu_index -> Int2,
        reservation_id -> Uuid,
        holder -> Uuid,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    catalog.ending_warnings (order_id, ends_at) {
        order_id -> Uuid,
        ends_at -> Timestamptz,
        sent_at -> Timestamptz,
    }
}

diesel::joinable!(booked_gpus -> bookings (reservation_id));
diesel::allow_tables_to_appear_in_same_query!(
    reserved_terms,
    bookings,
    booked_gpus,
    block_gpu_uses,
    ending_warnings
);
