//! [`CompactKeyedLimiter`]: one state per fixed-size key in a table sized
//! once, at about 18 bytes a `u64` key, with batched checks that fetch
//! their keys' slots before deciding.
//!
//! # What it is for
//!
//! 10^7 to 10^8 live keys of a fixed size (client IPs at an edge, numeric
//! account or API-key ids), one quota for all of them, [`Gcra`] or
//! [`FixedWindow`](crate::FixedWindow). Decisions are exactly those of
//! [`KeyedLimiter`](crate::KeyedLimiter) under the same quota (and of one
//! [`Limiter`](crate::Limiter) per key), linearizable per key; only the
//! storage differs, and what the storage cannot hold (per-key overrides,
//! observers, lists and penalties, strings longer than a [`ShortKey`])
//! stays with `KeyedLimiter`.
//!
//! Not [`WarmUp`](crate::WarmUp): its state is two 64-bit numbers (the
//! instant the next request may go and the idle permits, each needed
//! whole for the costs to be exact to the nanosecond; see its module docs,
//! "State"), and a slot holds one 8-byte word. Offering it would take a
//! slot whose state is 16 bytes, written under the shard's lock (which
//! every write here already holds) with the batched reads seeing both
//! words of one write: a table generic over the state's width, so 8 more
//! bytes per key for every algorithm or a second table type. Until then a
//! warm-up per key runs in `KeyedLimiter<K, WarmUp>`.
//!
//! # Memory
//!
//! The table is one array of slots per shard, allocated and written once
//! when the limiter is built and never grown: `max_keys · 8/7` slots in
//! all, a slot being the key and the 8-byte state side by side, with no
//! control bytes, no index and no per-entry allocation.
//!
//! | key | slot | bytes per key at `max_keys` |
//! |---|---|---|
//! | [`Ipv4Addr`](std::net::Ipv4Addr), `u32` | 12 B | 13.7 |
//! | `u64` | 16 B | 18.3 |
//! | [`Ipv6Addr`](std::net::Ipv6Addr), `[u8; 16]`, `u128` | 24 B | 27.4 |
//! | [`ShortKey`] (a string of up to 27 bytes) | 36 B | 41.1 |
//!
//! So the memory is bounded by construction:
//! [`table_bytes`](CompactKeyedLimiter::table_bytes) from the first
//! request on, whatever the keys do (measured at 10^7 keys, resident and
//! allocated alike: the figures above; governor 28.5 and 41.9, and 70.4
//! for a 15-byte `String`,
//! `benches/compact_memory.rs`). A 16-byte key stored whole cannot take
//! 20 bytes a key (16 + 8 = 24 bytes a slot before any slack);
//! quotienting (storing only what the slot's position does not imply)
//! saves `log2(slots)` bits, 23 at 10^7 keys, which leaves 105 bits of key
//! plus 64 of state: 21.1 bytes a slot at a load of 1, 24.1 at 7/8. Not
//! worth its arithmetic here; the 16-byte rows are stated as a miss in
//! `BENCHMARKS.md`.
//!
//! # Eviction, the cap, and clocks that go back
//!
//! As [`KeyedLimiter`](crate::KeyedLimiter)'s (see
//! ["Memory: bounded, and lossless"](super#memory-bounded-and-lossless)
//! and ["Clocks that go back"](super#clocks-that-go-back)): a key whose
//! state is indistinguishable from a fresh one is removed by a sweep
//! (a background thread every [`sweep_every`](CompactKeyedBuilder::sweep_every),
//! 1 s by default, or [`sweep`](CompactKeyedLimiter::sweep)), judged under
//! its shard's lock, [`SWEEP_CHUNK`] slots per hold, each shard walked
//! downwards from a vacant slot so that removing a run of idle keys costs
//! one step a key (10^8 idle keys in 2.96 s on a loaded 2-core host, a
//! checker meanwhile at p99.9 3.8 µs); a key created fresh
//! decides at the later of its reading and the latest sweep's. When
//! `max_keys` keys are live, no live key is evicted: a new key is decided
//! on one shared **overflow state** under the same quota until a sweep
//! frees slots (a full table wakes the sweeper). A shard also stops
//! taking keys at 15/16 of its slots, so that probes stay short: keys
//! that crowd into one shard beyond it overflow too, before `max_keys` is
//! reached (at 10^7 keys over 32 shards the fullest shard is within 1 % of
//! the mean, far from 15/16 when the mean is 7/8).
//!
//! # Concurrency: a lock per shard
//!
//! A key's entry is two or three words (key, state) and a removal moves
//! entries between slots (see `table.rs`): a reader without a lock could
//! miss an entry in motion, create it a second time and admit twice. So
//! each shard has one exclusive lock (the keyed limiter's `ShardLock`: one
//! atomic read-modify-write to take, a plain store to release), held for
//! the probe, the decision and its write; the state is read and written
//! with plain loads and stores under it. A request for a new key finds it
//! absent and inserts it in the same hold, so two first requests of one
//! key cannot both create it. The shards are a power of two, up to 16 per
//! thread the machine runs (at most 256), one per 4,096 keys of the cap
//! for small tables; the top 8 bits of the key's hash pick the shard.
//! Decisions are linearizable per key: each is taken at its hold of the
//! lock, on a clock reading taken before it, as for `KeyedLimiter`. The
//! only atomic read-modify-writes besides the lock are the count of live
//! keys (`fetch_update`, `Relaxed`: a bound, publishing nothing) and the
//! overflow state's compare-and-swap (the [`Limiter`](crate::Limiter)'s
//! own path, model-checked in `crates/loom/tests/loom.rs`); `crates/loom/tests/loom_compact.rs`
//! models every race between inserts, checks, batches, the cap and sweeps.
//!
//! # Speed
//!
//! At 10^7 uniform `u64` keys (`benches/compact.rs`, on a 2-core host
//! loaded far past its cores, in time on a CPU): a batched check 0.18× of
//! governor's keyed check (with foldhash), a single check 0.70×, where
//! `KeyedLimiter`'s is 0.9–1.3×. Where the table fits in cache, the
//! single check is slower than `KeyedLimiter`'s (linear probing reads 4.5
//! slots for a known key at 7/8, hashbrown's group probe one or two): this
//! is the table for key counts where memory decides.
//!
//! # Hashing
//!
//! foldhash, seeded at random per limiter, as `KeyedLimiter`: keys chosen
//! by an attacker cannot be aimed at one run of slots.
//!
//! # Decisions
//!
//! - **A new type, not a storage tier of `KeyedLimiter`.** `KeyedLimiter`
//!   grows its tables as keys come (so an empty one costs 33 KB, not
//!   `max_keys · 18` bytes), keeps keys of any type, and holds a key on an
//!   override with a pointer to its quota; a table sized once for fixed
//!   keys and one word of state can do none of these, and choosing it
//!   behind `KeyedLimiter::builder` would have changed what `max_keys`
//!   costs for every existing user. The public API is added to, not
//!   changed.
//! - **Sized at build, never grown.** Growth doubles a table: between two
//!   doublings the load runs from 7/16 to 7/8, twice the memory a key at
//!   worst. A limiter that must hold 10^8 keys in a known budget says so
//!   once, and [`build`](CompactKeyedBuilder::build) refuses a size it
//!   cannot address or allocate.
//! - **Linear probing, backward-shift removal.** The simplest open
//!   addressing that keeps a key's slot and its neighbours on one or two
//!   cache lines; a probe for a known key reads 4.5 slots on average at a
//!   load of 7/8, a probe for a new key more (a new key pays for its
//!   insert once).
//! - **The batch reads each home slot before taking any lock.** Not
//!   `_mm_prefetch`: the core crate forbids `unsafe` and the intrinsic is
//!   `unsafe`. A `Relaxed` load whose value is thrown away does what the
//!   prefetch does on an out-of-order core (see `batch.rs`).
//! - **One quota, no observers or controls.** Per-key overrides would need
//!   a quota beside each state (KeyedLimiter's 24-byte entries), which
//!   this layout exists to avoid; a deployment with a few tiers keeps one
//!   compact limiter per tier.
//! - **`IpAddr` is not a key type**, `Ipv4Addr` and `Ipv6Addr` are (see
//!   [`FixedKey`]).

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
use self::table::{Hasher, Probe, Shard};
use super::entry::{Answer, Mode, run, within_capacity};
use super::{DEFAULT_SWEEP_EVERY, KeyedStats, sweeper};
use crate::algorithm::{Algorithm, Gcra};
use crate::clock::{Clock, ClockSource, Nanos};
use crate::decision::{CostError, Decision};
use crate::keymap;
use crate::sync::{AtomicU64, AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;

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
        let shards = (0..shards)
            .map(|_| Shard::new(slots as usize).map(CachePadded::new))
            .collect::<Option<Box<[_]>>>()
            .ok_or(error)?;
        let shard_mask = shards.len() - 1;
        let shared = Arc::new(Shared {
            overflow: self.algorithm.new_cell(),
            algorithm: self.algorithm,
            fresh,
            clock: self.clock,
            hasher: Hasher::default(),
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
        let mut locked = shard.lock();
        match locked.find(key, home) {
            Probe::Found(slot) => {
                let stored = locked.stored(slot);
                let mut cell = AtomicU64::new(stored ^ self.fresh);
                let answer = run(&self.algorithm, &mut cell, now, cost, mode);
                let next = word_of(&mut cell) ^ self.fresh;
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
                answer
            }
            Probe::Vacant(slot) => self.create(locked, slot, key, cost, mode, now),
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
            let start = shard.lock().vacant();
            shard.let_waiters_in();
            let mut done = 0;
            while done < shard.slots() {
                let (next, gone) = shard
                    .lock()
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
