//! Batched checks: many keys in one call, each key's lines asked for
//! from memory [`AHEAD`] keys before it is decided.
//!
//! # The model
//!
//! At 10^7 keys a table is far larger than the caches and the TLB, and a
//! check waits a whole memory latency (with its page walk) for its slot's
//! cache line; one check at a time, that wait is the check. A batch goes
//! for the memory's *throughput* of independent random reads instead (the
//! floor `benches/compact.rs` measures beside it). It decides its keys in
//! order, and before deciding key `i` (its shard's lock already taken: a
//! locked instruction waits for the instructions before it, and these need
//! not delay it) it hashes key `i + AHEAD` and prefetches the lines its
//! probe will read (`Shard::prefetch` in `table.rs`: the home slot's line
//! and every line up to where a 4.5-slot probe ends, the mean for a known
//! key at a load of 7/8). Streamed one key at a time rather than a group
//! at once, the prefetches arrive in time, and a decision's worth of
//! arithmetic hides their misses entirely (the bench's
//! `floor_u64_stream_huge` and `floor_u64_compute_stream_huge`). The
//! table is on huge pages where the kernel gives them (`tollgate-pages`),
//! so that a prefetch rarely waits for a page walk.
//!
//! A table in cache takes the same path: there a prefetch finds its line
//! at hand and costs an instruction.
//!
//! What bounds the batch on the reference host is the probe's own reads of
//! the fetched lines: the table's probe alone, prefetched as here but with
//! no lock and no decision, costs more than twice the memory's floor at
//! 10^7 keys (`floor_u64_probe_huge`), and the batch is within about a
//! tenth of a model check without the table's code
//! (`floor_u64_decide_huge`). The figures, and the variants of the probe
//! and of the check's code measured: `crates/core/BENCHMARKS.md`.
//!
//! # Exactness
//!
//! The batch reads the clock once, and decides its keys in the order
//! given, each at its own hold of its shard's lock: the decisions are
//! those of the same checks made one by one at that reading (a key named
//! twice is decided twice, the second time after the first). Each is
//! linearizable on its own, as a single check is: its reading precedes its
//! hold. The batch as a whole is not atomic: another thread's check can
//! land between two of its keys. The prefetches read and decide nothing.

use std::hash::BuildHasher;
use std::sync::atomic::AtomicU32;

use super::table::Shard;
use super::{CompactKeyedLimiter, FixedKey};
use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::keyed::entry::within_capacity;
use crate::sync::AtomicU64;

/// How many keys ahead of the one being decided a batched check asks the
/// memory for its lines: a miss takes about as long as this many
/// decisions, and the lines asked for and not yet used stay in the L1
/// cache (how it was chosen: `BENCHMARKS.md`, "Prefetch distance").
pub const AHEAD: usize = 32;

/// Where a known key's mean probe at a load of 7/8 (4.5 slots) reaches,
/// in half slots past the home slot's start: the start of its last slot,
/// whose line the prefetch asks for.
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
        let shared = &*self.shared;
        if within_capacity(&shared.algorithm, 1).is_err() {
            // No algorithm has a capacity below 1; were there one, each
            // key would get a single check's answer to a cost that does
            // not fit.
            decisions.extend(keys.iter().map(|key| self.check(key)));
            return;
        }
        let now = shared.clock.now();
        // Written over in place (`Shared::check_into` says why not pushed).
        let base = decisions.len();
        decisions.resize(base + keys.len(), PLACEHOLDER);
        let out = &mut decisions[base..];
        // Dereferenced once: the table's words are one array for every shard.
        let words: &[AtomicU32] = &shared.words;
        let home_of = |key: &K| {
            let hash = shared.hasher.hash_one(key);
            let shard: &Shard<K> = &shared.shards[shared.shard_index(hash)];
            (shard, shard.home(hash))
        };
        // Words from a slot's first to the last slot of a mean probe.
        let ahead = (K::WORDS + 2) * PROBE_HALF_SLOTS / 2;
        let prefetch = |(shard, home): (&Shard<K>, usize)| shard.prefetch(words, home, ahead);
        // Key `i`'s shard and home slot wait at `i % AHEAD`, written (and
        // its lines asked for) when key `i - AHEAD` was decided.
        let mut ring = [(&*shared.shards[0], 0usize); AHEAD];
        for (home, key) in ring.iter_mut().zip(keys) {
            *home = home_of(key);
            prefetch(*home);
        }
        for (i, (key, out)) in keys.iter().zip(out).enumerate() {
            let (shard, home) = ring[i % AHEAD];
            let locked = shard.lock(words);
            // Hashed and asked for under the lock, not before it: a locked
            // instruction waits for the instructions before it to retire,
            // and these need not delay it. They read nothing of the table.
            if let Some(later) = keys.get(i + AHEAD) {
                ring[i % AHEAD] = home_of(later);
                prefetch(ring[i % AHEAD]);
            }
            shared.check_into(locked, home, key, now, out);
        }
    }
}

/// What a batch's decisions are written over.
const PLACEHOLDER: Decision = Decision::allow(0, 0, 0);
