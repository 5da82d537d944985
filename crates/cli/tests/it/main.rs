//! The command's integration tests, one binary: each file below is a module
//! (a test's name starts with its file's, `serve::…`), so that the crate and
//! its dev-dependencies are linked once, not once a file. Each test runs the
//! `tollgate` binary in a process of its own, on its own free port.
//!
//! Run one file's tests with a filter on its module:
//! `cargo test -p tollgate-cli --test it -- serve::`.
//!
//! `tests/loadgen.rs` stays a binary of its own: its load runs hold a rate
//! in real time on the machine's cores, one run at a time, and must not
//! share the process with tests that run beside them.

#[path = "../support/mod.rs"]
mod support;

mod lyft_env;
mod serve;
mod simulate;
