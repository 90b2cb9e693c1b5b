//! `embed_migrations!` reads the migrations directory at compile time, but
//! cargo does not know that: without this, a new migration folder is not
//! embedded until something else in the crate changes.
//!
//! It also gives the crate a fingerprint of the migrations
//! (`GPUMARKET_MIGRATIONS_HASH`, FNV-1a over every file's path and
//! contents), which names the tests' migrated template database
//! (`db::create_migrated_database`): a changed migration gets a new one.

use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
    let root = Path::new("../../migrations");
    let mut all = Vec::new();
    files(root, &mut all);
    all.sort();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for path in &all {
        feed(
            path.strip_prefix(root)
                .unwrap_or(path)
                .to_string_lossy()
                .as_bytes(),
        );
        feed(&std::fs::read(path).unwrap_or_default());
    }
    println!("cargo:rustc-env=GPUMARKET_MIGRATIONS_HASH={hash:016x}");
}
