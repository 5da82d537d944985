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
    let cli = Cli::parse_from(arguments(std::env::args_os()));
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

/// The name envoyproxy/ratelimit's binary has in its image and in Envoy
/// Gateway's Deployment (`/bin/ratelimit`, run with no arguments): under
/// it, this binary is `tollgate serve`, so that such a Deployment runs the
/// tollgate image unchanged.
pub const RATELIMIT_NAME: &str = "ratelimit";

/// The command line as clap reads it: invoked as [`RATELIMIT_NAME`], the
/// arguments are `serve`'s.
fn arguments(mut args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let Some(program) = args.next() else {
        return Vec::new();
    };
    let invoked_as_ratelimit = std::path::Path::new(&program)
        .file_name()
        .is_some_and(|name| name == RATELIMIT_NAME);
    let mut line = vec![program];
    if invoked_as_ratelimit {
        line.push("serve".into());
    }
    line.extend(args);
    line
}

#[cfg(test)]
mod tests {
    use super::arguments;

    fn line(args: &[&str]) -> Vec<String> {
        arguments(args.iter().map(Into::into))
            .into_iter()
            .map(|arg| arg.into_string().expect("UTF-8"))
            .collect()
    }

    #[test]
    fn the_ratelimit_name_serves_and_tollgate_is_unchanged() {
        assert_eq!(line(&["/bin/ratelimit"]), ["/bin/ratelimit", "serve"]);
        assert_eq!(
            line(&["ratelimit", "--config", "c.yaml"]),
            ["ratelimit", "serve", "--config", "c.yaml"]
        );
        assert_eq!(
            line(&["/bin/tollgate", "serve"]),
            ["/bin/tollgate", "serve"]
        );
        assert_eq!(line(&["/bin/ratelimit-tool"]), ["/bin/ratelimit-tool"]);
        assert_eq!(
            line(&["/opt/ratelimit/tollgate", "man"]),
            ["/opt/ratelimit/tollgate", "man"]
        );
        assert!(line(&[]).is_empty());
    }
}
