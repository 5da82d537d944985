//! [`Limiter`]: one algorithm, one shared state, one clock.

use std::fmt;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::algorithm::Carry;
use crate::algorithm::{Algorithm, Gcra};
use crate::budget::{Charge, Reserved};
use crate::clock::{Clock, Nanos, QuantaClock};
use crate::control::DirectControls;
use crate::decision::{CostError, Decision};
use crate::observe::{Event, List, Observer, Outcome};
use crate::quota::Quota;
use crate::sync::{Arc, AtomicBool, Ordering, RwLock, read, write};

/// How an observer is held: a `std` `Arc` even under loom (whose `Arc`
/// cannot hold a trait object), since it is read-only shared data.
type ObserverArc = std::sync::Arc<dyn Observer>;

/// A rate limiter: one state shared by every clone.
///
/// `Send + Sync`, and `Clone` is one reference-count increment: hand a clone
/// to every thread or task.
///
/// # Linearizability
///
/// Every decision takes effect at one instant within the call (a successful
/// compare-and-swap, a load for a denial, or the critical section for the
/// locked algorithms), as if the decisions were taken one at a time in an
/// order consistent with real time. Each is decided for the time the call
/// read from the clock *or the latest time the state already holds, if
/// that is later*: the algorithms never move their state back in time, so a
/// reading overtaken by a faster thread's later one counts at that later
/// time. Either way the instant lies between the start of the call and the
/// moment it took effect, and the algorithm's guarantee holds for the
/// admissions placed at those instants, under any number of threads.
///
/// The algorithm is a type parameter (`A`, by default [`Gcra`]) so that the
/// hot path is static; the clock (`C`, by default [`QuantaClock`], the
/// time-stamp counter where it is invariant and the monotonic clock
/// elsewhere) too. The monotonic clock is one line away:
/// `Limiter::with_clock(algorithm, MonotonicClock::new())`.
/// Aliases name the common types: [`DefaultLimiter`].
///
/// # Operating it
///
/// [`Limiter::builder`] gives a limiter a name and an
/// [`Observer`](crate::observe::Observer) (called once per `check`), and
/// sets it in dry-run; the controls ([`reset`](Limiter::reset),
/// [`refund`](Limiter::refund), [`penalize`](Limiter::penalize),
/// [`deny`](Limiter::deny) / [`allow`](Limiter::allow)) are described in
/// [`control`](crate::control). Unused, each costs one predictable branch
/// per check.
///
/// # Examples
///
/// ```
/// use tollgate::{Gcra, Limiter, Quota, SlidingLog};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // 100 per second, at most 10 at once.
/// let api = Limiter::new(Gcra::new(Quota::per_second(100)?.with_burst(10)?)?);
/// assert!(api.check().is_allowed());
///
/// // At most 5 logins in any minute, however the minute is placed.
/// let logins = Limiter::new(SlidingLog::new(Quota::per_minute(5)?)?);
/// let decision = logins.check_n(2)?;
/// assert_eq!(decision.remaining(), 3);
/// # Ok(())
/// # }
/// ```
pub struct Limiter<A: Algorithm = Gcra, C: Clock = QuantaClock> {
    shared: Arc<Shared<A, C>>,
}

struct Shared<A: Algorithm, C> {
    algorithm: A,
    clock: C,
    name: Box<str>,
    observer: Option<ObserverArc>,
    dry_run: AtomicBool,
    controls: DirectControls,
    /// The algorithm and state since the first
    /// [`set_algorithm`](Limiter::set_algorithm); `None` before (then
    /// `algorithm` and `cell` are current).
    replaced: RwLock<Option<Tier<A>>>,
    /// Padded: the state is the one word every thread writes; it must not
    /// share a cache line with the read-only fields above.
    cell: CachePadded<A::Cell>,
}

/// An algorithm and its state, after a change.
struct Tier<A: Algorithm> {
    algorithm: A,
    cell: CachePadded<A::Cell>,
}

/// A GCRA limiter on the default clock, the type most code needs to name.
pub type DefaultLimiter = Limiter<Gcra, QuantaClock>;

impl<A: Algorithm> Limiter<A, QuantaClock> {
    /// Starts building a limiter running `algorithm`: its clock, its name,
    /// its observer, dry-run.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Gcra, Limiter, ManualClock, Quota};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = Limiter::builder(Gcra::new(Quota::per_second(1)?)?)
    ///     .clock(ManualClock::new())
    ///     .name("signup")
    ///     .dry_run(true)
    ///     .build();
    /// assert_eq!(limiter.name(), "signup");
    /// assert!(limiter.check().is_allowed());
    /// // The real decision; a caller in dry-run lets the request through.
    /// assert!(limiter.check().is_denied());
    /// assert!(limiter.is_dry_run());
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(algorithm: A) -> LimiterBuilder<A, QuantaClock> {
        LimiterBuilder::new(algorithm, QuantaClock::new())
    }

    /// A limiter running `algorithm` on the default clock, [`QuantaClock`]:
    /// the time-stamp counter where the CPU says it is invariant, the
    /// monotonic clock elsewhere (see [`QuantaClock`] for how that is
    /// detected). For `Instant` itself, use [`with_clock`](Limiter::with_clock)
    /// and [`MonotonicClock`](crate::MonotonicClock).
    pub fn new(algorithm: A) -> Limiter<A, QuantaClock> {
        Limiter::with_clock(algorithm, QuantaClock::new())
    }
}

impl<A: Algorithm, C: Clock> Limiter<A, C> {
    /// A limiter running `algorithm` on `clock`.
    pub fn with_clock(algorithm: A, clock: C) -> Limiter<A, C> {
        LimiterBuilder::new(algorithm, clock).build()
    }

    /// Takes one permit if it is available now.
    #[inline]
    pub fn check(&self) -> Decision {
        // Every algorithm's capacity is at least 1.
        self.decide(1, true)
    }

    /// Takes `cost` permits at once if they are all available now; takes
    /// none otherwise. A cost of 0 only looks (it never changes the state).
    ///
    /// # Errors
    ///
    /// [`CostError`] if `cost` is above the limiter's capacity: no amount
    /// of waiting would admit it.
    #[inline]
    pub fn check_n(&self, cost: u64) -> Result<Decision, CostError> {
        self.within_capacity(cost)?;
        Ok(self.decide(cost, true))
    }

    /// What [`check`](Limiter::check) would answer now, without taking
    /// anything.
    #[inline]
    pub fn peek(&self) -> Decision {
        self.decide(1, false)
    }

    /// What [`check_n`](Limiter::check_n) would answer now, without taking
    /// anything.
    ///
    /// # Errors
    ///
    /// As [`check_n`](Limiter::check_n).
    #[inline]
    pub fn peek_n(&self, cost: u64) -> Result<Decision, CostError> {
        self.within_capacity(cost)?;
        Ok(self.decide(cost, false))
    }

    /// Records `cost` permits used now, whether or not they fit, and returns
    /// what a request of one permit would be told right after (as
    /// [`peek`](Limiter::peek)): [`charge`](Limiter::charge) without the
    /// report of what was recorded.
    ///
    /// A cost of 0 records nothing; no cost is an error.
    pub fn charge_n(&self, cost: u64) -> Decision {
        self.charge(cost).decision()
    }

    /// Records `cost` permits used now, whether or not they fit: a cost
    /// learnt after the fact (bytes sent, tokens generated). A charge is
    /// never refused (the work is done): what does not fit is a debt, and
    /// later requests are refused until it is repaid at the quota's rate,
    /// by each algorithm's rule (see
    /// [Charges, debt and its cap](crate::algorithm#charges-debt-and-its-cap)):
    ///
    /// - [`Gcra`]: the TAT runs past `now + burst·T`; later requests wait
    ///   until the debt is paid, as if the permits had been taken one by one
    ///   as they came due.
    /// - [`FixedWindow`](crate::FixedWindow) and calendar windows: the count
    ///   runs past the limit `L`, and a window that ends with `L + D` starts
    ///   the next with `D`.
    /// - [`SlidingLog`](crate::SlidingLog): the excess is stamped one, two, …
    ///   periods on, `L` a period.
    /// - [`SlidingWindow`](crate::SlidingWindow): the excess fills each slot's
    ///   room as older slots leave the window.
    /// - [`AllOf`](crate::AllOf): each limit by its own rule.
    ///
    /// The debt is capped at [`DEBT_PERIODS`](crate::algorithm::DEBT_PERIODS)
    /// periods of the quota: what a charge cannot record within the cap is
    /// reported as [`Charge::forgiven`] (the state stays at the cap). A
    /// cost of 0 records nothing. Under a list or a penalty nothing is
    /// recorded (see [`control`](crate::control)): all of it is reported
    /// forgiven.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{FixedWindow, Limiter, ManualClock, Quota};
    /// use std::time::Duration;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let clock = ManualClock::new();
    /// let tokens = Limiter::with_clock(FixedWindow::new(Quota::per_minute(100)?)?, clock.clone());
    /// assert!(tokens.check_n(0)?.is_allowed());
    /// // The response used 150 tokens: 50 are owed to the next minute.
    /// let charge = tokens.charge(150);
    /// assert_eq!((charge.recorded(), charge.forgiven()), (150, 0));
    /// assert!(charge.decision().is_denied());
    /// clock.advance(Duration::from_secs(60));
    /// assert_eq!(tokens.peek_n(0)?.remaining(), 50);
    /// # Ok(())
    /// # }
    /// ```
    pub fn charge(&self, cost: u64) -> Charge {
        let shared = &*self.shared;
        let now: Nanos = shared.clock.now();
        if shared.controls.any() {
            let (decision, recorded) = self
                .with_current(|algorithm, cell| shared.controls.charge(algorithm, cell, now, cost));
            return Charge::new(decision, cost, recorded);
        }
        let recorded = shared.algorithm.charge_cell(&shared.cell, now, cost);
        Charge::new(
            shared.algorithm.peek_cell(&shared.cell, now, 1),
            cost,
            recorded,
        )
    }

    /// Reserves `estimate` permits for work whose real cost is known only
    /// after it is done: a [`check_n`](Limiter::check_n) of the estimate
    /// (admitted and recorded, or refused), returned as a [`Reserved`] to
    /// [`settle`](Reserved::settle) with the real cost. See
    /// [`budget`](crate::budget) for the rules (a reservation dropped
    /// without a settle stands as charged at the estimate).
    ///
    /// # Errors
    ///
    /// As [`check_n`](Limiter::check_n): an estimate above the capacity.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Gcra, Limiter, ManualClock, Quota};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let tokens = Limiter::with_clock(Gcra::new(Quota::per_minute(1000)?)?, ManualClock::new());
    /// let reserved = tokens.reserve_estimate(300)?;
    /// assert!(reserved.is_allowed());
    /// // The response used 120: 180 go back.
    /// let settled = reserved.settle(120);
    /// assert_eq!(settled.refunded(), 180);
    /// assert_eq!(tokens.peek_n(0)?.remaining(), 880);
    /// # Ok(())
    /// # }
    /// ```
    pub fn reserve_estimate(&self, estimate: u64) -> Result<Reserved<A, C>, CostError> {
        let decision = self.check_n(estimate)?;
        Ok(Reserved::new(self.clone(), decision, estimate))
    }

    /// The algorithm and its parameters now (a copy: it can change, see
    /// [`set_algorithm`](Self::set_algorithm)).
    pub fn algorithm(&self) -> A {
        self.with_current(|algorithm, _| algorithm.clone())
    }

    /// The quota now.
    pub fn quota(&self) -> Quota {
        self.with_current(|algorithm, _| *algorithm.quota())
    }

    /// Runs `algorithm` from now on; the state is carried over by `carry`
    /// with the rules of [`Carry`], as
    /// [`KeyedLimiter::set_default`](crate::KeyedLimiter::set_default)
    /// does for its keys. The change takes effect at one instant: a
    /// decision is taken wholly under the old algorithm or wholly under the
    /// new one. A request that had already read the old state and decides
    /// on it as the change lands is refused (the old state is closed, see
    /// [`Algorithm::take_cell`]): never counted where nobody looks.
    ///
    /// Cost: from the first change on, every decision takes the limiter's
    /// controlled path, which reads the current algorithm under a shared
    /// read lock (an uncontended lock is a few nanoseconds; under heavy
    /// contention its counter bounces between cores). A limiter that never
    /// changes pays nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Carry, FixedWindow, Limiter, ManualClock, Quota};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = Limiter::with_clock(FixedWindow::new(Quota::per_minute(10)?)?, ManualClock::new());
    /// assert_eq!(limiter.check_n(7)?.remaining(), 3);
    /// // Raised to 20: the 7 taken stay taken.
    /// limiter.set_algorithm(FixedWindow::new(Quota::per_minute(20)?)?, Carry::Keep);
    /// assert_eq!(limiter.peek_n(0)?.remaining(), 13);
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_algorithm(&self, algorithm: A, carry: Carry) {
        let shared = &*self.shared;
        let mut current = write(&shared.replaced);
        let now = shared.clock.now();
        let (previous, taken) = match current.take() {
            // Nobody decides on it while the write lock is held.
            Some(tier) => (tier.algorithm, CachePadded::into_inner(tier.cell)),
            None => (
                shared.algorithm.clone(),
                shared.algorithm.take_cell(&shared.cell),
            ),
        };
        let cell = if previous == algorithm {
            taken
        } else {
            algorithm.carry_cell(&previous, &taken, now, carry)
        };
        *current = Some(Tier {
            algorithm,
            cell: CachePadded::new(cell),
        });
        // Under the write lock: a decision that sees the flag and then
        // takes the read lock finds the new tier.
        shared.controls.mark_replaced();
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.shared.clock
    }

    fn within_capacity(&self, cost: u64) -> Result<(), CostError> {
        let shared = &*self.shared;
        let capacity = if shared.controls.is_replaced() {
            self.with_current(|algorithm, _| algorithm.capacity())
        } else {
            shared.algorithm.capacity()
        };
        if cost > capacity {
            return Err(CostError::new(cost, capacity));
        }
        Ok(())
    }

    // Inlined into the caller with `check_cell`, so that a caller that reads
    // one field of the decision pays for that field only.
    //
    // A limiter with a control in force or an observer takes the whole
    // decision out of line (`decide_observed`), tested before the clock is
    // read: the plain path then holds no call and no value across one, and
    // compiles to the clock read, the transition and its compare-and-swap
    // alone. With the test after the clock read, the call's register saves
    // cost ~0.75 ns of a ~9.2 ns check (measured against governor's check
    // in one harness: 1.09× before, 1.00× after).
    #[inline(always)]
    fn decide(&self, cost: u64, record: bool) -> Decision {
        let shared = &*self.shared;
        if shared.controls.any() || shared.observer.is_some() {
            return self.decide_observed(cost, record);
        }
        self.decide_at(shared.clock.now(), cost, record)
    }

    /// The algorithm's own decision at `now`: a check, or a peek.
    #[inline(always)]
    fn decide_at(&self, now: Nanos, cost: u64, record: bool) -> Decision {
        let shared = &*self.shared;
        if record {
            shared.algorithm.check_cell(&shared.cell, now, cost)
        } else {
            shared.algorithm.peek_cell(&shared.cell, now, cost)
        }
    }

    /// [`decide`](Self::decide) with a control in force or an observer.
    #[cold]
    #[inline(never)]
    fn decide_observed(&self, cost: u64, record: bool) -> Decision {
        let shared = &*self.shared;
        let now: Nanos = shared.clock.now();
        if shared.controls.any() {
            return self.decide_controlled(now, cost, record);
        }
        let decision = self.decide_at(now, cost, record);
        if record {
            if let Some(observer) = &shared.observer {
                shared.report(
                    &**observer,
                    Outcome::of(&decision, shared.is_dry_run()),
                    cost,
                    &decision,
                );
            }
        }
        decision
    }

    /// The name given at build time (`""` when unnamed).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Whether this limiter is in dry-run (shadow): its decisions are the
    /// real ones, counted as usual, but a caller acting on them lets refused
    /// requests through, and observers see [`Outcome::Shadow`] for them.
    pub fn is_dry_run(&self) -> bool {
        self.shared.is_dry_run()
    }

    /// Turns dry-run on or off, for every clone, from the next decision on.
    pub fn set_dry_run(&self, dry_run: bool) {
        // Relaxed: a flag read on its own; a decision racing the change may
        // see either value.
        self.shared.dry_run.store(dry_run, Ordering::Relaxed);
    }

    /// The observer, if any.
    pub fn observer(&self) -> Option<&std::sync::Arc<dyn Observer>> {
        self.shared.observer.as_ref()
    }

    /// The clock's reading and the controls.
    pub(crate) fn now_and_controls(&self) -> (Nanos, &DirectControls) {
        (self.shared.clock.now(), &self.shared.controls)
    }

    /// Runs `f` on the current algorithm and state.
    pub(crate) fn with_current<R>(&self, f: impl FnOnce(&A, &A::Cell) -> R) -> R {
        let shared = &*self.shared;
        if shared.controls.is_replaced() {
            let current = read(&shared.replaced);
            if let Some(tier) = current.as_ref() {
                return f(&tier.algorithm, &tier.cell);
            }
        }
        f(&shared.algorithm, &shared.cell)
    }

    /// A decision while a list or a penalty is set (see [`crate::control`]).
    #[cold]
    #[inline(never)]
    fn decide_controlled(&self, now: Nanos, cost: u64, record: bool) -> Decision {
        let shared = &*self.shared;
        let (outcome, decision) = self.with_current(|algorithm, cell| {
            shared.controls.decide(algorithm, cell, now, cost, record)
        });
        if record {
            if let Some(observer) = &shared.observer {
                let outcome = match outcome {
                    outcome if shared.is_dry_run() && !outcome.is_let_through() => Outcome::Shadow,
                    outcome => outcome,
                };
                shared.report(&**observer, outcome, cost, &decision);
            }
        }
        decision
    }
}

impl<A: Algorithm, C> Shared<A, C> {
    #[inline]
    fn is_dry_run(&self) -> bool {
        // Relaxed: see `set_dry_run`.
        self.dry_run.load(Ordering::Relaxed)
    }

    /// Calls the observer; out of line, so that a limiter without one pays
    /// only the branch on the `Option`.
    #[inline(never)]
    fn report(&self, observer: &dyn Observer, outcome: Outcome, cost: u64, decision: &Decision) {
        observer.on_decision(&Event {
            limit: &self.name,
            outcome,
            cost,
            decision,
            key: None,
        });
    }
}

/// Builds a [`Limiter`]: see [`Limiter::builder`].
#[must_use = "a builder does nothing until `build`"]
pub struct LimiterBuilder<A: Algorithm, C: Clock> {
    algorithm: A,
    clock: C,
    name: Box<str>,
    observer: Option<ObserverArc>,
    dry_run: bool,
}

impl<A: Algorithm, C: Clock> LimiterBuilder<A, C> {
    fn new(algorithm: A, clock: C) -> LimiterBuilder<A, C> {
        LimiterBuilder {
            algorithm,
            clock,
            name: Box::from(""),
            observer: None,
            dry_run: false,
        }
    }

    /// Reads time from `clock`. By default, [`QuantaClock`].
    pub fn clock<C2: Clock>(self, clock: C2) -> LimiterBuilder<A, C2> {
        LimiterBuilder {
            algorithm: self.algorithm,
            clock,
            name: self.name,
            observer: self.observer,
            dry_run: self.dry_run,
        }
    }

    /// Names the limit, for observers (a bounded label: a rule's name, not a
    /// client's). By default, `""`.
    pub fn name(mut self, name: impl Into<Box<str>>) -> Self {
        self.name = name.into();
        self
    }

    /// Calls `observer` once per decision (`check`, `check_n`; not `peek`,
    /// nor charges and controls). By default, none.
    pub fn observer(mut self, observer: impl Observer) -> Self {
        self.observer = Some(std::sync::Arc::new(observer));
        self
    }

    /// Starts in dry-run (see [`Limiter::is_dry_run`]). By default, `false`.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// The limiter.
    pub fn build(self) -> Limiter<A, C> {
        let cell = CachePadded::new(self.algorithm.new_cell());
        Limiter {
            shared: Arc::new(Shared {
                algorithm: self.algorithm,
                clock: self.clock,
                name: self.name,
                observer: self.observer,
                dry_run: AtomicBool::new(self.dry_run),
                controls: DirectControls::new(),
                replaced: RwLock::new(None),
                cell,
            }),
        }
    }
}

impl<A: Algorithm + fmt::Debug, C: Clock> fmt::Debug for LimiterBuilder<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimiterBuilder")
            .field("algorithm", &self.algorithm)
            .field("name", &self.name)
            .field("observer", &self.observer.is_some())
            .field("dry_run", &self.dry_run)
            .finish_non_exhaustive()
    }
}

impl<A: Algorithm, C: Clock> Clone for Limiter<A, C> {
    fn clone(&self) -> Limiter<A, C> {
        Limiter {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<A: Algorithm + fmt::Debug, C: Clock> fmt::Debug for Limiter<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("algorithm", &self.algorithm())
            .field("name", &self.shared.name)
            .field("dry_run", &self.shared.is_dry_run())
            .finish_non_exhaustive()
    }
}

// The controls (see [`control`](crate::control) for their meaning): reset,
// refund, penalty and lists, on the limiter's one state.
impl<A: Algorithm, C: Clock> Limiter<A, C> {
    /// Back to full: the state is dropped, as if never used, and a penalty
    /// is cancelled (the lists stay). Returns the state after (see the
    /// [module docs](crate::control)).
    pub fn reset(&self) -> Decision {
        let (now, controls) = self.now_and_controls();
        self.with_current(|algorithm, cell| controls.reset(algorithm, cell));
        self.state_at(now)
    }

    /// Gives back `permits` permits, never above full. Returns the state
    /// after: its `remaining` counts the permits given back.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{FixedWindow, Limiter, ManualClock, Quota};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = Limiter::with_clock(FixedWindow::new(Quota::per_minute(10)?)?, ManualClock::new());
    /// assert_eq!(limiter.check_n(4)?.remaining(), 6);
    /// // The work did not happen: give back 3.
    /// assert_eq!(limiter.refund(3).remaining(), 9);
    /// // Never above full.
    /// assert_eq!(limiter.refund(100).remaining(), 10);
    /// # Ok(())
    /// # }
    /// ```
    pub fn refund(&self, permits: u64) -> Decision {
        let (now, _) = self.now_and_controls();
        self.with_current(|algorithm, cell| algorithm.refund_cell(cell, now, permits));
        self.state_at(now)
    }

    /// Denies every request for `duration` from now, counting nothing; the
    /// state is dropped, so it is full when the penalty ends. Only extends:
    /// a penalty ending before the current one changes nothing. A zero
    /// `duration` is a no-op. Returns the state after.
    pub fn penalize(&self, duration: Duration) -> Decision {
        let (now, controls) = self.now_and_controls();
        self.with_current(|algorithm, cell| controls.penalize(algorithm, cell, now, duration));
        self.state_at(now)
    }

    /// Puts the limiter on the deny list: every request is refused,
    /// "never" to retry, counting nothing, until [`unlist`](Self::unlist).
    pub fn deny(&self) {
        self.now_and_controls().1.set_list(Some(List::Deny));
    }

    /// Puts the limiter on the allow list: every request is admitted,
    /// counting nothing, until [`unlist`](Self::unlist).
    pub fn allow(&self) {
        self.now_and_controls().1.set_list(Some(List::Allow));
    }

    /// Takes the limiter off either list; returns the list it was on.
    pub fn unlist(&self) -> Option<List> {
        self.now_and_controls().1.set_list(None)
    }

    /// The list the limiter is on, if any.
    pub fn listed(&self) -> Option<List> {
        self.now_and_controls().1.list()
    }

    /// What a request of cost 0 would be told at `now`, through the lists
    /// and the penalty.
    fn state_at(&self, now: Nanos) -> Decision {
        let (_, controls) = self.now_and_controls();
        self.with_current(|algorithm, cell| controls.decide(algorithm, cell, now, 0, false).1)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{FixedWindow, ManualClock, SlidingLog, SlidingWindow};

    fn quota() -> Quota {
        Quota::per_second(3).unwrap()
    }

    #[test]
    fn clones_share_one_state() {
        let clock = ManualClock::new();
        let a = Limiter::with_clock(Gcra::new(quota()).unwrap(), clock.clone());
        let b = a.clone();
        assert!(a.check_n(2).unwrap().is_allowed());
        assert_eq!(b.peek().remaining(), 0);
        assert!(b.check().is_allowed());
        assert!(a.check().is_denied());
    }

    #[test]
    fn cost_above_capacity_is_an_error_not_a_denial() {
        let limiter = Limiter::with_clock(SlidingLog::new(quota()).unwrap(), ManualClock::new());
        let error = limiter.check_n(4).unwrap_err();
        assert_eq!((error.cost(), error.capacity()), (4, 3));
        assert_eq!(limiter.peek_n(u64::MAX).unwrap_err().cost(), u64::MAX);
        // Nothing was taken.
        assert_eq!(limiter.peek().remaining(), 2);
    }

    #[test]
    fn peek_and_cost_zero_take_nothing() {
        let clock = ManualClock::new();
        let limiter = Limiter::with_clock(SlidingWindow::new(quota(), 3).unwrap(), clock);
        for _ in 0..5 {
            assert!(limiter.peek().is_allowed());
            assert!(limiter.check_n(0).unwrap().is_allowed());
        }
        assert_eq!(limiter.check_n(3).unwrap().remaining(), 0);
        assert!(limiter.peek().is_denied());
    }

    #[test]
    fn a_charge_is_recorded_whether_or_not_it_fits() {
        let clock = ManualClock::new();
        // 3 per second, burst 3: one permit every 333 ms.
        let gcra = Limiter::with_clock(Gcra::new(quota()).unwrap(), clock.clone());
        assert!(gcra.check().is_allowed());
        // 5 more than fit: a debt of 3 permits past the empty bucket.
        let after = gcra.charge_n(5);
        assert!(after.is_denied());
        assert_eq!(after.remaining(), 0);
        assert_eq!(after.retry_after(), Duration::from_nanos(1_333_333_334));
        clock.advance(Duration::from_nanos(1_333_333_333));
        assert!(gcra.check().is_denied());
        clock.advance(Duration::from_nanos(1));
        assert!(gcra.check().is_allowed());

        // A window records all of it: 11 of 3, so 8, 5, then 2 carried
        // into the next three windows.
        let window = Limiter::with_clock(FixedWindow::new(quota()).unwrap(), clock.clone());
        assert!(window.check().is_allowed());
        let after = window.charge(10);
        assert_eq!((after.recorded(), after.forgiven()), (10, 0));
        assert!(after.decision().is_denied());
        assert_eq!(
            after.decision().retry_after(),
            Duration::from_secs(3) - Duration::from_nanos(clock.now().as_u64() % 1_000_000_000)
        );
        clock.advance(after.decision().retry_after() - Duration::from_nanos(1));
        assert!(window.check().is_denied());
        clock.advance(Duration::from_nanos(1));
        assert_eq!(window.check().remaining(), 0);
        // What one more permit would leave (nothing), and a charge of 0
        // records nothing.
        let nothing = window.charge(0);
        assert_eq!((nothing.recorded(), nothing.forgiven()), (0, 0));
        assert_eq!(nothing.decision().remaining(), 0);
    }

    #[test]
    fn time_comes_from_the_clock() {
        let clock = ManualClock::new();
        let limiter = Limiter::with_clock(FixedWindow::new(quota()).unwrap(), clock.clone());
        assert!(limiter.check_n(3).unwrap().is_allowed());
        let denied = limiter.check();
        assert_eq!(denied.retry_after(), Duration::from_secs(1));
        clock.advance(denied.retry_after());
        assert!(limiter.check().is_allowed());
    }
}
