//! The Redis backend (feature `redis`): a [`tollgate_redis::RedisLimiter`]
//! decides, with its own failure policy, deadline and circuit breaker.
//!
//! # Decisions
//!
//! - The limiter answers within its deadline whatever Redis does, applying
//!   its failure policy (fail open, fail closed, or a local share of the
//!   quota), so the layer sees a decision, never an outage: a `429` when the
//!   policy denies. Only a cost above the limits' capacity is an error
//!   (`413`).
//! - Keys reach Redis as bytes through [`RedisKey`], an encoding in which no
//!   two keys of one extractor collide; the limiter then escapes and
//!   hash-tags them (see `tollgate-redis`).

use std::net::IpAddr;

use tollgate_redis::RedisLimiter;

use crate::backend::{Backend, BackendError, Decided};
use crate::key::OrKey;

/// How a key is written as the bytes Redis stores it under: distinct keys
/// give distinct bytes.
pub trait RedisKey {
    /// Appends this key's bytes to `out`.
    fn write_key(&self, out: &mut Vec<u8>);
}

/// The global key: one bucket.
impl RedisKey for () {
    fn write_key(&self, _: &mut Vec<u8>) {}
}

impl RedisKey for String {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
}

impl RedisKey for Vec<u8> {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}

impl RedisKey for u64 {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.to_string().as_bytes());
    }
}

/// The canonical text form (`192.0.2.1`, `2001:db8::`): readable in
/// `redis-cli`, and one form per address.
impl RedisKey for IpAddr {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.to_string().as_bytes());
    }
}

/// `1` then the first key, or `2` then the fallback's: the two never collide.
impl<A: RedisKey, B: RedisKey> RedisKey for OrKey<A, B> {
    fn write_key(&self, out: &mut Vec<u8>) {
        match self {
            OrKey::First(key) => {
                out.push(b'1');
                key.write_key(out);
            }
            OrKey::Fallback(key) => {
                out.push(b'2');
                key.write_key(out);
            }
        }
    }
}

/// `METHOD route`, or the method alone when no route matched (a method has
/// no space and a route starts with `/`).
#[cfg(feature = "axum")]
impl RedisKey for crate::key::RouteKey {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.method().as_str().as_bytes());
        if let Some(route) = self.route() {
            out.push(b' ');
            out.extend_from_slice(route.as_bytes());
        }
    }
}

/// Every request is one script call (or a lease, a deny-cache hit, or the
/// failure policy, as the limiter is configured).
impl<K> Backend<K> for RedisLimiter
where
    K: RedisKey + Send + Sync + 'static,
{
    fn enforced_quotas(&self) -> Option<Vec<tollgate::Quota>> {
        Some(self.limits().iter().map(|limit| *limit.quota()).collect())
    }

    fn decide(&self, key: &K, cost: u64) -> Decided {
        let mut bytes = Vec::new();
        key.write_key(&mut bytes);
        let limiter = self.clone();
        Decided::Later(Box::pin(async move {
            limiter.check_n(bytes, cost).await.map_err(|error| {
                BackendError::Cost(tollgate::CostError::new(error.cost, error.capacity))
            })
        }))
    }
}
