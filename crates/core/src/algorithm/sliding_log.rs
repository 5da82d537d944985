//! Sliding log: the times of the last `limit` admitted permits.
//!
//! # Guarantee
//!
//! **Every window of length `T` (the period), at any start, admits at most
//! `limit` permits** (the "strong" statement). A request of `cost` at `now`
//! is admitted iff the permits admitted in `(now − T, now]`, plus `cost`, are
//! at most `limit`; `retry_after` is the exact instant at which enough of them
//! have aged out.
//!
//! # State
//!
//! The admission times, oldest first, as runs of `(time, count)` so that a
//! request of cost `n` is one entry, not `n`. Expired runs are dropped when a
//! request is admitted; a denial reads and never writes. A charge appends
//! its excess as runs stamped one, two, … periods on (see
//! [`SlidingLog::charge`]): at most [`DEBT_PERIODS`] more runs, and
//! `(DEBT_PERIODS + 1) · limit` permits in all. Memory: a mutex, a
//! `VecDeque` header and at most `limit` runs of 16 bytes; with requests of
//! cost 1 at distinct instants that is `16 · limit` bytes (after a quota
//! change with [`Carry::Keep`], up to the previous limit's until they age
//! out), so
//! [`SlidingLog::new`] refuses limits above 2^20 ([`QuotaError::TooLarge`];
//! a 16 MiB limiter is a configuration mistake: use the sliding window
//! counter for large limits).
//!
//! # Why a lock
//!
//! The state is up to `limit` words; no single compare-and-swap covers it. A
//! small mutex makes "count the window, then append" one step (linearizable
//! by construction); a request of cost 1 that cannot fit is still denied
//! from a published hint without taking the lock (see [`Locked`]).
//!
//! # Clock going backwards
//!
//! An admission is recorded at `max(now, newest)`, so the log stays sorted
//! and an earlier reading only finds more permits in its window.

use std::collections::VecDeque;
use std::fmt;

use crate::algorithm::{Algorithm, Carry, DEBT_PERIODS, apply, sealed};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::quota::{Quota, QuotaError};
use crate::store::LockedTransition;
use crate::store::{self, DenyHint, Locked};

const NAME: &str = "sliding log";
/// The largest limit a sliding log accepts.
pub const MAX_LOG_LIMIT: u64 = 1 << 20;

/// Sliding log: see the [module docs](self).
#[derive(Clone, PartialEq, Eq)]
pub struct SlidingLog {
    quota: Quota,
}

/// The admission log of one [`SlidingLog`] limiter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogState {
    /// `(admission time in ns, permits)`, oldest first, times non-decreasing.
    runs: VecDeque<(u64, u64)>,
    /// The sum of the counts in `runs`.
    total: u64,
}

impl LogState {
    /// The permits recorded, expired or not.
    pub fn recorded(&self) -> u64 {
        self.total
    }
}

impl SlidingLog {
    /// Runs `quota` as a sliding log of `limit` per `period` (the burst is not
    /// used).
    ///
    /// # Errors
    ///
    /// [`QuotaError::TooLarge`] for a limit above [`MAX_LOG_LIMIT`].
    pub fn new(quota: Quota) -> Result<SlidingLog, QuotaError> {
        if quota.limit() > MAX_LOG_LIMIT {
            return Err(QuotaError::TooLarge {
                algorithm: NAME,
                max: MAX_LOG_LIMIT,
                what: "the limit",
            });
        }
        Ok(SlidingLog { quota })
    }

    fn period(&self) -> u64 {
        self.quota.period_nanos()
    }

    /// Whether a permit admitted at `time` still counts at `now`.
    fn is_live(&self, time: u64, now: u64) -> bool {
        u128::from(time) + u128::from(self.period()) > u128::from(now)
    }

    /// The instant at which a permit admitted at `time` stops counting, or
    /// `None` if that is after the last instant a `u64` can name.
    fn expiry(&self, time: u64) -> Option<u64> {
        time.checked_add(self.period())
    }

    /// [`expiry`](Self::expiry), saturating: for `reset_after` and hints.
    fn expiry_or_end(&self, time: u64) -> u64 {
        self.expiry(time).unwrap_or(u64::MAX)
    }

    /// Permits in the log that still count at `now`.
    fn live(&self, state: &LogState, now: u64) -> u64 {
        let expired: u64 = state
            .runs
            .iter()
            .take_while(|&&(time, _)| !self.is_live(time, now))
            .map(|&(_, count)| count)
            .sum();
        state.total - expired
    }

    /// The time of the `k`-th oldest recorded permit (1-based).
    fn kth_oldest(state: &LogState, k: u64) -> u64 {
        let mut seen = 0;
        for &(time, count) in &state.runs {
            seen += count;
            if seen >= k {
                return time;
            }
        }
        unreachable!("sliding log: asked for permit {k} of {}", state.total)
    }

    /// The decision for `cost` permits at `now`; never changes the state.
    pub fn decide(&self, state: &LogState, now: Nanos, cost: u64) -> Decision {
        let limit = self.quota.limit();
        let now = now.as_u64();
        let live = self.live(state, now);
        // When the log would be empty if its newest permit were taken at
        // `newest`: "never" if that permit counts past the end of the clock.
        let full_after = |newest: u64| self.expiry(newest).map_or(u64::MAX, |at| at - now);
        let newest = state.runs.back().map(|&(newest, _)| newest);
        let reset_after = match newest {
            Some(newest) if live > 0 => full_after(newest),
            _ => 0,
        };
        // `live` may exceed the limit after a charge or a quota change (see
        // `charge`, `carry_cell`); `cost ≤ limit − live`, not `live + cost ≤ limit`:
        // the sum overflows for costs near `u64::MAX`.
        if live <= limit && cost <= limit - live {
            let reset_after = if cost > 0 {
                full_after(newest.map_or(now, |newest| newest.max(now)))
            } else {
                reset_after
            };
            return Decision::allow(limit, limit - live - cost, reset_after);
        }
        let retry_after = if cost > limit {
            u64::MAX
        } else {
            // Of the `total` recorded permits, the oldest `total + cost − limit`
            // must have aged out; the last of them decides when.
            let must_expire = state.total + cost - limit;
            // Never, if that permit counts until past the end of the clock.
            self.expiry(Self::kth_oldest(state, must_expire))
                .map_or(u64::MAX, |at| at - now)
        };
        Decision::deny(limit, limit.saturating_sub(live), retry_after, reset_after)
    }

    /// Records `cost` permits admitted at `now`; call only after
    /// [`SlidingLog::decide`] allowed them.
    pub fn admit(&self, state: &mut LogState, now: Nanos, cost: u64) {
        let now = now.as_u64();
        self.prune(state, now);
        if cost == 0 {
            return;
        }
        let at = state
            .runs
            .back()
            .map_or(now, |&(newest, _)| newest.max(now));
        match state.runs.back_mut() {
            Some((time, count)) if *time == at => *count += cost,
            _ => state.runs.push_back((at, cost)),
        }
        state.total += cost;
        debug_assert!(
            state.total <= self.quota.limit(),
            "sliding log: {} permits recorded, limit {}",
            state.total,
            self.quota.limit()
        );
    }

    /// The charge: `cost` permits recorded at `now` whether or not they
    /// fit. What the log has room for is recorded as an admission (at
    /// `max(now, newest)`, stamp `s`); the rest, the debt, is appended as
    /// runs of at most `limit` stamped `s + T`, `s + 2T`, …: each counts
    /// from now until a period after its stamp, so each later period holds
    /// `limit` of the debt, as a fixed window carries its excess. The log
    /// never holds more than `limit` and [`DEBT_PERIODS`] limits of debt
    /// (the cap), nor a run stamped past the last instant. Returns the
    /// permits recorded.
    pub fn charge(&self, state: &mut LogState, now: Nanos, cost: u64) -> u64 {
        let limit = self.quota.limit();
        let now = now.as_u64();
        self.prune(state, now);
        let cap = limit.saturating_mul(DEBT_PERIODS + 1);
        let mut left = cost.min(cap.saturating_sub(state.total));
        let room = limit.saturating_sub(state.total);
        let mut at = state
            .runs
            .back()
            .map_or(now, |&(newest, _)| newest.max(now));
        let mut recorded = 0;
        let mut chunk = left.min(room);
        while left > 0 {
            if chunk > 0 {
                match state.runs.back_mut() {
                    Some((time, count)) if *time == at => *count += chunk,
                    _ => state.runs.push_back((at, chunk)),
                }
                state.total += chunk;
                recorded += chunk;
                left -= chunk;
            }
            let Some(next) = at.checked_add(self.period()) else {
                break;
            };
            at = next;
            chunk = left.min(limit);
        }
        recorded
    }

    /// Drops the runs that no longer count at `now`.
    fn prune(&self, state: &mut LogState, now: u64) {
        while let Some(&(time, count)) = state.runs.front() {
            if self.is_live(time, now) {
                break;
            }
            state.runs.pop_front();
            state.total -= count;
        }
    }

    /// The refund: drops the `permits` newest admission times still in the
    /// log at `now` (fewer if fewer are there). The log that remains is a
    /// sub-log of what it would have been without the refunded admissions,
    /// so no window at any start can count more than the limit allows.
    pub fn refund(&self, state: &mut LogState, now: Nanos, permits: u64) {
        self.prune(state, now.as_u64());
        let mut left = permits;
        while left > 0 {
            let Some((_, count)) = state.runs.back_mut() else {
                break;
            };
            let take = (*count).min(left);
            *count -= take;
            state.total -= take;
            left -= take;
            if *count == 0 {
                state.runs.pop_back();
            }
        }
    }

    /// What a request of cost 1 can be denied from, after an admission.
    ///
    /// No hint (`denied_until` 0: the locked path answers) while the newest
    /// permit counts past the end of the clock, whose `reset_after` is
    /// "never", not a wait until the last instant.
    pub fn hint(&self, state: &LogState) -> DenyHint {
        let limit = self.quota.limit();
        let Some(full_at) = state.runs.back().map_or(Some(0), |&(t, _)| self.expiry(t)) else {
            return DenyHint::default();
        };
        if state.total < limit {
            return DenyHint {
                denied_until: 0,
                full_at,
            };
        }
        // Cost 1 fits once the oldest `total + 1 − limit` have aged out.
        let oldest = Self::kth_oldest(state, state.total - (limit - 1));
        DenyHint {
            denied_until: self.expiry_or_end(oldest),
            full_at,
        }
    }
}

impl fmt::Debug for SlidingLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlidingLog")
            .field("quota", &self.quota)
            .finish()
    }
}

impl LockedTransition for SlidingLog {
    type State = LogState;

    fn decide(&self, state: &LogState, now: Nanos, cost: u64) -> Decision {
        SlidingLog::decide(self, state, now, cost)
    }

    fn admit(&self, state: &mut LogState, now: Nanos, cost: u64) {
        SlidingLog::admit(self, state, now, cost);
    }

    fn hint(&self, state: &LogState) -> DenyHint {
        SlidingLog::hint(self, state)
    }

    fn limit(&self) -> u64 {
        self.quota.limit()
    }
}

impl sealed::Sealed for SlidingLog {}

impl Algorithm for SlidingLog {
    type Cell = Locked<LogState>;

    fn quota(&self) -> &Quota {
        &self.quota
    }

    fn capacity(&self) -> u64 {
        self.quota.limit()
    }

    fn new_cell(&self) -> Locked<LogState> {
        Locked::new(LogState::default())
    }

    fn check_cell(&self, cell: &Locked<LogState>, now: Nanos, cost: u64) -> Decision {
        store::locked_check(self, cell, now, cost)
    }

    fn peek_cell(&self, cell: &Locked<LogState>, now: Nanos, cost: u64) -> Decision {
        store::locked_peek(self, cell, now, cost)
    }

    fn charge_cell(&self, cell: &Locked<LogState>, now: Nanos, cost: u64) -> u64 {
        if cost == 0 {
            return 0;
        }
        apply::locked_charge(self, cell, |state| self.charge(state, now, cost))
    }

    fn is_idle(&self, cell: &Locked<LogState>, now: Nanos) -> bool {
        self.live(&cell.lock(), now.as_u64()) == 0
    }

    fn refund_cell(&self, cell: &Locked<LogState>, now: Nanos, permits: u64) {
        if permits > 0 {
            apply::locked_change(self, cell, |state| self.refund(state, now, permits));
        }
    }

    fn reset_cell(&self, cell: &Locked<LogState>) {
        apply::locked_change(self, cell, |state| *state = LogState::default());
    }

    /// Closed: the whole limit admitted at the last instant, counting for
    /// ever.
    fn take_cell(&self, cell: &Locked<LogState>) -> Locked<LogState> {
        let limit = self.quota.limit();
        let closed = LogState {
            runs: VecDeque::from([(u64::MAX, limit)]),
            total: limit,
        };
        apply::locked_take(self, cell, closed)
    }

    fn carry_cell(
        &self,
        _previous: &SlidingLog,
        cell: &Locked<LogState>,
        now: Nanos,
        carry: Carry,
    ) -> Locked<LogState> {
        if carry == Carry::Reset {
            return self.new_cell();
        }
        // Keep (and Proportional, which a log cannot express): the admission
        // times stay, even beyond the new limit (so that raising it again
        // gives none back); only those expired under the new period go, and
        // the oldest beyond the debt cap, `(DEBT_PERIODS + 1) · limit`
        // permits, as for a charge.
        let mut state = cell.lock().clone();
        let now = now.as_u64();
        while let Some(&(time, count)) = state.runs.front() {
            if self.is_live(time, now) {
                break;
            }
            state.total -= count;
            state.runs.pop_front();
        }
        let cap = self.quota.limit().saturating_mul(DEBT_PERIODS + 1);
        while state.total > cap {
            let Some(front) = state.runs.front_mut() else {
                break;
            };
            let dropped = (state.total - cap).min(front.1);
            front.1 -= dropped;
            state.total -= dropped;
            if front.1 == 0 {
                state.runs.pop_front();
            }
        }
        let hint = self.hint(&state);
        Locked::with_hint(state, hint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    fn log(limit: u64, period: Duration) -> SlidingLog {
        SlidingLog::new(Quota::new(limit, period).unwrap()).unwrap()
    }

    fn check(l: &SlidingLog, s: &mut LogState, t: u64, cost: u64) -> Decision {
        let d = l.decide(s, Nanos::new(t), cost);
        if d.is_allowed() {
            l.admit(s, Nanos::new(t), cost);
        }
        d
    }

    #[test]
    fn every_window_at_any_start_admits_at_most_limit() {
        let l = log(2, Duration::from_secs(1));
        let mut s = LogState::default();
        assert!(check(&l, &mut s, 900 * MS, 1).is_allowed());
        assert!(check(&l, &mut s, 1_000 * MS, 1).is_allowed());
        // A fixed window would admit here (new second); the log does not.
        let d = check(&l, &mut s, 1_100 * MS, 1);
        assert!(d.is_denied());
        assert_eq!(d.retry_after(), Duration::from_millis(800));
        assert!(check(&l, &mut s, 1_899 * MS, 1).is_denied());
        assert!(check(&l, &mut s, 1_900 * MS, 1).is_allowed());
    }

    #[test]
    fn costs_are_runs_and_retry_waits_for_enough_expiries() {
        let l = log(5, Duration::from_secs(1));
        let mut s = LogState::default();
        assert!(check(&l, &mut s, 0, 3).is_allowed());
        assert!(check(&l, &mut s, 100 * MS, 2).is_allowed());
        assert_eq!(s.runs.len(), 2);
        let d = check(&l, &mut s, 200 * MS, 4);
        assert!(d.is_denied());
        // 4 more need 4 of the 5 gone: the run at 100 ms must expire too.
        assert_eq!(d.retry_after(), Duration::from_millis(900));
        assert_eq!(d.reset_after(), Duration::from_millis(900));
    }

    #[test]
    fn a_denial_leaves_the_log_unchanged() {
        let l = log(1, Duration::from_secs(1));
        let mut s = LogState::default();
        assert!(check(&l, &mut s, 0, 1).is_allowed());
        let before = s.clone();
        assert!(check(&l, &mut s, 10, 1).is_denied());
        assert_eq!(s, before);
    }

    /// Regression: a permit counting past `u64::MAX` ns was answered with a
    /// wait of 0 at the end of the clock instead of "never".
    #[test]
    fn a_permit_counting_past_the_end_of_the_clock_means_never() {
        let l = log(1, Duration::from_secs(1));
        let mut s = LogState::default();
        assert!(check(&l, &mut s, u64::MAX - 10, 1).is_allowed());
        let d = check(&l, &mut s, u64::MAX, 1);
        assert!(d.is_denied());
        assert_eq!(d.retry_after(), Duration::from_nanos(u64::MAX));
        // One expiring exactly at the last instant is a finite wait.
        let mut s = LogState::default();
        let t = u64::MAX - 1_000_000_000;
        assert!(check(&l, &mut s, t, 1).is_allowed());
        assert_eq!(
            check(&l, &mut s, t + 5, 1).retry_after().as_nanos(),
            999_999_995
        );
    }

    #[test]
    fn large_limits_are_refused() {
        let q = Quota::per_second(MAX_LOG_LIMIT + 1).unwrap();
        assert!(matches!(
            SlidingLog::new(q),
            Err(QuotaError::TooLarge { .. })
        ));
    }
}
