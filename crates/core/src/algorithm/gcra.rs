//! Token bucket, computed as GCRA; also the leaky bucket as a meter.
//!
//! # Guarantee
//!
//! **Any interval of length `t` admits at most `burst + rate·t` permits**
//! (`rate = limit / period`), and a caller who waits `retry_after` is admitted
//! at exactly that moment, not one nanosecond earlier. The token bucket
//! (tokens refill at `rate` up to `burst`), the leaky bucket as a meter (a
//! bucket of size `burst` that drains at `rate`) and the Generic Cell Rate
//! Algorithm of ITU-T I.371 admit exactly the same requests; this is the GCRA
//! form, because its state is one number.
//!
//! # State: one `u64`, the theoretical arrival time (TAT)
//!
//! The TAT is the instant at which the bucket would be full again. A request
//! of `cost` permits at `now` is admitted iff
//! `max(tat, now) + cost·T − now ≤ burst·T`, where `T = period / limit` is the
//! emission interval, and then `tat := max(tat, now) + cost·T`. A fresh state
//! is `tat = 0`: full at any time. Memory per limiter: 8 bytes (padded to a
//! cache line for a direct limiter).
//!
//! # Ticks: exact rates below one nanosecond per permit
//!
//! Time is counted in *ticks* of `1/scale` nanosecond so that `T` is a whole
//! number of ticks. With `g = gcd(limit, period_ns)` and `L = limit / g`:
//!
//! - if `L ≤ 16`, then `scale = L` and `T = period_ns / g` ticks **exactly**:
//!   every quota of up to 16 per second, every `n` per second with `n`
//!   dividing 16·10⁹, and rates of up to 16 per nanosecond (1.6·10¹⁰ per
//!   second) are represented without error;
//! - otherwise `scale = 16` and `T` is rounded **up** to a whole tick, so the
//!   effective rate is lower than asked by less than one part in
//!   `16·period_ns/limit` (below 10⁻⁹ for 999 per minute). It never admits more.
//!
//! Rates above 16 per nanosecond are refused with [`QuotaError::TooFast`].
//! The TAT runs up to `now + burst·T`, so `burst·T` must leave room in a
//! `u64` of ticks for 36 years of clock time (`burst·T + 36 years·scale ≤
//! u64::MAX`), or the quota is refused with [`QuotaError::Overflow`]. A `u64`
//! of ticks lasts `584 / scale` years of clock time less `burst·T` (at least
//! 36); past that the limiter fails closed, it never admits everything.
//!
//! # The end of the ticks
//!
//! Near that end, `remaining` counts only the permits that still end before
//! the last tick. Once not one more permit can (`max(tat, now) + T` past
//! `u64::MAX` ticks, which only moves later), the limiter is *closed*: every
//! request of cost ≥ 1 is denied with `remaining` 0 and `retry_after` and
//! `reset_after` both `u64::MAX` ns ("never", as [`Decision`] defines it).
//! Once a whole burst no longer fits before the last tick (the clock past
//! `(u64::MAX − burst·T) / scale` ns) the limiter can never be full again,
//! and every decision whose state would be full only by then reports
//! `reset_after` "never" too. A closed limiter never reads as full.
//!
//! # Clock going backwards
//!
//! `max(tat, now)` never moves the TAT back, so an earlier reading only makes
//! the wait longer: no permit is re-credited.

use std::fmt;

use crate::algorithm::{Algorithm, Carry, DEBT_PERIODS, apply, sealed};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::quota::{Quota, QuotaError};
use crate::store;
use crate::sync::AtomicU64;

const NAME: &str = "gcra";
/// The finest tick: 1/16 ns.
const MAX_SCALE: u64 = 16;
/// The least clock time a limiter must run for: 36 years of 365 days, in ns
/// (`36 years · 16` ticks still fit in a `u64`).
const MIN_LIFETIME_NS: u64 = 36 * 365 * 86_400 * 1_000_000_000;

/// Token bucket / GCRA / leaky bucket as a meter: see the [module docs](self).
#[derive(Clone, PartialEq, Eq)]
pub struct Gcra {
    quota: Quota,
    /// Ticks per nanosecond.
    scale: u64,
    /// Emission interval `T`, in ticks: the cost of one permit.
    interval: u64,
    /// `burst · T`, in ticks: how far the TAT may run ahead of now.
    capacity: u64,
}

impl Gcra {
    /// Runs `quota` (limit per period, and its burst) as GCRA.
    ///
    /// # Errors
    ///
    /// [`QuotaError::TooFast`] above 16 permits per nanosecond,
    /// [`QuotaError::Overflow`] when `burst · period / limit` does not fit in
    /// 64 bits of ticks beside 36 years of clock time.
    pub fn new(quota: Quota) -> Result<Gcra, QuotaError> {
        let limit = quota.limit();
        let period = quota.period_nanos();
        let g = gcd(limit, period);
        let reduced_limit = limit / g;
        let (scale, interval) = if reduced_limit <= MAX_SCALE {
            (reduced_limit, period / g)
        } else {
            let interval = (u128::from(period) * u128::from(MAX_SCALE)).div_ceil(u128::from(limit));
            // `interval` ≤ period · 16 / limit + 1 ≤ 2^64 · 16, but is below 2 only
            // when limit > 16 · period, which is refused next.
            (MAX_SCALE, u64::try_from(interval).unwrap_or(u64::MAX))
        };
        if u128::from(limit) > u128::from(period) * u128::from(MAX_SCALE) {
            return Err(QuotaError::TooFast {
                algorithm: NAME,
                max_per_second: MAX_SCALE * 1_000_000_000,
            });
        }
        // The TAT reaches `now + capacity`: with `now` up to 36 years, in ticks.
        let capacity = u128::from(quota.burst()) * u128::from(interval);
        let lifetime = u128::from(MIN_LIFETIME_NS) * u128::from(scale);
        if capacity + lifetime > u128::from(u64::MAX) {
            return Err(QuotaError::Overflow {
                algorithm: NAME,
                what: "burst × emission interval beside 36 years of clock time",
            });
        }
        let capacity = capacity as u64;
        Ok(Gcra {
            quota,
            scale,
            interval,
            capacity,
        })
    }

    /// Ticks per nanosecond (1 to 16).
    pub const fn scale(&self) -> u64 {
        self.scale
    }

    /// The emission interval `T` in ticks: what one permit costs.
    pub const fn interval_ticks(&self) -> u64 {
        self.interval
    }

    /// `burst · T` in ticks: how far the TAT may run ahead of now.
    pub const fn capacity_ticks(&self) -> u64 {
        self.capacity
    }

    /// The transition: given the stored TAT, decide a request of `cost`
    /// permits at `now`, and return the TAT to store if it changes.
    ///
    /// `None` means nothing to write: every denial, and an admission of cost
    /// 0. A cost above the burst is denied with `retry_after` at its maximum;
    /// [`Limiter`](crate::Limiter) refuses it earlier with a
    /// [`CostError`](crate::CostError).
    #[inline(always)]
    pub fn transition(&self, tat: u64, now: Nanos, cost: u64) -> (Decision, Option<u64>) {
        let burst = self.quota.burst();
        let scale = self.scale as u8;
        // Saturating: past the end of representable time the limiter fails closed.
        let now_ticks = now.as_u64().saturating_mul(self.scale);
        let base = tat.max(now_ticks);
        let debt = base - now_ticks;
        // `None`: the request would end past the last representable tick.
        let wanted = cost
            .checked_mul(self.interval)
            .and_then(|charge| base.checked_add(charge));
        match wanted {
            Some(wanted) if wanted - now_ticks <= self.capacity => {
                let after = wanted - now_ticks;
                // What could be taken next: the bucket's room, and no more
                // than still ends before the last tick.
                let headroom = (self.capacity - after).min(u64::MAX - wanted);
                let reset = if self.never_full_again(wanted) {
                    u64::MAX
                } else {
                    after
                };
                let decision =
                    Decision::in_ticks(true, burst, headroom, self.interval, 0, reset, scale);
                (decision, (cost > 0).then_some(wanted))
            }
            _ if u64::MAX - base < self.interval => {
                // Closed: not one permit fits before the last tick, and
                // `base` only moves later. Nothing remains, and neither a
                // retry nor a reset ever comes.
                let never = u64::MAX;
                let decision = Decision::in_ticks(false, burst, 0, 1, never, never, scale);
                (decision, None)
            }
            _ => {
                let retry = match wanted {
                    Some(wanted)
                        if cost <= burst && self.fits_before_the_end(tat, wanted, cost) =>
                    {
                        // It fits once now' · scale ≥ wanted − capacity.
                        wanted - self.capacity - now_ticks
                    }
                    _ => u64::MAX,
                };
                let headroom = self.capacity.saturating_sub(debt).min(u64::MAX - base);
                let reset = if self.never_full_again(base) {
                    u64::MAX
                } else {
                    debt
                };
                let decision =
                    Decision::in_ticks(false, burst, headroom, self.interval, retry, reset, scale);
                (decision, None)
            }
        }
    }

    /// The most ticks a TAT may run ahead of now: the burst and
    /// [`DEBT_PERIODS`] periods of debt (the cap of a charge and of a carry).
    #[inline]
    fn debt_cap(&self) -> u128 {
        u128::from(self.capacity)
            + u128::from(DEBT_PERIODS) * u128::from(self.quota.limit()) * u128::from(self.interval)
    }

    /// The charge: `cost` permits recorded at `now` whether or not they fit.
    /// The TAT moves `cost · T` past `max(tat, now)`, as an admission would,
    /// even beyond `now + burst · T`: the excess is a debt that later
    /// requests wait out, exactly as if the permits had been taken one by
    /// one. The debt is capped at [`DEBT_PERIODS`] periods: the TAT never
    /// runs past `now + burst·T + DEBT_PERIODS · limit · T` (nor past the
    /// last representable tick); what does not fit is not recorded.
    /// Returns the TAT to store (`None`: nothing to write) and the permits
    /// recorded.
    #[inline]
    pub fn charge(&self, tat: u64, now: Nanos, cost: u64) -> (Option<u64>, u64) {
        let now_ticks = now.as_u64().saturating_mul(self.scale);
        let base = tat.max(now_ticks);
        let cap = (u128::from(now_ticks) + self.debt_cap()).min(u128::from(u64::MAX));
        let room = cap.saturating_sub(u128::from(base)) / u128::from(self.interval);
        let recorded = u64::try_from(room).unwrap_or(u64::MAX).min(cost);
        if recorded == 0 {
            return (None, 0);
        }
        // `base + recorded · T ≤ cap ≤ u64::MAX`.
        (Some(base + recorded * self.interval), recorded)
    }

    /// The refund: `permits` given back at `now`, never above full. The TAT
    /// moves back by `permits · T`, but not before `now` (a full bucket):
    /// `tat := max(now, tat − permits·T)`. `None` when there is nothing to
    /// give back (the bucket is full at `now`) or nothing to give.
    ///
    /// Never more generous than if the permits had not been taken: without
    /// them every TAT along the way would have been at least `permits · T`
    /// earlier or at `now`'s floor, since `max(x, t) + c` moves by at most
    /// what `x` moves.
    #[inline]
    pub fn refund(&self, tat: u64, now: Nanos, permits: u64) -> Option<u64> {
        let now_ticks = now.as_u64().saturating_mul(self.scale);
        if tat <= now_ticks || permits == 0 {
            return None;
        }
        Some(
            tat.saturating_sub(permits.saturating_mul(self.interval))
                .max(now_ticks),
        )
    }

    /// Whether a denied request ending at `wanted` ticks can ever be admitted:
    /// at the first whole nanosecond at which it fits (which, rounded up, may
    /// fall after the TAT) it must still end within the last tick.
    #[inline]
    fn fits_before_the_end(&self, tat: u64, wanted: u64, cost: u64) -> bool {
        if self.scale == 1 {
            // `wanted − capacity` is a whole nanosecond, and from there the
            // request ends at `wanted` itself.
            return true;
        }
        let earliest = (wanted - self.capacity).div_ceil(self.scale);
        let Some(earliest_ticks) = earliest.checked_mul(self.scale) else {
            return false;
        };
        tat.max(earliest_ticks)
            .checked_add(cost * self.interval)
            .is_some()
    }

    /// Whether a state whose TAT is `tat` ticks can never be full again: at
    /// the first whole nanosecond `t ≥ tat / scale`, a whole burst no longer
    /// ends before the last tick (`t · scale + burst · T > u64::MAX`), and
    /// later instants only leave less room. Then `reset_after` is "never".
    #[inline]
    fn never_full_again(&self, tat: u64) -> bool {
        // Far from the end (every limiter for 36 years): one comparison.
        if tat <= u64::MAX - self.capacity - self.scale {
            return false;
        }
        let full = tat.div_ceil(self.scale);
        full.checked_mul(self.scale)
            .and_then(|ticks| ticks.checked_add(self.capacity))
            .is_none()
    }

    /// `now` in ticks, saturating at the last representable tick.
    fn now_ticks(&self, now: Nanos) -> u128 {
        (u128::from(now.as_u64()) * u128::from(self.scale)).min(u128::from(u64::MAX))
    }
}

fn sat_u64(value: u128) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

pub(crate) fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl fmt::Debug for Gcra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gcra")
            .field("quota", &self.quota)
            .field("scale", &self.scale)
            .field("interval_ticks", &self.interval)
            .field("capacity_ticks", &self.capacity)
            .finish()
    }
}

impl sealed::Sealed for Gcra {}

impl Algorithm for Gcra {
    type Cell = AtomicU64;

    fn quota(&self) -> &Quota {
        &self.quota
    }

    fn capacity(&self) -> u64 {
        self.quota.burst()
    }

    fn new_cell(&self) -> AtomicU64 {
        AtomicU64::new(0)
    }

    // Always inlined, as `word_update` is (see there).
    #[inline(always)]
    fn check_cell(&self, cell: &AtomicU64, now: Nanos, cost: u64) -> Decision {
        store::word_update!(cell, |tat| self.transition(tat, now, cost))
    }

    #[inline(always)]
    fn check_cell_mut(&self, cell: &mut AtomicU64, now: Nanos, cost: u64) -> Decision {
        store::word_update_mut!(cell, |tat| self.transition(tat, now, cost))
    }

    #[inline]
    fn peek_cell(&self, cell: &AtomicU64, now: Nanos, cost: u64) -> Decision {
        self.transition(store::word_load(cell), now, cost).0
    }

    fn charge_cell(&self, cell: &AtomicU64, now: Nanos, cost: u64) -> u64 {
        apply::word_charge(cell, |tat| self.charge(tat, now, cost))
    }

    fn is_idle(&self, cell: &AtomicU64, now: Nanos) -> bool {
        u128::from(store::word_load(cell)) <= self.now_ticks(now)
    }

    fn refund_cell(&self, cell: &AtomicU64, now: Nanos, permits: u64) {
        apply::word_try_apply(cell, |tat| self.refund(tat, now, permits));
    }

    fn reset_cell(&self, cell: &AtomicU64) {
        apply::word_store(cell, 0);
    }

    /// Closed: a TAT at the last tick (see "The end of the ticks").
    fn take_cell(&self, cell: &AtomicU64) -> AtomicU64 {
        apply::word_take(cell, u64::MAX)
    }

    /// The debt (the TAT ahead of now) is rescaled to this quota's ticks,
    /// rounded up so that nothing taken is given back, and not capped at the
    /// new burst: a debt beyond it is waited out as a charge's is, so
    /// lowering and then raising a quota gives nothing back within the
    /// [debt cap](crate::algorithm#charges-debt-and-its-cap), which bounds
    /// it as it bounds a charge: the TAT at most `burst·T + DEBT_PERIODS ·
    /// limit · T` past now under this quota.
    fn carry_cell(&self, previous: &Gcra, cell: &AtomicU64, now: Nanos, carry: Carry) -> AtomicU64 {
        let tat = u128::from(store::word_load(cell));
        let debt = tat.saturating_sub(previous.now_ticks(now));
        // Debt in permits is debt / T: rescale it to this quota's ticks.
        let debt = match carry {
            Carry::Reset => 0,
            Carry::Keep => {
                (debt * u128::from(self.interval)).div_ceil(u128::from(previous.interval))
            }
            Carry::Proportional => {
                (debt * u128::from(self.capacity)).div_ceil(u128::from(previous.capacity))
            }
        }
        .min(self.debt_cap());
        let tat = if debt == 0 {
            0
        } else if tat == u128::from(u64::MAX) && carry != Carry::Reset {
            // Saturated: closed, whatever the new ticks.
            u64::MAX
        } else {
            // Saturating: a debt past the last tick closes the limiter.
            sat_u64(self.now_ticks(now) + debt)
        };
        AtomicU64::new(tat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn gcra(limit: u64, period_ns: u64, burst: u64) -> Gcra {
        let quota = Quota::new(limit, std::time::Duration::from_nanos(period_ns))
            .unwrap()
            .with_burst(burst)
            .unwrap();
        Gcra::new(quota).unwrap()
    }

    /// Runs requests of cost 1 at the given instants, returning the decisions.
    fn run(g: &Gcra, times: &[u64]) -> Vec<Decision> {
        let mut tat = 0;
        times
            .iter()
            .map(|&t| {
                let (d, next) = g.transition(tat, Nanos::new(t), 1);
                if let Some(next) = next {
                    tat = next;
                }
                d
            })
            .collect()
    }

    #[test]
    fn burst_then_one_per_interval() {
        let g = gcra(10, SEC, 3);
        let d = run(&g, &[0, 0, 0, 0]);
        assert_eq!(
            d.iter().map(|d| d.is_allowed()).collect::<Vec<_>>(),
            [true, true, true, false]
        );
        assert_eq!(d[0].remaining(), 2);
        assert_eq!(d[2].remaining(), 0);
        assert_eq!(d[2].reset_after().as_nanos(), 300_000_000);
        assert_eq!(d[3].retry_after().as_nanos(), 100_000_000);
    }

    #[test]
    fn retry_after_is_exact_to_the_nanosecond() {
        let g = gcra(3, SEC, 1);
        let (_, tat) = g.transition(0, Nanos::new(0), 1);
        let tat = tat.unwrap();
        let (denied, _) = g.transition(tat, Nanos::new(1), 1);
        // 1 s / 3 = 333_333_333.33 ns: admitted at 333_333_334, not before.
        assert_eq!(denied.retry_after().as_nanos(), 333_333_333);
        assert!(g.transition(tat, Nanos::new(333_333_333), 1).0.is_denied());
        assert!(g.transition(tat, Nanos::new(333_333_334), 1).0.is_allowed());
    }

    #[test]
    fn scale_is_exact_for_small_denominators_and_bounded_otherwise() {
        assert_eq!(
            (gcra(3, SEC, 1).scale(), gcra(3, SEC, 1).interval_ticks()),
            (3, SEC)
        );
        assert_eq!(gcra(100, SEC, 1).scale(), 1);
        // 10^10 per second: 0.1 ns per permit, exact with scale 10.
        let fast = gcra(10_000_000_000, SEC, 1);
        assert_eq!((fast.scale(), fast.interval_ticks()), (10, 1));
        // 999 per minute: rounded up, never down.
        let odd = gcra(999, 60 * SEC, 1);
        assert_eq!(odd.scale(), 16);
        assert!(odd.interval_ticks() as u128 * 999 >= 60 * SEC as u128 * 16);
    }

    #[test]
    fn rates_above_16_per_ns_are_refused() {
        let quota = Quota::new(17, std::time::Duration::from_nanos(1)).unwrap();
        assert!(matches!(Gcra::new(quota), Err(QuotaError::TooFast { .. })));
        let quota = Quota::new(16, std::time::Duration::from_nanos(1)).unwrap();
        assert!(Gcra::new(quota).is_ok());
    }

    #[test]
    fn huge_burst_times_interval_is_an_overflow_error() {
        let quota = Quota::new(1, std::time::Duration::from_secs(365 * 86_400))
            .unwrap()
            .with_burst(1_000)
            .unwrap();
        assert!(matches!(Gcra::new(quota), Err(QuotaError::Overflow { .. })));
    }

    #[test]
    fn cost_zero_never_writes() {
        let g = gcra(10, SEC, 10);
        let (d, next) = g.transition(0, Nanos::new(5), 0);
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 10);
        assert_eq!(next, None);
    }

    #[test]
    fn clock_going_backwards_never_recredits() {
        let g = gcra(10, SEC, 2);
        let (_, tat) = g.transition(0, Nanos::new(10_000 * SEC), 2);
        let tat = tat.unwrap();
        for back in [1, SEC, 3_600 * SEC] {
            let (d, next) = g.transition(tat, Nanos::new(10_000 * SEC - back), 1);
            assert!(d.is_denied(), "went back {back} ns");
            assert_eq!(next, None);
            assert!(d.retry_after().as_nanos() > 100_000_000);
        }
    }

    #[test]
    fn end_of_time_fails_closed() {
        let g = gcra(1, SEC, 1);
        let (first, tat) = g.transition(0, Nanos::MAX, 1);
        // The very last instant can still admit what fits before u64::MAX ticks...
        assert!(first.is_denied() || tat.is_some());
        let mut tat = tat.unwrap_or(0);
        let mut admitted = u64::from(first.is_allowed());
        for _ in 0..10 {
            let (d, next) = g.transition(tat, Nanos::MAX, 1);
            admitted += u64::from(d.is_allowed());
            tat = next.unwrap_or(tat);
        }
        // ...but never more than the burst.
        assert!(admitted <= 1);
    }
}
