//! Concurrency: every algorithm's guarantee under many threads, proven from
//! the recorded admissions.
//!
//! - The frozen-clock hammer: threads released together on one limiter whose
//!   clock never moves admit exactly its capacity, and the `remaining` values
//!   of the admissions tile `0..capacity` exactly, as a one-at-a-time
//!   execution would report them.
//! - The moving-clock hammer: workers hammer one limiter while a driver moves
//!   the clock in small steps; every admission is recorded with the exact
//!   `now` its decision used (read back from the clock through a thread-local),
//!   and the window-bound checker (`support::window`) slides every window over
//!   them.
//!
//! # Which admission times the checker may trust
//!
//! The limiter reads the clock, then decides (a compare-and-swap, or a lock).
//! A worker can read `t₁`, be preempted, and decide after another worker
//! that read `t₂ > t₁` has been admitted: to the algorithm that is a clock going
//! backwards, and each window algorithm then counts the late request in its
//! newest window (fixed window, wheel) or at its newest instant (log), as its
//! docs say. The bound then holds where the state counts the admission, not
//! at `t₁` (`an_overtaken_reading_counts_in_the_newest_window` shows both), so
//! the hammer runs twice:
//!
//! - **gated**: a worker holds a read lock on a gate while it reads the clock
//!   and decides, and the driver takes the write lock to move the clock, so that
//!   every decision uses the time current when it takes effect and every
//!   admission is checked at its exact `now`;
//! - **free**: no gate, and the clock yields the processor after every third
//!   reading, as a preemption between reading and deciding would. The GCRA's
//!   bound holds for any order of readings (the TAT after the last admission
//!   of an interval is both ≥ `t1 + Σcost·T` and ≤ `t2 + burst·T`), so every
//!   admission is checked. For window
//!   algorithms, an admission is checked at its `now` when the clock still
//!   read `now` after the decision ("fresh"): then no admission that took
//!   effect before it used a later time, and the subset of fresh admissions
//!   obeys the bound exactly; the others are counted and reported. (That
//!   argument orders the clock readings of two threads through the state they
//!   share, which x86's total store order gives for the relaxed atomics here.)

use crate::support;
use support::algorithms::{fixed, gcra, log, wheel};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use support::recording::{RecordingClock, take_reading};
use support::window::{Bound, Guaranteed, Report};
use tollgate::{
    Algorithm, Clock, FixedWindow, Gcra, Limiter, ManualClock, Nanos, Quota, SlidingLog,
    SlidingWindow, WarmUp,
};

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

// ---------------------------------------------------------------------------
// Static assertions
// ---------------------------------------------------------------------------

const fn send_sync_clone<T: Send + Sync + Clone>() {}

const _: () = {
    send_sync_clone::<tollgate::DefaultLimiter>();
    send_sync_clone::<Limiter<Gcra, ManualClock>>();
    send_sync_clone::<Limiter<FixedWindow, ManualClock>>();
    send_sync_clone::<Limiter<SlidingLog, ManualClock>>();
    send_sync_clone::<Limiter<SlidingWindow, ManualClock>>();
    send_sync_clone::<Limiter<SlidingWindow, tollgate::CachedClock>>();
};

// ---------------------------------------------------------------------------
// Algorithms under test
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// Frozen clock: exactly the capacity, and `remaining` tiles it
// ---------------------------------------------------------------------------

/// The capacity of every limiter in the frozen-clock hammer.
const CAPACITY: u64 = 1_000;
/// Mixed costs; 1 is among them so that the last permits can always be taken.
const COSTS: [u64; 7] = [1, 2, 3, 5, 8, 13, 1];
/// Attempts per thread with mixed costs, then attempts of cost 1: more than
/// the capacity each, so that the limiter is drained whatever the schedule.
const MIXED_ATTEMPTS: u64 = 2 * CAPACITY;
const UNIT_ATTEMPTS: u64 = CAPACITY + 1;

/// What one frozen-clock run saw.
#[derive(Debug)]
struct Frozen {
    attempts: u64,
    admitted: u64,
    /// `(remaining, cost)` of every admission.
    tiles: Vec<(u64, u64)>,
}

fn frozen_hammer<A: Algorithm>(algorithm: A, threads: usize, mixed: bool) -> Frozen {
    // Not at the origin: a frozen instant well into the clock's life.
    let clock = ManualClock::starting_at(Nanos::new(3_600 * 1_000 * MS + 123));
    let limiter = Limiter::with_clock(algorithm, clock.clone());
    let barrier = Barrier::new(threads);
    let per_thread: Vec<(u64, Vec<(u64, u64)>)> = thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|id| {
                let limiter = limiter.clone();
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    let mut attempts = 0;
                    let mut tiles = Vec::new();
                    let mixed_attempts = if mixed { MIXED_ATTEMPTS } else { 0 };
                    for i in 0..mixed_attempts + UNIT_ATTEMPTS {
                        let cost = if i < mixed_attempts {
                            COSTS[(id + i as usize) % COSTS.len()]
                        } else {
                            1
                        };
                        let decision = if cost == 1 && i % 2 == 0 {
                            limiter.check()
                        } else {
                            limiter.check_n(cost).expect("cost within capacity")
                        };
                        attempts += 1;
                        assert_eq!(decision.limit(), CAPACITY);
                        if decision.is_allowed() {
                            tiles.push((decision.remaining(), cost));
                        } else {
                            assert!(
                                decision.remaining() < cost,
                                "denied {cost} with {} remaining",
                                decision.remaining()
                            );
                            assert!(decision.retry_after() > Duration::ZERO);
                        }
                    }
                    (attempts, tiles)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("worker panicked"))
            .collect()
    });
    let mut frozen = Frozen {
        attempts: 0,
        admitted: 0,
        tiles: Vec::new(),
    };
    for (attempts, tiles) in per_thread {
        frozen.attempts += attempts;
        frozen.admitted += tiles.iter().map(|&(_, cost)| cost).sum::<u64>();
        frozen.tiles.extend(tiles);
    }
    let after = limiter.peek();
    assert!(
        after.is_denied(),
        "still admitting after the hammer: {after}"
    );
    assert_eq!(after.remaining(), 0);
    assert_eq!(
        clock.now(),
        Nanos::new(3_600 * 1_000 * MS + 123),
        "the clock moved"
    );
    frozen
}

/// Runs the frozen-clock hammer for one algorithm at 2, 8 and 64 threads,
/// cost 1 and mixed costs, and checks each run.
fn frozen_hammer_all<A: Algorithm + Clone>(name: &str, algorithm: A) {
    for threads in [2, 8, 64] {
        for mixed in [false, true] {
            let mut run = frozen_hammer(algorithm.clone(), threads, mixed);
            assert_eq!(
                run.admitted, CAPACITY,
                "{name}, {threads} threads, mixed {mixed}: admitted {} permits of {CAPACITY} \
                 in {} attempts",
                run.admitted, run.attempts
            );
            // One at a time, each admission leaves `remaining` and takes
            // `cost`: the intervals [remaining, remaining + cost) are disjoint
            // and cover 0..capacity.
            run.tiles.sort_unstable();
            let mut next = 0;
            for &(remaining, cost) in run.tiles.iter().rev() {
                assert_eq!(
                    remaining + cost,
                    CAPACITY - next,
                    "{name}, {threads} threads: admissions overlap or leave a gap at {} \
                     ({remaining} remaining after taking {cost})",
                    CAPACITY - next
                );
                next += cost;
            }
            assert!(run.attempts >= threads as u64 * UNIT_ATTEMPTS);
        }
    }
}

#[test]
fn frozen_clock_gcra_admits_exactly_the_burst() {
    // 1,000 per second with a burst of 1,000, and a slow rate with the same burst.
    frozen_hammer_all("gcra", gcra(CAPACITY, 1_000 * MS, CAPACITY));
    frozen_hammer_all("gcra slow", gcra(3, 3_600 * 1_000 * MS, CAPACITY));
}

#[test]
fn frozen_clock_fixed_window_admits_exactly_the_limit() {
    frozen_hammer_all("fixed window", fixed(CAPACITY, 1_000 * MS));
}

#[test]
fn frozen_clock_sliding_log_admits_exactly_the_limit() {
    frozen_hammer_all("sliding log", log(CAPACITY, 1_000 * MS));
}

#[test]
fn frozen_clock_sliding_window_admits_exactly_the_limit() {
    frozen_hammer_all("sliding window", wheel(CAPACITY, 1_000 * MS, 10));
    frozen_hammer_all("sliding window, 1 slot", wheel(CAPACITY, 1_000 * MS, 1));
}

// ---------------------------------------------------------------------------
// Moving clock: the window bounds over every admission
// ---------------------------------------------------------------------------

/// One moving-clock scenario.
struct Scenario<A> {
    name: &'static str,
    algorithm: A,
    /// Costs the workers cycle through (each within the capacity).
    costs: &'static [u64],
    workers: usize,
    /// Clock steps the driver takes.
    steps: u64,
    /// Each step is 1 to `max_step` ns.
    max_step: u64,
    /// Where the clock starts.
    start: u64,
}

/// How workers and the driver interleave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// The clock never moves while a decision is between its reading and its
    /// effect: every admission is checked at its `now`.
    Gated,
    /// No gate: readings may be stale when they take effect.
    Free,
}

/// An admission: the `now` its decision used, its cost, and whether the clock
/// still read `now` once the decision had taken effect.
#[derive(Clone, Copy, Debug)]
struct Admitted {
    now: u64,
    cost: u64,
    fresh: bool,
}

/// What one moving-clock run saw.
struct Moving {
    attempts: u64,
    admitted: Vec<Admitted>,
    span: u64,
}

/// Clock steps per scenario and mode.
const STEPS: u64 = 12_000;
/// Loop iterations (attempts and waits) a worker makes at most; it stops
/// earlier when the driver is done.
const MAX_ITERATIONS_PER_WORKER: u64 = 2_000_000;
/// Attempts a worker makes per clock step before it waits for the next one:
/// few when gated (the clock waits for them anyway), more when free so that
/// workers are still deciding while the driver moves the clock.
const fn attempts_per_worker_per_step(mode: Mode) -> u64 {
    match mode {
        Mode::Gated => 2,
        Mode::Free => 8,
    }
}
/// Yields the driver waits at most for the workers before each step.
const MAX_WAIT_PER_STEP: u32 = 200;

fn moving_hammer<A: Algorithm + Clone>(scenario: &Scenario<A>, mode: Mode, seed: u64) -> Moving {
    let clock = ManualClock::starting_at(Nanos::new(scenario.start));
    let recording = RecordingClock {
        clock: clock.clone(),
        yield_every: match mode {
            Mode::Gated => 0,
            Mode::Free => 3,
        },
    };
    let limiter = Limiter::with_clock(scenario.algorithm.clone(), recording);
    let gate = RwLock::new(());
    let done = AtomicBool::new(false);
    // Relaxed throughout: `attempts` and `steps` only pace the driver and
    // the workers, `done` only stops the workers; none publishes other data
    // (the results come back through `join`).
    let attempts = AtomicU64::new(0);
    let steps = AtomicU64::new(0);
    let barrier = Barrier::new(scenario.workers + 1);
    let admitted = thread::scope(|scope| {
        let workers: Vec<_> = (0..scenario.workers)
            .map(|id| {
                let (limiter, clock) = (limiter.clone(), clock.clone());
                let (gate, done, barrier) = (&gate, &done, &barrier);
                let (attempts, steps) = (&attempts, &steps);
                scope.spawn(move || {
                    barrier.wait();
                    let mut admitted = Vec::new();
                    let (mut step, mut at_this_step) = (0, 0);
                    let mut i = 0;
                    for _ in 0..MAX_ITERATIONS_PER_WORKER {
                        if done.load(Ordering::Relaxed) {
                            break;
                        }
                        // Keep pace with the driver: a few attempts per step.
                        let current = steps.load(Ordering::Relaxed);
                        if current != step {
                            (step, at_this_step) = (current, 0);
                        }
                        if at_this_step >= attempts_per_worker_per_step(mode) {
                            thread::yield_now();
                            continue;
                        }
                        at_this_step += 1;
                        i += 1;
                        let cost = scenario.costs[(id + i as usize) % scenario.costs.len()];
                        let guard = (mode == Mode::Gated).then(|| gate.read().expect("gate"));
                        let decision = if cost == 1 {
                            limiter.check()
                        } else {
                            limiter.check_n(cost).expect("cost within capacity")
                        };
                        let now = take_reading();
                        let after = clock.now().as_u64();
                        drop(guard);
                        attempts.fetch_add(1, Ordering::Relaxed);
                        if decision.is_allowed() {
                            admitted.push(Admitted {
                                now,
                                cost,
                                fresh: after == now,
                            });
                        } else {
                            assert!(decision.retry_after() > Duration::ZERO, "{decision}");
                        }
                    }
                    admitted
                })
            })
            .collect();

        barrier.wait();
        let mut rng = seed | 1;
        for _ in 0..scenario.steps {
            let target = attempts.load(Ordering::Relaxed) + scenario.workers as u64;
            for _ in 0..MAX_WAIT_PER_STEP {
                if attempts.load(Ordering::Relaxed) >= target {
                    break;
                }
                thread::yield_now();
            }
            // xorshift64: steps of 1 ns now and then, else 1..=max_step.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let by = if rng % 8 == 0 {
                1
            } else {
                1 + (rng >> 8) % scenario.max_step
            };
            let _moving = (mode == Mode::Gated).then(|| gate.write().expect("gate"));
            clock.advance(Duration::from_nanos(by));
            steps.fetch_add(1, Ordering::Relaxed);
        }
        done.store(true, Ordering::Relaxed);

        workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker panicked"))
            .collect::<Vec<_>>()
    });
    Moving {
        attempts: attempts.into_inner(),
        admitted,
        span: clock.now().as_u64() - scenario.start,
    }
}

/// Runs a scenario gated and free, checks the guarantee, and prints what was
/// checked (`cargo test -p tollgate --test it -- concurrency:: --nocapture`).
fn check_moving<A: Algorithm + Clone + Guaranteed>(scenario: &Scenario<A>, seed: u64) {
    let guarantee = scenario.algorithm.guarantee();
    // See the module docs: the GCRA's bound holds at every reading, however
    // stale; a window algorithm's at the readings that were not overtaken.
    let any_reading = guarantee.algorithm == "gcra";
    for mode in [Mode::Gated, Mode::Free] {
        let run = moving_hammer(scenario, mode, seed);
        let stale = run.admitted.iter().filter(|a| !a.fresh).count();
        if mode == Mode::Gated {
            assert_eq!(stale, 0, "{}: the gate let the clock move", scenario.name);
        }
        let checked: Vec<(u64, u64)> = run
            .admitted
            .iter()
            .filter(|a| a.fresh || any_reading)
            .map(|a| (a.now, a.cost))
            .collect();
        let report: Report = guarantee.check(&checked).unwrap_or_else(|violation| {
            panic!(
                "{} ({mode:?}, {} workers): {violation}",
                scenario.name, scenario.workers
            )
        });
        println!(
            "{:<34} {:>5}: {} workers, {:>6} attempts, {:>5} admissions ({} stale, {}), \
             {} permits checked over {:.3} ms; fullest windows {:?}",
            scenario.name,
            format!("{mode:?}"),
            scenario.workers,
            run.attempts,
            run.admitted.len(),
            stale,
            if any_reading { "checked" } else { "left out" },
            report.permits,
            run.span as f64 / MS as f64,
            report
                .fullest
                .iter()
                .map(|&(_, most, allowed)| format!("{most}/{allowed}"))
                .collect::<Vec<_>>(),
        );
        assert!(
            report.admissions * 2 > run.admitted.len(),
            "{} ({mode:?}): most admissions were left out",
            scenario.name
        );
        if mode == Mode::Gated {
            // The load was heavy enough to reach the first bound, so that its
            // check means something (for a rate, to within the fraction of a
            // permit that the bucket still holds when it refuses).
            let (bound, most, allowed) = report.fullest[0];
            let slack = u128::from(matches!(bound, Bound::Rate { .. }));
            assert!(
                most + slack >= allowed,
                "{}: no window came near {bound}: at most {most}",
                scenario.name
            );
        }
    }
}

#[test]
fn moving_clock_gcra_obeys_burst_plus_rate_times_t() {
    let started = Instant::now();
    let scenarios = [
        Scenario {
            // 3 per 10 ms, burst 2: a fractional interval (3.33 ms), exact in
            // ticks of 1/3 ns.
            name: "gcra 3/10ms burst 2",
            algorithm: gcra(3, 10 * MS, 2),
            costs: &[1, 1, 2],
            workers: 6,
            steps: STEPS,
            max_step: 3 * MS,
            start: 0,
        },
        Scenario {
            // 17 per ms: the interval is rounded up to whole 1/16 ns ticks.
            name: "gcra 17/ms burst 5",
            algorithm: gcra(17, MS, 5),
            costs: &[1, 2, 5, 1],
            workers: 8,
            steps: STEPS,
            max_step: 60 * US,
            start: 5 * 365 * 86_400 * 1_000 * MS,
        },
        Scenario {
            // 10 per µs (100 ns apart), burst 50: sub-microsecond steps.
            name: "gcra 10/us burst 50",
            algorithm: gcra(10, US, 50),
            costs: &[1, 3, 1, 7],
            workers: 4,
            steps: STEPS,
            max_step: 100,
            start: 1,
        },
        Scenario {
            // 1,000 per second, burst 1,000 > what one step refills.
            name: "gcra 1000/s burst 1000",
            algorithm: gcra(1_000, 1_000 * MS, 1_000),
            costs: &[1, 10, 100],
            workers: 6,
            steps: STEPS,
            max_step: MS,
            start: 0,
        },
        Scenario {
            // 16 per ns, the fastest GCRA, burst 64: the bucket refills between
            // steps, so that readings overtaken by later ones are admitted too
            // (a drained bucket refuses them) and checked at their own time.
            name: "gcra 16/ns burst 64",
            algorithm: gcra(16, 1, 64),
            costs: &[1, 1, 1, 32],
            workers: 6,
            steps: STEPS,
            max_step: 100,
            start: 30 * 365 * 86_400 * 1_000 * MS,
        },
    ];
    for (seed, scenario) in scenarios.iter().enumerate() {
        check_moving(scenario, 0x9e37_79b9_7f4a_7c15 ^ seed as u64);
    }
    println!("gcra scenarios: {:?}", started.elapsed());
}

/// Warm-up under threads: the admissions, recorded at the exact `now` each
/// decision used and sorted by it, replayed one at a time through the pure
/// transition from a cold state, are every one admitted again. That is the
/// whole guarantee (each admission at least the previous one's cost after
/// it, costs from the warm-up curve), and it holds for stale readings too:
/// an admission needs `now ≥ F`, and `F` is past every earlier admission.
#[test]
fn moving_clock_warm_up_admissions_replay_one_at_a_time() {
    // 1 per µs stable, 1 per 3 µs cold, a 100 µs warm-up; the run spans
    // a few ms, so it warms up.
    let quota = Quota::new(1, Duration::from_micros(1))
        .expect("quota")
        .with_burst(2)
        .expect("burst");
    let warm = WarmUp::new(quota, Duration::from_micros(100)).expect("warm-up");
    let scenario = Scenario {
        name: "warm-up 1/us, 100 us",
        algorithm: warm.clone(),
        costs: &[1, 1, 2],
        workers: 4,
        steps: STEPS,
        max_step: 600,
        start: 7 * MS,
    };
    for (seed, mode) in [Mode::Gated, Mode::Free].into_iter().enumerate() {
        let mut run = moving_hammer(&scenario, mode, 0x5851_f42d ^ seed as u64);
        run.admitted.sort_by_key(|a| a.now);
        let mut state = warm.fresh();
        for (i, a) in run.admitted.iter().enumerate() {
            let (decision, next) = warm.transition(&state, Nanos::new(a.now), a.cost);
            assert!(
                decision.is_allowed(),
                "{mode:?}: admission {i} at {} (cost {}) replays as {decision}",
                a.now,
                a.cost
            );
            state = next.expect("an admission writes");
        }
        // Not vacuous: the run warmed up past the threshold (50 permits).
        let permits: u64 = run.admitted.iter().map(|a| a.cost).sum();
        assert!(
            permits > 200,
            "{mode:?}: {permits} permits in {} ns",
            run.span
        );
        println!(
            "{}: {mode:?}: {} attempts, {} admissions ({permits} permits) in {} ns",
            scenario.name,
            run.attempts,
            run.admitted.len(),
            run.span
        );
    }
}

#[test]
fn moving_clock_fixed_window_obeys_every_aligned_window() {
    let scenarios = [
        Scenario {
            name: "fixed window 20/ms",
            algorithm: fixed(20, MS),
            costs: &[1, 3, 7, 1],
            workers: 6,
            steps: STEPS,
            max_step: 40 * US,
            start: 0,
        },
        Scenario {
            name: "fixed window 3/7us",
            algorithm: fixed(3, 7 * US),
            costs: &[1],
            workers: 4,
            steps: STEPS,
            max_step: 2 * US,
            start: 30 * 365 * 86_400 * 1_000 * MS,
        },
    ];
    for (seed, scenario) in scenarios.iter().enumerate() {
        check_moving(scenario, 0x2545_f491_4f6c_dd1d ^ seed as u64);
    }
}

#[test]
fn moving_clock_sliding_log_obeys_every_window_at_any_start() {
    let scenarios = [
        Scenario {
            name: "sliding log 5/ms",
            algorithm: log(5, MS),
            costs: &[1],
            workers: 6,
            steps: STEPS,
            max_step: 200 * US,
            start: 0,
        },
        Scenario {
            name: "sliding log 64/333us",
            algorithm: log(64, 333 * US),
            costs: &[1, 4, 16, 1],
            workers: 8,
            steps: STEPS,
            max_step: 5 * US,
            start: 7,
        },
    ];
    for (seed, scenario) in scenarios.iter().enumerate() {
        check_moving(scenario, 0xd1b5_4a32_d192_ed03 ^ seed as u64);
    }
}

#[test]
fn moving_clock_sliding_window_obeys_its_three_bounds() {
    let scenarios = [
        Scenario {
            // 7 slots of 142,857.14 ns: uneven slots.
            name: "sliding window 30/ms, 7 slots",
            algorithm: wheel(30, MS, 7),
            costs: &[1, 2, 5, 1],
            workers: 6,
            steps: STEPS,
            max_step: 30 * US,
            start: 0,
        },
        Scenario {
            // 3 slots of a 1,001 ns period: 334, 333, 334 ns.
            name: "sliding window 10/1001ns, 3 slots",
            algorithm: wheel(10, 1_001, 3),
            costs: &[1, 2],
            workers: 4,
            steps: STEPS,
            max_step: 100,
            start: 5 * 365 * 86_400 * 1_000 * MS,
        },
        Scenario {
            name: "sliding window 8/ms, 1 slot",
            algorithm: wheel(8, MS, 1),
            costs: &[1],
            workers: 8,
            steps: STEPS,
            max_step: 120 * US,
            start: 0,
        },
    ];
    for (seed, scenario) in scenarios.iter().enumerate() {
        check_moving(scenario, 0x94d0_49bb_1331_11eb ^ seed as u64);
    }
}

// ---------------------------------------------------------------------------
// Why overtaken readings are left out for window algorithms
// ---------------------------------------------------------------------------

/// Decides `cost` at each reading in turn, as the interleaving "A reads the
/// clock, B reads a later time and is admitted, A is decided" does, and returns
/// the admissions at their readings and at the time the state counts them in.
fn overtaken<A: Algorithm>(algorithm: A, script: &[(u64, u64)]) -> [Vec<(u64, u64)>; 2] {
    let clock = ManualClock::new();
    let limiter = Limiter::with_clock(algorithm, clock.clone());
    let (mut at_reading, mut counted) = (Vec::new(), Vec::new());
    let mut newest = 0;
    for &(now, cost) in script {
        clock.set(Nanos::new(now));
        if limiter.check_n(cost).expect("within capacity").is_allowed() {
            newest = newest.max(now);
            at_reading.push((now, cost));
            counted.push((newest, cost));
        }
    }
    [at_reading, counted]
}

#[test]
fn an_overtaken_reading_counts_in_the_newest_window() {
    // 2 per 10 ns. Two permits at the start; B reads 10 or later and is
    // admitted; A had read 9 before B read, and is decided after B.
    let script = [(5, 2), (15, 1), (9, 1)];
    let wheel_script = [(1, 2), (10, 1), (9, 1)];
    for (name, [at_reading, counted], guarantee) in [
        (
            "fixed window",
            overtaken(fixed(2, 10), &script),
            fixed(2, 10).guarantee(),
        ),
        (
            "sliding log",
            overtaken(log(2, 10), &script),
            log(2, 10).guarantee(),
        ),
        (
            "sliding window",
            overtaken(wheel(2, 10, 2), &wheel_script),
            wheel(2, 10, 2).guarantee(),
        ),
    ] {
        // A is admitted, in B's window (as each module's "Clock going
        // backwards" says): the bound holds where the state counts it...
        assert_eq!(at_reading.len(), 3, "{name}: {at_reading:?}");
        assert!(guarantee.check(&counted).is_ok(), "{name}");
        // ...and not at A's own reading, which is why the free hammer checks
        // only readings that the clock had not left when they took effect.
        let violation = guarantee.check(&at_reading).unwrap_err();
        assert_eq!(violation.admitted, 3, "{name}: {violation}");
    }
    // The GCRA refuses A: an earlier reading only makes the wait longer.
    let [at_reading, _] = overtaken(gcra(1, 10, 2), &script);
    assert_eq!(at_reading, [(5, 2), (15, 1)]);
}

// ---------------------------------------------------------------------------
// Clones share one state
// ---------------------------------------------------------------------------

fn clones_share<A: Algorithm>(name: &str, algorithm: A) {
    let clock = ManualClock::new();
    let limiter = Limiter::with_clock(algorithm, clock.clone());
    let capacity = limiter.algorithm().capacity();
    let clones: Vec<_> = (0..4).map(|_| limiter.clone()).collect();
    thread::scope(|scope| {
        for clone in &clones {
            scope.spawn(move || {
                for _ in 0..capacity {
                    let _ = clone.check();
                }
            });
        }
    });
    // Every permit was taken by the clones, and the original sees it.
    let d = limiter.peek();
    assert!(d.is_denied(), "{name}: the original still has permits: {d}");
    assert_eq!(d.remaining(), 0, "{name}");
    // A clone of a clone, made after the fact, shares the same state too.
    let late = clones[3].clone();
    assert!(late.check().is_denied(), "{name}");
    // Time moves for all of them through the shared clock.
    clock.advance(Duration::from_secs(3_600));
    assert!(late.check().is_allowed(), "{name}");
    assert_eq!(
        limiter.peek_n(0).expect("cost 0").remaining(),
        capacity - 1,
        "{name}: the original did not see the late clone's admission"
    );
}

#[test]
fn clones_of_a_limiter_share_one_state() {
    clones_share("gcra", gcra(10, 1_000 * MS, 10));
    clones_share("fixed window", fixed(10, 1_000 * MS));
    clones_share("sliding log", log(10, 1_000 * MS));
    clones_share("sliding window", wheel(10, 1_000 * MS, 4));
}

// ---------------------------------------------------------------------------
// Budgets: requests admitted while the budget is nearly spent, then charged
// ---------------------------------------------------------------------------

/// What one round of the budget hammer measured.
#[derive(Clone, Copy, Debug, Default)]
struct Overshoot {
    /// Requests whose check (or reservation) was admitted.
    admitted: u64,
    /// Permits recorded in all, counting the budget spent beforehand.
    recorded: u64,
    /// The bound the docs state for the overshoot: what the admitted
    /// requests recorded past the room they found.
    bound: u64,
}

/// `threads` requests released together on a frozen clock against a budget
/// of `limit` with only `room` left; each is checked at `estimate` (a
/// `check_n`, or a reservation when `settle`) and, if admitted, charged
/// its real cost `actual` (the charge, or the settle, of the rest). Returns
/// the permits recorded and the state's word on them: a peek must show the
/// same debt a sequential run with as many admissions shows.
fn budget_round<A: Algorithm>(
    algorithm: A,
    limit: u64,
    room: u64,
    (estimate, actual): (u64, u64),
    settle: bool,
    threads: usize,
) -> Overshoot {
    let clock = ManualClock::starting_at(Nanos::new(3_600 * 1_000 * MS));
    let limiter = Limiter::with_clock(algorithm, clock);
    let spent = limiter.charge(limit - room);
    assert_eq!(spent.recorded(), limit - room);
    let barrier = Barrier::new(threads);
    let (admitted, recorded) = thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (limiter, barrier) = (&limiter, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    // Every request decides before any is charged: the
                    // worst case, all admitted on the last of the room.
                    if settle {
                        let reserved = limiter.reserve_estimate(estimate).unwrap();
                        barrier.wait();
                        let held = reserved.reserved();
                        let admitted = reserved.is_allowed();
                        // A refused request does no work: it settles 0.
                        let settled = reserved.settle(if admitted { actual } else { 0 });
                        (u64::from(admitted), held + settled.recorded())
                    } else {
                        let checked = limiter.check_n(estimate).unwrap();
                        barrier.wait();
                        if checked.is_denied() {
                            return (0, 0);
                        }
                        (1, estimate + limiter.charge(actual).recorded())
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .fold((0, 0), |(a, r), (da, dr)| (a + da, r + dr))
    });
    // Admissions never exceed the room, and the state owes exactly what was
    // recorded past the limit.
    assert!(
        admitted * estimate <= room,
        "{admitted} × {estimate} admitted in a room of {room}"
    );
    let total = limit - room + recorded;
    let debt = total - limit.min(total);
    let after = limiter.peek_n(0).unwrap();
    assert_eq!(
        after.remaining(),
        limit.saturating_sub(total),
        "the state holds every permit recorded: {after}"
    );
    let per_request = if settle {
        actual.saturating_sub(estimate)
    } else {
        actual
    };
    let bound = (admitted * per_request + admitted * estimate).saturating_sub(room);
    // Every admitted request charged in full: the bound is met exactly.
    assert_eq!(debt, bound, "overshoot vs the bound");
    Overshoot {
        admitted,
        recorded: total,
        bound,
    }
}

/// Runs `rounds` rounds and prints the largest overshoot seen beside the
/// bound: the numbers the docs quote.
fn budget_hammer<A: Algorithm + Clone>(name: &str, algorithm: A, settle: bool) {
    const LIMIT: u64 = 10_000;
    const THREADS: usize = 8;
    const ROUNDS: usize = 40;
    // Check-then-charge: a check of 1 with 10 left, then 500 each.
    // Reserve-then-settle: 300 reserved with 1,000 left, 500 used.
    let (room, costs) = if settle {
        (1_000, (300, 500))
    } else {
        (10, (1, 500))
    };
    let mut worst = Overshoot::default();
    for _ in 0..ROUNDS {
        let round = budget_round(algorithm.clone(), LIMIT, room, costs, settle, THREADS);
        if round.recorded > worst.recorded {
            worst = round;
        }
    }
    println!(
        "budget hammer: {name} ({}): {THREADS} threads, room {room} of {LIMIT}, \
         estimate {} actual {}: worst overshoot {} with {} admitted (bound {})",
        if settle {
            "reserve, settle"
        } else {
            "check, charge"
        },
        costs.0,
        costs.1,
        worst.recorded - LIMIT.min(worst.recorded),
        worst.admitted,
        worst.bound,
    );
}

#[test]
fn budget_hammer_overshoot_stays_within_what_admitted_requests_charged() {
    const SEC: u64 = 1_000 * MS;
    for settle in [false, true] {
        budget_hammer("gcra", gcra(10_000, SEC, 10_000), settle);
        budget_hammer("fixed window", fixed(10_000, SEC), settle);
        budget_hammer("sliding log", log(10_000, SEC), settle);
        budget_hammer("sliding window", wheel(10_000, SEC, 10), settle);
    }
}
