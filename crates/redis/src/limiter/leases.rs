//! The leases a limiter holds: permits taken ahead from Redis and spent
//! locally (see [`lease`](crate::lease) for what they guarantee).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tollgate::{Decision, Nanos};

use crate::key::BoundedKey;
use crate::lease::LeaseConfig;
use crate::limit::ConfigError;
use crate::limiter::{Outcome, RedisLimiter, Reply};
use crate::policy::{Fault, Source};
use crate::script::Op;

struct Held {
    left: u64,
    taken: u64,
    taken_at: Nanos,
    expires: Nanos,
    limit: u64,
    reply: Reply,
}

struct KeyLease {
    held: Option<Held>,
    size: u64,
    fetch: Arc<tokio::sync::Mutex<()>>,
}

pub(crate) struct Leases {
    config: LeaseConfig,
    capacity: u64,
    /// By bounded key: memory bounded in bytes, not only in keys.
    keys: Mutex<HashMap<BoundedKey, KeyLease>>,
}

enum Spend {
    Done(Decision),
    Fetch(Arc<tokio::sync::Mutex<()>>),
    NoRoom,
}

impl Leases {
    pub(crate) fn new(config: LeaseConfig, capacity: u64) -> Result<Leases, ConfigError> {
        if config.initial == 0 || config.max < config.initial || config.ttl.is_zero() {
            return Err(ConfigError::Invalid(
                "leases need 0 < initial <= max and a TTL above 0",
            ));
        }
        Ok(Leases {
            config,
            capacity,
            keys: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<BoundedKey, KeyLease>> {
        // Plain values: valid even if a holder panicked.
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Spends `cost` from the key's lease if it holds enough.
    fn spend(&self, key: &BoundedKey, cost: u64, now: Nanos) -> Spend {
        let mut keys = self.lock();
        if !keys.contains_key(key) && keys.len() >= self.config.max_keys {
            return Spend::NoRoom;
        }
        let entry = keys.entry(key.clone()).or_insert_with(|| KeyLease {
            held: None,
            size: self.config.initial,
            fetch: Arc::new(tokio::sync::Mutex::new(())),
        });
        if let Some(held) = &mut entry.held {
            if now < held.expires && held.left >= cost {
                held.left -= cost;
                let reset = held
                    .reply
                    .decision
                    .reset_after()
                    .saturating_sub(now.saturating_duration_since(held.taken_at));
                return Spend::Done(Decision::from_parts(
                    true,
                    held.limit,
                    held.left,
                    Duration::ZERO,
                    reset,
                ));
            }
        }
        Spend::Fetch(entry.fetch.clone())
    }

    /// Takes the key's spent or expired lease out, adapting the next size.
    fn retire(&self, key: &BoundedKey, cost: u64, now: Nanos) -> (Option<Held>, u64) {
        let mut keys = self.lock();
        let Some(entry) = keys.get_mut(key) else {
            return (None, self.config.initial);
        };
        if let Some(held) = entry.held.take() {
            let half = self.config.ttl / 2;
            if held.left < cost && now.saturating_duration_since(held.taken_at) < half {
                entry.size = (entry.size * 2).min(self.config.max);
            } else if now >= held.expires && held.left > held.taken / 2 {
                entry.size = (entry.size / 2).max(1);
            }
            let size = entry.size;
            return (Some(held), size);
        }
        (None, entry.size)
    }

    pub(crate) async fn check(
        &self,
        limiter: &RedisLimiter,
        key: &BoundedKey,
        cost: u64,
    ) -> Outcome {
        let fetch = match self.spend(key, cost, limiter.now()) {
            Spend::Done(d) => return limiter.counted(d, Source::Lease),
            Spend::NoRoom => return limiter.check_plain(key, cost).await,
            Spend::Fetch(fetch) => fetch,
        };
        // One fetch per key at a time; the others wait for it, bounded.
        let deadline = limiter.shared().deadline();
        let Ok(_fetching) = tokio::time::timeout(deadline, fetch.lock()).await else {
            return limiter.fallback(key, cost, Fault::Timeout, deadline);
        };
        let now = limiter.now();
        if let Spend::Done(d) = self.spend(key, cost, now) {
            return limiter.counted(d, Source::Lease);
        }
        let (stale, size) = self.retire(key, cost, now);
        if let Some(stale) = stale {
            if stale.left > 0 {
                let limiter = limiter.clone();
                let key = key.clone();
                tokio::spawn(async move { give_back(&limiter, &key, &stale).await });
            }
        }
        let size = size.max(cost).min(self.capacity);
        match limiter.ask(key, size, Op::Lease, cost, None).await {
            Ok(reply) => {
                let decision = reply.decision;
                if decision.is_allowed() {
                    let left = reply.taken.saturating_sub(cost);
                    let mut lifetime = self.config.ttl;
                    if let Some(end) = reply.window_end {
                        lifetime = lifetime.min(end);
                    }
                    let held = Held {
                        left,
                        taken: reply.taken,
                        taken_at: now,
                        expires: now.saturating_add(lifetime),
                        limit: decision.limit(),
                        reply,
                    };
                    // The sweep may have forgotten the key while it had no
                    // lease: insert it again rather than strand the permits.
                    let size = size.min(self.config.max);
                    self.lock()
                        .entry(key.clone())
                        .or_insert_with(|| KeyLease {
                            held: None,
                            size,
                            fetch: fetch.clone(),
                        })
                        .held = Some(held);
                    let reported = Decision::from_parts(
                        true,
                        decision.limit(),
                        decision.remaining() + left,
                        Duration::ZERO,
                        decision.reset_after(),
                    );
                    return limiter.counted(reported, Source::Redis);
                }
                limiter.counted(decision, Source::Redis)
            }
            Err((fault, retry)) => limiter.fallback(key, cost, fault, retry),
        }
    }

    fn take_where(&self, expired_only: bool, now: Nanos) -> Vec<(BoundedKey, Held)> {
        let mut keys = self.lock();
        let mut out = Vec::new();
        keys.retain(|key, entry| {
            if let Some(held) = &entry.held {
                if !expired_only || now >= held.expires {
                    if let Some(held) = entry.held.take() {
                        out.push((key.clone(), held));
                    }
                }
            }
            // Keep keys with a lease; forget idle ones (bounded memory).
            entry.held.is_some()
        });
        out
    }

    pub(crate) async fn return_expired(&self, limiter: &RedisLimiter) {
        let stale = self.take_where(true, limiter.now());
        futures_util::future::join_all(stale.iter().map(|(k, h)| give_back(limiter, k, h))).await;
    }

    pub(crate) async fn return_all(&self, limiter: &RedisLimiter) {
        let all = self.take_where(false, limiter.now());
        futures_util::future::join_all(all.iter().map(|(k, h)| give_back(limiter, k, h))).await;
    }

    /// Drops the lease held for `key` without giving its permits back: a
    /// control replaced the state they were taken from (see
    /// [`controls`](crate::controls)).
    pub(crate) fn forget(&self, key: &BoundedKey) {
        if let Some(entry) = self.lock().get_mut(key) {
            entry.held = None;
        }
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.config.ttl
    }

    /// Bytes of key held, over every key.
    #[cfg(test)]
    pub(crate) fn key_bytes(&self) -> usize {
        self.lock().keys().map(|k| k.as_bytes().len()).sum()
    }
}

async fn give_back(limiter: &RedisLimiter, key: &BoundedKey, held: &Held) {
    if held.left > 0 {
        // A refund that fails leaves the permits stranded until the state
        // refills by itself: bounded by the lease, never an over-admission.
        let _ = limiter
            .ask(key, held.left, Op::Refund, 0, Some(&held.reply))
            .await;
    }
}

/// Returns expired leases every TTL while the limiter lives.
pub(crate) fn spawn_sweeper(shared: Weak<crate::limiter::Shared>, every: Duration) {
    if tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(limiter) = RedisLimiter::upgrade(&shared) else {
                return;
            };
            limiter.return_expired_leases().await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(left: u64, taken: u64, taken_at_ms: u64, ttl_ms: u64) -> Held {
        let ms = |m: u64| Nanos::new(m * 1_000_000);
        Held {
            left,
            taken,
            taken_at: ms(taken_at_ms),
            expires: ms(taken_at_ms + ttl_ms),
            limit: 100,
            reply: Reply {
                decision: Decision::from_parts(true, 100, 0, Duration::ZERO, Duration::ZERO),
                taken,
                now: 0,
                resets: Vec::new(),
                window_end: None,
            },
        }
    }

    fn put(leases: &Leases, h: Held) {
        leases
            .lock()
            .entry(BoundedKey::new(b"k"))
            .or_insert_with(|| KeyLease {
                held: None,
                size: leases.config.initial,
                fetch: Arc::new(tokio::sync::Mutex::new(())),
            })
            .held = Some(h);
    }

    #[test]
    fn hot_keys_grow_their_lease_and_cold_keys_shrink_it() {
        let leases = Leases::new(
            LeaseConfig {
                initial: 8,
                max: 32,
                ttl: Duration::from_millis(100),
                max_keys: 10,
            },
            1_000,
        )
        .unwrap();
        let at = |ms: u64| Nanos::new(ms * 1_000_000);
        // Spent within half the TTL: doubles, up to the max.
        for expected in [16, 32, 32] {
            put(&leases, held(0, 8, 0, 100));
            let (stale, size) = leases.retire(&BoundedKey::new(b"k"), 1, at(10));
            assert!(stale.is_some());
            assert_eq!(size, expected);
        }
        // Expired with most of it unspent: halves, down to 1.
        for expected in [16, 8, 4, 2, 1, 1] {
            put(&leases, held(20, 32, 0, 100));
            assert_eq!(
                leases.retire(&BoundedKey::new(b"k"), 1, at(150)).1,
                expected
            );
        }
        // Spent slowly: stays.
        put(&leases, held(0, 8, 0, 100));
        assert_eq!(leases.retire(&BoundedKey::new(b"k"), 1, at(80)).1, 1);
    }

    #[test]
    fn settings_are_validated() {
        let bad = LeaseConfig {
            initial: 0,
            ..LeaseConfig::default()
        };
        assert!(Leases::new(bad, 10).is_err());
        let bad = LeaseConfig {
            max: 1,
            initial: 2,
            ..LeaseConfig::default()
        };
        assert!(Leases::new(bad, 10).is_err());
    }
}
