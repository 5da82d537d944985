//! Who holds the slots: the [`ConcurrencyBackend`] seam, in memory
//! ([`KeyedConcurrencyLimiter`]) or on Redis
//! ([`RedisConcurrencyLimiter`](tollgate_redis::concurrency::RedisConcurrencyLimiter),
//! feature `redis`), as the rate-limit layer's [`Backend`](crate::Backend).
//!
//! # Decisions
//!
//! - A backend answers a request with the slot it holds (any value whose
//!   drop gives the slot back: a [`Permit`], a
//!   [`RedisPermit`](tollgate_redis::concurrency::RedisPermit)) or a
//!   refusal; the layer keeps the value in the response body, so the slot
//!   is held for the response's life whatever the backend.
//! - In memory the answer is at once ([`Acquire::Now`]). On Redis it is
//!   one round trip ([`Acquire::Later`]), bounded by the limiter's
//!   deadline and decided by its failure policy when Redis does not
//!   answer (fail open, fail closed, a local share): the layer never waits
//!   on Redis longer than that.
//! - A dropped Redis permit releases its lease in the background; if the
//!   node dies instead, the lease expires after its TTL and its slot comes
//!   back (see `tollgate_redis::concurrency`).
//! - Waiting in a queue ([`ConcurrencyBuilder::wait`](super::ConcurrencyBuilder::wait))
//!   is the memory backend's alone: Redis leases have no queue, so a Redis
//!   backend answers at once whatever `wait` says.

use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;

use tollgate::concurrency::{KeyedConcurrencyLimiter, Permit, Priority, Reason};

/// A future of a held slot (or of the refusal).
pub type AcquireFuture<H> = Pin<Box<dyn Future<Output = Result<H, Refused>> + Send>>;

/// A backend's answer to a request for one slot.
pub enum Acquire<H> {
    /// Decided at once.
    Now(Result<H, Refused>),
    /// Decided by a future (a round trip).
    Later(AcquireFuture<H>),
}

impl<H> std::fmt::Debug for Acquire<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Acquire::Now(result) => f.debug_tuple("Now").field(&result.is_ok()).finish(),
            Acquire::Later(_) => f.write_str("Later"),
        }
    }
}

/// Why a backend gave no slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refused {
    /// The key's slots are taken; waiting could help.
    Full,
    /// No slot can be granted now, and waiting would not help (the key cap
    /// is full, the cost is above the limit, the store is down and its
    /// policy refuses).
    Unavailable,
}

/// Holds a concurrency limit's slots for the layer; see the
/// [module docs](self).
pub trait ConcurrencyBackend<K>: Send + Sync + 'static {
    /// What a granted request holds: dropping it gives its slot back.
    type Held: Send + 'static;

    /// One slot of `key` at `priority`.
    fn acquire(&self, key: &K, priority: Priority) -> Acquire<Self::Held>;

    /// Waits for one slot of `key` in a queue (bounded by the backend's
    /// own `max_delay`), if the backend has one. By default, `None`: no
    /// queue, the refusal stands.
    fn wait(&self, key: K, priority: Priority) -> Option<AcquireFuture<Self::Held>> {
        let _ = (key, priority);
        None
    }
}

impl<K> ConcurrencyBackend<K> for KeyedConcurrencyLimiter<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Held = Permit;

    fn acquire(&self, key: &K, priority: Priority) -> Acquire<Permit> {
        Acquire::Now(self.try_acquire_as(key, 1, priority).map_err(
            |denied| match denied.reason() {
                Reason::Full | Reason::Queued => Refused::Full,
                _ => Refused::Unavailable,
            },
        ))
    }

    fn wait(&self, key: K, priority: Priority) -> Option<AcquireFuture<Permit>> {
        let limiter = self.clone();
        Some(Box::pin(async move {
            limiter
                .acquire(&key, 1, priority)
                .await
                .map_err(|_| Refused::Full)
        }))
    }
}

#[cfg(feature = "redis")]
mod redis {
    use tollgate::concurrency::Priority;
    use tollgate_redis::concurrency::{RedisConcurrencyLimiter, RedisPermit, Refusal};

    use super::{Acquire, ConcurrencyBackend, Refused};
    use crate::redis::RedisKey;

    /// Slots as Redis leases: one round trip per request, the limiter's
    /// failure policy when Redis does not answer. Priorities do not apply
    /// (the leases hold one limit per key).
    impl<K: RedisKey + Send + 'static> ConcurrencyBackend<K> for RedisConcurrencyLimiter {
        type Held = RedisPermit;

        fn acquire(&self, key: &K, _: Priority) -> Acquire<RedisPermit> {
            let limiter = self.clone();
            let mut bytes = Vec::new();
            key.write_key(&mut bytes);
            Acquire::Later(Box::pin(async move {
                limiter
                    .try_acquire(&bytes, 1)
                    .await
                    .map_err(|refusal| match refusal {
                        Refusal::Full { .. } => Refused::Full,
                        _ => Refused::Unavailable,
                    })
            }))
        }
    }
}
