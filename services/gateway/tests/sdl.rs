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

/// What the API deprecates, with each replacement, as one reviewed snapshot
/// (`tests/snapshots/`): a field is deprecated or undeprecated only on
/// purpose (api-specs/README.md, "Evolving the GraphQL API").
#[test]
fn deprecations_are_as_snapshotted() {
    let sdl = gpumarket_gateway::sdl();
    let mut owner = "";
    let mut deprecated = Vec::new();
    for line in sdl.lines() {
        if let Some(rest) = line
            .strip_prefix("type ")
            .or_else(|| line.strip_prefix("input "))
            .or_else(|| line.strip_prefix("interface "))
        {
            owner = rest.split_whitespace().next().unwrap_or_default();
        }
        if let Some((field, reason)) = line.trim().split_once(" @deprecated(reason: ") {
            let name = field.split([':', '(']).next().unwrap_or_default();
            deprecated.push(format!("{owner}.{name}: {}", reason.trim_end_matches(')')));
        }
    }
    deprecated.sort();
    insta::assert_snapshot!("deprecations", deprecated.join("\n"));
}
