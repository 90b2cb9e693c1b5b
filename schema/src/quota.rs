//! The quota service's tables (migrations `*_quota`, `*_quota_limits`).

diesel::table! {
    use diesel::sql_types::*;

    quota.tenants (id) {
        id -> Uuid,
        name -> Text,
        roles -> Array<Text>,
        is_platform -> Bool,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    quota.users (id) {
        id -> Uuid,
        tenant_id -> Uuid,
        email -> Text,
        password_hash -> Text,
        role -> Text,
        is_operator -> Bool,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    quota.api_keys (id) {
        id -> Uuid,
        tenant_id -> Uuid,
        user_id -> Uuid,
        name -> Text,
        prefix -> Text,
        secret_sha256 -> Text,
        scopes -> Array<Text>,
        idempotency_key -> Text,
        created_at -> Timestamptz,
        revoked_at -> Nullable<Timestamptz>,
        last_used_at -> Nullable<Timestamptz>,
        rotated_from -> Nullable<Uuid>,
        created_by_key -> Nullable<Uuid>,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    quota.tenant_quotas (tenant_id) {
        tenant_id -> Uuid,
        max_gpus -> Int4,
        updated_at -> Timestamptz,
        max_gpus_per_model -> Jsonb,
        max_running_instances -> Nullable<Int4>,
        monthly_budget -> Nullable<Numeric>,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    quota.reservations (order_id) {
        order_id -> Uuid,
        tenant_id -> Uuid,
        gpu_count -> Int4,
        created_at -> Timestamptz,
        released_at -> Nullable<Timestamptz>,
        gpu_model -> Text,
        hourly_rate -> Numeric,
        team_id -> Nullable<Uuid>,
        gpu_eighths -> Int4,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    quota.teams (id) {
        id -> Uuid,
        tenant_id -> Uuid,
        name -> Text,
        idempotency_key -> Text,
        max_gpus -> Nullable<Int4>,
        max_gpus_per_model -> Jsonb,
        max_running_instances -> Nullable<Int4>,
        monthly_budget -> Nullable<Numeric>,
        borrow_gpus -> Nullable<Int4>,
        borrow_gpus_per_model -> Jsonb,
        borrow_running_instances -> Nullable<Int4>,
        borrow_monthly_budget -> Nullable<Numeric>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
    }
}
diesel::joinable!(users -> tenants (tenant_id));
diesel::joinable!(api_keys -> users (user_id));
diesel::joinable!(api_keys -> tenants (tenant_id));
diesel::joinable!(tenant_quotas -> tenants (tenant_id));
diesel::joinable!(reservations -> tenants (tenant_id));
diesel::joinable!(teams -> tenants (tenant_id));
diesel::joinable!(reservations -> teams (team_id));
diesel::allow_tables_to_appear_in_same_query!(
    tenants,
    users,
    api_keys,
    tenant_quotas,
    reservations,
    teams
);
