//! Diesel table definitions, one module per Postgres schema; a service
//! imports only its own module. They mirror `migrations/` (written by hand
//! here, as `diesel print-schema` would; every query in the system tests runs
//! against the migrated database, so a drift fails there).

pub mod catalog_bookings;
pub mod catalog_registrations;
pub mod ordering_reservations;
pub mod quota;

pub mod catalog {
    diesel::table! {
        use diesel::sql_types::*;

        catalog.machines (id) {
            id -> Uuid,
            host_tenant_id -> Uuid,
            name -> Text,
            gpu_model -> Text,
            gpu_count -> Int4,
            gpus_allocated -> Int4,
            vram_gib -> Int4,
            cpu_cores -> Int4,
            ram_gib -> Int4,
            disk_gib -> Int4,
            country -> Text,
            price_per_gpu_hour -> Nullable<Numeric>,
            currency -> Text,
            listed -> Bool,
            agent_token_sha256 -> Text,
            idempotency_key -> Text,
            created_at -> Timestamptz,
            updated_at -> Timestamptz,
            cpu_model -> Text,
            disk_type -> Text,
            upload_mbps -> Int4,
            download_mbps -> Int4,
            region -> Text,
            datacenter -> Bool,
            driver_version -> Nullable<Text>,
            cuda_version_code -> Nullable<Int4>,
            min_bid_per_gpu_hour -> Nullable<Numeric>,
            storage_price_per_gb_month -> Numeric,
            bandwidth_up_price_per_tb -> Numeric,
            bandwidth_down_price_per_tb -> Numeric,
            allowed_gpu_counts -> Array<Int4>,
            list_until -> Nullable<Timestamptz>,
            last_heartbeat_at -> Nullable<Timestamptz>,
            reliability -> Nullable<Numeric>,
            self_test_passed_at -> Nullable<Timestamptz>,
            deleted_at -> Nullable<Timestamptz>,
            /// The model's FP16 TFLOPS, copied by trigger from gpu_models
            /// (migration 2026-12-05-000130) for the price-per-TFLOP index.
            fp16_tflops -> Numeric,
            /// GPUs in MIG mode (migration 2026-12-07-000400): not rented whole.
            mig_gpus -> Int4,
        }
    }

    diesel::table! {
        use diesel::sql_types::*;

        catalog.allocations (order_id) {
            order_id -> Uuid,
            machine_id -> Uuid,
            tenant_id -> Uuid,
            gpu_count -> Int4,
            created_at -> Timestamptz,
            released_at -> Nullable<Timestamptz>,
            rental_type -> Text,
            bid_per_gpu_hour -> Nullable<Numeric>,
            instance_id -> Nullable<Uuid>,
            price_per_gpu_hour -> Nullable<Numeric>,
            storage_price_per_gb_month -> Nullable<Numeric>,
            bandwidth_up_price_per_tb -> Nullable<Numeric>,
            bandwidth_down_price_per_tb -> Nullable<Numeric>,
            currency -> Nullable<Text>,
            preempted_at -> Nullable<Timestamptz>,
            preempted_by -> Nullable<Uuid>,
            gpu_indices -> Array<Int2>,
            mig_profile -> Nullable<Text>,
            mig_gpu_index -> Nullable<Int2>,
            mig_start -> Nullable<Int2>,
            mig_size -> Nullable<Int2>,
            /// An instance's allocation inside a running reserved block
            /// (migration 2026-12-07-000500, docs/reservations.md).
            reservation_id -> Nullable<Uuid>,
            /// The reserved block's own hold on its GPUs while it runs.
            block_reservation_id -> Nullable<Uuid>,
            /// Inside a block: go on on demand at its end up to this price
            /// (migration 2026-12-07-000600).
            continue_up_to_per_gpu_hour -> Nullable<Numeric>,
        }
    }

    // MIG (migration 2026-12-07-000400, docs/mig.md).
    diesel::table! {
        use diesel::sql_types::*;

        catalog.mig_profiles (gpu_model, name) {
            gpu_model -> Text,
            name -> Text,
            compute_slices -> Int2,
            memory_slices -> Int2,
            memory_gib -> Int4,
            placements -> Array<Int2>,
            nvml_profile -> Int4,
        }
    }

    diesel::table! {
        use diesel::sql_types::*;

        catalog.mig_gpus (machine_id, gpu_index) {
            machine_id -> Uuid,
            gpu_index -> Int2,
            mode -> Text,
            layout -> Jsonb,
            updated_at -> Timestamptz,
        }
    }

    diesel::table! {
        use diesel::sql_types::*;

        catalog.mig_prices (machine_id, profile) {
            machine_id -> Uuid,
            profile -> Text,
            price_per_hour -> Numeric,
        }
    }

    diesel::table! {
        use diesel::sql_types::*;

        catalog.mig_free (machine_id, profile) {
            machine_id -> Uuid,
            profile -> Text,
            memory_gib -> Int4,
            compute_slices -> Int2,
            memory_slices -> Int2,
            free -> Int4,
            price_per_hour -> Numeric,
        }
    }

    diesel::table! {
        use diesel::sql_types::*;

        catalog.gpu_holds (machine_id, gpu_index, memory_slice) {
            machine_id -> Uuid,
            gpu_index -> Int2,
            memory_slice -> Int2,
            holder -> Uuid,
        }
    }
    diesel::table! {
        use diesel::sql_types::*;

        catalog.gpu_models (name) {
            name -> Text,
            vram_gib -> Int4,
            architecture -> Text,
            compute_capability -> Text,
            fp16_tflops -> Numeric,
            bf16_tflops -> Numeric,
        }
    }

    diesel::table! {
        use diesel::sql_types::*;

        catalog.host_profiles (tenant_id) {
            tenant_id -> Uuid,
            legal_name -> Nullable<Text>,
            country -> Nullable<Text>,
            payout_currency -> Nullable<Text>,
            verification -> Text,
            verification_reason -> Nullable<Text>,
            verified_by -> Nullable<Uuid>,
            updated_at -> Timestamptz,
        }
    }

    diesel::joinable!(allocations -> machines (machine_id));
    diesel::joinable!(machines -> gpu_models (gpu_model));
    diesel::allow_tables_to_appear_in_same_query!(machines, allocations, gpu_models, host_profiles);
    diesel::allow_tables_to_appear_in_same_query!(
        machines,
        mig_profiles,
        mig_gpus,
        mig_prices,
        mig_free,
        gpu_holds
    );
    diesel::allow_tables_to_appear_in_same_query!(allocations, gpu_holds);
    diesel::allow_tables_to_appear_in_same_query!(allocations, mig_profiles);
    diesel::joinable!(gpu_holds -> allocations (holder));

    // Host agents (migration 000008): listing history, heartbeat gaps and the
    // agents' latest reports.
    diesel::table! {
        use diesel::sql_types::*;

        catalog.listing_periods (machine_id, started_at) {
            machine_id -> Uuid,
            started_at -> Timestamptz,
            ended_at -> Nullable<Timestamptz>,
        }
    }

    diesel::table! {
        use diesel::sql_types::*;

        catalog.heartbeat_gaps (machine_id, started_at) {
            machine_id -> Uuid,
            started_at -> Timestamptz,
            ended_at -> Nullable<Timestamptz>,
            detected_by -> Text,
            recorded_at -> Timestamptz,
        }
    }

    diesel::table! {
        use diesel::sql_types::*;

        catalog.agent_reports (machine_id) {
            machine_id -> Uuid,
            inventory -> Nullable<Jsonb>,
            inventory_at -> Nullable<Timestamptz>,
            self_test -> Nullable<Jsonb>,
            self_test_at -> Nullable<Timestamptz>,
            last_sample -> Nullable<Jsonb>,
            last_sample_at -> Nullable<Timestamptz>,
        }
    }

    diesel::joinable!(listing_periods -> machines (machine_id));
    diesel::joinable!(heartbeat_gaps -> machines (machine_id));
    diesel::joinable!(agent_reports -> machines (machine_id));
    diesel::allow_tables_to_appear_in_same_query!(
        machines,
        listing_periods,
        heartbeat_gaps,
        agent_reports
    );
}

pub mod ordering {
    diesel::table! {
        use diesel::sql_types::*;

        ordering.orders (id) {
            id -> Uuid,
            tenant_id -> Uuid,
            user_id -> Uuid,
            idempotency_key -> Text,
            request_fingerprint -> Text,
            offer_id -> Nullable<Uuid>,
            machine_id -> Nullable<Uuid>,
            gpu_count -> Int4,
            max_price_per_gpu_hour -> Nullable<Numeric>,
            price_per_gpu_hour -> Nullable<Numeric>,
            currency -> Nullable<Text>,
            rental_type -> Text,
            state -> Text,
            failure_code -> Nullable<Text>,
            failure_reason -> Nullable<Text>,
            created_at -> Timestamptz,
            updated_at -> Timestamptz,
            bid_per_gpu_hour -> Nullable<Numeric>,
            constraints -> Nullable<Jsonb>,
            gpu_model -> Nullable<Text>,
            expired_at -> Nullable<Timestamptz>,
            holdings_released_at -> Nullable<Timestamptz>,
            disk_gib -> Nullable<Int4>,
            mig_profile -> Nullable<Text>,
            gpu_eighths -> Nullable<Int4>,
            planned_instance_id -> Nullable<Uuid>,
            reservation_id -> Nullable<Uuid>,
        }
    }

    diesel::table! {
        use diesel::sql_types::*;

        ordering.instances (id) {
            id -> Uuid,
            order_id -> Uuid,
            tenant_id -> Uuid,
            host_tenant_id -> Uuid,
            machine_id -> Uuid,
            gpu_model -> Text,
            gpu_count -> Int4,
            rental_type -> Text,
            price_per_gpu_hour -> Numeric,
            currency -> Text,
            image -> Text,
            ssh_public_key -> Nullable<Text>,
            state -> Text,
            status_reason -> Nullable<Text>,
            version -> Int4,
            run_seq -> Int4,
            running_at -> Nullable<Timestamptz>,
            stopped_at -> Nullable<Timestamptz>,
            created_at -> Timestamptz,
            updated_at -> Timestamptz,
            storage_price_per_gb_month -> Numeric,
            bandwidth_up_price_per_tb -> Numeric,
            bandwidth_down_price_per_tb -> Numeric,
            preempted_at -> Nullable<Timestamptz>,
            failed_machine_ids -> Array<Uuid>,
            disk_gib -> Nullable<Int4>,
            command -> Nullable<Jsonb>,
            env -> Jsonb,
            ports -> Array<Int4>,
            connection -> Nullable<Jsonb>,
            disk_used_bytes -> Nullable<Int8>,
            disk_measured_at -> Nullable<Timestamptz>,
            gpu_indices -> Array<Int4>,
            mig_profile -> Nullable<Text>,
            mig_slice -> Nullable<Jsonb>,
            reservation_id -> Nullable<Uuid>,
            continue_up_to_per_gpu_hour -> Nullable<Numeric>,
        }
    }

    // Migration 000013: preempted allocations by holding key.
    diesel::table! {
        use diesel::sql_types::*;

        ordering.preemptions (allocation_key) {
            allocation_key -> Uuid,
            instance_id -> Nullable<Uuid>,
            machine_id -> Uuid,
            preempted_at -> Timestamptz,
            reason -> Text,
            recorded_at -> Timestamptz,
        }
    }

    diesel::table! {
        use diesel::sql_types::*;

        ordering.instance_transitions (id) {
            id -> Int8,
            instance_id -> Uuid,
            from_state -> Nullable<Text>,
            to_state -> Text,
            reason -> Nullable<Text>,
            at -> Timestamptz,
        }
    }
    diesel::table! {
        use diesel::sql_types::*;

        ordering.instance_events (id) {
            id -> Int8,
            instance_id -> Uuid,
            seq -> Int4,
            kind -> Text,
            from_state -> Nullable<Text>,
            to_state -> Nullable<Text>,
            reason -> Nullable<Text>,
            detail -> Nullable<Jsonb>,
            snapshot -> Jsonb,
            dedupe_key -> Nullable<Text>,
            at -> Timestamptz,
        }
    }

    diesel::table! {
        use diesel::sql_types::*;

        ordering.instance_rules (instance_id) {
            instance_id -> Uuid,
            max_duration_seconds -> Nullable<Int8>,
            idle_stop_after_seconds -> Nullable<Int8>,
            idle_threshold_percent -> Nullable<Int4>,
            auto_destroy_after_stopped_seconds -> Nullable<Int8>,
            updated_at -> Timestamptz,
        }
    }
    diesel::joinable!(instances -> orders (order_id));
    diesel::joinable!(instance_transitions -> instances (instance_id));
    diesel::joinable!(instance_events -> instances (instance_id));
    diesel::joinable!(instance_rules -> instances (instance_id));
    diesel::allow_tables_to_appear_in_same_query!(
        orders,
        instances,
        instance_transitions,
        instance_events,
        instance_rules
    );
}

pub mod metering {
    diesel::table! {
        use diesel::sql_types::*;

        metering.intervals (id) {
            id -> Uuid,
            instance_id -> Uuid,
            tenant_id -> Uuid,
            host_tenant_id -> Nullable<Uuid>,
            meter -> Text,
            run_seq -> Int4,
            started_at -> Nullable<Timestamptz>,
            ended_at -> Nullable<Timestamptz>,
            seconds -> Nullable<Int8>,
            gpu_count -> Nullable<Int4>,
            price_per_hour -> Nullable<Numeric>,
            currency -> Nullable<Text>,
            recorded_at -> Nullable<Timestamptz>,
            created_at -> Timestamptz,
            settled_seconds -> Int8,
            machine_id -> Nullable<Uuid>,
            gpu_model -> Nullable<Text>,
            disk_gib -> Nullable<Int4>,
            unit_price -> Nullable<Numeric>,
            correlation_id -> Nullable<Text>,
        }
    }
}

pub mod billing {
    diesel::table! {
        use diesel::sql_types::*;

        billing.accounts (id) {
            id -> Uuid,
            kind -> Text,
            tenant_id -> Nullable<Uuid>,
            currency -> Text,
            balance -> Numeric,
            created_at -> Timestamptz,
        }
    }

    diesel::table! {
        use diesel::sql_types::*;

        billing.transactions (id) {
            id -> Text,
            kind -> Text,
            tenant_id -> Nullable<Uuid>,
            instance_id -> Nullable<Uuid>,
            fee_rate -> Nullable<Numeric>,
            description -> Text,
            created_at -> Timestamptz,
        }
    }

    diesel::table! {
        use diesel::sql_types::*;

        billing.entries (id) {
            id -> Int8,
            transaction_id -> Text,
            account_id -> Uuid,
            amount -> Numeric,
            created_at -> Timestamptz,
        }
    }
    diesel::joinable!(entries -> transactions (transaction_id));
    diesel::joinable!(entries -> accounts (account_id));
    diesel::allow_tables_to_appear_in_same_query!(accounts, transactions, entries);
}

pub mod billing_credits;
pub mod billing_escrow;
pub mod billing_invoices;
pub mod billing_payouts;
pub mod billing_spend;
pub mod billing_stripe;
pub mod meters;
pub mod provisioner;
