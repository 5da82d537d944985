//! [`KeyedBuilder`]: a keyed limiter's settings, and the sweeper thread it
//! starts.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::entry::{Entry, ShardTag};
use super::tier::{OverrideFn, Policies, Tier};
use super::{Counters, KeyedLimiter, Shared, sweeper};
use crate::algorithm::{Algorithm, Carry};
use crate::clock::ClockSource;
use crate::keymap::KeyMap;
use crate::sync::{AtomicU64, AtomicUsize, Mutex, RwLock};

/// Builds a [`KeyedLimiter`]; every setting has a default.
pub struct KeyedBuilder<K, A: Algorithm> {
    pub(super) default: A,
    pub(super) clock: ClockSource,
    pub(super) exact: Vec<(K, A)>,
    pub(super) function: Option<OverrideFn<K, A>>,
    pub(super) max_keys: usize,
    pub(super) sweep_every: Option<Duration>,
    pub(super) ops: super::operate::OpsBuilder<K>,
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
    /// It also sizes the map: one shard per 2^16 keys of the cap, and no
    /// more than 16 per thread the machine runs at once, from 8 to 256
    /// shards (128 bytes each when empty), so that growing one shard's
    /// table holds up requests to that shard for a bounded time while few
    /// tables keep the memory their growth frees out of the resident set
    /// (see `keymap.rs`). A limiter that will hold a few thousand keys can
    /// say so and take 1 KiB empty.
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
            map: KeyMap::new(self.max_keys, || ShardTag::new(&default.algorithm)),
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
            ops: self.ops.build(),
        });
        if let Some(interval) = self.sweep_every {
            let thread = sweeper::spawn(
                "tollgate-sweeper",
                Arc::downgrade(&shared),
                interval,
                Shared::sweep,
            );
            let _ = shared.sweeper.set(thread);
        }
        KeyedLimiter { shared }
    }
}
