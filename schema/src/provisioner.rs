//! The provisioner's schema: jobs (leased by workers), their step log, the
//! simulated machines' state, the outbox and the `agent` driver's commands.

diesel::table! {
    use diesel::sql_types::*;

    provisioner.jobs (id) {
        id -> Uuid,
        instance_id -> Uuid,
        kind -> Text,
        machine_id -> Uuid,
        payload -> Jsonb,
        status -> Text,
        attempts -> Int4,
        last_error -> Nullable<Text>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        finished_at -> Nullable<Timestamptz>,
        owner -> Nullable<Text>,
        lease_until -> Nullable<Timestamptz>,
        next_attempt_at -> Timestamptz,
        deadline -> Timestamptz,
        command -> Nullable<Jsonb>,
        routing_key -> Nullable<Text>,
        reported_at -> Nullable<Timestamptz>,
        dead_lettered_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    provisioner.job_steps (job_id, step) {
        job_id -> Uuid,
        step -> Text,
        position -> Int4,
        attempts -> Int4,
        started_at -> Timestamptz,
        finished_at -> Nullable<Timestamptz>,
        duration_ms -> Nullable<Int8>,
        last_error -> Nullable<Text>,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    provisioner.sim_resources (machine_id, kind, name) {
        machine_id -> Uuid,
        kind -> Text,
        name -> Text,
        instance_id -> Uuid,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    use diesel::sql_types::*;

    provisioner.agent_commands (command_id) {
        command_id -> Uuid,
        machine_id -> Uuid,
        instance_id -> Uuid,
        step -> Text,
        sent_at -> Timestamptz,
        answered_at -> Nullable<Timestamptz>,
        ok -> Nullable<Bool>,
        error -> Nullable<Text>,
        detail -> Nullable<Jsonb>,
        progress_count -> Int4,
    }
}

diesel::joinable!(job_steps -> jobs (job_id));
diesel::allow_tables_to_appear_in_same_query!(jobs, job_steps, sim_resources, agent_commands);
