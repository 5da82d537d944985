//! Fixed window: a counter per aligned window.
//!
//! # Guarantee
//!
//! **Every aligned window `[k·T, (k+1)·T)` admits at most `limit` permits**,
//! where `T` is the period and instants count from the clock's origin (the
//! "weak" statement: an unaligned window straddling a boundary can see up to
//! `2·limit`; use [`SlidingLog`](crate::SlidingLog) when that matters).
//! `retry_after` for a denial is exactly the time to the next window.
//!
//! # Charges: the count past the limit carries over
//!
//! A charge ([`Limiter::charge`](crate::Limiter::charge)) records its whole
//! cost, taking the count past the limit `L`; the excess carries into the
//! following windows: a window that ends with count `L + D` starts the next
//! with `D`, the one after with `D − L`, … (floored at 0), so a debt is
//! repaid at `L` a window. A count never exceeds `L` and
//! [`DEBT_PERIODS`] limits of debt, nor what the count field holds (the
//! cap; see [charges](crate::algorithm#charges-debt-and-its-cap)). A denial
//! in debt waits for the first window whose carried count leaves room.
//!
//! # State: one `u64`
//!
//! The window index in the high bits and the count in the low `c` bits, so
//! that admission and a charge are each one compare-and-swap. A count from
//! an earlier window reads as what it carries over (0 unless it was past
//! the limit); a fresh state is window 0, count 0. Memory per limiter: 8
//! bytes.
//!
//! The count field is `c = max(bits(limit), 64 − bits(⌊(2^64 − 1) / T⌋))`
//! bits wide: the index keeps only the bits of the last window a `u64` clock
//! can reach (so the limiter lasts the clock's whole range whenever the
//! limit leaves room for that), and the count takes the rest. A quota change
//! with [`Carry::Keep`] can leave more permits taken in the window than the
//! new limit: they are kept up to the debt cap, `(DEBT_PERIODS + 1) ·
//! limit` within `2^c − 1` (536,870,911 for 1 s windows, 524,287 for 1 ms,
//! 511 for 1 µs), as a charge's are.
//! [`FixedWindow::new`] refuses a quota whose windows would run out of index
//! before 2^60 ns (36 years) of clock time ([`QuotaError::Overflow`]: only
//! for more than ~10⁹ permits per second in one window). Past the last
//! window the limiter fails closed.
//!
//! # The end of the clock
//!
//! When the next window would start after the last instant a [`Nanos`] can
//! name, or past the last index, a denial waits "never" (`retry_after` of
//! `u64::MAX` ns, as [`Decision`] defines it) and `reset_after` is "never"
//! while the window holds anything: no finite wait points past the end. Past
//! the last window the limiter is closed: denied, `remaining` 0, `retry_after`
//! and `reset_after` "never".
//!
//! # Clock going backwards
//!
//! A reading from an earlier window than the stored one is decided in the
//! stored window: its count stands and nothing is re-credited.

use std::fmt;

use crate::algorithm::{Algorithm, Carry, DEBT_PERIODS, apply, sealed};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::quota::{Quota, QuotaError};
use crate::store;
use crate::sync::AtomicU64;

const NAME: &str = "fixed window";
/// The least clock time the window index must cover.
const MIN_LIFETIME_NS: u128 = 1 << 60;

/// Fixed window: see the [module docs](self).
#[derive(Clone, PartialEq, Eq)]
pub struct FixedWindow {
    quota: Quota,
    /// Low bits holding the count.
    count_bits: u32,
}

impl FixedWindow {
    /// Runs `quota` as a fixed window of `limit` per `period` (the burst is
    /// not used).
    ///
    /// # Errors
    ///
    /// [`QuotaError::Overflow`] when the window index and the count do not fit
    /// together in 64 bits for 36 years of windows.
    pub fn new(quota: Quota) -> Result<FixedWindow, QuotaError> {
        let limit_bits = u64::BITS - quota.limit().leading_zeros();
        let overflow = QuotaError::Overflow {
            algorithm: NAME,
            what: "the window index beside the count",
        };
        if limit_bits >= u64::BITS {
            return Err(overflow);
        }
        let windows = 1u128 << (u64::BITS - limit_bits);
        if windows * u128::from(quota.period_nanos()) < MIN_LIFETIME_NS {
            return Err(overflow);
        }
        // The index needs only the bits of the last window a `u64` clock can
        // reach; the count takes every other bit.
        let index_bits = u64::BITS - (u64::MAX / quota.period_nanos()).leading_zeros();
        let count_bits = limit_bits.max(u64::BITS - index_bits);
        Ok(FixedWindow { quota, count_bits })
    }

    /// The most permits the count field holds (at least the limit).
    #[inline]
    fn max_count(&self) -> u64 {
        (1u64 << self.count_bits) - 1
    }

    #[inline]
    fn pack(&self, index: u64, count: u64) -> u64 {
        debug_assert!(
            count <= self.max_count() && index <= self.last_index(),
            "fixed window: packing index {index} count {count} with {} count bits",
            self.count_bits
        );
        (index << self.count_bits) | count
    }

    #[inline]
    fn unpack(&self, state: u64) -> (u64, u64) {
        let mask = (1u64 << self.count_bits) - 1;
        (state >> self.count_bits, state & mask)
    }

    #[inline]
    fn last_index(&self) -> u64 {
        u64::MAX >> self.count_bits
    }

    /// The transition: given the stored word, decide a request of `cost`
    /// permits at `now`, and return the word to store if it changes.
    ///
    /// `None` means nothing to write: every denial, and a cost of 0.
    #[inline(always)]
    pub fn transition(&self, state: u64, now: Nanos, cost: u64) -> (Decision, Option<u64>) {
        let limit = self.quota.limit();
        let period = u128::from(self.quota.period_nanos());
        let (stored, stored_count) = self.unpack(state);
        let index = now.as_u64() / self.quota.period_nanos();
        // An earlier reading is decided in the stored window (no re-credit);
        // a later one starts with what the stored count carries over.
        let (window, count) = if index > stored {
            (index, self.carried(stored_count, index - stored))
        } else {
            (stored, stored_count)
        };
        let window_end = (u128::from(window) + 1) * period;
        let until_next = sat_u64(window_end - u128::from(now.as_u64()).min(window_end));
        let past_the_end = window > self.last_index();
        // No next window: it would start past the last instant a `Nanos`
        // names, or past the last index.
        let no_next = window >= self.last_index() || window_end > u128::from(u64::MAX);
        let until_next = if no_next { u64::MAX } else { until_next };
        if past_the_end {
            // Closed for ever.
            let never = u64::MAX;
            return (Decision::deny(limit, 0, never, never), None);
        }
        // `count` may exceed the limit after a charge or a quota change (see
        // the module docs); `cost ≤ limit − count` without overflow for costs near
        // `u64::MAX`.
        if count <= limit && cost <= limit - count {
            let used = count + cost;
            let reset_after = if used > 0 { until_next } else { 0 };
            let decision = Decision::allow(limit, limit - used, reset_after);
            let next = (cost > 0).then(|| self.pack(window, used));
            (decision, next)
        } else {
            // The first window whose carried count leaves room for `cost`.
            let retry_after = if cost > limit {
                u64::MAX
            } else {
                self.until_window(window, now, count.saturating_add(cost) - limit)
            };
            let reset_after = if count > 0 {
                self.until_window(window, now, count)
            } else {
                0
            };
            let decision =
                Decision::deny(limit, limit.saturating_sub(count), retry_after, reset_after);
            (decision, None)
        }
    }
}

impl FixedWindow {
    /// The count a window holding `count` carries `later` windows on: a
    /// window that ends with `limit + D` starts the next with `D` (see
    /// [charges](crate::algorithm#charges-debt-and-its-cap)).
    #[inline]
    fn carried(&self, count: u64, later: u64) -> u64 {
        count.saturating_sub(later.saturating_mul(self.quota.limit()))
    }

    /// The wait from `now` until the window in which a count of `over`
    /// beyond the limit (`over` ≥ 1, counted in `window`) has drained: the
    /// start of window `window + ⌈over / limit⌉`. "Never" when that window
    /// starts past the last instant or index.
    fn until_window(&self, window: u64, now: Nanos, over: u64) -> u64 {
        let later = u128::from(over.div_ceil(self.quota.limit()));
        let target = u128::from(window) + later;
        let start = target * u128::from(self.quota.period_nanos());
        if target > u128::from(self.last_index()) || start > u128::from(u64::MAX) {
            return u64::MAX;
        }
        sat_u64(start - u128::from(now.as_u64()).min(start))
    }

    /// The most a count may reach by a charge: the limit and
    /// [`DEBT_PERIODS`] limits of debt, within the count field.
    #[inline]
    fn debt_cap(&self) -> u64 {
        let cap = u128::from(self.quota.limit()) * u128::from(DEBT_PERIODS + 1);
        sat_u64(cap).min(self.max_count())
    }

    /// The charge: `cost` permits recorded at `now` whether or not they
    /// fit, the count running past the limit up to the debt cap. Returns
    /// the word to store (`None`: nothing to write) and the permits
    /// recorded. Past the last window (closed) nothing is recorded.
    #[inline]
    pub fn charge(&self, state: u64, now: Nanos, cost: u64) -> (Option<u64>, u64) {
        let (stored, stored_count) = self.unpack(state);
        let index = now.as_u64() / self.quota.period_nanos();
        let (window, count) = if index > stored {
            (index, self.carried(stored_count, index - stored))
        } else {
            (stored, stored_count)
        };
        if cost == 0 || window > self.last_index() {
            return (None, 0);
        }
        // A count never passes the cap (a carry caps it too); `max`: none
        // is ever lowered by a charge.
        let next = count.saturating_add(cost).min(self.debt_cap()).max(count);
        let recorded = next - count;
        if recorded == 0 {
            return (None, 0);
        }
        (Some(self.pack(window, next)), recorded)
    }

    /// The refund: `permits` given back at `now` from the count current at
    /// `now` (the stored window's, or what it carries into the current
    /// one), floored at 0. `None` when there is nothing to give back or
    /// nothing to give. A window over is never credited beyond what it
    /// carries: its permits no longer count anyway.
    #[inline]
    pub fn refund(&self, state: u64, now: Nanos, permits: u64) -> Option<u64> {
        let (stored, stored_count) = self.unpack(state);
        let index = now.as_u64() / self.quota.period_nanos();
        let (window, count) = if index > stored {
            (index, self.carried(stored_count, index - stored))
        } else {
            (stored, stored_count)
        };
        if count == 0 || permits == 0 || window > self.last_index() {
            return None;
        }
        Some(self.pack(window, count.saturating_sub(permits)))
    }
}

fn sat_u64(value: u128) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

impl fmt::Debug for FixedWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixedWindow")
            .field("quota", &self.quota)
            .field("count_bits", &self.count_bits)
            .finish()
    }
}

impl sealed::Sealed for FixedWindow {}

impl Algorithm for FixedWindow {
    type Cell = AtomicU64;

    fn quota(&self) -> &Quota {
        &self.quota
    }

    fn capacity(&self) -> u64 {
        self.quota.limit()
    }

    fn new_cell(&self) -> AtomicU64 {
        AtomicU64::new(0)
    }

    // Always inlined, as `word_update` is (see there).
    #[inline(always)]
    fn check_cell(&self, cell: &AtomicU64, now: Nanos, cost: u64) -> Decision {
        store::word_update!(cell, |state| self.transition(state, now, cost))
    }

    #[inline(always)]
    fn check_cell_mut(&self, cell: &mut AtomicU64, now: Nanos, cost: u64) -> Decision {
        store::word_update_mut!(cell, |state| self.transition(state, now, cost))
    }

    #[inline]
    fn peek_cell(&self, cell: &AtomicU64, now: Nanos, cost: u64) -> Decision {
        self.transition(store::word_load(cell), now, cost).0
    }

    fn charge_cell(&self, cell: &AtomicU64, now: Nanos, cost: u64) -> u64 {
        apply::word_charge(cell, |state| self.charge(state, now, cost))
    }

    fn is_idle(&self, cell: &AtomicU64, now: Nanos) -> bool {
        let (window, count) = self.unpack(store::word_load(cell));
        let index = now.as_u64() / self.quota.period_nanos();
        count == 0 || (index > window && self.carried(count, index - window) == 0)
    }

    fn refund_cell(&self, cell: &AtomicU64, now: Nanos, permits: u64) {
        apply::word_try_apply(cell, |state| self.refund(state, now, permits));
    }

    fn reset_cell(&self, cell: &AtomicU64) {
        apply::word_store(cell, 0);
    }

    /// Closed: the last window a clock can reach, its count field full
    /// (at least the limit): no later window replaces it.
    fn take_cell(&self, cell: &AtomicU64) -> AtomicU64 {
        apply::word_take(cell, u64::MAX)
    }

    fn carry_cell(
        &self,
        previous: &FixedWindow,
        cell: &AtomicU64,
        now: Nanos,
        carry: Carry,
    ) -> AtomicU64 {
        let (window, count) = previous.unpack(store::word_load(cell));
        let index = now.as_u64() / previous.quota.period_nanos();
        let used = if window < index {
            previous.carried(count, index - window)
        } else {
            count
        };
        let limit = self.quota.limit();
        // Not capped at the new limit (a count above it carries over as a
        // debt), only at the debt cap, as a charge is.
        let used = match carry {
            Carry::Reset => 0,
            Carry::Keep => used,
            Carry::Proportional => {
                let scaled = (u128::from(used) * u128::from(limit))
                    .div_ceil(u128::from(previous.quota.limit()));
                sat_u64(scaled)
            }
        }
        .min(self.debt_cap());
        let index = now.as_u64() / self.quota.period_nanos();
        // The permits taken count in the window now current under the new period.
        let state = if used == 0 || index > self.last_index() {
            0
        } else {
            self.pack(index, used)
        };
        AtomicU64::new(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SEC: u64 = 1_000_000_000;

    fn window(limit: u64, period: Duration) -> FixedWindow {
        FixedWindow::new(Quota::new(limit, period).unwrap()).unwrap()
    }

    #[test]
    fn admits_limit_per_aligned_window() {
        let w = window(3, Duration::from_secs(1));
        let mut state = 0;
        let mut admitted = Vec::new();
        for t in [0, 1, 2, SEC - 1, SEC, SEC + 1, SEC + 2, SEC + 3] {
            let (d, next) = w.transition(state, Nanos::new(t), 1);
            state = next.unwrap_or(state);
            admitted.push(d.is_allowed());
        }
        assert_eq!(admitted, [true, true, true, false, true, true, true, false]);
    }

    #[test]
    fn denial_retries_at_the_next_window_exactly() {
        let w = window(1, Duration::from_secs(1));
        let (_, state) = w.transition(0, Nanos::new(250_000_000), 1);
        let (d, next) = w.transition(state.unwrap(), Nanos::new(400_000_000), 1);
        assert!(d.is_denied());
        assert_eq!(next, None);
        assert_eq!(d.retry_after(), Duration::from_millis(600));
        assert_eq!(d.reset_after(), Duration::from_millis(600));
        assert_eq!(d.remaining(), 0);
    }

    #[test]
    fn clock_going_backwards_keeps_the_stored_window() {
        let w = window(2, Duration::from_secs(1));
        let (_, s) = w.transition(0, Nanos::new(5 * SEC), 2);
        let s = s.unwrap();
        let (d, next) = w.transition(s, Nanos::new(4 * SEC), 1);
        assert!(d.is_denied());
        assert_eq!(next, None);
        assert_eq!(d.retry_after(), Duration::from_secs(2));
    }

    #[test]
    fn refuses_windows_it_cannot_index_for_36_years() {
        let q = Quota::new(1 << 40, Duration::from_micros(1)).unwrap();
        assert!(matches!(
            FixedWindow::new(q),
            Err(QuotaError::Overflow { .. })
        ));
        assert!(FixedWindow::new(Quota::per_second(1_000_000_000).unwrap()).is_ok());
        assert!(FixedWindow::new(Quota::per_second(u64::MAX).unwrap()).is_err());
    }
}
