//! The event loop: arrivals and answers in time order (simulated time),
//! each arrival through the library's `ConcurrencyLimiter` whose limit the
//! library's default adaptive controller ([`Knee`]) sets after each answer, each
//! admitted request through the service's workers and FIFO queue, and the
//! trace of the limit and the slots in use it records.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tollgate::Nanos;
use tollgate::concurrency::{ConcurrencyLimiter, Knee, Permit};

use super::model::{MIX, Model, PRIORITIES};

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
    /// `[start, end)` of each probe of the mean service time (the limit
    /// halved on purpose).
    pub probes: Vec<(u64, u64)>,
}

/// Runs `model` against an adaptive limiter; deterministic for a seed.
pub fn run(model: &Model) -> Trace {
    // The library's default controller, driven as its adaptive limiter
    // drives it (one update per answer), so that its probes can be shown.
    let mut controller = Knee::new().start();
    let limiter = ConcurrencyLimiter::new(u64::from(controller.limit()))
        .expect("the default initial limit is valid");
    let mut starts: HashMap<u64, (u64, u32)> = HashMap::new();
    let mut probe_start = Some(0_u64);
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
                    starts.insert(id, (now, limiter.in_flight()));
                    waiting.push_back(id);
                }
                Err(_) => trace.refused[lane].push(now),
            }
        } else if let Some(Reverse((_, id))) = answers.pop() {
            busy -= 1;
            // The answer ends the permit: its latency is the controller's
            // sample.
            permits.remove(&id);
            if let Some((started, in_flight)) = starts.remove(&id) {
                controller.update(Nanos::new(started), Nanos::new(now), in_flight, false);
                if controller.limit() != limiter.limit() {
                    let _ = limiter.set_limit(u64::from(controller.limit().max(1)));
                }
                match (probe_start, controller.probing()) {
                    (None, true) => probe_start = Some(now),
                    (Some(start), false) => {
                        trace.probes.push((start, now));
                        probe_start = None;
                    }
                    _ => {}
                }
            }
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
    if let Some(start) = probe_start {
        trace.probes.push((start, model.duration));
    }
    trace
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
