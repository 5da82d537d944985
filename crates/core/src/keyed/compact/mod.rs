//! [`CompactKeyedLimiter`]: one rate-limit state per fixed-size key, in a
//! table sized once for `max_keys` keys, at about 18 bytes a `u64` key.
//!
//! # The model
//!
//! For 10^7 to 10^8 live keys of a fixed size (client addresses, numeric
//! ids; see [`FixedKey`], and [`ShortKey`] for strings of up to 27 bytes)
//! under one quota, [`Gcra`] or [`FixedWindow`](crate::FixedWindow). Each
//! shard is a run of slots (the key's words, then its 8-byte state) in the
//! table's one array, probed linearly from the key's hashed home slot
//! (`table.rs`), behind one lock per shard.
//! [`check_batch`](CompactKeyedLimiter::check_batch) decides many keys in
//! one call, each key's lines asked for from memory while the keys before
//! it are decided ([`batch`]).
//!
//! # The guarantees
//!
//! - **Decisions** are exactly those of [`KeyedLimiter`](crate::KeyedLimiter)
//!   under the same quota, linearizable per key: each is taken under its
//!   shard's lock, on a clock reading taken before it; a new key is found
//!   absent and inserted in one hold (`crates/loom/tests/it/loom_compact.rs`
//!   models the races).
//! - **Memory** is [`table_bytes`](CompactKeyedLimiter::table_bytes), fixed
//!   at build, whatever the keys do: `max_keys · 8/7` slots of 12 (`u32`,
//!   `Ipv4Addr`), 16 (`u64`), 24 (16-byte keys) or 36 bytes (`ShortKey`),
//!   in one array on transparent huge pages where the kernel gives them
//!   (`tollgate-pages`; its last 2 MiB page may be resident whole, at most
//!   1/32 more).
//! - **No live key is evicted.** A key whose state is indistinguishable
//!   from a fresh one is removed by a sweep. While the table (or a key's
//!   shard, at 15/16 of its slots) is full, new keys share one
//!   **overflow state** under the same quota until a sweep frees room:
//!   refused or admitted on the quota, never admitted unlimited. Idleness
//!   and [clocks that go back](super#clocks-that-go-back): as `KeyedLimiter`'s.
//!
//! # Parameters
//!
//! - `max_keys` ([`builder`](CompactKeyedLimiter::builder)): the table's
//!   size; there is no default, and [`build`](CompactKeyedBuilder::build)
//!   refuses a size it cannot address or allocate. It also sets the load:
//!   full, a table is at 7/8 and a probe reads 4.5 slots on average. A
//!   table built for more keys than it will hold probes fewer (at 7/4 of
//!   them, a load of 1/2: 1.5 slots, 32 bytes a `u64` key) and its checks
//!   are faster, in cache and out (`crates/core/BENCHMARKS.md`); the
//!   bytes are the price.
//! - [`sweep_every`](CompactKeyedBuilder::sweep_every): by default, every
//!   second on a background thread; [`SWEEP_CHUNK`] (16) slots a hold.
//! - [`clock`](CompactKeyedBuilder::clock): by default, the
//!   [`QuantaClock`](crate::QuantaClock).
//! - Shards: 16 per thread the machine runs (a power of two, at most 256; one
//!   per 4,096 keys of a small cap), picked by the key's seeded foldhash.
//!
//! What it does not do (per-key overrides, observers, lists and penalties,
//! [`WarmUp`](crate::WarmUp), keys of any size) stays with `KeyedLimiter`.
//!
//! # Example
//!
//! ```
//! use std::net::Ipv4Addr;
//! use tollgate::keyed::compact::CompactKeyedLimiter;
//! use tollgate::{Gcra, Quota};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let per_ip: CompactKeyedLimiter<Ipv4Addr> =
//!     CompactKeyedLimiter::builder(Gcra::new(Quota::per_second(1)?)?, 1_000_000).build()?;
//! let mut decisions = Vec::new();
//! per_ip.check_batch(&[Ipv4Addr::new(192, 0, 2, 1); 2], &mut decisions);
//! assert!(decisions[0].is_allowed() && decisions[1].is_denied());
//! # Ok(())
//! # }
//! ```
//!
//! Why it is built this way: `crates/core/docs/compact.md`; its speed against
//! the memory's floor: `crates/core/BENCHMARKS.md`.

pub mod batch;
mod budget;
mod key;
mod table;

use std::fmt;
use std::hash::BuildHasher;
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

pub use self::budget::CompactReserved;
pub use self::key::{FixedKey, KeyTooLong, ShortKey};
use self::table::{Hasher, Shard};
use super::entry::{Answer, Mode, run, within_capacity};
use super::{DEFAULT_SWEEP_EVERY, KeyedStats, sweeper};
use crate::algorithm::{Algorithm, Gcra};
use crate::clock::{Clock, ClockSource, Nanos};
use crate::decision::{CostError, Decision};
use crate::keymap;
use crate::sync::{AtomicU64, AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;
use tollgate_pages::AtomicWords;

/// Slots a sweep judges per hold of a shard's lock (as `KeyedLimiter`'s:
/// a request waits for at most this many judgments and their removals).
pub const SWEEP_CHUNK: usize = 16;
/// Keys of the cap per shard below which a table takes fewer shards.
const KEYS_PER_SMALL_SHARD: usize = 4096;

/// A rate limiter with one state per fixed-size key, in a table sized once
/// for `max_keys` keys; clones share everything. See the
/// [module docs](self) for the memory and the guarantees.
///
/// # Examples
///
/// ```
/// use std::net::Ipv4Addr;
/// use tollgate::{Gcra, Quota};
/// use tollgate::keyed::compact::CompactKeyedLimiter;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let per_ip: CompactKeyedLimiter<Ipv4Addr> =
///     CompactKeyedLimiter::builder(Gcra::new(Quota::per_second(2)?)?, 1_000_000).build()?;
/// let client = Ipv4Addr::new(192, 0, 2, 1);
/// assert!(per_ip.check(&client).is_allowed());
/// assert!(per_ip.check(&client).is_allowed());
/// assert!(per_ip.check(&client).is_denied());
///
/// // Many keys in one call, decided as if one by one.
/// let mut decisions = Vec::new();
/// per_ip.check_batch(&[client, Ipv4Addr::new(192, 0, 2, 2)], &mut decisions);
/// assert!(decisions[0].is_denied() && decisions[1].is_allowed());
/// # Ok(())
/// # }
/// ```
pub struct CompactKeyedLimiter<K, A = Gcra> {
    shared: Arc<Shared<K, A>>,
}

/// Builds a [`CompactKeyedLimiter`].
pub struct CompactKeyedBuilder<K, A> {
    algorithm: A,
    max_keys: usize,
    clock: ClockSource,
    sweep_every: Option<Duration>,
    key: std::marker::PhantomData<fn() -> K>,
}

/// A table size [`CompactKeyedBuilder::build`] refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableSizeError {
    max_keys: usize,
}

impl fmt::Display for TableSizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a compact keyed table for {} keys cannot be allocated (from 1 key to what the memory holds)",
            self.max_keys
        )
    }
}

impl std::error::Error for TableSizeError {}

struct Shared<K, A> {
    algorithm: A,
    /// The algorithm's fresh state: slots store a state XORed with it.
    fresh: u64,
    clock: ClockSource,
    hasher: Hasher,
    /// Every shard's slots, one array (`table.rs`).
    words: AtomicWords,
    shards: Box<[CachePadded<Shard<K>>]>,
    /// `shards.len() - 1`, applied to the hash's top 8 bits.
    shard_mask: usize,
    max_keys: usize,
    /// Live keys; only inserts and removals write it.
    live: AtomicUsize,
    /// The latest reading any sweep judged idleness at (as `KeyedLimiter`'s).
    swept_at: AtomicU64,
    /// The state new keys share while the table is full.
    overflow: AtomicU64,
    sweeper: OnceLock<Thread>,
    evicted: AtomicU64,
    overflowed: AtomicU64,
}

/// The word in a cell the caller holds exclusively.
#[inline(always)]
fn word_of(cell: &mut AtomicU64) -> u64 {
    #[cfg(not(loom))]
    let word = *cell.get_mut();
    #[cfg(loom)]
    let word = cell.with_mut(|word| *word);
    word
}

/// Shards for a cap of `max_keys`: `KeyedLimiter`'s rule (one per
/// `KEYS_PER_SMALL_SHARD` keys of the cap, at most 16 per thread of the
/// machine, at most 256), from one shard up.
fn shard_count(max_keys: usize) -> usize {
    if cfg!(loom) {
        // One shard: every key races every other in the models.
        return 1;
    }
    keymap::shards_for(max_keys, KEYS_PER_SMALL_SHARD, 1, keymap::machine_threads())
}

impl<K, A> CompactKeyedBuilder<K, A>
where
    K: FixedKey,
    A: Algorithm<Cell = AtomicU64>,
{
    /// The clock. By default, the [`QuantaClock`](crate::QuantaClock), as
    /// for every limiter.
    pub fn clock(mut self, clock: impl Into<ClockSource>) -> Self {
        self.clock = clock.into();
        self
    }

    /// How often the background thread removes idle keys; `None` for no
    /// thread (call [`CompactKeyedLimiter::sweep`] yourself). By default,
    /// every second.
    pub fn sweep_every(mut self, interval: Option<Duration>) -> Self {
        self.sweep_every = interval;
        self
    }

    /// The limiter, its table allocated and written (resident) now.
    ///
    /// # Errors
    ///
    /// [`TableSizeError`] if `max_keys` is 0, or its table would not fit
    /// the address space, or the allocator refuses its memory.
    ///
    /// # Panics
    ///
    /// If a sweep interval is set and the operating system refuses to spawn
    /// a thread.
    pub fn build(self) -> Result<CompactKeyedLimiter<K, A>, TableSizeError> {
        let error = TableSizeError {
            max_keys: self.max_keys,
        };
        let shards = shard_count(self.max_keys);
        // 8/7 of the cap, rounded up, over the shards.
        let slots = (self.max_keys as u128 * 8).div_ceil(7 * shards as u128);
        let slot_bytes = (K::WORDS as u128 + 2) * 4;
        if self.max_keys == 0 || slots * slot_bytes * shards as u128 > isize::MAX as u128 / 2 {
            return Err(error);
        }
        let fresh = word_of(&mut self.algorithm.new_cell());
        let words = Shard::<K>::table(shards, slots as usize).ok_or(error)?;
        let shards = (0..shards)
            .map(|index| CachePadded::new(Shard::new(index, slots as usize)))
            .collect::<Box<[_]>>();
        let shard_mask = shards.len() - 1;
        let shared = Arc::new(Shared {
            overflow: self.algorithm.new_cell(),
            algorithm: self.algorithm,
            fresh,
            clock: self.clock,
            hasher: Hasher::default(),
            words,
            shards,
            shard_mask,
            max_keys: self.max_keys,
            live: AtomicUsize::new(0),
            swept_at: AtomicU64::new(0),
            sweeper: OnceLock::new(),
            evicted: AtomicU64::new(0),
            overflowed: AtomicU64::new(0),
        });
        if let Some(interval) = self.sweep_every {
            let thread = sweeper::spawn(
                "tollgate-compact-sweeper",
                Arc::downgrade(&shared),
                interval,
                Shared::sweep,
            );
            let _ = shared.sweeper.set(thread);
        }
        Ok(CompactKeyedLimiter { shared })
    }
}

impl<K, A> CompactKeyedLimiter<K, A>
where
    K: FixedKey,
    A: Algorithm<Cell = AtomicU64>,
{
    /// Starts building a limiter running `algorithm` for every key, with
    /// room for `max_keys` live keys (the table's size: there is no default).
    pub fn builder(algorithm: A, max_keys: usize) -> CompactKeyedBuilder<K, A> {
        CompactKeyedBuilder {
            algorithm,
            max_keys,
            clock: ClockSource::default(),
            sweep_every: Some(DEFAULT_SWEEP_EVERY),
            key: std::marker::PhantomData,
        }
    }

    /// Takes one permit for `key` if it is available now.
    #[inline]
    pub fn check(&self, key: &K) -> Decision {
        self.shared
            .decide(key, 1, Mode::Check, self.shared.clock.now())
    }

    /// Takes `cost` permits for `key` at once if they are all available now;
    /// none otherwise. A cost of 0 only looks.
    ///
    /// # Errors
    ///
    /// [`CostError`] if `cost` is above the quota's capacity.
    #[inline]
    pub fn check_n(&self, key: &K, cost: u64) -> Result<Decision, CostError> {
        self.shared
            .decide(key, cost, Mode::Check, self.shared.clock.now())
    }

    /// What [`check`](Self::check) would answer for `key` now, without
    /// taking anything (and without creating a state for an unknown key).
    #[inline]
    pub fn peek(&self, key: &K) -> Decision {
        self.shared
            .decide(key, 1, Mode::Peek, self.shared.clock.now())
    }

    /// Removes every idle key now; returns how many. The background thread
    /// does this by itself unless it was turned off.
    pub fn sweep(&self) -> usize {
        self.shared.sweep()
    }

    /// Keys with a state now.
    pub fn len(&self) -> usize {
        // Relaxed: a count read on its own.
        self.shared.live.load(Ordering::Relaxed)
    }

    /// Whether no key has a state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of the table (every shard's slots): the limiter's memory
    /// apart from a few hundred bytes per shard, from its build on.
    pub fn table_bytes(&self) -> usize {
        let slots: usize = self.shared.shards.iter().map(|shard| shard.slots()).sum();
        slots * (K::WORDS + 2) * 4
    }

    /// Counters for metrics.
    pub fn stats(&self) -> KeyedStats {
        // Relaxed: counters read on their own.
        KeyedStats {
            live_keys: self.len(),
            max_keys: self.shared.max_keys,
            evicted: self.shared.evicted.load(Ordering::Relaxed),
            overflowed: self.shared.overflowed.load(Ordering::Relaxed),
        }
    }

    /// The algorithm every key runs.
    pub fn algorithm(&self) -> &A {
        &self.shared.algorithm
    }

    /// The clock.
    pub fn clock(&self) -> &ClockSource {
        &self.shared.clock
    }
}

impl<K, A> Clone for CompactKeyedLimiter<K, A> {
    fn clone(&self) -> CompactKeyedLimiter<K, A> {
        CompactKeyedLimiter {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K, A: fmt::Debug> fmt::Debug for CompactKeyedLimiter<K, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompactKeyedLimiter")
            .field("algorithm", &self.shared.algorithm)
            .field("live_keys", &self.shared.live.load(Ordering::Relaxed))
            .field("max_keys", &self.shared.max_keys)
            .finish_non_exhaustive()
    }
}

impl<K, A> Shared<K, A>
where
    K: FixedKey,
    A: Algorithm<Cell = AtomicU64>,
{
    /// The shard of a key of hash `hash`: its top 8 bits.
    #[inline(always)]
    fn shard_index(&self, hash: u64) -> usize {
        (hash >> 56) as usize & self.shard_mask
    }

    #[inline(always)]
    fn shard(&self, hash: u64) -> &Shard<K> {
        &self.shards[self.shard_index(hash)]
    }

    /// Decides `cost` for `key` at `now`.
    #[inline(always)]
    fn decide<R: Answer>(&self, key: &K, cost: u64, mode: Mode, now: Nanos) -> R {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash);
        self.decide_in(shard, shard.home(hash), key, cost, mode, now)
    }

    /// Decides `cost` for `key`, whose shard and home slot are known.
    #[inline(always)]
    fn decide_in<R: Answer>(
        &self,
        shard: &Shard<K>,
        home: usize,
        key: &K,
        cost: u64,
        mode: Mode,
        now: Nanos,
    ) -> R {
        let mut locked = shard.lock(&self.words);
        match locked.probe(key, home) {
            (slot, 0) => self.create(locked, slot, key, cost, mode, now),
            (slot, stored) => {
                let mut cell = AtomicU64::new(stored ^ self.fresh);
                let answer = run(&self.algorithm, &mut cell, now, cost, mode);
                self.write_back(&mut locked, slot, stored, &mut cell);
                answer
            }
        }
    }

    /// A check of one permit for `key`, as [`decide_in`](Self::decide_in),
    /// under its shard's lock the caller took, its decision written over
    /// `out` (a batch's). Each arm writes its own, first, into memory it already
    /// has: pushed, merged from the arms, or live across `remove`'s call,
    /// the decision was spilled to the stack a word at a time and copied on
    /// 16 bytes at a time, a failed store-to-load forward on which a fifth
    /// of a batched check's samples in cache sat (`BENCHMARKS.md`).
    #[inline(always)]
    fn check_into(
        &self,
        mut locked: table::Locked<'_, K>,
        home: usize,
        key: &K,
        now: Nanos,
        out: &mut Decision,
    ) {
        // The state comes with the probe: its words were read to end it.
        match locked.probe(key, home) {
            (slot, 0) => {
                *out = self.create(locked, slot, key, 1, Mode::Check, now);
            }
            (slot, stored) => {
                let mut cell = AtomicU64::new(stored ^ self.fresh);
                // Written out first: the value then need not survive the
                // call to `remove` (it would be spilled to the stack). The
                // transition itself, as `run` makes it for a check of a
                // cost that fits (`check_batch` checked that 1 does): no
                // refusal arm to merge with, so the decision goes from the
                // registers to `out`, not through a stack slot.
                *out = self.algorithm.check_cell_mut(&mut cell, now, 1);
                self.write_back(&mut locked, slot, stored, &mut cell);
            }
        }
    }

    /// Stores a known key's state after a request ran on `cell`, if it
    /// changed from `stored`: removed if it is fresh again.
    #[inline(always)]
    fn write_back(
        &self,
        locked: &mut table::Locked<'_, K>,
        slot: usize,
        stored: u64,
        cell: &mut AtomicU64,
    ) {
        let next = word_of(cell) ^ self.fresh;
        if next != stored {
            if next == 0 {
                // Fresh again: no entry is kept for a fresh state.
                locked.remove(slot, &self.hasher);
                // Relaxed: see `reserve_slot`.
                self.live.fetch_sub(1, Ordering::Relaxed);
            } else {
                locked.set_stored(slot, next);
            }
        }
    }

    /// A key absent from its shard, whose lock is still held.
    #[inline(never)]
    fn create<R: Answer>(
        &self,
        mut locked: table::Locked<'_, K>,
        slot: usize,
        key: &K,
        cost: u64,
        mode: Mode,
        now: Nanos,
    ) -> R {
        // Under the lock of the miss: see `fresh_time`.
        let at = self.fresh_time(now);
        let later_by = at.as_u64() - now.as_u64();
        let mut cell = self.algorithm.new_cell();
        if mode == Mode::Peek || cost == 0 {
            // Looking never creates a state: a fresh one answers.
            return run::<A, R>(&self.algorithm, &mut cell, at, cost, Mode::Peek)
                .seen_earlier_by(later_by);
        }
        if let Err(error) = within_capacity(&self.algorithm, cost) {
            return R::refused(error);
        }
        if locked.is_full() || !self.reserve_slot() {
            drop(locked);
            self.wake_sweeper();
            return R::decided(self.decide_overflow(now, cost));
        }
        let answer: R = run(&self.algorithm, &mut cell, at, cost, mode);
        let stored = word_of(&mut cell) ^ self.fresh;
        if stored == 0 {
            // Nothing recorded (past the end of representable time).
            self.live.fetch_sub(1, Ordering::Relaxed);
        } else {
            locked.insert(slot, key, stored);
        }
        answer.seen_earlier_by(later_by)
    }

    /// Takes one of the `max_keys` slots, if any is free.
    fn reserve_slot(&self) -> bool {
        // Relaxed: the count is a bound, not a publication of other memory;
        // fetch_update makes "below the cap, then one more" one step.
        self.live
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |live| {
                (live < self.max_keys).then_some(live + 1)
            })
            .is_ok()
    }

    fn wake_sweeper(&self) {
        if let Some(sweeper) = self.sweeper.get() {
            sweeper.unpark();
        }
    }

    /// Decides a request for a new key while the table (or its shard) is
    /// full, on the state such keys share. Its cost fits the capacity.
    fn decide_overflow(&self, now: Nanos, cost: u64) -> Decision {
        // Relaxed: a counter.
        self.overflowed.fetch_add(1, Ordering::Relaxed);
        self.algorithm.check_cell(&self.overflow, now, cost)
    }

    /// When a state created fresh after a miss decides: the later of `now`
    /// and the latest reading a sweep judged idleness at.
    #[inline]
    fn fresh_time(&self, now: Nanos) -> Nanos {
        // Relaxed: a sweep stores its reading before it takes any shard's
        // lock to remove a key, and this runs under the lock of the shard
        // where the key was missed, taken after any such removal: the
        // lock's release/acquire makes the store visible. A reading from a
        // sweep that removed nothing this key depends on only makes the
        // decision later, never earlier.
        now.max(Nanos::new(self.swept_at.load(Ordering::Relaxed)))
    }

    fn sweep(&self) -> usize {
        let now = self.clock.now();
        // Relaxed: ordered before every removal by the shard locks (see
        // `fresh_time`); `fetch_max` keeps the latest of concurrent sweeps.
        self.swept_at.fetch_max(now.as_u64(), Ordering::Relaxed);
        let idle = |stored: u64| {
            self.algorithm
                .is_idle(&AtomicU64::new(stored ^ self.fresh), now)
        };
        let mut removed = 0;
        for shard in self.shards.iter() {
            // Downwards from a vacant slot: see `Locked::sweep`. Finding it
            // reads slots up to the first vacant one, a few at 7/8.
            let start = shard.lock(&self.words).vacant();
            shard.let_waiters_in();
            let mut done = 0;
            while done < shard.slots() {
                let (next, gone) =
                    shard
                        .lock(&self.words)
                        .sweep(start, done, SWEEP_CHUNK, &self.hasher, idle);
                done = next;
                if gone > 0 {
                    // Relaxed: see `reserve_slot`. Given back chunk by
                    // chunk, so that a long sweep frees room as it goes.
                    self.live.fetch_sub(gone, Ordering::Relaxed);
                    removed += gone;
                }
                shard.let_waiters_in();
            }
        }
        // Relaxed: a counter.
        self.evicted.fetch_add(removed as u64, Ordering::Relaxed);
        removed
    }
}
