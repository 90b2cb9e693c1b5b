//! The GraphQL-over-HTTP specification's own audit (the `graphql-http`
//! package's `serverAudits`, run by node from tests/graphql-http) against the
//! gateway: every audit must pass, with no error (a MUST) and no warning (a
//! SHOULD).

use std::path::PathBuf;
use std::process::Command;

use gpumarket::dev::Parts;

use crate::harness::*;

fn run(dir: &PathBuf, program: &str, args: &[&str]) -> std::process::Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_passes_the_graphql_over_http_audit() {
    if Command::new("node").arg("--version").output().is_err() {
        // `make test` installs node (the web build needs it too); only a
        // bare `cargo test` on a machine without it gets here.
        eprintln!("SKIPPED: node is not installed, so the graphql-http audit cannot run");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/graphql-http");
    let env = TestEnv::new().await;
    let stack = env.start(Parts::ALL).await;
    let url = format!("{}/graphql", stack.gateway_url);
    let (install, audit) = tokio::task::spawn_blocking(move || {
        // The lockfile pins graphql-http and graphql; `npm ci` installs
        // exactly those.
        let install = run(&dir, "npm", &["ci", "--no-audit", "--no-fund"]);
        if !install.status.success() {
            return (install, None);
        }
        let audit = run(&dir, "node", &["audit.mjs", &url]);
        (install, Some(audit))
    })
    .await
    .unwrap();
    assert!(
        install.status.success(),
        "npm ci failed: {}",
        String::from_utf8_lossy(&install.stderr)
    );
    let audit = audit.unwrap();
    let out = String::from_utf8_lossy(&audit.stdout);
    println!("{out}");
    assert!(
        audit.status.success(),
        "the graphql-http audit found errors or warnings:\n{}\n{}",
        out.lines()
            .filter(|l| !l.starts_with("ok "))
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&audit.stderr)
    );
    drop(stack);
    env.cleanup().await;
}
