//! Every sentence the command line says to its user: errors, warnings and
//! notes. Tables and JSON are rendered by each command's `report` module
//! from these words and the numbers.
//!
//! Errors come in two kinds, with their own exit codes:
//! [`UsageError`] (exit 2, as clap's own): the command line asks for
//! something that cannot be run; anything else (exit 1): the run failed (a
//! file cannot be written, the target cannot be reached).
//!
//! This module takes plain values (names, numbers, the library's errors) and
//! imports nothing of its callers, so that no module cycle runs through it.

use std::fmt;
use std::path::Path;

use tollgate::QuotaError;

/// Exit code of a usage error, the same as clap's.
pub const USAGE_EXIT_CODE: u8 = 2;

/// A command line that cannot be run as given.
#[derive(Debug)]
#[non_exhaustive]
pub enum UsageError {
    /// A number out of its range: `what` must be `must`, got `got`.
    OutOfRange {
        /// The option.
        what: &'static str,
        /// What it must be.
        must: &'static str,
        /// What was given.
        got: String,
    },
    /// A duration of zero where time must pass.
    ZeroDuration {
        /// The option.
        what: &'static str,
    },
    /// An algorithm cannot run this quota.
    Quota {
        /// The algorithm, as named on the command line.
        algorithm: &'static str,
        /// Why, from the library.
        error: QuotaError,
    },
    /// The quota itself is invalid.
    BadQuota(QuotaError),
    /// The run would hold too many arrivals in memory.
    TooManyArrivals {
        /// The most allowed.
        max: u64,
    },
    /// The concurrency simulation would hold too many events in memory.
    TooManyEvents {
        /// The most arrivals allowed.
        max: u64,
    },
    /// More warm connections than the run can use.
    TooManyConnections {
        /// As given.
        connections: u64,
        /// The most the run can use.
        usable: u64,
        /// Why that many.
        because: String,
    },
    /// The CSV file of arrivals cannot be used.
    Csv {
        /// The file.
        path: String,
        /// Why.
        error: CsvError,
    },
    /// The URL cannot be loaded.
    BadUrl {
        /// As given.
        url: String,
        /// Why.
        reason: String,
    },
    /// A `-H` header is not `Name: value`, or not a valid header.
    BadHeader {
        /// As given.
        header: String,
    },
    /// A `-H` header contradicts what loadgen itself sends.
    ConflictingHeader {
        /// The header's name.
        name: String,
        /// Why.
        reason: String,
    },
    /// The method is not a valid HTTP method.
    BadMethod {
        /// As given.
        method: String,
    },
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UsageError::OutOfRange { what, must, got } => {
                write!(f, "{what} must be {must}, got {got}")
            }
            UsageError::ZeroDuration { what } => write!(f, "{what} must be longer than zero"),
            UsageError::Quota { algorithm, error } => {
                write!(
                    f,
                    "the {algorithm} algorithm cannot run this quota: {error}"
                )
            }
            UsageError::BadQuota(error) => write!(f, "invalid quota: {error}"),
            UsageError::TooManyArrivals { max } => write!(
                f,
                "the pattern would hold more than the {max} arrivals a simulation keeps in memory: lower --rate or --duration (or lengthen --period for the burst and sawtooth)"
            ),
            UsageError::TooManyEvents { max } => write!(
                f,
                "the run would hold more than the {max} arrivals a simulation keeps in memory: lower --rate or --duration"
            ),
            UsageError::TooManyConnections {
                connections,
                usable,
                because,
            } => write!(
                f,
                "--connections {connections} opens more connections than this run can use: at most {usable} ({because}); connections beyond the warm ones open on demand up to --max-connections"
            ),
            UsageError::Csv { path, error } => write!(f, "cannot use {path}: {error}"),
            UsageError::BadUrl { url, reason } => write!(f, "cannot load {url:?}: {reason}"),
            UsageError::BadHeader { header } => {
                write!(
                    f,
                    "invalid header {header:?}: expected `Name: value` with a valid header name and value"
                )
            }
            UsageError::ConflictingHeader { name, reason } => write!(
                f,
                "header {name:?} (-H) cannot be sent as given: {reason}; every request would be refused by the target, so the run does not start"
            ),
            UsageError::BadMethod { method } => write!(f, "invalid HTTP method {method:?}"),
        }
    }
}

impl std::error::Error for UsageError {}

impl UsageError {
    /// `what` must be `must`, but `got` was given.
    pub fn out_of_range(what: &'static str, must: &'static str, got: impl ToString) -> UsageError {
        UsageError::OutOfRange {
            what,
            must,
            got: got.to_string(),
        }
    }
}

/// Why a CSV file of timestamps cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CsvError {
    /// No timestamp at all.
    Empty,
    /// A line whose first column is not a timestamp.
    BadTimestamp {
        /// The 1-based line number.
        line: usize,
        /// The field.
        text: String,
        /// Why it was refused.
        reason: &'static str,
    },
}

impl fmt::Display for CsvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CsvError::Empty => write!(f, "no timestamp in the file"),
            CsvError::BadTimestamp { line, text, reason } => write!(
                f,
                "line {line}: {text:?} is not a timestamp in seconds ({reason})"
            ),
        }
    }
}

impl std::error::Error for CsvError {}

/// Writes a command's result to stdout; a closed pipe (`| head`) is not
/// an error, anything else is.
pub fn print_result(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// clap's message for an unparsable duration.
pub fn bad_duration(text: &str, error: &humantime::DurationError) -> String {
    format!("{text:?} is not a duration such as 30s, 500ms or 1m ({error})")
}

/// clap's message for a duration written negative.
pub fn negative_duration(text: &str) -> String {
    format!("{text:?} is negative: a duration is zero or more, such as 30s or 500ms")
}

/// A file could not be read.
pub fn cannot_read(path: &Path) -> String {
    format!("cannot read {}", path.display())
}

/// A file could not be written.
pub fn cannot_write(path: &Path) -> String {
    format!("cannot write {}", path.display())
}

/// The picture could not be drawn.
pub fn cannot_draw(path: &Path, error: &dyn fmt::Display) -> String {
    format!("cannot draw {}: {error}", path.display())
}

/// The target could not be resolved or reached before the run.
pub fn cannot_reach(authority: &str) -> String {
    format!("cannot reach {authority}")
}

/// The name lookup of the target failed: why, from the resolver.
pub fn lookup_failed(error: &std::io::Error) -> String {
    format!("the name lookup failed ({error}); is the host a valid name or IP address?")
}

/// The name lookup of the target answered no address.
pub fn no_address() -> String {
    "the name lookup answered no address".to_owned()
}

/// The name lookup was given up after `--timeout`.
pub fn lookup_timed_out(timeout: std::time::Duration) -> String {
    format!(
        "the name lookup timed out after {} (--timeout)",
        humantime::format_duration(timeout)
    )
}

/// A warm-up still opening connections.
pub fn warming_up(opened: usize, connections: usize) -> String {
    format!("note: {opened} of {connections} warm connections open; the clock starts once all are")
}

/// The pictures written.
pub fn wrote(paths: &[&Path]) -> String {
    let names: Vec<String> = paths
        .iter()
        .map(|path| path.display().to_string())
        .collect();
    format!("wrote {}", names.join(" and "))
}

/// Arrivals of a CSV file beyond `--duration` that were left out.
pub fn csv_beyond_duration(left_out: usize) -> String {
    format!("note: {left_out} timestamps at or after --duration were left out")
}

/// A connect given up after `--timeout`.
pub fn connect_timed_out(timeout: std::time::Duration) -> String {
    format!(
        "connect: timed out after {} (--timeout)",
        humantime::format_duration(timeout)
    )
}

/// No request of the run succeeded: the run failed.
pub fn nothing_succeeded(statuses: &[(u16, u64)], errors: &[(&str, u64)]) -> String {
    let mut seen: Vec<String> = statuses
        .iter()
        .map(|(status, count)| format!("{count} answered {status}"))
        .collect();
    seen.extend(errors.iter().map(|(kind, count)| format!("{count} {kind}")));
    if seen.is_empty() {
        seen.push("no request was sent".to_owned());
    }
    format!(
        "error: no request succeeded (no answer with a status below 400): {}",
        seen.join(", ")
    )
}

/// Timed-out requests are in the percentiles at the timeout.
pub fn timeouts_counted(count: u64, timeout: std::time::Duration) -> String {
    format!(
        "warning: {count} requests timed out; they count in the percentiles at the timeout ({}), a lower bound of their latency",
        humantime::format_duration(timeout)
    )
}

/// Failed requests without a latency, left out of the percentiles.
pub fn failures_left_out(count: u64) -> String {
    format!(
        "warning: {count} requests failed without an answer (see errors): they are not in the percentiles"
    )
}

/// Sends after the schedule's end, not counted in the rate.
pub fn sent_after_schedule(count: u64) -> String {
    format!(
        "note: {count} requests were sent after the schedule's end (they waited for a connection): not counted in the achieved rate"
    )
}

/// The percentiles have nothing to show.
pub const NO_DATA: &str = "no data";

/// The run was interrupted by Ctrl-C: the figures cover what was sent.
pub const INTERRUPTED: &str =
    "interrupted by Ctrl-C: the figures cover only the requests due before it";

/// Requests were dropped: the open model did not hold.
pub fn dropped(dropped: u64, max_connections: u64) -> String {
    format!(
        "warning: {dropped} requests were due while all {max_connections} connections were busy and were not sent (raise --max-connections, or the server is slower than the rate)"
    )
}

/// Requests still unanswered when the run ended.
pub fn unfinished(count: u64) -> String {
    format!("warning: {count} requests were still unanswered when the run ended")
}

/// What the "bound" column means, under the simulate table.
pub const BOUND_NOTE: &str = "max/T: the most admitted in any half-open window [t, t+T) of one period, at any start; bound: what the algorithm promises (fixed and sliding window 2·limit over [t, t+T), limit on aligned windows; sliding log limit over [t, t+T); GCRA burst + limit over closed windows [t, t+T], marked *: the burst at t and the permit earned exactly at t+T, one more than a half-open window can hold); aligned: the most in an aligned window (fixed: [kT, (k+1)T), sliding window: T from a slot boundary)";

/// How a bound's windows are written beside it.
pub fn bound_windows(closed: bool) -> &'static str {
    if closed {
        "closed windows [t, t+T]"
    } else {
        "windows [t, t+T)"
    }
}

/// The server is up.
pub fn serving(grpc: std::net::SocketAddr, http: std::net::SocketAddr) -> String {
    format!(
        "tollgate: serving Envoy RLS (gRPC) on {grpc} and the HTTP API on {http}; Ctrl-C or SIGTERM stops"
    )
}

/// `serve` with neither `--config` nor envoyproxy/ratelimit's environment.
pub fn serve_needs_config() -> String {
    "serve needs --config FILE (or envoyproxy/ratelimit's environment variables, such as RUNTIME_ROOT and REDIS_URL: see the README's \"Replacing envoyproxy/ratelimit\")".into()
}
