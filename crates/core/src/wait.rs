//! Waiting for permits: [`Limiter::acquire`] blocks a thread,
//! [`Limiter::until_ready`] awaits (feature `tokio`), and the same for
//! [`KeyedLimiter`].
//!
//! # How it waits
//!
//! Check; if denied, sleep for exactly the decision's `retry_after` on the
//! limiter's own clock ([`Clock::sleep_until`] for threads, the runtime's timer
//! for tasks), then check again. For GCRA a lone waiter is admitted on its
//! first retry, at the nanosecond `retry_after` promised (to the timer's
//! resolution). Every algorithm works, because each retry is an ordinary
//! `check`.
//!
//! # What it does not promise
//!
//! Waiters are not queued: under contention a later caller may take the permit
//! a sleeping one was waiting for (barging), and the sleeper then waits again.
//! Each admission is still an ordinary `check`, so the algorithm's guarantee
//! holds whatever the number of waiters. When order and a bound on the wait
//! matter, use the [`Shaper`](crate::Shaper): FIFO, `max_delay`, a cap on
//! waiters.
//!
//! A waiter takes nothing until it is admitted, so dropping a waiting future
//! (a timeout, a `select!`) or giving up changes no state.
//!
//! # Clocks
//!
//! Threads sleep with [`Clock::sleep_until`]: real time for the real clocks, and
//! until another thread moves a [`ManualClock`](crate::ManualClock). Tasks hand
//! [`Clock::instant_at`] to tokio's timer; a clock without real-time instants
//! (the manual clock) is re-read every millisecond instead. Under tokio's paused
//! clock, use [`TokioClock`](crate::TokioClock).

use std::borrow::Borrow;
use std::hash::Hash;

use crate::algorithm::Algorithm;
use crate::clock::{Clock, Nanos};
use crate::decision::{CostError, Decision};
use crate::keyed::KeyedLimiter;
use crate::limiter::Limiter;

/// Where a denied caller may try again: `retry_after` from now.
fn retry_at(clock: &(impl Clock + ?Sized), denied: &Decision) -> Nanos {
    clock.now().saturating_add(denied.retry_after())
}

impl<A: Algorithm, C: Clock> Limiter<A, C> {
    /// Takes one permit, blocking the thread until it is available.
    pub fn acquire(&self) -> Decision {
        loop {
            let decision = self.check();
            if decision.is_allowed() {
                return decision;
            }
            self.clock().sleep_until(retry_at(self.clock(), &decision));
        }
    }

    /// Takes `cost` permits at once, blocking the thread until they are
    /// available.
    ///
    /// # Errors
    ///
    /// [`CostError`] at once if `cost` is above the capacity: it would wait
    /// forever.
    pub fn acquire_n(&self, cost: u64) -> Result<Decision, CostError> {
        loop {
            let decision = self.check_n(cost)?;
            if decision.is_allowed() {
                return Ok(decision);
            }
            self.clock().sleep_until(retry_at(self.clock(), &decision));
        }
    }
}

impl<K, A> KeyedLimiter<K, A>
where
    K: Hash + Eq + Send + Sync + 'static,
    A: Algorithm,
{
    /// Takes one permit for `key`, blocking the thread until it is available.
    pub fn acquire<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        loop {
            let decision = self.check(key);
            if decision.is_allowed() {
                return decision;
            }
            self.clock().sleep_until(retry_at(self.clock(), &decision));
        }
    }

    /// Takes `cost` permits for `key`, blocking the thread until they are
    /// available.
    ///
    /// # Errors
    ///
    /// [`CostError`] at once if `cost` is above the capacity of the key's
    /// quota.
    pub fn acquire_n<Q>(&self, key: &Q, cost: u64) -> Result<Decision, CostError>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        loop {
            let decision = self.check_n(key, cost)?;
            if decision.is_allowed() {
                return Ok(decision);
            }
            self.clock().sleep_until(retry_at(self.clock(), &decision));
        }
    }
}

#[cfg(feature = "tokio")]
pub use self::with_tokio::sleep_until;

#[cfg(feature = "tokio")]
mod with_tokio {
    use std::time::Duration;

    use super::*;

    /// Sleeps the task until `clock` reads `at`: one timer at
    /// [`Clock::instant_at`], or, for a clock without real-time instants,
    /// re-reading it every millisecond (tokio's timer resolution).
    pub async fn sleep_until<C: Clock + ?Sized>(clock: &C, at: Nanos) {
        if let Some(instant) = clock.instant_at(at) {
            tokio::time::sleep_until(instant.into()).await;
        }
        // The timer never fires early, but a cached or custom clock may lag it.
        while clock.now() < at {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    impl<A: Algorithm, C: Clock> Limiter<A, C> {
        /// Takes one permit, waiting (without blocking the thread) until it
        /// is available. Dropping the future takes nothing.
        pub async fn until_ready(&self) -> Decision {
            loop {
                let decision = self.check();
                if decision.is_allowed() {
                    return decision;
                }
                sleep_until(self.clock(), retry_at(self.clock(), &decision)).await;
            }
        }

        /// Takes `cost` permits at once, waiting until they are available.
        /// Dropping the future takes nothing.
        ///
        /// # Errors
        ///
        /// [`CostError`] at once if `cost` is above the capacity.
        pub async fn until_ready_n(&self, cost: u64) -> Result<Decision, CostError> {
            loop {
                let decision = self.check_n(cost)?;
                if decision.is_allowed() {
                    return Ok(decision);
                }
                sleep_until(self.clock(), retry_at(self.clock(), &decision)).await;
            }
        }
    }

    impl<K, A> KeyedLimiter<K, A>
    where
        K: Hash + Eq + Send + Sync + 'static,
        A: Algorithm,
    {
        /// Takes one permit for `key`, waiting until it is available.
        /// Dropping the future takes nothing.
        pub async fn until_ready<Q>(&self, key: &Q) -> Decision
        where
            K: Borrow<Q> + From<Q::Owned>,
            Q: Hash + Eq + ToOwned + ?Sized,
        {
            loop {
                let decision = self.check(key);
                if decision.is_allowed() {
                    return decision;
                }
                sleep_until(self.clock(), retry_at(self.clock(), &decision)).await;
            }
        }

        /// Takes `cost` permits for `key`, waiting until they are available.
        /// Dropping the future takes nothing.
        ///
        /// # Errors
        ///
        /// [`CostError`] at once if `cost` is above the capacity of the key's
        /// quota.
        pub async fn until_ready_n<Q>(&self, key: &Q, cost: u64) -> Result<Decision, CostError>
        where
            K: Borrow<Q> + From<Q::Owned>,
            Q: Hash + Eq + ToOwned + ?Sized,
        {
            loop {
                let decision = self.check_n(key, cost)?;
                if decision.is_allowed() {
                    return Ok(decision);
                }
                sleep_until(self.clock(), retry_at(self.clock(), &decision)).await;
            }
        }
    }
}
