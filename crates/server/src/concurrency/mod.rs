//! Concurrency limits in the server: a rule's `concurrency:` slots, held as
//! **leases** that expire.
//!
//! # Model
//!
//! - **HTTP** (`POST /v1/acquire`, `POST /v1/release`,
//!   [`crate::http::concurrency`]): a lease holds `cost` slots of the rule's
//!   bucket until released or until its TTL passes, so that a caller that
//!   dies frees its slots after at most the TTL: a true in-flight limit for
//!   callers that release.
//! - **Envoy's RLS** has no release call, so a `concurrency:` rule matched
//!   over gRPC takes a lease of one slot (or `hits_addend`) that **only its
//!   TTL ends**: "at most N requests *started* within the last `lease_ttl`",
//!   which approximates "at most N in flight" when the TTL is about the
//!   upstream's latency (Little's law), stricter when requests finish
//!   sooner. No free slot: **OVER_LIMIT**, never an allow (ignoring the rule
//!   over gRPC would fail open).
//!
//! # Guarantees
//!
//! - Never more than the limit's slots granted in a bucket; a rate limit of
//!   the same rule is decided first, and a descriptor over it takes no slot.
//! - Lowering a limit by a reload revokes no lease, but grants no new slot
//!   until the bucket is back under it; leases outlive reloads.
//! - Lease ids are opaque: in memory 128 random bits, valid on the granting
//!   server; on Redis they name the Redis lease, so any server can release it.
//! - On Redis (`tollgate_redis::concurrency`, the server's clock) the
//!   backend's failure policy decides when Redis does not: fail open grants a
//!   lease that holds nothing, fail closed refuses, local holds
//!   `max(1, ⌊limit · share⌋)` slots per bucket in memory.
//!
//! # Parameters
//!
//! - `limit` and `lease_ttl` per rule ([`crate::config::concurrency`]);
//!   `lease_ttl` by default 30 s (as `tollgate-redis`'s leases).
//! - [`MAX_LEASES`]: 2²⁰ leases at once in memory, then refused as
//!   unavailable, never granted past the cap; expired leases are pruned,
//!   earliest first, on every acquire and release and by the server's sweep.
//! - A refused slot's `retry_after`: until the bucket's first lease expires (a
//!   bound: leases are usually released earlier).
//!
//! Every decision in full (what each API answers for a granted slot, the
//! `limit` override, the in-memory table): `crates/server/docs/apis.md`,
//! "Inside the server".

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tollgate::{ClockSource, Decision};
use tollgate_redis::concurrency::{LeaseId, RedisConcurrencyLimiter, Refusal};
use tollgate_redis::{FailurePolicy, Redis};

mod memory;

use memory::MemoryLeases;

use crate::config::{ConcurrencyConfig, QuotaConfig, RedisSettings};
use crate::metrics::ConcurrencyStats;
use crate::redis_backend::{redis_config, target_name};
use crate::request::{CheckRequest, Status};
use crate::rules::{Rule, RuleSet};

/// The most leases the memory table holds at once.
pub const MAX_LEASES: usize = 1 << 20;

/// A lease granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    /// The lease's id, to release it.
    pub lease: String,
    /// How long it holds its slots unless released.
    pub ttl: Duration,
    /// The rule's limit.
    pub limit: u32,
    /// Slots held in the bucket, this lease's included (`None` when the
    /// failure policy granted it without Redis).
    pub in_flight: Option<u32>,
}

/// Why no lease was granted. Nothing was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// The bucket's slots are taken.
    Full {
        /// The limit.
        limit: u32,
        /// Slots held by unexpired leases.
        in_flight: u32,
        /// Until the bucket's first lease expires.
        retry_after: Duration,
    },
    /// The cost is above the limit: never grantable.
    Cost {
        /// The limit.
        limit: u32,
    },
    /// The store cannot grant now (Redis down and the policy refuses, or
    /// the memory table is full).
    Unavailable {
        /// When to try again.
        retry_after: Duration,
    },
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denial::Full {
                limit, in_flight, ..
            } => write!(
                f,
                "concurrency limit reached: {in_flight} of {limit} slots leased"
            ),
            Denial::Cost { limit } => {
                write!(f, "the cost is above the concurrency limit of {limit}")
            }
            Denial::Unavailable { .. } => f.write_str("the lease store is unavailable"),
        }
    }
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The lease was live; its slots are free now.
    Freed,
    /// No such live lease: unknown, already released, or expired.
    Unknown,
}

/// The store could not answer a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable {
    /// When to try again.
    pub retry_after: Duration,
}

/// Where leases live; see the [module docs](self).
pub struct Leases {
    store: Store,
    /// What the leases did, per rule (exported by [`crate::metrics`]).
    stats: ConcurrencyStats,
}

enum Store {
    Memory(Box<MemoryLeases>),
    Redis(Box<RedisLeases>),
}

impl fmt::Debug for Leases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.store {
            Store::Memory(_) => "memory",
            Store::Redis(_) => "redis",
        };
        f.debug_struct("Leases").field("store", &kind).finish()
    }
}

impl Leases {
    /// Leases in this process's memory, timed by `clock`.
    pub fn memory(clock: ClockSource) -> Leases {
        let stats = ConcurrencyStats::default();
        Leases {
            store: Store::Memory(Box::new(MemoryLeases::new(clock, stats.clone()))),
            stats,
        }
    }

    /// Leases on Redis (`tollgate-redis`'s concurrency leases) through
    /// `redis`, with the settings' prefix, deadline, breaker and failure
    /// policy; the local policy decides on memory leases timed by `clock`.
    pub fn redis(redis: Redis, settings: &RedisSettings, clock: ClockSource) -> Leases {
        let stats = ConcurrencyStats::default();
        Leases {
            store: Store::Redis(Box::new(RedisLeases {
                redis,
                settings: settings.clone(),
                limiters: Mutex::new(HashMap::new()),
                local: MemoryLeases::new(clock, stats.clone()),
                stats: stats.clone(),
            })),
            stats,
        }
    }

    /// The counters of what these leases did, per rule (one set, read by
    /// `/metrics` and the status page: [`ConcurrencyStats`]).
    pub fn stats(&self) -> &ConcurrencyStats {
        &self.stats
    }

    /// Counts a refusal of a lease under `rule`.
    pub(crate) fn refused(&self, rule: &Arc<str>, denial: &Denial) {
        self.stats.count(rule, |t| match denial {
            Denial::Full { .. } => t.refused_full += 1,
            Denial::Cost { .. } => t.refused_cost += 1,
            Denial::Unavailable { .. } => t.refused_unavailable += 1,
        });
    }

    /// Connects to the Redis of `settings` (its own multiplexed connection
    /// beside the rate limits').
    ///
    /// # Errors
    ///
    /// Redis cannot be reached.
    pub async fn connect(settings: &RedisSettings, clock: ClockSource) -> Result<Leases, String> {
        // The same connection settings as the rate limits' (TLS, ACL user,
        // Sentinel, module use).
        let redis = Redis::open(&redis_config(settings))
            .await
            .map_err(|error| format!("cannot connect to {}: {error}", target_name(settings)))?;
        Ok(Leases::redis(redis, settings, clock))
    }

    /// Takes `cost` slots of `bucket` under `rule`'s concurrency limit, in
    /// a lease of the rule's TTL.
    ///
    /// # Errors
    ///
    /// A [`Denial`]; nothing was taken.
    pub async fn acquire(
        &self,
        rule: &Rule,
        config: ConcurrencyConfig,
        bucket: &str,
        cost: u32,
    ) -> Result<Granted, Denial> {
        let outcome = if cost > config.limit {
            Err(Denial::Cost {
                limit: config.limit,
            })
        } else {
            match &self.store {
                Store::Memory(memory) => memory.acquire(&rule.id, config, bucket, cost),
                Store::Redis(redis) => redis.acquire(rule, config, bucket, cost).await,
            }
        };
        match &outcome {
            Ok(_) => self.stats.count(&rule.id, |t| t.acquired += 1),
            Err(denial) => self.refused(&rule.id, denial),
        }
        outcome
    }

    /// Gives a lease back. Idempotent: a lease released twice, expired or
    /// unknown is [`Released::Unknown`] and changes nothing.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] if the store could not answer (the lease then
    /// expires after its TTL).
    pub async fn release(&self, lease: &str) -> Result<Released, Unavailable> {
        match &self.store {
            Store::Memory(memory) => Ok(memory.release(lease)),
            Store::Redis(redis) => redis.release(lease).await,
        }
    }

    /// Prunes expired leases (memory); called every second by the server.
    pub fn sweep(&self) {
        match &self.store {
            Store::Memory(memory) => memory.prune(),
            Store::Redis(redis) => redis.local.prune(),
        }
    }

    /// Slots held now in `bucket` of rule `id`, expired leases pruned
    /// (memory only; `None` on Redis).
    pub fn in_flight(&self, id: &str, bucket: &str) -> Option<u32> {
        match &self.store {
            Store::Memory(memory) => Some(memory.in_flight(id, bucket)),
            Store::Redis(_) => None,
        }
    }
}

/// The check path of both APIs (`ShouldRateLimit`, `POST /v1/check`):
/// every descriptor answered OK so far whose file rule has a
/// `concurrency:` limit takes a lease of its cost that only the TTL ends
/// (see the module docs); one that gets no slot is answered OVER_LIMIT
/// (unless the rule is in shadow mode), with nothing else undone. A cost
/// of 0 (a dry run) takes nothing.
pub(crate) async fn take_slots(
    leases: &Leases,
    rules: &RuleSet,
    request: &CheckRequest,
    statuses: &mut [Status],
) {
    for (descriptor, status) in request.descriptors.iter().zip(statuses.iter_mut()) {
        if !matches!(status, Status::Decided { .. } | Status::Unlimited { .. })
            || status.is_over_limit()
        {
            continue;
        }
        let entries = descriptor
            .entries
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()));
        let Some((rule, bucket)) = rules.find_bucket(&request.domain, entries) else {
            continue;
        };
        let Some(config) = rule.concurrency else {
            continue;
        };
        let cost = descriptor.cost.unwrap_or(request.cost);
        if cost == 0 {
            continue;
        }
        let outcome = match u32::try_from(cost) {
            Ok(cost) => leases.acquire(rule, config, &bucket, cost).await,
            Err(_) => {
                let denial = Denial::Cost {
                    limit: config.limit,
                };
                leases.refused(&rule.id, &denial);
                Err(denial)
            }
        };
        match outcome {
            Err(denial) => {
                *status = Status::Refused {
                    rule: Some(Arc::clone(rule)),
                    quota: None,
                    reason: denial.to_string(),
                };
            }
            Ok(granted) => {
                if let Status::Unlimited { rule } = status {
                    let cost = u32::try_from(cost).unwrap_or(u32::MAX);
                    *status = slots_left(Arc::clone(rule), config, &granted, cost);
                }
            }
        }
    }
}

/// The answer for a descriptor whose rule has only a concurrency limit, once
/// its slots are granted: the slots left and the concurrency limit, so that
/// Envoy shows the limit rather than "unlimited". The
/// limit is reported as `requests_per_unit` with no unit (the slots are not a
/// rate; the RLS's `UNKNOWN`), and the bucket is full again after at most the
/// lease TTL (every lease, this one the last, has expired by then). A lease
/// the failure policy granted without Redis does not know the bucket: it
/// counts its own `cost` as held, a lower bound of what is.
fn slots_left(rule: Arc<Rule>, config: ConcurrencyConfig, granted: &Granted, cost: u32) -> Status {
    let in_flight = granted.in_flight.unwrap_or(cost);
    let remaining = config.limit.saturating_sub(in_flight);
    Status::Decided {
        rule,
        decision: Decision::from_parts(
            true,
            config.limit.into(),
            remaining.into(),
            Duration::ZERO,
            granted.ttl,
        ),
        quota: QuotaConfig {
            requests_per_unit: config.limit.into(),
            period: granted.ttl,
            unit: None,
            burst: None,
            slots: None,
            warmup: None,
        },
    }
}

// ---- Redis ----

/// (rule id, limit, lease TTL): what a Redis concurrency limiter holds.
type LimiterKey = (Arc<str>, u32, Duration);

struct RedisLeases {
    redis: Redis,
    settings: RedisSettings,
    /// One limiter per (rule id, limit, TTL): the parameters a limiter
    /// holds; releasing needs only the rule's id (the keys' name).
    limiters: Mutex<HashMap<LimiterKey, RedisConcurrencyLimiter>>,
    /// The local failure policy's leases.
    local: MemoryLeases,
    /// Counts releases of Redis leases.
    stats: ConcurrencyStats,
}

/// The prefix of a lease granted by fail open: it holds nothing.
const OPEN: &str = "o";
/// The prefix of a Redis lease id.
const REDIS: &str = "r";

impl RedisLeases {
    fn limiter(
        &self,
        id: &Arc<str>,
        config: ConcurrencyConfig,
    ) -> Result<RedisConcurrencyLimiter, Denial> {
        let mut limiters = self.limiters.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = (Arc::clone(id), config.limit, config.lease_ttl);
        if let Some(limiter) = limiters.get(&entry) {
            return Ok(limiter.clone());
        }
        let s = &self.settings;
        let limiter = RedisConcurrencyLimiter::builder(self.redis.clone(), id, config.limit.into())
            .prefix(&s.key_prefix)
            .lease_ttl(config.lease_ttl)
            .deadline(s.deadline)
            .breaker(s.breaker)
            // The policy is applied here (a local lease must be held in
            // this table, not in a permit).
            .failure_policy(FailurePolicy::FailClosed)
            .build()
            .map_err(|error| {
                tracing::warn!(rule = %id, %error, "cannot build the Redis concurrency limiter");
                Denial::Unavailable {
                    retry_after: Duration::from_secs(1),
                }
            })?;
        limiters.insert(entry, limiter.clone());
        Ok(limiter)
    }

    async fn acquire(
        &self,
        rule: &Rule,
        config: ConcurrencyConfig,
        bucket: &str,
        cost: u32,
    ) -> Result<Granted, Denial> {
        let limiter = self.limiter(&rule.id, config)?;
        match limiter.try_acquire(bucket.as_bytes(), cost).await {
            Ok(permit) => match (permit.in_flight(), permit.detach()) {
                (in_flight, Some(lease)) => Ok(Granted {
                    lease: encode(&rule.id, &lease),
                    ttl: config.lease_ttl,
                    limit: config.limit,
                    in_flight,
                }),
                // Unreachable: the limiter fails closed.
                (_, None) => Err(Denial::Unavailable {
                    retry_after: Duration::from_secs(1),
                }),
            },
            Err(Refusal::Full {
                held,
                limit,
                first_expiry,
            }) => Err(Denial::Full {
                limit,
                in_flight: held,
                retry_after: first_expiry,
            }),
            Err(Refusal::Cost { limit }) => Err(Denial::Cost { limit }),
            Err(Refusal::Unavailable { retry_after, .. }) => match self.settings.failure_policy {
                FailurePolicy::FailOpen => Ok(Granted {
                    lease: format!("{OPEN}{}", self.local.new_id(u64::MAX)),
                    ttl: config.lease_ttl,
                    limit: config.limit,
                    in_flight: None,
                }),
                FailurePolicy::Local { share } => {
                    let slots = ((f64::from(config.limit) * share).floor() as u32).max(1);
                    let local = ConcurrencyConfig {
                        limit: slots,
                        ..config
                    };
                    self.local.acquire(&rule.id, local, bucket, cost)
                }
                _ => Err(Denial::Unavailable { retry_after }),
            },
            Err(_) => Err(Denial::Unavailable {
                retry_after: Duration::from_secs(1),
            }),
        }
    }

    async fn release(&self, lease: &str) -> Result<Released, Unavailable> {
        if lease.starts_with(OPEN) {
            return Ok(Released::Unknown);
        }
        if lease.starts_with('m') {
            return Ok(self.local.release(lease));
        }
        let Some((rule, id)) = decode(lease) else {
            return Ok(Released::Unknown);
        };
        // Any limit and TTL: a release names the lease's keys only.
        let any = ConcurrencyConfig {
            limit: id.cost.max(1),
            lease_ttl: Duration::from_secs(1),
        };
        let limiter = self
            .limiter(&Arc::from(rule.as_str()), any)
            .map_err(|_| Unavailable {
                retry_after: Duration::from_secs(1),
            })?;
        match limiter.release_lease(&id).await {
            Ok(true) => {
                self.stats
                    .count(&Arc::from(rule.as_str()), |t| t.released += 1);
                Ok(Released::Freed)
            }
            Ok(false) => Ok(Released::Unknown),
            Err(Refusal::Unavailable { retry_after, .. }) => Err(Unavailable { retry_after }),
            Err(_) => Err(Unavailable {
                retry_after: Duration::from_secs(1),
            }),
        }
    }
}

/// `r.<hex rule id>.<hex bucket>.<lease id>.<cost>`.
fn encode(rule: &str, lease: &LeaseId) -> String {
    format!(
        "{REDIS}.{}.{}.{}.{}",
        hex(rule.as_bytes()),
        hex(&lease.key),
        lease.id,
        lease.cost
    )
}

fn decode(text: &str) -> Option<(String, LeaseId)> {
    let mut parts = text.split('.');
    if parts.next()? != REDIS {
        return None;
    }
    let rule = String::from_utf8(unhex(parts.next()?)?).ok()?;
    let key = unhex(parts.next()?)?;
    let id = parts.next()?;
    let cost: u32 = parts.next()?.parse().ok()?;
    if parts.next().is_some() || id.is_empty() || cost == 0 || id.contains('#') {
        return None;
    }
    Some((
        rule,
        LeaseId {
            key,
            id: id.to_owned(),
            cost,
        },
    ))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::ManualClock;

    fn rule(id: &str) -> Rule {
        Rule {
            id: id.into(),
            domain: "d".into(),
            path: Vec::new(),
            name: None,
            shadow_mode: false,
            quota_mode: false,
            limits: None,
            blocked: None,
            dynamic: false,
            replaces: Vec::new(),
            metric_values: Vec::new(),
            concurrency: None,
            budget: None,
            metadata: None,
        }
    }

    const TWO: ConcurrencyConfig = ConcurrencyConfig {
        limit: 2,
        lease_ttl: Duration::from_secs(10),
    };

    #[test]
    fn redis_lease_ids_round_trip_and_refuse_forgeries() {
        let lease = LeaseId {
            key: b"\x00user|a.b".to_vec(),
            id: "00ab:1f".into(),
            cost: 3,
        };
        let text = encode("api.user", &lease);
        assert_eq!(decode(&text), Some(("api.user".to_owned(), lease)));
        for bad in [
            "",
            "r",
            "r.zz.00.x.1",
            "r.61.62.x.0",
            "r.61.62.x#1.1",
            "r.61.62.x.1.9",
            "m0",
        ] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }

    #[tokio::test]
    async fn memory_leases_count_release_and_expire_on_the_clock() {
        let clock = ManualClock::new();
        let leases = Leases::memory(clock.clone().into());
        let r = rule("d.k");
        let a = leases.acquire(&r, TWO, "b", 1).await.unwrap();
        let b = leases.acquire(&r, TWO, "b", 1).await.unwrap();
        assert_ne!(a.lease, b.lease);
        assert_eq!(b.in_flight, Some(2));
        // Another bucket has its own slots.
        assert!(leases.acquire(&r, TWO, "other", 2).await.is_ok());
        clock.advance(Duration::from_secs(4));
        assert_eq!(
            leases.acquire(&r, TWO, "b", 1).await,
            Err(Denial::Full {
                limit: 2,
                in_flight: 2,
                retry_after: Duration::from_secs(6)
            })
        );
        assert_eq!(leases.release(&a.lease).await, Ok(Released::Freed));
        assert_eq!(leases.release(&a.lease).await, Ok(Released::Unknown));
        assert_eq!(leases.release("nonsense").await, Ok(Released::Unknown));
        let c = leases.acquire(&r, TWO, "b", 1).await.unwrap();
        // `b` expires at 10 s: its slot comes back, the lease is gone.
        clock.advance(Duration::from_secs(6));
        assert_eq!(leases.in_flight("d.k", "b"), Some(1));
        assert_eq!(leases.release(&b.lease).await, Ok(Released::Unknown));
        assert_eq!(leases.release(&c.lease).await, Ok(Released::Freed));
        assert_eq!(leases.in_flight("d.k", "b"), Some(0));
        assert_eq!(
            leases.acquire(&r, TWO, "b", 3).await,
            Err(Denial::Cost { limit: 2 })
        );
    }

    #[tokio::test]
    async fn a_lowered_limit_revokes_nothing_and_grants_nothing_until_under_it() {
        let leases = Leases::memory(ManualClock::new().into());
        let r = rule("d.k");
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(leases.acquire(&r, TWO, "b", 1).await.unwrap());
        }
        let one = ConcurrencyConfig { limit: 1, ..TWO };
        assert!(leases.acquire(&r, one, "b", 1).await.is_err());
        leases.release(&held[0].lease).await.unwrap();
        assert!(leases.acquire(&r, one, "b", 1).await.is_err());
        leases.release(&held[1].lease).await.unwrap();
        assert!(leases.acquire(&r, one, "b", 1).await.is_ok());
    }
}
