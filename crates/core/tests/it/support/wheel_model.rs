//! The reference model of the sliding window counter (time wheel), with its
//! debt: restated from the module docs, every admission kept, the debt let
//! in epoch by epoch (see [`model`](super::model) for the conventions).

use std::sync::Mutex;

use tollgate::Quota;

use super::model::{DEBT_PERIODS, Expected, Model, U64_MAX, ceil_div};

// ---------------------------------------------------------------------------
// Sliding window counter (time wheel)
// ---------------------------------------------------------------------------

/// The period cut into `n` slots: epoch `e(t) = ⌊t·n/T⌋`, slot `e` starts at
/// `⌈e·T/n⌉`. Every admission is kept as `(epoch, cost)`; at epoch `cur` the
/// admissions of epochs `cur − n + 1 ..= cur` count, and a request is
/// admitted iff they plus `cost` are at most `limit`.
///
/// `retry_after` is the start of the first later epoch at which the request
/// fits; `reset_after` the start of `newest + n` (the first epoch at which
/// the newest counting admission has left) minus `now`, 0 if nothing counts.
///
/// The epoch is a `u64` in the implementation; the model assumes
/// `⌊t·n/T⌋ + n < 2^64`, so that no epoch it names saturates (the property
/// tests keep to it).
#[derive(Debug)]
pub struct SlidingWindowModel {
    limit: i128,
    period: i128,
    n: i128,
    wheel: Mutex<Wheel>,
}

/// The wheel model's state.
#[derive(Clone, Debug, Default)]
struct Wheel {
    /// `(epoch, cost)` of every admission of cost > 0, and of every part of
    /// a debt that entered the window, epochs non-decreasing.
    admissions: Vec<(i128, i128)>,
    /// Permits charged beyond the limit, not yet in the window.
    debt: i128,
    /// The last epoch the debt was given room at.
    at: i128,
}

impl SlidingWindowModel {
    /// The model of `SlidingWindow::new(quota, slots)`.
    pub fn new(quota: Quota, slots: u32) -> SlidingWindowModel {
        SlidingWindowModel {
            limit: i128::from(quota.limit()),
            period: i128::from(quota.period_nanos()),
            n: i128::from(slots),
            wheel: Mutex::new(Wheel::default()),
        }
    }

    /// Whether `SlidingWindow::new` should accept `slots`: 1 to 2^16.
    pub fn accepts(slots: u32) -> bool {
        (1..=1 << 16).contains(&slots)
    }

    /// The epoch containing `t`.
    pub fn epoch(&self, t: i128) -> i128 {
        t * self.n / self.period
    }

    /// The first nanosecond of epoch `e`.
    pub fn start(&self, e: i128) -> i128 {
        ceil_div(e * self.period, self.n)
    }

    /// The admissions that count at epoch `cur` (a later or the current
    /// epoch: the list is sorted and holds nothing after `cur`).
    fn counting(&self, admissions: &[(i128, i128)], cur: i128) -> i128 {
        let first = admissions.partition_point(|&(e, _)| e <= cur - self.n);
        admissions[first..].iter().map(|&(_, cost)| cost).sum()
    }

    /// From the docs: "the rest is a debt that fills each slot's room as
    /// older slots leave the window": epoch by epoch up to `cur`, the debt
    /// enters each epoch as far as the window has room.
    fn advance(&self, wheel: &mut Wheel, cur: i128) {
        let mut e = wheel.at.max(cur.min(wheel.at + 1));
        while wheel.debt > 0 && e <= cur {
            let room = (self.limit - self.counting(&wheel.admissions, e)).max(0);
            let part = room.min(wheel.debt);
            if part > 0 {
                wheel.admissions.push((e, part));
                wheel.debt -= part;
            }
            e += 1;
        }
        wheel.at = wheel.at.max(cur);
    }

    /// The decision on `wheel` (not advanced yet) at `now`.
    fn decide_on(&self, wheel: &Wheel, now: u64, cost: u64) -> Expected {
        let cur = self.epoch(i128::from(now));
        let mut wheel = wheel.clone();
        self.advance(&mut wheel, cur);
        if wheel.debt == 0 {
            return self.decide(&wheel.admissions, now, cost);
        }
        let now = i128::from(now);
        let owed = self.counting(&wheel.admissions, cur) + wheel.debt;
        // A debt runs up to 17 periods on: an epoch past the last a `u64`
        // counts, or that starts past the last instant it names, is "never".
        let until = |e: i128| {
            let start = self.start(e);
            if e > U64_MAX || start > U64_MAX {
                U64_MAX
            } else {
                start - now
            }
        };
        let retry_after = if i128::from(cost) > self.limit {
            U64_MAX
        } else {
            let mut paid = wheel.clone();
            let mut e = cur;
            while paid.debt > 0
                || self.counting(&paid.admissions, e) + i128::from(cost) > self.limit
            {
                e += 1;
                self.advance(&mut paid, e);
            }
            until(e)
        };
        // Empty once the debt is in and its newest part has left.
        let mut paid = wheel;
        let mut e = cur;
        while paid.debt > 0 {
            e += 1;
            self.advance(&mut paid, e);
        }
        let newest = paid.admissions.last().map_or(e, |&(epoch, _)| epoch);
        let reset_after = until(newest + self.n);
        Expected::deny(
            self.limit,
            (self.limit - owed).max(0),
            retry_after,
            reset_after,
        )
    }

    fn decide(&self, admissions: &[(i128, i128)], now: u64, cost: u64) -> Expected {
        let now = i128::from(now);
        let cost = i128::from(cost);
        let cur = self.epoch(now);
        let first_live = admissions.partition_point(|&(e, _)| e <= cur - self.n);
        let live_admissions = &admissions[first_live..];
        let live = self.counting(admissions, cur);
        let newest_live = live_admissions.last().map(|&(e, _)| e);
        let reset_at = |newest: i128| self.start(newest + self.n) - now;
        if live + cost <= self.limit {
            let reset_after = match (cost > 0, newest_live) {
                // The newest admission is then this one, in the current epoch.
                (true, _) => reset_at(cur),
                (false, Some(newest)) => reset_at(newest),
                (false, None) => 0,
            };
            return Expected::allow(self.limit, self.limit - live - cost, reset_after);
        }
        let retry_after = if cost > self.limit {
            U64_MAX
        } else {
            // The count only drops when an admission's epoch leaves the
            // window: try those epochs in order.
            let epoch = live_admissions
                .iter()
                .map(|&(e, _)| e + self.n)
                .find(|&e| self.counting(admissions, e) + cost <= self.limit)
                .expect(
                    "sliding window model: a request within the limit fits once the wheel turns",
                );
            assert!(
                epoch > cur,
                "sliding window model: retry epoch {epoch} not after {cur}"
            );
            self.start(epoch) - now
        };
        let reset_after = newest_live.map_or(0, reset_at);
        Expected::deny(self.limit, self.limit - live, retry_after, reset_after)
    }
}

impl Model for SlidingWindowModel {
    fn check(&self, now_ns: u64, cost: u64) -> Expected {
        let mut wheel = self.wheel.lock().unwrap();
        let expected = self.decide_on(&wheel, now_ns, cost);
        if expected.allowed && cost > 0 {
            let cur = self.epoch(i128::from(now_ns));
            self.advance(&mut wheel, cur);
            // Admissions that left the window never count again.
            let gone = wheel
                .admissions
                .partition_point(|&(e, _)| e <= cur - self.n);
            wheel.admissions.drain(..gone);
            wheel.admissions.push((cur, i128::from(cost)));
        }
        expected
    }

    fn peek(&self, now_ns: u64, cost: u64) -> Expected {
        self.decide_on(&self.wheel.lock().unwrap(), now_ns, cost)
    }

    fn capacity(&self) -> u64 {
        self.limit as u64
    }

    /// From the docs: room now goes into the current slot, the rest is a
    /// debt; the window and the debt never hold more than `17 · limit`
    /// (nor more than a `u64`).
    fn charge(&self, now_ns: u64, cost: u64) -> (Expected, u64) {
        let recorded = {
            let mut wheel = self.wheel.lock().unwrap();
            let cur = self.epoch(i128::from(now_ns));
            self.advance(&mut wheel, cur);
            let held = self.counting(&wheel.admissions, cur) + wheel.debt;
            let cap = (self.limit * (DEBT_PERIODS + 1)).min(U64_MAX);
            let recorded = (cap - held).clamp(0, i128::from(cost));
            wheel.debt += recorded;
            // The room at `cur`, as at any epoch the debt reaches.
            wheel.at = cur - 1;
            self.advance(&mut wheel, cur);
            recorded
        };
        (self.peek(now_ns, 1), recorded as u64)
    }
}
