//! The checked-in SDL is the contract clients generate code from; it must
//! change only together with the code. `UPDATE_SDL=1` rewrites it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

fn schema_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../api-specs/graphql/schema.graphql")
}

#[test]
fn checked_in_sdl_matches_the_code() {
    let sdl = gpumarket_gateway::sdl();
    let path = schema_path();
    if std::env::var("UPDATE_SDL").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &sdl).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; run with UPDATE_SDL=1", path.display()));
    assert!(
        checked_in == sdl,
        "{} is out of date with the gateway's schema; run \
         `UPDATE_SDL=1 cargo test -p gpumarket-gateway --test sdl` and commit the result",
        path.display()
    );
}
