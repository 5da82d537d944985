//! `tollgate simulate --concurrency --table`: every controller (the
//! library's [`Knee`] and [`Vegas`], and the [peers](super::peers)) before
//! the same services, for service times of six shapes and knees of 10 to
//! 400, on a manual clock.
//!
//! # The scenario
//!
//! - **The service**: `K` workers and a FIFO queue; each request takes a
//!   service time drawn from [`Shape`], of mean 10 ms whatever the shape.
//! - **The traffic**: open-loop Poisson arrivals at 1.5× the capacity of
//!   `K` workers (`1.5 · K / 10 ms`), all of one priority, through a
//!   `ConcurrencyLimiter` with [`Shares::none`] (the whole limit for every
//!   request): a request that does not fit is refused at once.
//! - **The knee moves**: `K` workers over the first third, `K / 2` over
//!   the second, `K` again over the third (of 60 s by default).
//! - **The metrics**, over the last 10 s of each third (so re-settling
//!   within 10 s of a knee change is part of the measure): the goodput, the
//!   answers per second as a share of the phase's capacity `K / 10 ms`; and
//!   the median in flight (over time) divided by the phase's knee. A cell
//!   shows the worst goodput of the three phases and the median's range.
//! - **The slow burst**: `--table` also runs, for each controller, the
//!   exponential service at `K = 40` with every request started in
//!   `[20 s, 22 s)` taking 10× its time, and reports the goodput of the
//!   last 10 s of the run (a controller that collapsed under the burst
//!   shows it there) and the lowest limit.
//! - **The bound**: after the controllers, the same grid under limits set
//!   by hand for each third, knowing the knee (`Hindsight`): what is left
//!   of a miss there is the target's own noise, not an estimate's.
//!
//! Each controller is a pure state updated by the simulation after every
//! answer; the limiter's limit is then set to the controller's. For the
//! library's controllers this is the very transition its adaptive limiter
//! runs under its mutex.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt::Write as _;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tollgate::concurrency::{ConcurrencyLimiter, Knee, Permit, Shares, Vegas};

use super::peers::{Bbr, Control, EnvoyGradient, Gradient2, NetflixVegas};

/// The mean service time of every shape, ns.
pub const MEAN: f64 = 10_000_000.0;

/// The shapes of service time, each of mean [`MEAN`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Constant,
    /// Uniform within ±10 %.
    Uniform10,
    /// Uniform within ±25 %.
    Uniform25,
    Exponential,
    /// Lognormal with σ = 1 (median `MEAN · e^−½`, 6.1 ms).
    Lognormal,
    /// 90 % at `a`, 10 % at `10 a`, `a = MEAN / 1.9` (5.26 ms and 52.6 ms:
    /// the 5 ms and 50 ms scaled to a mean of 10 ms).
    Bimodal,
}

impl Shape {
    pub const ALL: [Shape; 6] = [
        Shape::Constant,
        Shape::Uniform10,
        Shape::Uniform25,
        Shape::Exponential,
        Shape::Lognormal,
        Shape::Bimodal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Shape::Constant => "constant",
            Shape::Uniform10 => "uniform ±10 %",
            Shape::Uniform25 => "uniform ±25 %",
            Shape::Exponential => "exponential",
            Shape::Lognormal => "lognormal σ=1",
            Shape::Bimodal => "bimodal 90/10",
        }
    }

    /// A service time, ns.
    pub fn sample(self, rng: &mut ChaCha8Rng) -> u64 {
        let uniform = |rng: &mut ChaCha8Rng| 1.0 - rng.random::<f64>(); // (0, 1]
        let t = match self {
            Shape::Constant => MEAN,
            Shape::Uniform10 => MEAN * (0.9 + 0.2 * rng.random::<f64>()),
            Shape::Uniform25 => MEAN * (0.75 + 0.5 * rng.random::<f64>()),
            Shape::Exponential => -MEAN * uniform(rng).ln(),
            Shape::Lognormal => {
                // Box–Muller; μ = ln(mean) − σ²/2 so that the mean is MEAN.
                let (u, v) = (uniform(rng), rng.random::<f64>());
                let normal = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
                (MEAN.ln() - 0.5 + normal).exp()
            }
            Shape::Bimodal => {
                let a = MEAN / 1.9;
                if rng.random::<f64>() < 0.9 {
                    a
                } else {
                    10.0 * a
                }
            }
        };
        t.max(1.0) as u64
    }
}

/// The controllers in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Name {
    Knee,
    Vegas,
    NetflixVegas,
    Gradient2,
    Envoy,
    Bbr,
}

impl Name {
    pub const ALL: [Name; 6] = [
        Name::Knee,
        Name::Vegas,
        Name::NetflixVegas,
        Name::Gradient2,
        Name::Envoy,
        Name::Bbr,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Name::Knee => "tollgate Knee (the default)",
            Name::Vegas => "tollgate Vegas (rounds, slow start, Envoy's probe)",
            Name::NetflixVegas => "Netflix VegasLimit (model)",
            Name::Gradient2 => "Netflix Gradient2Limit (model)",
            Name::Envoy => "Envoy gradient controller (model)",
            Name::Bbr => "TCP BBR estimates (model)",
        }
    }

    pub fn start(self) -> Box<dyn Control> {
        match self {
            Name::Knee => Box::new(Knee::new().start()),
            Name::Vegas => Box::new(Vegas::new().start()),
            Name::NetflixVegas => Box::new(NetflixVegas::new()),
            Name::Gradient2 => Box::new(Gradient2::new()),
            Name::Envoy => Box::new(EnvoyGradient::new()),
            Name::Bbr => Box::new(Bbr::new()),
        }
    }
}

/// One run's scenario.
#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    pub shape: Shape,
    pub knee: u32,
    pub duration: u64,
    pub seed: u64,
    /// `[from, to)` ns: requests started then take 10× their time.
    pub slow: Option<(u64, u64)>,
}

impl Scenario {
    /// The workers at `at`: half over the middle third.
    pub fn knee_at(&self, at: u64) -> u32 {
        let third = self.duration / 3;
        if (third..2 * third).contains(&at) {
            (self.knee / 2).max(1)
        } else {
            self.knee
        }
    }

    /// The measured windows: the last 10 s (at most half) of each third.
    pub fn windows(&self) -> [(u64, u64); 3] {
        let third = self.duration / 3;
        let settle = third.saturating_sub(10_000_000_000).max(third / 2);
        [0, 1, 2].map(|i| (i * third + settle, (i + 1) * third))
    }
}

/// What a run measured in one window.
#[derive(Clone, Copy, Debug)]
pub struct Phase {
    /// Answers per second over the window's capacity.
    pub goodput: f64,
    /// Median in flight over time, divided by the window's knee.
    pub median: f64,
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub phases: [Phase; 3],
    /// The lowest limit after the first second.
    pub lowest_limit: u32,
}

/// Runs `scenario` before `controller`; deterministic for a seed.
pub fn run(scenario: &Scenario, controller: &mut dyn Control) -> Outcome {
    let limiter = ConcurrencyLimiter::builder(u64::from(controller.limit().max(1)))
        .shares(Shares::none())
        .build()
        .expect("a limit of 1 to 1,000");
    let mut rng = ChaCha8Rng::seed_from_u64(scenario.seed);
    let windows = scenario.windows();
    // Time spent at each in-flight count, and answers, per window.
    let mut time_at: [Vec<u64>; 3] = Default::default();
    let mut answered = [0_u64; 3];
    let mut answers: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    // id → (permit, started, in flight when it started)
    let mut requests: HashMap<u64, (Permit, u64, u32)> = HashMap::new();
    let mut waiting: VecDeque<u64> = VecDeque::new();
    let (mut busy, mut next_id) = (0_u32, 0_u64);
    let mean_gap = MEAN / (1.5 * f64::from(scenario.knee));
    let mut next_arrival = 0.0_f64;
    let (mut last, mut lowest_limit) = (0_u64, u32::MAX);
    loop {
        let arrival = next_arrival as u64;
        let answer = answers.peek().map(|Reverse((at, _))| *at);
        let arrival_first = answer.is_none_or(|answer| arrival < answer);
        let now = if arrival_first {
            arrival
        } else {
            answer.unwrap_or(arrival)
        };
        if now >= scenario.duration {
            break;
        }
        // The in flight held over [last, now).
        let in_flight = limiter.in_flight() as usize;
        for (i, &(from, to)) in windows.iter().enumerate() {
            let (a, b) = (last.max(from), now.min(to));
            if b > a {
                if time_at[i].len() <= in_flight {
                    time_at[i].resize(in_flight + 1, 0);
                }
                time_at[i][in_flight] += b - a;
            }
        }
        last = now;
        if arrival_first {
            next_arrival += -(1.0 - rng.random::<f64>()).ln() * mean_gap;
            if let Ok(permit) = limiter.try_acquire(1) {
                let in_flight = limiter.in_flight();
                requests.insert(next_id, (permit, now, in_flight));
                waiting.push_back(next_id);
                next_id += 1;
            }
        } else if let Some(Reverse((_, id))) = answers.pop() {
            busy -= 1;
            if let Some((permit, started, in_flight)) = requests.remove(&id) {
                drop(permit);
                controller.update(started, now, in_flight, false);
                let limit = controller.limit().max(1);
                if limit != limiter.limit() {
                    let _ = limiter.set_limit(u64::from(limit));
                }
                if now >= 1_000_000_000 {
                    lowest_limit = lowest_limit.min(limit);
                }
                for (i, &(from, to)) in windows.iter().enumerate() {
                    if (from..to).contains(&now) {
                        answered[i] += 1;
                    }
                }
            }
        }
        while busy < scenario.knee_at(now) {
            let Some(id) = waiting.pop_front() else { break };
            busy += 1;
            let started = requests.get(&id).map_or(now, |r| r.1);
            let mut service = scenario.shape.sample(&mut rng);
            if scenario
                .slow
                .is_some_and(|(from, to)| (from..to).contains(&started))
            {
                service *= 10;
            }
            answers.push(Reverse((now + service, id)));
        }
    }
    let phases = [0, 1, 2].map(|i| {
        let (from, to) = windows[i];
        let knee = f64::from(scenario.knee_at(from));
        let seconds = (to - from) as f64 / 1e9;
        let capacity = knee * 1e9 / MEAN * seconds;
        Phase {
            goodput: answered[i] as f64 / capacity,
            median: median(&time_at[i]) as f64 / knee,
        }
    });
    Outcome {
        phases,
        lowest_limit,
    }
}

/// The value below which half the time was spent.
fn median(time_at: &[u64]) -> usize {
    let total: u64 = time_at.iter().sum();
    let mut seen = 0;
    for (value, &time) in time_at.iter().enumerate() {
        seen += time;
        if seen * 2 >= total {
            return value;
        }
    }
    0
}

/// The knees of the table.
pub const KNEES: [u32; 5] = [10, 20, 40, 100, 400];

/// Runs the whole table (and the slow burst) and prints it as Markdown.
pub fn table(duration: u64, seed: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Adaptive concurrency before K workers (FIFO, mean service time 10 ms), Poisson arrivals at 1.5x capacity, K halved over the middle third of {} s, seed {seed}.\nEach cell: the worst goodput of the three thirds (last 10 s of each) as % of capacity, then the median in flight / K (lowest-highest of the thirds). Target: goodput >= 95 %, median within [1, 1.25].\n",
        duration / 1_000_000_000
    );
    for name in Name::ALL {
        grid(&mut out, name.title(), duration, seed, |scenario| {
            run(scenario, name.start().as_mut())
        });
    }
    grid(&mut out, Hindsight::TITLE, duration, seed, |scenario| {
        run(scenario, &mut Hindsight::new(*scenario))
    });
    let _ = writeln!(
        out,
        "### A burst of slow requests (exponential, K=40: every request started in [20 s, 22 s) takes 10x)\n\n| controller | goodput, last 10 s | median in flight / K, last 10 s | lowest limit |\n|---|---|---|---|"
    );
    for name in Name::ALL {
        let outcome = run(&burst(duration, seed), name.start().as_mut());
        let last = outcome.phases[2];
        let _ = writeln!(
            out,
            "| {} | {:.0} % | {:.2} | {} |",
            name.title(),
            last.goodput * 100.0,
            last.median,
            outcome.lowest_limit
        );
    }
    out
}

/// One controller's grid: a row per shape, a cell per knee.
fn grid(
    out: &mut String,
    title: &str,
    duration: u64,
    seed: u64,
    outcome: impl Fn(&Scenario) -> Outcome,
) {
    let _ = writeln!(out, "### {title}\n");
    let _ = write!(out, "| service time |");
    for knee in KNEES {
        let _ = write!(out, " K={knee} |");
    }
    let _ = writeln!(out, "\n|---|{}", "---|".repeat(KNEES.len()));
    for shape in Shape::ALL {
        let _ = write!(out, "| {} |", shape.name());
        for knee in KNEES {
            let scenario = Scenario {
                shape,
                knee,
                duration,
                seed,
                slow: None,
            };
            let _ = write!(out, " {} |", cell(&outcome(&scenario)));
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out);
}

/// Not a controller: limits set by hand for each third, knowing the knee
/// and the load, as [`Knee`] sets them from the knee it finds. Where the
/// knee is known, what is left of a miss is the target's own noise (ten
/// seconds of a knee of 10 are 10,000 answers, ±1–1.4 % for the long-tailed
/// shapes) and the policy's, not the controller's estimate. At a knee of
/// 10 under arrivals at 1.5× its capacity, 13 (10 + 2.5, rounded up) is
/// the best fixed limit: 12 keeps less goodput, 14 puts the median in
/// flight at 1.3 K; over the middle third, a knee of 5 under 3× its
/// capacity, 6 (one queued request).
struct Hindsight {
    scenario: Scenario,
    now: u64,
}

impl Hindsight {
    const TITLE: &'static str = "Limits set by hand for each third, knowing the knee (not a controller: the bound of Knee's policy)";

    fn new(scenario: Scenario) -> Hindsight {
        Hindsight { scenario, now: 0 }
    }
}

impl Control for Hindsight {
    fn limit(&self) -> u32 {
        let knee = self.scenario.knee_at(self.now);
        if knee < self.scenario.knee {
            // Demand at 3× the halved knee: the limit is full, one queued
            // request keeps the workers fed.
            knee + 1
        } else {
            // At 1.5×: Knee's least queue (2.5) or headroom (10 %).
            let knee = f64::from(knee);
            (knee * 1.1).max(knee + 2.5).ceil() as u32
        }
    }

    fn update(&mut self, _started: u64, now: u64, _in_flight: u32, _dropped: bool) {
        self.now = now;
    }
}

/// The slow-burst scenario: exponential at K = 40, 10× slower in [20, 22) s.
pub fn burst(duration: u64, seed: u64) -> Scenario {
    Scenario {
        shape: Shape::Exponential,
        knee: 40,
        duration,
        seed,
        slow: Some((20_000_000_000, 22_000_000_000)),
    }
}

/// A cell: the worst goodput, the medians' range; `!` when out of target.
pub fn cell(outcome: &Outcome) -> String {
    let goodput = outcome
        .phases
        .iter()
        .map(|p| p.goodput)
        .fold(f64::MAX, f64::min);
    let low = outcome
        .phases
        .iter()
        .map(|p| p.median)
        .fold(f64::MAX, f64::min);
    let high = outcome.phases.iter().map(|p| p.median).fold(0.0, f64::max);
    let ok = goodput >= 0.95 && low >= 1.0 && high <= 1.25;
    format!(
        "{:.0} % {low:.2}–{high:.2}{}",
        goodput * 100.0,
        if ok { "" } else { " ✗" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// the target for the default controller, on an affordable
    /// part of the table (the whole of it is `--table`, in BENCHMARKS.md).
    #[test]
    fn the_knee_controller_holds_the_knee_whatever_the_service_times() {
        for (shape, knee) in [
            (Shape::Constant, 20),
            (Shape::Uniform25, 40),
            (Shape::Exponential, 20),
            (Shape::Exponential, 100),
            (Shape::Lognormal, 40),
            (Shape::Bimodal, 40),
        ] {
            let scenario = Scenario {
                shape,
                knee,
                duration: 60_000_000_000,
                seed: 1,
                slow: None,
            };
            let outcome = run(&scenario, &mut Knee::new().start());
            for phase in outcome.phases {
                assert!(
                    phase.goodput >= 0.95 && (1.0..=1.25).contains(&phase.median),
                    "{shape:?} K={knee}: {}",
                    cell(&outcome)
                );
            }
        }
    }

    #[test]
    fn the_hand_set_limits_are_knees_targets_for_each_third() {
        let at = |knee: u32, instant: u64| {
            let scenario = Scenario {
                shape: Shape::Exponential,
                knee,
                duration: 60_000_000_000,
                seed: 1,
                slow: None,
            };
            let mut hindsight = Hindsight::new(scenario);
            hindsight.update(0, instant, 1, false);
            hindsight.limit()
        };
        // The best fixed limits at a knee of 10: 13, and 6 over its
        // middle third (a knee of 5 under 3× its capacity).
        assert_eq!(
            [at(10, 0), at(10, 30_000_000_000), at(10, 50_000_000_000)],
            [13, 6, 13]
        );
        assert_eq!([at(40, 0), at(40, 30_000_000_000)], [44, 21]);
    }

    #[test]
    fn vegas_collapses_with_exponential_service_times() {
        // The finding, kept as the reason the default changed.
        let scenario = Scenario {
            shape: Shape::Exponential,
            knee: 40,
            duration: 30_000_000_000,
            seed: 1,
            slow: None,
        };
        let outcome = run(&scenario, &mut Vegas::new().start());
        assert!(outcome.phases[0].goodput < 0.5, "{}", cell(&outcome));
    }

    #[test]
    fn a_burst_of_slow_requests_does_not_collapse_the_knee_controller() {
        let outcome = run(&burst(60_000_000_000, 1), &mut Knee::new().start());
        let last = outcome.phases[2];
        assert!(last.goodput >= 0.95, "{last:?}");
        assert!((1.0..=1.25).contains(&last.median), "{last:?}");
    }

    #[test]
    fn the_shapes_have_the_stated_mean() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for shape in Shape::ALL {
            let n = 200_000;
            let mean = (0..n).map(|_| shape.sample(&mut rng) as f64).sum::<f64>() / n as f64;
            assert!((mean / MEAN - 1.0).abs() < 0.02, "{shape:?}: {mean}");
        }
    }
}
