//! [`KeyedLimiter`]: one state per key, for millions of keys.
//!
//! `is_allow(resource)`: each key (a user, an IP, an API key, a route) has
//! its own state under its own quota, created on first use and dropped by
//! itself once it can no longer change a decision.
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
//! empty limiter (measured in `tests/keyed_memory.rs`: 52.4 bytes per `u64`
//! key, 102 per 16-byte `String` key, with GCRA at 1,000,000 keys in 2^21
//! slots; the empty limiter, with its 256 shards, is 33 KB).
//!
//! An entry is the key, the cell and one pointer to the key's algorithm as
//! resolved under the current rules (shared by every key of the tier, and
//! carrying the rules' generation, so that a change of quota is noticed
//! without a per-key generation): 24 bytes for a `u64` key and a one-word
//! state.
//!
//! # Clocks that go back
//!
//! A sweep judges a key idle at its own clock reading `t1`: the key's state
//! is then indistinguishable from a fresh one at `t1` and at every later
//! instant, not before. So that a removal never re-credits a key whose
//! clock then reads an earlier `t0 < t1` (a clock set back, a sweeper on a
//! core whose counter runs ahead, or a sweep racing the request), a key
//! created fresh is decided at the later of the reading and the latest
//! reading any sweep took: exactly what the removed state would have
//! answered there. The request is then counted at `t1`, as if the
//! limiter's time were the running maximum of every reading it has seen,
//! the sweeps' included; known keys are decided at their own reading, as a
//! [`Limiter`](crate::Limiter) is (pinned by `tests/keyed_clock_back.rs`).
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
//! The map is split by hash into shards, each a read/write lock around a
//! `hashbrown` table (see `src/keymap.rs` for the choice and its bounds): a
//! request for an existing key takes its shard's shared lock (an atomic
//! read-modify-write on a word of its own cache line, and its release) and
//! runs the algorithm on the key's own state. A new key takes its shard's
//! exclusive lock, which also grows the shard's table when it is full (a
//! hold of O(keys in the shard): at most 65,536 keys at the default cap).
//! There are enough shards that a full one holds about 2^16 keys at the cap
//! ([`max_keys`](KeyedBuilder::max_keys)), from 8 to 256. The hasher is
//! foldhash, seeded at random per limiter, so that keys chosen by an
//! attacker cannot be made to collide.
//!
//! Decisions are linearizable per key, with the same instant rule as
//! [`Limiter`](crate::Limiter).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, OnceLock, Weak};
use std::thread::Thread;
use std::time::Duration;

use crate::algorithm::{Algorithm, Carry, Gcra};
use crate::clock::{Clock, ClockSource, Nanos};
use crate::decision::{CostError, Decision};
use crate::keymap::{KeyMap, Slot};
use crate::sync::{
    AtomicU64, AtomicUsize, Mutex, Ordering, RwLock, RwLockReadGuard, RwLockWriteGuard,
};

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
pub struct KeyedLimiter<K, A: Algorithm = Gcra> {
    shared: Arc<Shared<K, A>>,
}

/// A GCRA keyed limiter: the type most code needs to name.
pub type DefaultKeyedLimiter<K> = KeyedLimiter<K, Gcra>;

struct Shared<K, A: Algorithm> {
    clock: ClockSource,
    map: KeyMap<K, Entry<A>>,
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
}

/// What a request does to a key's state.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Decide without recording.
    Peek,
    /// Decide, and record if admitted.
    Check,
    /// Record whether or not it fits, then peek one permit.
    Charge,
}

/// What a request method returns: a [`Decision`] for the methods whose cost
/// always fits a fresh state (a cost of 1, a charge), a `Result` for those
/// that take any cost.
trait Answer {
    fn decided(decision: Decision) -> Self;
    fn refused(error: CostError) -> Self;
}

impl Answer for Decision {
    #[inline(always)]
    fn decided(decision: Decision) -> Decision {
        decision
    }

    fn refused(error: CostError) -> Decision {
        // Every algorithm's capacity is at least 1, and a charge is never
        // refused: only `check_n` and `peek_n` can get here, and they answer
        // in a `Result`.
        unreachable!("keyed: refused a cost that always fits: {error}")
    }
}

impl Answer for Result<Decision, CostError> {
    #[inline(always)]
    fn decided(decision: Decision) -> Self {
        Ok(decision)
    }

    fn refused(error: CostError) -> Self {
        Err(error)
    }
}

/// One key's state and the algorithm it runs under: 8 bytes beside the
/// cell, so that a `u64` key with a one-word state is 24 bytes in the map.
struct Entry<A: Algorithm> {
    algorithm: Arc<Resolved<A>>,
    cell: A::Cell,
}

/// An algorithm as the rules of one generation resolved it. The generation
/// lives here, shared by every key of the tier, rather than in each entry.
struct Resolved<A> {
    algorithm: A,
    /// The rules' generation when this was made; a key holding an older one
    /// re-resolves on its next request.
    generation: u64,
}

impl<A> std::ops::Deref for Resolved<A> {
    type Target = A;

    fn deref(&self) -> &A {
        &self.algorithm
    }
}

struct Tier<A> {
    algorithm: Arc<Resolved<A>>,
    carry: Carry,
    /// The carry rule is that of a removed override, spent once applied.
    pending: bool,
}

impl<A: Clone> Tier<A> {
    fn new(algorithm: A, generation: u64, carry: Carry) -> Tier<A> {
        Tier {
            algorithm: Arc::new(Resolved {
                algorithm,
                generation,
            }),
            carry,
            pending: false,
        }
    }

    /// The same algorithm under `generation`: keys holding the older copy
    /// re-resolve, and keep their state (the algorithm is equal).
    fn restamp(&mut self, generation: u64) {
        if self.algorithm.generation != generation {
            self.algorithm = Arc::new(Resolved {
                algorithm: self.algorithm.algorithm.clone(),
                generation,
            });
        }
    }
}

impl<A> Clone for Tier<A> {
    fn clone(&self) -> Tier<A> {
        Tier {
            algorithm: Arc::clone(&self.algorithm),
            carry: self.carry,
            pending: self.pending,
        }
    }
}

type OverrideFn<K, A> = Box<dyn Fn(&K) -> Option<A> + Send + Sync>;

struct Policies<K, A> {
    /// Bumped by every change of quota, under the write lock.
    generation: u64,
    default: Tier<A>,
    exact: HashMap<K, Tier<A>, Hasher>,
    function: Option<OverrideFn<K, A>>,
    /// Distinct results of `function`, shared between the keys that get them.
    function_results: Vec<Arc<Resolved<A>>>,
    /// Keys whose exact override was removed, with the carry rule of the
    /// removal, until their state is carried over.
    pending_carry: HashMap<K, Carry, Hasher>,
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

/// Builds a [`KeyedLimiter`]; every setting has a default.
pub struct KeyedBuilder<K, A: Algorithm> {
    default: A,
    clock: ClockSource,
    exact: Vec<(K, A)>,
    function: Option<OverrideFn<K, A>>,
    max_keys: usize,
    sweep_every: Option<Duration>,
}

impl<K, A> KeyedBuilder<K, A>
where
    K: Hash + Eq + Send + Sync + 'static,
    A: Algorithm,
{
    /// The clock. By default, the [`QuantaClock`](crate::QuantaClock) (the
    /// time-stamp counter where it is invariant, the monotonic clock
    /// elsewhere); `.clock(MonotonicClock::new())` for `Instant` itself.
    pub fn clock(mut self, clock: impl Into<ClockSource>) -> Self {
        self.clock = clock.into();
        self
    }

    /// Runs `algorithm` for `key` instead of the default. Exact overrides
    /// win over the override function.
    pub fn override_key(mut self, key: K, algorithm: A) -> Self {
        self.exact.push((key, algorithm));
        self
    }

    /// Asks `function` for the algorithm of every new key without an exact
    /// override; `None` means the default. It runs when a key is first seen
    /// (and after a change of quota), never on the path of a known key.
    /// Equal results are shared between keys, so return one of a few tiers
    /// rather than a new quota per key. By default, there is none.
    pub fn override_with(
        mut self,
        function: impl Fn(&K) -> Option<A> + Send + Sync + 'static,
    ) -> Self {
        self.function = Some(Box::new(function));
        self
    }

    /// The most keys with a state at once. By default, 2^24 (16,777,216).
    ///
    /// It also sizes the map: one shard per 2^16 keys of the cap, from 8 to
    /// 256 shards (128 bytes each when empty), so that growing one shard's
    /// table holds up requests to that shard for a bounded time. A limiter
    /// that will hold a few thousand keys can say so and take 1 KiB empty
    /// instead of 32 KiB.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// How often the background thread removes idle keys; `None` for no
    /// thread (call [`KeyedLimiter::sweep`] yourself). By default, every
    /// second.
    pub fn sweep_every(mut self, interval: Option<Duration>) -> Self {
        self.sweep_every = interval;
        self
    }

    /// The limiter.
    ///
    /// # Panics
    ///
    /// If a sweep interval is set and the operating system refuses to spawn
    /// a thread.
    pub fn build(self) -> KeyedLimiter<K, A> {
        let default = Tier::new(self.default, 0, Carry::Keep);
        let exact = self
            .exact
            .into_iter()
            .map(|(key, algorithm)| (key, Tier::new(algorithm, 0, Carry::Keep)))
            .collect();
        let overflow = Entry {
            algorithm: Arc::clone(&default.algorithm),
            cell: default.algorithm.new_cell(),
        };
        let shared = Arc::new(Shared {
            clock: self.clock,
            map: KeyMap::new(self.max_keys),
            policies: RwLock::new(Policies {
                generation: 0,
                default,
                exact,
                function: self.function,
                function_results: Vec::new(),
                pending_carry: HashMap::default(),
            }),
            generation: AtomicU64::new(0),
            live: AtomicUsize::new(0),
            swept_at: AtomicU64::new(0),
            max_keys: self.max_keys,
            sweep_every: self.sweep_every,
            overflow: Mutex::new(overflow),
            sweeper: OnceLock::new(),
            counters: Counters::default(),
        });
        if let Some(interval) = self.sweep_every {
            let thread = spawn_sweeper(Arc::downgrade(&shared), interval);
            let _ = shared.sweeper.set(thread);
        }
        KeyedLimiter { shared }
    }
}

/// Sweeps every `interval`, or at once when woken; stops when the limiter is
/// dropped.
fn spawn_sweeper<K, A>(shared: Weak<Shared<K, A>>, interval: Duration) -> Thread
where
    K: Hash + Eq + Send + Sync + 'static,
    A: Algorithm,
{
    let interval = interval.max(Duration::from_millis(1));
    std::thread::Builder::new()
        .name("tollgate-sweeper".into())
        .spawn(move || {
            loop {
                std::thread::park_timeout(interval);
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                shared.sweep();
            }
        })
        .expect("tollgate: failed to spawn the keyed limiter's sweeper thread")
        .thread()
        .clone()
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
        }
    }

    /// Takes one permit for `key` if it is available now.
    #[inline]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // Every algorithm admits a cost of 1 on a fresh state.
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
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.shared.decide(key, cost, Mode::Check)
    }

    /// What [`check`](Self::check) would answer for `key` now, without taking
    /// anything (and without creating a state for an unknown key).
    #[inline]
    pub fn peek<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
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
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.shared.decide(key, cost, Mode::Peek)
    }

    /// Records `cost` permits used by `key` now, whether or not they fit,
    /// and returns what a request of one permit would be told right after:
    /// the second half of *reserve, then settle*. What each algorithm can
    /// owe is in [`Limiter::charge_n`](crate::Limiter::charge_n).
    ///
    /// A key without a state gets one (a key swept between its request and
    /// its charge starts fresh, which is what it would have been); while the
    /// map is full, a new key's charge goes to the overflow state. A cost of
    /// 0 records nothing; no cost is an error.
    #[inline]
    pub fn charge_n<Q>(&self, key: &Q, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // A charge is never refused.
        self.shared.decide(key, cost, Mode::Charge)
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

impl<K, A> Shared<K, A>
where
    K: Hash + Eq + Send + Sync + 'static,
    A: Algorithm,
{
    /// Decides `cost` for `key`: the path of a known key of the current
    /// rules here, inlined into the public methods (and through them into
    /// their callers) so that the decision is built where it is used; the
    /// rest in [`decide_slow`](Self::decide_slow). It answers in the
    /// caller's own type ([`Answer`]) rather than in a `Result` the caller
    /// unwraps: a 48-byte decision built in one slot and copied to another is
    /// read with wider loads than it was written with, which stalled on
    /// store forwarding (seen with perf: a quarter of a keyed check).
    #[inline(always)]
    fn decide<Q, R: Answer>(&self, key: &Q, cost: u64, mode: Mode) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now();
        // Acquire: pairs with the Release of a change, so that an entry of the
        // current generation is decided under the rules that change published.
        let generation = self.generation.load(Ordering::Acquire);
        // A known key of the current generation: its shard's shared lock
        // only. (An entry may be newer than the generation read: a request
        // that read a later one refreshed it; its rules are then the current
        // ones.) The guard is dropped at the end of the arm, before any
        // write lock.
        let known = match self.map.get(key) {
            Some(found) => {
                if let Some(entry) = found.value() {
                    if entry.algorithm.generation >= generation {
                        return entry.run(now, cost, mode);
                    }
                }
                true
            }
            None => false,
        };
        self.decide_slow(key, cost, mode, now, generation, known)
    }

    /// A key that is new, or whose quota changed since its last request.
    #[inline(never)]
    fn decide_slow<Q, R: Answer>(
        &self,
        key: &Q,
        cost: u64,
        mode: Mode,
        now: Nanos,
        generation: u64,
        known: bool,
    ) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if known {
            // Its quota changed: re-resolve and carry its state over.
            let updated = self.map.update(key, |key, entry| {
                self.refresh(key, entry, now);
                entry.run(now, cost, mode)
            });
            if let Some(result) = updated {
                return result;
            }
            // Swept meanwhile: it is new again.
        }
        let owned = key.to_owned();
        let tier = self.resolve(&owned);
        let fresh = Entry {
            cell: tier.algorithm.new_cell(),
            algorithm: Arc::clone(&tier.algorithm),
        };
        // A state that a sweep removed was idle at the sweep's reading and at
        // every later instant, not before: a fresh state answers for it only
        // from there on, so it decides at the later of `now` and the latest
        // sweep's reading (a swept key never re-credits, whether the sweep
        // raced this request or the clock went back since).
        if mode == Mode::Peek || cost == 0 {
            // Looking never creates a state, nor does a charge of nothing: a
            // fresh one answers (a charge answers for one permit).
            let looked = if mode == Mode::Charge { 1 } else { cost };
            return fresh.run(self.fresh_time(now), looked, Mode::Peek);
        }
        if mode == Mode::Check {
            if let Err(error) = fresh.within_capacity(cost) {
                return R::refused(error);
            }
        }
        // The tier carries the rule of a removed override: it is spent now.
        self.spend(&tier, &owned);
        if !self.reserve_slot() {
            return R::decided(self.decide_overflow(now, cost, generation, mode));
        }
        self.map.upsert(owned, fresh, |slot| match slot {
            Slot::Inserted(entry) => entry.run(self.fresh_time(now), cost, mode),
            Slot::Occupied(entry) => {
                // Another request created it first: give back the slot.
                self.live.fetch_sub(1, Ordering::Relaxed);
                if entry.algorithm.generation < generation {
                    entry.adopt(&tier, now);
                }
                entry.run(now, cost, mode)
            }
        })
    }

    /// Takes one of the `max_keys` slots, if any is free.
    fn reserve_slot(&self) -> bool {
        // Relaxed: the count is a bound, not a publication of other memory;
        // fetch_update makes "below the cap, then one more" one step.
        let reserved = self
            .live
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |live| {
                (live < self.max_keys).then_some(live + 1)
            })
            .is_ok();
        if !reserved {
            if let Some(sweeper) = self.sweeper.get() {
                sweeper.unpark();
            }
        }
        reserved
    }

    /// Decides a request for a new key while the map is full.
    fn decide_overflow(&self, now: Nanos, cost: u64, generation: u64, mode: Mode) -> Decision {
        self.counters.overflowed.fetch_add(1, Ordering::Relaxed);
        let mut overflow = crate::sync::lock(&self.overflow);
        if overflow.algorithm.generation < generation {
            let tier = self.read_policies().default.clone();
            overflow.adopt(&tier, now);
        }
        if mode == Mode::Charge {
            overflow.algorithm.charge_cell(&overflow.cell, now, cost);
            return overflow.algorithm.peek_cell(&overflow.cell, now, 1);
        }
        let capacity = overflow.algorithm.capacity();
        if cost > capacity {
            // The key's own quota allows this cost, the shared default does
            // not: it waits for a slot, which a sweep may free.
            let shared = overflow.algorithm.peek_cell(&overflow.cell, now, capacity);
            let retry_after = self.sweep_every.unwrap_or(DEFAULT_SWEEP_EVERY);
            return Decision::deny(
                shared.limit(),
                shared.remaining(),
                crate::clock::saturating_nanos(retry_after),
                crate::clock::saturating_nanos(shared.reset_after()),
            );
        }
        overflow.algorithm.check_cell(&overflow.cell, now, cost)
    }

    /// The algorithm `key` runs now, and the carry rule that brought it.
    fn resolve(&self, key: &K) -> Tier<A> {
        let policies = self.read_policies();
        if let Some(tier) = policies.exact.get(key) {
            return tier.clone();
        }
        let mut tier = match &policies.function {
            None => policies.default.clone(),
            Some(function) => match function(key) {
                None => policies.default.clone(),
                Some(algorithm) => {
                    let shared = policies
                        .function_results
                        .iter()
                        .find(|a| a.algorithm == algorithm)
                        .cloned();
                    Tier {
                        algorithm: shared.unwrap_or_else(|| {
                            Arc::new(Resolved {
                                algorithm,
                                generation: policies.generation,
                            })
                        }),
                        carry: policies.default.carry,
                        pending: false,
                    }
                }
            },
        };
        if let Some(&carry) = policies.pending_carry.get(key) {
            tier.carry = carry;
            tier.pending = true;
        }
        let share = policies.function_results.len() < SHARED_FUNCTION_RESULTS
            && !Arc::ptr_eq(&tier.algorithm, &policies.default.algorithm)
            && !policies
                .function_results
                .iter()
                .any(|a| Arc::ptr_eq(a, &tier.algorithm));
        drop(policies);
        if share {
            self.write_policies()
                .function_results
                .push(Arc::clone(&tier.algorithm));
        }
        tier
    }

    /// Brings `entry` to the current rules: re-resolves its algorithm and,
    /// if it changed, carries its state over.
    fn refresh(&self, key: &K, entry: &mut Entry<A>, now: Nanos) {
        let tier = self.resolve(key);
        entry.adopt(&tier, now);
        self.spend(&tier, key);
    }

    /// Forgets the carry rule of `key`'s removed override once `tier`, which
    /// brought it, has been applied.
    fn spend(&self, tier: &Tier<A>, key: &K) {
        if tier.pending {
            self.write_policies().pending_carry.remove(key);
        }
    }

    /// Applies a change of quota and publishes it.
    fn change(&self, apply: impl FnOnce(&mut Policies<K, A>)) {
        let mut policies = self.write_policies();
        apply(&mut policies);
        policies.function_results.clear();
        // Every tier under the new generation (one copy of each algorithm,
        // so this is linear in the exact overrides; changes are rare).
        policies.generation += 1;
        let generation = policies.generation;
        policies.default.restamp(generation);
        for tier in policies.exact.values_mut() {
            tier.restamp(generation);
        }
        // Release, under the write lock: a request that sees the new
        // generation re-resolves under the new rules.
        self.generation.store(generation, Ordering::Release);
    }

    /// When a state created fresh after a miss decides: the later of `now`
    /// and the latest reading a sweep judged idleness at.
    #[inline]
    fn fresh_time(&self, now: Nanos) -> Nanos {
        // Relaxed: a sweep stores its reading before it takes any shard's
        // lock to remove a key, and a request that missed that key did so
        // under the same shard's lock taken after the removal (its read
        // lock on the miss, its write lock on the insert): the lock's
        // release/acquire makes the store visible here. A reading from a
        // sweep that removed nothing this request depends on only makes
        // the decision later, never earlier.
        now.max(Nanos::new(self.swept_at.load(Ordering::Relaxed)))
    }

    fn sweep(&self) -> usize {
        let now = self.clock.now();
        // Relaxed: ordered before every removal by the shard locks (see
        // `fresh_time`); `fetch_max` keeps the latest of concurrent sweeps.
        self.swept_at.fetch_max(now.as_u64(), Ordering::Relaxed);
        let mut removed = 0;
        self.map.retain(|_, entry| {
            let idle = entry.algorithm.is_idle(&entry.cell, now);
            removed += usize::from(idle);
            !idle
        });
        // Relaxed: see `reserve_slot`.
        self.live.fetch_sub(removed, Ordering::Relaxed);
        self.counters
            .evicted
            .fetch_add(removed as u64, Ordering::Relaxed);
        removed
    }

    fn read_policies(&self) -> RwLockReadGuard<'_, Policies<K, A>> {
        crate::sync::read(&self.policies)
    }

    fn write_policies(&self) -> RwLockWriteGuard<'_, Policies<K, A>> {
        crate::sync::write(&self.policies)
    }
}

impl<A: Algorithm> Entry<A> {
    #[inline]
    fn within_capacity(&self, cost: u64) -> Result<(), CostError> {
        let capacity = self.algorithm.capacity();
        if cost > capacity {
            return Err(CostError::new(cost, capacity));
        }
        Ok(())
    }

    // Inlined so that `mode`, a constant at every call site, selects its arm
    // at compile time and the decision is built in the caller's frame.
    #[inline(always)]
    fn run<R: Answer>(&self, now: Nanos, cost: u64, mode: Mode) -> R {
        if mode != Mode::Charge {
            if let Err(error) = self.within_capacity(cost) {
                return R::refused(error);
            }
        }
        R::decided(match mode {
            Mode::Check => self.algorithm.check_cell(&self.cell, now, cost),
            Mode::Peek => self.algorithm.peek_cell(&self.cell, now, cost),
            Mode::Charge => {
                self.algorithm.charge_cell(&self.cell, now, cost);
                self.algorithm.peek_cell(&self.cell, now, 1)
            }
        })
    }

    /// Moves to `tier`'s algorithm, carrying the state if it differs.
    fn adopt(&mut self, tier: &Tier<A>, now: Nanos) {
        // By value: every change re-resolves every key, and one whose quota
        // is equal (a copy under a new generation, or from the override
        // function) keeps its state.
        if !Arc::ptr_eq(&tier.algorithm, &self.algorithm) {
            if tier.algorithm.algorithm != self.algorithm.algorithm {
                self.cell = tier.algorithm.carry_cell(
                    &self.algorithm.algorithm,
                    &self.cell,
                    now,
                    tier.carry,
                );
            }
            self.algorithm = Arc::clone(&tier.algorithm);
        }
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
