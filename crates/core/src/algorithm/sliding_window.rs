//! Sliding window counter: a time wheel of `n` slots.
//!
//! The period `T` is cut into `n` slots of `T/n`; each slot counts the
//! permits admitted in it, and a request is admitted iff the counts of the
//! current slot and the `n − 1` before it, plus its cost, are at most `limit`.
//!
//! # Guarantee
//!
//! - **Every slot-aligned window of length `T` admits at most `limit`.**
//! - **Every window of length `T − T/n`, at any start, admits at most
//!   `limit`** (it lies within `n` consecutive slots).
//! - **Every window of length `T`, at any start, admits at most `2·limit`,
//!   and this is tight**: `limit` at the very end of slot `k` and `limit` at
//!   the very start of slot `k + n` fall within `(n − 1)·T/n + ε`.
//!
//! So `n` trades memory for precision: with `n = 1` this is a fixed window,
//! and as `n` grows it approaches the sliding log. `retry_after` is the exact
//! slot boundary at which enough old slots have left the window.
//!
//! Slot `e` is `[⌈e·T/n⌉, ⌈(e+1)·T/n⌉)` ns, so slots need not be whole
//! nanoseconds and any `n` up to [`MAX_SLOTS`] works with any period; every
//! run of `n` slots is exactly `T` long.
//!
//! # Why a lock, and why it is linearizable
//!
//! The widely copied design reads the sum of the slots and then increments
//! one slot with a separate atomic add: two threads can both read `limit − 1`
//! and both add, admitting `limit + 1`. Here "advance the wheel, sum, add" is
//! one step under a small mutex, so every decision is taken on the state left
//! by the previous one: linearizable by construction, and proven by the
//! frozen-clock hammer and the loom model. A request of cost 1 that cannot fit
//! is still denied from a published hint without the lock.
//!
//! # State
//!
//! The epoch of the newest slot, the running total, a debt and `n`
//! counters: `8·n + 24` bytes plus a mutex. A charge puts what the window
//! has room for in the current slot and keeps the rest as the debt, which
//! fills each slot's room as older slots leave the window (with one slot,
//! the fixed window's carry); the wheel and its debt hold at most
//! `(DEBT_PERIODS + 1) · limit`. While in debt no deny hint is published
//! (the locked path works the waits out, on a copy run forward to the
//! epoch the debt is paid in: whole cycles at once, so `O(n)`). Slots that
//! leave the window are zeroed only when a request is admitted; a denial
//! reads and never writes.
//!
//! # Clock going backwards
//!
//! A reading in an earlier slot than the newest recorded one is decided in
//! the newest slot: nothing is re-credited.

use std::fmt;

use crate::algorithm::{Algorithm, Carry, DEBT_PERIODS, apply, sealed};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::quota::{Quota, QuotaError};
use crate::store::LockedTransition;
use crate::store::{self, DenyHint, Locked};

const NAME: &str = "sliding window";
/// The most slots a wheel may have.
pub const MAX_SLOTS: u32 = 1 << 16;

/// Sliding window counter (time wheel): see the [module docs](self).
#[derive(Clone, PartialEq, Eq)]
pub struct SlidingWindow {
    quota: Quota,
    slots: u32,
}

/// The wheel of one [`SlidingWindow`] limiter.
#[derive(Clone, PartialEq, Eq)]
pub struct WheelState {
    /// The epoch (slot number since the clock's origin) of the newest slot;
    /// the wheel holds epochs `head − n + 1 ..= head`.
    head: u64,
    /// Permits per slot; epoch `e` lives at index `e mod n`.
    counts: Box<[u64]>,
    /// The sum of `counts`.
    total: u64,
    /// Permits charged beyond the limit, not yet in a slot: they fill each
    /// slot's room as older slots leave the window (see [`SlidingWindow`]'s
    /// charges). Non-zero only while the slots hold the limit or more.
    debt: u64,
}

impl fmt::Debug for WheelState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WheelState")
            .field("head", &self.head)
            .field("total", &self.total)
            .field("debt", &self.debt)
            .finish_non_exhaustive()
    }
}

impl WheelState {
    /// The permits recorded in the wheel, whether or not they still count,
    /// and the debt not yet in a slot.
    pub fn recorded(&self) -> u64 {
        self.total + self.debt
    }
}

impl SlidingWindow {
    /// Runs `quota` as a wheel of `slots` slots (the burst is not used).
    ///
    /// # Errors
    ///
    /// [`QuotaError::InvalidParameter`] for 0 slots, [`QuotaError::TooLarge`]
    /// above [`MAX_SLOTS`].
    pub fn new(quota: Quota, slots: u32) -> Result<SlidingWindow, QuotaError> {
        if slots == 0 {
            return Err(QuotaError::InvalidParameter {
                algorithm: NAME,
                what: "the number of slots must be at least 1",
            });
        }
        if slots > MAX_SLOTS {
            return Err(QuotaError::TooLarge {
                algorithm: NAME,
                max: u64::from(MAX_SLOTS),
                what: "the number of slots",
            });
        }
        Ok(SlidingWindow { quota, slots })
    }

    /// The number of slots.
    pub const fn slots(&self) -> u32 {
        self.slots
    }

    /// A fresh wheel.
    pub fn new_state(&self) -> WheelState {
        WheelState {
            head: 0,
            counts: vec![0; self.slots as usize].into_boxed_slice(),
            total: 0,
            debt: 0,
        }
    }

    fn n(&self) -> u64 {
        u64::from(self.slots)
    }

    /// The slot containing `now`.
    #[inline]
    fn epoch(&self, now: u64) -> u64 {
        let period = self.quota.period_nanos();
        // In 64 bits when the product fits (a clock of days, not centuries):
        // a 128-bit division costs several times more.
        if let Some(scaled) = now.checked_mul(self.n()) {
            return scaled / period;
        }
        let epoch = u128::from(now) * u128::from(self.n()) / u128::from(period);
        u64::try_from(epoch).unwrap_or(u64::MAX)
    }

    /// The first nanosecond of slot `epoch`, or `None` past the last instant
    /// a `u64` can name.
    #[inline]
    fn checked_slot_start(&self, epoch: u64) -> Option<u64> {
        let period = self.quota.period_nanos();
        if let Some(scaled) = epoch.checked_mul(period) {
            return Some(scaled.div_ceil(self.n()));
        }
        let start = (u128::from(epoch) * u128::from(period)).div_ceil(u128::from(self.n()));
        u64::try_from(start).ok()
    }

    /// [`checked_slot_start`](Self::checked_slot_start), saturating.
    fn slot_start(&self, epoch: u64) -> u64 {
        self.checked_slot_start(epoch).unwrap_or(u64::MAX)
    }

    fn count(&self, state: &WheelState, epoch: u64) -> u64 {
        state.counts[(epoch % self.n()) as usize]
    }

    /// Permits that still count in the window ending with slot `current`
    /// (`current ≥ head`).
    fn live(&self, state: &WheelState, current: u64) -> u64 {
        let gone = current - state.head;
        if gone >= self.n() {
            return 0;
        }
        // Epochs head − n + 1 ..= current − n have left the window.
        let expired: u64 = (0..gone)
            .map(|i| self.count(state, state.head + 1 + i))
            .sum();
        state.total - expired
    }

    /// The decision for `cost` permits at `now`; never changes the state.
    pub fn decide(&self, state: &WheelState, now: Nanos, cost: u64) -> Decision {
        if state.debt > 0 {
            return self.decide_in_debt(state, now, cost);
        }
        let limit = self.quota.limit();
        let n = self.n();
        let now_ns = now.as_u64();
        let current = self.epoch(now_ns).max(state.head);
        let live = self.live(state, current);
        // The wheel is empty once slot `newest` has left the window: "never"
        // if that is past the end of the clock.
        let full_at = |newest: u64| {
            newest
                .checked_add(n)
                .and_then(|epoch| self.checked_slot_start(epoch))
                .map_or(u64::MAX, |at| at.saturating_sub(now_ns))
        };
        // `live` may exceed the limit after a quota change (see
        // `carry_cell`); `cost ≤ limit − live`, not `live + cost ≤ limit`:
        // the sum can overflow for limits above 2^63.
        let fits = |live: u64| live <= limit && cost <= limit - live;
        if fits(live) {
            let reset_after = if cost > 0 {
                full_at(current)
            } else {
                self.newest_live(state, current).map_or(0, full_at)
            };
            return Decision::allow(limit, limit - live - cost, reset_after);
        }
        let reset_after = self.newest_live(state, current).map_or(0, full_at);
        let retry_after = if cost > limit {
            u64::MAX
        } else {
            // Move the window forward one slot at a time until enough has left.
            let mut still = live;
            let mut epoch = current;
            while !fits(still) && epoch < u64::MAX {
                epoch += 1;
                // The epoch leaving the window that now ends at `epoch`.
                if let Some(leaving) = epoch.checked_sub(n) {
                    if leaving + n > state.head && leaving <= state.head {
                        still -= self.count(state, leaving);
                    }
                }
            }
            if fits(still) {
                self.checked_slot_start(epoch)
                    .map_or(u64::MAX, |at| at - now_ns)
            } else {
                u64::MAX // the end of representable time
            }
        };
        Decision::deny(limit, limit.saturating_sub(live), retry_after, reset_after)
    }

    /// [`decide`](Self::decide) for a wheel that owes a debt: decided on a
    /// copy advanced to `now` (the debt filling the room older slots left),
    /// and the waits found by running the copy on until the debt is paid.
    fn decide_in_debt(&self, state: &WheelState, now: Nanos, cost: u64) -> Decision {
        let limit = self.quota.limit();
        let now_ns = now.as_u64();
        let mut wheel = state.clone();
        let current = self.epoch(now_ns).max(wheel.head);
        self.advance_to(&mut wheel, current);
        let owed = wheel.total.saturating_add(wheel.debt);
        let fits = |wheel: &WheelState| {
            wheel.debt == 0 && wheel.total <= limit && cost <= limit - wheel.total
        };
        if fits(&wheel) {
            // The debt fitted in the room at `now`: decided as a wheel
            // without one.
            return self.decide(&wheel, now, cost);
        }
        let until = |epoch: Option<u64>| {
            epoch
                .and_then(|epoch| self.checked_slot_start(epoch))
                .map_or(u64::MAX, |at| at.saturating_sub(now_ns))
        };
        // Run on until the debt is in the slots, then until `cost` fits.
        let mut paid = wheel;
        let drained = self.drain(&mut paid);
        let reset_after = until(
            drained
                .and_then(|_| self.newest_live(&paid, paid.head))
                .and_then(|e| e.checked_add(self.n())),
        );
        let retry_after = if cost > limit || drained.is_none() {
            u64::MAX
        } else {
            let mut epoch = Some(paid.head);
            while let Some(e) = epoch.filter(|_| !fits(&paid)) {
                epoch = e.checked_add(1);
                if let Some(next) = epoch {
                    self.advance_to(&mut paid, next);
                }
            }
            until(epoch)
        };
        Decision::deny(limit, limit.saturating_sub(owed), retry_after, reset_after)
    }

    /// Advances `wheel` until its debt is all in slots; the epoch at which
    /// it is, or `None` if that is past the last epoch.
    fn drain(&self, wheel: &mut WheelState) -> Option<u64> {
        let n = self.n();
        let limit = self.quota.limit();
        while wheel.debt > 0 {
            let next = if wheel.total == limit && wheel.debt > limit {
                // Whole cycles repeat the slots and pay `limit` each: jump to
                // the one in which what is left (≤ limit) is paid.
                let cycles = (wheel.debt - 1) / limit;
                wheel.head.checked_add(cycles.checked_mul(n)?)?
            } else {
                wheel.head.checked_add(1)?
            };
            self.advance_to(wheel, next);
        }
        Some(wheel.head)
    }

    /// The newest epoch with permits still counting at `current`, if any.
    fn newest_live(&self, state: &WheelState, current: u64) -> Option<u64> {
        let oldest_live = current.saturating_sub(self.n() - 1);
        (oldest_live..=state.head)
            .rev()
            .find(|&e| self.count(state, e) > 0)
    }

    /// Records `cost` permits admitted at `now`; call only after
    /// [`SlidingWindow::decide`] allowed them.
    pub fn admit(&self, state: &mut WheelState, now: Nanos, cost: u64) {
        let current = self.advance(state, now);
        debug_assert!(
            state.debt == 0,
            "sliding window: admitting {cost} with a debt of {} at epoch {current}",
            state.debt
        );
        state.counts[(current % self.n()) as usize] += cost;
        state.total += cost;
        debug_assert!(
            state.total <= self.quota.limit(),
            "sliding window: {} permits in the wheel at epoch {}, limit {}",
            state.total,
            state.head,
            self.quota.limit()
        );
    }

    /// The refund: takes `permits` out of the wheel as of `now`, from the
    /// newest slot first, then older ones (fewer if fewer still count). Every
    /// slot then holds at most what it would have held without the refunded
    /// admissions, so every window counts no more than it would have.
    pub fn refund(&self, state: &mut WheelState, now: Nanos, permits: u64) {
        let n = self.n();
        let current = self.advance(state, now);
        // The debt holds the newest permits.
        let from_debt = state.debt.min(permits);
        state.debt -= from_debt;
        let mut left = permits - from_debt;
        for epoch in (current.saturating_sub(n - 1)..=current).rev() {
            if left == 0 {
                break;
            }
            let slot = &mut state.counts[(epoch % n) as usize];
            let take = (*slot).min(left);
            *slot -= take;
            state.total -= take;
            left -= take;
        }
    }

    /// Moves the wheel's head to the slot of `now` (never back), emptying the
    /// slots that left the window; returns the head.
    fn advance(&self, state: &mut WheelState, now: Nanos) -> u64 {
        let current = self.epoch(now.as_u64()).max(state.head);
        self.advance_to(state, current);
        current
    }

    /// Moves the wheel's head to epoch `current` (≥ the head), emptying the
    /// slots that left the window; a debt fills the room each slot leaves,
    /// in the slot that replaces it, and whatever room the head has.
    fn advance_to(&self, state: &mut WheelState, current: u64) {
        let n = self.n();
        let limit = self.quota.limit();
        while state.debt > 0 && state.head < current {
            if state.total == limit && state.debt >= limit && current - state.head >= n {
                // A whole cycle refills every slot with what left it, paying
                // `limit`: skip as many as the debt and the distance allow.
                let cycles = ((current - state.head) / n).min(state.debt / limit);
                state.head += cycles * n;
                state.debt -= cycles * limit;
                continue;
            }
            state.head += 1;
            let slot = (state.head % n) as usize;
            state.total -= state.counts[slot];
            state.counts[slot] = 0;
            self.fill(state);
        }
        self.fill(state);
        self.rotate(state, current);
    }

    /// Moves as much of the debt as the limit leaves room for into the head
    /// slot.
    fn fill(&self, state: &mut WheelState) {
        let moved = state
            .debt
            .min(self.quota.limit().saturating_sub(state.total));
        state.counts[(state.head % self.n()) as usize] += moved;
        state.total += moved;
        state.debt -= moved;
    }

    /// Moves the head to `current` without a debt.
    fn rotate(&self, state: &mut WheelState, current: u64) {
        let n = self.n();
        if current - state.head >= n {
            state.counts.fill(0);
            state.total = 0;
        } else {
            // Epochs `head + 1 ..= current`, without computing `u64::MAX + 1`.
            for epoch in (state.head..current).map(|e| e + 1) {
                let slot = (epoch % n) as usize;
                state.total -= state.counts[slot];
                state.counts[slot] = 0;
            }
        }
        state.head = current;
    }

    /// The charge: `cost` permits recorded at `now` whether or not they
    /// fit. What the wheel has room for goes into the current slot; the
    /// rest is a debt that fills each slot's room as older slots leave the
    /// window, so each later period counts `limit` of it (with one slot,
    /// the fixed window's carry). The wheel and its debt never hold more
    /// than `limit` and [`DEBT_PERIODS`] limits (the cap). Returns the
    /// permits recorded.
    pub fn charge(&self, state: &mut WheelState, now: Nanos, cost: u64) -> u64 {
        self.advance(state, now);
        let cap = self.debt_cap();
        let recorded = cost.min(cap.saturating_sub(state.total.saturating_add(state.debt)));
        state.debt += recorded;
        self.fill(state);
        recorded
    }

    /// The most the wheel and its debt hold: the limit and [`DEBT_PERIODS`]
    /// limits (the cap of a charge and of a carry).
    fn debt_cap(&self) -> u64 {
        self.quota.limit().saturating_mul(DEBT_PERIODS + 1)
    }

    /// What a request of cost 1 can be denied from, after an admission.
    ///
    /// No hint (`denied_until` 0: the locked path answers) while the wheel
    /// would be empty only past the end of the clock, whose `reset_after` is
    /// "never", not a wait until the last instant.
    pub fn hint(&self, state: &WheelState) -> DenyHint {
        if state.debt > 0 {
            // The locked path works the waits out.
            return DenyHint::default();
        }
        let n = self.n();
        let limit = self.quota.limit();
        let full_at = match self.newest_live(state, state.head) {
            None => 0,
            Some(e) => match e.checked_add(n).and_then(|e| self.checked_slot_start(e)) {
                Some(at) => at,
                None => return DenyHint::default(),
            },
        };
        if state.total < limit {
            return DenyHint {
                denied_until: 0,
                full_at,
            };
        }
        // Full (or above the limit after a quota change): cost 1 fits once
        // the oldest slots holding `total + 1 − limit` permits have left.
        let mut must_leave = state.total - (limit - 1);
        let mut last = state.head;
        for epoch in state.head.saturating_sub(n - 1)..=state.head {
            let count = self.count(state, epoch);
            if count >= must_leave {
                last = epoch;
                break;
            }
            must_leave -= count;
        }
        DenyHint {
            denied_until: self.slot_start(last.saturating_add(n)),
            full_at,
        }
    }
}

impl fmt::Debug for SlidingWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlidingWindow")
            .field("quota", &self.quota)
            .field("slots", &self.slots)
            .finish()
    }
}

impl LockedTransition for SlidingWindow {
    type State = WheelState;

    fn decide(&self, state: &WheelState, now: Nanos, cost: u64) -> Decision {
        SlidingWindow::decide(self, state, now, cost)
    }

    fn admit(&self, state: &mut WheelState, now: Nanos, cost: u64) {
        SlidingWindow::admit(self, state, now, cost);
    }

    fn hint(&self, state: &WheelState) -> DenyHint {
        SlidingWindow::hint(self, state)
    }

    fn limit(&self) -> u64 {
        self.quota.limit()
    }
}

impl sealed::Sealed for SlidingWindow {}

impl Algorithm for SlidingWindow {
    type Cell = Locked<WheelState>;

    fn quota(&self) -> &Quota {
        &self.quota
    }

    fn capacity(&self) -> u64 {
        self.quota.limit()
    }

    fn new_cell(&self) -> Locked<WheelState> {
        Locked::new(self.new_state())
    }

    fn check_cell(&self, cell: &Locked<WheelState>, now: Nanos, cost: u64) -> Decision {
        store::locked_check(self, cell, now, cost)
    }

    fn peek_cell(&self, cell: &Locked<WheelState>, now: Nanos, cost: u64) -> Decision {
        store::locked_peek(self, cell, now, cost)
    }

    fn charge_cell(&self, cell: &Locked<WheelState>, now: Nanos, cost: u64) -> u64 {
        if cost == 0 {
            return 0;
        }
        apply::locked_charge(self, cell, |state| self.charge(state, now, cost))
    }

    fn is_idle(&self, cell: &Locked<WheelState>, now: Nanos) -> bool {
        let state = cell.lock();
        let current = self.epoch(now.as_u64()).max(state.head);
        state.debt == 0 && self.live(&state, current) == 0
    }

    fn refund_cell(&self, cell: &Locked<WheelState>, now: Nanos, permits: u64) {
        if permits > 0 {
            apply::locked_change(self, cell, |state| self.refund(state, now, permits));
        }
    }

    fn reset_cell(&self, cell: &Locked<WheelState>) {
        apply::locked_change(self, cell, |state| *state = self.new_state());
    }

    /// Closed: the whole limit in the last slot a clock can reach, which
    /// every later reading is decided in.
    fn take_cell(&self, cell: &Locked<WheelState>) -> Locked<WheelState> {
        let mut closed = self.new_state();
        closed.head = self.epoch(u64::MAX);
        closed.counts[(closed.head % self.n()) as usize] = self.quota.limit();
        closed.total = self.quota.limit();
        apply::locked_take(self, cell, closed)
    }

    fn carry_cell(
        &self,
        previous: &SlidingWindow,
        cell: &Locked<WheelState>,
        now: Nanos,
        carry: Carry,
    ) -> Locked<WheelState> {
        let old = cell.lock();
        let mut state = self.new_state();
        if carry != Carry::Reset {
            // Nothing is dropped beyond the new limit but past the debt cap
            // (a wheel above it is denied until enough leaves), so that
            // raising it again gives none back.
            if previous.slots == self.slots && previous.quota.period() == self.quota.period() {
                // Same geometry: the slots stay.
                state = old.clone();
            } else {
                // Another geometry: what still counts moves into the newest
                // slot, so it leaves the window no earlier than it would have.
                let current = previous.epoch(now.as_u64()).max(old.head);
                let mut old = old.clone();
                previous.advance_to(&mut old, current);
                let live = old.total;
                let head = self.epoch(now.as_u64());
                state.head = head;
                state.counts[(head % self.n()) as usize] = live;
                state.total = live;
                state.debt = old.debt;
            }
            self.fill(&mut state);
            // The debt cap, as a charge's: run on to now, then what is past
            // the cap is given back, leaving the state a charge to the cap
            // leaves: slots above the limit gathered in the newest as the
            // limit (so they leave no earlier), the rest of the cap a debt.
            let (limit, cap) = (self.quota.limit(), self.debt_cap());
            if state.total.saturating_add(state.debt) > cap {
                self.advance(&mut state, now);
            }
            if state.total.saturating_add(state.debt) > cap {
                if state.total > limit {
                    state.counts.fill(0);
                    state.counts[(state.head % self.n()) as usize] = limit;
                    state.total = limit;
                }
                state.debt = cap - state.total;
                self.fill(&mut state);
            }
        }
        drop(old);
        let hint = self.hint(&state);
        Locked::with_hint(state, hint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    fn wheel(limit: u64, period: Duration, slots: u32) -> SlidingWindow {
        SlidingWindow::new(Quota::new(limit, period).unwrap(), slots).unwrap()
    }

    fn check(w: &SlidingWindow, s: &mut WheelState, t: u64, cost: u64) -> Decision {
        let d = w.decide(s, Nanos::new(t), cost);
        if d.is_allowed() {
            w.admit(s, Nanos::new(t), cost);
        }
        d
    }

    #[test]
    fn slots_leave_the_window_one_at_a_time() {
        // 4 per second, 4 slots of 250 ms.
        let w = wheel(4, Duration::from_secs(1), 4);
        let mut s = w.new_state();
        assert!(check(&w, &mut s, 0, 2).is_allowed());
        assert!(check(&w, &mut s, 300 * MS, 2).is_allowed());
        let d = check(&w, &mut s, 600 * MS, 1);
        assert!(d.is_denied());
        // Slot 0 leaves when slot 4 begins, at 1 s.
        assert_eq!(d.retry_after(), Duration::from_millis(400));
        assert_eq!(d.reset_after(), Duration::from_millis(650));
        assert!(check(&w, &mut s, 999 * MS, 1).is_denied());
        assert!(check(&w, &mut s, 1_000 * MS, 2).is_allowed());
        assert!(check(&w, &mut s, 1_000 * MS, 1).is_denied());
    }

    #[test]
    fn uneven_slots_still_make_whole_periods() {
        let w = wheel(1, Duration::from_nanos(10), 3);
        // Slots start at 0, 4, 7, 10, 14, ...
        assert_eq!(
            (0..5).map(|e| w.slot_start(e)).collect::<Vec<_>>(),
            [0, 4, 7, 10, 14]
        );
        for e in 0..100 {
            assert_eq!(w.slot_start(e + 3) - w.slot_start(e), 10);
            let start = w.slot_start(e);
            assert_eq!(w.epoch(start), e);
            if start > 0 {
                assert_eq!(w.epoch(start - 1), e - 1);
            }
        }
    }

    #[test]
    fn a_denial_leaves_the_wheel_unchanged() {
        let w = wheel(1, Duration::from_secs(1), 10);
        let mut s = w.new_state();
        assert!(check(&w, &mut s, 0, 1).is_allowed());
        let before = s.clone();
        assert!(check(&w, &mut s, 950 * MS, 1).is_denied());
        assert_eq!(s, before);
    }

    #[test]
    fn one_slot_is_a_fixed_window() {
        let w = wheel(2, Duration::from_secs(1), 1);
        let mut s = w.new_state();
        assert!(check(&w, &mut s, 999 * MS, 2).is_allowed());
        assert!(check(&w, &mut s, 1_000 * MS, 2).is_allowed());
    }

    #[test]
    fn slot_count_is_validated() {
        let q = Quota::per_second(1).unwrap();
        assert!(SlidingWindow::new(q, 0).is_err());
        assert!(SlidingWindow::new(q, MAX_SLOTS + 1).is_err());
    }
}
