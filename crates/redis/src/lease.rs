//! Leases: a node takes a batch of permits from the shared state in one round
//! trip and spends them locally.
//!
//! # How
//!
//! A check finding no usable lease for its key runs the script with `op = l`:
//! it takes `min(size, what every limit has)` permits at once (or, if that is
//! less than the request, decides the request itself, exactly as a plain
//! check). The node then answers the next checks of that key from the lease,
//! with no round trip, until it is spent or its TTL passes. Concurrent checks
//! of a key wait for one fetch instead of each making their own (per-key
//! coalescing), at most the deadline.
//!
//! When a lease expires (seen by the next check of its key, by
//! [`RedisLimiter::return_expired_leases`](crate::RedisLimiter::return_expired_leases), or by the background sweep every
//! TTL) or at [`RedisLimiter::shutdown`](crate::RedisLimiter::shutdown), the permits left are given back
//! with `op = r`: for GCRA, only the part of the lease still ahead of now and
//! never more than the debt (so the bucket is never fuller than had the lease
//! been smaller); for windows, only into the window or slot the lease was
//! counted in, while it still counts.
//!
//! # Guarantees
//!
//! - **The shared quota is never exceeded**: every permit spent was taken by
//!   the script, atomically, from the shared state; a lease is one admission
//!   of `size` permits.
//! - **Stranded permits are bounded**: a node that crashes strands at most
//!   one lease per key (`max` permits), and they come back by themselves
//!   when the state refills (GCRA) or the window ends.
//! - **Time**: a permit is counted when leased and spent up to the lease TTL
//!   later, so over real time the GCRA bound becomes `burst + rate·(t + TTL)`
//!   and the sliding window's windows stretch by the TTL; a lease never
//!   outlives the fixed window it was counted in (its expiry is clipped to
//!   the window's end).
//!
//! Leases are held per bounded key (at most
//! [`MAX_INLINE_KEY`](crate::key::MAX_INLINE_KEY) bytes, long keys hashed), for
//! at most `max_keys` keys: their memory is bounded in bytes.
//!
//! # Adaptive size
//!
//! Per key, starting at `initial`: a lease spent before half its TTL doubles
//! the next one (up to `max`, and never above the limits' capacity); a lease
//! that expires with more than half unspent halves it (down to 1). Hot keys
//! thus take large leases, cold keys strand little.

use std::time::Duration;

/// Lease settings. Every setting has a default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Permits of a key's first lease. By default, 8.
    pub initial: u64,
    /// The largest lease. By default, 256.
    pub max: u64,
    /// How long a lease may be spent. By default, 100 ms.
    pub ttl: Duration,
    /// The most keys holding a lease at once; other keys are checked without
    /// one. By default, 100,000.
    pub max_keys: usize,
}

impl Default for LeaseConfig {
    fn default() -> LeaseConfig {
        LeaseConfig {
            initial: 8,
            max: 256,
            ttl: Duration::from_millis(100),
            max_keys: 100_000,
        }
    }
}
