//! Catalog's record of each machine registration's request (in the `catalog`
//! schema), to tell a replay of `registerMachine` from a reuse of its key.

diesel::table! {
    use diesel::sql_types::*;

    catalog.machine_registrations (machine_id) {
        machine_id -> Uuid,
        request_sha256 -> Text,
    }
}
