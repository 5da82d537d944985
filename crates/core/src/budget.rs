//! Budgets: costs learnt after the fact, charged with debt, and
//! reserve-then-settle.
//!
//! # The model
//!
//! A *budget* is a quota counted in a unit whose cost is known only once
//! the work is done (LLM tokens, bytes sent). Two flows:
//!
//! - **check, then charge**: admit the request with a check of what it is
//!   sure to cost (often 0 or 1), then [`Limiter::charge`] the real cost.
//!   A charge is never refused: what does not fit is a **debt**, and later
//!   checks are refused until it is repaid at the quota's rate (per
//!   algorithm, and the debt cap, in
//!   [Charges, debt and its cap](crate::algorithm#charges-debt-and-its-cap)).
//! - **reserve, then settle**: [`Limiter::reserve_estimate`] checks an estimate
//!   (admitted and recorded, or refused, exactly as
//!   [`check_n`](Limiter::check_n)) and returns a [`Reserved`];
//!   [`Reserved::settle`] with the real cost charges the difference (with
//!   debt) or refunds it (never above full).
//!
//! [`KeyedLimiter::reserve_estimate`] returns a [`KeyedReserved`] that owns its
//! key, and the compact table's
//! [`reserve_estimate`](crate::keyed::compact::CompactKeyedLimiter::reserve_estimate) a
//! [`CompactReserved`](crate::keyed::compact::CompactReserved).
//!
//! # Rules
//!
//! - **A charge of 0** records nothing and reports 0 recorded; it is not an
//!   error (a response that used no tokens).
//! - **A charge beyond the debt cap** (`u64::MAX`, say) records up to the
//!   cap and reports the rest as [`Charge::forgiven`]; the state stays at
//!   the cap, so every later request is refused until the capped debt is
//!   repaid. Never a panic, never a silent allow.
//! - **A settle** takes the reservation by value: a second settle does not
//!   compile. The reservation carries its limiter (a clone sharing the
//!   same state) and, when keyed, its key: it cannot be settled on another
//!   limiter or key.
//! - **A refused reservation** reserved nothing: settling it charges the
//!   whole actual cost, so a caller that went ahead anyway still pays.
//! - **A reservation dropped without a settle stands as charged at the
//!   estimate**: nothing happens on drop (no timer, no refund). A caller
//!   that abandons the work should settle with 0, which refunds it.
//! - **A settle below the estimate** refunds the difference by the
//!   algorithm's refund rule (the most recent permits first, never above
//!   full; a permit whose window is over is not credited).
//!
//! # Guarantee
//!
//! That of the algorithm with charges (see the table in
//! [`algorithm`](crate::algorithm#charges-debt-and-its-cap)): every permit
//! admitted or charged is within the quota's bound for its span or still
//! owed at its end. With reserve-then-settle, the overshoot beyond the
//! bound is at most the sum of `actual − estimate` over the reservations
//! admitted before the budget ran out.

use std::fmt;
use std::hash::Hash;

use crate::algorithm::{Algorithm, Gcra};
use crate::clock::{Clock, QuantaClock};
use crate::decision::Decision;
use crate::keyed::KeyedLimiter;
use crate::limiter::Limiter;

/// What a charge or a settle did, and the state after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a charge reports permits it could not record"]
pub struct Charge {
    decision: Decision,
    asked: u64,
    recorded: u64,
    refunded: u64,
}

impl Charge {
    pub(crate) fn new(decision: Decision, asked: u64, recorded: u64) -> Charge {
        debug_assert!(
            recorded <= asked,
            "charge: recorded {recorded} of {asked} permits"
        );
        Charge {
            decision,
            asked,
            recorded,
            refunded: 0,
        }
    }

    pub(crate) fn map_decision(self, f: impl FnOnce(Decision) -> Decision) -> Charge {
        Charge {
            decision: f(self.decision),
            ..self
        }
    }

    fn refund(decision: Decision, refunded: u64) -> Charge {
        Charge {
            decision,
            asked: 0,
            recorded: 0,
            refunded,
        }
    }

    /// What a request of one permit would be told right after (as
    /// [`Limiter::peek`]).
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// The permits the charge asked to record (for a settle, `actual −
    /// estimate` when above the estimate, else 0).
    pub fn asked(&self) -> u64 {
        self.asked
    }

    /// The permits recorded: all those asked, unless the debt cap was
    /// reached, or a list or a penalty decided the key (then 0).
    pub fn recorded(&self) -> u64 {
        self.recorded
    }

    /// The permits asked but not recorded: beyond the debt cap, or under a
    /// list or a penalty. 0 for every charge within the cap.
    pub fn forgiven(&self) -> u64 {
        self.asked - self.recorded
    }

    /// The permits a settle below its estimate gave back (asked back: the
    /// algorithm gives back at most what still counts).
    pub fn refunded(&self) -> u64 {
        self.refunded
    }
}

impl fmt::Display for Charge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "charged {} of {} (refunded {}); then {}",
            self.recorded, self.asked, self.refunded, self.decision
        )
    }
}

/// An estimate reserved on a [`Limiter`], to be settled with the real cost:
/// see the [module docs](self).
#[must_use = "a reservation stands as charged at its estimate until settled"]
pub struct Reserved<A: Algorithm = Gcra, C: Clock = QuantaClock> {
    limiter: Limiter<A, C>,
    decision: Decision,
    reserved: u64,
}

impl<A: Algorithm, C: Clock> Reserved<A, C> {
    pub(crate) fn new(limiter: Limiter<A, C>, decision: Decision, estimate: u64) -> Self {
        let reserved = if decision.is_allowed() { estimate } else { 0 };
        Reserved {
            limiter,
            decision,
            reserved,
        }
    }

    /// The check of the estimate: admitted (and recorded) or refused.
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// Whether the estimate was admitted.
    pub fn is_allowed(&self) -> bool {
        self.decision.is_allowed()
    }

    /// The permits held: the estimate if admitted, 0 if refused.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Settles with the real cost: charges `actual − reserved` (with debt)
    /// or refunds `reserved − actual` (never above full).
    pub fn settle(self, actual: u64) -> Charge {
        settle(
            self.reserved,
            actual,
            |extra| self.limiter.charge(extra),
            |back| self.limiter.refund(back),
            || self.limiter.peek(),
        )
    }
}

impl<A: Algorithm, C: Clock> fmt::Debug for Reserved<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reserved")
            .field("decision", &self.decision)
            .field("reserved", &self.reserved)
            .finish_non_exhaustive()
    }
}

/// An estimate reserved for one key of a [`KeyedLimiter`], to be settled
/// with the real cost: see the [module docs](self). It owns the key.
#[must_use = "a reservation stands as charged at its estimate until settled"]
pub struct KeyedReserved<K, A: Algorithm = Gcra> {
    limiter: KeyedLimiter<K, A>,
    key: K,
    decision: Decision,
    reserved: u64,
}

impl<K, A> KeyedReserved<K, A>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: Algorithm,
{
    pub(crate) fn new(
        limiter: KeyedLimiter<K, A>,
        key: K,
        decision: Decision,
        estimate: u64,
    ) -> Self {
        let reserved = if decision.is_allowed() { estimate } else { 0 };
        KeyedReserved {
            limiter,
            key,
            decision,
            reserved,
        }
    }

    /// The key the estimate was reserved for.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// The check of the estimate: admitted (and recorded) or refused.
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// Whether the estimate was admitted.
    pub fn is_allowed(&self) -> bool {
        self.decision.is_allowed()
    }

    /// The permits held: the estimate if admitted, 0 if refused.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Settles with the real cost, on the reservation's own key: charges
    /// `actual − reserved` (with debt) or refunds `reserved − actual`
    /// (never above full).
    pub fn settle(self, actual: u64) -> Charge {
        let (limiter, key) = (&self.limiter, &self.key);
        settle(
            self.reserved,
            actual,
            |extra| limiter.charge(key, extra),
            |back| limiter.refund(key, back),
            || limiter.peek(key),
        )
    }
}

impl<K: fmt::Debug, A: Algorithm> fmt::Debug for KeyedReserved<K, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedReserved")
            .field("key", &self.key)
            .field("decision", &self.decision)
            .field("reserved", &self.reserved)
            .finish_non_exhaustive()
    }
}

/// The settle rule, on any storage: charge the excess, refund the rest, or
/// only look.
pub(crate) fn settle(
    reserved: u64,
    actual: u64,
    charge: impl FnOnce(u64) -> Charge,
    refund: impl FnOnce(u64) -> Decision,
    peek: impl FnOnce() -> Decision,
) -> Charge {
    if actual > reserved {
        charge(actual - reserved)
    } else if actual < reserved {
        let back = reserved - actual;
        // The refund reports the state (a cost of 0); a settle reports what
        // one permit would be told, as a charge does.
        let _state = refund(back);
        Charge::refund(peek(), back)
    } else {
        Charge::new(peek(), 0, 0)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::algorithm::any::AnyAlgorithm;
    use crate::algorithm::calendar::{CalendarUnit, CalendarWindow};
    use crate::algorithm::{AllOf, DEBT_PERIODS, FixedWindow, SlidingLog};
    use crate::algorithm::{SlidingWindow, WarmUp};
    use crate::clock::{ManualClock, Nanos};
    use crate::quota::Quota;

    const SEC: Duration = Duration::from_secs(1);

    fn on<A: Algorithm>(algorithm: A, clock: &ManualClock) -> Limiter<A, ManualClock> {
        Limiter::with_clock(algorithm, clock.clone())
    }

    fn per_second(limit: u64) -> Quota {
        Quota::per_second(limit).unwrap()
    }

    /// Steps `limiter` one period at a time until a request of one permit
    /// is admitted; returns the periods waited.
    fn periods_until_admitted<A: Algorithm>(
        limiter: &Limiter<A, ManualClock>,
        clock: &ManualClock,
        period: Duration,
    ) -> u64 {
        let mut waited = 0;
        while limiter.peek().is_denied() {
            clock.advance(period);
            waited += 1;
            assert!(
                waited <= DEBT_PERIODS + 2,
                "still in debt after {waited} periods"
            );
        }
        waited
    }

    #[test]
    fn a_fixed_window_carries_its_excess_into_the_next_windows() {
        let clock = ManualClock::new();
        let tokens = on(FixedWindow::new(per_second(10)).unwrap(), &clock);
        // 25 of 10: the next window starts with 15, the one after with 5.
        assert_eq!(tokens.charge(25).recorded(), 25);
        clock.advance(SEC);
        assert_eq!(tokens.peek_n(0).unwrap().remaining(), 0);
        clock.advance(SEC);
        assert_eq!(tokens.peek_n(0).unwrap().remaining(), 5);
        assert!(tokens.check_n(5).unwrap().is_allowed());
        assert!(tokens.check().is_denied());
        clock.advance(SEC);
        assert_eq!(tokens.peek_n(0).unwrap().remaining(), 10);
    }

    #[test]
    fn a_denial_in_debt_says_when_the_debt_is_paid() {
        let clock = ManualClock::starting_at(Nanos::new(250_000_000));
        let tokens = on(FixedWindow::new(per_second(10)).unwrap(), &clock);
        let after = tokens.charge(25).decision();
        // 25 + 1 − 10 = 16 over: two windows on, 1.75 s from now.
        assert_eq!(after.retry_after(), Duration::from_millis(1_750));
        // Empty once 25 have drained: three windows on.
        assert_eq!(after.reset_after(), Duration::from_millis(2_750));
        let eight = tokens.check_n(8).unwrap();
        assert_eq!(eight.retry_after(), Duration::from_millis(2_750));
    }

    #[test]
    fn a_calendar_window_carries_its_excess_into_the_next_units() {
        let clock = ManualClock::new();
        let tokens = on(
            CalendarWindow::new(CalendarUnit::Minute, 100).unwrap(),
            &clock,
        );
        assert_eq!(tokens.charge(250).recorded(), 250);
        assert_eq!(
            tokens.peek().retry_after(),
            Duration::from_secs(120),
            "151 over: two minutes on"
        );
        clock.advance(Duration::from_secs(120));
        assert_eq!(tokens.peek_n(0).unwrap().remaining(), 50);
    }

    #[test]
    fn a_sliding_log_stamps_its_excess_a_period_apart() {
        let clock = ManualClock::new();
        let tokens = on(SlidingLog::new(per_second(10)).unwrap(), &clock);
        assert!(tokens.check_n(4).unwrap().is_allowed());
        clock.advance(Duration::from_millis(500));
        // Room 6 now; 10 at 1.5 s; 9 at 2.5 s.
        assert_eq!(tokens.charge(25).recorded(), 25);
        clock.set(Nanos::new(1_000_000_000));
        assert_eq!(tokens.peek_n(0).unwrap().remaining(), 0);
        clock.set(Nanos::new(2_500_000_000));
        assert_eq!(tokens.peek_n(0).unwrap().remaining(), 1);
        clock.set(Nanos::new(3_500_000_000));
        assert_eq!(tokens.peek_n(0).unwrap().remaining(), 10);
    }

    #[test]
    fn a_wheel_lets_its_debt_in_as_slots_leave() {
        let clock = ManualClock::new();
        // 10 a second in 4 slots of 250 ms.
        let tokens = on(SlidingWindow::new(per_second(10), 4).unwrap(), &clock);
        assert!(tokens.check_n(4).unwrap().is_allowed());
        clock.advance(Duration::from_millis(500));
        // 6 of room in slot 2, a debt of 19 that refills each slot as it
        // leaves: 4 at 1 s, 6 at 1.5 s, 4 at 2 s, the last 5 at 2.5 s,
        // when the window holds 4 + 5 and one permit fits again.
        assert_eq!(tokens.charge(25).recorded(), 25);
        let denied = tokens.peek();
        assert!(denied.is_denied());
        assert_eq!(denied.retry_after(), Duration::from_secs(2));
        // Empty once the slot of 2.5 s has left, at 3.5 s.
        assert_eq!(denied.reset_after(), Duration::from_secs(3));
        clock.set(Nanos::new(2_499_999_999));
        assert!(tokens.check().is_denied());
        clock.set(Nanos::new(2_500_000_000));
        let admitted = tokens.check();
        assert!(admitted.is_allowed());
        assert_eq!(admitted.remaining(), 0);
    }

    #[test]
    fn one_absurd_charge_stops_at_the_cap_on_every_algorithm() {
        let clock = ManualClock::new();
        let quota = per_second(10);
        let cap = 10 * DEBT_PERIODS;
        let algorithms = [
            AnyAlgorithm::Gcra(Gcra::new(quota).unwrap()),
            AnyAlgorithm::FixedWindow(FixedWindow::new(quota).unwrap()),
            AnyAlgorithm::SlidingLog(SlidingLog::new(quota).unwrap()),
            AnyAlgorithm::SlidingWindow(SlidingWindow::new(quota, 10).unwrap()),
            AnyAlgorithm::WarmUp(WarmUp::new(quota, SEC).unwrap()),
        ];
        for algorithm in algorithms {
            clock.set(Nanos::new(0));
            let tokens = on(algorithm.clone(), &clock);
            let charge = tokens.charge(u64::MAX);
            // A full state plus 16 periods of debt (warm-up: what ends within
            // 16 periods from a cold start).
            assert!(
                charge.recorded() <= 10 + cap && charge.recorded() >= cap / 2,
                "{algorithm:?}: {charge}"
            );
            assert_eq!(charge.forgiven(), u64::MAX - charge.recorded());
            assert!(charge.decision().is_denied());
            // Another absurd charge records nothing more.
            assert_eq!(tokens.charge(u64::MAX).recorded(), 0, "{algorithm:?}");
            let waited = periods_until_admitted(&tokens, &clock, SEC);
            assert!(
                (DEBT_PERIODS - 1..=DEBT_PERIODS + 1).contains(&waited),
                "{algorithm:?}: admitted after {waited} periods"
            );
        }
    }

    #[test]
    fn all_of_charges_each_limit_by_its_own_rule() {
        let clock = ManualClock::new();
        let both = AllOf::new(vec![
            AnyAlgorithm::FixedWindow(FixedWindow::new(per_second(10)).unwrap()),
            AnyAlgorithm::FixedWindow(FixedWindow::new(Quota::per_minute(100).unwrap()).unwrap()),
        ])
        .unwrap();
        let tokens = on(both, &clock);
        assert_eq!(tokens.charge(30).recorded(), 30);
        // The second: 30 of 100 this minute. The first: 20 carried, 10 next.
        clock.advance(2 * SEC);
        assert_eq!(tokens.peek_n(0).unwrap().remaining(), 0);
        clock.advance(SEC);
        assert_eq!(tokens.peek_n(0).unwrap().remaining(), 10);
        // 2,000 is past the per-second cap (170) but not the minute's
        // (1,700): the least recorded is reported.
        let capped = tokens.charge(2_000);
        assert_eq!(capped.recorded(), 10 * (DEBT_PERIODS + 1));
    }

    #[test]
    fn a_charge_of_zero_records_nothing() {
        let clock = ManualClock::new();
        let tokens = on(Gcra::new(per_second(10)).unwrap(), &clock);
        let nothing = tokens.charge(0);
        assert_eq!(
            (nothing.asked(), nothing.recorded(), nothing.forgiven()),
            (0, 0, 0)
        );
        assert_eq!(nothing.decision().remaining(), 9, "what one permit leaves");
    }

    #[test]
    fn settle_charges_above_the_estimate_and_refunds_below() {
        let clock = ManualClock::new();
        let tokens = on(
            FixedWindow::new(Quota::per_minute(1_000).unwrap()).unwrap(),
            &clock,
        );
        let above = tokens.reserve_estimate(100).unwrap();
        assert_eq!(above.reserved(), 100);
        let settled = above.settle(1_500);
        assert_eq!((settled.asked(), settled.recorded()), (1_400, 1_400));
        assert!(settled.decision().is_denied());
        // 1,500 of 1,000: 500 carried into the next minute.
        clock.advance(Duration::from_secs(60));
        let below = tokens.reserve_estimate(300).unwrap();
        assert!(below.is_allowed());
        assert_eq!(tokens.peek_n(0).unwrap().remaining(), 200);
        let settled = below.settle(50);
        assert_eq!(settled.refunded(), 250);
        // What one more permit would leave.
        assert_eq!(settled.decision().remaining(), 449);
        let exact = tokens.reserve_estimate(10).unwrap().settle(10);
        assert_eq!((exact.recorded(), exact.refunded()), (0, 0));
        assert_eq!(exact.decision().remaining(), 439);
    }

    #[test]
    fn a_refused_reservation_reserved_nothing_and_its_settle_charges_all() {
        let clock = ManualClock::new();
        let tokens = on(Gcra::new(per_second(10)).unwrap(), &clock);
        assert!(tokens.check_n(10).unwrap().is_allowed());
        let refused = tokens.reserve_estimate(5).unwrap();
        assert!(!refused.is_allowed());
        assert_eq!(refused.reserved(), 0);
        let settled = refused.settle(5);
        assert_eq!(settled.recorded(), 5, "the work done is paid for");
        assert_eq!(settled.decision().retry_after(), Duration::from_millis(600));
    }

    #[test]
    fn a_reservation_dropped_unsettled_stands_at_the_estimate() {
        let clock = ManualClock::new();
        let tokens = on(Gcra::new(per_second(10)).unwrap(), &clock);
        drop(tokens.reserve_estimate(6).unwrap());
        assert_eq!(tokens.peek_n(0).unwrap().remaining(), 4);
        // Too large an estimate is the check's error.
        assert!(tokens.reserve_estimate(11).is_err());
    }

    #[test]
    fn a_keyed_reservation_settles_on_its_own_key() {
        let clock = ManualClock::new();
        let tokens: KeyedLimiter<String, FixedWindow> =
            KeyedLimiter::builder(FixedWindow::new(per_second(10)).unwrap())
                .clock(clock.clone())
                .build();
        let alice = tokens.reserve_estimate("alice", 4).unwrap();
        assert_eq!(alice.key(), "alice");
        let settled = alice.settle(14);
        assert_eq!(settled.recorded(), 10);
        assert!(tokens.peek("alice").is_denied());
        assert_eq!(tokens.peek_n("bob", 0).unwrap().remaining(), 10);
        clock.advance(SEC);
        assert_eq!(tokens.peek_n("alice", 0).unwrap().remaining(), 6);
        let charged = tokens.charge("carol", u64::MAX);
        assert_eq!(charged.recorded(), 10 * (DEBT_PERIODS + 1));
    }

    #[test]
    fn under_a_list_a_charge_records_nothing_and_says_so() {
        let clock = ManualClock::new();
        let tokens = on(Gcra::new(per_second(10)).unwrap(), &clock);
        tokens.allow();
        let charge = tokens.charge(50);
        assert_eq!((charge.recorded(), charge.forgiven()), (0, 50));
    }
}
