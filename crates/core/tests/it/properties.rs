//! Property tests: every algorithm against its reference model
//! (`support::model`), on random quotas and random request sequences.
//!
//! For each algorithm:
//!
//! - **model**: a [`Limiter`] on a [`ManualClock`] and the model, driven side by
//!   side, answer identical decisions (allowed, limit, remaining,
//!   retry_after, reset_after) at every step, checks and peeks alike; a cost
//!   above the capacity is a [`CostError`]. At every step, two more checks on
//!   the limiter itself:
//!   - *accurate not-until* (governor's property): after a denial with a
//!     finite `retry_after`, the same request peeked at `now + retry_after − 1`
//!     is denied and at `now + retry_after` admitted;
//!   - *exact reset*: at `now + reset_after` the limiter is full again (a
//!     peek of cost 0 reports the whole capacity remaining), one nanosecond
//!     earlier it is not.
//!   - *exclusive cell*: the same steps on a bare cell through
//!     [`Algorithm::check_cell_mut`] (the keyed limiter's path, a cell held
//!     exclusively under its shard's lock) answer as the limiter does.
//! - **no-ops**: checks of cost 0 and peeks of any cost, inserted anywhere in a
//!   sequence, change none of its decisions.
//!
//! And once for all four: **construction** accepts exactly the quotas the
//! models call representable; and **keep**: on a frozen clock, any sequence
//! of admissions and quota changes with `Carry::Keep` admits exactly what a
//! count of the permits taken, never given back, admits.
//!
//! Time only moves forward. Instants stay below 2^63 ns and periods at most
//! 2^63 ns, so that every instant an algorithm computes fits in a `u64` (see
//! the models' "Domain"); the ends of the algorithms' own counters (GCRA
//! ticks past `u64::MAX / scale`, the fixed window's last index, the wheel's
//! last epoch) are inside that range and are visited on purpose.

use crate::support;
mod warm_up;

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use support::model::{
    Expected, FixedWindowModel, GcraModel, Model, SlidingLogModel, SlidingWindowModel,
};
use tollgate::algorithm::DEBT_PERIODS;
use tollgate::{
    Algorithm, Carry, CostError, Decision, FixedWindow, Gcra, KeyedLimiter, Limiter, ManualClock,
    Nanos, Quota, SlidingLog, SlidingWindow,
};

/// The latest instant a sequence may reach.
const HORIZON: u64 = (1 << 63) - 1;
/// The longest period generated.
const MAX_PERIOD: u64 = 1 << 63;
/// A clock counting from the Unix epoch (as Redis's `TIME` does) reads about this.
const UNIX_NOW_NS: u64 = 1_700_000_000_000_000_000;
const SEC: u64 = 1_000_000_000;
const YEAR: u64 = 365 * 86_400 * SEC;

// ---------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------

/// A value in `[2^e, 2^(e+1))` for a random `e ≤ max_exp`: every order of
/// magnitude equally likely.
fn log_uniform(max_exp: u32) -> impl Strategy<Value = u64> {
    (0..=max_exp, any::<u64>()).prop_map(|(e, r)| (1u64 << e) + r % (1u64 << e))
}

fn period() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => log_uniform(62),
        2 => prop::sample::select(vec![
            1,
            2,
            3,
            7,
            10,
            1_000,
            1_000_000,
            SEC,
            60 * SEC,
            3_600 * SEC,
            86_400 * SEC,
            YEAR,
            10 * YEAR,
            MAX_PERIOD,
        ]),
        1 => 1..=100u64,
    ]
}

/// Limits mostly small, sometimes large, up to `max`.
fn limit(max: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 1..=50u64,
        2 => 51..=10_000u64,
        1 => log_uniform(max.ilog2()),
    ]
    .prop_map(move |l| l.min(max))
}

/// A quota, or one of the named ones: 3/s, 999/min, 10^10/s, 1 per 10 years.
fn quota(max_limit: u64) -> impl Strategy<Value = Quota> {
    let burst = prop_oneof![
        2 => Just(None),
        2 => (1..=50u64).prop_map(Some),
        1 => log_uniform(40).prop_map(Some),
    ];
    let random = (limit(max_limit), period(), burst);
    let named = prop::sample::select(vec![
        (3, SEC, None),
        (999, 60 * SEC, None),
        (999, 60 * SEC, Some(5)),
        (10_000_000_000, SEC, None),
        (10_000_000_000, SEC, Some(10)),
        (1, 10 * YEAR, None),
        (3, SEC, Some(1)),
        (16, 1, None),
    ]);
    prop_oneof![6 => random, 1 => named].prop_map(move |(limit, period, burst)| {
        let limit = limit.min(max_limit);
        let quota = Quota::new(limit, Duration::from_nanos(period)).unwrap();
        match burst {
            Some(burst) => quota.with_burst(burst).unwrap(),
            None => quota,
        }
    })
}

/// How far the clock moves before a step.
#[derive(Clone, Copy, Debug)]
enum Gap {
    Zero,
    /// 1 to 3 ns.
    Tiny(u64),
    /// `k/64` of the period, ± 1 ns.
    Fraction(u64, i8),
    /// A random wait below four periods.
    Random(u64),
    /// A random wait of any size.
    Huge(u64),
    /// To the previous decision's `now + retry_after`, ± 1 ns (if it was a
    /// denial with a finite wait; else `Tiny`).
    Retry(i8),
    /// To the previous decision's `now + reset_after`, ± 1 ns.
    Reset(i8),
    /// To the next window or slot boundary (or one period on), ± 1 ns.
    Edge(i8),
}

fn gap() -> impl Strategy<Value = Gap> {
    let off = -1i8..=1;
    prop_oneof![
        4 => Just(Gap::Zero),
        3 => (1..=3u64).prop_map(Gap::Tiny),
        4 => (0..=130u64, off.clone()).prop_map(|(k, o)| Gap::Fraction(k, o)),
        3 => any::<u64>().prop_map(Gap::Random),
        1 => log_uniform(62).prop_map(Gap::Huge),
        4 => off.clone().prop_map(Gap::Retry),
        2 => off.clone().prop_map(Gap::Reset),
        3 => off.prop_map(Gap::Edge),
    ]
}

/// What a step costs, relative to the limiter's capacity.
#[derive(Clone, Copy, Debug)]
enum Cost {
    Exactly(u64),
    Capacity,
    CapacityMinusOne,
    /// `r mod (capacity + 1)`.
    UpToCapacity(u64),
    /// One above the capacity: a `CostError`.
    Over,
}

fn cost() -> impl Strategy<Value = Cost> {
    prop_oneof![
        2 => Just(Cost::Exactly(0)),
        10 => Just(Cost::Exactly(1)),
        3 => (2..=3u64).prop_map(Cost::Exactly),
        1 => Just(Cost::Capacity),
        1 => Just(Cost::CapacityMinusOne),
        3 => any::<u64>().prop_map(Cost::UpToCapacity),
        1 => Just(Cost::Over),
    ]
}

impl Cost {
    fn resolve(self, capacity: u64) -> u64 {
        match self {
            Cost::Exactly(c) => c,
            Cost::Capacity => capacity,
            Cost::CapacityMinusOne => capacity - 1,
            Cost::UpToCapacity(r) => r % (capacity.saturating_add(1)).max(1),
            Cost::Over => capacity.saturating_add(1),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Step {
    gap: Gap,
    cost: Cost,
    /// Peek instead of check.
    peek: bool,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (gap(), cost(), prop::bool::weighted(0.15)).prop_map(|(gap, cost, peek)| Step {
        gap,
        cost,
        peek,
    });
    prop::collection::vec(step, 1..=200)
}

/// Where a sequence starts.
#[derive(Clone, Copy, Debug)]
enum Start {
    Zero,
    Small(u64),
    /// Around a Unix-epoch clock reading.
    Unix(u64),
    Anywhere(u64),
    /// Up to four periods before one of the algorithm's special instants
    /// (the end of its counters), chosen by the first number.
    NearEnd(usize, u64),
}

fn start() -> impl Strategy<Value = Start> {
    prop_oneof![
        4 => Just(Start::Zero),
        2 => any::<u64>().prop_map(Start::Small),
        1 => any::<u64>().prop_map(Start::Unix),
        1 => any::<u64>().prop_map(Start::Anywhere),
        2 => (any::<usize>(), any::<u64>()).prop_map(|(i, r)| Start::NearEnd(i, r)),
    ]
}

// ---------------------------------------------------------------------------
// The drivers
// ---------------------------------------------------------------------------

/// One algorithm under test: how to build it, its model, and its geometry.
trait Subject {
    type A: Algorithm;
    fn build(&self) -> Option<Self::A>;
    fn model(&self) -> Box<dyn Model>;
    fn quota(&self) -> Quota;
    /// Whether the model says `build` succeeds.
    fn accepted(&self) -> bool;
    /// The latest instant to visit.
    fn horizon(&self) -> u64 {
        HORIZON
    }
    /// Instants where the algorithm's counters end.
    fn special_instants(&self) -> Vec<u64> {
        vec![self.horizon()]
    }
    /// The next window or slot boundary after `now`.
    fn next_edge(&self, now: u64) -> u64 {
        now.saturating_add(self.quota().period_nanos())
    }
}

struct GcraSubject(Quota);

impl Subject for GcraSubject {
    type A = Gcra;
    fn build(&self) -> Option<Gcra> {
        Gcra::new(self.0).ok()
    }
    fn model(&self) -> Box<dyn Model> {
        Box::new(GcraModel::new(self.0))
    }
    fn quota(&self) -> Quota {
        self.0
    }
    fn accepted(&self) -> bool {
        GcraModel::accepts(self.0)
    }
    /// A little past the end of the ticks: beyond it every request of cost
    /// > 0 is denied for ever, not worth visiting for long.
    fn horizon(&self) -> u64 {
        let period = self.0.period_nanos();
        self.special_instants()[0]
            .saturating_add(period.saturating_mul(4))
            .min(HORIZON)
    }
    fn special_instants(&self) -> Vec<u64> {
        let (scale, _) = GcraModel::ticks(self.0);
        // The last nanosecond whose ticks fit in a u64.
        vec![u64::MAX / scale as u64]
    }
}

struct FixedWindowSubject(Quota);

impl Subject for FixedWindowSubject {
    type A = FixedWindow;
    fn build(&self) -> Option<FixedWindow> {
        FixedWindow::new(self.0).ok()
    }
    fn model(&self) -> Box<dyn Model> {
        Box::new(FixedWindowModel::new(self.0))
    }
    fn quota(&self) -> Quota {
        self.0
    }
    fn accepted(&self) -> bool {
        FixedWindowModel::accepts(self.0)
    }
    fn special_instants(&self) -> Vec<u64> {
        // The starts of the last window and of the first one past it.
        let bits = u64::BITS - self.0.limit().leading_zeros();
        let last = u128::from(u64::MAX >> bits);
        let period = u128::from(self.0.period_nanos());
        [last * period, (last + 1) * period]
            .into_iter()
            .map(|t| u64::try_from(t).unwrap_or(u64::MAX))
            .collect()
    }
    fn next_edge(&self, now: u64) -> u64 {
        let period = self.0.period_nanos();
        (now / period).saturating_add(1).saturating_mul(period)
    }
}

struct SlidingLogSubject(Quota);

impl Subject for SlidingLogSubject {
    type A = SlidingLog;
    fn build(&self) -> Option<SlidingLog> {
        SlidingLog::new(self.0).ok()
    }
    fn model(&self) -> Box<dyn Model> {
        Box::new(SlidingLogModel::new(self.0))
    }
    fn quota(&self) -> Quota {
        self.0
    }
    fn accepted(&self) -> bool {
        SlidingLogModel::accepts(self.0)
    }
}

struct SlidingWindowSubject(Quota, u32);

impl Subject for SlidingWindowSubject {
    type A = SlidingWindow;
    fn build(&self) -> Option<SlidingWindow> {
        SlidingWindow::new(self.0, self.1).ok()
    }
    fn model(&self) -> Box<dyn Model> {
        Box::new(SlidingWindowModel::new(self.0, self.1))
    }
    fn quota(&self) -> Quota {
        self.0
    }
    fn accepted(&self) -> bool {
        SlidingWindowModel::accepts(self.1)
    }
    /// The wheel's epoch `⌊t·n/T⌋` is a `u64`: keep it, and the epochs `n`
    /// later that `retry_after` and `reset_after` name, below `u64::MAX`.
    fn horizon(&self) -> u64 {
        let n = u128::from(self.1);
        let last = (((1u128 << 64) - n) * u128::from(self.0.period_nanos()) - 1) / n;
        u64::try_from(last).unwrap_or(u64::MAX).min(HORIZON)
    }
    fn next_edge(&self, now: u64) -> u64 {
        let n = u128::from(self.1);
        let period = u128::from(self.0.period_nanos());
        let epoch = u128::from(now) * n / period;
        let start = ((epoch + 1) * period).div_ceil(n);
        u64::try_from(start).unwrap_or(u64::MAX)
    }
}

fn resolve_start<S: Subject>(subject: &S, start: Start) -> u64 {
    let period = subject.quota().period_nanos();
    let t = match start {
        Start::Zero => 0,
        Start::Small(r) => r % 1_000_000_000_000,
        Start::Unix(r) => UNIX_NOW_NS + r % 1_000_000_000_000_000,
        Start::Anywhere(r) => r % subject.horizon(),
        Start::NearEnd(i, r) => {
            let ends = subject.special_instants();
            let end = ends[i % ends.len()];
            end.saturating_sub(r % period.saturating_mul(4).saturating_add(4))
        }
    };
    t.min(subject.horizon())
}

/// The clock after a gap of `gap` from `now`, given the last decision there.
fn resolve_gap<S: Subject>(subject: &S, now: u64, gap: Gap, last: Option<Expected>) -> u64 {
    let period = subject.quota().period_nanos();
    let offset = |at: u64, o: i8| at.saturating_add_signed(i64::from(o)).max(now);
    let next = match gap {
        Gap::Zero => now,
        Gap::Tiny(d) => now.saturating_add(d),
        Gap::Fraction(k, o) => {
            let d = u128::from(period) * u128::from(k) / 64;
            offset(now.saturating_add(u64::try_from(d).unwrap_or(u64::MAX)), o)
        }
        Gap::Random(r) => now.saturating_add(r % period.saturating_mul(4)),
        Gap::Huge(d) => now.saturating_add(d),
        Gap::Retry(o) => match last {
            Some(e) if !e.allowed && e.retry_after_ns != u64::MAX => {
                offset(now.saturating_add(e.retry_after_ns), o)
            }
            _ => now.saturating_add(1),
        },
        Gap::Reset(o) => match last {
            Some(e) => offset(now.saturating_add(e.reset_after_ns), o),
            None => now,
        },
        Gap::Edge(o) => offset(subject.next_edge(now), o),
    };
    next.min(subject.horizon())
}

fn check_cost_error(
    result: Result<Decision, CostError>,
    cost: u64,
    capacity: u64,
) -> Result<(), TestCaseError> {
    match result {
        Err(e) => {
            prop_assert_eq!((e.cost(), e.capacity()), (cost, capacity));
            Ok(())
        }
        Ok(d) => Err(TestCaseError::fail(format!(
            "cost {cost} above capacity {capacity} gave {d:?}, not a CostError"
        ))),
    }
}

/// Drives the limiter and the model side by side through `steps`, checking
/// equality, the accurate not-until property and the exact reset at every step.
fn against_model<S: Subject>(
    subject: &S,
    start: Start,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let built = subject.build();
    prop_assert_eq!(
        built.is_some(),
        subject.accepted(),
        "construction of {}",
        subject.quota()
    );
    let Some(algorithm) = built else {
        return Ok(());
    };
    let model = subject.model();
    let capacity = algorithm.capacity();
    prop_assert_eq!(capacity, model.capacity());
    let mut now = resolve_start(subject, start);
    let clock = ManualClock::starting_at(Nanos::new(now));
    // Beside the limiter, a bare cell held exclusively, as a keyed
    // limiter's shard holds its keys' cells: `check_cell_mut` must answer
    // and write exactly as `check_cell` does.
    let exclusive = algorithm.clone();
    let mut exclusive_cell = exclusive.new_cell();
    let limiter = Limiter::with_clock(algorithm, clock.clone());
    let mut last = None;
    let mut at_the_horizon = 0;
    for (i, step) in steps.iter().enumerate() {
        now = resolve_gap(subject, now, step.gap, last);
        // Time stands still at the horizon: a few steps there are enough.
        if now == subject.horizon() {
            at_the_horizon += 1;
            if at_the_horizon > 8 {
                break;
            }
        }
        clock.set(Nanos::new(now));
        let cost = step.cost.resolve(capacity);
        if cost > capacity {
            check_cost_error(limiter.check_n(cost), cost, capacity)?;
            check_cost_error(limiter.peek_n(cost), cost, capacity)?;
            // The models' convention for a request that can never fit.
            let never = model.peek(now, cost);
            prop_assert!(
                !never.allowed && never.retry_after_ns == u64::MAX,
                "model: {never}"
            );
            continue;
        }
        // Cost 1 goes through `check`/`peek` every other time.
        let plain = cost == 1 && i % 2 == 0;
        let (got, want) = match (step.peek, plain) {
            (true, true) => (limiter.peek(), model.peek(now, cost)),
            (true, false) => (limiter.peek_n(cost).unwrap(), model.peek(now, cost)),
            (false, true) => (limiter.check(), model.check(now, cost)),
            (false, false) => (limiter.check_n(cost).unwrap(), model.check(now, cost)),
        };
        let at = Nanos::new(now);
        let held = if step.peek {
            exclusive.peek_cell(&exclusive_cell, at, cost)
        } else {
            exclusive.check_cell_mut(&mut exclusive_cell, at, cost)
        };
        prop_assert_eq!(
            held,
            got,
            "step {} at {} ns, cost {}: check_cell_mut",
            i,
            now,
            cost
        );
        let got = Expected::from(got);
        prop_assert_eq!(
            got,
            want,
            "step {} at {} ns, cost {}{}: limiter vs model",
            i,
            now,
            cost,
            if step.peek { " (peek)" } else { "" }
        );
        last = Some(got);

        // Accurate not-until: the wait is exact to the nanosecond.
        if !got.allowed && got.retry_after_ns != u64::MAX {
            prop_assert!(
                got.retry_after_ns >= 1,
                "step {i} at {now} ns: a denial with no wait"
            );
            if let Some(at) = now.checked_add(got.retry_after_ns) {
                clock.set(Nanos::new(at - 1));
                let before = limiter.peek_n(cost).unwrap();
                clock.set(Nanos::new(at));
                let after = limiter.peek_n(cost).unwrap();
                clock.set(Nanos::new(now));
                prop_assert!(
                    before.is_denied() && after.is_allowed(),
                    "step {i} at {now} ns, cost {cost}: retry_after {} but at −1 ns {before}, at +0 ns {after}",
                    got.retry_after_ns
                );
            }
        }
        // Exact reset: full at now + reset_after, not one nanosecond earlier.
        // (A peek's `reset_after` is that of the admission it did not make.)
        // "Never" (`u64::MAX`) must be true: not full even at the clock's end.
        if got.reset_after_ns == u64::MAX && (!step.peek || !got.allowed) {
            clock.set(Nanos::MAX);
            let last = limiter.peek_n(0).unwrap();
            clock.set(Nanos::new(now));
            prop_assert!(
                last.remaining() < capacity,
                "step {i} at {now} ns: reset_after never but full at the clock's end: {last}"
            );
        }
        let reset_at = now
            .checked_add(got.reset_after_ns)
            .filter(|_| got.reset_after_ns != u64::MAX);
        if let Some(at) = reset_at.filter(|_| !step.peek || !got.allowed) {
            if got.reset_after_ns > 0 {
                clock.set(Nanos::new(at - 1));
                let before = limiter.peek_n(0).unwrap();
                prop_assert!(
                    before.remaining() < capacity,
                    "step {i} at {now} ns: reset_after {} but full 1 ns earlier: {before}",
                    got.reset_after_ns
                );
            }
            clock.set(Nanos::new(at));
            let after = limiter.peek_n(0).unwrap();
            clock.set(Nanos::new(now));
            prop_assert!(
                after.remaining() == capacity,
                "step {i} at {now} ns: reset_after {} but not full then: {after}",
                got.reset_after_ns
            );
        }
    }
    Ok(())
}

/// Drives the limiter and the model through `steps` where every peek step
/// is instead a charge of three times its cost (so above the capacity as
/// often as not; now and then of `u64::MAX`): every answer and every count
/// of permits recorded must match, and a charge's `retry_after` must be
/// exact to the nanosecond like any other.
fn charges_against_model<S: Subject>(
    subject: &S,
    start: Start,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let Some(algorithm) = subject.build() else {
        return Ok(());
    };
    let model = subject.model();
    let capacity = algorithm.capacity();
    let mut now = resolve_start(subject, start);
    let clock = ManualClock::starting_at(Nanos::new(now));
    let limiter = Limiter::with_clock(algorithm, clock.clone());
    let mut last = None;
    for (i, step) in steps.iter().enumerate() {
        now = resolve_gap(subject, now, step.gap, last);
        clock.set(Nanos::new(now));
        let cost = step.cost.resolve(capacity);
        let (got, want, what) = if step.peek {
            // Now and then an absurd charge, which must stop at the cap.
            let charge = if cost % 7 == 3 {
                u64::MAX
            } else {
                cost.saturating_mul(3)
            };
            let charged = limiter.charge(charge);
            let (want, recorded) = model.charge(now, charge);
            prop_assert_eq!(
                charged.recorded(),
                recorded,
                "step {} at {} ns, charge of {}: recorded, limiter vs model",
                i,
                now,
                charge
            );
            prop_assert_eq!(charged.forgiven(), charge - recorded);
            (charged.decision(), want, "charge")
        } else if cost <= capacity && cost % 4 == 1 {
            // Reserve, then settle at twice the estimate (or, refused, at
            // the estimate: the work went ahead and is paid in full): the
            // reservation is the model's check, the settle its charge of
            // what the reservation did not hold.
            let reserved = limiter.reserve_estimate(cost).unwrap();
            let want = model.check(now, cost);
            prop_assert_eq!(
                Expected::from(reserved.decision()),
                want,
                "step {} reserve",
                i
            );
            let (actual, held) = if reserved.is_allowed() {
                (cost.saturating_mul(2), cost)
            } else {
                (cost, 0)
            };
            let settled = reserved.settle(actual);
            let (want, recorded) = model.charge(now, actual - held);
            prop_assert_eq!(settled.recorded(), recorded, "step {} settle: recorded", i);
            (settled.decision(), want, "settle")
        } else if cost <= capacity {
            (
                limiter.check_n(cost).unwrap(),
                model.check(now, cost),
                "check",
            )
        } else {
            continue;
        };
        let got_expected = Expected::from(got);
        prop_assert_eq!(
            got_expected,
            want,
            "step {} at {} ns, {} of {}: limiter vs model",
            i,
            now,
            what,
            cost
        );
        last = Some(got_expected);
        if step.peek && got.is_denied() && got_expected.retry_after_ns != u64::MAX {
            if let Some(at) = now.checked_add(got_expected.retry_after_ns) {
                clock.set(Nanos::new(at - 1));
                let before = limiter.peek();
                clock.set(Nanos::new(at));
                let after = limiter.peek();
                clock.set(Nanos::new(now));
                prop_assert!(
                    before.is_denied() && after.is_allowed(),
                    "step {i} at {now} ns: after a charge, retry_after {} but at −1 ns {before}, at +0 ns {after}",
                    got_expected.retry_after_ns
                );
            }
        }
    }
    Ok(())
}

/// A no-op inserted before a step of the sequence.
#[derive(Clone, Copy, Debug)]
enum NoOp {
    None,
    /// A check of cost 0, at a point between the previous step and this one.
    CheckZero(u64),
    /// A peek of some cost, likewise.
    Peek(u64, Cost),
}

fn no_ops() -> impl Strategy<Value = Vec<NoOp>> {
    let op = prop_oneof![
        2 => Just(NoOp::None),
        1 => any::<u64>().prop_map(NoOp::CheckZero),
        1 => (any::<u64>(), cost()).prop_map(|(r, c)| NoOp::Peek(r, c)),
    ];
    prop::collection::vec(op, 200)
}

/// Runs `steps` on two limiters, the second with `ops` inserted; their
/// decisions on the steps must be identical.
fn no_ops_change_nothing<S: Subject>(
    subject: &S,
    start: Start,
    steps: &[Step],
    ops: &[NoOp],
) -> Result<(), TestCaseError> {
    let (Some(a), Some(b)) = (subject.build(), subject.build()) else {
        return Ok(());
    };
    let capacity = a.capacity();
    let mut now = resolve_start(subject, start);
    let (clock_a, clock_b) = (
        ManualClock::starting_at(Nanos::new(now)),
        ManualClock::starting_at(Nanos::new(now)),
    );
    let (plain, busy) = (
        Limiter::with_clock(a, clock_a.clone()),
        Limiter::with_clock(b, clock_b.clone()),
    );
    let mut last = None;
    for (i, (step, op)) in steps.iter().zip(ops).enumerate() {
        let before = now;
        now = resolve_gap(subject, now, step.gap, last);
        let between = |r: u64| before + r % (now - before + 1);
        match *op {
            NoOp::None => {}
            NoOp::CheckZero(r) => {
                clock_b.set(Nanos::new(between(r)));
                let _ = busy.check_n(0);
            }
            NoOp::Peek(r, c) => {
                clock_b.set(Nanos::new(between(r)));
                let _ = busy.peek_n(c.resolve(capacity));
            }
        }
        clock_a.set(Nanos::new(now));
        clock_b.set(Nanos::new(now));
        let cost = step.cost.resolve(capacity);
        let (x, y) = if step.peek {
            (plain.peek_n(cost), busy.peek_n(cost))
        } else {
            (plain.check_n(cost), busy.check_n(cost))
        };
        prop_assert_eq!(
            x,
            y,
            "step {} at {} ns, cost {}, after {:?}",
            i,
            now,
            cost,
            op
        );
        if let Ok(x) = x {
            last = Some(Expected::from(x));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The properties
// ---------------------------------------------------------------------------

/// Cases per model-equivalence property (each up to 200 steps).
const MODEL_CASES: u32 = 4096;
/// Cases per charge property.
const CHARGE_CASES: u32 = 1024;
/// Cases per no-op property.
const NO_OP_CASES: u32 = 1024;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

fn slots() -> impl Strategy<Value = u32> {
    prop_oneof![
        4 => 1..=64u32,
        1 => prop::sample::select(vec![1, 2, 3, 10, 60, 64]),
    ]
}

proptest! {
    #![proptest_config(config(MODEL_CASES))]

    #[test]
    fn gcra_matches_model(quota in quota(u64::MAX), start in start(), steps in steps()) {
        against_model(&GcraSubject(quota), start, &steps)?;
    }

    #[test]
    fn fixed_window_matches_model(quota in quota(u64::MAX), start in start(), steps in steps()) {
        against_model(&FixedWindowSubject(quota), start, &steps)?;
    }

    #[test]
    fn sliding_log_matches_model(quota in quota(10_000), start in start(), steps in steps()) {
        against_model(&SlidingLogSubject(quota), start, &steps)?;
    }

    #[test]
    fn sliding_window_matches_model(
        quota in quota(u64::MAX),
        slots in slots(),
        start in start(),
        steps in steps(),
    ) {
        against_model(&SlidingWindowSubject(quota, slots), start, &steps)?;
    }
}

proptest! {
    #![proptest_config(config(CHARGE_CASES))]

    #[test]
    fn gcra_charges_match_model(quota in quota(u64::MAX), start in start(), steps in steps()) {
        charges_against_model(&GcraSubject(quota), start, &steps)?;
    }

    #[test]
    fn fixed_window_charges_match_model(quota in quota(u64::MAX), start in start(), steps in steps()) {
        charges_against_model(&FixedWindowSubject(quota), start, &steps)?;
    }

    #[test]
    fn sliding_log_charges_match_model(quota in quota(10_000), start in start(), steps in steps()) {
        charges_against_model(&SlidingLogSubject(quota), start, &steps)?;
    }

    #[test]
    fn sliding_window_charges_match_model(
        quota in quota(u64::MAX),
        slots in slots(),
        start in start(),
        steps in steps(),
    ) {
        charges_against_model(&SlidingWindowSubject(quota, slots), start, &steps)?;
    }
}

proptest! {
    #![proptest_config(config(NO_OP_CASES))]

    #[test]
    fn gcra_no_ops(quota in quota(u64::MAX), start in start(), steps in steps(), ops in no_ops()) {
        no_ops_change_nothing(&GcraSubject(quota), start, &steps, &ops)?;
    }

    #[test]
    fn fixed_window_no_ops(quota in quota(u64::MAX), start in start(), steps in steps(), ops in no_ops()) {
        no_ops_change_nothing(&FixedWindowSubject(quota), start, &steps, &ops)?;
    }

    #[test]
    fn sliding_log_no_ops(quota in quota(10_000), start in start(), steps in steps(), ops in no_ops()) {
        no_ops_change_nothing(&SlidingLogSubject(quota), start, &steps, &ops)?;
    }

    #[test]
    fn sliding_window_no_ops(
        quota in quota(u64::MAX),
        slots in slots(),
        start in start(),
        steps in steps(),
        ops in no_ops(),
    ) {
        no_ops_change_nothing(&SlidingWindowSubject(quota, slots), start, &steps, &ops)?;
    }
}

proptest! {
    #![proptest_config(config(16384))]

    /// Every constructor accepts exactly the quotas its model calls
    /// representable, over the whole range of limits, periods and bursts.
    #[test]
    fn construction_matches_models(
        limit in prop_oneof![log_uniform(63), Just(u64::MAX)],
        period in prop_oneof![log_uniform(63), Just(u64::MAX)],
        burst in prop_oneof![log_uniform(63), 1..=64u64],
        slots in prop_oneof![0..=70u32, (1u32 << 16) - 1..=(1 << 16) + 1],
    ) {
        let quota = Quota::new(limit, Duration::from_nanos(period)).unwrap().with_burst(burst).unwrap();
        prop_assert_eq!(Gcra::new(quota).is_ok(), GcraModel::accepts(quota), "gcra {}", quota);
        prop_assert_eq!(FixedWindow::new(quota).is_ok(), FixedWindowModel::accepts(quota), "fixed window {}", quota);
        prop_assert_eq!(SlidingLog::new(quota).is_ok(), SlidingLogModel::accepts(quota), "sliding log {}", quota);
        prop_assert_eq!(
            SlidingWindow::new(quota, slots).is_ok(),
            SlidingWindowModel::accepts(slots),
            "sliding window {} slots {}", quota, slots
        );
    }
}

/// Regression: two admissions in the wheel's last epoch (`⌊t·n/T⌋ = u64::MAX`,
/// reached with short periods: here 1 ns and 2 slots from 2^63 ns on) made
/// `SlidingWindow::admit` compute `head + 1` on `u64::MAX`: a panic in debug
/// builds, in release a loop over 2^64 epochs with the lock held.
#[test]
fn sliding_window_admits_twice_in_its_last_epoch() {
    let quota = Quota::new(3, Duration::from_nanos(1)).unwrap();
    let clock = ManualClock::starting_at(Nanos::MAX);
    let limiter = Limiter::with_clock(SlidingWindow::new(quota, 2).unwrap(), clock);
    assert!(limiter.check().is_allowed());
    assert!(limiter.check().is_allowed());
    assert!(limiter.check().is_allowed());
    // Past the end of its epochs the wheel no longer turns: it fails closed.
    let denied = limiter.check();
    assert!(denied.is_denied());
    assert_eq!(denied.retry_after(), Duration::from_nanos(u64::MAX));
}

/// Regression: with a limit above 2^63, `live + cost` overflowed in
/// `SlidingWindow::decide`: a panic in debug builds, and in release a sum
/// that wraps to a small number and admits a second `limit` into a full window.
#[test]
fn sliding_window_limit_near_u64_max_does_not_overflow() {
    let limit = (1 << 63) + 5;
    let quota = Quota::new(limit, Duration::from_secs(1)).unwrap();
    let limiter = Limiter::with_clock(SlidingWindow::new(quota, 4).unwrap(), ManualClock::new());
    assert!(limiter.check_n(limit).unwrap().is_allowed());
    let denied = limiter.check_n(limit).unwrap();
    assert!(denied.is_denied());
    assert_eq!(denied.retry_after(), Duration::from_secs(1));
}

/// Regression: near the end of the GCRA's ticks, the wait rounded up to a
/// whole nanosecond can start the request after its TAT, and so past the
/// last tick: the denial said "retry in 1 ns", and 1 ns later the same
/// request was denied for ever.
#[test]
fn gcra_retry_after_holds_at_the_end_of_its_ticks() {
    // 16 per 2 ns: 8 ticks per ns, one tick per permit, a bucket of 10 ticks.
    let quota = Quota::new(16, Duration::from_nanos(2))
        .unwrap()
        .with_burst(10)
        .unwrap();
    // The ticks of this instant are u64::MAX − 15.
    let start = u64::MAX / 8 - 1;
    let clock = ManualClock::starting_at(Nanos::new(start));
    let limiter = Limiter::with_clock(Gcra::new(quota).unwrap(), clock.clone());
    assert!(limiter.check().is_allowed());
    let denied = limiter.check_n(10).unwrap();
    assert!(denied.is_denied());
    for later in [1, 2, 3, 1_000] {
        clock.set(Nanos::new(start + later));
        assert!(
            limiter.peek_n(10).unwrap().is_denied(),
            "admitted {later} ns later"
        );
    }
    assert_eq!(denied.retry_after(), Duration::from_nanos(u64::MAX));
}

// ---------------------------------------------------------------------------
// Carry::Keep: permits taken stay taken across any sequence of changes
// ---------------------------------------------------------------------------

/// One step of a life under changing quotas, on a frozen clock.
#[derive(Clone, Copy, Debug)]
enum KeepStep {
    /// Take `r mod (capacity + 1)` permits.
    Take(u64),
    /// Change the key's quota (through the default or an override) to
    /// `limit` (and burst) per period, with `Carry::Keep`.
    Change {
        limit: u64,
        burst: u64,
        period: u64,
        slots: u32,
        through_override: bool,
    },
}

fn keep_steps() -> impl Strategy<Value = Vec<KeepStep>> {
    let change = (
        1..=40u64,
        1..=40u64,
        prop::sample::select(vec![1_000_000, 7_000_000, SEC, 60 * SEC, 3_600 * SEC]),
        1..=12u32,
        any::<bool>(),
    )
        .prop_map(
            |(limit, burst, period, slots, through_override)| KeepStep::Change {
                limit,
                burst,
                period,
                slots,
                through_override,
            },
        );
    let step = prop_oneof![2 => any::<u64>().prop_map(KeepStep::Take), 1 => change];
    prop::collection::vec(step, 1..=40)
}

/// Which algorithm a Keep sequence runs.
#[derive(Clone, Copy, Debug)]
enum KeepKind {
    Gcra,
    Fixed,
    Log,
    Wheel,
}

fn keep_quota(limit: u64, burst: u64, period: u64) -> Quota {
    Quota::new(limit, Duration::from_nanos(period))
        .and_then(|q| q.with_burst(burst))
        .unwrap()
}

/// Runs `steps` on one key of a keyed limiter on a frozen clock, against the
/// reference: the permits taken since the start, which no change gives
/// back but beyond the new quota's debt cap (`capacity + DEBT_PERIODS ·
/// limit`, as a charge's). A request of `cost` is admitted iff `taken +
/// cost ≤ capacity`, and every decision reports `capacity − taken` (at
/// least 0) remaining.
fn keep_against_reference<A: Algorithm>(
    make: impl Fn(u64, u64, u64, u32) -> A,
    start: u64,
    steps: &[KeepStep],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::starting_at(Nanos::new(start));
    let first = make(10, 10, SEC, 4);
    let limiter: KeyedLimiter<u8, A> = KeyedLimiter::builder(first.clone())
        .clock(clock)
        .sweep_every(None)
        .build();
    let key = 7u8;
    let mut capacity = first.capacity();
    let (mut default, mut overridden) = (capacity, None);
    let mut taken = 0u64;
    for (i, step) in steps.iter().enumerate() {
        match *step {
            KeepStep::Take(r) => {
                let cost = r % (capacity + 1);
                let d = limiter.check_n(&key, cost).unwrap();
                let fits = taken + cost <= capacity;
                prop_assert_eq!(
                    d.is_allowed(),
                    fits,
                    "step {}: {} of {} taken, cost {}: {}",
                    i,
                    taken,
                    capacity,
                    cost,
                    d
                );
                if fits {
                    taken += cost;
                }
            }
            KeepStep::Change {
                limit,
                burst,
                period,
                slots,
                through_override,
            } => {
                let next = make(limit, burst, period, slots);
                let cap = next.capacity() + DEBT_PERIODS * next.quota().limit();
                // The key runs its override once it has one, whatever the
                // default.
                let runs_next = through_override || overridden.is_none();
                if through_override {
                    overridden = Some(next.capacity());
                    limiter.set_override(key, next, Carry::Keep);
                } else {
                    default = next.capacity();
                    limiter.set_default(next, Carry::Keep);
                }
                capacity = overridden.unwrap_or(default);
                if runs_next {
                    taken = taken.min(cap);
                }
            }
        }
        let d = limiter.peek_n(&key, 0).unwrap();
        prop_assert_eq!(
            d.remaining(),
            capacity.saturating_sub(taken),
            "step {} ({:?}): {} of {} taken: {}",
            i,
            step,
            taken,
            capacity,
            d
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(2048))]

    /// Regression: a quota lowered then raised with
    /// `Carry::Keep` gave back the permits the lower quota could not hold
    /// (GCRA 20/s: 20 taken, 10 with Keep, 20 with Keep: 10 more admitted at
    /// the same instant).
    #[test]
    fn keep_never_gives_back_what_was_taken(
        kind in prop::sample::select(vec![KeepKind::Gcra, KeepKind::Fixed, KeepKind::Log, KeepKind::Wheel]),
        // Within the 36 years every algorithm promises to run.
        start in 0..=(30 * YEAR),
        steps in keep_steps(),
    ) {
        match kind {
            KeepKind::Gcra => keep_against_reference(
                |l, b, p, _| Gcra::new(keep_quota(l, b, p)).unwrap(), start, &steps)?,
            KeepKind::Fixed => keep_against_reference(
                |l, b, p, _| FixedWindow::new(keep_quota(l, b, p)).unwrap(), start, &steps)?,
            KeepKind::Log => keep_against_reference(
                |l, b, p, _| SlidingLog::new(keep_quota(l, b, p)).unwrap(), start, &steps)?,
            KeepKind::Wheel => keep_against_reference(
                |l, b, p, n| SlidingWindow::new(keep_quota(l, b, p), n).unwrap(), start, &steps)?,
        }
    }
}
