//! `tollgate serve`: reads the configuration, binds both APIs, and serves
//! until SIGTERM or Ctrl-C, all through `tollgate-server`.
//!
//! Logs go to stderr through `tracing` (`RUST_LOG` filters them; `info` by
//! default): as text, coloured only when stderr is a terminal (a file, a
//! pipe or a container's log driver gets no ANSI codes), or with
//! `--log-format json` as one JSON object per line, as log shippers read
//! them. The line saying where the server listens is printed as it is in
//! both cases (it is the command's output, not a log event). A configuration error names the file, line and field and exits
//! 1 before anything is bound.

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
    let server = tollgate_server::Server::from_config_file(&args.config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let bound = server.bind().await?;
        eprintln!(
            "{}",
            messages::serving(bound.grpc_addr(), bound.http_addr())
        );
        bound.run(tollgate_server::shutdown_signal()).await
    })?;
    Ok(ExitCode::SUCCESS)
}
