//! The shaper: the leaky bucket as a queue. Callers are released spaced at
//! `1/rate` after the burst, in the order they arrived, and one who would
//! wait longer than `max_delay` is refused at once.
//!
//! # Guarantee
//!
//! The *scheduled* release instants obey the GCRA bound of the shaper's quota:
//! **any interval of length `t` holds at most `burst + rate·t` scheduled
//! permits**, and each caller is released at the earliest instant that keeps
//! it (see [`Gcra`]). Waiters are released in FIFO order (no
//! barging: a later caller is never scheduled before an earlier one). A caller
//! never runs before its scheduled instant; it runs late by the timer's
//! resolution and the scheduler's delay (tokio's timer: up to 1 ms).
//!
//! # The schedule
//!
//! One mutex guards a GCRA state (the TAT after every released permit) and the
//! queue of pending reservations, each with its arrival, cost, scheduled
//! release and the TAT after it. A reservation's release is
//! [`slot`]: the earliest instant at or after its arrival at which the
//! GCRA admits it on top of the reservation before it. The TAT can therefore
//! be replayed from any point of the queue, which is what makes cancellation
//! exact.
//!
//! # Cancelling and settling
//!
//! - **Cancel before the release** (an explicit [`Reservation::cancel`], or
//!   dropping the reservation or the waiting future): the reservation leaves
//!   the queue and every later one is rescheduled as if it had never been
//!   made: exactly the permits it took come back, and later waiters move
//!   earlier. Subtracting its cost from the TAT alone would be unsafe: later
//!   waiters were scheduled on top of it.
//! - **Cancel or settle for less after the release**: the unused permits come
//!   back as far as the permits scheduled after it allow. The refund is exact
//!   when nothing was reserved after it, and otherwise never more than exact:
//!   the TAT comes down by the refund but not below `now + T·(permits reserved
//!   since)`, a bound on what those later permits would have charged anyway.
//! - **Settle for more** ([`Reservation::settle`] with a larger cost): the
//!   extra permits are a debt charged to the *next* callers, who are
//!   scheduled that much later; callers already waiting keep their slots.
//!
//! # Timers and high rates
//!
//! Async waiters do not each arm a timer. One of them, the *driver*, sleeps
//! until the head of the queue is due; when it wakes it releases every
//! reservation whose instant has passed and wakes those waiters, then hands
//! the timer to the next one. At rates above tokio's 1 ms timer resolution a
//! wake-up releases a whole millisecond's worth of callers together, each
//! knowing its exact scheduled instant, and the rate over any longer run stays
//! exact because the schedule is absolute, never "sleep 1/rate after the last
//! one". Blocking waiters sleep on a condition variable until their own
//! instant.
//!
//! # Limits
//!
//! `max_delay` (default: the quota's period) bounds how long a caller may be
//! scheduled ahead; `max_waiters` (default 65,536) bounds the queue. Both are
//! refused at once with a [`Refusal`], changing nothing. Each pending
//! reservation takes 64 bytes in the queue.

use std::collections::VecDeque;
use std::fmt;
use std::task::Waker;
use std::time::{Duration, Instant};

use crate::algorithm::{Algorithm, Gcra};
use crate::clock::{Clock, Nanos, QuantaClock};
use crate::decision::{CostError, Decision};
use crate::quota::{Quota, QuotaError};
use crate::sync::{Arc, Condvar, Mutex, MutexGuard, lock};

/// The default cap on pending reservations.
pub const DEFAULT_MAX_WAITERS: usize = 65_536;

/// A leaky bucket as a queue: see the [module docs](self).
///
/// Clones share one schedule.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, Nanos, Quota, Shaper};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let clock = ManualClock::new();
/// // 10 per second, no burst: one every 100 ms; nobody waits over 250 ms.
/// let shaper = Shaper::builder(Quota::per_second(10)?.with_burst(1)?)
///     .max_delay(Duration::from_millis(250))
///     .clock(clock.clone())
///     .build()?;
///
/// let first = shaper.reserve(1)?;
/// let second = shaper.reserve(1)?;
/// let third = shaper.reserve(1)?;
/// assert_eq!(first.ready_at(), Nanos::ZERO);
/// assert_eq!(second.ready_at(), Nanos::new(100_000_000));
/// assert_eq!(third.ready_at(), Nanos::new(200_000_000));
/// // A fourth would wait 300 ms: refused at once, nothing taken.
/// assert!(shaper.reserve(1).is_err());
///
/// // The second gives up: the third moves into its slot.
/// second.cancel();
/// assert_eq!(third.ready_at(), Nanos::new(100_000_000));
/// # Ok(())
/// # }
/// ```
pub struct Shaper<C: Clock = QuantaClock> {
    shared: Arc<Shared<C>>,
}

struct Shared<C> {
    gcra: Gcra,
    max_delay: u64,
    max_waiters: usize,
    clock: C,
    schedule: Mutex<Schedule>,
    /// Blocking waiters wait here; notified when releases move earlier.
    moved: Condvar,
}

/// Builds a [`Shaper`]; see [`Shaper::builder`].
#[derive(Debug)]
pub struct ShaperBuilder<C> {
    quota: Quota,
    max_delay: Duration,
    max_waiters: usize,
    clock: C,
}

/// Why a caller was not scheduled. Nothing was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The cost is above the burst: no amount of waiting would admit it.
    Cost(CostError),
    /// The caller would wait longer than `max_delay`.
    TooLong {
        /// How long the caller would have waited.
        wait: Duration,
        /// The shaper's limit.
        max_delay: Duration,
    },
    /// `max_waiters` reservations are already pending.
    Full {
        /// The shaper's limit.
        max_waiters: usize,
    },
    /// The release would fall past the last instant the clock can represent.
    EndOfTime,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Cost(error) => error.fmt(f),
            Refusal::TooLong { wait, max_delay } => write!(
                f,
                "the caller would wait {wait:?}, more than the shaper's max_delay of {max_delay:?}"
            ),
            Refusal::Full { max_waiters } => {
                write!(f, "the shaper's queue is full ({max_waiters} waiters)")
            }
            Refusal::EndOfTime => f.write_str("the release would fall past the end of the clock"),
        }
    }
}

impl std::error::Error for Refusal {}

/// The queue and the GCRA state, all in ns and ticks of the shaper's GCRA.
#[derive(Default)]
struct Schedule {
    /// The TAT (ticks) after every released reservation.
    released_tat: u64,
    /// Debt (ticks) owed by the next reservation to be made.
    debt: u64,
    pending: VecDeque<Pending>,
    next_id: u64,
    /// Permits ever reserved, for the refund bound after a release.
    reserved_total: u64,
    /// The async waiter that owns the timer, if any.
    driver: Option<u64>,
    /// `(id, release)` of reservations released after a replay moved them,
    /// whose handles have not yet read the instant they were given; by id.
    /// Each handle removes its own entry when it is used or dropped.
    moved_released: Vec<(u64, u64)>,
}

struct Pending {
    id: u64,
    cost: u64,
    /// When it was asked for (ns): it is never released earlier.
    arrival: u64,
    /// Debt (ticks) charged before it, settled by an earlier reservation.
    debt: u64,
    /// Its scheduled release (ns).
    release: u64,
    /// The TAT (ticks) after it.
    tat: u64,
    /// Whether a replay changed `release` since its handle last read it.
    moved: bool,
    waker: Option<Waker>,
}

/// The pure transition: the earliest instant (ns) at or after `arrival` at
/// which GCRA admits `cost` permits on top of `tat`, and the TAT after them.
/// `None` past the end of representable time.
///
/// Admission at `s` means `max(tat, s·scale) + cost·T − s·scale ≤ burst·T`,
/// the condition of [`Gcra::transition`]: for `cost ≤ burst` it holds exactly
/// from `s = ⌈(tat + cost·T − burst·T) / scale⌉` on.
pub fn slot(gcra: &Gcra, tat: u64, arrival: Nanos, cost: u64) -> Option<(Nanos, u64)> {
    let scale = gcra.scale();
    let charge = cost.checked_mul(gcra.interval_ticks())?;
    let need = tat
        .checked_add(charge)?
        .saturating_sub(gcra.capacity_ticks());
    let release = arrival.as_u64().max(need.div_ceil(scale));
    let tat_after = tat.max(release.checked_mul(scale)?).checked_add(charge)?;
    Some((Nanos::new(release), tat_after))
}

impl Shaper<QuantaClock> {
    /// A shaper for `quota` with the default limits, on the default clock,
    /// [`QuantaClock`] (as [`Limiter::new`](crate::Limiter::new)): for
    /// `Instant` itself, [`ShaperBuilder::clock`] with [`MonotonicClock`](crate::MonotonicClock).
    ///
    /// # Errors
    ///
    /// As [`Gcra::new`].
    pub fn new(quota: Quota) -> Result<Shaper<QuantaClock>, QuotaError> {
        Shaper::builder(quota).build()
    }

    /// Starts building a shaper for `quota`: `limit` per `period` released
    /// evenly, up to `burst` at once.
    pub fn builder(quota: Quota) -> ShaperBuilder<QuantaClock> {
        ShaperBuilder {
            max_delay: quota.period(),
            quota,
            max_waiters: DEFAULT_MAX_WAITERS,
            clock: QuantaClock::new(),
        }
    }
}

impl<C: Clock> ShaperBuilder<C> {
    /// Refuses at once a caller who would wait longer than `max_delay`
    /// (default: the quota's period). `Duration::ZERO` admits only callers
    /// who need not wait: the shaper then behaves as a plain limiter.
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = max_delay;
        self
    }

    /// Refuses at once a caller who would have to wait while `max_waiters`
    /// reservations are already pending (default [`DEFAULT_MAX_WAITERS`]).
    pub fn max_waiters(mut self, max_waiters: usize) -> Self {
        self.max_waiters = max_waiters;
        self
    }

    /// Uses `clock` instead of the default clock.
    pub fn clock<D: Clock>(self, clock: D) -> ShaperBuilder<D> {
        ShaperBuilder {
            quota: self.quota,
            max_delay: self.max_delay,
            max_waiters: self.max_waiters,
            clock,
        }
    }

    /// The shaper.
    ///
    /// # Errors
    ///
    /// As [`Gcra::new`].
    pub fn build(self) -> Result<Shaper<C>, QuotaError> {
        let gcra = Gcra::new(self.quota)?;
        Ok(Shaper {
            shared: Arc::new(Shared {
                gcra,
                max_delay: crate::clock::saturating_nanos(self.max_delay),
                max_waiters: self.max_waiters,
                clock: self.clock,
                schedule: Mutex::new(Schedule::default()),
                moved: Condvar::new(),
            }),
        })
    }
}

impl<C: Clock> Shaper<C> {
    /// Schedules `cost` permits and returns at once with the instant they
    /// will be ready, or refuses at once, taking nothing.
    ///
    /// The permits are taken at [`Reservation::ready_at`]; dropping or
    /// [cancelling](Reservation::cancel) the reservation before then gives
    /// them back exactly. After it, [`Reservation::settle`] adjusts the charge.
    ///
    /// # Errors
    ///
    /// A [`Refusal`]: the cost is above the burst, the wait would exceed
    /// `max_delay`, the queue is full, or the clock would overflow.
    pub fn reserve(&self, cost: u64) -> Result<Reservation<C>, Refusal> {
        let shared = &*self.shared;
        let burst = shared.gcra.quota().burst();
        if cost > burst {
            return Err(Refusal::Cost(CostError::new(cost, burst)));
        }
        let now = shared.clock.now();
        let mut schedule = lock(&shared.schedule);
        let woken = schedule.release_due(now);
        let tail = schedule.tail_tat().checked_add(schedule.debt);
        let (release, tat) = tail
            .and_then(|tail| slot(&shared.gcra, tail, now, cost))
            .ok_or(Refusal::EndOfTime)?;
        let wait = release.as_u64() - now.as_u64();
        if wait > shared.max_delay {
            drop(schedule);
            wake_all(woken);
            return Err(Refusal::TooLong {
                wait: Duration::from_nanos(wait),
                max_delay: Duration::from_nanos(shared.max_delay),
            });
        }
        if wait > 0 && schedule.pending.len() >= shared.max_waiters {
            drop(schedule);
            wake_all(woken);
            return Err(Refusal::Full {
                max_waiters: shared.max_waiters,
            });
        }
        let id = schedule.next_id;
        schedule.next_id += 1;
        schedule.reserved_total = schedule.reserved_total.saturating_add(cost);
        let reserved_after = schedule.reserved_total;
        let debt = std::mem::take(&mut schedule.debt);
        if wait == 0 {
            // Due now: after `release_due`, nothing is pending, so it is
            // released on the spot.
            schedule.released_tat = tat;
        } else {
            schedule.pending.push_back(Pending {
                id,
                cost,
                arrival: now.as_u64(),
                debt,
                release: release.as_u64(),
                tat,
                moved: false,
                waker: None,
            });
        }
        drop(schedule);
        wake_all(woken);
        Ok(Reservation {
            shaper: self.clone(),
            id,
            cost,
            reserved_after,
            ready_at: release,
            state: if wait == 0 {
                Held::Released
            } else {
                Held::Pending
            },
        })
    }

    /// Schedules `cost` permits and blocks the thread until they are ready.
    /// Returns the scheduled instant.
    ///
    /// # Errors
    ///
    /// As [`reserve`](Shaper::reserve), at once.
    pub fn acquire(&self, cost: u64) -> Result<Nanos, Refusal> {
        let mut reservation = self.reserve(cost)?;
        Ok(reservation.wait())
    }

    /// What a reservation of `cost` would face now, taking nothing: allowed
    /// if it would not wait, else denied with the wait as `retry_after`
    /// (whether or not that wait is within `max_delay`); `remaining` and
    /// `reset_after` as for a [`Gcra`] limiter whose state is the schedule's
    /// last reservation.
    ///
    /// # Errors
    ///
    /// [`CostError`] if `cost` is above the burst.
    pub fn peek_n(&self, cost: u64) -> Result<Decision, CostError> {
        let shared = &*self.shared;
        let burst = shared.gcra.quota().burst();
        if cost > burst {
            return Err(CostError::new(cost, burst));
        }
        let now = shared.clock.now();
        let mut schedule = lock(&shared.schedule);
        let woken = schedule.release_due(now);
        let tail = schedule.tail_tat().saturating_add(schedule.debt);
        drop(schedule);
        wake_all(woken);
        Ok(shared.gcra.transition(tail, now, cost).0)
    }

    /// Reservations waiting for their instant.
    pub fn waiters(&self) -> usize {
        lock(&self.shared.schedule).pending.len()
    }

    /// The quota.
    pub fn quota(&self) -> &Quota {
        self.shared.gcra.quota()
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.shared.clock
    }

    /// Releases what is due, then where reservation `id` stands.
    fn lookup(&self, id: u64) -> Standing {
        let shared = &*self.shared;
        let mut schedule = lock(&shared.schedule);
        let woken = schedule.release_due(shared.clock.now());
        let standing = schedule.standing(id);
        drop(schedule);
        wake_all(woken);
        standing
    }

    /// Forgets the record of reservation `id`'s release, once its handle
    /// no longer needs it.
    fn forget(&self, id: u64) {
        let mut schedule = lock(&self.shared.schedule);
        if let Ok(at) = schedule
            .moved_released
            .binary_search_by_key(&id, |&(id, _)| id)
        {
            schedule.moved_released.remove(at);
        }
    }

    /// Gives back what reservation `id` (of `cost`, `reserved_after` permits
    /// reserved when it was made) no longer needs: all of it if `actual` is
    /// `None`, else `cost − actual`, or charges `actual − cost` more. Returns
    /// the permits given back, rounded down.
    fn adjust(&self, id: u64, cost: u64, reserved_after: u64, actual: Option<u64>) -> u64 {
        let shared = &*self.shared;
        let interval = shared.gcra.interval_ticks();
        let now = shared.clock.now();
        let mut schedule = lock(&shared.schedule);
        let mut woken = schedule.release_due(now);
        let refunded = match (schedule.find(id), actual) {
            (_, Some(actual)) if actual > cost => {
                // A debt for the next reservation: callers already waiting
                // keep their slots.
                let extra = (actual - cost).saturating_mul(interval);
                if schedule.pending.is_empty() {
                    schedule.released_tat = schedule.released_tat.saturating_add(extra);
                } else {
                    schedule.debt = schedule.debt.saturating_add(extra);
                }
                0
            }
            (Some(at), actual) => {
                // Still pending: reschedule everything from it on, exactly.
                match actual {
                    Some(actual) => schedule.pending[at].cost = actual,
                    None => {
                        if let Some(entry) = schedule.pending.remove(at) {
                            // A debt it carried passes to the next one.
                            match schedule.pending.get_mut(at) {
                                Some(next) => next.debt = next.debt.saturating_add(entry.debt),
                                None => schedule.debt = schedule.debt.saturating_add(entry.debt),
                            }
                        }
                        if schedule.driver == Some(id) {
                            schedule.driver = None;
                        }
                    }
                }
                schedule.replay(&shared.gcra, at, now);
                cost - actual.unwrap_or(0)
            }
            (None, actual) => {
                // Already released: a refund down to the bound of the module
                // docs.
                let unused = cost - actual.unwrap_or(0);
                let since = schedule.reserved_total.saturating_sub(reserved_after);
                let floor = now
                    .as_u64()
                    .saturating_mul(shared.gcra.scale())
                    .saturating_add(since.saturating_mul(interval))
                    .min(schedule.released_tat);
                let lowered = schedule
                    .released_tat
                    .saturating_sub(unused.saturating_mul(interval))
                    .max(floor);
                let refunded = (schedule.released_tat - lowered) / interval;
                schedule.released_tat = lowered;
                schedule.replay(&shared.gcra, 0, now);
                refunded
            }
        };
        woken.extend(schedule.release_due(now));
        // Releases may have moved earlier: the driver re-arms its timer and
        // blocking waiters recheck.
        woken.extend(schedule.driver_waker());
        drop(schedule);
        wake_all(woken);
        shared.moved.notify_all();
        refunded
    }

    /// Blocks until reservation `id` is released.
    fn wait_blocking(&self, id: u64) {
        let shared = &*self.shared;
        let mut schedule = lock(&shared.schedule);
        loop {
            let woken = schedule.release_due(shared.clock.now());
            let release = schedule.find(id).map(|at| schedule.pending[at].release);
            if !woken.is_empty() {
                drop(schedule);
                wake_all(woken);
                schedule = lock(&shared.schedule);
                continue;
            }
            let Some(release) = release else {
                return;
            };
            match shared.clock.instant_at(Nanos::new(release)) {
                Some(deadline) => {
                    // A lagging clock (cached) may still read earlier at the
                    // deadline: never spin, wait at least 50 µs.
                    let timeout = deadline
                        .saturating_duration_since(Instant::now())
                        .max(Duration::from_micros(50));
                    schedule = wait_timeout(&shared.moved, schedule, timeout);
                }
                None => {
                    drop(schedule);
                    shared.clock.sleep_until(Nanos::new(release));
                    schedule = lock(&shared.schedule);
                }
            }
        }
    }
}

fn wake_all(wakers: Vec<Waker>) {
    for waker in wakers {
        waker.wake();
    }
}

#[cfg(not(loom))]
fn wait_timeout<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> MutexGuard<'a, T> {
    match condvar.wait_timeout(guard, timeout) {
        Ok((guard, _)) => guard,
        Err(poisoned) => poisoned.into_inner().0,
    }
}

#[cfg(loom)]
fn wait_timeout<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    _timeout: Duration,
) -> MutexGuard<'a, T> {
    match condvar.wait(guard) {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Where a reservation stands in the schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    /// Waiting, for the instant given.
    Pending(u64),
    /// Released at the instant given, after a replay moved it.
    Moved(u64),
    /// Released at the instant its handle last saw.
    Released,
}

impl Schedule {
    /// Where reservation `id` stands.
    fn standing(&self, id: u64) -> Standing {
        if let Some(at) = self.find(id) {
            return Standing::Pending(self.pending[at].release);
        }
        match self.moved_released.binary_search_by_key(&id, |&(id, _)| id) {
            Ok(at) => Standing::Moved(self.moved_released[at].1),
            Err(_) => Standing::Released,
        }
    }

    /// The TAT after every reservation made so far.
    fn tail_tat(&self) -> u64 {
        self.pending
            .back()
            .map_or(self.released_tat, |last| last.tat)
    }

    /// Where reservation `id` is in the queue (ids grow along it).
    fn find(&self, id: u64) -> Option<usize> {
        self.pending
            .binary_search_by_key(&id, |entry| entry.id)
            .ok()
    }

    /// Releases every reservation due at `now` and returns their waiters'
    /// wakers, to be woken once the lock is dropped.
    fn release_due(&mut self, now: Nanos) -> Vec<Waker> {
        let mut woken = Vec::new();
        while let Some(front) = self.pending.front() {
            if front.release > now.as_u64() {
                break;
            }
            if let Some(entry) = self.pending.pop_front() {
                self.released_tat = entry.tat;
                if entry.moved {
                    self.moved_released.push((entry.id, entry.release));
                }
                if self.driver == Some(entry.id) {
                    self.driver = None;
                }
                woken.extend(entry.waker);
            }
        }
        if self.driver.is_none() && !woken.is_empty() {
            // The driver left: the next waiter takes the timer.
            woken.extend(self.driver_waker());
        }
        woken
    }

    /// A waker to poke so that the timer is (re)armed: the driver's, or the
    /// first waiting task's when there is no driver.
    fn driver_waker(&self) -> Option<Waker> {
        match self.driver {
            Some(id) => self.find(id).and_then(|at| self.pending[at].waker.clone()),
            None => self.pending.iter().find_map(|entry| entry.waker.clone()),
        }
    }

    /// Recomputes every release from position `from` on, as if the queue
    /// before it were all there ever was; none earlier than `now`, when the
    /// replay happens, since none of them has run.
    fn replay(&mut self, gcra: &Gcra, from: usize, now: Nanos) {
        let mut tat = match from.checked_sub(1) {
            Some(before) => self.pending[before].tat,
            None => self.released_tat,
        };
        for entry in self.pending.iter_mut().skip(from) {
            let base = tat.saturating_add(entry.debt);
            // Only ever earlier or equal, except after a settle for more, so
            // the arithmetic cannot overflow where the first schedule did not.
            if let Some((release, after)) =
                slot(gcra, base, Nanos::new(entry.arrival).max(now), entry.cost)
            {
                entry.moved |= entry.release != release.as_u64();
                entry.release = release.as_u64();
                entry.tat = after;
            }
            tat = entry.tat;
        }
    }
}

impl<C: Clock> Clone for Shaper<C> {
    fn clone(&self) -> Shaper<C> {
        Shaper {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<C: Clock> fmt::Debug for Shaper<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shaper")
            .field("quota", self.quota())
            .field("max_delay", &Duration::from_nanos(self.shared.max_delay))
            .field("max_waiters", &self.shared.max_waiters)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "tokio")]
mod asynchronous;
mod reservation;
mod warm_up;

#[cfg(feature = "tokio")]
pub use asynchronous::Ready;
use reservation::Held;
pub use reservation::Reservation;
