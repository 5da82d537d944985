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
//!
//! Without `--config`, the server runs from envoyproxy/ratelimit's
//! environment when any of its variables is set (see
//! `tollgate_server::config::lyft_env`: `HOST`, `PORT`, `LOG_LEVEL` and
//! `LOG_FORMAT` alone do not count, being common in containers), with its
//! `LOG_LEVEL` and `LOG_FORMAT`: JSON lines are then shaped as its
//! logrus writes them (`@timestamp`, `@message`, `level`: see
//! [`crate::logrus`]), and its `debug` keeps the HTTP/2 and gRPC
//! libraries at `info` (their frame logs would flood it) unless `RUST_LOG`
//! asks otherwise. With none set, `serve` asks for
//! `--config` as it always did. A refused variable is named, and exits 1
//! before anything is bound.
//!
//! `--compact-keys N` turns on the in-memory backend's compact tables
//! over the file's `server.compact_keys` or `TOLLGATE_COMPACT_KEYS` (see
//! `tollgate_server::config::compact_keys`); under Redis it is refused
//! before anything is bound.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use tracing_subscriber::EnvFilter;

use tollgate_server::config::lyft_env::{Env, LyftSettings, is_lyft_environment};

use crate::cli::{LogFormat, ServeArgs};
use crate::messages;

/// Runs the server described by `args.config` (or by envoyproxy/ratelimit's
/// environment) until it is told to stop.
pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let lyft = match &args.config {
        Some(_) => None,
        None => Some(lyft_settings()?),
    };
    // Lyft's LOG_LEVEL / LOG_FORMAT when run from its environment
    // (RUST_LOG still wins); `--log-format json` always asks for JSON.
    let default_filter = lyft.as_ref().map_or("info", |l| l.log.filter.as_str());
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let json =
        matches!(args.log_format, LogFormat::Json) || lyft.as_ref().is_some_and(|l| l.log.json);
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A subscriber set earlier (tests calling `run` twice) is kept.
    let _ = if json && lyft.is_some() {
        logs.with_ansi(false)
            .event_format(crate::logrus::Logrus)
            .try_init()
    } else if json {
        logs.json()
            .with_ansi(false)
            .with_current_span(true)
            .try_init()
    } else {
        logs.with_ansi(std::io::stderr().is_terminal()).try_init()
    };
    let server = match (&args.config, &lyft) {
        (Some(path), _) => {
            tollgate_server::Server::from_config_file(path).map_err(anyhow::Error::from)
        }
        (None, Some(settings)) => {
            tollgate_server::Server::from_lyft_settings(settings).map_err(anyhow::Error::from)
        }
        (None, None) => unreachable!("read above"),
    };
    // `--compact-keys` over the file's or the environment's.
    let server = server.map(|server| match args.compact_keys {
        Some(keys) => server.with_compact_keys(keys),
        None => server,
    });
    match server.and_then(|server| serve(server, json)) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(error) if json => {
            // The caller prints an error as text: as an event instead.
            tracing::error!(error = %format!("{error:#}"), "tollgate: {error:#}");
            Ok(ExitCode::FAILURE)
        }
        Err(error) => Err(error),
    }
}

/// envoyproxy/ratelimit's environment, when `serve` has no `--config`.
fn lyft_settings() -> anyhow::Result<LyftSettings> {
    let env = Env::from_process();
    if !is_lyft_environment(&env) {
        anyhow::bail!("{}", messages::serve_needs_config());
    }
    Ok(LyftSettings::read(&env)?)
}

fn serve(server: tollgate_server::Server, json: bool) -> anyhow::Result<()> {
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
