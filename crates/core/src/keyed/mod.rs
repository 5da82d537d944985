//! [`KeyedLimiter`]: one state per key, for millions of keys.
//!
//! `check(&key)`: each key (a user, an IP, an API key, a route) has its own
//! state under its own quota, created on first use and dropped by itself
//! once it can no longer change a decision. For 10^7 to 10^8 keys of a
//! fixed size (`u64`, IP addresses) under one quota,
//! [`compact::CompactKeyedLimiter`] holds the same decisions in a table
//! sized once, at about half the bytes a key, and checks keys in batches.
//!
//! # Guarantees
//!
//! - **Per key, a [`Limiter`](crate::Limiter)'s**: decisions are
//!   linearizable per key, with the same instant rule.
//! - **A reading that goes back never re-credits a key**: a known key is
//!   decided at the later of the reading and its state's time; a key
//!   created after a sweep, at the later of the reading and that sweep's.
//!   `retry_after` and `reset_after` count from the request's own reading.
//!   There is no limiter-wide maximum of the readings
//!   (`tests/it/keyed_clock_back.rs`).
//! - **Hashing an attacker cannot aim**: foldhash, seeded at random per limiter.
//!
//! # Per-key quotas
//!
//! Every key runs the default algorithm unless an exact override or the
//! override function gives it another; both can change while traffic flows
//! ([`set_default`](KeyedLimiter::set_default),
//! [`set_override`](KeyedLimiter::set_override)). A key picks a change up on
//! its next request, its state carried over by the [`Carry`] rule given
//! with it. Several limits on one key, all-or-nothing, are an
//! [`AllOf`](crate::AllOf) algorithm.
//!
//! # Memory: bounded, and lossless
//!
//! A key whose state is indistinguishable from a fresh one
//! ([`Algorithm::is_idle`]: bucket full, window over, log expired) is
//! removed, atomically with respect to its requests, so no decision changes;
//! what a sweep removed is freed before it returns (1,000,000 idle keys
//! leave nothing above the empty limiter). A full map evicts no live key
//! (evicting a throttled key would let it escape, as LRU eviction does):
//! new keys share one **overflow state** under the default quota until
//! sweeps make room, and a key decided there starts fresh once it has a
//! slot. Entries are 16 bytes for a `u64` key on the default quota, 24 on an
//! override; [`CompactString`] keys keep up to 24 bytes inline.
//!
//! | parameter | default | why that default |
//! |---|---|---|
//! | [`max_keys`](KeyedBuilder::max_keys) | 2^24 ([`DEFAULT_MAX_KEYS`]) | bounds a `u64`-keyed GCRA map near 600 MB (35.7 B a key); also sizes it: a shard per 2^16 keys, 8 to 256 |
//! | [`sweep_every`](KeyedBuilder::sweep_every) | 1 s ([`DEFAULT_SWEEP_EVERY`]) | idle keys freed within a second, by a thread of the limiter's own, 16 slots at a time; `None`: call [`sweep`](KeyedLimiter::sweep) |
//! | [`clock`](KeyedBuilder::clock) | [`QuantaClock`](crate::QuantaClock) | the crate's default clock (see [`clock`](crate::clock)) |
//!
//! The rules for each case (clocks, the overflow state, string keys, a
//! change of quota), the bytes per key measured, and the locking:
//! `crates/core/docs/keyed.md`; the map itself: `crates/core/docs/keymap.md`.
//!
//! Examples: on [`KeyedLimiter`].

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
