//! Batched checks: many keys in one call, each key's slots on their way
//! from memory before any of them is decided.
//!
//! # The model
//!
//! At 10^7 keys a table is far larger than the caches and the TLB, and a
//! check waits a whole memory latency (with its page walk) for its slot's
//! cache line; one check at a time, that wait is the check. A batch goes
//! for the memory's *throughput* of independent random reads instead (the
//! floor `benches/compact.rs` measures beside it). A group of [`BATCH`]
//! keys goes through three passes:
//!
//! 1. **hash**: every key's shard and home slot, and references to the
//!    words to touch (`Shard::lines` in `table.rs`: the home slot's first
//!    word and one a cache line on up to where a 4.5-slot probe ends, the
//!    mean for a known key at a load of 7/8), gathered into an array;
//! 2. **touch**: one `Relaxed` load of each of those words, in a loop of a
//!    load and an `xor` a word, so that the core's reorder window holds as
//!    many outstanding misses (and page walks) as the floor's loop does;
//! 3. **decide**: the group's keys one by one, each under its shard's
//!    lock, exactly as [`check`](CompactKeyedLimiter::check) would, on
//!    lines that are now in the cache.
//!
//! A table of at most `CACHED_TABLE_BYTES` (1 MiB) is hashed a group at a
//! time and decided without touches: where every line is a few ns away the
//! touches cost more than they hide.
//!
//! A key thus costs about the floor of its two lines plus the decision's
//! compute in cache; the two do not overlap, since a load holds its place
//! in the reorder window until its line arrives. A software prefetch would
//! not, where the TLB covers the table; on the reference host (4 KiB pages
//! under nested paging) it measured no faster, and it needs `unsafe`, which
//! the core forbids. The measurements, the profile and the figures:
//! `crates/core/BENCHMARKS.md`.
//!
//! # Exactness
//!
//! The batch reads the clock once, and decides its keys in the order
//! given, each at its own hold of its shard's lock: the decisions are
//! those of the same checks made one by one at that reading (a key named
//! twice is decided twice, the second time after the first). Each is
//! linearizable on its own, as a single check is: its reading precedes its
//! hold. The batch as a whole is not atomic: another thread's check can
//! land between two of its keys. The touches decide nothing: their values
//! are thrown away.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, Ordering};

use super::{CompactKeyedLimiter, FixedKey};
use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::keyed::entry::Mode;
use crate::sync::AtomicU64;

/// Keys whose slots are fetched together before they are decided: enough
/// that a group's one unhidden latency (its last line, waited for before
/// its first lock) is a few ns a key (`BENCHMARKS.md`: 16 and 64 measured
/// slower at 10^7 keys).
pub const BATCH: usize = 256;

/// The largest table decided key by key, without the passes: one that
/// fits a core's L2 cache (1 MiB here), whose lines are a few ns away.
const CACHED_TABLE_BYTES: usize = 1 << 20;

/// Where a known key's mean probe at a load of 7/8 (4.5 slots) reaches,
/// in half slots past the home slot's start: the start of its last slot,
/// which the touches reach.
const PROBE_HALF_SLOTS: usize = 7;

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
        let now = self.shared.clock.now();
        decisions.reserve(keys.len());
        if self.table_bytes() <= CACHED_TABLE_BYTES {
            // In cache, the touches only add work (module docs, "In cache").
            for group in keys.chunks(BATCH) {
                self.check_group::<0>(group, 0, now, decisions);
            }
            return;
        }
        // Words from a slot's first to the last slot of a mean probe, and
        // the touches that cover them: one a cache line (16 words), then
        // that word: 2 for `u32` and `u64` keys (10 and 14 words on), 3
        // for 16-byte keys (21) and `ShortKey` (31).
        let ahead = (K::WORDS + 2) * PROBE_HALF_SLOTS / 2;
        for group in keys.chunks(BATCH) {
            if ahead < 16 {
                self.check_group::<2>(group, ahead, now, decisions);
            } else {
                debug_assert!(ahead < 32, "a slot of {} words", K::WORDS + 2);
                self.check_group::<3>(group, ahead, now, decisions);
            }
        }
    }

    /// One group of at most [`BATCH`] keys, `TOUCHES` words touched a key
    /// (none: hashed first, then decided).
    #[inline(always)]
    fn check_group<const TOUCHES: usize>(
        &self,
        group: &[K],
        ahead: usize,
        now: Nanos,
        decisions: &mut Vec<Decision>,
    ) {
        let shared = &*self.shared;
        let mut homes = [(0usize, 0usize); BATCH];
        let homes = &mut homes[..group.len()];
        let unused: &AtomicU32 = shared.shards[0].lines::<1>(0, 0)[0];
        let mut lines = [[unused; TOUCHES]; BATCH];
        let lines = &mut lines[..group.len()];
        for ((home, line), key) in homes.iter_mut().zip(lines.iter_mut()).zip(group) {
            let hash = shared.hasher.hash_one(key);
            let shard = shared.shard_index(hash);
            let slot = shared.shards[shard].home(hash);
            *home = (shard, slot);
            *line = shared.shards[shard].lines(slot, ahead);
        }
        // Relaxed: the values are thrown away; only the loads matter. One
        // `black_box` for the group, so that no load waits on another.
        let mut touched = 0u32;
        for line in lines.iter() {
            for word in line {
                touched ^= word.load(Ordering::Relaxed);
            }
        }
        if TOUCHES > 0 {
            std::hint::black_box(touched);
        }
        for (&(shard, slot), key) in homes.iter().zip(group) {
            decisions.push(shared.decide_in(&shared.shards[shard], slot, key, 1, Mode::Check, now));
        }
    }
}
