//! What a token budget runs on: [`BudgetBackend`], which looks and
//! reserves, and the [`Reservation`] it hands out, which settles.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;

use tollgate::{
    Algorithm, Charge, Clock, Decision, KeyedLimiter, KeyedReserved, Limiter, Quota, Reserved,
};

use crate::backend::BackendError;

/// A backend's answer: at once (a local limiter), or after some I/O (a
/// remote store), as a boxed future.
#[must_use = "a Pending carries the answer"]
pub enum Pending<T> {
    /// Answered without waiting.
    Now(T),
    /// To be awaited.
    Later(Pin<Box<dyn Future<Output = T> + Send>>),
}

impl<T> Pending<T> {
    /// The answer, awaited if it is not there yet.
    pub async fn get(self) -> T {
        match self {
            Pending::Now(value) => value,
            Pending::Later(future) => future.await,
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for Pending<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pending::Now(value) => f.debug_tuple("Now").field(value).finish(),
            Pending::Later(_) => f.write_str("Later(..)"),
        }
    }
}

/// A token budget per key: looks and reservations, for the
/// [`TokenBudgetLayer`](super::TokenBudgetLayer).
///
/// # Model
///
/// A request's estimate is reserved before it is passed on, as one
/// operation of the store (the core's
/// [`reserve_estimate`](tollgate::KeyedLimiter::reserve_estimate): a check
/// of the estimate, admitted and recorded or refused); when its response
/// ends, the reservation is settled with the real cost, again as one
/// operation (the core's [`settle`](tollgate::KeyedReserved::settle): the
/// excess charged into debt, or the difference given back, never above
/// full). The layer never composes a settle out of looks, charges and
/// refunds of its own. A reservation of 0 (check, then charge) holds
/// nothing, and its settle is a charge of the whole cost.
///
/// What a charge past the limit leaves owed is the store's rule: in
/// memory, the core's ([`tollgate::Limiter::charge`]): every algorithm
/// carries the excess as a debt, a GCRA budget until it is repaid at the
/// quota's rate, a window budget into the windows that follow; one charge
/// records at most [`DEBT_PERIODS`](tollgate::algorithm::DEBT_PERIODS)
/// periods of the quota, and the rest is reported
/// [`unrecorded`](Settlement::unrecorded).
///
/// # Backends
///
/// - [`KeyedLimiter`]: a budget per key; [`Limiter`]: one budget shared
///   by every key. Decided at once, no waiting.
/// - `tollgate_redis::RedisLimiter` (feature `redis`): one budget per key
///   shared by every process, each operation a script call answered within
///   the limiter's deadline, by its failure policy when Redis does not
///   answer (see [`budget`](super), "On Redis").
///
/// Not the compact keyed table: it has no look of any cost but one, which
/// the layer's admission and its headers need.
pub trait BudgetBackend<K>: Send + Sync + 'static {
    /// What taking `cost` tokens for `key` would be told now, taking
    /// nothing (a cost of 0: the state as it is).
    ///
    /// # Errors
    ///
    /// [`BackendError::Cost`] when `cost` is above the budget's capacity;
    /// [`BackendError::Unavailable`] when the store could not answer and
    /// no failure policy of its own did.
    fn peek(&self, key: &K, cost: u64) -> Pending<Result<Decision, BackendError>>;

    /// Reserves `estimate` tokens for `key`: admitted and taken if they are
    /// all there, refused and nothing taken otherwise, as one operation of
    /// the store. A refused reservation holds nothing.
    ///
    /// # Errors
    ///
    /// As [`peek`](Self::peek).
    fn reserve(
        &self,
        key: &K,
        estimate: u64,
    ) -> Pending<Result<Box<dyn Reservation>, BackendError>>;

    /// The quotas it enforces on a key without an override.
    fn quotas(&self) -> Vec<Quota>;

    /// Why this backend cannot keep a budget (it cannot record a charge
    /// into debt), checked once by
    /// [`Builder::build`](super::Builder::build); `None` when it can. By
    /// default, `None`.
    fn unfit(&self) -> Option<String> {
        None
    }
}

/// Tokens reserved for one key of one budget, to be settled once with what
/// the request really cost. Dropped unsettled, it stands as charged at its
/// estimate (the core's rule): the layer settles every reservation it
/// admitted, and gives back (settles at 0) those of a request another
/// budget refused.
pub trait Reservation: Send + 'static {
    /// The check of the estimate: admitted (and taken) or refused.
    fn decision(&self) -> Decision;

    /// The tokens held: the estimate if admitted, 0 if refused.
    fn reserved(&self) -> u64;

    /// Settles with the real cost: charges `actual − reserved` (into debt)
    /// or gives back `reserved − actual` (never above full), as one
    /// operation of the store.
    fn settle(self: Box<Self>, actual: u64) -> Pending<Settlement>;
}

/// What one settle did on one budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settlement {
    /// Tokens recorded above the reservation.
    pub charged: u64,
    /// Tokens given back below it (asked back: the algorithm gives back at
    /// most what still counts).
    pub refunded: u64,
    /// Tokens above the reservation the store did not record: past the
    /// core's debt cap, under a list or a penalty, or not taken by a
    /// remote store that did not answer (its failure policy then decides
    /// the key's next requests).
    pub unrecorded: u64,
}

impl From<Charge> for Settlement {
    fn from(charge: Charge) -> Settlement {
        Settlement {
            charged: charge.recorded(),
            refunded: charge.refunded(),
            unrecorded: charge.forgiven(),
        }
    }
}

impl<K, A> BudgetBackend<K> for KeyedLimiter<K, A>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: Algorithm,
{
    fn peek(&self, key: &K, cost: u64) -> Pending<Result<Decision, BackendError>> {
        Pending::Now(self.peek_n(key, cost).map_err(BackendError::Cost))
    }

    fn reserve(
        &self,
        key: &K,
        estimate: u64,
    ) -> Pending<Result<Box<dyn Reservation>, BackendError>> {
        Pending::Now(match self.reserve_estimate(key, estimate) {
            Ok(reserved) => Ok(Box::new(reserved)),
            Err(error) => Err(BackendError::Cost(error)),
        })
    }

    fn quotas(&self) -> Vec<Quota> {
        self.default_algorithm().quotas()
    }
}

impl<K, A> Reservation for KeyedReserved<K, A>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: Algorithm,
{
    fn decision(&self) -> Decision {
        KeyedReserved::decision(self)
    }

    fn reserved(&self) -> u64 {
        KeyedReserved::reserved(self)
    }

    fn settle(self: Box<Self>, actual: u64) -> Pending<Settlement> {
        Pending::Now(KeyedReserved::settle(*self, actual).into())
    }
}

/// One budget shared by every key: the key is ignored.
impl<K, A, C> BudgetBackend<K> for Limiter<A, C>
where
    A: Algorithm,
    C: Clock + 'static,
{
    fn peek(&self, _: &K, cost: u64) -> Pending<Result<Decision, BackendError>> {
        Pending::Now(self.peek_n(cost).map_err(BackendError::Cost))
    }

    fn reserve(&self, _: &K, estimate: u64) -> Pending<Result<Box<dyn Reservation>, BackendError>> {
        Pending::Now(match self.reserve_estimate(estimate) {
            Ok(reserved) => Ok(Box::new(reserved)),
            Err(error) => Err(BackendError::Cost(error)),
        })
    }

    fn quotas(&self) -> Vec<Quota> {
        self.algorithm().quotas()
    }
}

impl<A, C> Reservation for Reserved<A, C>
where
    A: Algorithm,
    C: Clock + 'static,
{
    fn decision(&self) -> Decision {
        Reserved::decision(self)
    }

    fn reserved(&self) -> u64 {
        Reserved::reserved(self)
    }

    fn settle(self: Box<Self>, actual: u64) -> Pending<Settlement> {
        Pending::Now(Reserved::settle(*self, actual).into())
    }
}
