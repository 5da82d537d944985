//! `tollgate serve`: reads the configuration, binds both APIs, and serves
//! until SIGTERM or Ctrl-C, all through `tollgate-server`.
//!
//! Logs go to stderr through `tracing` (`RUST_LOG` filters them; `info` by
//! default): as text, coloured only when stderr is a terminal (a file, a
//! pipe or a container's log driver gets no ANSI codes), or with
//! `--log-format json` as one JSON object per line, as log shippers read
//! them. With text, the line saying where the server listens is printed as
//! it is, and an error as `tollgate: …`; with JSON **every** line of stderr
//! is a JSON object, those two included (an `INFO` event with `grpc` and
//! `http` fields, an `ERROR` event with the error's whole chain), so that a
//! log pipeline never meets a line it cannot parse (decision: a JSON reader
//! that chokes on the first line loses the rest). A configuration error
//! names the file, line and field and exits 1 before anything is bound.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use tracing_subscriber::EnvFilter;

use crate::cli::{LogFormat, ServeArgs};
use crate::messages;

/// Runs the server described by `args.config` until it is told to stop.
pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A subscriber set earlier (tests calling `run` twice) is kept.
    let _ = match args.log_format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => logs
            .json()
            .with_ansi(false)
            .with_current_span(true)
            .try_init(),
    };
    let json = matches!(args.log_format, LogFormat::Json);
    match serve(&args, json) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(error) if json => {
            // The caller prints an error as text: as an event instead.
            tracing::error!(error = %format!("{error:#}"), "tollgate: {error:#}");
            Ok(ExitCode::FAILURE)
        }
        Err(error) => Err(error),
    }
}

fn serve(args: &ServeArgs, json: bool) -> anyhow::Result<()> {
    let server = tollgate_server::Server::from_config_file(&args.config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let bound = server.bind().await?;
        let (grpc, http) = (bound.grpc_addr(), bound.http_addr());
        if json {
            tracing::info!(%grpc, %http, "{}", messages::serving(grpc, http));
        } else {
            eprintln!("{}", messages::serving(grpc, http));
        }
        bound.run(tollgate_server::shutdown_signal()).await
    })?;
    Ok(())
}
