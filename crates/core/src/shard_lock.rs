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
//! the clock read alone (issue 16's closing note has the program).
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
//! (crossbeam's [`Backoff`]), and once that is spent sleeps, from
//! [`FIRST_SLEEP`] doubling up to [`LONGEST_SLEEP`] between attempts. A
//! waiter thus costs a core only for a short hold, and a long hold is
//! noticed at most [`LONGEST_SLEEP`] late.
//!
//! Under `--cfg loom` the lock is loom's `Mutex`, so that the keyed
//! limiter's models explore every order of its holds.

#[cfg(not(loom))]
use std::time::Duration;

#[cfg(not(loom))]
use crossbeam_utils::Backoff;

/// A waiter's first sleep, once spinning and yielding are spent.
#[cfg(not(loom))]
const FIRST_SLEEP: Duration = Duration::from_micros(10);
/// The longest a waiter sleeps between two attempts: how late, at most, it
/// notices the end of a long hold.
#[cfg(not(loom))]
const LONGEST_SLEEP: Duration = Duration::from_micros(200);

/// A value behind an exclusive lock whose release is a plain store.
pub(crate) struct ShardLock<T>(Inner<T>);

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
        ShardLock(Inner::new(value))
    }

    /// Takes the lock, waiting as long as it takes.
    #[cfg(not(loom))]
    #[inline(always)]
    pub(crate) fn lock(&self) -> ShardGuard<'_, T> {
        match self.0.try_lock() {
            Some(guard) => guard,
            None => self.lock_contended(),
        }
    }

    /// Takes the lock, waiting as long as it takes.
    #[cfg(loom)]
    pub(crate) fn lock(&self) -> ShardGuard<'_, T> {
        crate::sync::lock(&self.0)
    }

    #[cfg(not(loom))]
    #[cold]
    #[inline(never)]
    fn lock_contended(&self) -> ShardGuard<'_, T> {
        let backoff = Backoff::new();
        let mut sleep = FIRST_SLEEP;
        loop {
            // Read before trying: a waiter that only reads keeps the line
            // shared until the holder's release.
            if !self.0.is_locked() {
                if let Some(guard) = self.0.try_lock() {
                    return guard;
                }
            }
            if backoff.is_completed() {
                std::thread::sleep(sleep);
                sleep = (sleep * 2).min(LONGEST_SLEEP);
            } else {
                backoff.snooze();
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
