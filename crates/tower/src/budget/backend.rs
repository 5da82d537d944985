//! What a token budget runs on: [`BudgetBackend`], the four operations the
//! layer needs (look, reserve, charge, give back), for the core's keyed
//! and plain limiters.
//!
//! Local limiters only: the Redis script has no unconditional charge yet.
//! What a charge past the limit leaves owed is the core's rule
//! ([`tollgate::Limiter::charge_n`]): a GCRA budget owes all of it and
//! refuses until it is paid at the quota's rate; a window budget counts up
//! to its limit and is full until its window moves on.

use std::hash::Hash;

use tollgate::{Algorithm, Clock, CostError, Decision, KeyedLimiter, Limiter, Quota};

/// A token budget per key: see the [module docs](crate::budget).
pub trait BudgetBackend<K>: Send + Sync + 'static {
    /// What taking `cost` tokens for `key` would be told now, taking
    /// nothing.
    ///
    /// # Errors
    ///
    /// [`CostError`] when `cost` is above the budget's capacity.
    fn peek(&self, key: &K, cost: u64) -> Result<Decision, CostError>;

    /// Takes `cost` tokens for `key` if they are all there; none otherwise.
    ///
    /// # Errors
    ///
    /// As [`peek`](Self::peek).
    fn reserve(&self, key: &K, cost: u64) -> Result<Decision, CostError>;

    /// Records `cost` tokens spent by `key`, whether or not they fit.
    fn charge(&self, key: &K, cost: u64) -> Decision;

    /// Gives `cost` tokens back to `key`, never above full.
    fn refund(&self, key: &K, cost: u64) -> Decision;

    /// The quotas it enforces on a key without an override.
    fn quotas(&self) -> Vec<Quota>;
}

impl<K, A> BudgetBackend<K> for KeyedLimiter<K, A>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: Algorithm,
{
    fn peek(&self, key: &K, cost: u64) -> Result<Decision, CostError> {
        self.peek_n(key, cost)
    }

    fn reserve(&self, key: &K, cost: u64) -> Result<Decision, CostError> {
        self.check_n(key, cost)
    }

    fn charge(&self, key: &K, cost: u64) -> Decision {
        self.charge_n(key, cost)
    }

    fn refund(&self, key: &K, cost: u64) -> Decision {
        KeyedLimiter::refund(self, key, cost)
    }

    fn quotas(&self) -> Vec<Quota> {
        self.default_algorithm().quotas()
    }
}

/// One budget shared by every key: the key is ignored.
impl<K, A, C> BudgetBackend<K> for Limiter<A, C>
where
    A: Algorithm,
    C: Clock + 'static,
{
    fn peek(&self, _: &K, cost: u64) -> Result<Decision, CostError> {
        self.peek_n(cost)
    }

    fn reserve(&self, _: &K, cost: u64) -> Result<Decision, CostError> {
        self.check_n(cost)
    }

    fn charge(&self, _: &K, cost: u64) -> Decision {
        self.charge_n(cost)
    }

    fn refund(&self, _: &K, cost: u64) -> Decision {
        Limiter::refund(self, cost)
    }

    fn quotas(&self) -> Vec<Quota> {
        self.algorithm().quotas()
    }
}
