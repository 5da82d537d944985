//! Loom models of every storage path a decision takes: the compare-and-swap
//! loop of the one-word states (GCRA, fixed window) and the locked states
//! (sliding log, sliding window counter) with their seqlock-published deny
//! hint.
//!
//! Run with
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p tollgate-loom --release --target-dir target/loom --test it -- loom::
//! ```
//!
//! (`-- --nocapture` prints how many interleavings each model explored.)
//!
//! # What every model asserts
//!
//! Each model races a few requests through a real [`Limiter`] and checks
//! every explored run against the algorithm's own pure transition, replayed
//! one request at a time in every order the threads' program orders allow:
//! the run must equal one of those sequential runs exactly, every decision
//! with all of its numbers (`remaining`, `retry_after`, `reset_after`), and
//! the final state, compared through `peek_n` of every cost at several later
//! instants. (The transitions themselves are checked against independent
//! reference models by the property tests; here they are the specification
//! of "one at a time".) Which instant a request was decided at is not
//! guessed: the model clocks record, per loom thread, the reading the
//! limiter took.
//!
//! # Coverage: every admissible outcome must be seen
//!
//! Loom 0.7's partial-order reduction remembers only the last access to each
//! atomic, so a thread that loads a word and then stores it hides another
//! thread's earlier load of that word, and the interleaving where the store
//! comes first may never be tried (tokio-rs/loom#166, #392): a model whose
//! reader ran first passed after 4 runs without ever seeing the writer.
//! Three defences:
//!
//! - the thread that writes what the others only read (the clock's advancer,
//!   the hint's publisher) runs on the model's main thread, which loom
//!   schedules first;
//! - the models with a moving clock or a hint race run with a preemption
//!   bound (5): loom's bounded search adds conservative backtracking points
//!   that recover the interleavings the unbounded one skips (unbounded, the
//!   GCRA clock model missed 2 of its 13 outcomes), and keeps the runtime
//!   small; the locked three-thread models run with a bound of 2 for time
//!   (their lock-free part, the hint, is what the hint races explore
//!   deeply);
//! - after exploring, each model asserts that it observed *every* outcome
//!   some sequential order admits, not only that each observed outcome is
//!   admissible.
//!
//! `LOOM_MAX_PREEMPTIONS=n` runs every model with the bound `n` instead
//! (with 3, the locked three-thread models take about 40 s each); the
//! models with no bound of their own run without one.

#![cfg(loom)]

use std::cell::Cell;
use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use loom::thread;
use tollgate::algorithm::calendar::{CalendarUnit, CalendarWindow};
use tollgate::algorithm::sliding_log::LogState;
use tollgate::algorithm::sliding_window::WheelState;
use tollgate::algorithm::warm_up::WarmState;
use tollgate::{
    Algorithm, Clock, Decision, FixedWindow, Gcra, Limiter, ManualClock, Nanos, Quota, SlidingLog,
    SlidingWindow, WarmUp,
};

// ---------------------------------------------------------------------------
// Threads, clocks and outcomes
// ---------------------------------------------------------------------------

/// One request: its cost and the instant the limiter decided it at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Request {
    now: u64,
    cost: u64,
}

/// What one thread asked and was answered, in program order.
type Calls = Vec<(Request, Decision)>;

/// What every thread of a model asked and was answered, in thread order.
type Outcome = Vec<Calls>;

/// Work for one model thread.
type Job = Box<dyn FnOnce() -> Calls + Send>;

/// Runs `model` over every interleaving loom explores (with at most
/// `preemptions` preemptions per run, if given), then asserts that the
/// outcomes seen are exactly `expected`; prints how many runs there were
/// (seen with `--nocapture` only).
fn explore(
    name: &'static str,
    preemptions: Option<usize>,
    expected: HashSet<Outcome>,
    model: impl Fn() -> Outcome + Sync + Send + 'static,
) {
    // std, not loom: these record the exploration, they are not part of it.
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(HashSet::new()));
    let (counter, outcomes) = (std::sync::Arc::clone(&runs), std::sync::Arc::clone(&seen));
    let started = Instant::now();
    let mut builder = loom::model::Builder::new();
    // `LOOM_MAX_PREEMPTIONS`, when set, overrides the model's own bound.
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        builder.preemption_bound = preemptions;
    }
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        let outcome = model();
        outcomes.lock().unwrap().insert(outcome);
    });
    let seen = seen.lock().unwrap();
    println!(
        "loom: {name}: {} interleavings, {} distinct outcomes, in {:.2?}",
        runs.load(Ordering::Relaxed),
        seen.len(),
        started.elapsed()
    );
    let missed: Vec<_> = expected.difference(&seen).collect();
    assert!(
        missed.is_empty(),
        "{name}: loom never produced {} admissible outcomes: {missed:?}",
        missed.len()
    );
    let extra: Vec<_> = seen.difference(&expected).collect();
    assert!(extra.is_empty(), "{name}: unexpected outcomes {extra:?}");
}

loom::thread_local! {
    /// The clock reading the limiter last took on this loom thread.
    static LAST_READING: Cell<Option<u64>> = Cell::new(None);
    /// This loom thread's own time, for [`ThreadClock`].
    static THREAD_NOW: Cell<u64> = Cell::new(0);
}

fn record(now: Nanos) -> Nanos {
    LAST_READING.with(|reading| reading.set(Some(now.as_u64())));
    now
}

/// A [`ManualClock`] (its word is a loom atomic, through the crate's shim)
/// that records each reading for the thread that took it.
#[derive(Clone, Debug)]
struct RecordingClock(ManualClock);

impl Clock for RecordingClock {
    fn now(&self) -> Nanos {
        record(self.0.now())
    }
}

/// A clock on which every loom thread has a time of its own: a request that
/// read the clock "just before" another thread's admission, at an instant
/// the model chooses.
#[derive(Clone, Copy, Debug)]
struct ThreadClock;

impl ThreadClock {
    fn set(now: u64) {
        THREAD_NOW.with(|t| t.set(now));
    }
}

impl Clock for ThreadClock {
    fn now(&self) -> Nanos {
        record(Nanos::new(THREAD_NOW.with(Cell::get)))
    }
}

/// One request through the limiter's public API.
fn call<A: Algorithm, C: Clock>(limiter: &Limiter<A, C>, cost: u64) -> (Request, Decision) {
    LAST_READING.with(|reading| reading.set(None));
    let decision = if cost == 1 {
        limiter.check()
    } else {
        limiter
            .check_n(cost)
            .expect("the models stay within capacity")
    };
    let now = LAST_READING
        .with(Cell::get)
        .expect("the limiter reads its clock once per decision");
    (Request { now, cost }, decision)
}

/// A thread that makes requests of `costs`, one after another, each at the
/// paired instant of `times` on a [`ThreadClock`] (or at whatever the clock
/// reads when `times` is empty).
fn requests<A: Algorithm, C: Clock + 'static>(
    limiter: &Limiter<A, C>,
    costs: &[u64],
    times: &[u64],
) -> Job {
    assert!(times.is_empty() || times.len() == costs.len());
    let limiter = limiter.clone();
    let costs = costs.to_vec();
    let times = times.to_vec();
    Box::new(move || {
        costs
            .iter()
            .enumerate()
            .map(|(i, &cost)| {
                if let Some(&now) = times.get(i) {
                    ThreadClock::set(now);
                }
                call(&limiter, cost)
            })
            .collect()
    })
}

/// Runs `jobs[0]` on the model's main thread (which loom runs first) and
/// every other job on a loom thread of its own; returns what each did, in job
/// order.
fn race(mut jobs: Vec<Job>) -> Outcome {
    let main = jobs.remove(0);
    let handles: Vec<_> = jobs.into_iter().map(thread::spawn).collect();
    let mut calls = vec![main()];
    calls.extend(
        handles
            .into_iter()
            .map(|handle| handle.join().expect("a model thread panicked")),
    );
    calls
}

fn admitted(outcome: &[Calls]) -> u64 {
    outcome
        .iter()
        .flatten()
        .filter(|(_, decision)| decision.is_allowed())
        .map(|(request, _)| request.cost)
        .sum()
}

// ---------------------------------------------------------------------------
// The sequential specification
// ---------------------------------------------------------------------------

/// An algorithm's pure transition over a plain state, applied one request at
/// a time: what "linearizable" is measured against.
trait Sequential: Clone + fmt::Debug + Send + Sync + 'static {
    /// Decides and, if admitted, records.
    fn check(&mut self, now: u64, cost: u64) -> Decision;
    /// Decides without recording.
    fn peek(&self, now: u64, cost: u64) -> Decision;
}

#[derive(Clone, Debug)]
struct GcraSeq {
    gcra: Gcra,
    tat: u64,
}

impl Sequential for GcraSeq {
    fn check(&mut self, now: u64, cost: u64) -> Decision {
        let (decision, next) = self.gcra.transition(self.tat, Nanos::new(now), cost);
        if let Some(next) = next {
            self.tat = next;
        }
        decision
    }

    fn peek(&self, now: u64, cost: u64) -> Decision {
        self.gcra.transition(self.tat, Nanos::new(now), cost).0
    }
}

#[derive(Clone, Debug)]
struct FixedSeq {
    window: FixedWindow,
    word: u64,
    /// The window index the word holds (a fresh word: window 0).
    stored: u64,
    /// `(window, cost)` of every admission, in order: the window its count
    /// was charged to, which is the window of its reading or a later one.
    charged: Vec<(u64, u64)>,
}

impl Sequential for FixedSeq {
    fn check(&mut self, now: u64, cost: u64) -> Decision {
        let (decision, next) = self.window.transition(self.word, Nanos::new(now), cost);
        if let Some(next) = next {
            self.word = next;
            // The transition's rule: an earlier reading counts in the stored window.
            self.stored = self.stored.max(now / self.window.quota().period_nanos());
            self.charged.push((self.stored, cost));
        }
        decision
    }

    fn peek(&self, now: u64, cost: u64) -> Decision {
        self.window.transition(self.word, Nanos::new(now), cost).0
    }
}

#[derive(Clone, Debug)]
struct LogSeq {
    log: SlidingLog,
    state: LogState,
}

impl Sequential for LogSeq {
    fn check(&mut self, now: u64, cost: u64) -> Decision {
        // The locked path alone: a denial from the hint must be the same.
        let decision = self.log.decide(&self.state, Nanos::new(now), cost);
        if decision.is_allowed() && cost > 0 {
            self.log.admit(&mut self.state, Nanos::new(now), cost);
        }
        decision
    }

    fn peek(&self, now: u64, cost: u64) -> Decision {
        self.log.decide(&self.state, Nanos::new(now), cost)
    }
}

#[derive(Clone, Debug)]
struct WheelSeq {
    wheel: SlidingWindow,
    state: WheelState,
}

impl Sequential for WheelSeq {
    fn check(&mut self, now: u64, cost: u64) -> Decision {
        let decision = self.wheel.decide(&self.state, Nanos::new(now), cost);
        if decision.is_allowed() && cost > 0 {
            self.wheel.admit(&mut self.state, Nanos::new(now), cost);
        }
        decision
    }

    fn peek(&self, now: u64, cost: u64) -> Decision {
        self.wheel.decide(&self.state, Nanos::new(now), cost)
    }
}

#[derive(Clone, Debug)]
struct WarmSeq {
    warm: WarmUp,
    state: WarmState,
}

impl Sequential for WarmSeq {
    fn check(&mut self, now: u64, cost: u64) -> Decision {
        // The locked path alone: a denial from the hint must be the same.
        let (decision, next) = self.warm.transition(&self.state, Nanos::new(now), cost);
        if let Some(next) = next {
            self.state = next;
        }
        decision
    }

    fn peek(&self, now: u64, cost: u64) -> Decision {
        self.warm.transition(&self.state, Nanos::new(now), cost).0
    }
}

/// An algorithm, and its transition over a fresh state.
trait Modelled: Algorithm + Clone {
    type Seq: Sequential;
    fn sequential(&self) -> Self::Seq;
}

impl Modelled for Gcra {
    type Seq = GcraSeq;
    fn sequential(&self) -> GcraSeq {
        GcraSeq {
            gcra: self.clone(),
            tat: 0,
        }
    }
}

impl Modelled for FixedWindow {
    type Seq = FixedSeq;
    fn sequential(&self) -> FixedSeq {
        FixedSeq {
            window: self.clone(),
            word: 0,
            stored: 0,
            charged: Vec::new(),
        }
    }
}

impl Modelled for SlidingLog {
    type Seq = LogSeq;
    fn sequential(&self) -> LogSeq {
        LogSeq {
            log: self.clone(),
            state: LogState::default(),
        }
    }
}

impl Modelled for SlidingWindow {
    type Seq = WheelSeq;
    fn sequential(&self) -> WheelSeq {
        WheelSeq {
            wheel: self.clone(),
            state: self.new_state(),
        }
    }
}

impl Modelled for WarmUp {
    type Seq = WarmSeq;
    fn sequential(&self) -> WarmSeq {
        WarmSeq {
            warm: self.clone(),
            state: self.fresh(),
        }
    }
}

/// One sequential run: what every thread was answered, and the state left.
#[derive(Clone)]
struct Replay<S> {
    outcome: Outcome,
    state: S,
}

/// Every sequential run of `threads` (each thread's requests in program
/// order, the threads interleaved in every possible way) from `start`.
fn replays<S: Sequential>(start: &S, threads: &[Vec<Request>]) -> Vec<Replay<S>> {
    fn go<S: Sequential>(
        state: &S,
        threads: &[Vec<Request>],
        outcome: &mut Outcome,
        out: &mut Vec<Replay<S>>,
    ) {
        let mut finished = true;
        for thread in 0..threads.len() {
            let Some(&request) = threads[thread].get(outcome[thread].len()) else {
                continue;
            };
            finished = false;
            let mut next = state.clone();
            let decision = next.check(request.now, request.cost);
            outcome[thread].push((request, decision));
            go(&next, threads, outcome, out);
            outcome[thread].pop();
        }
        if finished {
            out.push(Replay {
                outcome: outcome.clone(),
                state: state.clone(),
            });
        }
    }
    let mut out = Vec::new();
    let mut outcome = vec![Vec::new(); threads.len()];
    go(start, threads, &mut outcome, &mut out);
    out
}

/// The outcomes of [`replays`], for every way of reading the clock in
/// `readings`.
fn admissible<S: Sequential>(start: &S, readings: &[Vec<Vec<Request>>]) -> HashSet<Outcome> {
    readings
        .iter()
        .flat_map(|threads| replays(start, threads))
        .map(|replay| replay.outcome)
        .collect()
}

/// Threads making requests of `costs` on a clock that moves once, from
/// `before` to `after`, while they run: every way they can read it (each
/// thread's readings are non-decreasing; a thread may read `before` after
/// another read `after`).
fn readings_across(costs: &[&[u64]], before: u64, after: u64) -> Vec<Vec<Vec<Request>>> {
    let mut all = vec![Vec::new()];
    for &thread in costs {
        let mut next = Vec::new();
        for prefix in &all {
            // The first `k` requests read `before`, the rest `after`.
            for k in 0..=thread.len() {
                let requests = thread
                    .iter()
                    .enumerate()
                    .map(|(i, &cost)| Request {
                        now: if i < k { before } else { after },
                        cost,
                    })
                    .collect();
                let mut threads: Vec<Vec<Request>> = Vec::clone(prefix);
                threads.push(requests);
                next.push(threads);
            }
        }
        all = next;
    }
    all
}

/// How a state answers `peek_n(cost)` at each instant of `times`, for every
/// cost from 0 to `capacity`: enough to tell two states apart.
type Answers = Vec<(u64, u64, Decision)>;

fn answers(times: &[u64], capacity: u64, mut peek: impl FnMut(u64, u64) -> Decision) -> Answers {
    let mut out = Vec::new();
    for &now in times {
        for cost in 0..=capacity {
            out.push((now, cost, peek(now, cost)));
        }
    }
    out
}

/// Asserts that the concurrent run `observed` is one of the sequential runs
/// of the same requests from `start`: the same decision for every request,
/// and a final state that answers as the replayed one does. `final_answers`
/// are the limiter's answers after the run, taken by [`answers`] with
/// `times` and `capacity`. Returns the sequential run it matched.
fn assert_linearizable<S: Sequential>(
    start: &S,
    observed: &Outcome,
    times: &[u64],
    capacity: u64,
    final_answers: &Answers,
) -> Replay<S> {
    let threads: Vec<Vec<Request>> = observed
        .iter()
        .map(|calls| calls.iter().map(|&(request, _)| request).collect())
        .collect();
    let candidates = replays(start, &threads);
    let mut same_decisions = 0;
    for replay in &candidates {
        if replay.outcome != *observed {
            continue;
        }
        same_decisions += 1;
        let expected = answers(times, capacity, |now, cost| replay.state.peek(now, cost));
        if expected == *final_answers {
            return replay.clone();
        }
    }
    let sequential: Vec<_> = candidates.iter().map(|r| &r.outcome).collect();
    panic!(
        "not linearizable, from {start:?}:\n\
         observed {observed:?}\n\
         ({same_decisions} sequential runs give these decisions; none leaves the \
         limiter's final state)\n\
         limiter's answers after the run: {final_answers:?}\n\
         every sequential run: {sequential:?}"
    );
}

/// [`answers`] through a limiter on a [`RecordingClock`]: sets the manual
/// clock to each instant.
fn limiter_answers<A: Algorithm>(limiter: &Limiter<A, RecordingClock>, times: &[u64]) -> Answers {
    let capacity = limiter.algorithm().capacity();
    answers(times, capacity, |now, cost| {
        limiter.clock().0.set(Nanos::new(now));
        limiter.peek_n(cost).expect("within capacity")
    })
}

/// [`answers`] through a limiter on a [`ThreadClock`]: moves the calling
/// thread's time to each instant.
fn thread_clock_answers<A: Algorithm>(limiter: &Limiter<A, ThreadClock>, times: &[u64]) -> Answers {
    let capacity = limiter.algorithm().capacity();
    answers(times, capacity, |now, cost| {
        ThreadClock::set(now);
        limiter.peek_n(cost).expect("within capacity")
    })
}

// ---------------------------------------------------------------------------
// Model shapes, shared by the algorithms
// ---------------------------------------------------------------------------

/// Three threads call `check()` on a clock frozen at `now`, on a fresh
/// limiter of capacity 2: exactly two are admitted, with exactly the
/// decisions of some sequential order, and the state is the one two
/// sequential admissions leave. All six orders must be seen.
fn frozen_three_checks<A: Modelled>(
    name: &'static str,
    preemptions: Option<usize>,
    algorithm: A,
    now: u64,
    probes: &'static [u64],
) {
    assert_eq!(algorithm.capacity(), 2, "{name}: wants capacity 2");
    let start = algorithm.sequential();
    let mut after_two = start.clone();
    assert!(after_two.check(now, 1).is_allowed());
    assert!(after_two.check(now, 1).is_allowed());
    assert!(after_two.check(now, 1).is_denied());
    let after_two = answers(probes, 2, |t, cost| after_two.peek(t, cost));
    let one = vec![Request { now, cost: 1 }];
    let expected = admissible(&start, &[vec![one.clone(), one.clone(), one]]);
    assert_eq!(expected.len(), 6, "{name}: each order has its own numbers");
    explore(name, preemptions, expected, move || {
        let clock = ManualClock::starting_at(Nanos::new(now));
        let limiter = Limiter::with_clock(algorithm.clone(), RecordingClock(clock));
        let observed = race(vec![
            requests(&limiter, &[1], &[]),
            requests(&limiter, &[1], &[]),
            requests(&limiter, &[1], &[]),
        ]);
        assert_eq!(admitted(&observed), 2, "{name}: {observed:?}");
        let final_answers = limiter_answers(&limiter, probes);
        assert_eq!(final_answers, after_two, "{name}: {observed:?}");
        assert_linearizable(&start, &observed, probes, 2, &final_answers);
        observed
    });
}

/// On a clock frozen at `now`, with `prefill` permits already taken, one
/// thread calls `check_n(2)` while another calls `check_n(1)` on a limiter of
/// capacity 3: each request is admitted whole or not at all, and the
/// `(allowed, remaining)` pairs are one of `outcomes`, listed by hand: those
/// of the two sequential orders. Both must be seen.
fn frozen_all_or_nothing<A: Modelled>(
    name: &'static str,
    algorithm: A,
    now: u64,
    prefill: u64,
    outcomes: &'static [[(bool, u64); 2]; 2],
    probes: &'static [u64],
) {
    assert_eq!(algorithm.capacity(), 3, "{name}: wants capacity 3");
    let mut start = algorithm.sequential();
    for _ in 0..prefill {
        assert!(start.check(now, 1).is_allowed());
    }
    let summary = |outcome: &Outcome| {
        [0, 1].map(|t| {
            let decision = outcome[t][0].1;
            (decision.is_allowed(), decision.remaining())
        })
    };
    let threads = vec![
        vec![Request { now, cost: 2 }],
        vec![Request { now, cost: 1 }],
    ];
    let expected = admissible(&start, &[threads]);
    // The hand-written outcomes are exactly the sequential ones.
    let mut listed: Vec<_> = expected.iter().map(summary).collect();
    listed.sort();
    let mut by_hand = outcomes.to_vec();
    by_hand.sort();
    assert_eq!(listed, by_hand, "{name}");
    explore(name, None, expected, move || {
        let clock = ManualClock::starting_at(Nanos::new(now));
        let limiter = Limiter::with_clock(algorithm.clone(), RecordingClock(clock));
        for _ in 0..prefill {
            assert!(limiter.check().is_allowed());
        }
        let observed = race(vec![
            requests(&limiter, &[2], &[]),
            requests(&limiter, &[1], &[]),
        ]);
        assert!(
            outcomes.contains(&summary(&observed)),
            "{name}: {observed:?}"
        );
        let final_answers = limiter_answers(&limiter, probes);
        assert_linearizable(&start, &observed, probes, 3, &final_answers);
        observed
    });
}

/// From a clock at `start`, with `prefill` permits taken at `start`, the
/// main thread advances the clock by `advance` while one thread calls
/// `check()` and another calls it twice. Every way of reading the clock and
/// every order is admissible, and each must be seen; `each` checks the
/// algorithm's own guarantee on every run.
fn clock_advances<A: Modelled>(
    name: &'static str,
    algorithm: A,
    start: u64,
    prefill: u64,
    advance: u64,
    probes: &'static [u64],
    each: impl Fn(&Outcome, &A::Seq) + Send + Sync + 'static,
) {
    clock_advances_with(
        name,
        algorithm,
        (start, prefill, advance),
        &[1, 1],
        probes,
        each,
    );
}

/// [`clock_advances`] with the second thread's checks given: `&[1, 1]`
/// there. One check suits a state whose denials tell which admission they
/// follow (a warm-up's): with two, a thread cannot read the old time twice
/// around another thread's admission at the new one, an order the
/// sequential replays cannot rule out.
fn clock_advances_with<A: Modelled>(
    name: &'static str,
    algorithm: A,
    (start, prefill, advance): (u64, u64, u64),
    second: &'static [u64],
    probes: &'static [u64],
    each: impl Fn(&Outcome, &A::Seq) + Send + Sync + 'static,
) {
    let mut initial = algorithm.sequential();
    for _ in 0..prefill {
        assert!(initial.check(start, 1).is_allowed());
    }
    let readings = readings_across(&[&[], &[1], second], start, start + advance);
    let expected = admissible(&initial, &readings);
    explore(name, Some(5), expected, move || {
        let clock = ManualClock::starting_at(Nanos::new(start));
        let limiter = Limiter::with_clock(algorithm.clone(), RecordingClock(clock.clone()));
        for _ in 0..prefill {
            assert!(limiter.check().is_allowed());
        }
        let advancer: Job = Box::new(move || {
            clock.advance(Duration::from_nanos(advance));
            Vec::new()
        });
        let observed = race(vec![
            advancer,
            requests(&limiter, &[1], &[]),
            requests(&limiter, second, &[]),
        ]);
        let capacity = algorithm.capacity();
        let final_answers = limiter_answers(&limiter, probes);
        let replay = assert_linearizable(&initial, &observed, probes, capacity, &final_answers);
        each(&observed, &replay.state);
        observed
    });
}

/// The race the deny hint exists for, on a [`ThreadClock`]: the limiter is
/// filled at the instants of `prefill`, so that a hint denying cost 1 is
/// published; then the main thread admits at each instant of `writer`
/// (each admission fills the state again and publishes a new hint, both of
/// its instants later) while another thread checks cost 1 twice at
/// `reader`, earlier than the writer's instants, so that every hint it can
/// read denies it.
///
/// The reader is never admitted, and each of its denials carries exactly
/// the numbers of the locked path at some point of the sequence. A torn read
/// (one hint's `denied_until` with another's `full_at`) would give a
/// `(retry_after, reset_after)` pair that no sequential run has. Every pair
/// of hints the reader can see in order must be seen.
fn hint_race<A: Modelled>(
    name: &'static str,
    algorithm: A,
    prefill: &'static [u64],
    writer: &'static [u64],
    reader: u64,
    probes: &'static [u64],
) {
    let mut start = algorithm.sequential();
    for &t in prefill {
        assert!(start.check(t, 1).is_allowed());
    }
    // Every hint the reader can see denies it, each with its own numbers.
    let mut state = start.clone();
    let mut hints = vec![state.peek(reader, 1)];
    for &t in writer {
        assert!(state.check(t, 1).is_allowed(), "{name}: writer at {t}");
        hints.push(state.peek(reader, 1));
    }
    assert!(hints.iter().all(Decision::is_denied), "{name}: {hints:?}");
    for (i, a) in hints.iter().enumerate() {
        for b in &hints[i + 1..] {
            assert!(
                a.retry_after() != b.retry_after() && a.reset_after() != b.reset_after(),
                "{name}: the hints must differ in both numbers to show a torn read: {hints:?}"
            );
        }
    }
    let threads = vec![
        writer.iter().map(|&now| Request { now, cost: 1 }).collect(),
        vec![
            Request {
                now: reader,
                cost: 1
            };
            2
        ],
    ];
    let expected = admissible(&start, &[threads]);
    let pairs = hints.len() * (hints.len() + 1) / 2;
    assert_eq!(
        expected.len(),
        pairs,
        "{name}: one outcome per pair of hints"
    );
    explore(name, Some(5), expected, move || {
        let limiter = Limiter::with_clock(algorithm.clone(), ThreadClock);
        for &t in prefill {
            ThreadClock::set(t);
            assert!(limiter.check().is_allowed());
        }
        let observed = race(vec![
            requests(&limiter, &vec![1; writer.len()], writer),
            requests(&limiter, &[1, 1], &[reader, reader]),
        ]);
        for (_, decision) in &observed[1] {
            assert!(
                decision.is_denied(),
                "{name}: reader admitted: {observed:?}"
            );
            assert!(hints.contains(decision), "{name}: torn hint? {observed:?}");
        }
        let capacity = algorithm.capacity();
        let final_answers = thread_clock_answers(&limiter, probes);
        assert_linearizable(&start, &observed, probes, capacity, &final_answers);
        observed
    });
}

// ---------------------------------------------------------------------------
// The models
// ---------------------------------------------------------------------------

fn quota(limit: u64, period_ns: u64) -> Quota {
    Quota::new(limit, Duration::from_nanos(period_ns)).expect("valid quota")
}

/// 2 per 100 ns, burst 2: one permit every 50 ns.
fn gcra_burst_2() -> Gcra {
    Gcra::new(quota(2, 100).with_burst(2).expect("burst")).expect("gcra")
}

#[test]
fn gcra_frozen_clock_three_checks_admit_exactly_the_burst() {
    frozen_three_checks(
        "gcra, frozen clock, 3 x check(), burst 2",
        None,
        gcra_burst_2(),
        1_000,
        &[1_000, 1_025, 1_050, 1_075, 1_100],
    );
}

#[test]
fn gcra_frozen_clock_check_n_is_all_or_nothing() {
    // 3 per 150 ns, burst 3: one permit every 50 ns.
    let gcra = Gcra::new(quota(3, 150)).expect("gcra");
    let probes = &[1_000, 1_050, 1_100, 1_150];
    // Both fit: only the order shows, in `remaining`.
    frozen_all_or_nothing(
        "gcra, frozen clock, check_n(2) | check_n(1), capacity 3",
        gcra.clone(),
        1_000,
        0,
        &[[(true, 1), (true, 0)], [(true, 0), (true, 2)]],
        probes,
    );
    // Two left: exactly one of them is admitted, whole.
    frozen_all_or_nothing(
        "gcra, frozen clock, 1 taken, check_n(2) | check_n(1), capacity 3",
        gcra,
        1_000,
        1,
        &[[(true, 0), (false, 0)], [(false, 1), (true, 1)]],
        probes,
    );
}

#[test]
fn gcra_clock_advancing_while_two_threads_check() {
    // Full at 1_000; the clock moves 75 ns (one and a half permits' worth).
    clock_advances(
        "gcra, full, clock +75 ns | check() | 2 x check()",
        gcra_burst_2(),
        1_000,
        2,
        75,
        &[1_075, 1_100, 1_125, 1_150, 1_200],
        |observed, _| {
            // Any interval of length t admits at most burst + rate·t: the
            // burst was spent at 1_000, and 75 ns refill one permit.
            assert!(admitted(observed) <= 1, "{observed:?}");
            // At 1_000 the bucket is empty: only a reading of 1_075 can win.
            for (request, decision) in observed.iter().flatten() {
                assert!(decision.is_denied() || request.now == 1_075, "{observed:?}");
            }
        },
    );
}

#[test]
fn fixed_window_frozen_clock_three_checks_admit_exactly_the_limit() {
    let window = FixedWindow::new(quota(2, 100)).expect("fixed window");
    frozen_three_checks(
        "fixed window, frozen clock, 3 x check(), limit 2",
        None,
        window,
        1_050,
        &[1_050, 1_099, 1_100, 1_150],
    );
}

#[test]
fn fixed_window_frozen_clock_check_n_is_all_or_nothing() {
    let window = FixedWindow::new(quota(3, 100)).expect("fixed window");
    frozen_all_or_nothing(
        "fixed window, frozen clock, 1 taken, check_n(2) | check_n(1), limit 3",
        window,
        1_050,
        1,
        &[[(true, 0), (false, 0)], [(false, 1), (true, 1)]],
        &[1_050, 1_100],
    );
}

/// Runs in which a request that read the old window was admitted after the
/// clock rolled over, and charged to the new window.
static ROLLOVER_CHARGED_FORWARD: AtomicUsize = AtomicUsize::new(0);

#[test]
fn fixed_window_rollover_racing_with_checks() {
    // Window 10 is [1_000, 1_100); one permit is taken at its last
    // nanosecond, then the clock moves into window 11.
    let window = FixedWindow::new(quota(2, 100)).expect("fixed window");
    clock_advances(
        "fixed window, clock 1_099 -> 1_100 | check() | 2 x check()",
        window,
        1_099,
        1,
        1,
        &[1_100, 1_150, 1_199, 1_200],
        |observed, state| {
            // Never more than the limit in a window: the window a permit is
            // counted in is the window of its reading, or a later one when
            // it was decided after another thread's admission there.
            let limit = 2;
            for window in [10, 11] {
                let count: u64 = state
                    .charged
                    .iter()
                    .filter(|&&(w, _)| w == window)
                    .map(|&(_, cost)| cost)
                    .sum();
                assert!(count <= limit, "window {window}: {count}, {observed:?}");
            }
            assert!(state.charged.iter().all(|&(w, _)| w == 10 || w == 11));
            // By reading alone, window 10 can hold more than the limit: a
            // request that read 1_099 but was decided after an admission at
            // 1_100 counts in window 11 (it was decided there). Count them.
            let by_reading = 1 + observed
                .iter()
                .flatten()
                .filter(|(r, d)| d.is_allowed() && r.now < 1_100)
                .count() as u64;
            if by_reading > limit {
                ROLLOVER_CHARGED_FORWARD.fetch_add(1, Ordering::Relaxed);
            }
        },
    );
    println!(
        "loom: fixed window rollover: {} runs charged a reading of the old window to the new one",
        ROLLOVER_CHARGED_FORWARD.load(Ordering::Relaxed)
    );
}

#[test]
fn sliding_log_frozen_clock_three_checks_admit_exactly_the_limit() {
    let log = SlidingLog::new(quota(2, 100)).expect("sliding log");
    frozen_three_checks(
        "sliding log, frozen clock, 3 x check(), limit 2",
        Some(2),
        log,
        1_000,
        &[1_000, 1_099, 1_100],
    );
}

#[test]
fn sliding_window_frozen_clock_three_checks_admit_exactly_the_limit() {
    let wheel = SlidingWindow::new(quota(2, 100), 4).expect("sliding window");
    frozen_three_checks(
        "sliding window, frozen clock, 3 x check(), limit 2, 4 slots",
        Some(2),
        wheel,
        1_010,
        &[1_010, 1_099, 1_100],
    );
}

#[test]
fn sliding_log_deny_hint_is_never_torn_and_matches_the_lock() {
    // Limit 2 per 100 ns. Full at 0 and 10: hint (100, 110). The writer
    // admits at 105 (hint (110, 205)) and at 115 (hint (205, 215)); the
    // reader, at 95, is denied by each of them with different numbers.
    let log = SlidingLog::new(quota(2, 100)).expect("sliding log");
    hint_race(
        "sliding log, hint: check() at 105, 115 | 2 x check() at 95",
        log,
        &[0, 10],
        &[105, 115],
        95,
        &[115, 204, 205, 214, 215],
    );
}

#[test]
fn sliding_window_deny_hint_is_never_torn_and_matches_the_lock() {
    // Limit 2 per 100 ns in 4 slots of 25 ns. Full at 0 and 30: hint
    // (100, 125). The writer admits at 105 (hint (125, 200)) and at 130
    // (hint (200, 225)); the reader, at 95, is denied by each of them.
    let wheel = SlidingWindow::new(quota(2, 100), 4).expect("sliding window");
    hint_race(
        "sliding window, hint: check() at 105, 130 | 2 x check() at 95",
        wheel,
        &[0, 30],
        &[105, 130],
        95,
        &[130, 199, 200, 224, 225],
    );
}

/// Warm-up of 1 per 100 ns, burst 2, a 400 ns warm-up, cold factor 3:
/// threshold 2 and max 4 permits, so the permits of a cold limiter cost
/// 250, 150, then 100 ns.
fn warm_up() -> WarmUp {
    let quota = quota(1, 100).with_burst(2).expect("burst");
    WarmUp::new(quota, Duration::from_nanos(400)).expect("warm-up")
}

#[test]
fn warm_up_frozen_clock_three_checks_admit_exactly_one() {
    // Pay later: the first is served at once and owes 250 ns; the two
    // others are denied with a retry of 250 ns, whatever the order.
    let warm = warm_up();
    let now = 1_000;
    let probes: &'static [u64] = &[1_000, 1_249, 1_250, 1_400];
    let start = warm.sequential();
    let one = vec![Request { now, cost: 1 }];
    let expected = admissible(&start, &[vec![one.clone(), one.clone(), one]]);
    assert_eq!(expected.len(), 3, "one outcome per thread admitted");
    let name = "warm-up, frozen clock, 3 x check()";
    // Bounded as the sliding log's: the lock's paths multiply the runs.
    explore(name, Some(2), expected, move || {
        let clock = ManualClock::starting_at(Nanos::new(now));
        let limiter = Limiter::with_clock(warm.clone(), RecordingClock(clock));
        let observed = race(vec![
            requests(&limiter, &[1], &[]),
            requests(&limiter, &[1], &[]),
            requests(&limiter, &[1], &[]),
        ]);
        assert_eq!(admitted(&observed), 1, "{name}: {observed:?}");
        let final_answers = limiter_answers(&limiter, probes);
        assert_linearizable(&start, &observed, probes, 2, &final_answers);
        observed
    });
}

#[test]
fn warm_up_clock_advancing_while_two_threads_check() {
    // One permit taken at 1_000 (owing 250 ns); the clock moves to 1_300,
    // past what is owed: at most one reading of 1_300 wins, and a denial
    // of a reading of 1_000 shows whether it came before or after it.
    let warm = warm_up();
    clock_advances_with(
        "warm-up, owing, clock +300 ns | check() | check()",
        warm.clone(),
        (1_000, 1, 300),
        &[1],
        &[1_300, 1_449, 1_450, 1_600, 2_000],
        move |observed, state| {
            assert!(admitted(observed) <= 1, "{observed:?}");
            // The state left is the replay of its admissions, in order.
            let mut replay = warm.sequential();
            assert!(replay.check(1_000, 1).is_allowed());
            for (request, decision) in observed.iter().flatten() {
                if decision.is_allowed() {
                    assert_eq!(request.now, 1_300, "{observed:?}");
                    assert!(replay.check(request.now, 1).is_allowed());
                }
            }
            assert_eq!(replay.state, state.state, "{observed:?}");
        },
    );
}

#[test]
fn warm_up_deny_hint_is_never_torn_and_matches_the_lock() {
    // Cold, one permit at 0: owes 250 (hint (250, 350)). The writer admits
    // at 250 (150 owed: hint (400, 600)) and at 400 (hint (500, 800)); the
    // reader, at 200, is denied by each of them with different numbers.
    hint_race(
        "warm-up, hint: check() at 250, 400 | 2 x check() at 200",
        warm_up(),
        &[0],
        &[250, 400],
        200,
        &[400, 499, 500, 799, 800],
    );
}

// ---------------------------------------------------------------------------
// Charges: the unconditional path (`charge_n`) racing admissions
// ---------------------------------------------------------------------------

/// What a charge race shows: whether the admission was let in, and the
/// state left, seen through `peek()` (its `remaining` and `retry_after`).
type ChargeOutcome = (bool, u64, Duration);

/// Races `charge_n(charge)` on the main thread against `check_n(cost)` on
/// another, on a clock frozen at `at`; asserts that every run ends as one of
/// the two sequential orders does, and that both orders were seen.
fn charge_race<A: Algorithm + Clone>(
    name: &'static str,
    algorithm: A,
    at: u64,
    charge: u64,
    cost: u64,
) {
    let fresh =
        move || Limiter::with_clock(algorithm.clone(), ManualClock::starting_at(Nanos::new(at)));
    // std, not loom: these record the exploration.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(HashSet::new()));
    let expected = std::sync::Arc::new(std::sync::Mutex::new(HashSet::new()));
    let (outcomes, orders) = (
        std::sync::Arc::clone(&seen),
        std::sync::Arc::clone(&expected),
    );
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        builder.preemption_bound = Some(5);
    }
    builder.check(move || {
        // The two sequential orders, on limiters of their own (inside the
        // model: the limiter's atomics are loom's).
        for charge_first in [true, false] {
            let limiter = fresh();
            let admitted = if charge_first {
                let _ = limiter.charge_n(charge);
                limiter.check_n(cost).expect("within capacity").is_allowed()
            } else {
                let admitted = limiter.check_n(cost).expect("within capacity").is_allowed();
                let _ = limiter.charge_n(charge);
                admitted
            };
            let after = limiter.peek();
            let outcome: ChargeOutcome = (admitted, after.remaining(), after.retry_after());
            orders.lock().unwrap().insert(outcome);
        }
        let limiter = fresh();
        let checker = limiter.clone();
        let handle =
            thread::spawn(move || checker.check_n(cost).expect("within capacity").is_allowed());
        let _ = limiter.charge_n(charge);
        let admitted = handle.join().expect("the checking thread panicked");
        let after = limiter.peek();
        outcomes
            .lock()
            .unwrap()
            .insert((admitted, after.remaining(), after.retry_after()));
    });
    let (seen, expected) = (seen.lock().unwrap(), expected.lock().unwrap());
    println!("loom: {name}: {} distinct outcomes", seen.len());
    assert_eq!(expected.len(), 2, "{name}: the two orders should differ");
    assert_eq!(
        *seen, *expected,
        "{name}: outcomes seen vs the two sequential orders"
    );
}

#[test]
fn gcra_charge_racing_a_check_loses_nothing() {
    // Burst 2, a permit every 50 ns. Charge first: a debt of 1 permit, the
    // check is denied. Check first: admitted, then the charge leaves a debt
    // of 2.
    charge_race(
        "gcra, charge_n(3) | check_n(1)",
        gcra_burst_2(),
        1_000,
        3,
        1,
    );
}

#[test]
fn fixed_window_charge_racing_a_check_records_it_all() {
    // Limit 3. Charge first: 5 of 3, the check is denied. Check first: 2
    // admitted, then the charge takes the count to 7 (a debt of 4). A
    // charge that read the count before the check landed must retry on
    // the count the check left.
    let window = FixedWindow::new(quota(3, 100)).expect("fixed window");
    charge_race(
        "fixed window, charge_n(5) | check_n(2)",
        window,
        1_000,
        5,
        2,
    );
}

#[test]
fn sliding_log_charge_racing_a_check_records_it_all() {
    let log = SlidingLog::new(quota(3, 100)).expect("sliding log");
    charge_race("sliding log, charge_n(5) | check_n(2)", log, 1_000, 5, 2);
}

#[test]
fn calendar_charge_racing_a_check_records_it_all() {
    // 3 a minute. Charge first: 5 of 3, the check is denied. Check first:
    // 2 admitted, then a debt of 4 carried into the next minute.
    let calendar = CalendarWindow::new(CalendarUnit::Minute, 3).expect("calendar window");
    charge_race("calendar, charge_n(5) | check_n(2)", calendar, 1_000, 5, 2);
}

#[test]
fn capped_charges_racing_a_check_stop_at_the_cap() {
    // `u64::MAX` records up to the debt cap in either order; the check is
    // admitted only if it ran first.
    charge_race(
        "gcra, charge_n(u64::MAX) | check_n(1)",
        gcra_burst_2(),
        1_000,
        u64::MAX,
        1,
    );
    let window = FixedWindow::new(quota(3, 100)).expect("fixed window");
    charge_race(
        "fixed window, charge_n(u64::MAX) | check_n(2)",
        window,
        1_000,
        u64::MAX,
        2,
    );
}

/// Races `charge(a)` on the main thread against `charge(b)` on another, on
/// a clock frozen at `at`: both land (or stop at the cap) in every
/// interleaving, the permits recorded add up to those of either sequential
/// order, and the state left is that order's.
fn charges_race<A: Algorithm + Clone>(name: &'static str, algorithm: A, at: u64, a: u64, b: u64) {
    let fresh =
        move || Limiter::with_clock(algorithm.clone(), ManualClock::starting_at(Nanos::new(at)));
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        builder.preemption_bound = Some(5);
    }
    builder.check(move || {
        let sequential = fresh();
        let recorded = sequential.charge(a).recorded() + sequential.charge(b).recorded();
        let want = sequential.peek();
        let limiter = fresh();
        let other = limiter.clone();
        let handle = thread::spawn(move || other.charge(b).recorded());
        let mine = limiter.charge(a).recorded();
        let theirs = handle.join().expect("the charging thread panicked");
        let got = limiter.peek();
        assert_eq!(mine + theirs, recorded, "{name}: permits recorded");
        assert_eq!(
            (got.remaining(), got.retry_after(), got.reset_after()),
            (want.remaining(), want.retry_after(), want.reset_after()),
            "{name}: the state left"
        );
    });
}

#[test]
fn two_charges_racing_both_land() {
    charges_race("gcra, charge(3) | charge(4)", gcra_burst_2(), 1_000, 3, 4);
    let window = FixedWindow::new(quota(3, 100)).expect("fixed window");
    charges_race("fixed window, charge(3) | charge(4)", window, 1_000, 3, 4);
    let calendar = CalendarWindow::new(CalendarUnit::Minute, 3).expect("calendar window");
    charges_race("calendar, charge(3) | charge(4)", calendar, 1_000, 3, 4);
    // Together past the cap (17 · 3 = 51 for the window): the first to
    // land records its all, the other what is left.
    let window = FixedWindow::new(quota(3, 100)).expect("fixed window");
    charges_race(
        "fixed window, charge(40) | charge(40)",
        window,
        1_000,
        40,
        40,
    );
}
