//! The command line as plain data, exactly as typed: clap parses it here,
//! and each command's `config` module validates it into the objects that
//! run. Nothing here judges a value beyond its type, so that every "this
//! makes no sense" message comes from one place ([`crate::messages`]).
//!
//! Numbers that a user could type negative are parsed as signed or floating
//! types (with negative numbers allowed) so that `--rate -5` reaches the
//! validation and gets a sentence, not clap's "unexpected argument".

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// tollgate: rate limiting, measured.
#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about, propagate_version = true)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay a traffic pattern against every algorithm on a manual clock,
    /// print what each admits and draw it (SVG and PNG).
    Simulate(SimulateArgs),
    /// Send HTTP requests at a fixed rate (open model), with latency measured
    /// from each request's intended send time.
    Loadgen(LoadgenArgs),
    /// Run the rate-limit server: Envoy's rate limit service (gRPC) and an
    /// HTTP JSON API, with the rules of a YAML file (reloaded on change).
    Serve(ServeArgs),
    /// Print the completion script of a shell (bash, zsh, fish, elvish,
    /// powershell), generated from this command line.
    Completions(CompletionsArgs),
    /// Print the tollgate(1) man page in roff, or write a page per command
    /// into a directory.
    Man(ManArgs),
}

/// `tollgate completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell whose completion script to print.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `tollgate man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write tollgate.1 and tollgate-COMMAND.1 for every command into DIR
    /// instead of printing tollgate.1.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// `tollgate serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The rules and settings (envoyproxy/ratelimit's YAML, extended).
    /// Without it, the server runs from envoyproxy/ratelimit's environment
    /// variables and config directory (`RUNTIME_ROOT`, `REDIS_URL`, …).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Serve every rule of one value-less entry under one GCRA or fixed
    /// window from compact tables of N keys each (in memory only), over
    /// the file's `server.compact_keys` or `TOLLGATE_COMPACT_KEYS`. By
    /// default, off.
    #[arg(long, value_name = "N")]
    pub compact_keys: Option<tollgate_server::config::compact_keys::CompactKeys>,
    /// How logs are written to stderr: `text` for people (coloured only on
    /// a terminal), `json` for log shippers (one object per line).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// The formats of `serve`'s logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One line per event, for people; ANSI colours only when stderr is a
    /// terminal.
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields`, `target`,
    /// `span`, `spans`), for log shippers; never coloured.
    Json,
}

/// `tollgate simulate`.
#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct SimulateArgs {
    /// Algorithms to run (repeat or separate with commas). By default, all.
    #[arg(long = "algorithm", short = 'a', value_enum, value_delimiter = ',')]
    pub algorithms: Vec<AlgorithmName>,
    /// Permits per period, the same for every algorithm.
    #[arg(long, default_value_t = 10)]
    pub limit: i64,
    /// The quota's period (e.g. 1s, 500ms, 1m).
    #[arg(long, default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub period: Duration,
    /// Burst of the token bucket (GCRA). By default, the limit.
    #[arg(long)]
    pub burst: Option<i64>,
    /// Slots of the sliding window counter.
    #[arg(long, default_value_t = 10)]
    pub slots: i64,
    /// Warm-up period of the warm-up algorithm (a cold start ramps to the
    /// rate over it). By default, 3 periods.
    #[arg(long, value_parser = parse_duration)]
    pub warmup: Option<Duration>,
    /// Cold factor of the warm-up algorithm: a cold start runs at the rate
    /// divided by it.
    #[arg(long, default_value_t = 3)]
    pub cold_factor: u32,
    /// The arrival pattern.
    #[arg(long, value_enum, default_value_t = PatternName::Spike)]
    pub pattern: PatternName,
    /// Mean offered rate, requests per second. By default, half the quota's
    /// rate.
    #[arg(long)]
    pub rate: Option<f64>,
    /// How long to simulate. By default, 6 periods (with --csv: up to the
    /// last timestamp).
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    /// Seed of the Poisson pattern.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Arrivals from a file: one timestamp per line, in seconds from the
    /// start (decimal), in the first comma-separated column; replaces
    /// --pattern.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Directory for simulate.svg and simulate.png. By default, no picture.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print the result as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Simulate the adaptive concurrency limit instead of the rate limits:
    /// Poisson arrivals (--rate, --duration, --seed) of critical, default
    /// and sheddable requests against a service of --knee workers, whose
    /// knee halves over the middle third of the run.
    #[arg(long)]
    pub concurrency: bool,
    /// With --concurrency: the service's workers (latency is flat up to
    /// this many in flight and grows past it).
    #[arg(long, default_value_t = 40)]
    pub knee: i64,
    /// With --concurrency: how long a worker spends on a request.
    #[arg(long, default_value = "20ms", value_parser = parse_duration, allow_hyphen_values = true)]
    pub service_time: Duration,
    /// With --concurrency: instead of one run, the table of every adaptive
    /// controller (the library's and models of its peers') for six shapes
    /// of service time and knees of 10 to 400 (--duration, --seed), and of
    /// limits set by hand knowing the knee, the bound of the default's
    /// policy.
    #[arg(long, requires = "concurrency")]
    pub table: bool,
    /// Simulate a token budget for LLM traffic instead of the rate limits:
    /// 100,000 tokens a minute, Poisson arrivals (--rate, by default 2 a
    /// second; --duration, by default 10 minutes; --seed) of lognormal
    /// costs, kept by check-then-charge, reserve-then-settle and a request
    /// count; tokens spent against the budget (--json, --out for a picture).
    #[arg(long, conflicts_with = "concurrency")]
    pub budget: bool,
}

/// The algorithms `simulate` can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum AlgorithmName {
    /// Token bucket, computed as GCRA.
    #[value(alias = "token-bucket")]
    Gcra,
    /// A counter per aligned window.
    FixedWindow,
    /// The times of the last `limit` admissions.
    SlidingLog,
    /// A time wheel of `--slots` slots.
    SlidingWindow,
    /// Guava's warm-up: cold at the rate / `--cold-factor`, at the rate
    /// after `--warmup` of use (not in the default set).
    WarmUp,
}

/// The synthetic arrival patterns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PatternName {
    /// Evenly spaced at the rate.
    Steady,
    /// On for the first quarter of each period at 4× the rate, then off.
    Burst,
    /// Steady at the rate, plus one period at 10× the rate centred on a
    /// window boundary in the middle of the run.
    Spike,
    /// The rate ramps from 0 to 2× over 4 periods, then drops to 0 again.
    Sawtooth,
    /// Poisson arrivals at the rate (seeded by --seed).
    Poisson,
}

/// `tollgate loadgen`.
#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct LoadgenArgs {
    /// The URL to load (http:// only).
    pub url: String,
    /// Requests per second, a whole number.
    #[arg(long)]
    pub rate: f64,
    /// How long to send (e.g. 30s).
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, required_unless_present = "requests", conflicts_with = "requests")]
    pub duration: Option<Duration>,
    /// How many requests to send.
    #[arg(long)]
    pub requests: Option<i64>,
    /// HTTP method.
    #[arg(long, short = 'X', default_value = "GET")]
    pub method: String,
    /// A request header, `Name: value` (repeatable).
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// Request body.
    #[arg(long)]
    pub body: Option<String>,
    /// Connections opened before the first request.
    #[arg(long, short = 'c', default_value_t = 8)]
    pub connections: i64,
    /// Most connections open at once; a request due when all are busy and
    /// none may be added is dropped (counted, not sent late).
    #[arg(long, default_value_t = 1024)]
    pub max_connections: i64,
    /// HTTP/2 without TLS, with prior knowledge (h2c); by default HTTP/1.1
    /// keep-alive.
    #[arg(long)]
    pub http2: bool,
    /// Streams in flight per HTTP/2 connection before another is opened.
    #[arg(long, default_value_t = 100)]
    pub streams: i64,
    /// How long after its intended time a request may wait for a free
    /// connection when the cap is reached; past that it is dropped. By
    /// default 0: dropped at once, as k6 drops iterations.
    #[arg(long, default_value = "0s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub max_send_lag: Duration,
    /// The pacer sleeps at least this long between two wakes; requests due
    /// meanwhile leave together at the next wake, at most this late (plus
    /// how late the timer wakes; measured from their intended time all the
    /// same). `auto`: the time 32 requests take at the rate, at most 1 ms;
    /// 0 wakes for every request (the most CPU).
    #[arg(long, default_value = "auto", value_parser = parse_quantum, allow_hyphen_values = true)]
    pub quantum: Quantum,
    /// A request unanswered after this long is counted as a timeout error.
    #[arg(long, default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub timeout: Duration,
    /// Print the result as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write the corrected latency distribution in HdrHistogram's
    /// percentile format to FILE (and the service time beside it, as
    /// FILE with `.service` before its extension).
    #[arg(long, value_name = "FILE")]
    pub hgrm: Option<PathBuf>,
}

/// `--quantum`: scaled to the rate, or a duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantum {
    /// Scaled to the rate (`auto`).
    Auto,
    /// This long, whatever the rate.
    Fixed(Duration),
}

fn parse_quantum(text: &str) -> Result<Quantum, String> {
    if text.trim() == "auto" {
        Ok(Quantum::Auto)
    } else {
        parse_duration(text).map(Quantum::Fixed)
    }
}

/// Durations as people write them: `30s`, `500ms`, `1m 30s`, `2h`; a
/// negative one is refused with its own sentence (the duration options take
/// values starting with `-`, so that clap does not read `-1s` as a flag and
/// suggest `-- -1`).
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err(crate::messages::negative_duration(text));
    }
    humantime::parse_duration(text).map_err(|error| crate::messages::bad_duration(text, &error))
}
