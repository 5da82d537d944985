//! The `tollgate` command line: `simulate` draws what each algorithm
//! admits, `loadgen` holds a request rate against an HTTP service, `serve`
//! runs the rate-limit server (`tollgate-server`).
//!
//! The binary's `main` only calls [`run`]. The crate is a library as well so
//! that its tests and benchmarks share the pieces they need: the exact send
//! [`schedule`] and the [`noop`] HTTP server.
//!
//! Layout: [`cli`] is the command line as plain data (clap); each command's
//! module validates it into a configuration that builds the objects and
//! runs; [`messages`] holds every sentence said to the user.

pub mod cli;
mod loadgen;
mod logrus;
pub mod messages;
pub mod noop;
pub mod schedule;
mod serve;
mod simulate;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

/// Parses the command line and runs the command; prints any error and
/// returns the process's exit code.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => simulate::run(args),
        Command::Loadgen(args) => loadgen::run(args),
        Command::Serve(args) => serve::run(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("tollgate: {error:#}");
            if error.is::<messages::UsageError>() {
                ExitCode::from(messages::USAGE_EXIT_CODE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
