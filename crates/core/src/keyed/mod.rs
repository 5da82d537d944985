//! [`KeyedLimiter`]: one state per key, for millions of keys.
//!
//! `is_allow(resource)`: each key (a user, an IP, an API key, a route) has
//! its own state under its own quota, created on first use and dropped by
//! itself once it can no longer change a decision.
//!
//! For 10^7 to 10^8 keys of a fixed size (`u64`, IP addresses) under one
//! quota, [`compact::CompactKeyedLimiter`] holds the same decisions in a
//! table sized once, at about half the bytes a key, and checks keys in
//! batches.
//!
//! # Per-key quotas
//!
//! Every key runs the default algorithm unless an exact override or the
//! override function gives it another. Both the default and the exact
//! overrides can change while traffic flows
//! ([`set_default`](KeyedLimiter::set_default),
//! [`set_override`](KeyedLimiter::set_override)); a key picks the change up on
//! its next request, and its state is carried over by the [`Carry`] rule
//! given with the change. Several limits on one key, all-or-nothing, are an
//! [`AllOf`](crate::AllOf) algorithm.
//!
//! # Memory: bounded, and lossless
//!
//! A key whose state is indistinguishable from a fresh one (bucket full,
//! window over, log expired: [`Algorithm::is_idle`]) is removed, atomically
//! with respect to requests for that key, so that no future decision
//! changes. A background thread sweeps the map every
//! [`sweep_every`](KeyedBuilder::sweep_every) (1 s by default; it stops when
//! the limiter is dropped), 16 slots at a time: a request waits
//! for at most one such chunk of its own shard, and no caller's thread ever
//! pays for a sweep. [`sweep`](KeyedLimiter::sweep) runs one now. What a
//! sweep removed is freed before it returns, and a shard it left mostly
//! empty shrinks: 1,000,000 idle keys leave nothing, to the byte, above the
//! empty limiter (measured in `tests/keyed_memory.rs`, GCRA at 1,000,000
//! keys in 2^21 slots: 35.7 bytes per `u64` key, 69.2 per 16-byte
//! [`CompactString`] key, 85.2 per 16-byte `String` key plus the
//! allocator's overhead on its heap block; the empty limiter, with its 256
//! shards, is 33 KB).
//!
//! A key on the default quota is a 16-byte entry for a `u64` key and a
//! one-word state: the key and the cell, nothing else. The algorithm it
//! runs is its shard's, shared by every such key of the shard and tagged
//! with the generation of the rules that resolved it, so that a change of
//! quota is noticed without a per-key generation (see `src/keymap.rs` for
//! the layout and why it was chosen). A key on an override, or one that
//! has not had a request since the last change, holds a pointer to its own
//! algorithm beside its cell (24 bytes), until it is back on the default.
//! The first request to a shard after a change of quota moves that shard's
//! keys aside (a hold of its lock for O(keys in the shard), as when
//! its table grows); each key's state is still carried over at its own
//! next request.
//!
//! # String keys
//!
//! Requests name a key by any borrowed form `Q` of it (`K: Borrow<Q>`), and
//! a new key is made from `Q`'s owned form (`K: From<Q::Owned>`): `&str` for
//! `KeyedLimiter<String>` and for `KeyedLimiter<CompactString>`, `&u64` for
//! `u64`. A known key is looked up without allocating. A `String` key holds
//! its bytes in a heap block of its own (32 bytes from the allocator for a
//! 16-byte key); a [`CompactString`] keeps up to 24 bytes inline in its
//! 24-byte header, so that `"user:00001234"` costs no allocation at all, and
//! longer ones go to the heap as a `String`'s do. It hashes and compares
//! as its `str`, so that `check("alice")` finds it.

//! # Clocks that go back
//!
//! A sweep judges a key idle at its own clock reading `t1`: the key's state
//! is then indistinguishable from a fresh one at `t1` and at every later
//! instant, not before. So that a removal never re-credits a key whose
//! clock then reads an earlier `t0 < t1` (a clock set back, a sweeper on a
//! core whose counter runs ahead, or a sweep racing the request), a key
//! created fresh is decided at the later of the reading and the latest
//! reading any sweep took: exactly what the removed state would have
//! answered there. What is true of time is per key:
//!
//! - a known key is decided at the request's own reading, as a
//!   [`Limiter`](crate::Limiter) is: each algorithm decides at the later of
//!   that reading and its state's own time, so a reading that goes back
//!   never re-credits the key;
//! - a key created after a miss is decided, and its permits counted, at the
//!   later of the reading and the latest sweep's reading `t1`;
//! - in both cases `retry_after` and `reset_after` count from the request's
//!   own reading: a key created at `t1` for a reading `t0 < t1` reports its
//!   waits `t1 − t0` longer than the decision at `t1` did, so that
//!   `t0 + reset_after` is the instant it is full again.
//!
//! There is no limiter-wide running maximum of the readings: two keys can
//! be decided at different times by requests that read the clock together.
//! Pinned by `tests/keyed_clock_back.rs`.
//!
//! The number of live keys is capped ([`max_keys`](KeyedBuilder::max_keys),
//! 2^24 by default). When the map is full, no live key is ever evicted
//! (evicting a throttled key would let it escape, as LRU eviction does):
//! requests for new keys are decided together on one **overflow state**
//! under the default quota, so a flood of fresh keys shares one key's quota
//! until idle keys are swept (a full map wakes the sweeper at once). A cost
//! above the overflow state's capacity (a key whose own quota is larger) is
//! denied with `retry_after` set to the sweep interval. A key decided on the
//! overflow state has no state of its own: once it gets a slot, it starts
//! fresh, within what the overflow state let through.
//!
//! # Concurrency and hashing
//!
//! The map is split by hash into shards, each a lock around `hashbrown`
//! tables (see `src/keymap.rs` and `src/shard_lock.rs` for the choice and
//! its bounds): a request for an existing key takes its shard's lock (one
//! atomic read-modify-write on a word of its own cache line; the release
//! is a plain store) and runs the algorithm on the key's own state, which
//! the lock makes exclusive, so a one-word state is written with a plain
//! store. A new key takes the same lock, which also grows the shard's table
//! when it is full (a hold of O(keys in the shard): at most 65,536 keys at
//! the default cap).
//! There are enough shards that a full one holds about 2^16 keys at the cap
//! ([`max_keys`](KeyedBuilder::max_keys)), from 8 to 256. The hasher is
//! foldhash, seeded at random per limiter, so that keys chosen by an
//! attacker cannot be made to collide.
//!
//! Decisions are linearizable per key, with the same instant rule as
//! [`Limiter`](crate::Limiter).

mod builder;
mod check;
pub mod compact;
mod controls;
mod entry;
mod operate;
mod sweeper;
mod tier;

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

pub use self::builder::KeyedBuilder;
use self::entry::{Entry, Mode, ShardTag};
use self::tier::{Policies, Tier};
use crate::algorithm::{Algorithm, Carry, Gcra};
use crate::budget::{Charge, KeyedReserved};
use crate::clock::ClockSource;
use crate::decision::{CostError, Decision};
use crate::keymap::KeyMap;
use crate::sync::{AtomicU64, AtomicUsize, Mutex, Ordering, RwLock};
/// A string key stored inline up to 24 bytes (`compact_str`'s): the key
/// type for string keys that should cost no heap block of their own. See
/// ["Memory: bounded, and lossless"](self#memory-bounded-and-lossless).
pub use compact_str::CompactString;

type Hasher = foldhash::fast::RandomState;

/// The default cap on live keys.
pub const DEFAULT_MAX_KEYS: usize = 1 << 24;
/// The default interval between background sweeps.
pub const DEFAULT_SWEEP_EVERY: Duration = Duration::from_secs(1);
/// How many distinct algorithms returned by an override function are shared
/// between keys (beyond that, each key holds its own copy).
const SHARED_FUNCTION_RESULTS: usize = 64;

/// A rate limiter with one state per key; clones share everything.
///
/// # Examples
///
/// ```
/// use tollgate::{Gcra, KeyedLimiter, Quota};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let per_user: KeyedLimiter<String> = KeyedLimiter::builder(Gcra::new(Quota::per_second(2)?)?)
///     .override_key("admin".to_string(), Gcra::new(Quota::per_second(100)?)?)
///     .build();
///
/// // Look up by &str: no allocation for a key already known.
/// assert!(per_user.check("alice").is_allowed());
/// assert!(per_user.check("alice").is_allowed());
/// assert!(per_user.check("alice").is_denied());
/// assert!(per_user.check("bob").is_allowed());
/// assert_eq!(per_user.check("admin").remaining(), 99);
/// # Ok(())
/// # }
/// ```
///
/// The same with keys stored inline (no heap block per key up to 24 bytes):
///
/// ```
/// use tollgate::{CompactString, Gcra, KeyedLimiter, Quota};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let per_user: KeyedLimiter<CompactString> = KeyedLimiter::new(Gcra::new(Quota::per_second(1)?)?);
/// assert!(per_user.check("user:00001234").is_allowed());
/// assert!(per_user.check("user:00001234").is_denied());
/// # Ok(())
/// # }
/// ```
pub struct KeyedLimiter<K, A: Algorithm = Gcra> {
    shared: Arc<Shared<K, A>>,
}

/// A GCRA keyed limiter: the type most code needs to name.
pub type DefaultKeyedLimiter<K> = KeyedLimiter<K, Gcra>;

struct Shared<K, A: Algorithm> {
    clock: ClockSource,
    map: KeyMap<K, ShardTag<A>, A::Cell, Entry<A>>,
    policies: RwLock<Policies<K, A>>,
    /// Bumped by every change of quota; an entry resolved under an older
    /// generation re-resolves its quota on its next request.
    generation: AtomicU64,
    /// Live keys; only inserts and removals write it.
    live: AtomicUsize,
    /// The latest clock reading any sweep judged idleness at (ns): a key
    /// created fresh is decided no earlier (see "Clocks that go back" in
    /// the module docs). Written once per sweep, read on a key's creation
    /// only, never on the path of a known key.
    swept_at: AtomicU64,
    max_keys: usize,
    sweep_every: Option<Duration>,
    /// The state new keys share while the map is full, under the default.
    overflow: Mutex<Entry<A>>,
    sweeper: OnceLock<Thread>,
    counters: Counters,
    /// Name, observer, dry-run, lists and penalties (`operate.rs`).
    ops: operate::Ops<K>,
}
#[derive(Default)]
struct Counters {
    evicted: AtomicU64,
    overflowed: AtomicU64,
}

/// What a keyed limiter has done, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyedStats {
    /// Keys with a state now.
    pub live_keys: usize,
    /// The cap on live keys.
    pub max_keys: usize,
    /// Idle keys removed since the limiter was built.
    pub evicted: u64,
    /// Requests for new keys decided on the overflow state because the map
    /// was full.
    pub overflowed: u64,
}

impl<K, A> KeyedLimiter<K, A>
where
    K: Hash + Eq + Send + Sync + 'static,
    A: Algorithm,
{
    /// A limiter running `default` for every key, with every other setting
    /// at its default.
    pub fn new(default: A) -> KeyedLimiter<K, A> {
        KeyedLimiter::builder(default).build()
    }

    /// Starts building a limiter running `default` for every key without an
    /// override.
    pub fn builder(default: A) -> KeyedBuilder<K, A> {
        KeyedBuilder {
            default,
            clock: ClockSource::default(),
            exact: Vec::new(),
            function: None,
            max_keys: DEFAULT_MAX_KEYS,
            sweep_every: Some(DEFAULT_SWEEP_EVERY),
            ops: operate::OpsBuilder::default(),
        }
    }

    /// Takes one permit for `key` if it is available now.
    #[inline]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        // Every algorithm admits a cost of 1 on a fresh state.
        if self.shared.ops.engaged() {
            return self.operated(key, 1, Mode::Check);
        }
        self.shared.decide(key, 1, Mode::Check)
    }

    /// Takes `cost` permits for `key` at once if they are all available now;
    /// none otherwise. A cost of 0 only looks.
    ///
    /// # Errors
    ///
    /// [`CostError`] if `cost` is above the capacity of the key's quota.
    #[inline]
    pub fn check_n<Q>(&self, key: &Q, cost: u64) -> Result<Decision, CostError>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        if self.shared.ops.engaged() {
            return self.operated(key, cost, Mode::Check);
        }
        self.shared.decide(key, cost, Mode::Check)
    }

    /// What [`check`](Self::check) would answer for `key` now, without taking
    /// anything (and without creating a state for an unknown key).
    #[inline]
    pub fn peek<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        if self.shared.ops.engaged() {
            return self.operated(key, 1, Mode::Peek);
        }
        self.shared.decide(key, 1, Mode::Peek)
    }

    /// What [`check_n`](Self::check_n) would answer for `key` now, without
    /// taking anything.
    ///
    /// # Errors
    ///
    /// As [`check_n`](Self::check_n).
    #[inline]
    pub fn peek_n<Q>(&self, key: &Q, cost: u64) -> Result<Decision, CostError>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        if self.shared.ops.engaged() {
            return self.operated(key, cost, Mode::Peek);
        }
        self.shared.decide(key, cost, Mode::Peek)
    }

    /// Records `cost` permits used by `key` now, whether or not they fit,
    /// and returns what a request of one permit would be told right after:
    /// [`charge`](Self::charge) without the report of what was recorded.
    ///
    /// A key without a state gets one (a key swept between its request and
    /// its charge starts fresh, which is what it would have been); while the
    /// map is full, a new key's charge goes to the overflow state. A cost of
    /// 0 records nothing; no cost is an error.
    #[inline]
    pub fn charge_n<Q>(&self, key: &Q, cost: u64) -> Decision
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        self.charge(key, cost).decision()
    }

    /// Records `cost` permits used by `key` now, whether or not they fit,
    /// taking the key into debt as [`Limiter::charge`](crate::Limiter::charge)
    /// describes (with the same debt cap), and reports what was recorded.
    /// A key without a state gets one; while the map is full, a new key's
    /// charge goes to the overflow state.
    #[inline]
    pub fn charge<Q>(&self, key: &Q, cost: u64) -> Charge
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        // A charge is never refused.
        if self.shared.ops.engaged() {
            return self.operated(key, cost, Mode::Charge);
        }
        self.shared.decide(key, cost, Mode::Charge)
    }

    /// Reserves `estimate` permits for `key`: a
    /// [`check_n`](Self::check_n) of the estimate, returned as a
    /// [`KeyedReserved`] that owns the key, to
    /// [`settle`](KeyedReserved::settle) with the real cost (see
    /// [`budget`](crate::budget)).
    ///
    /// # Errors
    ///
    /// As [`check_n`](Self::check_n).
    pub fn reserve_estimate<Q>(
        &self,
        key: &Q,
        estimate: u64,
    ) -> Result<KeyedReserved<K, A>, CostError>
    where
        K: Borrow<Q> + From<Q::Owned> + Clone,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let decision = self.check_n(key, estimate)?;
        let owned = K::from(key.to_owned());
        Ok(KeyedReserved::new(self.clone(), owned, decision, estimate))
    }

    /// The algorithm every key without an override runs now (a copy: it can
    /// change, see [`set_default`](Self::set_default)).
    pub fn default_algorithm(&self) -> A {
        self.shared
            .read_policies()
            .default
            .algorithm
            .algorithm
            .clone()
    }

    /// Runs `algorithm` for every key without an override from now on; the
    /// state of keys already in use is carried over by `carry`.
    pub fn set_default(&self, algorithm: A, carry: Carry) {
        self.shared.change(|policies| {
            policies.default = Tier::new(algorithm, 0, carry);
        });
    }

    /// Runs `algorithm` for `key` from now on; its state, if any, is carried
    /// over by `carry`.
    pub fn set_override(&self, key: K, algorithm: A, carry: Carry) {
        self.shared.change(|policies| {
            policies.exact.insert(key, Tier::new(algorithm, 0, carry));
        });
    }

    /// Removes the exact override of `key`, which then runs what the
    /// function or the default gives it; its state, if any, is carried over
    /// by `carry`. Returns whether there was one.
    pub fn remove_override<Q>(&self, key: &Q, carry: Carry) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut removed = false;
        self.shared.change(|policies| {
            if let Some((key, _)) = policies.exact.remove_entry(key) {
                // Its next refresh carries its state by this rule.
                policies.pending_carry.insert(key, carry);
                removed = true;
            }
        });
        removed
    }

    /// Removes every idle key now (those whose state is indistinguishable
    /// from a fresh one); returns how many. The background thread does this
    /// by itself unless it was turned off.
    pub fn sweep(&self) -> usize {
        self.shared.sweep()
    }

    /// Keys with a state now.
    pub fn len(&self) -> usize {
        self.shared.live.load(Ordering::Relaxed)
    }

    /// Whether no key has a state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counters for metrics.
    pub fn stats(&self) -> KeyedStats {
        KeyedStats {
            live_keys: self.len(),
            max_keys: self.shared.max_keys,
            evicted: self.shared.counters.evicted.load(Ordering::Relaxed),
            overflowed: self.shared.counters.overflowed.load(Ordering::Relaxed),
        }
    }

    /// The clock.
    pub fn clock(&self) -> &ClockSource {
        &self.shared.clock
    }
}
impl<K, A: Algorithm> Clone for KeyedLimiter<K, A> {
    fn clone(&self) -> KeyedLimiter<K, A> {
        KeyedLimiter {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K, A: Algorithm + fmt::Debug> fmt::Debug for KeyedLimiter<K, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("live_keys", &self.shared.live.load(Ordering::Relaxed))
            .field("max_keys", &self.shared.max_keys)
            .finish_non_exhaustive()
    }
}
