//! `tollgate simulate --concurrency`: the library's adaptive concurrency
//! limit in front of a queueing service, on a manual clock.
//!
//! Decisions taken here:
//!
//! - **The service** has `knee` workers and a FIFO queue: a request admitted
//!   while fewer than `knee` are being served starts at once and takes
//!   exactly `service_time`; past the knee it waits for a worker, so its
//!   latency is flat up to `knee` in flight and grows linearly beyond (an
//!   M/D/c queue). Deterministic service times: Vegas reads any spread of
//!   latency as a queue, and the point here is to show the knee.
//! - **The slowdown**: over the middle third of the run the service keeps
//!   only half its workers (its knee halves), as when a dependency stalls.
//! - **The traffic**: Poisson arrivals (seeded ChaCha8) at `rate`, by
//!   default 1.5× what the service can serve, each critical, default or
//!   sheddable with probabilities 20 %, 50 %, 30 %.
//! - **The limiter** is the library's `ConcurrencyLimiter` with its Vegas
//!   controller and default shares, on a `ManualClock` set to each event's
//!   instant; a request asks `try_acquire_as(1, priority)` and is refused at
//!   once if it does not fit (a load shedder, no waiting), and its permit is
//!   dropped when the service answers it, which feeds the controller.
//! - **What it shows**: the requests in flight settle just past the knee
//!   (Vegas holds `alpha..beta`, 3 to 6, requests queued: 1.05× the knee
//!   of 40, 1.2× the knee of 20), halve with the knee in the slowdown and
//!   climb back after. The limit sits above the in flight by the share the
//!   default [`Shares`](tollgate::concurrency::Shares) keep for critical
//!   work, which this mix leaves partly unused: 1.3× the knee. Sheddable
//!   work is refused first and most, critical work last and least. The
//!   tests check, per phase, the in flight within `[knee, 1.2·knee]`, the
//!   limit within `[knee, 1.35·knee]`, the back-off and the order.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tollgate::concurrency::{ConcurrencyLimiter, Permit, Priority, Vegas};
use tollgate::{ManualClock, Nanos};

use super::{MAX_ARRIVALS, duration_nanos};
use crate::cli::SimulateArgs;
use crate::messages::{self, UsageError};

/// Runs `tollgate simulate --concurrency`: validates, runs, prints a table.
pub fn command(args: &SimulateArgs) -> anyhow::Result<ExitCode> {
    let knee = u32::try_from(args.knee)
        .ok()
        .filter(|&knee| knee > 0)
        .ok_or_else(|| {
            UsageError::out_of_range("--knee", "a whole number from 1 to 4294967295", args.knee)
        })?;
    let service_time = duration_nanos(args.service_time, "--service-time")?;
    if service_time == 0 {
        return Err(UsageError::ZeroDuration {
            what: "--service-time",
        }
        .into());
    }
    let duration = match args.duration {
        Some(duration) if duration.is_zero() => {
            return Err(UsageError::ZeroDuration { what: "--duration" }.into());
        }
        Some(duration) => duration_nanos(duration, "--duration")?,
        None => 60_000_000_000,
    };
    // By default 1.5× what the service serves outside the slowdown.
    let rate = args
        .rate
        .unwrap_or(1.5 * f64::from(knee) * 1e9 / service_time as f64);
    if !(rate.is_finite() && rate > 0.0) {
        return Err(UsageError::out_of_range(
            "--rate",
            "a number of requests per second above zero",
            rate,
        )
        .into());
    }
    // The expected arrivals, held to the same cap as the rate simulations
    // (the run keeps one point per event).
    if rate * duration as f64 / 1e9 > MAX_ARRIVALS as f64 {
        return Err(UsageError::TooManyArrivals { max: MAX_ARRIVALS }.into());
    }
    let model = Model {
        knee,
        service_time,
        rate,
        duration,
        seed: args.seed,
    };
    let trace = run(&model);
    let pictures = match &args.out {
        Some(dir) => draw(dir, &model, &trace)?,
        None => Vec::new(),
    };
    messages::print_result(&table(&model, &trace))?;
    if !pictures.is_empty() {
        let paths: Vec<&std::path::Path> =
            pictures.iter().map(std::path::PathBuf::as_path).collect();
        eprintln!("{}", messages::wrote(&paths));
    }
    Ok(ExitCode::SUCCESS)
}

/// The mean limit over `[from, to)` ns, weighted by time.
pub fn mean_limit(trace: &Trace, from: u64, to: u64) -> f64 {
    time_mean(&trace.limit, from, to)
}

/// The mean of the slots in use over `[from, to)` ns, weighted by time.
pub fn mean_in_flight(trace: &Trace, from: u64, to: u64) -> f64 {
    time_mean(&trace.in_flight, from, to)
}

/// The mean of a step series `(instant, value)` over `[from, to)` ns.
fn time_mean(series: &[(u64, u32)], from: u64, to: u64) -> f64 {
    let mut sum = 0.0;
    for pair in series.windows(2) {
        let (start, limit) = pair[0];
        let end = pair[1].0;
        let (start, end) = (start.max(from), end.min(to));
        if end > start {
            sum += f64::from(limit) * (end - start) as f64;
        }
    }
    sum / to.saturating_sub(from).max(1) as f64
}

/// Columns of the panels: the series are reduced to one point per column.
const COLUMNS: usize = 600;

/// Draws `concurrency.svg` and `concurrency.png` into `dir`: in flight, the
/// limit and the knee over time; refusals per second by priority.
fn draw(
    dir: &std::path::Path,
    model: &Model,
    trace: &Trace,
) -> anyhow::Result<Vec<std::path::PathBuf>> {
    use anyhow::{Context, anyhow};
    use plotters::prelude::*;

    super::plot::register_font()?;
    std::fs::create_dir_all(dir).with_context(|| messages::cannot_write(dir))?;
    let seconds = model.duration as f64 / 1e9;
    let column =
        |at: u64| ((u128::from(at) * COLUMNS as u128) / u128::from(model.duration.max(1))) as usize;
    // Most in flight per column; the limit at the end of each column.
    let mut in_flight = vec![0_u32; COLUMNS];
    for &(at, value) in &trace.in_flight {
        let c = column(at).min(COLUMNS - 1);
        in_flight[c] = in_flight[c].max(value);
    }
    let mut limit = vec![None; COLUMNS];
    for &(at, value) in &trace.limit {
        limit[column(at).min(COLUMNS - 1)] = Some(value);
    }
    let mut last = trace.limit.first().map_or(0, |&(_, value)| value);
    let limit: Vec<u32> = limit
        .into_iter()
        .map(|value| {
            last = value.unwrap_or(last);
            last
        })
        .collect();
    let per_second = COLUMNS as f64 / seconds;
    let refused: Vec<Vec<f64>> = trace
        .refused
        .iter()
        .map(|instants| {
            let mut counts = vec![0.0; COLUMNS];
            for &at in instants {
                counts[column(at).min(COLUMNS - 1)] += per_second;
            }
            counts
        })
        .collect();
    let top = in_flight.iter().chain(&limit).copied().max().unwrap_or(1) as f64 * 1.15 + 1.0;
    let refused_top = refused.iter().flatten().copied().fold(1.0, f64::max) * 1.15;
    let knee: Vec<f64> = (0..COLUMNS)
        .map(|c| {
            f64::from(model.knee_at((c as u64).saturating_mul(model.duration) / COLUMNS as u64))
        })
        .collect();
    let panels = Panels {
        seconds,
        in_flight,
        limit,
        knee,
        refused,
        top,
        refused_top,
    };
    let mut written = Vec::new();
    for path in [dir.join("concurrency.svg"), dir.join("concurrency.png")] {
        let result = if path.extension().is_some_and(|e| e == "svg") {
            render(
                SVGBackend::new(&path, (1200, 600)).into_drawing_area(),
                &panels,
            )
        } else {
            render(
                BitMapBackend::new(&path, (1200, 600)).into_drawing_area(),
                &panels,
            )
        };
        result.map_err(|error| anyhow!(messages::cannot_draw(&path, &error)))?;
        written.push(path);
    }
    Ok(written)
}

/// What the two panels plot, one point per column.
struct Panels {
    seconds: f64,
    in_flight: Vec<u32>,
    limit: Vec<u32>,
    knee: Vec<f64>,
    refused: Vec<Vec<f64>>,
    top: f64,
    refused_top: f64,
}

impl Panels {
    fn x(&self, c: usize) -> f64 {
        c as f64 * self.seconds / COLUMNS as f64
    }
}

fn render<DB: plotters::prelude::DrawingBackend>(
    root: plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    p: &Panels,
) -> Result<(), String> {
    use plotters::prelude::*;
    let colors = [
        RGBColor(214, 39, 40),
        RGBColor(31, 119, 180),
        RGBColor(150, 150, 150),
    ];
    let names = ["critical", "default", "sheddable"];

    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (upper, lower) = root.split_vertically(300);
    let mut chart = ChartBuilder::on(&upper)
        .caption(
            "in flight (most per column), adaptive limit and the service's knee",
            (super::plot::FONT, 16),
        )
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..p.seconds, 0.0..p.top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("requests")
        .label_style((super::plot::FONT, 12))
        .draw()
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(LineSeries::new(
            (0..COLUMNS).map(|c| (p.x(c), f64::from(p.in_flight[c]))),
            RGBColor(150, 150, 150),
        ))
        .map_err(|e| e.to_string())?
        .label("in flight")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RGBColor(150, 150, 150)));
    chart
        .draw_series(LineSeries::new(
            (0..COLUMNS).map(|c| (p.x(c), f64::from(p.limit[c]))),
            RGBColor(31, 119, 180).stroke_width(2),
        ))
        .map_err(|e| e.to_string())?
        .label("limit")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RGBColor(31, 119, 180)));
    chart
        .draw_series(LineSeries::new(
            (0..COLUMNS).map(|c| (p.x(c), p.knee[c])),
            RGBColor(214, 39, 40),
        ))
        .map_err(|e| e.to_string())?
        .label("knee")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RGBColor(214, 39, 40)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((super::plot::FONT, 12))
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&lower)
        .caption("refused per second, by priority", (super::plot::FONT, 16))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..p.seconds, 0.0..p.refused_top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("per second")
        .label_style((super::plot::FONT, 12))
        .draw()
        .map_err(|e| e.to_string())?;
    for lane in 0..3 {
        let color = colors[lane];
        chart
            .draw_series(LineSeries::new(
                (0..COLUMNS).map(|c| (p.x(c), p.refused[lane][c])),
                color,
            ))
            .map_err(|e| e.to_string())?
            .label(names[lane])
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((super::plot::FONT, 12))
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// The result for people.
fn table(model: &Model, trace: &Trace) -> String {
    let mut out = String::new();
    let third = model.duration / 3;
    let _ = writeln!(
        out,
        "adaptive concurrency limit (Vegas) before a service of {} workers taking {:?} each (knee {} over the middle third), Poisson at {:.0} /s for {:?}",
        model.knee,
        Duration::from_nanos(model.service_time),
        model.knee_at(third),
        model.rate,
        Duration::from_nanos(model.duration)
    );
    let _ = writeln!(
        out,
        "{:<12} {:>6} {:>12} {:>15}",
        "phase", "knee", "mean limit", "mean in flight"
    );
    for (phase, from, to) in [
        ("before", 0, third),
        ("slowdown", third, 2 * third),
        ("after", 2 * third, model.duration),
    ] {
        let _ = writeln!(
            out,
            "{phase:<12} {:>6} {:>12.1} {:>15.1}",
            model.knee_at(from),
            mean_limit(trace, from, to),
            mean_in_flight(trace, from, to)
        );
    }
    let _ = writeln!(
        out,
        "{:<12} {:>9} {:>9} {:>9}",
        "priority", "offered", "refused", "refused %"
    );
    for (lane, name) in ["critical", "default", "sheddable"].iter().enumerate() {
        let offered = trace.offered[lane];
        let refused = trace.refused[lane].len() as u64;
        let _ = writeln!(
            out,
            "{name:<12} {offered:>9} {refused:>9} {:>9.1}",
            if offered == 0 {
                0.0
            } else {
                refused as f64 * 100.0 / offered as f64
            }
        );
    }
    out
}

/// The service and the traffic of one run.
#[derive(Clone, Copy, Debug)]
pub struct Model {
    /// Workers of the service outside the slowdown.
    pub knee: u32,
    /// Nanoseconds a worker spends on a request.
    pub service_time: u64,
    /// Mean arrivals per second.
    pub rate: f64,
    /// Length of the run, nanoseconds.
    pub duration: u64,
    /// Seed of the arrivals and priorities.
    pub seed: u64,
}

/// Per cent of arrivals at each priority: critical, default, sheddable.
pub const MIX: [u32; 3] = [20, 50, 30];
/// The priorities in the order of [`MIX`].
pub const PRIORITIES: [Priority; 3] = [Priority::Critical, Priority::Default, Priority::Sheddable];

impl Model {
    /// The knee at `at`: half the workers (at least one) during the middle
    /// third of the run.
    pub fn knee_at(&self, at: u64) -> u32 {
        if self.in_slowdown(at) {
            (self.knee / 2).max(1)
        } else {
            self.knee
        }
    }

    /// Whether `at` is in the middle third of the run.
    pub fn in_slowdown(&self, at: u64) -> bool {
        let third = self.duration / 3;
        at >= third && at < 2 * third
    }
}

/// What a run recorded, per event: time series in nanoseconds.
#[derive(Debug, Default)]
pub struct Trace {
    /// `(instant, limit)` after every admission and answer.
    pub limit: Vec<(u64, u32)>,
    /// `(instant, slots in use)` after every admission and answer.
    pub in_flight: Vec<(u64, u32)>,
    /// Arrivals per priority (critical, default, sheddable).
    pub offered: [u64; 3],
    /// Refusals per priority, with their instants.
    pub refused: [Vec<u64>; 3],
}

/// Runs `model` against an adaptive limiter; deterministic for a seed.
pub fn run(model: &Model) -> Trace {
    let clock = ManualClock::new();
    let limiter = ConcurrencyLimiter::builder(1)
        .adaptive(Vegas::new())
        .clock(clock.clone())
        .build()
        .expect("Netflix's defaults are valid bounds");
    let mut rng = ChaCha8Rng::seed_from_u64(model.seed);
    let mut trace = Trace::default();
    // Answers due: (instant, request id); the permits by id.
    let mut answers: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut permits: HashMap<u64, Permit> = HashMap::new();
    let mut waiting: VecDeque<u64> = VecDeque::new();
    let mut busy: u32 = 0;
    let mut next_id: u64 = 0;
    let mean_gap = 1e9 / model.rate;
    let mut next_arrival = 0.0_f64;
    loop {
        let arrival = next_arrival as u64;
        let answer = answers.peek().map(|Reverse((at, _))| *at);
        let arrival_first = answer.is_none_or(|answer| arrival < answer);
        let now = if arrival_first {
            arrival
        } else {
            answer.unwrap_or(arrival)
        };
        if arrival_first && arrival >= model.duration {
            break;
        }
        clock.set(Nanos::new(now));
        if arrival_first {
            let gap: f64 = rng.random::<f64>();
            next_arrival += -(1.0 - gap).ln() * mean_gap;
            let pick = rng.random_range(0..100);
            let lane = if pick < MIX[0] {
                0
            } else if pick < MIX[0] + MIX[1] {
                1
            } else {
                2
            };
            trace.offered[lane] += 1;
            match limiter.try_acquire_as(1, PRIORITIES[lane]) {
                Ok(permit) => {
                    let id = next_id;
                    next_id += 1;
                    permits.insert(id, permit);
                    waiting.push_back(id);
                }
                Err(_) => trace.refused[lane].push(now),
            }
        } else if let Some(Reverse((_, id))) = answers.pop() {
            busy -= 1;
            // The answer ends the permit: its latency is the controller's
            // sample.
            permits.remove(&id);
        }
        while busy < model.knee_at(now) {
            let Some(id) = waiting.pop_front() else {
                break;
            };
            busy += 1;
            answers.push(Reverse((now.saturating_add(model.service_time), id)));
        }
        trace.limit.push((now, limiter.limit()));
        trace.in_flight.push((now, limiter.in_flight()));
    }
    trace
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> Model {
        Model {
            knee: 40,
            service_time: 20_000_000,
            // 1.5× the 2,000/s the service serves.
            rate: 3_000.0,
            duration: 60_000_000_000,
            seed: 1,
        }
    }

    #[test]
    fn the_adaptive_limit_settles_near_the_knee_and_backs_off_when_it_halves() {
        let model = model();
        let trace = run(&model);
        let third = model.duration / 3;
        // The second half of each phase, once the controller has moved.
        let phases = [
            ("before", third / 2, third, 40.0),
            ("slow", third + third / 2, 2 * third, 20.0),
            ("after", 2 * third + third / 2, model.duration, 40.0),
        ];
        // Netflix's Vegas (a step per sample on a round trip old news, +beta
        // on any sample without a queue, a probe that took a loaded rtt for
        // the unloaded one) swung between 14 and 90 around the knee of 40
        // and settled at 1.5× it (60, 28, 60 at seed 1). With one step per
        // round trip, a slow start and Envoy's probe: in flight 41.6, 23.2,
        // 41.6 and limit 52.2, 25.2, 51.4 at seed 1.
        for (phase, from, to, knee) in phases {
            let in_flight = mean_in_flight(&trace, from, to);
            assert!(
                in_flight >= knee && in_flight <= knee * 1.2,
                "{phase}: mean in flight {in_flight:.1}, knee {knee}"
            );
            let limit = mean_limit(&trace, from, to);
            println!("{phase}: in flight {in_flight:.1}, limit {limit:.1}");
            assert!(
                limit >= knee && limit <= knee * 1.35,
                "{phase}: mean limit {limit:.1}, knee {knee}"
            );
        }
        let before = mean_limit(&trace, third / 2, third);
        let slow = mean_limit(&trace, third + third / 2, 2 * third);
        assert!(slow < before * 0.6, "backs off: {before:.1} → {slow:.1}");
    }

    #[test]
    fn sheddable_work_is_refused_before_and_more_than_critical() {
        let trace = run(&model());
        let share = |lane: usize| trace.refused[lane].len() as f64 / trace.offered[lane] as f64;
        assert!(
            share(2) > share(1) && share(1) > share(0),
            "{:?}",
            [share(0), share(1), share(2)]
        );
        let first = |lane: usize| trace.refused[lane].first().copied().unwrap_or(u64::MAX);
        assert!(
            first(2) <= first(0),
            "sheddable first refused at {}, critical at {}",
            first(2),
            first(0)
        );
    }

    #[test]
    fn the_panels_are_drawn_as_svg_and_png() {
        let model = Model {
            duration: 3_000_000_000,
            ..model()
        };
        let trace = run(&model);
        let dir = std::env::temp_dir().join(format!("tollgate-concurrency-{}", std::process::id()));
        let written = draw(&dir, &model, &trace).unwrap();
        for path in &written {
            assert!(
                std::fs::metadata(path).unwrap().len() > 1_000,
                "{}",
                path.display()
            );
        }
        assert_eq!(written.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_same_seed_gives_the_same_run() {
        let (a, b) = (run(&model()), run(&model()));
        assert_eq!(a.limit, b.limit);
        assert_eq!(a.refused, b.refused);
    }
}
