//! `embed_migrations!` reads the migrations directory at compile time, but
//! cargo does not know that: without this, a new migration folder is not
//! embedded until something else in the crate changes.

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
