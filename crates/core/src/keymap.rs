//! The concurrent map behind [`KeyedLimiter`](crate::KeyedLimiter), reduced
//! to the four operations it needs, each with the exclusion it relies on:
//!
//! - [`KeyMap::get`]: shared access to one key's entry for as long as the
//!   returned guard lives (concurrent with other reads of it, exclusive with
//!   `update`, `upsert` and `retain` on it);
//! - [`KeyMap::update`] and [`KeyMap::upsert`]: exclusive access to one key;
//! - [`KeyMap::retain`]: exclusive access to each entry while it is judged.
//!
//! # Design: shards of `RwLock<hashbrown::HashTable>`
//!
//! The keys are split by hash over a power of two of shards, each a
//! read/write lock around a `hashbrown` table, cache-padded so that two
//! threads on keys of different shards never write the same line. A read
//! is one hash, one atomic read-modify-write on its shard's lock word and
//! its release; nothing else is shared.
//!
//! Chosen over `scc::HashMap`, which this map replaced: scc's bucket locks
//! bound a sweep's hold time well, but every scc read also takes an epoch
//! guard (a full barrier) to keep a concurrently resized array alive, and
//! frees removed entries only once every thread has moved past their epoch.
//! Measured in one loop at 1,000 keys with a constant time, an scc read
//! plus one compare-and-swap cost 11.9 ns, the same through dashmap (a
//! sharded `RwLock<hashbrown>`, as here) 7.3 ns. Here no memory outlives
//! the lock that guards it, so there is no deferred reclamation at all:
//! what a sweep removes is freed before it returns, on the sweeping thread.
//!
//! What the shards cost, and how it is bounded:
//!
//! - **A sweep** ([`KeyMap::retain`]) holds one shard's write lock for at
//!   most [`SWEEP_CHUNK`] slots at a time, then releases it, so a request
//!   never waits for more than one chunk of one shard. If the shard was
//!   resized between chunks the walk goes on at the same slot index in the
//!   new table: an entry may be judged twice or not at all in that sweep
//!   (never wrongly removed, since it is judged under the lock), and the
//!   next sweep sees it.
//! - **Shrinking**: a shard whose table is under a quarter full after a
//!   sweep is rehashed into one half full (and an empty shard frees its
//!   table), under its write lock: a hold of O(keys in the shard), only
//!   after the sweep removed most of them.
//! - **Growing** doubles one shard's table under its write lock, a hold of
//!   O(keys in the shard): with the default cap of 2^24 keys over 256
//!   shards, about 65,536 keys (one rehash of that many entries), and only
//!   for requests to that shard. `scc` grew incrementally; this map trades
//!   that for reads without barriers.
//!
//! # Layout: entries inline in the table
//!
//! An entry (key, tier pointer, state: 24 bytes for a `u64` key) lives in
//! its table slot. A table holds at most 7/8 of its power-of-two slots, so
//! 10^6 keys take 2^21 slots: 52.4 bytes per key (measured by the `memory`
//! bench), and even a 16-byte entry (governor's) takes 35.7. The one layout
//! under 32 bytes keeps 4-byte indices in the table and the entries in a
//! dense vector (31.5 bytes per key with a 4-byte tier id beside each), but
//! its key comparison is one more dependent load, in another cache line:
//! in the `layout` bench, a check at 10^6 keys took 70–87 ns against
//! 39–48 ns inline (about twice, over five runs). Checks are what the map is for; it keeps them fast.
//!
//! Not yet built: 16-byte entries (key and state, governor's size: 35.7
//! bytes per key at 10^6 keys instead of 52.4). The tier pointer would
//! leave the entry for per-shard tables, one per tier (the default's first,
//! probed first; override tiers after it, usually empty), each shard
//! holding its tiers' algorithms beside its tables under the same lock, so
//! that a known key still costs one probe and no extra cache line. What it
//! costs: without a per-entry generation, a change of quota can no longer
//! be picked up key by key; the first request to a shard after a change
//! re-resolves that shard's keys under its write lock (a hold of O(keys in
//! the shard), like growing it), carrying each state at that request's
//! time rather than at the key's own next request; and override-function
//! results beyond a few shared tiers need a side table of 24-byte entries.
//!
//! Under `--cfg loom` the locks are loom's (through [`crate::sync`]) and
//! there is one shard, so the model checks run this very code.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use crossbeam_utils::CachePadded;
use hashbrown::HashTable;

// A panic under a shard's lock (in an algorithm) leaves the table whole and
// every entry's state valid between transitions: a poisoned shard is used
// as it is.
use crate::sync::{RwLock, RwLockReadGuard, read, write};

type Hasher = foldhash::fast::RandomState;

/// Slots a sweep judges per hold of a shard's write lock: a request to that
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

/// A concurrent map from keys to entries.
pub(crate) struct KeyMap<K, V> {
    hasher: Hasher,
    shards: Box<[CachePadded<Shard<K, V>>]>,
}

/// One shard: its keys' entries, behind one lock.
type Shard<K, V> = RwLock<HashTable<(K, V)>>;

/// A key's entry, with its shard read-locked until this is dropped.
pub(crate) struct Found<'a, K, V> {
    table: RwLockReadGuard<'a, HashTable<(K, V)>>,
    index: usize,
}

impl<K, V> Found<'_, K, V> {
    /// The entry.
    #[inline(always)]
    pub(crate) fn value(&self) -> Option<&V> {
        // The slot was found full under this very guard, and nothing can
        // empty it while the guard lives: this is always `Some`.
        self.table.get_bucket(self.index).map(|(_, v)| v)
    }
}

/// What [`KeyMap::upsert`] found.
pub(crate) enum Slot<'a, V> {
    /// The key was there.
    Occupied(&'a mut V),
    /// The key was not there; the value passed to `upsert` is now its entry.
    Inserted(&'a V),
}

impl<K: Hash + Eq, V> KeyMap<K, V> {
    /// A map sized for at most `max_keys` live keys: enough shards that a
    /// full shard holds about 2^16 keys, between 8 and 256 of them.
    pub(crate) fn new(max_keys: usize) -> KeyMap<K, V> {
        let shards = if cfg!(loom) {
            1
        } else {
            (max_keys / KEYS_PER_SHARD_AT_CAP)
                .checked_next_power_of_two()
                .unwrap_or(MAX_SHARDS)
                .clamp(MIN_SHARDS, MAX_SHARDS)
        };
        KeyMap {
            hasher: Hasher::default(),
            shards: (0..shards)
                .map(|_| CachePadded::new(RwLock::new(HashTable::new())))
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
    fn shard(&self, hash: u64) -> &Shard<K, V> {
        // The length is a power of two: the mask keeps the index in range.
        &self.shards[(hash >> 32) as usize & (self.shards.len() - 1)]
    }

    /// Shared access to `key`'s entry for as long as the returned guard
    /// lives: the caller computes its answer with the shard read-locked and
    /// returns it directly, so that a decision is built in its caller's
    /// slot rather than moved out of a closure (a copy that stalled on
    /// store forwarding, about a quarter of a keyed check).
    #[inline(always)]
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<Found<'_, K, V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let table = read(self.shard(hash));
        let index = table.find_bucket_index(hash, |(k, _)| k.borrow() == key)?;
        Some(Found { table, index })
    }

    pub(crate) fn update<Q, R>(&self, key: &Q, updater: impl FnOnce(&K, &mut V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let mut table = write(self.shard(hash));
        table
            .find_mut(hash, |(k, _)| k.borrow() == key)
            .map(|(k, v)| updater(k, v))
    }

    /// Inserts `value` under `key` unless the key is there; then runs `then`
    /// on what is there, with the key held exclusively.
    pub(crate) fn upsert<R>(&self, key: K, value: V, then: impl FnOnce(Slot<'_, V>) -> R) -> R {
        let hash = self.hash(&key);
        let mut table = write(self.shard(hash));
        let hasher = &self.hasher;
        match table.entry(hash, |(k, _)| *k == key, |(k, _)| hasher.hash_one(k)) {
            hashbrown::hash_table::Entry::Occupied(mut occupied) => {
                then(Slot::Occupied(&mut occupied.get_mut().1))
            }
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                let occupied = vacant.insert((key, value));
                then(Slot::Inserted(&occupied.into_mut().1))
            }
        }
    }

    /// Removes every entry `keep` rejects, one [`SWEEP_CHUNK`] of one shard
    /// at a time, and gives back the memory of tables left mostly empty.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        for shard in self.shards.iter() {
            let mut start = 0;
            loop {
                let mut table = write(shard);
                let end = table.num_buckets().min(start + SWEEP_CHUNK);
                for index in start..end {
                    if let Ok(mut entry) = table.get_bucket_entry(index) {
                        let (k, v) = entry.get_mut();
                        if !keep(k, v) {
                            entry.remove();
                        }
                    }
                }
                if end >= table.num_buckets() {
                    self.shrink(&mut table);
                    break;
                }
                start = end;
            }
        }
    }

    /// Rehashes a table under a quarter full into one about half full; an
    /// empty one gives its memory back entirely.
    fn shrink(&self, table: &mut HashTable<(K, V)>) {
        if table.len() * 4 < table.capacity() {
            let hasher = &self.hasher;
            table.shrink_to(table.len() * 2, |(k, _)| hasher.hash_one(k));
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    fn full_map(keys: u64) -> KeyMap<u64, u64> {
        let map = KeyMap::new(1 << 24);
        for key in 0..keys {
            map.upsert(key, key * 10, |_| ());
        }
        map
    }

    fn value_of(map: &KeyMap<u64, u64>, key: u64) -> Option<u64> {
        map.get(&key).and_then(|found| found.value().copied())
    }

    #[test]
    fn shard_count_follows_the_key_cap() {
        assert_eq!(KeyMap::<u64, u64>::new(1 << 24).shard_count(), 256);
        assert_eq!(KeyMap::<u64, u64>::new(1 << 30).shard_count(), 256);
        assert_eq!(KeyMap::<u64, u64>::new(usize::MAX).shard_count(), 256);
        assert_eq!(KeyMap::<u64, u64>::new(1 << 20).shard_count(), 16);
        assert_eq!(KeyMap::<u64, u64>::new(1000).shard_count(), 8);
        assert_eq!(KeyMap::<u64, u64>::new(0).shard_count(), 8);
    }

    #[test]
    fn read_update_and_upsert_see_one_entry_per_key() {
        let map = full_map(1000);
        for key in 0..1000 {
            assert_eq!(value_of(&map, key), Some(key * 10));
        }
        assert_eq!(value_of(&map, 1000), None);
        assert_eq!(map.update(&7, |_, v| std::mem::replace(v, 1)), Some(70));
        assert_eq!(value_of(&map, 7), Some(1));
        assert_eq!(map.update(&1000, |_, v| *v), None);
        map.upsert(7, 99, |slot| match slot {
            Slot::Occupied(v) => *v += 1,
            Slot::Inserted(_) => panic!("key 7 is there"),
        });
        assert_eq!(value_of(&map, 7), Some(2));
        map.upsert(1000, 5, |slot| assert!(matches!(slot, Slot::Inserted(5))));
        assert_eq!(value_of(&map, 1000), Some(5));
    }

    #[test]
    fn retain_judges_every_entry_once_and_frees_emptied_tables() {
        let map = full_map(100_000);
        let mut judged = 0;
        map.retain(|k, _| {
            judged += 1;
            k % 1000 == 0
        });
        assert_eq!(judged, 100_000);
        for key in 0..100_000 {
            assert_eq!(value_of(&map, key).is_some(), key % 1000 == 0);
        }
        // 100 keys left over 256 shards: every table is at most half full.
        for shard in map.shards.iter() {
            let table = read(shard);
            assert!(
                table.len() * 2 <= table.capacity().max(1),
                "{}",
                table.len()
            );
        }
        map.retain(|_, _| false);
        assert!(map.shards.iter().all(|shard| read(shard).capacity() == 0));
    }

    /// Sweeps racing inserts that grow the shards between a sweep's chunks:
    /// no entry a sweep keeps is ever lost, and every rejected one goes.
    #[test]
    fn retain_racing_growth_loses_nothing_it_keeps() {
        const KEYS: u64 = 200_000;
        let map = KeyMap::<u64, u64>::new(1 << 16);
        let inserted = AtomicU64::new(0);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for key in 0..KEYS {
                    map.upsert(key, key, |_| ());
                    // Release: a sweeper that reads this count sees the key.
                    inserted.store(key + 1, Ordering::Release);
                }
            });
            scope.spawn(|| {
                loop {
                    // Acquire: pairs with the inserter's Release.
                    let before = inserted.load(Ordering::Acquire);
                    map.retain(|_, v| *v % 2 == 0);
                    // Every even key inserted before the sweep is still there.
                    for key in (0..before).step_by(997).filter(|k| k % 2 == 0) {
                        assert_eq!(value_of(&map, key), Some(key), "kept key {key} lost");
                    }
                    if before == KEYS {
                        break;
                    }
                }
            });
        });
        map.retain(|_, v| *v % 2 == 0);
        for key in 0..KEYS {
            let expected = (key % 2 == 0).then_some(key);
            assert_eq!(value_of(&map, key), expected);
        }
    }
}
