//! The memory's floors beside `compact.rs`'s batched checks: what a
//! batch of independent random reads costs on this host, and what the
//! compact table's layout alone costs without its lock and its decision
//! (the module docs of `compact.rs` say what each row is for).

use std::hint::black_box;
use std::net::Ipv6Addr;
use std::sync::atomic::{AtomicU32, Ordering};

use crossbeam_utils::CachePadded;
use tollgate::clock::Nanos;
use tollgate::keyed::compact::batch::AHEAD;
use tollgate::{Decision, Gcra};
use tollgate_pages::AtomicWords;

/// A plain array of 8-byte words as large as a table, written once so
/// that it is resident.
pub fn floor_array(bytes: usize) -> Vec<u64> {
    (0..(bytes / 8).max(1) as u64).collect()
}

/// The same bytes on huge pages where the kernel gives them, as the
/// compact table's shards are (`tollgate-pages`), written once.
pub fn floor_array_huge(bytes: usize) -> AtomicWords {
    let words = AtomicWords::zeroed((bytes / 4).max(1)).expect("memory");
    for (i, word) in words.iter().enumerate() {
        word.store(i as u32, Ordering::Relaxed);
    }
    words
}

/// A word of a floor's array.
pub trait Word {
    fn value(&self) -> u64;
}

impl Word for u64 {
    #[inline(always)]
    fn value(&self) -> u64 {
        *self
    }
}

impl Word for AtomicU32 {
    #[inline(always)]
    fn value(&self) -> u64 {
        // Relaxed: a plain load, as the table's words are read.
        u64::from(self.load(Ordering::Relaxed))
    }
}

/// The floor: one independent read per key from `array`, at the index
/// `spread(key)` scaled to its length (Lemire's multiply-shift, as the
/// table's home slot). The reads are summed, so no load's address waits
/// for another's value.
#[inline(never)]
pub fn floor_reads<W: Word, K>(array: &[W], keys: &[K], spread: impl Fn(&K) -> u64) -> usize {
    let len = array.len() as u128;
    let mut sum = 0u64;
    for key in keys {
        let at = ((u128::from(spread(key)) * len) >> 64) as usize;
        sum = sum.wrapping_add(array[at].value());
    }
    black_box(sum);
    keys.len()
}

/// The floor of a probe that reads two lines: as [`floor_reads`], each
/// key's word and the one 64 bytes on (the next cache line, or the array's
/// last word).
#[inline(never)]
pub fn floor_two_lines<W: Word, K>(array: &[W], keys: &[K], spread: impl Fn(&K) -> u64) -> usize {
    let len = array.len() as u128;
    let last = array.len() - 1;
    let line = 64 / size_of::<W>();
    let mut sum = 0u64;
    for key in keys {
        let at = ((u128::from(spread(key)) * len) >> 64) as usize;
        sum = sum
            .wrapping_add(array[at].value())
            .wrapping_add(array[(at + line).min(last)].value());
    }
    black_box(sum);
    keys.len()
}

/// Dependent arithmetic standing for a decision's compute where the
/// table is in cache (`COMPUTE_STEPS` multiply-xorshift steps, about as
/// long as `compact_batch` at 10^4 keys on the reference host).
#[inline(always)]
pub fn compute(mut x: u64) -> u64 {
    for _ in 0..COMPUTE_STEPS {
        x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (x >> 29);
    }
    x
}

pub const COMPUTE_STEPS: usize = 20;

/// Keys a group in [`floor_compute`]'s loads and prefetches.
const COMPUTE_GROUP: usize = 32;

/// How a [`floor_compute`] key's word reaches the cache before its compute.
#[derive(Clone, Copy)]
pub enum Fetch {
    /// No memory at all: the compute alone (each key's word is its index).
    None,
    /// The group's words loaded in a tight loop first, then each key's
    /// compute on its word: the batch's touch-then-decide.
    Loads,
    /// The next group's words prefetched (`prefetch-index`, `prefetcht0`)
    /// before this group's computes: a prefetch holds no place in the
    /// reorder window once issued, so its miss may overlap the computes.
    Prefetch,
}

/// One random read per key as [`floor_reads`], each feeding a chain of
/// [`compute`]: whether the memory's floor and the compute overlap (the
/// cost is the larger of the two) or add up, for each way of fetching.
#[inline(never)]
pub fn floor_compute<W: Word, K>(
    array: &[W],
    keys: &[K],
    spread: impl Fn(&K) -> u64,
    fetch: Fetch,
) -> usize {
    let len = array.len() as u128;
    let at = |key: &K| ((u128::from(spread(key)) * len) >> 64) as usize;
    let mut sum = 0u64;
    let mut touched = 0u64;
    let groups: Vec<&[K]> = keys.chunks(COMPUTE_GROUP).collect();
    if let (Fetch::Prefetch, Some(first)) = (fetch, groups.first()) {
        for key in *first {
            prefetch_index::prefetch_index(array, at(key));
        }
    }
    for (g, group) in groups.iter().enumerate() {
        match fetch {
            Fetch::None => {}
            Fetch::Loads => {
                for key in *group {
                    touched ^= array[at(key)].value();
                }
            }
            Fetch::Prefetch => {
                for key in groups.get(g + 1).copied().unwrap_or_default() {
                    prefetch_index::prefetch_index(array, at(key));
                }
            }
        }
        for key in *group {
            let word = match fetch {
                Fetch::None => at(key) as u64,
                Fetch::Loads | Fetch::Prefetch => array[at(key)].value(),
            };
            sum = compute(sum ^ word);
        }
    }
    black_box((sum, touched));
    keys.len()
}

/// [`compute`] of `STEPS` steps (0: none).
#[inline(always)]
fn compute_steps<const STEPS: usize>(mut x: u64) -> u64 {
    for _ in 0..STEPS {
        x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (x >> 29);
    }
    x
}

/// The floor's reads as `check_batch` asks for its lines: each key hashed
/// and its word prefetched [`AHEAD`] keys before it is read, from a ring
/// of the keys ahead, each read feeding `STEPS` steps of [`compute`]
/// chained from read to read (0: summed only). With no compute it tells
/// whether a prefetch delivers its line in time on this host; with a
/// decision's worth, whether that compute overlaps the misses (the row
/// then costs the larger of the two) or adds to them.
#[inline(never)]
pub fn floor_stream<const STEPS: usize, K>(
    array: &[AtomicU32],
    keys: &[K],
    spread: impl Fn(&K) -> u64,
) -> usize {
    let len = array.len() as u128;
    let at = |key: &K| ((u128::from(spread(key)) * len) >> 64) as usize;
    let mut ring = [0usize; AHEAD];
    for (slot, key) in ring.iter_mut().zip(keys) {
        *slot = at(key);
        prefetch_index::prefetch_index(array, *slot);
    }
    let mut sum = 0u64;
    for i in 0..keys.len() {
        let here = ring[i % AHEAD];
        if let Some(later) = keys.get(i + AHEAD) {
            ring[i % AHEAD] = at(later);
            prefetch_index::prefetch_index(array, ring[i % AHEAD]);
        }
        let word = u64::from(array[here].load(Ordering::Relaxed));
        sum = if STEPS == 0 {
            sum.wrapping_add(word)
        } else {
            compute_steps::<STEPS>(sum ^ word)
        };
    }
    black_box(sum);
    keys.len()
}

/// A key as the model's slots hold it: `KW` 4-byte words, as the table's
/// `FixedKey` stores it (2 for a `u64`, 4 for an IPv6 address).
pub trait ModelKey<const KW: usize>: Copy {
    fn words(&self) -> [u32; KW];
}

impl ModelKey<2> for u64 {
    #[inline(always)]
    fn words(&self) -> [u32; 2] {
        [*self as u32, (*self >> 32) as u32]
    }
}

impl ModelKey<4> for Ipv6Addr {
    #[inline(always)]
    fn words(&self) -> [u32; 4] {
        let bits = u128::from(*self);
        [0, 32, 64, 96].map(|shift| (bits >> shift) as u32)
    }
}

/// The compact table's layout for keys of `KW` words without its lock,
/// its decision and its shards: slots of the key's words and a two-word
/// state (here 1; 0 is vacant), `8/7` slots a key as the table (or another
/// load), linear probing from the home slot the table computes (the
/// hash's fraction of the slots), on huge pages where the kernel gives
/// them. A `u64` slot is 16 bytes (four to a line); an IPv6 slot 24 (some
/// straddle two lines).
pub struct ProbeModel<const KW: usize = 2> {
    words: AtomicWords,
    slots: usize,
    locks: Vec<CachePadded<AtomicU32>>,
}

impl<const KW: usize> ProbeModel<KW> {
    /// Words a slot: the key's, then the state's two.
    const SLOT: usize = KW + 2;

    /// Words from a slot's first to the last slot of a mean probe at 7/8
    /// (4.5 slots): where the table's prefetch asks up to.
    const AHEAD_WORDS: usize = Self::SLOT * 7 / 2;

    /// The model holding `keys` at a load of `keys / slots` (the table's:
    /// `(7, 8)`), each at the first vacant slot from its home, as the
    /// table inserts.
    pub fn new<K: ModelKey<KW>>(
        keys: &[K],
        spread: impl Fn(&K) -> u64,
        (keys_per, slots_per): (usize, usize),
    ) -> ProbeModel<KW> {
        let slots = (keys.len() * slots_per).div_ceil(keys_per).max(2);
        let words = AtomicWords::zeroed(slots * Self::SLOT).expect("memory");
        let locks = (0..LOCKS)
            .map(|_| CachePadded::new(AtomicU32::new(0)))
            .collect();
        let model = ProbeModel {
            words,
            slots,
            locks,
        };
        for key in keys {
            let mut slot = model.home(spread(key));
            while model.slot(slot)[KW].load(Ordering::Relaxed) != 0 {
                slot = (slot + 1) % slots;
            }
            let words = model.slot(slot);
            for (word, value) in words.iter().zip(key.words()) {
                word.store(value, Ordering::Relaxed);
            }
            words[KW].store(1, Ordering::Relaxed);
        }
        model
    }

    /// The words of `slot`.
    #[inline(always)]
    fn slot(&self, slot: usize) -> &[AtomicU32] {
        &self.words[slot * Self::SLOT..(slot + 1) * Self::SLOT]
    }

    #[inline(always)]
    fn home(&self, spread: u64) -> usize {
        ((u128::from(spread) * self.slots as u128) >> 64) as usize
    }

    /// The home slot's first state word: one read of the lines a probe
    /// reads.
    #[inline(always)]
    pub fn home_word<K>(&self, _key: K, home: usize) -> usize {
        self.slot(home)[KW].load(Ordering::Relaxed) as usize
    }

    /// The slot holding `key` (or the vacant one its probe ends at), read
    /// as `Locked::find` reads: the state's words, then the key's.
    #[inline(always)]
    pub fn probe<K: ModelKey<KW>>(&self, key: K, home: usize) -> usize {
        let want = key.words();
        let mut slot = home;
        loop {
            let words = self.slot(slot);
            let low = words[KW].load(Ordering::Relaxed);
            let high = words[KW + 1].load(Ordering::Relaxed);
            if low == 0 && high == 0 {
                return slot;
            }
            if want
                .iter()
                .zip(words)
                .all(|(want, word)| word.load(Ordering::Relaxed) == *want)
            {
                return slot;
            }
            slot = if slot + 1 == self.slots { 0 } else { slot + 1 };
        }
    }

    /// [`probe`](Self::probe), then the found slot's state written back
    /// changed (a state is never 0 here), as an admitted check writes it.
    #[inline(always)]
    pub fn probe_write<K: ModelKey<KW>>(&self, key: K, home: usize) -> usize {
        let slot = self.probe(key, home);
        let state = &self.slot(slot)[KW];
        state.store(
            state.load(Ordering::Relaxed).wrapping_add(2) | 1,
            Ordering::Relaxed,
        );
        slot
    }

    /// [`probe`](Self::probe) under one of [`LOCKS`] locks (`compare_exchange`
    /// to take, a release store to give back, as the table's shard lock),
    /// picked by the home slot: a locked instruction a key, no write.
    #[inline(always)]
    pub fn probe_locked<K: ModelKey<KW>>(&self, key: K, home: usize) -> usize {
        self.under_lock(home, || self.probe(key, home))
    }

    /// `f` under the lock of `home` (`compare_exchange` to take, a release
    /// store to give back, as the table's shard lock).
    #[inline(always)]
    fn under_lock<R>(&self, home: usize, f: impl FnOnce() -> R) -> R {
        let lock = &self.locks[home % LOCKS];
        // Acquire/Release: as a lock; uncontended here, one thread.
        while lock
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        let result = f();
        lock.store(0, Ordering::Release);
        result
    }
}

impl<const KW: usize> ProbeModel<KW> {
    /// A check of one permit as the table's, without the table's code: under
    /// a lock, the probe, GCRA's transition on the found slot's state (its
    /// two words, here a TAT never 0), the state written back, and the
    /// decision returned for the caller to store (48 bytes).
    #[inline(always)]
    pub fn decide<K: ModelKey<KW>>(
        &self,
        key: K,
        home: usize,
        gcra: &Gcra,
        now: Nanos,
    ) -> Decision {
        self.under_lock(home, || {
            let slot = self.probe(key, home);
            let words = &self.slot(slot)[KW..];
            let tat = u64::from(words[0].load(Ordering::Relaxed))
                | (u64::from(words[1].load(Ordering::Relaxed)) << 32);
            let (decision, next) = gcra.transition(tat, now, 1);
            if let Some(next) = next {
                words[0].store(next as u32, Ordering::Relaxed);
                words[1].store((next >> 32) as u32, Ordering::Relaxed);
            }
            decision
        })
    }
}

/// Locks of the model's [`probe_locked`](ProbeModel::probe_locked): as the
/// table's shards at 10^7 keys on 2 threads.
const LOCKS: usize = 32;

/// Checks of `keys` on the model as [`ProbeModel::decide`] makes them, in
/// calls of `call` keys, each decision stored in place in `decisions` (as
/// `check_batch` stores them) and counted if admitted: the batch's memory
/// operations and compute without the table's code around them.
pub fn floor_decide<const KW: usize, K: ModelKey<KW>>(
    model: &ProbeModel<KW>,
    keys: &[K],
    spread: impl Fn(&K) -> u64 + Copy,
    gcra: &Gcra,
    call: usize,
    decisions: &mut Vec<Decision>,
) -> usize {
    let now = Nanos::new(1);
    let mut admitted = 0;
    for group in keys.chunks(call) {
        decisions.clear();
        decisions.resize(group.len(), gcra.transition(0, now, 0).0);
        let mut out = decisions.iter_mut();
        floor_probe(model, group, spread, |model, key, home| {
            let decision = model.decide(key, home, gcra, now);
            if let Some(out) = out.next() {
                *out = decision;
            }
            0
        });
        admitted += decisions.iter().filter(|d| d.is_allowed()).count();
    }
    admitted
}

/// The layout's floor: each key's lines prefetched [`AHEAD`] keys ahead
/// as `check_batch` asks for them (the home slot's line, every line after
/// it up to the start of the 4.5th slot: 14 words on for a `u64`, 21 for
/// an IPv6 address), then `read` on the key and its home slot, with
/// no lock taken, no decision made and nothing written. With
/// [`ProbeModel::probe`], what any batched check on this layout costs at
/// least; with [`ProbeModel::home_word`], what the same lines cost when
/// only one word of them is read.
#[inline(never)]
pub fn floor_probe<const KW: usize, K: ModelKey<KW>>(
    model: &ProbeModel<KW>,
    keys: &[K],
    spread: impl Fn(&K) -> u64,
    mut read: impl FnMut(&ProbeModel<KW>, K, usize) -> usize,
) -> usize {
    let words: &[AtomicU32] = &model.words;
    let ahead = ProbeModel::<KW>::AHEAD_WORDS;
    let prefetch = |home: usize| {
        let first = home * ProbeModel::<KW>::SLOT;
        prefetch_index::prefetch_index(words, first);
        for line in 1..ahead.div_ceil(16) {
            prefetch_index::prefetch_index(words, first + line * 16);
        }
        prefetch_index::prefetch_index(words, first + ahead);
    };
    let mut ring = [0usize; AHEAD];
    for (slot, key) in ring.iter_mut().zip(keys) {
        *slot = model.home(spread(key));
        prefetch(*slot);
    }
    let mut sum = 0usize;
    for (i, &key) in keys.iter().enumerate() {
        let home = ring[i % AHEAD];
        if let Some(later) = keys.get(i + AHEAD) {
            ring[i % AHEAD] = model.home(spread(later));
            prefetch(ring[i % AHEAD]);
        }
        sum = sum.wrapping_add(read(model, key, home));
    }
    black_box(sum);
    keys.len()
}
