//! The in-memory lease store (see the [`concurrency`](super) module
//! docs): one table under one mutex, the same steps as `tollgate-redis`'s
//! `concurrency.lua`, on the server's clock.

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tollgate::{Clock, ClockSource};

use super::{Denial, Granted, MAX_LEASES, Released};
use crate::config::ConcurrencyConfig;
use crate::metrics::ConcurrencyStats;

/// One table of leases under one mutex: the same steps as
/// `tollgate-redis`'s `concurrency.lua` (prune the expired, count, add if
/// it fits), on the server's clock.
pub(super) struct MemoryLeases {
    clock: ClockSource,
    /// Counts releases and expiries (acquisitions are counted by
    /// [`Leases::acquire`]).
    stats: ConcurrencyStats,
    ids: std::collections::hash_map::RandomState,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    /// Per (rule id, bucket) holding slots; an entry leaves at 0.
    held: HashMap<(Arc<str>, String), Bucket>,
    /// Live leases by id.
    leases: HashMap<String, MemoryLease>,
    /// `(expiry ns, id)` of every live lease, earliest first.
    expiries: BTreeSet<(u64, String)>,
    next: u64,
}

/// One bucket's live leases.
#[derive(Default)]
struct Bucket {
    /// Slots held.
    held: u32,
    /// Expiry (ns) → leases expiring then: the first is `retry_after`.
    expiries: std::collections::BTreeMap<u64, u32>,
}

struct MemoryLease {
    rule: Arc<str>,
    bucket: String,
    cost: u32,
    expires: u64,
}

impl MemoryLeases {
    pub(super) fn new(clock: ClockSource, stats: ConcurrencyStats) -> MemoryLeases {
        MemoryLeases {
            clock,
            stats,
            ids: std::collections::hash_map::RandomState::new(),
            table: Mutex::new(Table::default()),
        }
    }

    fn now(&self) -> u64 {
        self.clock.now().as_u64()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// 128 unguessable bits: two keyed hashes of a counter.
    pub(super) fn new_id(&self, counter: u64) -> String {
        let mut words = [0u64; 2];
        for (salt, word) in words.iter_mut().enumerate() {
            let mut hasher = self.ids.build_hasher();
            hasher.write_u64(counter);
            hasher.write_usize(salt);
            *word = hasher.finish();
        }
        format!("m{:016x}{:016x}", words[0], words[1])
    }

    pub(super) fn acquire(
        &self,
        rule: &Arc<str>,
        config: ConcurrencyConfig,
        bucket: &str,
        cost: u32,
    ) -> Result<Granted, Denial> {
        let now = self.now();
        let mut table = self.lock();
        table.prune(now, &self.stats);
        let slot = (Arc::clone(rule), bucket.to_owned());
        let (held, first) = table.held.get(&slot).map_or((0, now), |b| {
            (b.held, b.expiries.keys().next().copied().unwrap_or(now))
        });
        if u64::from(held) + u64::from(cost) > u64::from(config.limit) {
            return Err(Denial::Full {
                limit: config.limit,
                in_flight: held,
                retry_after: Duration::from_nanos(first.saturating_sub(now)),
            });
        }
        if table.leases.len() >= MAX_LEASES {
            return Err(Denial::Unavailable {
                retry_after: Duration::from_secs(1),
            });
        }
        let counter = table.next;
        table.next += 1;
        let id = self.new_id(counter);
        let ttl_ns = u64::try_from(config.lease_ttl.as_nanos()).unwrap_or(u64::MAX);
        let expires = now.saturating_add(ttl_ns);
        let entry = table.held.entry(slot).or_default();
        entry.held = held + cost;
        *entry.expiries.entry(expires).or_default() += 1;
        table.expiries.insert((expires, id.clone()));
        table.leases.insert(
            id.clone(),
            MemoryLease {
                rule: Arc::clone(rule),
                bucket: bucket.to_owned(),
                cost,
                expires,
            },
        );
        Ok(Granted {
            lease: id,
            ttl: config.lease_ttl,
            limit: config.limit,
            in_flight: Some(held + cost),
        })
    }

    pub(super) fn release(&self, id: &str) -> Released {
        let now = self.now();
        let mut table = self.lock();
        table.prune(now, &self.stats);
        match table.remove(id) {
            Some(rule) => {
                self.stats.count(&rule, |t| t.released += 1);
                Released::Freed
            }
            None => Released::Unknown,
        }
    }

    pub(super) fn prune(&self) {
        let now = self.now();
        self.lock().prune(now, &self.stats);
    }

    pub(super) fn in_flight(&self, rule: &str, bucket: &str) -> u32 {
        let now = self.now();
        let mut table = self.lock();
        table.prune(now, &self.stats);
        table
            .held
            .get(&(Arc::from(rule), bucket.to_owned()))
            .map_or(0, |b| b.held)
    }
}

impl Table {
    /// Drops every lease whose expiry is at or before `now` (a lease of
    /// TTL `t` taken at `s` holds its slots over `[s, s + t)`).
    /// Each counted as expired in `stats`.
    fn prune(&mut self, now: u64, stats: &ConcurrencyStats) {
        while let Some((expires, _)) = self.expiries.first() {
            if *expires > now {
                break;
            }
            if let Some((_, id)) = self.expiries.pop_first() {
                if let Some(rule) = self.remove(&id) {
                    stats.count(&rule, |t| t.expired += 1);
                }
            }
        }
    }

    /// Removes lease `id` and its slots; its rule if it was live.
    fn remove(&mut self, id: &str) -> Option<Arc<str>> {
        let lease = self.leases.remove(id)?;
        let rule = Arc::clone(&lease.rule);
        self.expiries.remove(&(lease.expires, id.to_owned()));
        let slot = (lease.rule, lease.bucket);
        if let Some(bucket) = self.held.get_mut(&slot) {
            debug_assert!(
                bucket.held >= lease.cost,
                "{} held, releasing {}",
                bucket.held,
                lease.cost
            );
            bucket.held = bucket.held.saturating_sub(lease.cost);
            if let Some(count) = bucket.expiries.get_mut(&lease.expires) {
                *count -= 1;
                if *count == 0 {
                    bucket.expiries.remove(&lease.expires);
                }
            }
            if bucket.held == 0 {
                self.held.remove(&slot);
            }
        }
        Some(rule)
    }
}
