//! Batched checks: many keys in one call, each key's slot on its way from
//! memory before any of them is decided.
//!
//! At 10^7 keys a table is far larger than the caches, and a check waits
//! about 100 ns for its slot's cache line; one check at a time, that wait
//! is the check. A batch first hashes every key of a group of
//! [`BATCH`] and reads the first word of each home slot (the cache lines
//! are then fetched together, as many at once as the core has fill
//! buffers for), and only then decides the group's keys one by one, each
//! under its shard's lock, exactly as [`check`](CompactKeyedLimiter::check)
//! would.
//!
//! # Why a load and not `_mm_prefetch`
//!
//! The core crate is `#![forbid(unsafe_code)]` and `_mm_prefetch` is an
//! `unsafe fn` (it takes a raw pointer). A `Relaxed` load whose value goes
//! to [`black_box`](std::hint::black_box) sends the same request to
//! memory; on an out-of-order core the loads of one group do not wait for
//! one another (nothing depends on their values), so the group's misses
//! overlap as prefetches' would. What differs: a load holds its place in
//! the reorder buffer until its line arrives, so a group is kept to
//! [`BATCH`] keys, whose hashing fits the buffer with room to spare (32
//! measured no faster at 10^7 keys: `BENCHMARKS.md`).
//!
//! # Exactness
//!
//! The batch reads the clock once, and decides its keys in the order
//! given, each at its own hold of its shard's lock: the decisions are
//! those of the same checks made one by one at that reading (a key named
//! twice is decided twice, the second time after the first). Each is
//! linearizable on its own, as a single check is: its reading precedes its
//! hold. The batch as a whole is not atomic: another thread's check can
//! land between two of its keys.

use std::hash::BuildHasher;

use super::{CompactKeyedLimiter, FixedKey};
use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::keyed::entry::Mode;
use crate::sync::AtomicU64;

/// Keys whose slots are fetched together before they are decided.
pub const BATCH: usize = 16;

impl<K, A> CompactKeyedLimiter<K, A>
where
    K: FixedKey,
    A: Algorithm<Cell = AtomicU64>,
{
    /// Takes one permit for each of `keys`, in order, and appends one
    /// decision per key to `decisions` (which it does not clear): what
    /// [`check`](Self::check) on each key, one after the other, would
    /// have answered at the batch's clock reading. See the
    /// [module docs](super::batch) for how it hides the memory's latency.
    pub fn check_batch(&self, keys: &[K], decisions: &mut Vec<Decision>) {
        let shared = &*self.shared;
        let now = shared.clock.now();
        decisions.reserve(keys.len());
        for group in keys.chunks(BATCH) {
            let mut homes = [(0usize, 0usize); BATCH];
            for (home, key) in homes.iter_mut().zip(group) {
                let hash = shared.hasher.hash_one(key);
                let shard = shared.shard_index(hash);
                let slot = shared.shards[shard].home(hash);
                shared.shards[shard].touch(slot);
                *home = (shard, slot);
            }
            for (&(shard, slot), key) in homes.iter().zip(group) {
                decisions.push(shared.decide_in(
                    &shared.shards[shard],
                    slot,
                    key,
                    1,
                    Mode::Check,
                    now,
                ));
            }
        }
    }
}
