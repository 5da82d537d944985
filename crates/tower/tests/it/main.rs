//! The tower layer's integration tests, one binary: each file below is a
//! module (a test's name starts with its file's, `spoofing::…`), so that the
//! crate and its dev-dependencies (axum, hyper, tonic) are linked once, not
//! once a file.
//!
//! Run one file's tests with a filter on its module:
//! `cargo test -p tollgate-tower --all-features --test it -- server::`.
//!
//! The tests share the process and nothing global: each starts its own
//! servers and Redis on free loopback ports, and none sets an environment
//! variable or installs a global subscriber.

mod support;

mod concurrency;
mod headers;
mod observe;
mod server;
mod service;
mod spoofing;
// The Redis backend needs the `redis` feature (`cargo test --all-features`).
#[cfg(feature = "redis")]
mod concurrency_redis;
#[cfg(feature = "redis")]
mod redis;
