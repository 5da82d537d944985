//! The lock around one shard of a keyed limiter's map: exclusive, with a
//! release that is one plain store.
//!
//! # Why not `std::sync::RwLock`
//!
//! A known key's check holds its shard for a hash probe and one transition
//! of a few nanoseconds. Under std's `RwLock` that cost three serialising
//! instructions: the read lock's `lock cmpxchg`, the state's own
//! compare-and-swap, and the read unlock's `lock xadd`. Profiled on the
//! `defaults` bench at 10^3 keys, those three took about 72 % of the check
//! (the time-stamp counter's read took the rest). Here a check takes the
//! lock with one `lock cmpxchg`, updates the state with a plain load and
//! store (the lock makes the cell exclusive:
//! [`Algorithm::check_cell_mut`]), and releases with a plain store, which
//! x86 orders as a release without a barrier. Measured in one loop at 10^3
//! `u64` keys, GCRA on the TSC, 32 shards (`hashbrown` tables, foldhash):
//! `RwLock` and compare-and-swap 16.7 ns per check, std's `Mutex` and plain
//! stores 13.0 (its unlock is an `xchg`), this lock and plain stores 9.0:
//! the clock read alone (BENCHMARKS.md, "Keyed limiter").
//!
//! What it gives up: two checks of keys in one shard no longer run at the
//! same time. They did not scale before either, since both wrote the lock
//! word's cache line; the hold is now a few nanoseconds, and a map has 16
//! shards per thread the machine runs (see `keymap::shard_count`).
//!
//! [`Algorithm::check_cell_mut`]: crate::algorithm::Algorithm::check_cell_mut
//!
//! # The lock, and waiting for it
//!
//! The lock is `spinning_top`'s spinlock (the raw lock under `lock_api`,
//! as governor uses it): a `compare_exchange` to take it, a `Release` store
//! to give it back. Chosen over `parking_lot::Mutex`, whose release is a
//! `lock cmpxchg` (it must see whether a waiter parked): the very
//! instruction this lock exists to save.
//!
//! A thread that finds the lock held does not spin on it without end: the
//! writers' holds are O(keys in the shard) when a table grows, shrinks or
//! is retagged, milliseconds for a large shard. It spins and then yields
//! (crossbeam's [`Backoff`], then `yield_now` until [`YIELD_FOR`] has
//! passed), and only then sleeps, from [`FIRST_SLEEP`] doubling up to
//! [`LONGEST_SLEEP`] between attempts. A waiter thus costs a core only for
//! a short hold, and a long hold is noticed at most [`LONGEST_SLEEP`] late.
//!
//! A spinlock is not fair: a holder that releases and takes the lock again
//! at once (a sweep, chunk after chunk, [`crate::keymap::KeyMap::retain`])
//! wins it back nearly every time, since the line is still in its cache.
//! Measured in the eviction bench, a check on a shard being swept waited
//! past its spinning and slept: p99 291 µs during a sweep of 10^6 keys.
//! So waiters count themselves, and such a holder calls
//! [`ShardLock::let_waiters_in`] between two holds: while a thread waits,
//! it leaves the lock free until a waiter has taken it (or [`HAND_OFF`]
//! has passed). The check path never calls it.
//!
//! Under `--cfg loom` the lock is loom's `Mutex`, so that the keyed
//! limiter's models explore every order of its holds.

#[cfg(not(loom))]
use std::time::{Duration, Instant};

#[cfg(not(loom))]
use crossbeam_utils::Backoff;

/// How long a waiter spins and yields before it starts to sleep: longer
/// than a sweep's chunk or an insert, far shorter than a table's growth.
#[cfg(not(loom))]
const YIELD_FOR: Duration = Duration::from_micros(50);
/// A waiter's first sleep, once spinning and yielding are spent.
#[cfg(not(loom))]
const FIRST_SLEEP: Duration = Duration::from_micros(10);
/// The longest [`ShardLock::let_waiters_in`] leaves the lock to a waiter
/// that does not take it (one that went to sleep).
#[cfg(not(loom))]
const HAND_OFF: Duration = Duration::from_micros(20);
/// The longest a waiter sleeps between two attempts: how late, at most, it
/// notices the end of a long hold.
#[cfg(not(loom))]
const LONGEST_SLEEP: Duration = Duration::from_micros(200);

/// A value behind an exclusive lock whose release is a plain store.
pub(crate) struct ShardLock<T> {
    inner: Inner<T>,
    /// Threads in [`ShardLock::lock_contended`].
    #[cfg(not(loom))]
    waiting: std::sync::atomic::AtomicU32,
}

#[cfg(not(loom))]
type Inner<T> = spinning_top::Spinlock<T>;
#[cfg(loom)]
type Inner<T> = crate::sync::Mutex<T>;

/// Exclusive access to a [`ShardLock`]'s value until dropped.
#[cfg(not(loom))]
pub(crate) type ShardGuard<'a, T> = spinning_top::guard::SpinlockGuard<'a, T>;
/// Exclusive access to a [`ShardLock`]'s value until dropped.
#[cfg(loom)]
pub(crate) type ShardGuard<'a, T> = crate::sync::MutexGuard<'a, T>;

impl<T> ShardLock<T> {
    pub(crate) fn new(value: T) -> ShardLock<T> {
        ShardLock {
            inner: Inner::new(value),
            #[cfg(not(loom))]
            waiting: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// Takes the lock, waiting as long as it takes.
    #[cfg(not(loom))]
    #[inline(always)]
    pub(crate) fn lock(&self) -> ShardGuard<'_, T> {
        match self.inner.try_lock() {
            Some(guard) => guard,
            None => self.lock_contended(),
        }
    }

    /// Takes the lock, waiting as long as it takes.
    #[cfg(loom)]
    pub(crate) fn lock(&self) -> ShardGuard<'_, T> {
        crate::sync::lock(&self.inner)
    }

    /// Between two holds of a thread that takes the lock again at once:
    /// while another thread waits, leaves the lock free until one has taken
    /// it, for at most [`HAND_OFF`] (module docs, "Waiting").
    #[cfg(not(loom))]
    pub(crate) fn let_waiters_in(&self) {
        use std::sync::atomic::Ordering;
        // Relaxed: a hint; the lock word itself orders the holds.
        if self.waiting.load(Ordering::Relaxed) == 0 {
            return;
        }
        let started = std::time::Instant::now();
        while self.waiting.load(Ordering::Relaxed) != 0
            && !self.inner.is_locked()
            && started.elapsed() < HAND_OFF
        {
            std::hint::spin_loop();
        }
    }

    /// Under loom every order of the holds is explored: nothing to do.
    #[cfg(loom)]
    pub(crate) fn let_waiters_in(&self) {}

    #[cfg(not(loom))]
    #[cold]
    #[inline(never)]
    fn lock_contended(&self) -> ShardGuard<'_, T> {
        use std::sync::atomic::Ordering;
        // Relaxed: a count read as a hint by `let_waiters_in`.
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let guard = self.wait();
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        guard
    }

    #[cfg(not(loom))]
    fn wait(&self) -> ShardGuard<'_, T> {
        let backoff = Backoff::new();
        let mut started = None;
        let mut sleep = FIRST_SLEEP;
        loop {
            // Read before trying: a waiter that only reads keeps the line
            // shared until the holder's release.
            if !self.inner.is_locked() {
                if let Some(guard) = self.inner.try_lock() {
                    return guard;
                }
            }
            if !backoff.is_completed() {
                backoff.snooze();
            } else if started.get_or_insert_with(Instant::now).elapsed() < YIELD_FOR {
                std::thread::yield_now();
            } else {
                std::thread::sleep(sleep);
                sleep = (sleep * 2).min(LONGEST_SLEEP);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[test]
    fn one_holder_at_a_time_across_threads() {
        // A plain counter behind the lock, and a flag set while it is held:
        // a second holder shows as a set flag or a lost increment.
        let lock = ShardLock::new(0u64);
        let inside = AtomicBool::new(false);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..100_000 {
                        let mut guard = lock.lock();
                        // Relaxed: the lock orders these; the flag only
                        // detects an overlap.
                        assert!(!inside.swap(true, Ordering::Relaxed), "two holders");
                        *guard += 1;
                        inside.store(false, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), 400_000);
    }

    #[test]
    fn a_waiter_outlasts_a_long_hold_and_sees_its_writes() {
        let lock = ShardLock::new(0u64);
        let waiting = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let mut guard = lock.lock();
            let waiter = scope.spawn(|| {
                waiting.store(true, Ordering::Relaxed);
                let mut guard = lock.lock();
                *guard += 1;
                *guard
            });
            while !waiting.load(Ordering::Relaxed) {
                std::thread::yield_now();
            }
            // Long past the waiter's spinning and yielding: it sleeps.
            std::thread::sleep(Duration::from_millis(50));
            *guard = 41;
            drop(guard);
            assert_eq!(waiter.join().unwrap(), 42);
        });
    }
}
