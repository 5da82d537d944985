//! `tollgate loadgen`: an open-model HTTP load generator that holds a rate.
//!
//! Decisions taken here (the issue left them open):
//!
//! - **Pacing** is the exact integer [`Schedule`] (GCRA with a burst of 1),
//!   held by the [`pacer`] on one thread; see there for the timer and the
//!   open model (connections added up to a cap, late requests dropped
//!   after `--max-send-lag`, 0 by default as k6).
//! - **The rate is a whole number per second**, from 1 to 10⁷: the schedule
//!   is exact for it, and fractions of a request per second are not what a
//!   load test asks.
//! - **Every run is bounded**: `--duration` or `--requests` (one of them is
//!   required), each request by `--timeout`, the end of the run by the
//!   timeout after the last send, and Ctrl-C by a 1 s grace; the partial
//!   result is printed, and the exit code is then 130.
//! - **Warm connections**: `--connections` are opened before the clock
//!   starts, so the first requests do not pay the TCP handshake; if one
//!   cannot be opened the run stops before it starts (exit 1). No more are
//!   opened than the run has requests (the others could carry nothing); a
//!   count above the process's open-file limit is refused before anything
//!   is opened, and a warm-up longer than a second says how far it got,
//!   every second.
//! - **Connecting obeys `--timeout`**: the name lookup and every connect
//!   (the warm ones too) are given up after it, so a listener that never
//!   accepts ends the run in `--timeout`, not in the kernel's minutes.
//! - **Figures**: latency from the intended send time (corrected) beside
//!   the service time from the actual send, p50 to p99.99 and max; send-lag
//!   p50/p99/max. A timed-out request counts in both distributions at its
//!   timeout (a lower bound, said on stderr); failures without an answer
//!   are counted by kind and said to be left out. With nothing to show,
//!   the percentiles read "no data" (`null` in JSON), never zero.
//! - **The achieved rate is over the schedule**: the requests sent before
//!   the schedule's end (`floor(n·10⁹ / rate)` ns for the `n` requests due)
//!   divided by that span, so a run whose server died early reports what it
//!   sent, and the rate is exact when every request leaves on time. Requests
//!   sent after the end (they waited for a connection) are counted apart.
//!   Per 100 ms window, the relative error of the sends counted against the
//!   schedule's.
//! - **Exit codes**: 0 when at least one request succeeded (answered with a
//!   status below 400); 1 when none did (the report is still printed, and a
//!   line on stderr says what happened instead) or the run could not start;
//!   2 for a command line that cannot run; 130 after Ctrl-C, with the
//!   report of what was due before it (also during the warm-up).
//! - `--timeout` and `--max-send-lag` are at most an hour (the histograms'
//!   range); every sum of durations saturates, none can panic.

mod deadline;
mod pacer;
mod pacing;
mod report;
mod stats;
mod target;
mod timer;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::{LoadgenArgs, Quantum};
use crate::messages::{self, UsageError};
use crate::schedule::Schedule;

use target::Target;

/// The highest rate accepted, per second.
const MAX_RATE: u64 = 10_000_000;
/// Exit code after Ctrl-C (128 + SIGINT), as shells report it.
const INTERRUPTED_EXIT_CODE: u8 = 130;
/// The longest `--timeout` and `--max-send-lag`: the distributions record
/// up to an hour.
const MAX_WAIT: Duration = Duration::from_secs(3_600);

/// A validated load run.
#[derive(Debug)]
pub struct Config {
    target: Target,
    schedule: Schedule,
    /// Requests in the schedule.
    requests: u64,
    connections: usize,
    max_connections: usize,
    streams: u64,
    max_send_lag: Duration,
    /// Wakes of the pacer at least this far apart ([`pacing`]).
    quantum: Duration,
    timeout: Duration,
    json: bool,
    hgrm: Option<PathBuf>,
}

impl Config {
    fn from_args(args: LoadgenArgs) -> Result<Config, UsageError> {
        let rate = args.rate;
        if !(rate.is_finite() && rate.fract() == 0.0 && rate >= 1.0 && rate <= MAX_RATE as f64) {
            return Err(UsageError::out_of_range(
                "--rate",
                "a whole number of requests per second from 1 to 10000000",
                rate,
            ));
        }
        // Exact: a whole number at most 10⁷.
        let schedule = Schedule::per_second(rate as u64)
            .ok_or_else(|| UsageError::out_of_range("--rate", "at least 1", rate))?;
        let requests = match (args.duration, args.requests) {
            (Some(duration), _) if duration.is_zero() => {
                return Err(UsageError::ZeroDuration { what: "--duration" });
            }
            (Some(duration), _) => schedule.due_before(duration),
            (None, Some(requests)) => u64::try_from(requests)
                .ok()
                .filter(|&requests| requests > 0)
                .ok_or_else(|| {
                    UsageError::out_of_range("--requests", "a whole number above zero", requests)
                })?,
            // clap requires one of the two.
            (None, None) => {
                return Err(UsageError::out_of_range(
                    "--duration or --requests",
                    "given",
                    "neither",
                ));
            }
        };
        let max_connections = usize::try_from(args.max_connections)
            .ok()
            .filter(|&max| max > 0)
            .ok_or_else(|| {
                UsageError::out_of_range(
                    "--max-connections",
                    "a whole number above zero",
                    args.max_connections,
                )
            })?;
        let connections = usize::try_from(args.connections)
            .ok()
            .filter(|&connections| connections > 0 && connections <= max_connections)
            .ok_or_else(|| {
                UsageError::out_of_range(
                    "--connections",
                    "a whole number from 1 to --max-connections",
                    args.connections,
                )
            })?;
        // A warm connection carries at least one request: more than the
        // run's requests would never be used.
        let given = connections as u64;
        let connections = connections.min(usize::try_from(requests).unwrap_or(usize::MAX));
        usable_connections(given, connections as u64)?;
        let streams = u64::try_from(args.streams)
            .ok()
            .filter(|&streams| streams > 0)
            .ok_or_else(|| {
                UsageError::out_of_range("--streams", "a whole number above zero", args.streams)
            })?;
        if args.timeout.is_zero() {
            return Err(UsageError::ZeroDuration { what: "--timeout" });
        }
        let quantum = match args.quantum {
            Quantum::Auto => pacing::auto_quantum(schedule),
            Quantum::Fixed(quantum) => quantum,
        };
        for (what, value) in [
            ("--timeout", args.timeout),
            ("--max-send-lag", args.max_send_lag),
            ("--quantum", quantum),
        ] {
            if value > MAX_WAIT {
                return Err(UsageError::out_of_range(
                    what,
                    "at most 1h (latencies are recorded up to an hour)",
                    humantime::format_duration(value),
                ));
            }
        }
        let target = Target::new(
            &args.url,
            &args.method,
            &args.headers,
            args.body.as_deref(),
            args.http2,
        )?;
        Ok(Config {
            target,
            schedule,
            requests,
            connections,
            max_connections,
            streams,
            max_send_lag: args.max_send_lag,
            quantum,
            timeout: args.timeout,
            json: args.json,
            hgrm: args.hgrm,
        })
    }
}

/// Refuses more warm connections than the process may open (
/// `--connections 1000000` opened ~70,000 sockets in silence before
/// failing): each is a file descriptor. Connections beyond the warm ones
/// open on demand, so a smaller count loses nothing.
/// `given` is the count asked for, `opened` what the run would open (no
/// more than its requests).
fn usable_connections(given: u64, opened: u64) -> Result<(), UsageError> {
    if let Some(files) = open_file_limit() {
        // Room for the runtime's own descriptors (epoll, timers, stdio).
        let usable = files.saturating_sub(FILES_KEPT);
        if opened > usable {
            return Err(UsageError::TooManyConnections {
                connections: given,
                usable,
                because: format!("this process may open {files} files: `ulimit -n`"),
            });
        }
    }
    Ok(())
}

/// Descriptors kept for other uses than connections.
const FILES_KEPT: u64 = 64;

/// The process's soft limit on open files (`RLIMIT_NOFILE`), read from
/// `/proc/self/limits`; `None` where that cannot be read, or unlimited.
fn open_file_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Runs `tollgate loadgen`.
pub fn run(args: LoadgenArgs) -> anyhow::Result<ExitCode> {
    let mut config = Config::from_args(args)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let progress = if config.json || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(config.requests);
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{wide_bar}] {pos}/{len} due ({per_sec})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    };
    let outcome = local.block_on(&runtime, async {
        let lookup = tokio::time::timeout(
            config.timeout,
            tokio::net::lookup_host(&config.target.authority),
        );
        let cannot_reach = messages::cannot_reach(&config.target.authority);
        // Each way the lookup fails says why (Regression: "cannot reach
        // 256.1.1.1" said nothing more).
        let address = match lookup.await {
            Err(_) => Err(messages::lookup_timed_out(config.timeout)),
            Ok(Err(error)) => Err(messages::lookup_failed(&error)),
            Ok(Ok(mut addresses)) => addresses.next().ok_or_else(messages::no_address),
        }
        .map_err(|reason| anyhow::anyhow!("{cannot_reach}: {reason}"))?;
        config.target.address = Some(address);
        pacer::run(&config, config.target.clone(), &progress).await
    })?;
    progress.finish_and_clear();

    let summary = report::Summary::new(&config, &outcome);
    if config.json {
        messages::print_result(&(summary.json()? + "\n"))?;
    } else {
        messages::print_result(&summary.table())?;
    }
    for warning in summary.warnings() {
        eprintln!("{warning}");
    }
    if let Some(path) = &config.hgrm {
        std::fs::write(path, stats::hgrm(&outcome.recorder.latency))
            .with_context(|| messages::cannot_write(path))?;
        let service = report::service_hgrm_path(path);
        std::fs::write(&service, stats::hgrm(&outcome.recorder.service))
            .with_context(|| messages::cannot_write(&service))?;
    }
    Ok(if outcome.interrupted {
        ExitCode::from(INTERRUPTED_EXIT_CODE)
    } else if outcome.recorder.succeeded() == 0 {
        let statuses: Vec<(u16, u64)> = outcome.recorder.statuses.clone().into_iter().collect();
        let errors: Vec<(&str, u64)> = outcome.recorder.errors.clone().into_iter().collect();
        eprintln!("{}", messages::nothing_succeeded(&statuses, &errors));
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
