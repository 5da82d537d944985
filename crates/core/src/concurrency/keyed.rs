//! [`KeyedConcurrencyLimiter`]: one limit's slots per key, in bounded memory.
//!
//! # Memory
//!
//! Keys live in shards, each a read/write lock around a `hashbrown` map
//! from key to its slots (one state word and a lazily allocated queue), hashed with a per-limiter random seed
//! (foldhash) so that an attacker choosing keys cannot aim at one shard or
//! one bucket chain.
//!
//! - **Idle keys are dropped.** A key with no slot in use and no waiter is
//!   indistinguishable from a fresh one (but for an adaptive limit's learnt
//!   value, which restarts at its initial limit). A shard drops its idle
//!   keys in a sweep when an insert finds it at its sweep mark (at first
//!   64 keys, then twice what the last sweep kept), so a shard holds at
//!   most twice its busy keys plus 64, and sweeping costs O(1) per insert,
//!   amortized.
//! - **A key with slots in use or waiters is never dropped**: its permits
//!   and tickets hold its slots, and a later acquisition must see them.
//! - **A hard cap** of `max_keys` (default 2^20) keys, split evenly over the
//!   shards (one shard below 512 keys, so that small caps are exact). When
//!   a new key finds its shard full even after a sweep, the key is refused
//!   with [`Reason::TooManyKeys`]: failing closed for new keys, never
//!   evicting a busy one. A full sweep that freed less than 1/16 of the
//!   shard is not retried for the next 1/16 of the shard's cap of refused
//!   inserts, so an attacker who keeps keys busy cannot make every refused
//!   insert a full sweep.
//!
//! # Keys
//!
//! As for the keyed rate limiter ([`KeyedLimiter`](crate::KeyedLimiter)):
//! requests name a key by any borrowed form `Q` of it (`K: Borrow<Q>`), and
//! a new key is made from `Q`'s owned form (`K: From<Q::Owned>`): `&str`
//! for `KeyedConcurrencyLimiter<String>` and for
//! `KeyedConcurrencyLimiter<`[`CompactString`](crate::CompactString)`>`,
//! `&u64` for `u64`. A known key is looked up without allocating; a
//! `CompactString` keeps a key of up to 24 bytes inline, with no heap block
//! of its own.
//!
//! Acquisitions run under their shard's read lock (a lookup and the
//! slots' compare-and-swap), inserts and sweeps under its write lock, so a
//! sweep never removes a key between another thread's lookup and its
//! acquisition. A release touches only the key's word (the permit holds
//! the key's slots), not the map.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use hashbrown::HashMap;

use super::config::{ConfigError, Denied, Priority, Reason};
use super::permit::{Permit, Ticket};
use super::settings::{Settings, settings_setters};
use super::slots::{Enqueued, Slots};
use crate::sync::{Arc, RwLock, read, write};

type Hasher = foldhash::fast::RandomState;

/// The default cap on keys.
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;

/// Keys per shard below which a shard is not swept on insert.
const FIRST_SWEEP: usize = 64;

/// One concurrency limit per key; see the [module docs](self).
///
/// Clones share the same keys.
///
/// # Examples
///
/// ```
/// use tollgate::concurrency::{KeyedConcurrencyLimiter, Reason};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = KeyedConcurrencyLimiter::<&str>::new(2)?;
/// let a = limiter.try_acquire(&"alice", 2)?;
/// assert_eq!(limiter.try_acquire(&"alice", 1).unwrap_err().reason(), Reason::Full);
/// let b = limiter.try_acquire(&"bob", 1)?;
/// drop((a, b));
/// assert_eq!(limiter.in_flight(&"alice"), 0);
/// # Ok(())
/// # }
/// ```
pub struct KeyedConcurrencyLimiter<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for KeyedConcurrencyLimiter<K> {
    fn clone(&self) -> Self {
        KeyedConcurrencyLimiter {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<K> {
    settings: Settings,
    /// The fixed limit, or the adaptive one's initial value.
    limit: u32,
    shard_cap: usize,
    hasher: Hasher,
    shards: Box<[CachePadded<RwLock<Shard<K>>>]>,
}

struct Shard<K> {
    map: HashMap<K, Arc<Slots>, Hasher>,
    /// Sweep on insert once the shard holds this many keys.
    sweep_at: usize,
    /// Refused inserts to let pass before sweeping a full shard again.
    sweep_holdoff: usize,
}

/// Builds a [`KeyedConcurrencyLimiter`]; see [`KeyedConcurrencyLimiter::builder`].
pub struct KeyedConcurrencyBuilder<K> {
    settings: Settings,
    max_keys: usize,
    key: PhantomData<fn() -> K>,
}

impl<K> fmt::Debug for KeyedConcurrencyBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedConcurrencyBuilder")
            .field("settings", &self.settings)
            .field("max_keys", &self.max_keys)
            .finish()
    }
}

impl<K: Hash + Eq> KeyedConcurrencyBuilder<K> {
    settings_setters!();

    /// The most keys held at once; a new key beyond it is refused with
    /// [`Reason::TooManyKeys`] unless idle keys can be dropped. By default,
    /// [`DEFAULT_MAX_KEYS`].
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// The limiter.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for a bad limit, bad adaptive bounds or
    /// `max_keys` of 0.
    pub fn build(self) -> Result<KeyedConcurrencyLimiter<K>, ConfigError> {
        let limit = self.settings.check()?;
        if self.max_keys == 0 {
            return Err(ConfigError::MaxKeys);
        }
        let shards = if cfg!(loom) {
            1
        } else {
            (self.max_keys / 512)
                .clamp(1, 64)
                .next_power_of_two()
                .min(64)
        };
        let shard_cap = self.max_keys.div_ceil(shards);
        let hasher = Hasher::default();
        let shards = (0..shards)
            .map(|_| {
                CachePadded::new(RwLock::new(Shard {
                    map: HashMap::with_hasher(hasher.clone()),
                    sweep_at: FIRST_SWEEP.min(shard_cap),
                    sweep_holdoff: 0,
                }))
            })
            .collect();
        Ok(KeyedConcurrencyLimiter {
            inner: Arc::new(Inner {
                settings: self.settings,
                limit,
                shard_cap,
                hasher,
                shards,
            }),
        })
    }
}

impl<K: Hash + Eq> KeyedConcurrencyLimiter<K> {
    /// At most `limit` slots per key, with the default settings.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Limit`] unless `1 ≤ limit ≤ MAX_LIMIT`.
    pub fn new(limit: u64) -> Result<KeyedConcurrencyLimiter<K>, ConfigError> {
        KeyedConcurrencyLimiter::builder(limit).build()
    }
}

impl<K: Hash + Eq> KeyedConcurrencyLimiter<K> {
    /// Starts building a limiter of `limit` slots per key.
    pub fn builder(limit: u64) -> KeyedConcurrencyBuilder<K> {
        KeyedConcurrencyBuilder {
            settings: Settings::new(limit),
            max_keys: DEFAULT_MAX_KEYS,
            key: PhantomData,
        }
    }
}

impl<K: Hash + Eq> KeyedConcurrencyLimiter<K> {
    fn shard<Q>(&self, key: &Q) -> &RwLock<Shard<K>>
    where
        Q: Hash + ?Sized,
    {
        let hash = self.inner.hasher.hash_one(key);
        // The top bits: hashbrown uses the low ones inside the shard.
        let index = (hash >> 32) as usize & (self.inner.shards.len() - 1);
        &self.inner.shards[index]
    }

    fn cost_of(&self, cost: u64) -> Result<u32, Denied> {
        u32::try_from(cost).map_err(|_| Denied {
            reason: Reason::Cost,
            limit: self.inner.limit,
            in_flight: 0,
            remaining: 0,
        })
    }

    /// Runs `admit` on `key`'s slots under its shard's lock, inserting the
    /// key if it is new and there is room.
    fn with_slots<Q, T>(
        &self,
        key: &Q,
        admit: impl Fn(&Arc<Slots>) -> Result<T, Denied>,
    ) -> Result<T, Denied>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let shard = self.shard(key);
        {
            let shard = read(shard);
            if let Some(slots) = shard.map.get(key) {
                return admit(slots);
            }
        }
        let mut shard = write(shard);
        if let Some(slots) = shard.map.get(key) {
            return admit(slots);
        }
        if !self.make_room(&mut shard) {
            return Err(Denied {
                reason: Reason::TooManyKeys,
                limit: self.inner.limit,
                in_flight: 0,
                remaining: 0,
            });
        }
        let slots = Arc::new(self.inner.settings.slots(self.inner.limit));
        let result = admit(&slots);
        // Insert only what holds a slot or a waiter: a refused first
        // request leaves no key behind.
        if !slots.is_idle() {
            shard.map.insert(K::from(key.to_owned()), slots);
        }
        result
    }

    /// Makes room for one more key in `shard`: false if it is full of busy keys.
    fn make_room(&self, shard: &mut Shard<K>) -> bool {
        let cap = self.inner.shard_cap;
        let len = shard.map.len();
        if len < shard.sweep_at {
            return true;
        }
        if len >= cap && shard.sweep_holdoff > 0 {
            shard.sweep_holdoff -= 1;
            return false;
        }
        // Under the write lock no acquisition of this shard runs: a key
        // judged idle stays idle until it is gone. (A zero-cost permit may
        // still hold the slots; it releases nothing into them.)
        shard.map.retain(|_, slots| !slots.is_idle());
        let kept = shard.map.len();
        shard.sweep_at = (2 * kept).max(FIRST_SWEEP).min(cap);
        if kept >= cap {
            shard.sweep_holdoff = (cap / 16).max(1);
            if len - kept < cap / 16 {
                return false;
            }
        }
        kept < cap
    }

    /// Takes `cost` slots of `key` at [`Priority::Default`] if they fit now.
    ///
    /// # Errors
    ///
    /// [`Denied`] if not (nothing is taken), including
    /// [`Reason::TooManyKeys`] for a new key when the cap is reached.
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q, cost: u64) -> Result<Permit, Denied>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        self.try_acquire_as(key, cost, Priority::Default)
    }

    /// Takes `cost` slots of `key` at `priority` if they fit in its share
    /// now and no waiter of the same or a higher priority is queued.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire).
    pub fn try_acquire_as<Q>(
        &self,
        key: &Q,
        cost: u64,
        priority: Priority,
    ) -> Result<Permit, Denied>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let cost = self.cost_of(cost)?;
        self.with_slots(key, |slots| {
            let in_flight = slots.try_acquire(cost, priority)?;
            Ok(Permit::new(slots.clone(), cost, in_flight))
        })
    }

    /// Takes `cost` slots of `key` now if it may, else queues for them; see
    /// [`ConcurrencyLimiter::enqueue`](super::ConcurrencyLimiter::enqueue).
    ///
    /// # Errors
    ///
    /// [`Denied`] at once for [`Reason::Cost`], [`Reason::QueueFull`] and
    /// [`Reason::TooManyKeys`].
    pub fn enqueue<Q>(&self, key: &Q, cost: u64, priority: Priority) -> Result<Ticket, Denied>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let cost = self.cost_of(cost)?;
        self.with_slots(key, |slots| {
            Ok(match slots.enqueue(cost, priority)? {
                Enqueued::Now(in_flight) => Ticket::ready(slots.clone(), cost, priority, in_flight),
                Enqueued::Queued(id) => Ticket::queued(slots.clone(), cost, priority, id),
            })
        })
    }

    /// Slots of `key` in use now; 0 for a key not held.
    pub fn in_flight<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        read(self.shard(key))
            .map
            .get(key)
            .map_or(0, |slots| slots.load().in_flight)
    }

    /// The limit in force for `key` (the initial one for a key not held).
    pub fn limit<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        read(self.shard(key))
            .map
            .get(key)
            .map_or(self.inner.limit, |slots| slots.load().limit)
    }

    /// Keys held now, idle ones not yet swept included.
    pub fn len(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|shard| read(shard).map.len())
            .sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every idle key now; returns how many keys remain.
    pub fn sweep(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|shard| {
                let mut shard = write(shard);
                shard.map.retain(|_, slots| !slots.is_idle());
                shard.map.len()
            })
            .sum()
    }

    /// The longest `acquire().await` waits.
    pub fn max_delay(&self) -> Duration {
        self.inner.settings.max_delay
    }
}

impl<K> fmt::Debug for KeyedConcurrencyLimiter<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedConcurrencyLimiter")
            .field("limit", &self.inner.limit)
            .field("shards", &self.inner.shards.len())
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "tokio")]
impl<K: Hash + Eq> KeyedConcurrencyLimiter<K> {
    /// Takes `cost` slots of `key` at `priority`, waiting for them as
    /// [`ConcurrencyLimiter::acquire`](super::ConcurrencyLimiter::acquire)
    /// does. Feature `tokio`.
    ///
    /// # Errors
    ///
    /// As `ConcurrencyLimiter::acquire`, and [`Reason::TooManyKeys`].
    pub async fn acquire<Q>(&self, key: &Q, cost: u64, priority: Priority) -> Result<Permit, Denied>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let ticket = self.enqueue(key, cost, priority)?;
        let limit = self.limit(key);
        let max_delay = self.inner.settings.max_delay;
        super::wait::within(ticket, max_delay, || Denied {
            reason: Reason::TimedOut,
            limit,
            in_flight: self.in_flight(key),
            remaining: 0,
        })
        .await
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::CompactString;

    fn keys(limiter: &KeyedConcurrencyLimiter<CompactString>) -> Vec<CompactString> {
        limiter
            .inner
            .shards
            .iter()
            .flat_map(|shard| read(shard).map.keys().cloned().collect::<Vec<_>>())
            .collect()
    }

    #[test]
    fn compact_string_keys_are_named_by_str_and_held_inline() {
        // The bound was `Q: ToOwned<Owned = K>`: a `CompactString` key could
        // not be named by a `&str` (whose owned form is a `String`).
        let limiter = KeyedConcurrencyLimiter::<CompactString>::new(2).unwrap();
        let alice = limiter.try_acquire("user:00001234", 2).unwrap();
        assert_eq!(
            limiter
                .try_acquire("user:00001234", 1)
                .unwrap_err()
                .reason(),
            Reason::Full
        );
        let bob = limiter
            .try_acquire_as("user:00005678", 1, Priority::Critical)
            .unwrap();
        let queued = limiter
            .enqueue("user:00005678", 1, Priority::Default)
            .unwrap();
        assert_eq!(limiter.in_flight("user:00001234"), 2);
        assert_eq!(limiter.in_flight("user:00005678"), 2);
        let held = keys(&limiter);
        assert_eq!(held.len(), 2);
        assert!(
            held.iter().all(|key| !key.is_heap_allocated()),
            "short keys take no heap block: {held:?}"
        );
        drop((alice, bob, queued));
        assert_eq!(limiter.sweep(), 0);
    }

    #[test]
    fn a_long_compact_string_key_goes_to_the_heap_and_still_works() {
        let limiter = KeyedConcurrencyLimiter::<CompactString>::new(1).unwrap();
        let long = "tenant:0123456789abcdef:user:42";
        let permit = limiter.try_acquire(long, 1).unwrap();
        assert!(limiter.try_acquire(long, 1).is_err());
        assert!(keys(&limiter)[0].is_heap_allocated());
        drop(permit);
        assert!(limiter.try_acquire(long, 1).is_ok());
    }
}
