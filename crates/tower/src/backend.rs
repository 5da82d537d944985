//! Who decides: the [`Backend`] trait over "decide this key at this cost".
//!
//! # Decisions
//!
//! - A backend answers either **now** (a local limiter: no future, no
//!   allocation, the inner service is called from `call` itself) or
//!   **later** with a boxed future (a remote store such as Redis, whose
//!   round trip dwarfs the allocation). That keeps the local path as cheap
//!   as a direct `check_n` and leaves room for the Redis backend, with its
//!   failure policy applied inside it, and for reserve-then-settle, without
//!   changing the service.
//! - A failure is a [`BackendError`], never a silent admission: a cost above
//!   the quota's capacity can never be admitted (`413`), an unreachable
//!   store is `503` unless the backend's own failure policy already chose to
//!   fail open or closed.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;

use std::time::Duration;

use tollgate::{
    Algorithm, Clock, CostError, Decision, KeyedLimiter, Limiter, Quota, Refusal, Shaper,
};

/// A boxed error from a remote backend.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// A decision still on its way.
pub type DecisionFuture = Pin<Box<dyn Future<Output = Result<Decision, BackendError>> + Send>>;

/// Decides whether `cost` permits may be taken for `key`.
///
/// Implemented for [`KeyedLimiter`] (one state per key), [`Limiter`] (one
/// state for every key) and [`Shaper`] (one FIFO queue for every key).
pub trait Backend<K>: Send + Sync + 'static {
    /// Takes `cost` permits for `key` if they are all available; none
    /// otherwise. A cost of 0 only looks.
    fn decide(&self, key: &K, cost: u64) -> Decided;

    /// The quotas this backend enforces on a key without an override of its
    /// own (each limit's, for several), against which
    /// [`Builder::build`](crate::Builder::build) checks an advertised
    /// [`policy_quota`](crate::Builder::policy_quota); `None` when it cannot
    /// say, and then nothing is checked. By default, `None`.
    fn enforced_quotas(&self) -> Option<Vec<Quota>> {
        None
    }
}

/// A backend that can be charged a cost learnt after the fact, whether or
/// not it fits: what [`settle`](crate::settle) mode needs.
///
/// Implemented for [`KeyedLimiter`] and [`Limiter`], through their
/// `charge_n`.
pub trait Charge<K>: Backend<K> {
    /// Records `cost` more permits for `key`, never refused.
    fn charge(&self, key: &K, cost: u64);
}

impl<K, A> Charge<K> for KeyedLimiter<K, A>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: Algorithm,
{
    fn charge(&self, key: &K, cost: u64) {
        let _after = self.charge_n(key, cost);
    }
}

impl<K, A, C> Charge<K> for Limiter<A, C>
where
    A: Algorithm,
    C: Clock + 'static,
{
    fn charge(&self, _: &K, cost: u64) {
        let _after = self.charge_n(cost);
    }
}

/// A backend's answer: at once, or after some I/O.
#[must_use = "a Decided carries the decision"]
pub enum Decided {
    /// Decided without waiting.
    Now(Result<Decision, BackendError>),
    /// To be awaited.
    Later(DecisionFuture),
}

impl fmt::Debug for Decided {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decided::Now(result) => f.debug_tuple("Now").field(result).finish(),
            Decided::Later(_) => f.write_str("Later(..)"),
        }
    }
}

/// Why a backend could not decide.
#[derive(Debug)]
#[non_exhaustive]
pub enum BackendError {
    /// The cost is above the quota's capacity: no wait would admit it.
    Cost(CostError),
    /// The backend could not be reached or failed.
    Unavailable(BoxError),
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::Cost(error) => error.fmt(f),
            BackendError::Unavailable(error) => {
                write!(f, "rate-limit backend unavailable: {error}")
            }
        }
    }
}

impl StdError for BackendError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            BackendError::Cost(error) => Some(error),
            BackendError::Unavailable(error) => Some(&**error),
        }
    }
}

impl From<CostError> for BackendError {
    fn from(error: CostError) -> BackendError {
        BackendError::Cost(error)
    }
}

impl<K, A> Backend<K> for KeyedLimiter<K, A>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: Algorithm,
{
    #[inline]
    fn decide(&self, key: &K, cost: u64) -> Decided {
        Decided::Now(self.check_n(key, cost).map_err(BackendError::Cost))
    }

    fn enforced_quotas(&self) -> Option<Vec<Quota>> {
        Some(self.default_algorithm().quotas())
    }
}

/// One state for every key: the key is ignored.
impl<K, A, C> Backend<K> for Limiter<A, C>
where
    A: Algorithm,
    C: Clock + 'static,
{
    #[inline]
    fn decide(&self, _: &K, cost: u64) -> Decided {
        Decided::Now(self.check_n(cost).map_err(BackendError::Cost))
    }

    fn enforced_quotas(&self) -> Option<Vec<Quota>> {
        Some(self.algorithm().quotas())
    }
}

/// FIFO shaping for every key (the key is ignored): a request waits for its
/// slot in the shaper's queue, first come first served, and is answered
/// `429` at once when it would wait longer than the shaper's `max_delay` or
/// the queue is full. Dropping the request (a client gone) gives its slot
/// back exactly.
///
/// The shaper's own `max_delay` bounds the wait: leave the layer's
/// [`max_delay`](crate::Builder::max_delay) unset with this backend. A
/// refusal's `retry_after` is the time after which the same request would
/// wait no longer than `max_delay` (one emission interval when the queue was
/// full); `remaining` and `reset_after` are the schedule's, as
/// [`Shaper::peek_n`] reports them.
impl<K, C> Backend<K> for Shaper<C>
where
    C: Clock + 'static,
{
    fn enforced_quotas(&self) -> Option<Vec<Quota>> {
        Some(vec![*self.quota()])
    }

    fn decide(&self, _: &K, cost: u64) -> Decided {
        let limit = self.quota().burst();
        match self.reserve(cost) {
            Ok(reservation) if reservation.delay().is_zero() => {
                reservation.consume();
                Decided::Now(Ok(admitted(self, limit)))
            }
            Ok(mut reservation) => {
                let shaper = self.clone();
                Decided::Later(Box::pin(async move {
                    reservation.ready().await;
                    Ok(admitted(&shaper, limit))
                }))
            }
            Err(Refusal::TooLong { wait, max_delay }) => {
                Decided::Now(Ok(refused(self, limit, wait.saturating_sub(max_delay))))
            }
            Err(Refusal::Full { .. }) => {
                let quota = self.quota();
                let interval = Duration::from_nanos(quota.period_nanos() / quota.limit());
                Decided::Now(Ok(refused(self, limit, interval)))
            }
            Err(Refusal::Cost(error)) => Decided::Now(Err(BackendError::Cost(error))),
            Err(other) => Decided::Now(Err(BackendError::Unavailable(Box::new(other)))),
        }
    }
}

/// An admission by a shaper, with the schedule's `remaining` and `reset_after`.
fn admitted<C: Clock>(shaper: &Shaper<C>, limit: u64) -> Decision {
    let (remaining, reset_after) = shaper.peek_n(0).map_or((0, Duration::ZERO), |now| {
        (now.remaining(), now.reset_after())
    });
    Decision::from_parts(true, limit, remaining, Duration::ZERO, reset_after)
}

/// A shaper's refusal, to be tried again after `retry_after`.
fn refused<C: Clock>(shaper: &Shaper<C>, limit: u64, retry_after: Duration) -> Decision {
    let reset_after = shaper
        .peek_n(0)
        .map_or(Duration::ZERO, |now| now.reset_after());
    Decision::from_parts(
        false,
        limit,
        0,
        retry_after.max(Duration::from_nanos(1)),
        reset_after,
    )
}
