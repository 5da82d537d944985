//! One shard of a compact table: open addressing with linear probing over
//! slots of the key's words and an 8-byte state, behind the shard's lock.
//!
//! # Layout
//!
//! A slot is `K::WORDS` 32-bit words of the key, then the state as two
//! 32-bit words (low, high): 12 bytes for an IPv4 key, 16 for a `u64`, 24
//! for a 16-byte key, with no padding, no control bytes and no index.
//! Every shard's slots are one run of the table's one array of words
//! (`Shard::table`), so that a large table is on as few huge pages as it
//! fits (`tollgate-pages`); a shard knows where its run starts. The
//! state is stored XORed with the algorithm's fresh state, so that a stored
//! 0 is the fresh state, which is also what a vacant slot holds: a slot is
//! vacant exactly when its stored state is 0. No key is kept whose state is
//! fresh (it is indistinguishable from no entry: [`Algorithm::is_idle`]),
//! so every key value, 0 included, can be stored, and no sentinel key is
//! reserved.
//!
//! A key's home slot is the hash's low 56 bits scaled to the slot count
//! (Lemire's multiply-shift, so the count need not be a power of two and
//! the table is sized to 8/7 of the keys it must hold); the top 8 bits
//! chose the shard. Probing is linear from the home slot to the key or to
//! the first vacant slot. A shard never fills its last slots (`limit`), so
//! a probe always ends.
//!
//! # Removal
//!
//! Backward-shift deletion (no tombstones): after a key leaves slot `h`,
//! each following entry of the run whose home is not cyclically within
//! `(h, j]` moves back into the hole, which moves on to its old slot. Every
//! key then stays reachable from its home without a vacant slot in
//! between, and probes never pass over dead slots, however many keys
//! came and went.
//!
//! # Memory order
//!
//! The words are `std`'s `AtomicU32`, read and written `Relaxed`, and are
//! only ever read or written while the shard's lock is held (a batched
//! check's prefetch reads nothing: [`Shard::prefetch`]). The lock's acquire
//! and release order every access that decides anything, so `Relaxed` is
//! enough; atomics (rather than plain words in the lock) are what lets the
//! words live in memory the core did not allocate without `unsafe`. They are `std`'s even under
//! `--cfg loom`: the lock is loom's there, and loom explores every order
//! of the holds; a loom atomic per word would only multiply the
//! interleavings inside a hold, which nothing outside it can observe.

use std::hash::BuildHasher;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

use super::key::FixedKey;
use crate::shard_lock::{ShardGuard, ShardLock};
use tollgate_pages::AtomicWords;

pub(super) type Hasher = foldhash::fast::RandomState;

/// One shard: its slots, and a lock over them that guards the count of
/// occupied ones.
pub(super) struct Shard<K> {
    occupied: ShardLock<usize>,
    /// Where its slots start in the table's words (one array for every
    /// shard, so that the table is on as few huge pages as it fits).
    base: usize,
    slots: usize,
    /// The most occupied slots: at least one stays vacant.
    limit: usize,
    key: PhantomData<fn() -> K>,
}

/// Where a probe for a key ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Probe {
    /// The key is in this slot.
    Found(usize),
    /// The key is absent; this is the vacant slot that ended the probe.
    Vacant(usize),
}

impl<K: FixedKey> Shard<K> {
    /// Words per slot: the key's, then the state's two.
    const SLOT: usize = K::WORDS + 2;

    /// The words of a table of `shards` shards of `slots` slots each, all
    /// vacant, or `None` if the allocator refuses the memory. The memory
    /// is written once here, so it is resident from the start; it is on
    /// huge pages where the kernel gives them (`tollgate-pages`).
    pub(super) fn table(shards: usize, slots: usize) -> Option<AtomicWords> {
        AtomicWords::zeroed(slots.max(2).checked_mul(Self::SLOT)?.checked_mul(shards)?)
    }

    /// The `index`-th shard of a [`table`](Self::table) of `slots`-slot
    /// shards, all vacant.
    pub(super) fn new(index: usize, slots: usize) -> Shard<K> {
        let slots = slots.max(2);
        Shard {
            occupied: ShardLock::new(0),
            base: index * slots * Self::SLOT,
            slots,
            limit: slots - (slots / 16).max(1),
            key: PhantomData,
        }
    }

    pub(super) fn slots(&self) -> usize {
        self.slots
    }

    /// The slot a key of hash `hash` probes first.
    #[inline(always)]
    pub(super) fn home(&self, hash: u64) -> usize {
        // The top 8 bits picked the shard; the other 56, shifted up, are
        // a fraction of the slot count.
        (((u128::from(hash << 8)) * self.slots as u128) >> 64) as usize
    }

    /// Asks the memory for the lines a probe from slot `home` reads: the
    /// home slot's word, one every cache line's worth (16 words) on, and
    /// the word `ahead` words on (where a mean probe ends, see `batch.rs`).
    /// A prefetch hint, not a load: it reads nothing, and does not hold
    /// its place in the core's reorder window until its line arrives.
    #[inline(always)]
    pub(super) fn prefetch(&self, table: &[AtomicU32], home: usize, ahead: usize) {
        let first = self.base + home * Self::SLOT;
        prefetch_index::prefetch_index(table, first);
        // A range of constant bounds for a key type (`step_by` over
        // `first..first + ahead` was left a loop where the caller's
        // closures did not inline the same way).
        for line in 1..ahead.div_ceil(16) {
            prefetch_index::prefetch_index(table, first + line * 16);
        }
        prefetch_index::prefetch_index(table, first + ahead);
    }

    /// Takes the shard's lock: its slots in `table`'s words.
    #[inline(always)]
    pub(super) fn lock<'a>(&'a self, table: &'a [AtomicU32]) -> Locked<'a, K> {
        Locked {
            occupied: self.occupied.lock(),
            words: &table[self.base..self.base + self.slots * Self::SLOT],
            shard: self,
        }
    }

    /// Between two holds of a sweep (see `ShardLock::let_waiters_in`).
    pub(super) fn let_waiters_in(&self) {
        self.occupied.let_waiters_in();
    }
}

/// A shard with its lock held: the only way to its slots.
pub(super) struct Locked<'a, K> {
    occupied: ShardGuard<'a, usize>,
    /// The shard's slots.
    words: &'a [AtomicU32],
    shard: &'a Shard<K>,
}

impl<K: FixedKey> Locked<'_, K> {
    #[inline(always)]
    fn slot(&self, slot: usize) -> &[AtomicU32] {
        let base = slot * Shard::<K>::SLOT;
        &self.words[base..base + Shard::<K>::SLOT]
    }

    #[inline(always)]
    fn next(&self, slot: usize) -> usize {
        if slot + 1 == self.shard.slots {
            0
        } else {
            slot + 1
        }
    }

    /// The stored state of `slot` (0: vacant).
    #[inline(always)]
    pub(super) fn stored(&self, slot: usize) -> u64 {
        let words = self.slot(slot);
        // Relaxed, here and below: under the shard's lock (module docs).
        let low = words[K::WORDS].load(Ordering::Relaxed);
        let high = words[K::WORDS + 1].load(Ordering::Relaxed);
        u64::from(low) | (u64::from(high) << 32)
    }

    /// Writes the stored state of an occupied `slot` (non-zero: a state
    /// that becomes fresh is removed instead).
    #[inline(always)]
    pub(super) fn set_stored(&mut self, slot: usize, stored: u64) {
        debug_assert_ne!(stored, 0, "compact table: slot {slot} set vacant in place");
        self.write_stored(slot, stored);
    }

    #[inline(always)]
    fn write_stored(&self, slot: usize, stored: u64) {
        let words = self.slot(slot);
        words[K::WORDS].store(stored as u32, Ordering::Relaxed);
        words[K::WORDS + 1].store((stored >> 32) as u32, Ordering::Relaxed);
    }

    fn key_at(&self, slot: usize) -> K {
        let words = self.slot(slot);
        let mut key = K::Words::default();
        for (word, stored) in key.as_mut().iter_mut().zip(&words[..K::WORDS]) {
            *word = stored.load(Ordering::Relaxed);
        }
        K::from_words(key)
    }

    /// Probes for `key` from its `home` slot.
    #[inline(always)]
    pub(super) fn find(&self, key: &K, home: usize) -> Probe {
        match self.probe(key, home) {
            (slot, 0) => Probe::Vacant(slot),
            (slot, _) => Probe::Found(slot),
        }
    }

    /// Probes for `key` from its `home` slot: the slot the probe ended at
    /// and its stored state, read on the way (0: vacant, the key is
    /// absent; otherwise the key's).
    ///
    /// The slots from `home` to the shard's end, then from its start, each
    /// run walked as exact chunks of a slot: no bounds check and no wrap
    /// test a slot.
    #[inline(always)]
    pub(super) fn probe(&self, key: &K, home: usize) -> (usize, u64) {
        let want = key.to_words();
        let want = want.as_ref();
        let (before, after) = self.words.split_at(home * Shard::<K>::SLOT);
        for (run, first) in [(after, home), (before, 0)] {
            for (at, words) in run.chunks_exact(Shard::<K>::SLOT).enumerate() {
                // Relaxed: under the shard's lock (module docs).
                let low = words[K::WORDS].load(Ordering::Relaxed);
                let high = words[K::WORDS + 1].load(Ordering::Relaxed);
                if (low == 0 && high == 0)
                    || want
                        .iter()
                        .zip(words)
                        .all(|(want, word)| word.load(Ordering::Relaxed) == *want)
                {
                    return (first + at, u64::from(low) | (u64::from(high) << 32));
                }
            }
        }
        unreachable!("compact table: a shard with no vacant slot")
    }

    /// Whether the shard has no room for another key.
    pub(super) fn is_full(&self) -> bool {
        *self.occupied >= self.shard.limit
    }

    /// Stores `key` with `stored` (non-zero) in the vacant `slot` its probe
    /// ended at. The caller checked [`is_full`](Self::is_full).
    pub(super) fn insert(&mut self, slot: usize, key: &K, stored: u64) {
        debug_assert!(
            !self.is_full() && self.stored(slot) == 0 && stored != 0,
            "compact table: insert at slot {slot} of {} with {} of {} occupied",
            self.shard.slots,
            *self.occupied,
            self.shard.limit
        );
        let words = self.slot(slot);
        for (stored, &word) in words[..K::WORDS].iter().zip(key.to_words().as_ref()) {
            stored.store(word, Ordering::Relaxed);
        }
        self.write_stored(slot, stored);
        *self.occupied += 1;
    }

    /// Removes the key in `slot`, shifting back the entries after it that
    /// may move (module docs, "Removal").
    pub(super) fn remove(&mut self, slot: usize, hasher: &Hasher) {
        let mut hole = slot;
        let mut at = slot;
        loop {
            at = self.next(at);
            let stored = self.stored(at);
            if stored == 0 {
                break;
            }
            let home = self.shard.home(hasher.hash_one(self.key_at(at)));
            // Stays if its home is cyclically within (hole, at]: moving it
            // to the hole would put it before its home.
            let stays = if hole <= at {
                hole < home && home <= at
            } else {
                hole < home || home <= at
            };
            if !stays {
                let (from, to) = (self.slot(at), self.slot(hole));
                for (to, from) in to.iter().zip(from) {
                    to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
                }
                hole = at;
            }
        }
        self.write_stored(hole, 0);
        *self.occupied -= 1;
    }

    /// A vacant slot, where a sweep starts (one always is: `limit`).
    pub(super) fn vacant(&self) -> usize {
        (0..self.shard.slots)
            .find(|&slot| self.stored(slot) == 0)
            .unwrap_or(0)
    }

    /// Steps `done..done + budget` (at most up to the slot count) of a
    /// sweep that started at the vacant slot `start`: step `k` judges the
    /// slot `k + 1` below `start`, cyclically, and removes its key if
    /// `idle` says its stored state is idle. Returns the next step and how
    /// many were removed.
    ///
    /// Downwards from a vacant slot, so that a removal shifts back only
    /// the entries after it in its run, which were judged already and
    /// stay, and no run reaches past the start into slots not yet judged:
    /// removing a whole idle run costs one step per key, where sweeping
    /// upwards would shift the rest of the run at every removal (quadratic
    /// in the run's length, and runs are long at a load of 7/8). A key
    /// inserted between two holds behind the sweep, or one that such an
    /// insert lets a removal shift behind it, waits for the next sweep.
    pub(super) fn sweep(
        &mut self,
        start: usize,
        done: usize,
        budget: usize,
        hasher: &Hasher,
        idle: impl Fn(u64) -> bool,
    ) -> (usize, usize) {
        let slots = self.shard.slots;
        let mut removed = 0;
        let end = done.saturating_add(budget).min(slots);
        for step in done..end {
            let slot = (start + slots - 1 - step) % slots;
            let stored = self.stored(slot);
            if stored != 0 && idle(stored) {
                self.remove(slot, hasher);
                removed += 1;
            }
        }
        (end, removed)
    }

    /// Occupied slots.
    #[cfg(test)]
    fn occupied(&self) -> usize {
        *self.occupied
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Each key's home slot, as the limiter computes it.
    fn homes_of(shard: &Shard<u64>, hasher: &Hasher, keys: &[u64]) -> HashMap<u64, usize> {
        keys.iter()
            .map(|&key| (key, shard.home(hasher.hash_one(key))))
            .collect()
    }

    #[test]
    fn keys_stay_reachable_through_removals_that_shift_runs_across_the_end() {
        // A small table where runs are long and wrap past the last slot.
        let hasher = Hasher::default();
        for seed in 0..200u64 {
            let words = Shard::<u64>::table(1, 13).expect("memory");
            let shard = Shard::<u64>::new(0, 13);
            let keys: Vec<u64> = (0..12).map(|i| seed * 1000 + i).collect();
            let homes = homes_of(&shard, &hasher, &keys);
            let mut live: HashMap<u64, u64> = HashMap::new();
            let mut locked = shard.lock(&words);
            for (n, &key) in keys.iter().enumerate().take(12) {
                if locked.is_full() {
                    break;
                }
                let Probe::Vacant(slot) = locked.find(&key, homes[&key]) else {
                    panic!("key {key} found before its insert");
                };
                locked.insert(slot, &key, n as u64 + 1);
                live.insert(key, n as u64 + 1);
            }
            // Remove every other key, then check every key is where it was.
            for (n, &key) in keys.iter().enumerate() {
                if n % 2 == 0 && live.contains_key(&key) {
                    let Probe::Found(slot) = locked.find(&key, homes[&key]) else {
                        panic!("seed {seed}: key {key} lost before its removal");
                    };
                    locked.remove(slot, &hasher);
                    live.remove(&key);
                }
                for (&other, &state) in &live {
                    match locked.find(&other, homes[&other]) {
                        Probe::Found(slot) => {
                            assert_eq!(locked.stored(slot), state);
                            // The probe reads the state it ends on.
                            assert_eq!(locked.probe(&other, homes[&other]), (slot, state));
                        }
                        Probe::Vacant(_) => panic!("seed {seed}: key {other} unreachable"),
                    }
                }
            }
            assert_eq!(locked.occupied(), live.len());
        }
    }

    #[test]
    fn a_sweep_removes_exactly_the_idle_keys() {
        for seed in 0..200 {
            sweep_removes_exactly_the_idle_keys(seed);
        }
    }

    fn sweep_removes_exactly_the_idle_keys(seed: u64) {
        let hasher = Hasher::default();
        let words = Shard::<u64>::table(1, 34).expect("memory");
        let shard = Shard::<u64>::new(0, 34);
        let keys: Vec<u64> = (seed * 100..seed * 100 + 30).collect();
        let homes = homes_of(&shard, &hasher, &keys);
        let mut locked = shard.lock(&words);
        for &key in &keys {
            let Probe::Vacant(slot) = locked.find(&key, homes[&key]) else {
                panic!("duplicate");
            };
            // Odd states are idle.
            locked.insert(slot, &key, key + 1);
        }
        let start = locked.vacant();
        let mut done = 0;
        let mut removed = 0;
        while done < shard.slots() {
            let (next, gone) = locked.sweep(start, done, 3, &hasher, |stored| stored % 2 == 1);
            done = next;
            removed += gone;
        }
        assert_eq!(removed, 15);
        for &key in &keys {
            let found = matches!(locked.find(&key, homes[&key]), Probe::Found(_));
            assert_eq!(found, key % 2 == 1, "key {key}");
        }
    }
}
