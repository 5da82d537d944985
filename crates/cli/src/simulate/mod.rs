//! `tollgate simulate`: the same arrivals against every algorithm, on a
//! manual clock, with the same quota.
//!
//! Decisions taken here:
//!
//! - Each arrival asks for one permit at its instant; the clock is set to
//!   the instant, then the library's `Limiter::check` decides. Nothing is
//!   decided by the simulator itself, so what it prints is what the library
//!   does.
//! - "The most admitted in any window" is exact: a two-pointer sweep over
//!   the admission instants with half-open windows of one period (see
//!   [`window`]); it is compared with the bound the algorithm's docs state
//!   for a window of one period, and, for the fixed and sliding window, the
//!   most in an aligned window with its tighter bound.
//! - By default the offered rate is half the quota's, on the spike pattern,
//!   for 6 periods: below the quota except for one period at 10× centred
//!   on a window boundary, the case where the algorithms differ most (the
//!   fixed window admits up to twice its limit across the boundary, the
//!   sliding log never more than its limit, the token bucket its burst and
//!   then its rate).
//! - A simulation keeps its arrivals in memory: more than 5 million is
//!   refused with a message rather than allowed to exhaust it. The count is
//!   exact for every pattern and computed before anything is generated
//!   (checked arithmetic, in time bounded by the cap), so a tiny rate, a
//!   partial burst cycle or the longest duration can neither slip past the
//!   cap nor be refused while under it.
//! - Durations are whole nanoseconds in a `u64`: `--period` and
//!   `--duration` above 584 years are refused, never saturated.

mod algorithms;
mod budget;
mod concurrency;
mod pattern;
mod plot;
mod report;
mod window;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tollgate::Quota;

use crate::cli::{AlgorithmName, SimulateArgs};
use crate::messages::{self, UsageError};

use algorithms::{Bounds, Built, Warm};
use pattern::Synthetic;

/// The most arrivals a simulation holds.
const MAX_ARRIVALS: u64 = 5_000_000;

/// Where the arrivals come from.
#[derive(Debug)]
enum Source {
    /// A pattern, and exactly how many arrivals it holds.
    Synthetic {
        synthetic: Synthetic,
        count: u64,
    },
    Csv {
        path: PathBuf,
        times: Vec<u64>,
    },
}

/// A validated simulation.
#[derive(Debug)]
struct Config {
    quota: Quota,
    slots: u32,
    algorithms: Vec<(AlgorithmName, Built)>,
    source: Source,
    duration: u64,
    out: Option<PathBuf>,
    json: bool,
}

impl Config {
    fn from_args(args: SimulateArgs) -> anyhow::Result<Config> {
        let limit = positive(args.limit, "--limit")?;
        let burst = match args.burst {
            Some(burst) => positive(burst, "--burst")?,
            None => limit,
        };
        let slots = u32::try_from(args.slots)
            .ok()
            .filter(|&slots| slots > 0)
            .ok_or_else(|| {
                UsageError::out_of_range(
                    "--slots",
                    "a whole number from 1 to 4294967295",
                    args.slots,
                )
            })?;
        duration_nanos(args.period, "--period")?;
        if args.period.is_zero() {
            return Err(UsageError::ZeroDuration { what: "--period" }.into());
        }
        let quota = Quota::new(limit, args.period)
            .and_then(|quota| quota.with_burst(burst))
            .map_err(UsageError::BadQuota)?;
        let period = quota.period_nanos();

        let mut names = if args.algorithms.is_empty() {
            vec![
                AlgorithmName::Gcra,
                AlgorithmName::FixedWindow,
                AlgorithmName::SlidingLog,
                AlgorithmName::SlidingWindow,
            ]
        } else {
            args.algorithms
        };
        names.sort_unstable();
        names.dedup();
        if args.cold_factor == 0 {
            return Err(UsageError::out_of_range(
                "--cold-factor",
                "a whole number from 1 to 4294967295",
                args.cold_factor,
            )
            .into());
        }
        let warm = Warm {
            period: args.warmup.unwrap_or(args.period.saturating_mul(3)),
            cold_factor: args.cold_factor,
        };
        let algorithms = names
            .into_iter()
            .map(|name| Ok((name, Built::new(name, quota, slots, warm)?)))
            .collect::<Result<Vec<_>, UsageError>>()?;

        if args.duration.is_some_and(|duration| duration.is_zero()) {
            return Err(UsageError::ZeroDuration { what: "--duration" }.into());
        }
        let duration = args
            .duration
            .map(|duration| duration_nanos(duration, "--duration"))
            .transpose()?;
        let (source, duration) = match args.csv {
            Some(path) => {
                let text =
                    std::fs::read_to_string(&path).with_context(|| messages::cannot_read(&path))?;
                let times = pattern::parse_csv(&text).map_err(|error| UsageError::Csv {
                    path: path.display().to_string(),
                    error,
                })?;
                let last = times.last().copied().unwrap_or(0);
                // Up to the end of the period holding the last timestamp.
                let duration = duration
                    .unwrap_or_else(|| (last / period).saturating_add(1).saturating_mul(period));
                (Source::Csv { path, times }, duration)
            }
            None => {
                let rate = match args.rate {
                    Some(rate) => rate,
                    None => limit as f64 / args.period.as_secs_f64() / 2.0,
                };
                if !(rate.is_finite() && rate > 0.0) {
                    return Err(UsageError::out_of_range(
                        "--rate",
                        "a number of requests per second above zero",
                        rate,
                    )
                    .into());
                }
                let synthetic = Synthetic {
                    name: args.pattern,
                    rate,
                    period,
                    seed: args.seed,
                };
                let duration = duration.unwrap_or_else(|| period.saturating_mul(6));
                let count = synthetic
                    .count(duration, MAX_ARRIVALS)
                    .ok_or(UsageError::TooManyArrivals { max: MAX_ARRIVALS })?;
                (Source::Synthetic { synthetic, count }, duration)
            }
        };
        Ok(Config {
            quota,
            slots,
            algorithms,
            source,
            duration,
            out: args.out,
            json: args.json,
        })
    }

    /// The arrivals in `[0, duration)`, and how many of a CSV file's
    /// timestamps were left out beyond it.
    fn arrivals(&self) -> (Vec<u64>, usize) {
        match &self.source {
            Source::Synthetic { synthetic, count } => {
                (synthetic.arrivals(self.duration, *count), 0)
            }
            Source::Csv { times, .. } => {
                let kept = times.partition_point(|&t| t < self.duration);
                (times[..kept].to_vec(), times.len() - kept)
            }
        }
    }

    fn pattern_label(&self) -> String {
        match &self.source {
            Source::Synthetic { synthetic, .. } => {
                format!("{:?} at {} /s", synthetic.name, synthetic.rate).to_lowercase()
            }
            Source::Csv { path, .. } => format!("csv {}", path.display()),
        }
    }
}

/// One algorithm's run.
#[derive(Debug)]
struct Outcome {
    name: AlgorithmName,
    title: String,
    admitted: Vec<u64>,
    max_any_window: u64,
    max_aligned_window: Option<u64>,
    bounds: Bounds,
}

/// Runs `tollgate simulate`.
pub fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    if args.concurrency {
        return concurrency::command(&args);
    }
    if args.budget {
        return budget::command(&args);
    }
    let config = Config::from_args(args)?;
    let (arrivals, left_out) = config.arrivals();
    if left_out > 0 {
        eprintln!("{}", messages::csv_beyond_duration(left_out));
    }
    let period = config.quota.period_nanos();
    let outcomes: Vec<Outcome> = config
        .algorithms
        .iter()
        .map(|(name, built)| {
            let admitted = built.admissions(&arrivals);
            Outcome {
                name: *name,
                title: algorithms::title(*name, config.slots),
                max_any_window: window::max_in_any_window(&admitted, period),
                max_aligned_window: built
                    .aligned_slots()
                    .map(|slots| window::max_in_aligned_windows(&admitted, period, slots)),
                bounds: built.bounds(&config.quota),
                admitted,
            }
        })
        .collect();

    let pictures = match &config.out {
        Some(dir) => plot::draw(dir, &config, &arrivals, &outcomes)?,
        None => Vec::new(),
    };
    if config.json {
        messages::print_result(&(report::json(&config, &arrivals, &outcomes, &pictures)? + "\n"))?;
    } else {
        messages::print_result(&report::table(&config, &arrivals, &outcomes))?;
    }
    if !pictures.is_empty() {
        let paths: Vec<&std::path::Path> = pictures.iter().map(PathBuf::as_path).collect();
        eprintln!("{}", messages::wrote(&paths));
    }
    Ok(ExitCode::SUCCESS)
}

/// A duration in whole nanoseconds, refused above `u64::MAX` ns (584 years)
/// rather than saturated.
fn duration_nanos(duration: Duration, what: &'static str) -> Result<u64, UsageError> {
    u64::try_from(duration.as_nanos()).map_err(|_| {
        UsageError::out_of_range(
            what,
            "at most 584 years (18446744073709551615 ns)",
            humantime::format_duration(duration),
        )
    })
}

fn positive(value: i64, what: &'static str) -> Result<u64, UsageError> {
    u64::try_from(value)
        .ok()
        .filter(|&value| value > 0)
        .ok_or_else(|| UsageError::out_of_range(what, "a whole number above zero", value))
}
