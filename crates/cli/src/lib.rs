//! The `tollgate` command line: `simulate` draws what each algorithm
//! admits, `loadgen` holds a request rate against an HTTP service, `serve`
//! runs the rate-limit server (`tollgate-server`); `completions` and `man`
//! print what [`generate`] derives from the command line's definition.
//!
//! The binary's `main` only calls [`run`]. The crate is a library as well so
//! that its tests and benchmarks share the pieces they need: the exact send
//! [`schedule`] and the [`noop`] HTTP server.
//!
//! Layout: [`cli`] is the command line as plain data (clap); each command's
//! module validates it into a configuration that builds the objects and
//! runs; [`messages`] holds every sentence said to the user.

pub mod cli;
pub mod generate;
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
        Command::Completions(args) => {
            generate::completions(args.shell, &mut std::io::stdout().lock());
            Ok(ExitCode::SUCCESS)
        }
        Command::Man(args) => match args.out_dir {
            Some(dir) => generate::man_pages(&dir).map(|()| ExitCode::SUCCESS),
            None => generate::man_page(&mut std::io::stdout().lock())
                .map(|()| ExitCode::SUCCESS)
                .map_err(anyhow::Error::from),
        },
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
