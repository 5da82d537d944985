//! The server's integration tests, one binary, against real clients on
//! 127.0.0.1: tonic's generated gRPC client, reqwest, raw HTTP/2 for
//! malformed protobuf, a headless browser, and the real reverse proxies.
//! Each file below is a module (a test's name starts with its file's,
//! `reload::…`, `forward_auth::nginx::…`), so that the server and its
//! dev-dependencies are linked once, not once a file.
//!
//! Run one file's tests with a filter on its module:
//! `cargo test -p tollgate-server --test it -- forward_auth::`.
//!
//! The tests share the process: each starts its own servers and Redis on
//! free ports; the forward-auth proxies start once for the process (see
//! `forward_auth`). The one test that needs a process alone,
//! `accept::out_of_descriptors_backs_off_and_logs`, runs this binary again
//! on one helper test (`--exact`), which lowers that process's descriptor
//! limit and installs its subscriber there.

mod shared {
    //! Shared by `support` and `lyft_env::support`.
    pub mod grpc;
    pub mod lyft_examples;
}
mod support;

mod accept;
mod admin;
mod auth;
mod backend_errors;
mod bad_input;
mod budget;
mod calendar;
mod carry;
mod concurrency;
mod concurrency_metrics;
mod conformance;
mod dashboard;
mod descriptors;
mod envoy_types;
mod health;
mod http_api;
mod lyft;
mod lyft_keys;
mod redis_backend;
mod redis_production;
mod reload;
mod status;
mod telemetry;
mod tls;
mod xds;

// Suites of their own before, with their own `support`.
mod forward_auth;
mod lyft_env;
