//! Reclaiming 1,000,000 idle keys: how long it takes, and what it does to
//! the latency of the checks that run meanwhile.
//!
//! Every case runs on the real clock (tollgate's `MonotonicClock`,
//! governor's default quanta clock) with one quota for every key: 1,000 per
//! second with a burst of 10^6 (GCRA, u64 keys, tollgate's sweeper off).
//! A round, for each implementation:
//!
//! 1. **populate**: 1,000 *hot* keys are charged 10,000 permits each (10 s
//!    of the quota: they stay live for the whole round), then 1,000,000
//!    *cold* keys are checked once each (1 ms of the quota: idle 1 ms
//!    later); every check must be admitted. Then 20 ms of sleep, after
//!    which every cold key is idle.
//! 2. **reclaim alone**: one call of the reclaiming operation is timed —
//!    tollgate's `sweep()`; governor's `retain_recent()` then
//!    `shrink_to_fit()` (governor keeps the table's capacity after
//!    `retain_recent`; `shrink_to_fit` hands it back, which tollgate's sweep
//!    does by itself). Afterwards exactly the 1,000 hot keys must be left
//!    (`len()`), and tollgate's sweep must have returned 1,000,000: a wrong
//!    sweep fails the bench.
//! 3. **populate** again, then the **baseline**: one thread checks hot keys
//!    (drawn uniformly) for as long as step 2's reclaim took (at least
//!    200 ms) with no reclaim running, recording each check's latency (two
//!    `Instant::now()` around it) in an HDR histogram;
//! 4. **under reclaim**: the same thread and the same checks while a second
//!    thread runs the reclaiming operation, from a common start until the
//!    reclaim returns. Every hot check must be admitted, and exactly the hot
//!    keys must be left.
//!
//! The checking thread's time on a CPU ÷ its wall time during the reclaims
//! is reported (`checker_cpu_share`): below 1 it was descheduled (other
//! processes on the machine) or blocked in the kernel, and its latencies
//! include that.
//!
//! Rounds alternate between the implementations so that load from the rest
//! of the machine falls on both; the reclaim time reported is the median of
//! the rounds, and the latency histograms merge the rounds.
//!
//! `cargo bench -p tollgate --bench eviction` prints one JSON object per
//! implementation; `scripts/bench` puts them in `BENCHMARKS.md`. Without
//! `--bench` (`cargo test --all-targets`) it is a smoke test on 10,000 keys.

#[path = "shared/mod.rs"]
mod shared;
use shared::thread_cpu_ns;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tollgate::{Gcra, KeyedLimiter, Quota};

/// Idle keys reclaimed per round under `cargo bench`.
const KEYS: u64 = 1_000_000;
/// Under `cargo test --all-targets`: a smoke test, not a measurement.
const SMOKE_KEYS: u64 = 10_000;
/// Live keys, checked during the reclaim.
const HOT: u64 = 1_000;
/// What each hot key is charged when populated: 10 s of its quota.
const HOT_CHARGE: u32 = 10_000;
/// The quota of every key: per second, and the burst.
const PER_SECOND: u32 = 1_000;
const BURST: u32 = 1_000_000;
/// Rounds per implementation.
const ROUNDS: usize = 5;
/// The shortest baseline.
const MIN_BASELINE: Duration = Duration::from_millis(200);

/// What the bench needs of a keyed limiter.
trait Subject: Sync {
    /// The implementation's name in the report.
    const NAME: &'static str;
    /// The reclaiming operation's steps, in order.
    const STEPS: &'static [&'static str];
    fn build() -> Self;
    fn check(&self, key: u64) -> bool;
    fn charge(&self, key: u64, cost: u32) -> bool;
    /// Runs the reclaiming operation; returns each step's time, and the
    /// keys the implementation says it removed, if it says.
    fn reclaim(&self) -> (Vec<Duration>, Option<usize>);
    fn len(&self) -> usize;
}

struct Tollgate(KeyedLimiter<u64>);

impl Subject for Tollgate {
    const NAME: &'static str = "tollgate";
    const STEPS: &'static [&'static str] = &["sweep"];

    fn build() -> Self {
        let quota = Quota::per_second(u64::from(PER_SECOND))
            .and_then(|q| q.with_burst(u64::from(BURST)))
            .expect("quota");
        Tollgate(
            KeyedLimiter::builder(Gcra::new(quota).expect("gcra"))
                .sweep_every(None)
                .build(),
        )
    }

    fn check(&self, key: u64) -> bool {
        self.0.check(&key).is_allowed()
    }

    fn charge(&self, key: u64, cost: u32) -> bool {
        self.0
            .check_n(&key, u64::from(cost))
            .expect("cost within capacity")
            .is_allowed()
    }

    fn reclaim(&self) -> (Vec<Duration>, Option<usize>) {
        let start = Instant::now();
        let removed = self.0.sweep();
        (vec![start.elapsed()], Some(removed))
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

struct Governor(governor::DefaultKeyedRateLimiter<u64>);

impl Subject for Governor {
    const NAME: &'static str = "governor";
    const STEPS: &'static [&'static str] = &["retain_recent", "shrink_to_fit"];

    fn build() -> Self {
        let quota = governor::Quota::per_second(NonZeroU32::new(PER_SECOND).expect("nonzero"))
            .allow_burst(NonZeroU32::new(BURST).expect("nonzero"));
        Governor(governor::RateLimiter::keyed(quota))
    }

    fn check(&self, key: u64) -> bool {
        self.0.check_key(&key).is_ok()
    }

    fn charge(&self, key: u64, cost: u32) -> bool {
        let cost = NonZeroU32::new(cost).expect("nonzero");
        matches!(self.0.check_key_n(&key, cost), Ok(Ok(())))
    }

    fn reclaim(&self) -> (Vec<Duration>, Option<usize>) {
        let start = Instant::now();
        self.0.retain_recent();
        let retained = start.elapsed();
        self.0.shrink_to_fit();
        (vec![retained, start.elapsed() - retained], None)
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// The `i`-th key: distinct for distinct `i`, scattered over the range.
/// Hot keys are `0..HOT`, cold keys `HOT..HOT + keys`.
fn key_of(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A uniform index in `0..n` (wyrand, then Lemire's reduction).
struct Uniform(u64);

impl Uniform {
    fn next_index(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0xA076_1D64_78BD_642F);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xE703_7ED1_A0B4_28DB);
        let r = ((t >> 64) as u64) ^ (t as u64);
        ((u128::from(r) * u128::from(n)) >> 64) as u64
    }
}

/// A limiter with the hot keys live and `keys` cold keys idle.
fn populated<S: Subject>(keys: u64) -> S {
    let subject = S::build();
    for i in 0..HOT {
        assert!(
            subject.charge(key_of(i), HOT_CHARGE),
            "{}: hot key {i} not admitted while populating",
            S::NAME
        );
    }
    let admitted = (HOT..HOT + keys)
        .filter(|&i| subject.check(key_of(i)))
        .count() as u64;
    assert_eq!(
        admitted,
        keys,
        "{}: every cold key's first check is admitted",
        S::NAME
    );
    assert_eq!(
        subject.len() as u64,
        HOT + keys,
        "{}: keys after populating",
        S::NAME
    );
    // A cold key holds 1 ms of its quota: 20 ms later all of them are idle.
    std::thread::sleep(Duration::from_millis(20));
    subject
}

/// Panics unless the reclaim left exactly the hot keys.
fn assert_reclaimed<S: Subject>(subject: &S, keys: u64, removed: Option<usize>) {
    assert_eq!(
        subject.len() as u64,
        HOT,
        "{}: keys left after reclaiming {keys} idle keys",
        S::NAME
    );
    if let Some(removed) = removed {
        assert_eq!(
            removed as u64,
            keys,
            "{}: keys the reclaim says it removed",
            S::NAME
        );
    }
}

fn histogram() -> Histogram<u64> {
    // 1 ns to 100 s, 3 significant digits.
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("histogram")
}

/// Checks hot keys until `stop` is set (or `until` has passed), recording
/// each check's latency; every check must be admitted. Returns the wall
/// time and the time on a CPU the loop took.
fn hot_checks<S: Subject>(
    subject: &S,
    seed: u64,
    stop: &AtomicBool,
    until: Option<Instant>,
    latencies: &mut Histogram<u64>,
) -> (Duration, Duration) {
    let started = Instant::now();
    let cpu_start = thread_cpu_ns();
    let mut uniform = Uniform(seed);
    let mut checks = 0u64;
    // Acquire pairs with the reclaiming thread's Release: nothing is
    // published through the flag, it only ends the loop.
    while !stop.load(Ordering::Acquire) {
        let key = key_of(uniform.next_index(HOT));
        let start = Instant::now();
        let admitted = black_box(subject.check(black_box(key)));
        let elapsed = start.elapsed();
        assert!(admitted, "{}: hot key check denied", S::NAME);
        latencies.saturating_record(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX).max(1));
        checks += 1;
        if checks % 1024 == 0 && until.is_some_and(|until| Instant::now() >= until) {
            break;
        }
    }
    let cpu = thread_cpu_ns()
        .zip(cpu_start)
        .map_or(0, |(end, start)| end - start);
    (started.elapsed(), Duration::from_nanos(cpu))
}

struct Outcome {
    alone: Vec<Vec<Duration>>,
    under_load: Vec<Duration>,
    baseline: Histogram<u64>,
    during: Histogram<u64>,
    /// The checking thread's wall time and time on a CPU during reclaims.
    checker_wall: Duration,
    checker_cpu: Duration,
}

fn round<S: Subject>(keys: u64, round: usize, outcome: &mut Outcome) {
    // Reclaim alone.
    let alone_time = {
        let subject: S = populated(keys);
        let (steps, removed) = subject.reclaim();
        assert_reclaimed(&subject, keys, removed);
        let total = steps.iter().sum::<Duration>();
        outcome.alone.push(steps);
        total
    };

    // Baseline, then the same checks under reclaim, on one populated map.
    let subject: S = populated(keys);
    let seed = 0xE51C ^ round as u64;
    let stop = AtomicBool::new(false);
    let until = Instant::now() + alone_time.max(MIN_BASELINE);
    let _ = hot_checks(&subject, seed, &stop, Some(until), &mut outcome.baseline);

    let start_line = Barrier::new(2);
    let (subject, stop, start_line) = (&subject, &stop, &start_line);
    let (elapsed, removed, during) = std::thread::scope(|scope| {
        let checker = scope.spawn(move || {
            let mut during = histogram();
            start_line.wait();
            let times = hot_checks(subject, seed, stop, None, &mut during);
            (during, times)
        });
        start_line.wait();
        let (steps, removed) = subject.reclaim();
        // Release: see `hot_checks`.
        stop.store(true, Ordering::Release);
        let (during, (wall, cpu)) = checker.join().expect("checker thread");
        outcome.checker_wall += wall;
        outcome.checker_cpu += cpu;
        (steps.iter().sum::<Duration>(), removed, during)
    });
    assert_reclaimed(subject, keys, removed);
    outcome.under_load.push(elapsed);
    outcome.during.add(&during).expect("merge histograms");
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn latency_json(h: &Histogram<u64>) -> String {
    format!(
        "{{\"checks\":{},\"p50_ns\":{},\"p99_ns\":{},\"p999_ns\":{},\"max_ns\":{},\"mean_ns\":{:.1}}}",
        h.len(),
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max(),
        h.mean()
    )
}

fn report<S: Subject>(keys: u64, outcome: &Outcome) {
    let totals: Vec<f64> = outcome
        .alone
        .iter()
        .map(|steps| steps.iter().sum::<Duration>().as_secs_f64())
        .collect();
    let seconds = median(totals.clone());
    let steps: Vec<String> = S::STEPS
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let times = outcome.alone.iter().map(|s| s[i].as_secs_f64()).collect();
            format!("\"{step}\":{:.6}", median(times))
        })
        .collect();
    let under_load = median(
        outcome
            .under_load
            .iter()
            .map(Duration::as_secs_f64)
            .collect(),
    );
    println!(
        "{{\"case\":\"{}\",\"keys\":{keys},\"hot\":{HOT},\"rounds\":{},\"reclaim_s\":{seconds:.6},\
         \"reclaim_ns_per_key\":{:.1},\"reclaim_s_all\":[{}],\"steps_s\":{{{}}},\
         \"reclaim_under_checks_s\":{under_load:.6},\"checker_cpu_share\":{:.2},\"baseline\":{},\"during\":{}}}",
        S::NAME,
        outcome.alone.len(),
        seconds * 1e9 / keys as f64,
        totals
            .iter()
            .map(|t| format!("{t:.6}"))
            .collect::<Vec<_>>()
            .join(","),
        steps.join(","),
        outcome.checker_cpu.as_secs_f64() / outcome.checker_wall.as_secs_f64().max(1e-9),
        latency_json(&outcome.baseline),
        latency_json(&outcome.during),
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` does not.
    let bench = std::env::args().any(|a| a == "--bench");
    let (keys, rounds) = if bench {
        (KEYS, ROUNDS)
    } else {
        (SMOKE_KEYS, 1)
    };
    let fresh = || Outcome {
        alone: Vec::new(),
        under_load: Vec::new(),
        baseline: histogram(),
        during: histogram(),
        checker_wall: Duration::ZERO,
        checker_cpu: Duration::ZERO,
    };
    let (mut tollgate, mut governor) = (fresh(), fresh());
    for r in 0..rounds {
        round::<Tollgate>(keys, r, &mut tollgate);
        round::<Governor>(keys, r, &mut governor);
    }
    report::<Tollgate>(keys, &tollgate);
    report::<Governor>(keys, &governor);
}
