//! The concurrent map behind [`KeyedLimiter`](crate::KeyedLimiter), reduced
//! to the operations it needs, each with the exclusion it relies on:
//!
//! - [`KeyMap::get`]: exclusive access to one key's entry for as long as
//!   the returned guard lives (its shard is locked);
//! - [`KeyMap::write`]: exclusive access to one key's shard ([`ShardMut`]:
//!   find, insert, retag, promote);
//! - [`KeyMap::retain`]: exclusive access to each entry while it is judged.
//!
//! # The model: shards of `hashbrown` tables behind a spinlock
//!
//! Keys are split by hash over a power of two of shards, each a
//! cache-padded exclusive lock ([`ShardLock`]) around two `hashbrown`
//! tables. A known key's check is one hash, one atomic read-modify-write
//! on its shard's lock word, a plain load and store of the key's state and
//! a plain store to release: nothing else is shared, and no memory
//! outlives the lock that guards it (what a sweep removes is freed before
//! it returns, on the sweeping thread; no epochs, no deferred reclamation).
//!
//! Each shard holds a **tag** (for the limiter: the default algorithm of
//! the rules' generation) and two tables:
//!
//! - **hot**: `(key, cell)`, 16 bytes for a `u64` key and a one-word state,
//!   every entry running under the shard's tag;
//! - **other**: `(key, E)`, where `E` names what the key runs under (24
//!   bytes with a `u64` key): keys on an override, and keys not yet
//!   brought up to a change of rules. Empty, allocating nothing, while
//!   every key runs the default.
//!
//! A lookup probes the hot table, and the other one only on a miss when it
//! holds anything. A change of rules ([`ShardMut::retag`]) moves a shard's
//! hot entries to its other table on the shard's first request after it;
//! each key then re-resolves on its own next request and moves back
//! ([`ShardMut::promote`]).
//!
//! # Bounds
//!
//! - **A sweep** ([`KeyMap::retain`]) holds a shard's lock for at most
//!   [`SWEEP_CHUNK`] (16) slots of one table at a time: a request never
//!   waits for more. An entry moved by a resize between chunks may be
//!   judged twice or not at all in that sweep (never wrongly removed: it
//!   is judged under the lock); the next sweep sees it.
//! - **Shrinking, growing, retagging** each hold one shard's lock for
//!   O(keys in the shard): a table under a quarter full after a sweep is
//!   rehashed half full; a full one doubles (about 65,536 keys at the
//!   default cap of 2^24 over 256 shards).
//! - **Shards**: one per 2^16 keys of the cap, at most 16 per thread the
//!   machine runs, between 8 and 256 (`shard_count`).
//! - **Memory**: a table holds at most 7/8 of its power-of-two slots:
//!   35.7 bytes per `u64` key at 10^6 keys (the `memory` bench).
//!
//! Under `--cfg loom` the shard lock is loom's `Mutex` and there is one
//! shard, so the model checks run this very code.
//!
//! What this design replaced and why (`RwLock` shards, `scc::HashMap`),
//! the layouts measured and dropped, and the cachegrind profile against
//! governor: `crates/core/docs/keymap.md`.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use crossbeam_utils::CachePadded;
use hashbrown::HashTable;

// A panic under a shard's lock (in an algorithm) leaves the tables whole and
// every entry's state valid between transitions: a poisoned shard is used
// as it is.
use crate::shard_lock::{ShardGuard, ShardLock};

type Hasher = foldhash::fast::RandomState;

/// Slots a sweep judges per hold of a shard's lock: a request to that
/// shard waits at most this many idleness checks, short enough that it
/// spins for the lock rather than sleeping on it. Measured in the eviction
/// bench (10^6 idle keys, one thread checking meanwhile): p99.9 of a check
/// during the sweep 2.9 µs with 16, 7.9 to 12 µs with 64, 52 µs with 256 (a
/// reader that outlasts the lock's spinning sleeps), for the same sweep
/// time.
pub(crate) const SWEEP_CHUNK: usize = 16;

/// The most shards a map is split into.
const MAX_SHARDS: usize = 256;
/// The fewest: enough that two threads on different keys rarely share a
/// lock word.
const MIN_SHARDS: usize = 8;
/// Keys per shard aimed at when the cap on live keys is reached.
const KEYS_PER_SHARD_AT_CAP: usize = 1 << 16;
/// Shards per thread the machine can run at once: with `t` threads on
/// `16·t` shards, two threads share a lock word on 1 check in 16 or fewer.
const SHARDS_PER_THREAD: usize = 16;

/// The threads the machine runs at once, read once per process: std reads
/// the CPU affinity and the cgroup's quota files for it, which a limiter
/// made on a request's path (a server's per-request override) should not
/// pay each time.
pub(crate) fn machine_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// The shard count of a map capped at `max_keys` live keys on a machine
/// running `threads` threads at once: one shard per 2^16 keys of the cap,
/// and no more than 16 per thread, within 8 to 256.
///
/// Why the second bound: every shard's table doubles on its own, and each
/// doubling frees the table it replaces. With many small tables those
/// blocks sit below the allocator's mmap threshold and stay resident (glibc
/// keeps them in its heap), so 10^6 `u64` keys took 40.1 resident bytes
/// each over 256 shards against 35.9 over 32, for the same 35.7 heap bytes
/// (`examples/shard_residency.rs`: 39.3 at 256, 37.0 at 64, 35.9 at 32,
/// 35.8 at 8). More shards than threads buy nothing for contention, and
/// their lines compete with the table's for the cache. The cost: where few
/// threads hold a cap's worth of keys, a shard holds more of them, and
/// growing its table holds up requests to that shard longer (at the
/// default cap on 2 threads, 2^19 keys rehashed once per doubling, against
/// dashmap's 2^21 over its 8 shards there).
fn shard_count(max_keys: usize, threads: usize) -> usize {
    shards_for(max_keys, KEYS_PER_SHARD_AT_CAP, MIN_SHARDS, threads)
}

/// One shard per `keys_per_shard` keys of the cap `max_keys`, and no more
/// than 16 per thread of `threads`, within `min` to 256, a power of two:
/// the rule of [`shard_count`], shared with the compact table's.
pub(crate) fn shards_for(
    max_keys: usize,
    keys_per_shard: usize,
    min: usize,
    threads: usize,
) -> usize {
    let by_cap = (max_keys / keys_per_shard.max(1))
        .checked_next_power_of_two()
        .unwrap_or(MAX_SHARDS);
    let by_threads = threads
        .saturating_mul(SHARDS_PER_THREAD)
        .checked_next_power_of_two()
        .unwrap_or(MAX_SHARDS);
    by_cap.min(by_threads).clamp(min, MAX_SHARDS)
}

/// A concurrent map from keys to entries of two kinds: a *hot* entry is the
/// key and a cell `C`, and runs under its shard's tag `T`; an *other* entry
/// is the key and an `E` that says on its own what it runs under.
pub(crate) struct KeyMap<K, T, C, E> {
    hasher: Hasher,
    shards: Box<[Locked<K, T, C, E>]>,
}

/// A shard behind its lock, on cache lines of its own.
type Locked<K, T, C, E> = CachePadded<ShardLock<Shard<K, T, C, E>>>;

/// One shard: its tag and its keys' entries, behind one lock. A key is in
/// at most one of the two tables.
struct Shard<K, T, C, E> {
    tag: T,
    hot: HashTable<(K, C)>,
    other: HashTable<(K, E)>,
}

/// Where [`KeyMap::get`] found a key.
#[derive(Clone, Copy)]
enum Place {
    Hot(usize),
    Other(usize),
}

/// A key's entry, with its shard locked until this is dropped.
pub(crate) struct Found<'a, K, T, C, E> {
    shard: ShardGuard<'a, Shard<K, T, C, E>>,
    place: Place,
}

/// A key's entry, held exclusively (its shard is locked).
pub(crate) enum Held<'a, T, C, E> {
    /// A hot entry's cell, with the tag it runs under.
    Hot(&'a T, &'a mut C),
    /// Any other entry.
    Other(&'a mut E),
}

/// A key's entry, with its shard locked.
pub(crate) enum HeldMut<'a, K, T, C, E> {
    /// A hot entry's cell, with the tag it runs under.
    Hot(&'a T, &'a mut C),
    /// Any other entry, with its key and its shard's tag.
    Other(&'a T, &'a K, &'a mut E),
}

impl<K, T, C, E> Found<'_, K, T, C, E> {
    /// The entry.
    #[inline(always)]
    pub(crate) fn held(&mut self) -> Option<Held<'_, T, C, E>> {
        // The slot was found full under this very guard, and nothing can
        // empty it while the guard lives: this is always `Some`.
        let shard = &mut *self.shard;
        match self.place {
            Place::Hot(index) => shard
                .hot
                .get_bucket_mut(index)
                .map(|(_, cell)| Held::Hot(&shard.tag, cell)),
            Place::Other(index) => shard
                .other
                .get_bucket_mut(index)
                .map(|(_, entry)| Held::Other(entry)),
        }
    }
}

/// One shard, locked: the slow paths' view of it.
pub(crate) struct ShardMut<'a, K, T, C, E> {
    shard: ShardGuard<'a, Shard<K, T, C, E>>,
    hasher: &'a Hasher,
}

impl<K: Hash + Eq, T, C, E> ShardMut<'_, K, T, C, E> {
    /// The tag every hot entry runs under.
    pub(crate) fn tag(&self) -> &T {
        &self.shard.tag
    }

    /// Replaces the tag. Every hot entry ran under the old one: each becomes
    /// an other entry, made by `demote` from the old tag and its cell. A
    /// hold of O(hot keys in the shard), like growing its table.
    pub(crate) fn retag(&mut self, tag: T, mut demote: impl FnMut(&T, C) -> E) {
        let hasher = self.hasher;
        let shard = &mut *self.shard;
        let old = std::mem::replace(&mut shard.tag, tag);
        shard
            .other
            .reserve(shard.hot.len(), |(k, _)| hasher.hash_one(k));
        for (key, cell) in shard.hot.drain() {
            let entry = demote(&old, cell);
            shard
                .other
                .insert_unique(hasher.hash_one(&key), (key, entry), |(k, _)| {
                    hasher.hash_one(k)
                });
        }
    }

    /// `key`'s entry, if it has one.
    pub(crate) fn find<Q>(&mut self, key: &Q) -> Option<HeldMut<'_, K, T, C, E>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let shard = &mut *self.shard;
        if let Some((_, cell)) = shard.hot.find_mut(hash, |(k, _)| k.borrow() == key) {
            return Some(HeldMut::Hot(&shard.tag, cell));
        }
        shard
            .other
            .find_mut(hash, |(k, _)| k.borrow() == key)
            .map(|(k, entry)| HeldMut::Other(&shard.tag, &*k, entry))
    }

    /// Moves `key`'s other entry to the hot table, its cell made by `cell`
    /// from the entry; returns it, with the tag it now runs under.
    pub(crate) fn promote<Q>(&mut self, key: &Q, cell: impl FnOnce(E) -> C) -> Option<(&T, &mut C)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let shard = &mut *self.shard;
        let (key, entry) = shard
            .other
            .find_entry(hash, |(k, _)| k.borrow() == key)
            .ok()?
            .remove()
            .0;
        Some(Self::put_hot(shard, self.hasher, key, cell(entry)))
    }

    /// Adds a hot entry for `key`, which has none.
    pub(crate) fn insert_hot(&mut self, key: K, cell: C) -> (&T, &mut C) {
        Self::put_hot(&mut self.shard, self.hasher, key, cell)
    }

    /// Adds an other entry for `key`, which has none.
    pub(crate) fn insert_other(&mut self, key: K, entry: E) -> &mut E {
        let hasher = self.hasher;
        let hash = hasher.hash_one(&key);
        &mut self
            .shard
            .other
            .insert_unique(hash, (key, entry), |(k, _)| hasher.hash_one(k))
            .into_mut()
            .1
    }

    fn put_hot<'s>(
        shard: &'s mut Shard<K, T, C, E>,
        hasher: &Hasher,
        key: K,
        cell: C,
    ) -> (&'s T, &'s mut C) {
        let hash = hasher.hash_one(&key);
        let (_, cell) = shard
            .hot
            .insert_unique(hash, (key, cell), |(k, _)| hasher.hash_one(k))
            .into_mut();
        (&shard.tag, cell)
    }
}

impl<K: Hash + Eq, T, C, E> KeyMap<K, T, C, E> {
    /// A map sized for at most `max_keys` live keys on this machine (see
    /// [`shard_count`]), each shard tagged by `tag()`.
    pub(crate) fn new(max_keys: usize, tag: impl Fn() -> T) -> KeyMap<K, T, C, E> {
        let shards = if cfg!(loom) {
            1
        } else {
            shard_count(max_keys, machine_threads())
        };
        KeyMap {
            hasher: Hasher::default(),
            shards: (0..shards)
                .map(|_| {
                    CachePadded::new(ShardLock::new(Shard {
                        tag: tag(),
                        hot: HashTable::new(),
                        other: HashTable::new(),
                    }))
                })
                .collect(),
        }
    }

    /// How many shards the keys are split over.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    #[inline]
    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The shard of `hash`: bits 32 and up, below hashbrown's 7-bit tag (the
    /// top bits) and above the bits it indexes a table of < 2^32 slots by,
    /// so that a shard's keys still spread over its table.
    #[inline]
    fn shard(&self, hash: u64) -> &ShardLock<Shard<K, T, C, E>> {
        // The length is a power of two: the mask keeps the index in range.
        &self.shards[(hash >> 32) as usize & (self.shards.len() - 1)]
    }

    /// Exclusive access to `key`'s entry for as long as the returned guard
    /// lives: the caller computes its answer with the shard locked and
    /// returns it directly, so that a decision is built in its caller's
    /// slot rather than moved out of a closure (a copy that stalled on
    /// store forwarding, about a quarter of a keyed check). The hot table
    /// is probed first; the other one only if it holds anything.
    #[inline(always)]
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<Found<'_, K, T, C, E>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let shard = self.shard(hash).lock();
        let place = match shard
            .hot
            .find_bucket_index(hash, |(k, _)| k.borrow() == key)
        {
            Some(index) => Place::Hot(index),
            None if shard.other.is_empty() => return None,
            None => Place::Other(
                shard
                    .other
                    .find_bucket_index(hash, |(k, _)| k.borrow() == key)?,
            ),
        };
        Some(Found { shard, place })
    }

    /// Exclusive access to `key`'s shard.
    pub(crate) fn write<Q>(&self, key: &Q) -> ShardMut<'_, K, T, C, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        ShardMut {
            shard: self.shard(self.hash(key)).lock(),
            hasher: &self.hasher,
        }
    }

    /// Removes every entry `keep` rejects, one [`SWEEP_CHUNK`] of one
    /// table of one shard at a time, and gives back the memory of tables
    /// left mostly empty.
    pub(crate) fn retain(&self, mut keep: impl FnMut(HeldMut<'_, K, T, C, E>) -> bool) {
        for shard in self.shards.iter() {
            let mut start = 0;
            // The hot table, then the other one.
            let mut hot = true;
            loop {
                // A request waiting for this shard goes first: a spinlock
                // taken again at once would be won back every time.
                shard.let_waiters_in();
                let mut guard = shard.lock();
                let Shard {
                    tag,
                    hot: hot_table,
                    other,
                } = &mut *guard;
                let buckets = if hot {
                    hot_table.num_buckets()
                } else {
                    other.num_buckets()
                };
                let end = buckets.min(start + SWEEP_CHUNK);
                for index in start..end {
                    if hot {
                        if let Ok(mut entry) = hot_table.get_bucket_entry(index) {
                            if !keep(HeldMut::Hot(tag, &mut entry.get_mut().1)) {
                                entry.remove();
                            }
                        }
                    } else if let Ok(mut entry) = other.get_bucket_entry(index) {
                        let (k, e) = entry.get_mut();
                        if !keep(HeldMut::Other(tag, &*k, e)) {
                            entry.remove();
                        }
                    }
                }
                start = end;
                if end >= buckets {
                    if hot {
                        hot = false;
                        start = 0;
                        continue;
                    }
                    self.shrink(&mut guard);
                    break;
                }
            }
        }
    }

    /// Rehashes a table under a quarter full into one about half full; an
    /// empty one gives its memory back entirely.
    fn shrink(&self, shard: &mut Shard<K, T, C, E>) {
        let hasher = &self.hasher;
        if shard.hot.len() * 4 < shard.hot.capacity() {
            shard
                .hot
                .shrink_to(shard.hot.len() * 2, |(k, _)| hasher.hash_one(k));
        }
        if shard.other.len() * 4 < shard.other.capacity() {
            shard
                .other
                .shrink_to(shard.other.len() * 2, |(k, _)| hasher.hash_one(k));
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// Tag: a number added to every hot cell's value; other entries hold
    /// their value whole.
    type Map = KeyMap<u64, u64, u64, u64>;

    fn full_map(keys: u64) -> Map {
        let map = KeyMap::new(1 << 24, || 0);
        for key in 0..keys {
            map.write(&key).insert_hot(key, key * 10);
        }
        map
    }

    fn value_of(map: &Map, key: u64) -> Option<u64> {
        map.get(&key).and_then(|mut found| {
            found.held().map(|held| match held {
                Held::Hot(tag, cell) => tag + *cell,
                Held::Other(entry) => *entry,
            })
        })
    }

    fn judged(held: &HeldMut<'_, u64, u64, u64, u64>) -> u64 {
        match held {
            HeldMut::Hot(tag, cell) => **tag + **cell,
            HeldMut::Other(_, _, entry) => **entry,
        }
    }

    #[test]
    fn shard_count_follows_the_key_cap_and_the_threads() {
        // By the cap, on a machine with threads to spare.
        assert_eq!(shard_count(1 << 24, 64), 256);
        assert_eq!(shard_count(1 << 30, 64), 256);
        assert_eq!(shard_count(usize::MAX, usize::MAX), 256);
        assert_eq!(shard_count(1 << 20, 64), 16);
        assert_eq!(shard_count(1000, 64), 8);
        assert_eq!(shard_count(0, 64), 8);
        // By the threads, under a large cap: 16 per thread, at least 8.
        assert_eq!(shard_count(1 << 24, 2), 32);
        assert_eq!(shard_count(1 << 24, 3), 64);
        assert_eq!(shard_count(1 << 24, 1), 16);
        assert_eq!(shard_count(1 << 20, 2), 16);
        // The map itself uses this machine's count.
        assert_eq!(
            Map::new(1 << 24, || 0).shard_count(),
            shard_count(1 << 24, machine_threads())
        );
    }

    #[test]
    fn read_find_and_insert_see_one_entry_per_key() {
        let map = full_map(1000);
        for key in 0..1000 {
            assert_eq!(value_of(&map, key), Some(key * 10));
        }
        assert_eq!(value_of(&map, 1000), None);
        match map.write(&7).find(&7) {
            Some(HeldMut::Hot(_, cell)) => *cell = 1,
            _ => panic!("key 7 is hot"),
        }
        assert_eq!(value_of(&map, 7), Some(1));
        assert!(map.write(&1000).find(&1000).is_none());
        assert_eq!(*map.write(&1000).insert_other(1000, 5), 5);
        assert_eq!(value_of(&map, 1000), Some(5));
        assert!(matches!(
            map.write(&1000).find(&1000),
            Some(HeldMut::Other(_, 1000, 5))
        ));
    }

    #[test]
    fn retag_demotes_every_hot_entry_under_the_old_tag_and_promote_brings_one_back() {
        let map = full_map(1000);
        for shard in map.shards.iter() {
            let mut shard = ShardMut {
                shard: shard.lock(),
                hasher: &map.hasher,
            };
            // The new tag would change every hot value: the old one is
            // folded into each demoted entry, so no value changes.
            shard.retag(1_000_000, |old, cell| old + cell);
            assert_eq!(*shard.tag(), 1_000_000);
        }
        for key in 0..1000 {
            assert_eq!(value_of(&map, key), Some(key * 10));
            assert!(matches!(
                map.write(&key).find(&key),
                Some(HeldMut::Other(..))
            ));
        }
        let mut shard = map.write(&7);
        let (tag, cell) = shard.promote(&7, |entry| entry + 1).unwrap();
        assert_eq!((*tag, *cell), (1_000_000, 71));
        assert!(shard.promote(&7, |entry| entry).is_none(), "moved once");
        drop(shard);
        assert_eq!(value_of(&map, 7), Some(1_000_071));
        assert!(matches!(map.write(&7).find(&7), Some(HeldMut::Hot(..))));
    }

    #[test]
    fn retain_judges_every_entry_once_and_frees_emptied_tables() {
        // Odd keys in the other tables, even ones hot.
        let map = Map::new(1 << 24, || 0);
        for key in 0..100_000 {
            let mut shard = map.write(&key);
            if key % 2 == 1 {
                shard.insert_other(key, key * 10);
            } else {
                shard.insert_hot(key, key * 10);
            }
        }
        let mut judged_count = 0;
        map.retain(|held| {
            judged_count += 1;
            judged(&held) % 10_000 == 0
        });
        assert_eq!(judged_count, 100_000);
        for key in 0..100_000 {
            assert_eq!(value_of(&map, key).is_some(), key % 1000 == 0);
        }
        // 100 keys left over the shards: every table is at most half full.
        for shard in map.shards.iter() {
            let shard = shard.lock();
            for (len, capacity) in [
                (shard.hot.len(), shard.hot.capacity()),
                (shard.other.len(), shard.other.capacity()),
            ] {
                assert!(len * 2 <= capacity.max(1), "{len}");
            }
        }
        map.retain(|_| false);
        assert!(map.shards.iter().all(|shard| {
            let shard = shard.lock();
            shard.hot.capacity() == 0 && shard.other.capacity() == 0
        }));
    }

    /// Sweeps racing inserts that grow the shards between a sweep's chunks:
    /// no entry a sweep keeps is ever lost, and every rejected one goes.
    #[test]
    fn retain_racing_growth_loses_nothing_it_keeps() {
        const KEYS: u64 = 200_000;
        let map = Map::new(1 << 16, || 0);
        let inserted = AtomicU64::new(0);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for key in 0..KEYS {
                    // Odd keys in the other tables, even ones hot.
                    let mut shard = map.write(&key);
                    if key % 2 == 0 {
                        shard.insert_hot(key, key);
                    } else {
                        shard.insert_other(key, key);
                    }
                    drop(shard);
                    // Release: a sweeper that reads this count sees the key.
                    inserted.store(key + 1, Ordering::Release);
                }
            });
            scope.spawn(|| {
                loop {
                    // Acquire: pairs with the inserter's Release.
                    let before = inserted.load(Ordering::Acquire);
                    map.retain(|held| judged(&held) % 4 < 2);
                    // Every kept key inserted before the sweep is still there.
                    for key in (0..before).step_by(997).filter(|k| k % 4 < 2) {
                        assert_eq!(value_of(&map, key), Some(key), "kept key {key} lost");
                    }
                    if before == KEYS {
                        break;
                    }
                }
            });
        });
        map.retain(|held| judged(&held) % 4 < 2);
        for key in 0..KEYS {
            let expected = (key % 4 < 2).then_some(key);
            assert_eq!(value_of(&map, key), expected);
        }
    }
}
