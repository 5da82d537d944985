//! `tollgate simulate --budget`: a token budget for LLM traffic, kept three
//! ways on the library's GCRA and a manual clock.
//!
//! # Model
//!
//! - **The budget**: 100,000 tokens a minute (GCRA, burst = limit).
//! - **The traffic**: Poisson arrivals (seeded ChaCha8) at `--rate`, by
//!   default 2 a second; each request costs a lognormal number of tokens
//!   (median 500, σ = 1.2: mean about 1,030, one in eight above 2,000, a
//!   few above 10,000), generated at 200 tokens a second, so that its
//!   response ends `cost / 200` s after it starts and its cost is known
//!   only then. By default the offered tokens are about 1.2 times the
//!   budget's rate.
//! - **check-then-charge**: admitted while the budget has a token left,
//!   charged the whole cost when the response ends (Envoy AI Gateway's
//!   flow, the tower layer's default). Requests in flight when the budget
//!   runs out are all charged: the budget goes into debt and refuses until
//!   it is paid.
//! - **reserve-then-settle**: admitted only if the budget has the
//!   request's `max_tokens` (2,000), reserved at once; when the response
//!   ends, the difference is charged, or given back.
//! - **request count**: what a user would otherwise set, the budget divided
//!   by the mean cost (97 requests a minute, GCRA), the tokens not counted.
//!
//! # What it shows
//!
//! For each: requests admitted, tokens spent against the tokens the budget
//! allows over the run (burst + rate × duration), and the most spent in any
//! minute (counted when each response ends) against the 200,000 GCRA allows
//! in one (burst + a minute's rate). The budgets keep the spend at the
//! budget (check-then-charge over by what was in flight, repaid later;
//! reserve-then-settle by what a request cost above its reservation); the
//! request count does not count tokens at all: its spend follows the heavy
//! tail, over the budget with some seeds and under it with others.

mod picture;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use tollgate::{Gcra, Limiter, ManualClock, Nanos, Quota};

use super::{MAX_ARRIVALS, duration_nanos};
use crate::cli::SimulateArgs;
use crate::messages::{self, UsageError};

/// Tokens a minute.
pub(crate) const BUDGET: u64 = 100_000;
/// The budget's period.
const PERIOD: Duration = Duration::from_secs(60);
/// The lognormal's median and σ.
const MEDIAN: f64 = 500.0;
const SIGMA: f64 = 1.2;
/// The `max_tokens` reserved by reserve-then-settle.
const MAX_TOKENS: u64 = 2_000;
/// Generation speed, tokens a second.
const TOKENS_PER_SECOND: u64 = 200;

/// One run's parameters.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct Model {
    /// Requests a second.
    pub(crate) rate: f64,
    /// Nanoseconds simulated.
    pub(crate) duration: u64,
    pub(crate) seed: u64,
}

/// A request: when it starts and what it costs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request {
    pub(crate) at: u64,
    pub(crate) cost: u64,
}

/// The way a budget is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Strategy {
    CheckThenCharge,
    ReserveThenSettle,
    RequestCount,
}

impl Strategy {
    pub(crate) const ALL: [Strategy; 3] = [
        Strategy::CheckThenCharge,
        Strategy::ReserveThenSettle,
        Strategy::RequestCount,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Strategy::CheckThenCharge => "check-then-charge",
            Strategy::ReserveThenSettle => "reserve-then-settle",
            Strategy::RequestCount => "request count",
        }
    }
}

/// What one strategy did.
#[derive(Debug, Serialize)]
pub(crate) struct Outcome {
    pub(crate) strategy: Strategy,
    pub(crate) admitted: u64,
    pub(crate) refused: u64,
    /// Tokens of the responses that ended within the run.
    pub(crate) spent: u64,
    /// The most spent in any minute.
    pub(crate) max_minute: u64,
    /// `(instant, tokens spent so far)` at each response's end.
    #[serde(skip)]
    pub(crate) spending: Vec<(u64, u64)>,
}

/// Runs `tollgate simulate --budget`.
pub fn command(args: &SimulateArgs) -> anyhow::Result<ExitCode> {
    let model = model(args)?;
    let requests = requests(&model);
    let outcomes: Vec<Outcome> = Strategy::ALL
        .iter()
        .map(|&strategy| run(strategy, &requests, model.duration))
        .collect();
    let pictures = match &args.out {
        Some(dir) => picture::draw(dir, &model, &outcomes)?,
        None => Vec::new(),
    };
    if args.json {
        let json = serde_json::json!({
            "budget": {"tokens": BUDGET, "period_s": PERIOD.as_secs()},
            "allowed": allowed(model.duration),
            "model": model,
            "offered": {
                "requests": requests.len(),
                "tokens": requests.iter().map(|r| r.cost).sum::<u64>(),
            },
            "outcomes": outcomes,
        });
        messages::print_result(&(json.to_string() + "\n"))?;
    } else {
        messages::print_result(&table(&model, &requests, &outcomes))?;
    }
    if !pictures.is_empty() {
        let paths: Vec<&std::path::Path> = pictures.iter().map(|p| p.as_path()).collect();
        eprintln!("{}", messages::wrote(&paths));
    }
    Ok(ExitCode::SUCCESS)
}

fn model(args: &SimulateArgs) -> Result<Model, UsageError> {
    let rate = args.rate.unwrap_or(2.0);
    if !(rate.is_finite() && rate > 0.0) {
        return Err(UsageError::out_of_range(
            "--rate",
            "a number of requests per second above zero",
            rate,
        ));
    }
    if args.duration.is_some_and(|d| d.is_zero()) {
        return Err(UsageError::ZeroDuration { what: "--duration" });
    }
    let duration = duration_nanos(args.duration.unwrap_or(PERIOD * 10), "--duration")?;
    if rate * duration as f64 / 1e9 > MAX_ARRIVALS as f64 {
        return Err(UsageError::TooManyArrivals { max: MAX_ARRIVALS });
    }
    Ok(Model {
        rate,
        duration,
        seed: args.seed,
    })
}

/// The requests of a run: Poisson arrivals, lognormal costs (at least 1).
pub(crate) fn requests(model: &Model) -> Vec<Request> {
    let mut rng = ChaCha8Rng::seed_from_u64(model.seed);
    let mut uniform = move || 1.0 - rng.random::<f64>(); // (0, 1]
    let mut requests = Vec::new();
    let mut at = 0.0_f64;
    loop {
        at += -uniform().ln() / model.rate * 1e9;
        if at >= model.duration as f64 {
            return requests;
        }
        // Box–Muller: one standard normal from two uniforms.
        let normal = (-2.0 * uniform().ln()).sqrt() * (std::f64::consts::TAU * uniform()).cos();
        let cost = (MEDIAN * (SIGMA * normal).exp()).round().clamp(1.0, 1e9) as u64;
        requests.push(Request {
            at: at as u64,
            cost,
        });
    }
}

/// The tokens the budget allows over `duration`: burst + rate × duration.
pub(crate) fn allowed(duration: u64) -> u64 {
    let period = PERIOD.as_nanos() as u64;
    BUDGET + (u128::from(BUDGET) * u128::from(duration) / u128::from(period)) as u64
}

/// Runs `strategy` over `requests` on the library's GCRA: arrivals and the
/// ends of responses in time order (an end before an arrival at the same
/// instant).
pub(crate) fn run(strategy: Strategy, requests: &[Request], duration: u64) -> Outcome {
    let clock = ManualClock::new();
    let quota = match strategy {
        Strategy::RequestCount => Quota::per_minute(BUDGET / mean_cost()),
        _ => Quota::per_minute(BUDGET),
    }
    .expect("a valid quota");
    let limiter = Limiter::with_clock(Gcra::new(quota).expect("a valid quota"), clock.clone());
    // Responses in flight: (end, cost, reserved).
    let mut ends: BinaryHeap<Reverse<(u64, u64, u64)>> = BinaryHeap::new();
    let mut outcome = Outcome {
        strategy,
        admitted: 0,
        refused: 0,
        spent: 0,
        max_minute: 0,
        spending: Vec::new(),
    };
    let settle =
        |ends: &mut BinaryHeap<Reverse<(u64, u64, u64)>>, until: u64, outcome: &mut Outcome| {
            while let Some(&Reverse((end, cost, reserved))) = ends.peek() {
                if end > until {
                    break;
                }
                ends.pop();
                clock.set(Nanos::from_duration(Duration::from_nanos(end)));
                match strategy {
                    Strategy::CheckThenCharge => {
                        let _ = limiter.charge_n(cost);
                    }
                    Strategy::ReserveThenSettle if cost > reserved => {
                        let _ = limiter.charge_n(cost - reserved);
                    }
                    Strategy::ReserveThenSettle => {
                        let _ = limiter.refund(reserved - cost);
                    }
                    Strategy::RequestCount => {}
                }
                outcome.spent += cost;
                outcome.spending.push((end, outcome.spent));
            }
        };
    for request in requests {
        settle(&mut ends, request.at, &mut outcome);
        clock.set(Nanos::from_duration(Duration::from_nanos(request.at)));
        let (admitted, reserved) = match strategy {
            Strategy::CheckThenCharge => (limiter.peek().is_allowed(), 0),
            Strategy::ReserveThenSettle => (
                limiter.check_n(MAX_TOKENS).is_ok_and(|d| d.is_allowed()),
                MAX_TOKENS,
            ),
            Strategy::RequestCount => (limiter.check().is_allowed(), 0),
        };
        if admitted {
            outcome.admitted += 1;
            let end = request.at + request.cost * 1_000_000_000 / TOKENS_PER_SECOND;
            ends.push(Reverse((end, request.cost, reserved)));
        } else {
            outcome.refused += 1;
        }
    }
    settle(&mut ends, duration.saturating_sub(1), &mut outcome);
    outcome.max_minute = max_in_any_minute(&outcome.spending);
    outcome
}

/// The mean of the lognormal cost, rounded: `median · e^(σ²/2)`.
pub(crate) fn mean_cost() -> u64 {
    (MEDIAN * (SIGMA * SIGMA / 2.0).exp()).round() as u64
}

/// The most tokens spent in any minute (every window `(t - 1 min, t]`),
/// from the running totals.
fn max_in_any_minute(spending: &[(u64, u64)]) -> u64 {
    let period = PERIOD.as_nanos() as u64;
    let mut best = 0;
    let mut start = 0;
    let mut before = 0; // spent before the window's first end
    for &(end, total) in spending {
        while spending[start].0 + period <= end {
            before = spending[start].1;
            start += 1;
        }
        best = best.max(total - before);
    }
    best
}

fn table(model: &Model, requests: &[Request], outcomes: &[Outcome]) -> String {
    let offered: u64 = requests.iter().map(|r| r.cost).sum();
    let allowed = allowed(model.duration);
    let mut text = String::new();
    let _ = writeln!(
        text,
        "token budget {BUDGET} a minute; {} requests at {} /s over {} s, {offered} tokens offered (lognormal, median {MEDIAN}, sigma {SIGMA}; seed {})",
        requests.len(),
        model.rate,
        model.duration / 1_000_000_000,
        model.seed,
    );
    let _ = writeln!(
        text,
        "{:<20} {:>9} {:>8} {:>12} {:>10} {:>12} {:>10}",
        "strategy",
        "admitted",
        "refused",
        "tokens spent",
        "of allowed",
        "worst minute",
        "of 200000"
    );
    for outcome in outcomes {
        let _ = writeln!(
            text,
            "{:<20} {:>9} {:>8} {:>12} {:>9.1}% {:>12} {:>9.1}%",
            outcome.strategy.label(),
            outcome.admitted,
            outcome.refused,
            outcome.spent,
            100.0 * outcome.spent as f64 / allowed as f64,
            outcome.max_minute,
            100.0 * outcome.max_minute as f64 / (2 * BUDGET) as f64,
        );
    }
    let _ = writeln!(
        text,
        "allowed over the run: {allowed} tokens (burst + rate x duration); request count: {} a minute (budget / mean cost {})",
        BUDGET / mean_cost(),
        mean_cost(),
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(seed: u64) -> Model {
        Model {
            rate: 2.0,
            duration: 600_000_000_000,
            seed,
        }
    }

    #[test]
    fn costs_are_heavy_tailed_and_seeded() {
        let drawn = requests(&model(1));
        let again = requests(&model(1));
        assert_eq!(
            drawn.iter().map(|r| (r.at, r.cost)).collect::<Vec<_>>(),
            again.iter().map(|r| (r.at, r.cost)).collect::<Vec<_>>()
        );
        let mut costs: Vec<u64> = drawn.iter().map(|r| r.cost).collect();
        costs.sort_unstable();
        let median = costs[costs.len() / 2];
        assert!((400..=620).contains(&median), "median {median}");
        let mean = costs.iter().sum::<u64>() / costs.len() as u64;
        assert!(mean > median * 3 / 2, "mean {mean} median {median}");
        assert!(*costs.last().unwrap() > 10 * median);
    }

    #[test]
    fn budgets_hold_the_spend_and_the_request_count_does_not() {
        for seed in 1..=3 {
            let model = model(seed);
            let requests = requests(&model);
            let allowed = allowed(model.duration);
            let [check, reserve, count] =
                Strategy::ALL.map(|strategy| run(strategy, &requests, model.duration));
            // The tokens spent are the admitted requests' whole costs.
            assert!(
                check.spent <= allowed + 20 * MAX_TOKENS,
                "seed {seed}: {check:?}"
            );
            // Reserve-then-settle overshoots only by what a request cost
            // above its reservation.
            assert!(
                reserve.spent <= allowed + 10 * MAX_TOKENS,
                "seed {seed}: {reserve:?}"
            );
            assert!(
                reserve.spent >= allowed * 8 / 10,
                "seed {seed}: {reserve:?}"
            );
            assert!(check.spent >= allowed * 8 / 10, "seed {seed}: {check:?}");
            // More than the budget is offered: everyone refuses some.
            assert!(check.refused > 0 && reserve.refused > 0 && count.refused > 0);
            // No minute spends more than GCRA allows in one (burst + a
            // minute's rate) plus the overshoot of what was in flight.
            for outcome in [&check, &reserve] {
                assert!(
                    outcome.max_minute <= 2 * BUDGET + 20 * MAX_TOKENS,
                    "seed {seed}"
                );
            }
        }
    }

    #[test]
    fn the_worst_minute_is_exact() {
        let minute = 60_000_000_000;
        let spending = [(0, 5), (minute - 1, 12), (minute, 20), (2 * minute, 21)];
        // Ending at 1 min - 1: 12; at 1 min: 7 + 8; at 2 min: 1.
        assert_eq!(max_in_any_minute(&spending), 15);
    }
}
