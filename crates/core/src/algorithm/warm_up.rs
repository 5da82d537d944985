//! Warm-up: a cold limiter starts at `rate / cold_factor` and ramps to
//! `rate` as permits are taken; an idle one cools down again. Guava's
//! `SmoothWarmingUp` model, for refusing (`check`, as Sentinel's warm-up
//! controller) and for waiting ([`WarmUp::reserve`], as Guava's `acquire`).
//!
//! # The model
//!
//! The limiter stores *idle permits* `s`, from 0 (hot) to `max` (cold). Each
//! permit taken costs a wait, the *interval* at the level it is taken from:
//!
//! ```text
//! interval(x) = I                             for x ≤ threshold
//!             = I + slope · (x − threshold)   for threshold < x ≤ max
//! ```
//!
//! with, for a quota of `rate = limit / period`, a warm-up period `P` and a
//! cold factor `c`:
//!
//! - `I = 1 / rate`, the stable interval; `c · I` the cold interval;
//! - `threshold = P / (2·I)`: the flat part takes half the warm-up period;
//! - `max = threshold + 2·P / ((1 + c)·I)`: the ramp from `I` to `c·I` is a
//!   trapezoid of area `P`, so a cold limiter's ramp spent at full speed
//!   takes exactly the warm-up period;
//! - `slope = (c − 1)·I / (max − threshold)`.
//!
//! Taking `k` permits from level `s` costs the area under `interval` from
//! `s − k` to `s` (permits beyond `s` cost `I` each). Idle time adds idle
//! permits at `max / P` per second, up to `max`: an idle limiter is cold
//! again after the warm-up period, and a fresh one is cold (`s = max`).
//! For 2 per second, `P` = 4 s, `c` = 3: `I` = 0.5 s, threshold 4, max 8,
//! slope 0.25 s per permit; a cold limiter's permits cost 1.375 s,
//! 1.125 s, 0.875 s, 0.625 s, then 0.5 s each.
//!
//! **Pay later**, as in Guava: a request is served at once when nothing is
//! owed, and *its* cost is waited out by the next one. The state is `s` and
//! the instant `F` from which the next request may go. `check` admits at
//! `now ≥ F`, then brings `s` up to `now`, sets `F := now + cost` and takes
//! the permits; a denial says `retry_after = F − now` and writes nothing.
//! [`reserve`](WarmUp::reserve) is ready at `max(now, F)` and charged at
//! once, so that later callers queue behind it in order.
//!
//! # Guarantee
//!
//! **The time between two admissions is at least the cost of the first**,
//! the costs being the model's: a cold limiter admits at most `rate / c` at
//! first, ramping to `rate` over the warm-up period. Since every permit
//! costs at least `I`, any interval of length `t` admits at most
//! `burst + rate·t` permits. The state is exact (idle permits in units
//! of `1 / (2·(c + 1)·t)` permit, for `limit / period_ns = l / t` in lowest
//! terms), and each cost is the exact area rounded **up** to the
//! nanosecond. `F` only moves later, so a clock reading that goes back is
//! denied and re-credits nothing.
//!
//! # Parameters
//!
//! | parameter | default | from |
//! |---|---|---|
//! | the quota | — | its rate is the stable rate; its burst only the largest cost one request may ask |
//! | the warm-up period `P` | none: required | — |
//! | the cold factor `c` | 3 ([`DEFAULT_COLD_FACTOR`]) | Guava's and Sentinel's; 1 is a pay-later limiter without warm-up |
//!
//! [`WarmUp::new`] refuses a period or a cold factor of 0
//! ([`QuotaError::InvalidParameter`]) and a `max` past 2^62 units or costs
//! past 128-bit arithmetic ([`QuotaError::Overflow`]).
//!
//! The rules in full (`check` and `reserve` step by step, why the state is
//! two words behind a lock, why the compact keyed table cannot hold it, the
//! units): `crates/core/docs/warm-up.md`. Examples: on [`WarmUp`].

use std::fmt;
use std::time::Duration;

use crate::algorithm::{Algorithm, Carry, DEBT_PERIODS, gcra, sealed};
use crate::clock::{Nanos, saturating_nanos};
use crate::decision::Decision;
use crate::quota::{Quota, QuotaError};
use crate::store::{self, DenyHint, Locked, LockedTransition};

const NAME: &str = "warm-up";
/// Guava's and Sentinel's default cold factor.
pub const DEFAULT_COLD_FACTOR: u32 = 3;
/// The largest `max` idle permits, in units: every state value and every
/// sum of two of them fit in a `u64`.
const MAX_UNITS: u128 = 1 << 62;

/// Warm-up (Guava's `SmoothWarmingUp`): see the [module docs](self).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limiter, ManualClock, Quota, WarmUp};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // 2 per second after a 4 s warm-up; a cold start goes at a third of that.
/// let warm = WarmUp::new(Quota::per_second(2)?, Duration::from_secs(4))?;
/// let clock = ManualClock::new();
/// let limiter = Limiter::with_clock(warm, clock.clone());
/// assert!(limiter.check().is_allowed()); // served at once...
/// let denied = limiter.check();          // ...and the next waits its cost
/// assert_eq!(denied.retry_after(), Duration::from_millis(1_375));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct WarmUp {
    quota: Quota,
    warmup: Duration,
    cold_factor: u32,
    /// `limit / period_ns` in lowest terms: `l / t` permits per ns.
    l: u64,
    t: u64,
    /// One permit, in units.
    permit: u128,
    /// The threshold and `max`, in units.
    threshold: u64,
    max: u64,
    /// Idle units gained per nanosecond: `l·(c + 5)`.
    gain: u64,
    /// The denominator of the slope term, `16·P·l²·(c + 1)`, and the
    /// numerator of one nanosecond's remainder, `16·P·l·(c + 1)`.
    denominator: u128,
    per_remainder: u128,
}

/// The integer constants of a [`WarmUp`] (see "Exactness" in the [module
/// docs](self)): with idle permits `s` in units, `k` permits cost
/// `⌊k·t / l⌋ + ⌈((k·t mod l)·per_remainder + slope·a·(2A − a)) /
/// denominator⌉` ns, where `A = max(0, s − threshold)` and `a = min(A,
/// min(s, k·permit))`; idle time adds `gain` units a nanosecond, up to `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WarmConstants {
    /// The largest cost of one request.
    pub burst: u64,
    /// `limit / period_ns = l / t`, in lowest terms.
    pub l: u64,
    /// See `l`.
    pub t: u64,
    /// One permit, in units.
    pub permit: u128,
    /// The threshold, in units.
    pub threshold: u64,
    /// The cold maximum, in units.
    pub max: u64,
    /// Units regained per idle nanosecond.
    pub gain: u64,
    /// `cold_factor − 1`.
    pub slope: u32,
    /// `16·P·l·(c + 1)`.
    pub per_remainder: u128,
    /// `16·P·l²·(c + 1)`.
    pub denominator: u128,
}

/// The state of one [`WarmUp`] limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WarmState {
    /// `F`: the first instant (ns) at which a request may be admitted.
    /// `u64::MAX`: closed (see [`Algorithm::take_cell`]).
    pub next_free: u64,
    /// Idle permits at `next_free`, in units of the limiter (see "Exactness").
    pub stored: u64,
}

impl WarmUp {
    /// Runs `quota`'s rate after a warm-up of `warmup`, with the default
    /// cold factor of 3.
    ///
    /// # Errors
    ///
    /// As [`with_cold_factor`](WarmUp::with_cold_factor).
    pub fn new(quota: Quota, warmup: Duration) -> Result<WarmUp, QuotaError> {
        WarmUp::with_cold_factor(quota, warmup, DEFAULT_COLD_FACTOR)
    }

    /// Runs `quota`'s rate after a warm-up of `warmup`, starting cold at
    /// `rate / cold_factor`.
    ///
    /// # Errors
    ///
    /// [`QuotaError::InvalidParameter`] for a warm-up of 0 or a cold factor
    /// of 0; [`QuotaError::Overflow`] when `warmup × rate × (cold factor + 5)`
    /// is too large to count exactly (see "Exactness").
    pub fn with_cold_factor(
        quota: Quota,
        warmup: Duration,
        cold_factor: u32,
    ) -> Result<WarmUp, QuotaError> {
        if cold_factor == 0 {
            return Err(QuotaError::InvalidParameter {
                algorithm: NAME,
                what: "the cold factor must be at least 1",
            });
        }
        let p = saturating_nanos(warmup);
        if p == 0 {
            return Err(QuotaError::InvalidParameter {
                algorithm: NAME,
                what: "the warm-up period must be longer than 0",
            });
        }
        let overflow = QuotaError::Overflow {
            algorithm: NAME,
            what: "warm-up period × rate × (cold factor + 5)",
        };
        let g = gcra::gcd(quota.limit(), quota.period_nanos());
        let (l, t) = (quota.limit() / g, quota.period_nanos() / g);
        let c = u128::from(cold_factor);
        let pl = u128::from(p) * u128::from(l);
        let max = pl.checked_mul(c + 5).filter(|&m| m <= MAX_UNITS);
        let Some(max) = max else {
            return Err(overflow);
        };
        let threshold = pl * (c + 1);
        let per_remainder = 16 * pl * (c + 1);
        let denominator = per_remainder.checked_mul(u128::from(l));
        // The slope term's numerator: (c − 1)·a·(2A − a) ≤ (c − 1)·A², with
        // A the ramp's width in units, plus a remainder below the denominator.
        let ramp = max - threshold;
        let numerator = (ramp * ramp)
            .checked_mul(c - 1)
            .zip(denominator)
            .and_then(|(slope, d)| slope.checked_add(d));
        let (Some(denominator), Some(_)) = (denominator, numerator) else {
            return Err(overflow);
        };
        Ok(WarmUp {
            quota,
            warmup,
            cold_factor,
            l,
            t,
            permit: 2 * (c + 1) * u128::from(t),
            threshold: threshold as u64,
            max: max as u64,
            gain: l * (cold_factor as u64 + 5),
            denominator,
            per_remainder,
        })
    }

    /// The warm-up period.
    pub const fn warmup(&self) -> Duration {
        self.warmup
    }

    /// The cold factor: a cold limiter runs at `rate / cold_factor`.
    pub const fn cold_factor(&self) -> u32 {
        self.cold_factor
    }

    /// The integer constants of the transition, for a backend that runs the
    /// same arithmetic elsewhere (the Redis script): see "Exactness".
    pub fn constants(&self) -> WarmConstants {
        WarmConstants {
            burst: self.quota.burst(),
            l: self.l,
            t: self.t,
            permit: self.permit,
            threshold: self.threshold,
            max: self.max,
            gain: self.gain,
            slope: self.cold_factor - 1,
            per_remainder: self.per_remainder,
            denominator: self.denominator,
        }
    }

    /// A fresh state: cold, nothing owed.
    pub const fn fresh(&self) -> WarmState {
        WarmState {
            next_free: 0,
            stored: self.max,
        }
    }

    /// The idle permits of `state` (as a fraction of the cold maximum, 0 hot
    /// to 1 cold) at `now`, for display.
    pub fn coldness(&self, state: &WarmState, now: Nanos) -> f64 {
        self.idle_at(state, now.as_u64()) as f64 / self.max as f64
    }

    /// The rate (permits per second) the next permit would be charged at,
    /// at `now`: `rate / cold_factor` cold, `rate` hot; for display.
    pub fn current_rate(&self, state: &WarmState, now: Nanos) -> f64 {
        let interval = self.interval_ns(self.idle_at(state, now.as_u64()));
        1e9 / interval
    }

    /// The interval, in ns, of a permit taken at `stored` units.
    fn interval_ns(&self, stored: u64) -> f64 {
        let stable = self.t as f64 / self.l as f64;
        let above = stored.saturating_sub(self.threshold) as f64;
        let ramp = (self.max - self.threshold) as f64;
        if ramp == 0.0 {
            return stable;
        }
        stable * (1.0 + (f64::from(self.cold_factor) - 1.0) * above / ramp)
    }

    /// Idle units at `now` (`now ≥ next_free`: gained since; before, as
    /// stored).
    fn idle_at(&self, state: &WarmState, now: u64) -> u64 {
        let idle = now.saturating_sub(state.next_free);
        let gained = u128::from(idle) * u128::from(self.gain);
        (u128::from(state.stored) + gained).min(u128::from(self.max)) as u64
    }

    /// When `state` is cold again (as fresh): `F` plus the time to gain the
    /// missing idle permits; `u64::MAX` if closed or past the clock's end.
    fn cold_at(&self, state: &WarmState) -> u64 {
        if state.next_free == u64::MAX {
            return u64::MAX;
        }
        let missing = self.max - state.stored.min(self.max);
        state.next_free.saturating_add(missing.div_ceil(self.gain))
    }

    /// The cost in ns of `permits` taken at `stored` units: the area under
    /// the interval curve, rounded up. `None` if it passes `u64::MAX`.
    pub fn cost(&self, stored: u64, permits: u64) -> Option<u64> {
        // At or below the threshold the ramp's area is 0 and the cost is
        // `⌈k·t / l⌉`: 64-bit arithmetic where it fits (a limiter near its
        // rate prices most permits here).
        if stored <= self.threshold {
            if let Some(base) = permits.checked_mul(self.t) {
                return Some(base.div_ceil(self.l));
            }
        }
        let units = u128::from(permits).saturating_mul(self.permit);
        let taken = units.min(u128::from(stored));
        let ramp = u128::from(stored.saturating_sub(self.threshold));
        let a = taken.min(ramp);
        // k·I = k·t/l, whole ns and remainder.
        let base = u128::from(permits) * u128::from(self.t);
        let (whole, rest) = (base / u128::from(self.l), base % u128::from(self.l));
        // The ramp's extra area: (c − 1)·(A² − (A − a)²) / denominator.
        let slope = u128::from(self.cold_factor - 1) * a * (2 * ramp - a);
        let extra = (rest * self.per_remainder + slope).div_ceil(self.denominator);
        u64::try_from(whole + extra).ok()
    }

    /// The refusing transition: decides `cost` permits at `now` on `state`,
    /// and returns the state to store if the request is admitted. `None`:
    /// nothing to write (every denial, and a cost of 0).
    pub fn transition(
        &self,
        state: &WarmState,
        now: Nanos,
        cost: u64,
    ) -> (Decision, Option<WarmState>) {
        let burst = self.quota.burst();
        let now = now.as_u64();
        let cold_after = |state: &WarmState| self.cold_at(state).saturating_sub(now);
        if state.next_free == u64::MAX {
            // Closed.
            return (Decision::deny(burst, 0, u64::MAX, u64::MAX), None);
        }
        let owed = now < state.next_free;
        let remaining = if owed { 0 } else { burst };
        if cost == 0 {
            // Only looks: takes nothing, so it is never refused.
            return (Decision::allow(burst, remaining, cold_after(state)), None);
        }
        if owed {
            let decision = Decision::deny(burst, 0, state.next_free - now, cold_after(state));
            return (decision, None);
        }
        if cost > burst {
            return (
                Decision::deny(burst, burst, u64::MAX, cold_after(state)),
                None,
            );
        }
        match self.reserve(state, Nanos::new(now), cost) {
            Some((_, next)) => (Decision::allow(burst, 0, cold_after(&next)), Some(next)),
            // The cost ends past the clock's last instant: never.
            None => (
                Decision::deny(burst, burst, u64::MAX, cold_after(state)),
                None,
            ),
        }
    }

    /// The waiting transition (Guava's `acquire`): `cost` permits asked at
    /// `now` are ready at `max(now, F)` and charged from there. Returns that
    /// instant and the state after them; `None` if the charge would end
    /// past the last instant of the clock, or the limiter is closed.
    pub fn reserve(&self, state: &WarmState, now: Nanos, cost: u64) -> Option<(Nanos, WarmState)> {
        if state.next_free == u64::MAX {
            return None;
        }
        let now = now.as_u64();
        let ready = now.max(state.next_free);
        let stored = self.idle_at(state, now);
        let next_free = ready.checked_add(self.cost(stored, cost)?)?;
        if next_free == u64::MAX {
            return None;
        }
        let taken = (u128::from(cost).saturating_mul(self.permit)).min(u128::from(stored)) as u64;
        let next = WarmState {
            next_free,
            stored: stored - taken,
        };
        Some((Nanos::new(ready), next))
    }

    /// The charge: `cost` permits recorded at `now` whether or not they fit
    /// (a reservation, not waited for): the next free instant moves past
    /// now by the permits' cost. The debt is capped: the next free instant
    /// never runs past `now + DEBT_PERIODS · period` (every permit costs at
    /// least the stable interval, so that is at most `DEBT_PERIODS · limit`
    /// permits); a charge beyond records the most permits that end by then.
    /// Returns the state to store (`None`: nothing to write) and the
    /// permits recorded.
    pub fn charge(&self, state: &WarmState, now: Nanos, cost: u64) -> (Option<WarmState>, u64) {
        let cap = now
            .as_u64()
            .saturating_add(DEBT_PERIODS.saturating_mul(self.quota.period_nanos()));
        let ends_by_cap = |k: u64| {
            self.reserve(state, now, k)
                .filter(|(_, next)| next.next_free <= cap)
                .map(|(_, next)| next)
        };
        if cost == 0 {
            return (None, 0);
        }
        if let Some(next) = ends_by_cap(cost) {
            return (Some(next), cost);
        }
        // The most permits that end by the cap: the cost of `k` permits
        // grows with `k`, so a bisection finds it.
        let (mut fits, mut over) = (0, cost);
        while over - fits > 1 {
            let mid = fits + (over - fits) / 2;
            if ends_by_cap(mid).is_some() {
                fits = mid;
            } else {
                over = mid;
            }
        }
        match ends_by_cap(fits) {
            Some(next) if fits > 0 => (Some(next), fits),
            _ => (None, 0),
        }
    }

    /// The refund: `permits` given back at `now`. What is owed moves back
    /// by `permits` stable intervals (rounded down), not before `now`, and
    /// the permits go back to the idle store (not above `max`), which only
    /// makes later permits cost as much or more. `None` when nothing is
    /// owed.
    pub fn refund(&self, state: &WarmState, now: Nanos, permits: u64) -> Option<WarmState> {
        let now = now.as_u64();
        if state.next_free <= now || state.next_free == u64::MAX || permits == 0 {
            return None;
        }
        let back = u128::from(permits) * u128::from(self.t) / u128::from(self.l);
        let back = u64::try_from(back).unwrap_or(u64::MAX);
        let stored = (u128::from(permits).saturating_mul(self.permit))
            .saturating_add(u128::from(state.stored))
            .min(u128::from(self.max)) as u64;
        Some(WarmState {
            next_free: state.next_free.saturating_sub(back).max(now),
            stored,
        })
    }

    fn hint_of(&self, state: &WarmState) -> DenyHint {
        DenyHint {
            denied_until: state.next_free,
            full_at: self.cold_at(state),
        }
    }

    fn closed(&self) -> WarmState {
        WarmState {
            next_free: u64::MAX,
            stored: self.max,
        }
    }
}

impl fmt::Debug for WarmUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WarmUp")
            .field("quota", &self.quota)
            .field("warmup", &self.warmup)
            .field("cold_factor", &self.cold_factor)
            .finish()
    }
}

impl LockedTransition for WarmUp {
    type State = WarmState;

    fn decide(&self, state: &WarmState, now: Nanos, cost: u64) -> Decision {
        self.transition(state, now, cost).0
    }

    fn admit(&self, state: &mut WarmState, now: Nanos, cost: u64) {
        if let (_, Some(next)) = self.transition(state, now, cost) {
            *state = next;
        }
    }

    fn hint(&self, state: &WarmState) -> DenyHint {
        self.hint_of(state)
    }

    fn limit(&self) -> u64 {
        self.quota.burst()
    }
}

impl sealed::Sealed for WarmUp {}

impl Algorithm for WarmUp {
    type Cell = Locked<WarmState>;

    fn quota(&self) -> &Quota {
        &self.quota
    }

    fn capacity(&self) -> u64 {
        self.quota.burst()
    }

    fn new_cell(&self) -> Locked<WarmState> {
        let fresh = self.fresh();
        Locked::with_hint(fresh, self.hint_of(&fresh))
    }

    fn check_cell(&self, cell: &Locked<WarmState>, now: Nanos, cost: u64) -> Decision {
        store::locked_check(self, cell, now, cost)
    }

    fn peek_cell(&self, cell: &Locked<WarmState>, now: Nanos, cost: u64) -> Decision {
        store::locked_peek(self, cell, now, cost)
    }

    /// The reservation of `cost` at `now`, not waited for: later requests
    /// wait it out.
    fn charge_cell(&self, cell: &Locked<WarmState>, now: Nanos, cost: u64) -> u64 {
        if cost == 0 {
            return 0;
        }
        super::apply::locked_charge(self, cell, |state| {
            let (next, recorded) = self.charge(state, now, cost);
            if let Some(next) = next {
                *state = next;
            }
            recorded
        })
    }

    fn is_idle(&self, cell: &Locked<WarmState>, now: Nanos) -> bool {
        let state = *cell.lock();
        state.next_free != u64::MAX && self.cold_at(&state) <= now.as_u64()
    }

    fn refund_cell(&self, cell: &Locked<WarmState>, now: Nanos, permits: u64) {
        let mut state = cell.lock();
        if let Some(next) = self.refund(&state, now, permits) {
            *state = next;
            let hint = self.hint_of(&state);
            cell.publish(&state, hint);
        }
    }

    fn reset_cell(&self, cell: &Locked<WarmState>) {
        let fresh = self.fresh();
        super::apply::locked_change(self, cell, |state| *state = fresh);
    }

    /// Closed: `F` at the last instant, never reached.
    fn take_cell(&self, cell: &Locked<WarmState>) -> Locked<WarmState> {
        super::apply::locked_take(self, cell, self.closed())
    }

    /// What is owed (`F − now`) is carried in stable intervals (rescaled to
    /// the new rate, rounded up; at most the debt cap, [`DEBT_PERIODS`]
    /// periods, as a charge's) and the idle permits as a fraction of the
    /// cold maximum (rounded up: colder, never warmer). [`Carry::Reset`]
    /// starts cold; [`Carry::Proportional`] is [`Carry::Keep`].
    fn carry_cell(
        &self,
        previous: &WarmUp,
        cell: &Locked<WarmState>,
        now: Nanos,
        carry: Carry,
    ) -> Locked<WarmState> {
        let old = *cell.lock();
        let state = if carry == Carry::Reset {
            self.fresh()
        } else if old.next_free == u64::MAX {
            self.closed()
        } else {
            let now = now.as_u64();
            let idle = previous.idle_at(&old, now);
            let stored =
                (u128::from(idle) * u128::from(self.max)).div_ceil(u128::from(previous.max)) as u64;
            let owed = u128::from(old.next_free.saturating_sub(now));
            // owed · I_new / I_old = owed · (t_new · l_old) / (l_new · t_old).
            let owed = (owed * u128::from(self.t) * u128::from(previous.l))
                .div_ceil(u128::from(self.l) * u128::from(previous.t));
            // The debt cap, as a charge's: at most DEBT_PERIODS periods owed.
            let owed = u64::try_from(owed)
                .unwrap_or(u64::MAX)
                .min(DEBT_PERIODS.saturating_mul(self.quota.period_nanos()));
            // Nothing owed: the idle permits were brought up to `now`.
            let next_free = now.saturating_add(owed);
            WarmState {
                next_free,
                stored: stored.min(self.max),
            }
        };
        Locked::with_hint(state, self.hint_of(&state))
    }
}

#[cfg(test)]
mod tests;
