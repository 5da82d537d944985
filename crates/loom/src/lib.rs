//! Loom models of the core's (`tollgate`) compare-and-swap and locked
//! paths, in `tests/`: each races a few requests through a real limiter
//! under every interleaving loom explores and checks every run against the
//! algorithm's own transition, one request at a time.
//!
//! Run them all (the models compile only under `--cfg loom`):
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p tollgate-loom --release --target-dir target/loom
//! ```
//!
//! This crate has no code of its own: it keeps the models' build to the
//! core and loom.
