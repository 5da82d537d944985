//! A [`WarmUp`] limiter as a queue: Guava's `acquire`, callers served in
//! the order they arrive.
//!
//! [`Limiter::reserve_n`] charges the permits at once from the instant the
//! limiter is free (`max(now, F)`, see [`WarmUp::reserve`]) and returns that
//! instant, so that each later caller is scheduled behind every earlier one
//! (no barging, unlike [`Limiter::acquire`], which retries `check`). A
//! caller that would wait longer than `max_delay` is refused at once and
//! takes nothing. A reservation is a charge: it cannot be cancelled (as in
//! Guava), and the next caller waits out its cost whether or not it runs.
//!
//! Lists and penalties decide first, as they do for `check`: a deny-listed
//! or penalized limiter refuses (the wait is the denial's `retry_after`), an
//! allow-listed one serves at once without charging. Reservations are not
//! reported to the observer and ignore dry-run: they wait, they do not
//! decide.

use std::time::Duration;

use crate::algorithm::{Algorithm, WarmUp};
use crate::clock::{Clock, Nanos, saturating_nanos};
use crate::decision::CostError;
use crate::limiter::Limiter;
use crate::observe::{List, Outcome};
use crate::shaper::Refusal;
use crate::store::LockedTransition;

impl<C: Clock> Limiter<WarmUp, C> {
    /// Reserves `cost` permits in arrival order and returns the instant
    /// they are ready (now, when nothing is owed); they are charged at once.
    ///
    /// # Errors
    ///
    /// A [`Refusal`], taking nothing: the cost is above the capacity, the
    /// wait would exceed `max_delay` (or a list or penalty refuses), or the
    /// charge would end past the last instant of the clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, ManualClock, Nanos, Quota, WarmUp};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let warm = WarmUp::new(Quota::per_second(2)?, Duration::from_secs(4))?;
    /// let limiter = Limiter::with_clock(warm, ManualClock::new());
    /// let patience = Duration::from_secs(10);
    /// // Cold: served at once; each later caller waits out the one before.
    /// assert_eq!(limiter.reserve_n(1, patience)?, Nanos::ZERO);
    /// assert_eq!(limiter.reserve_n(1, patience)?, Nanos::new(1_375_000_000));
    /// assert_eq!(limiter.reserve_n(1, patience)?, Nanos::new(2_500_000_000));
    /// # Ok(())
    /// # }
    /// ```
    pub fn reserve_n(&self, cost: u64, max_delay: Duration) -> Result<Nanos, Refusal> {
        let (now, controls) = self.now_and_controls();
        let max_delay_ns = saturating_nanos(max_delay);
        self.with_current(|warm, cell| {
            let capacity = warm.capacity();
            if cost > capacity {
                return Err(Refusal::Cost(CostError::new(cost, capacity)));
            }
            if controls.any() {
                let (outcome, decision) = controls.decide(warm, cell, now, 0, false);
                if outcome == Outcome::Listed(List::Allow) {
                    return Ok(now);
                }
                if decision.is_denied() {
                    return Err(Refusal::TooLong {
                        wait: decision.retry_after(),
                        max_delay,
                    });
                }
            }
            let mut state = cell.lock();
            let (ready, next) = warm.reserve(&state, now, cost).ok_or(Refusal::EndOfTime)?;
            let wait = ready.as_u64() - now.as_u64();
            if wait > max_delay_ns {
                return Err(Refusal::TooLong {
                    wait: Duration::from_nanos(wait),
                    max_delay,
                });
            }
            *state = next;
            let hint = LockedTransition::hint(warm, &state);
            cell.publish(&state, hint);
            Ok(ready)
        })
    }

    /// Reserves `cost` permits in arrival order and blocks the thread until
    /// they are ready (Guava's `acquire(cost)`); returns the time waited.
    ///
    /// # Errors
    ///
    /// As [`reserve_n`](Self::reserve_n) with no limit on the wait.
    pub fn acquire_queued(&self, cost: u64) -> Result<Duration, Refusal> {
        let asked = self.clock().now();
        let ready = self.reserve_n(cost, Duration::MAX)?;
        self.clock().sleep_until(ready);
        Ok(Duration::from_nanos(
            ready.as_u64().saturating_sub(asked.as_u64()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ManualClock, Quota};

    const MS: u64 = 1_000_000;

    fn limiter() -> (Limiter<WarmUp, ManualClock>, ManualClock) {
        let warm = WarmUp::new(Quota::per_second(2).unwrap(), Duration::from_secs(4)).unwrap();
        let clock = ManualClock::new();
        (Limiter::with_clock(warm, clock.clone()), clock)
    }

    #[test]
    fn callers_queue_in_arrival_order_and_check_sees_the_queue() {
        let (limiter, clock) = limiter();
        let long = Duration::from_secs(60);
        let ready: Vec<_> = (0..4)
            .map(|_| limiter.reserve_n(1, long).unwrap().as_u64())
            .collect();
        assert_eq!(ready, [0, 1_375 * MS, 2_500 * MS, 3_375 * MS]);
        // The fourth's own cost (0.625 s) is owed after it.
        let denied = limiter.check();
        assert_eq!(denied.retry_after(), Duration::from_millis(4_000));
        clock.advance(Duration::from_millis(4_000));
        assert!(limiter.check().is_allowed());
    }

    #[test]
    fn a_caller_who_would_wait_too_long_takes_nothing() {
        let (limiter, _clock) = limiter();
        limiter.reserve_n(1, Duration::ZERO).unwrap();
        let refused = limiter.reserve_n(1, Duration::from_millis(1_374));
        assert_eq!(
            refused,
            Err(Refusal::TooLong {
                wait: Duration::from_millis(1_375),
                max_delay: Duration::from_millis(1_374),
            })
        );
        assert_eq!(
            limiter.reserve_n(1, Duration::from_millis(1_375)),
            Ok(Nanos::new(1_375 * MS))
        );
        assert!(matches!(
            limiter.reserve_n(3, Duration::MAX),
            Err(Refusal::Cost(_))
        ));
    }

    #[test]
    fn lists_decide_first() {
        let (limiter, _clock) = limiter();
        limiter.deny();
        assert!(matches!(
            limiter.reserve_n(1, Duration::MAX),
            Err(Refusal::TooLong { .. })
        ));
        limiter.allow();
        for _ in 0..3 {
            assert_eq!(limiter.reserve_n(1, Duration::ZERO), Ok(Nanos::ZERO));
        }
    }
}
