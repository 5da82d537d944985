//! [`StripedLimiter`]: one very hot GCRA limiter split over several
//! cache-padded words (Java's `LongAdder` idea), for one direct limiter
//! admitting from several cores at once.
//!
//! # The model
//!
//! A [`Limiter`](crate::Limiter) keeps its state in one word, so threads on
//! several cores take turns on one cache line. A striped limiter splits the
//! quota into `n` independent [`Gcra`] meters ("stripes"), each in its own
//! cache line. Stripe `i` runs `limit / n` permits per period and a burst
//! of `burst / n` (one more of each for the first `limit % n`, `burst % n`
//! stripes): the stripes add up exactly to the quota (10 per second, burst
//! 10, over 3 stripes: 4 + 3 + 3 of each). So `n` is at most
//! `min(limit, burst)` and [`MAX_STRIPES`] (1,024).
//!
//! Each thread takes a round-robin ticket on its first check and works on
//! stripe `ticket % n` (stable, so its line stays in its core's cache;
//! [`check_n_from`](StripedLimiter::check_n_from) picks the first stripe
//! instead). A check tries that stripe, then the others in order, and
//! admits on the first that admits; only if every stripe denies is the
//! request denied, and a denial writes nothing.
//!
//! A [`Decision`] reads every stripe (`remaining` is their sum, not a
//! snapshot; a denial's `retry_after` is the earliest any stripe admits);
//! [`admit`](StripedLimiter::admit) takes the same permits and reads no
//! other stripe: the fast path.
//!
//! # Guarantee
//!
//! **No over-admission: any interval of length `t` admits at most
//! `burst + rate·t` permits in all**, the bound of an unstriped [`Gcra`],
//! under any number of threads: each stripe is a [`Gcra`] on its own word
//! (the compare-and-swap loop of a [`Limiter`](crate::Limiter), which the
//! loom models in `crates/loom/tests/it/loom.rs` check; stripes share no state) and the
//! split is exact (a stripe's rate may round down to whole ticks, never
//! up). Checked over every interval of several threads' recorded
//! admissions (`tests/it/striped.rs`).
//!
//! What it gives up: it is **not linearizable** (a request denied by every
//! stripe was denied by each at a different instant), **a cost must fit in
//! one stripe** (at most `⌈burst / n⌉`, else [`CostError`]), and
//! `remaining` is approximate under concurrency. Prefer a
//! [`Limiter`](crate::Limiter) unless one limiter is hot on several cores
//! and checked with `admit`: there it ran 3.0× a `Limiter`'s `check` on 2
//! threads; `check` gained 1.1–1.45×, lost on one thread, and keyed
//! limiters gain nothing. The figures, and each rule in full:
//! `crates/core/docs/striped.md`.
//!
//! # Example
//!
//! ```
//! use tollgate::{Quota, StripedLimiter};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // 10,000 per second, burst 1,000, over 4 stripes of 2,500/s and 250 each.
//! let hot = StripedLimiter::new(Quota::per_second(10_000)?.with_burst(1_000)?, 4)?;
//! assert!(hot.admit()); // the fast path: yes or no
//! assert!(hot.check().is_allowed()); // a full `Decision`, reading every stripe
//! # Ok(())
//! # }
//! ```

use std::cell::Cell;
use std::fmt;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::algorithm::{Algorithm, Gcra};
use crate::clock::{Clock, Nanos, QuantaClock};
use crate::decision::{CostError, Decision};
use crate::quota::{Quota, QuotaError};
use crate::store;
use crate::sync::{Arc, AtomicU64};

const NAME: &str = "striped gcra";
/// The most stripes a limiter may have: far more than cores, and 128 KiB
/// of padded words.
pub const MAX_STRIPES: usize = 1_024;

/// A GCRA limiter striped over several cache-padded words for one very hot
/// limiter: see the [module docs](self) for the split, the guarantee, and
/// what it gives up.
///
/// `Send + Sync`, and `Clone` shares the state: hand a clone to every
/// thread.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, Quota, StripedLimiter};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let clock = ManualClock::new();
/// // 10 per second, burst 10, over 3 stripes of 4 + 3 + 3.
/// let limiter = StripedLimiter::with_clock(Quota::per_second(10)?, 3, clock.clone())?;
///
/// // One thread can take the whole burst: its stripe first, then the others.
/// for _ in 0..10 {
///     assert!(limiter.check().is_allowed());
/// }
/// let denied = limiter.check();
/// assert!(denied.is_denied());
/// // The first stripe back is a 4-per-second one.
/// assert_eq!(denied.retry_after(), Duration::from_millis(250));
///
/// // A request must fit in one stripe: at most 4 here.
/// assert!(limiter.check_n(5).is_err());
/// # Ok(())
/// # }
/// ```
pub struct StripedLimiter<C: Clock = QuantaClock> {
    shared: Arc<Shared<C>>,
}

struct Shared<C> {
    quota: Quota,
    clock: C,
    /// `⌊2^64 / stripes⌋ + 1` (wrapping): a thread's stripe is its ticket
    /// modulo the number of stripes, by [`fastmod`] without a division.
    modulus: u64,
    /// Padded: each stripe's word is written by its own thread; its
    /// (read-only) parameters share its line, as a check reads both.
    stripes: Box<[CachePadded<Stripe>]>,
}

struct Stripe {
    gcra: Gcra,
    /// The stripe's theoretical arrival time, as in a `Limiter<Gcra>`.
    cell: AtomicU64,
}

impl Stripe {
    /// Decides `cost` at `now` on this stripe, recording it if `record`.
    #[inline]
    fn decide(&self, now: Nanos, cost: u64, record: bool) -> Decision {
        if record {
            // `word_update`'s Relaxed CAS loop: the word is the whole state
            // of this stripe, and each stripe's bound needs only the
            // modification order of its own word.
            store::word_update!(&self.cell, |tat| self.gcra.transition(tat, now, cost))
        } else {
            // Relaxed load (`word_load`): as above.
            self.gcra
                .transition(store::word_load(&self.cell), now, cost)
                .0
        }
    }
}

impl StripedLimiter<QuantaClock> {
    /// A limiter of `quota` split over `stripes` stripes, on the default
    /// clock, [`QuantaClock`] (as [`Limiter::new`](crate::Limiter::new));
    /// for `Instant` itself, [`with_clock`](StripedLimiter::with_clock) and
    /// [`MonotonicClock`](crate::MonotonicClock).
    ///
    /// # Errors
    ///
    /// As [`with_clock`](StripedLimiter::with_clock).
    pub fn new(quota: Quota, stripes: usize) -> Result<StripedLimiter, QuotaError> {
        StripedLimiter::with_clock(quota, stripes, QuantaClock::new())
    }
}

impl<C: Clock> StripedLimiter<C> {
    /// A limiter of `quota` split over `stripes` stripes, on `clock`.
    ///
    /// One stripe per core that admits at once is the intended size; more
    /// stripes only cut the largest request (`⌈burst / stripes⌉`).
    ///
    /// # Errors
    ///
    /// [`QuotaError::InvalidParameter`] for 0 stripes;
    /// [`QuotaError::TooLarge`] for more stripes than `min(limit, burst)`
    /// (a stripe would hold no permit) or [`MAX_STRIPES`]; and any error [`Gcra::new`] returns
    /// for a stripe's share of the quota.
    pub fn with_clock(
        quota: Quota,
        stripes: usize,
        clock: C,
    ) -> Result<StripedLimiter<C>, QuotaError> {
        if stripes == 0 {
            return Err(QuotaError::InvalidParameter {
                algorithm: NAME,
                what: "the number of stripes must be at least 1",
            });
        }
        let most = quota.limit().min(quota.burst()).min(MAX_STRIPES as u64);
        let n = match u64::try_from(stripes) {
            Ok(n) if n <= most => n,
            _ => {
                return Err(QuotaError::TooLarge {
                    algorithm: NAME,
                    max: most,
                    what: "the number of stripes (at most 1,024, and each needs at least one permit of the limit and of the burst)",
                });
            }
        };
        let share = |total: u64, i: u64| total / n + u64::from(i < total % n);
        let stripes = (0..n)
            .map(|i| {
                let part = Quota::new(share(quota.limit(), i), quota.period())?
                    .with_burst(share(quota.burst(), i))?;
                Ok(CachePadded::new(Stripe {
                    gcra: Gcra::new(part)?,
                    cell: AtomicU64::new(0),
                }))
            })
            .collect::<Result<Box<[_]>, QuotaError>>()?;
        Ok(StripedLimiter {
            shared: Arc::new(Shared {
                quota,
                clock,
                modulus: (u64::MAX / n).wrapping_add(1),
                stripes,
            }),
        })
    }

    /// Takes one permit if a stripe has it now: the calling thread's
    /// stripe first, then the others in order.
    pub fn check(&self) -> Decision {
        // Every stripe's burst is at least 1.
        self.decide(self.home_stripe(), 1, true)
    }

    /// Takes `cost` permits at once from one stripe if one has them all
    /// now: the calling thread's stripe first, then the others in order;
    /// takes none otherwise. A cost of 0 only looks.
    ///
    /// # Errors
    ///
    /// [`CostError`] if `cost` is above the largest stripe's burst
    /// (`⌈burst / stripes⌉`, the [`capacity`](StripedLimiter::capacity)):
    /// no stripe could ever admit it.
    pub fn check_n(&self, cost: u64) -> Result<Decision, CostError> {
        self.within_capacity(cost)?;
        Ok(self.decide(self.home_stripe(), cost, true))
    }

    /// As [`check_n`](StripedLimiter::check_n), starting at stripe
    /// `first % stripes` instead of the calling thread's: for a caller
    /// that knows a better affinity (a runtime's worker index), or a test
    /// that needs a known order.
    ///
    /// # Errors
    ///
    /// As [`check_n`](StripedLimiter::check_n).
    pub fn check_n_from(&self, first: usize, cost: u64) -> Result<Decision, CostError> {
        self.within_capacity(cost)?;
        Ok(self.decide(first % self.shared.stripes.len(), cost, true))
    }

    /// Takes one permit as [`check`](StripedLimiter::check) does, and
    /// answers only whether it did: without the [`Decision`], whose
    /// `remaining` and `reset_after` read every other stripe after an
    /// admission. Those lines are being written by their own threads, so
    /// each read is a cache miss; on the 2-core machine of `BENCHMARKS.md`
    /// it took most of striping's gain (see "When to use it").
    pub fn admit(&self) -> bool {
        self.admit_from(self.home_stripe(), 1)
    }

    /// Takes `cost` permits as [`check_n`](StripedLimiter::check_n) does,
    /// and answers only whether it did (see [`admit`](StripedLimiter::admit)).
    ///
    /// # Errors
    ///
    /// As [`check_n`](StripedLimiter::check_n).
    pub fn admit_n(&self, cost: u64) -> Result<bool, CostError> {
        self.within_capacity(cost)?;
        Ok(self.admit_from(self.home_stripe(), cost))
    }

    /// What [`check`](StripedLimiter::check) would answer now, without
    /// taking anything.
    pub fn peek(&self) -> Decision {
        self.decide(self.home_stripe(), 1, false)
    }

    /// What [`check_n`](StripedLimiter::check_n) would answer now, without
    /// taking anything.
    ///
    /// # Errors
    ///
    /// As [`check_n`](StripedLimiter::check_n).
    pub fn peek_n(&self, cost: u64) -> Result<Decision, CostError> {
        self.within_capacity(cost)?;
        Ok(self.decide(self.home_stripe(), cost, false))
    }

    /// The quota, as given (before the split).
    pub fn quota(&self) -> &Quota {
        &self.shared.quota
    }

    /// The number of stripes.
    pub fn stripes(&self) -> usize {
        self.shared.stripes.len()
    }

    /// Stripe `i`'s share of the quota, as the [`Gcra`] it runs; `None`
    /// past the last stripe.
    pub fn stripe(&self, i: usize) -> Option<&Gcra> {
        self.shared.stripes.get(i).map(|stripe| &stripe.gcra)
    }

    /// The most one request may cost: the largest stripe's burst,
    /// `⌈burst / stripes⌉`.
    pub fn capacity(&self) -> u64 {
        // The first stripe's burst is the largest (`⌈burst / n⌉`).
        self.shared.stripes[0].gcra.capacity()
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.shared.clock
    }

    /// The stripe the calling thread tries first in this limiter (its
    /// ticket modulo the number of stripes; the same on every call from
    /// the same thread).
    pub fn home_stripe(&self) -> usize {
        let shared = &*self.shared;
        // `stripes.len() ≤ MAX_STRIPES` fits in a `u32`.
        fastmod(ticket(), shared.modulus, shared.stripes.len() as u32) as usize
    }

    fn within_capacity(&self, cost: u64) -> Result<(), CostError> {
        let capacity = self.capacity();
        if cost > capacity {
            return Err(CostError::new(cost, capacity));
        }
        Ok(())
    }

    /// The stripes in the order a request starting at `first` tries them:
    /// `first`, `first + 1`, … wrapping at the last (without a division).
    fn order(&self, first: usize) -> impl Iterator<Item = usize> {
        let n = self.shared.stripes.len();
        (first..n).chain(0..first)
    }

    /// Tries stripe `first`, then the others in order; admits on the first
    /// that admits.
    fn decide(&self, first: usize, cost: u64, record: bool) -> Decision {
        let shared = &*self.shared;
        let now = shared.clock.now();
        let mut retry = u64::MAX;
        let mut reset = 0;
        let mut largest = 0;
        for i in self.order(first) {
            let decision = shared.stripes[i].decide(now, cost, record);
            if decision.is_allowed() {
                return self.admitted(i, now, decision);
            }
            retry = retry.min(nanos(decision.retry_after()));
            reset = reset.max(nanos(decision.reset_after()));
            largest = largest.max(decision.remaining());
        }
        // The earliest any stripe can admit the same request; as
        // `remaining`, the largest request one stripe would admit now
        // (below `cost`: the permits left may be spread over stripes).
        Decision::deny(shared.quota.burst(), largest, retry, reset)
    }

    /// As [`decide`](StripedLimiter::decide) recording, without the decision.
    fn admit_from(&self, first: usize, cost: u64) -> bool {
        let shared = &*self.shared;
        let now = shared.clock.now();
        self.order(first)
            .any(|i| shared.stripes[i].decide(now, cost, true).is_allowed())
    }

    /// The admission by stripe `admitting` (its own `decision`), with
    /// `remaining` summed and `reset_after` the latest over every stripe,
    /// the others read one after the other, after it.
    fn admitted(&self, admitting: usize, now: Nanos, decision: Decision) -> Decision {
        let shared = &*self.shared;
        let mut remaining = decision.remaining();
        let mut reset = nanos(decision.reset_after());
        for (i, stripe) in shared.stripes.iter().enumerate() {
            if i != admitting {
                let left = stripe.decide(now, 0, false);
                remaining += left.remaining();
                reset = reset.max(nanos(left.reset_after()));
            }
        }
        Decision::allow(shared.quota.burst(), remaining, reset)
    }
}

/// A duration from a decision, back to nanoseconds ("never" stays
/// `u64::MAX`).
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// `a % d` by two multiplications, given `m = ⌊2^64 / d⌋ + 1` (wrapping
/// to 0 for `d = 1`): Lemire, Kaser and Kurz, "Faster remainder by direct
/// computation" (2019), exact for every 32-bit `a` and `d ≥ 1`. A check
/// runs it instead of a 64-bit division, which costs more than the rest
/// of the stripe selection on the CPUs measured.
#[inline]
fn fastmod(a: u32, m: u64, d: u32) -> u32 {
    let low = m.wrapping_mul(u64::from(a));
    ((u128::from(low) * u128::from(d)) >> 64) as u32
}

/// The calling thread's ticket: drawn round robin from one global counter on
/// its first use, then kept. A limiter of `n` stripes uses `ticket % n`.
/// 32 bits: past 2^32 threads the round robin wraps, and any ticket is a
/// valid one.
fn ticket() -> u32 {
    // `std`'s atomic even under loom: a `static` needs a const constructor,
    // and which stripe a thread starts at never matters to the guarantee.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static TICKET: Cell<Option<u32>> = const { Cell::new(None) };
    }
    TICKET.with(|ticket| {
        ticket.get().unwrap_or_else(|| {
            // Relaxed: a counter handing out distinct numbers; nothing is
            // published through it.
            let drawn = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) as u32;
            ticket.set(Some(drawn));
            drawn
        })
    })
}

impl<C: Clock> Clone for StripedLimiter<C> {
    fn clone(&self) -> StripedLimiter<C> {
        StripedLimiter {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<C: Clock> fmt::Debug for StripedLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripedLimiter")
            .field("quota", &self.shared.quota)
            .field("stripes", &self.shared.stripes.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, ManualClock};

    #[test]
    fn a_thread_keeps_its_ticket() {
        let first = ticket();
        assert_eq!(ticket(), first);
        let other = std::thread::spawn(ticket).join().unwrap();
        assert_ne!(other, first);
    }

    #[test]
    fn fastmod_is_the_remainder() {
        for d in [1u32, 2, 3, 4, 5, 7, 10, 64, 1_000, 1_023, 1_024] {
            let m = (u64::MAX / u64::from(d)).wrapping_add(1);
            for a in (0..5_000u32).chain([u32::MAX - 1, u32::MAX, 1 << 31, 123_456_789]) {
                assert_eq!(fastmod(a, m, d), a % d, "{a} % {d}");
            }
        }
    }

    #[test]
    fn the_split_adds_up_to_the_quota() {
        let quota = Quota::per_second(10).unwrap().with_burst(7).unwrap();
        let limiter = StripedLimiter::with_clock(quota, 3, ManualClock::new()).unwrap();
        let parts: Vec<(u64, u64)> = (0..3)
            .map(|i| {
                let q = limiter.stripe(i).unwrap().quota();
                (q.limit(), q.burst())
            })
            .collect();
        assert_eq!(parts, [(4, 3), (3, 2), (3, 2)]);
        assert_eq!(limiter.capacity(), 3);
        assert!(limiter.stripe(3).is_none());
    }
}
