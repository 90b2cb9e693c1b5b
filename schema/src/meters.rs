//! Storage and bandwidth meters (migration 000022): the traffic counter
//! samples metering turns into bandwidth usage.

diesel::table! {
    use diesel::sql_types::*;

    metering.traffic_samples (instance_id, boot_id, seq) {
        instance_id -> Uuid,
        boot_id -> Uuid,
        seq -> Int8,
        machine_id -> Uuid,
        sent_at -> Timestamptz,
        tx_bytes -> Int8,
        rx_bytes -> Int8,
        received_at -> Timestamptz,
        screened -> Bool,
        upload_mbps -> Nullable<Int4>,
        download_mbps -> Nullable<Int4>,
    }
}
