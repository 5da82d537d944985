//! The loom models, one binary: each file below is a module (a model's name
//! starts with its file's, `loom_keyed::…`), so that the core under
//! `--cfg loom` and loom are linked once, not once a file. Loom explores
//! each model within its own test; the models share nothing but the
//! process (each file's execution counters are its own statics).
//!
//! Run with
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p tollgate-loom --release --target-dir target/loom --test it
//! ```
//!
//! and one file's models with a filter on its module (`-- loom_keyed::`);
//! `-- --nocapture` prints how many interleavings each model explored.
//! Without `--cfg loom` the binary holds no test.

mod loom;
mod loom_compact;
mod loom_concurrency;
mod loom_control;
mod loom_keyed;
