//! The core's integration tests, one binary: each file below is a module
//! (a test's name starts with its file's, `keyed::…`), so that the crate and
//! its dev-dependencies are linked once, not once a file.
//!
//! Run one file's tests with a filter on its module:
//! `cargo test -p tollgate --test it -- keyed::`.
//!
//! The tests share the process: none installs a global (allocator, metrics
//! recorder, tracing subscriber) or sets an environment variable; the
//! observers' tests use a local recorder and a thread's default subscriber.
//! What needs the process alone stays a binary of its own:
//! `tests/keyed_memory.rs` counts every allocation of the process.
//!
//! Property tests keep their known failing cases where proptest looks for a
//! file of a binary rooted at `main.rs`: `tests/it/foo.rs`'s in
//! `tests/proptest-regressions/foo.txt` (`properties/warm_up.rs`'s in
//! `tests/proptest-regressions/properties/warm_up.txt`).

mod support;

mod clock;
mod compact_keyed;
mod concurrency;
mod concurrency_limit;
mod concurrency_limit_adaptive;
mod concurrency_limit_async;
mod concurrency_limit_properties;
mod control;
mod control_properties;
mod edges;
mod keyed;
mod keyed_clock_back;
mod keyed_control;
mod keyed_inline_keys;
mod keyed_properties;
mod knee_properties;
mod observe;
mod properties;
mod shaper;
mod striped;
mod vectors;
// Async waiting needs the `tokio` feature (`cargo test --all-features`).
#[cfg(feature = "tokio")]
mod waiting_async;
