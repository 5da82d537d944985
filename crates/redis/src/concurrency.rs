//! Concurrency limits on Redis: slots as leases that expire, so that a node
//! that dies holding slots frees them after the lease TTL.
//!
//! # Design
//!
//! Each key is one sorted set (`<prefix>{<name>|<key>}c`: the key layout of
//! [`key`](crate::key), with `c` where a rate limit has its limit tag;
//! `tollgate{api|alice}c` for the limiter `api` and the key `alice`),
//! hash-tagged as the rate limits' keys, so that it works unchanged on a
//! cluster, and whose members
//! are the slots of live leases, `<lease id>#<i>`, scored by their expiry
//! (ms). One script (`concurrency.lua`) does each step atomically on the
//! server's clock (`TIME`; a test mode passes `now`):
//!
//! - **acquire** (one round trip): prune expired leases, count the slots
//!   left, add the lease's `cost` members if they fit in the limit; set the
//!   key's TTL to at least the lease TTL;
//! - **release** (one round trip): remove the lease's members; delete the
//!   key when none is left;
//! - **extend** (one round trip, optional): push a live lease's expiry to
//!   `now + TTL`, for requests that outlive it.
//!
//! # Guarantee
//!
//! At no instant on the server do the **unexpired** leases of a key hold
//! more than its limit (the check and the addition are one script). A lease
//! whose node died, or whose request outlived its TTL without
//! [`RedisPermit::extend`], stops counting when it expires: set the TTL
//! above the longest request, or extend. Every key has a TTL, and outlives
//! its last lease by at most the TTL.
//!
//! # Failures
//!
//! The same policies as the rate limits ([`FailurePolicy`]), through the
//! same circuit breakers (one per node) and deadline, under the same rule on
//! a changing cluster: a deadline that passes while the cluster refuses the
//! call (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`) is a
//! [`Fault::Timeout`] for the policy and counts towards no breaker (see
//! [`cluster`]). The policies: fail open (a permit with no lease),
//! fail closed (refused with [`Refusal::Unavailable`]), or a local
//! [`KeyedConcurrencyLimiter`] holding `max(1, ⌊limit · share⌋)` slots
//! per key. A permit granted by the policy releases locally.
//!
//! # Releasing
//!
//! [`RedisPermit::release`] releases in one round trip and says whether
//! Redis answered. Dropping a permit instead spawns that release on the
//! tokio runtime (if there is one); if it fails, the lease expires after
//! its TTL.
//!
//! [`RedisPermit::detach`] turns a permit into a [`LeaseId`] (plain data:
//! the key, the lease id, the cost) that nothing releases on drop; any
//! node can later release it with
//! [`RedisConcurrencyLimiter::release_lease`], which says whether the lease
//! was still live (idempotent: a second release, or one after expiry,
//! finds nothing). This is how a rate-limit server hands leases to HTTP
//! clients and lets any server of its fleet take them back.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate::concurrency::{KeyedConcurrencyLimiter, Permit, Shares};
use tollgate::{Clock, ManualClock};

use crate::backend::Redis;
use crate::breaker::{BreakerConfig, Breakers, Pass};
use crate::cluster;
use crate::key::KeyCodec;
use crate::limit::ConfigError;
use crate::policy::{FailurePolicy, Fault};

/// The script's source.
pub const SOURCE: &str = include_str!("concurrency.lua");

static SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(SOURCE));

/// Why a request got no slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The key's slots are all leased: `held` of `limit`; the first lease
    /// expires in `first_expiry` (a bound on the wait, not a promise:
    /// leases are usually released earlier).
    Full {
        /// Slots held by unexpired leases.
        held: u32,
        /// The limit.
        limit: u32,
        /// Until the first lease expires.
        first_expiry: Duration,
    },
    /// The cost is above the limit.
    Cost {
        /// The limit.
        limit: u32,
    },
    /// Redis did not answer and the policy refuses (fail closed, or the
    /// local share is full).
    Unavailable {
        /// Why Redis was not used.
        fault: Fault,
        /// When Redis will next be tried.
        retry_after: Duration,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Full { held, limit, .. } => {
                write!(
                    f,
                    "concurrency limit reached: {held} of {limit} slots leased"
                )
            }
            Refusal::Cost { limit } => write!(f, "the cost is above the limit of {limit}"),
            Refusal::Unavailable { fault, .. } => {
                write!(
                    f,
                    "Redis is unavailable ({fault:?}) and the failure policy refuses"
                )
            }
        }
    }
}

impl std::error::Error for Refusal {}

enum Time {
    Server,
    Manual(ManualClock),
}

struct Shared {
    redis: Redis,
    codec: KeyCodec,
    limit: u32,
    ttl: Duration,
    deadline: Duration,
    breakers: Breakers,
    open_for: Duration,
    policy: FailurePolicy,
    local: Option<KeyedConcurrencyLimiter<Vec<u8>>>,
    time: Time,
    node: u64,
    next_lease: AtomicU64,
}

/// A concurrency limit per key on Redis; see the [module docs](self).
///
/// Clones share the configuration and the connection.
#[derive(Clone)]
pub struct RedisConcurrencyLimiter {
    shared: Arc<Shared>,
}

impl fmt::Debug for RedisConcurrencyLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConcurrencyLimiter")
            .field("limit", &self.shared.limit)
            .field("ttl", &self.shared.ttl)
            .field("policy", &self.shared.policy)
            .finish_non_exhaustive()
    }
}

/// Builds a [`RedisConcurrencyLimiter`].
pub struct RedisConcurrencyBuilder {
    redis: Redis,
    name: String,
    prefix: String,
    limit: u64,
    ttl: Duration,
    deadline: Duration,
    breaker: BreakerConfig,
    policy: FailurePolicy,
    time: Time,
}

impl fmt::Debug for RedisConcurrencyBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConcurrencyBuilder")
            .field("name", &self.name)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl RedisConcurrencyLimiter {
    /// Starts building limiter `name` of `limit` slots per key.
    pub fn builder(redis: Redis, name: &str, limit: u64) -> RedisConcurrencyBuilder {
        RedisConcurrencyBuilder {
            redis,
            name: name.to_owned(),
            prefix: "tollgate".to_owned(),
            limit,
            ttl: Duration::from_secs(30),
            deadline: Duration::from_millis(5),
            breaker: BreakerConfig::default(),
            policy: FailurePolicy::default(),
            time: Time::Server,
        }
    }
}

impl RedisConcurrencyBuilder {
    /// The prefix of every key. By default, `tollgate`.
    pub fn prefix(mut self, prefix: &str) -> Self {
        prefix.clone_into(&mut self.prefix);
        self
    }

    /// How long a lease lives unless released or extended: the longest a
    /// dead node's slots stay taken. By default, 30 s.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The most a call waits for Redis before the policy answers. By
    /// default, 5 ms.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The circuit breaker. By default, [`BreakerConfig::default`].
    pub fn breaker(mut self, breaker: BreakerConfig) -> Self {
        self.breaker = breaker;
        self
    }

    /// What to answer when Redis does not. By default,
    /// [`FailurePolicy::default`] (a local share of 1/4).
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Passes `clock`'s time to the script instead of the server's `TIME`
    /// (tests and simulations).
    pub fn manual_time(mut self, clock: ManualClock) -> Self {
        self.time = Time::Manual(clock);
        self
    }

    /// The limiter.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for a bad name or prefix, a limit of 0 or above
    /// [`tollgate::concurrency::MAX_LIMIT`], a zero TTL or deadline, or a
    /// local share outside `(0, 1]`.
    pub fn build(self) -> Result<RedisConcurrencyLimiter, ConfigError> {
        let invalid = ConfigError::Invalid;
        let limit = u32::try_from(self.limit)
            .ok()
            .filter(|l| (1..=tollgate::concurrency::MAX_LIMIT).contains(l))
            .ok_or(invalid("the concurrency limit must be 1 to 2^31 - 1"))?;
        if self.ttl < Duration::from_millis(1) || self.deadline.is_zero() {
            return Err(invalid(
                "the lease TTL and the deadline must be at least 1 ms",
            ));
        }
        let codec = KeyCodec::new(&self.prefix, &self.name, &["c".to_owned()])
            .map_err(ConfigError::Name)?;
        let local = match self.policy {
            FailurePolicy::Local { share } => {
                if !(share > 0.0 && share <= 1.0) {
                    return Err(invalid("the local share must be in (0, 1]"));
                }
                let slots = ((limit as f64 * share).floor() as u64).max(1);
                Some(
                    KeyedConcurrencyLimiter::builder(slots)
                        .shares(Shares::none())
                        .build()
                        .map_err(|_| invalid("the local share's limit cannot be built"))?,
                )
            }
            _ => None,
        };
        let node = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Ok(RedisConcurrencyLimiter {
            shared: Arc::new(Shared {
                redis: self.redis,
                codec,
                limit,
                ttl: self.ttl,
                deadline: self.deadline,
                open_for: self.breaker.open_for,
                breakers: Breakers::new(self.breaker),
                policy: self.policy,
                local,
                time: self.time,
                node,
                next_lease: AtomicU64::new(0),
            }),
        })
    }
}

/// Slots of a key leased on Redis (or granted by the failure policy).
#[must_use = "dropping the permit releases its slots"]
pub struct RedisPermit {
    shared: Arc<Shared>,
    key: Vec<u8>,
    id: String,
    cost: u32,
    held: Held,
    /// Slots held in the key after this lease was granted, this one's
    /// included, as Redis counted them (`None` when the failure policy
    /// granted it).
    in_flight: Option<u32>,
}

enum Held {
    /// A lease on Redis.
    Lease,
    /// Granted by the failure policy: a local permit (released with this
    /// one), or none (fail open).
    Policy { _local: Option<Permit> },
    /// Released.
    Done,
}

impl fmt::Debug for RedisPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisPermit")
            .field("id", &self.id)
            .field("cost", &self.cost)
            .field("leased", &matches!(self.held, Held::Lease))
            .finish()
    }
}

impl RedisConcurrencyLimiter {
    /// The limit per key.
    pub fn limit(&self) -> u32 {
        self.shared.limit
    }

    /// Leases `cost` slots of `key` if they fit: one round trip.
    ///
    /// # Errors
    ///
    /// A [`Refusal`]: the slots are taken, the cost is above the limit, or
    /// Redis failed and the policy refuses.
    pub async fn try_acquire(&self, key: &[u8], cost: u32) -> Result<RedisPermit, Refusal> {
        let s = &self.shared;
        if cost > s.limit {
            return Err(Refusal::Cost { limit: s.limit });
        }
        let lease = s.next_lease.fetch_add(1, Ordering::Relaxed);
        let id = format!("{:016x}:{lease:x}", s.node);
        let permit = |held, in_flight| RedisPermit {
            shared: s.clone(),
            key: key.to_owned(),
            id: id.clone(),
            cost,
            held,
            in_flight,
        };
        match self.ask(b'a', key, &id, cost).await {
            Ok([1, held, _]) => Ok(permit(
                Held::Lease,
                Some(held.clamp(0, u32::MAX as i64) as u32),
            )),
            Ok([_, held, wait]) => Err(Refusal::Full {
                held: held.clamp(0, u32::MAX as i64) as u32,
                limit: s.limit,
                first_expiry: Duration::from_millis(wait.max(0) as u64),
            }),
            Err((fault, retry_after)) => match s.policy {
                FailurePolicy::FailOpen => Ok(permit(Held::Policy { _local: None }, None)),
                FailurePolicy::Local { .. } => {
                    let local = s.local.as_ref().map(|l| l.try_acquire(key, cost as u64));
                    match local {
                        Some(Ok(local)) => Ok(permit(
                            Held::Policy {
                                _local: Some(local),
                            },
                            None,
                        )),
                        _ => Err(Refusal::Unavailable { fault, retry_after }),
                    }
                }
                _ => Err(Refusal::Unavailable { fault, retry_after }),
            },
        }
    }

    /// One script call through the breaker and the deadline.
    async fn ask(
        &self,
        op: u8,
        key: &[u8],
        id: &str,
        cost: u32,
    ) -> Result<[i64; 3], (Fault, Duration)> {
        let s = &self.shared;
        // The breaker of the node that holds the key (see `breaker`).
        let node = s.codec.keys(key).first().and_then(|k| s.redis.node_of(k));
        let breaker = s.breakers.of(node.as_ref());
        if let Pass::Refuse(retry) = breaker.pass() {
            s.redis.refresh_topology();
            return Err((Fault::BreakerOpen, retry));
        }
        let moving = AtomicBool::new(false);
        let outcome = tokio::time::timeout(s.deadline, call(s, op, key, id, cost, &moving)).await;
        let fault = match outcome {
            Ok(Ok(reply)) => {
                breaker.success();
                return Ok(reply);
            }
            Ok(Err(_)) => Fault::Error,
            // Resharding is no fault of the node: a timeout for the
            // policy, counted by no breaker (see `cluster`).
            Err(_) if !cluster::counts_as_node_fault(&moving) => {
                return Err((Fault::Timeout, cluster::MAX_PAUSE));
            }
            Err(_) => Fault::Timeout,
        };
        if breaker.failure() {
            s.redis.node_failing(node.as_deref());
        } else {
            s.redis.refresh_topology();
        }
        Err((fault, s.open_for))
    }
}

/// The script call itself.
async fn call(
    s: &Shared,
    op: u8,
    key: &[u8],
    id: &str,
    cost: u32,
    moving: &AtomicBool,
) -> Result<[i64; 3], redis::RedisError> {
    let keys = s.codec.keys(key);
    let now = match &s.time {
        Time::Server => String::new(),
        Time::Manual(clock) => (clock.now().as_u64() / 1_000_000).to_string(),
    };
    let ttl_ms = s.ttl.as_millis().min(i64::MAX as u128) as u64;
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(keys[0].as_slice())
        .arg(std::str::from_utf8(&[op]).unwrap_or("a"))
        .arg(id)
        .arg(cost)
        .arg(s.limit)
        .arg(ttl_ms)
        .arg(now);
    // Sent again while a changing cluster refuses it (see `cluster`).
    let reply: Vec<i64> = cluster::resent_flagging(s.redis.is_cluster(), moving, || async {
        invocation.invoke_async(&mut s.redis.connection()).await
    })
    .await?;
    match reply[..] {
        [a, b, c] => Ok([a, b, c]),
        _ => Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "unexpected reply from the concurrency script",
        ))),
    }
}

/// A lease detached from its [`RedisPermit`] ([`RedisPermit::detach`]):
/// plain data that names it, so that any node, later, can release it with
/// [`RedisConcurrencyLimiter::release_lease`] (a rate-limit server handing
/// leases to its clients over HTTP), or leave it to expire.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseId {
    /// The limit's key (the bucket).
    pub key: Vec<u8>,
    /// The lease's id within the key.
    pub id: String,
    /// Its slots.
    pub cost: u32,
}

impl RedisConcurrencyLimiter {
    /// Releases a detached lease: one round trip. `Ok(true)` if it was live
    /// (its slots are free now), `Ok(false)` if it was unknown, already
    /// released or expired (nothing changed: releasing is idempotent).
    ///
    /// The lease must be of a limiter of the same name and prefix (the
    /// limit and the TTL do not matter).
    ///
    /// # Errors
    ///
    /// [`Refusal::Unavailable`] if Redis did not answer (through the
    /// breaker and the deadline): the lease expires after its TTL.
    pub async fn release_lease(&self, lease: &LeaseId) -> Result<bool, Refusal> {
        match self.ask(b'r', &lease.key, &lease.id, lease.cost).await {
            Ok([live, _, _]) => Ok(live == 1),
            Err((fault, retry_after)) => Err(Refusal::Unavailable { fault, retry_after }),
        }
    }

    /// The lease TTL.
    pub fn lease_ttl(&self) -> Duration {
        self.shared.ttl
    }
}

impl RedisPermit {
    /// Detaches the lease from this permit: nothing is released on drop;
    /// the lease lives until [`RedisConcurrencyLimiter::release_lease`] or
    /// its TTL. `None` for a permit granted by the failure policy (no lease
    /// on Redis; its local slots, if any, are released now).
    pub fn detach(mut self) -> Option<LeaseId> {
        match std::mem::replace(&mut self.held, Held::Done) {
            Held::Lease => Some(LeaseId {
                key: std::mem::take(&mut self.key),
                id: std::mem::take(&mut self.id),
                cost: self.cost,
            }),
            Held::Policy { .. } | Held::Done => None,
        }
    }

    /// The slots this permit holds.
    pub fn cost(&self) -> u32 {
        self.cost
    }

    /// Slots held in the key once this permit was granted, its own
    /// included, as Redis counted them; `None` for a permit the failure
    /// policy granted.
    pub fn in_flight(&self) -> Option<u32> {
        self.in_flight
    }

    /// Whether the slots are a lease on Redis (not the failure policy's).
    pub fn is_leased(&self) -> bool {
        matches!(self.held, Held::Lease)
    }

    /// Releases the slots now: one round trip for a lease. Returns whether
    /// the release reached Redis (a lease whose release failed expires
    /// after its TTL); `true` for a policy's permit.
    pub async fn release(mut self) -> bool {
        release(&mut self).await
    }

    /// Pushes the lease's expiry to a full TTL from now: one round trip.
    /// Returns whether the lease was still live (`false` once it expired:
    /// its slots may have been taken by others meanwhile).
    pub async fn extend(&self) -> bool {
        if !self.is_leased() {
            return true;
        }
        let limiter = RedisConcurrencyLimiter {
            shared: self.shared.clone(),
        };
        matches!(
            limiter.ask(b'e', &self.key, &self.id, self.cost).await,
            Ok([1, _, _])
        )
    }
}

async fn release(permit: &mut RedisPermit) -> bool {
    match std::mem::replace(&mut permit.held, Held::Done) {
        Held::Lease => release_lease(&permit.shared, &permit.key, &permit.id, permit.cost).await,
        Held::Policy { .. } | Held::Done => true,
    }
}

/// Removes a lease: one round trip through the breaker and the deadline.
async fn release_lease(shared: &Arc<Shared>, key: &[u8], id: &str, cost: u32) -> bool {
    let limiter = RedisConcurrencyLimiter {
        shared: shared.clone(),
    };
    limiter.ask(b'r', key, id, cost).await.is_ok()
}

impl Drop for RedisPermit {
    fn drop(&mut self) {
        if !matches!(self.held, Held::Lease) {
            return;
        }
        self.held = Held::Done;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // the lease expires after its TTL
        };
        // Plain data, not a permit: if the runtime drops the task unrun
        // (shutting down), nothing is left to release, and the lease
        // expires after its TTL.
        let (shared, key, id, cost) = (
            self.shared.clone(),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.id),
            self.cost,
        );
        runtime.spawn(async move {
            release_lease(&shared, &key, &id, cost).await;
        });
    }
}
