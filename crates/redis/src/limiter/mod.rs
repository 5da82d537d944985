//! [`RedisLimiter`]: the core's limits, decided on Redis.
//!
//! This module holds the limiter and its decision path; its submodules what
//! it does on its own: its settings ([`RedisLimiterBuilder`], in
//! `limiter/builder.rs`), one round trip to Redis (breaker, in-flight
//! bound, deadline, reply decoding: `round_trip.rs`), reporting to its
//! observer (`observed.rs`; the observer types in
//! [`observe`](crate::observe)), its leases (`leases.rs`; their settings
//! in [`lease`](crate::lease)) and carrying the controls' markers to a
//! changed limit (`carry_controls.rs`; the controls themselves in
//! [`controls`](crate::controls)).
//!
//! # One decision
//!
//! 1. The deny cache, if enabled, answers a standing denial.
//! 2. A held lease, if leases are enabled, answers from local permits.
//! 3. The circuit breaker of the key's node (on a cluster, the master of its
//!    slot: see [`breaker`](crate::breaker)), if open, sends the call to
//!    the failure policy.
//! 4. A slot among `max_in_flight` is taken *without waiting*; none free
//!    sends the call to the policy (no unbounded queue of pending calls).
//! 5. The script runs on the shared multiplexed connection, bounded by the
//!    deadline (default 5 ms, 20 ms on a cluster); a timeout or an error
//!    goes to the policy and counts towards opening the node's breaker —
//!    except a timeout while a changing cluster refused the call (see
//!    [`cluster`](crate::cluster)), and an error the script itself
//!    answered for this call ([`Fault::Script`]: Redis is up, the problem is
//!    the key's), which go to the policy without touching the breaker.
//!    A value at a key that is not a state of its limit (another type,
//!    garbage) is no error at all: the script repairs it (see
//!    [`script`](crate::script), "Foreign values").
//!
//! Every decision therefore returns within the deadline plus the time to
//! run the policy, whatever Redis does. Then, if the limiter has an
//! observer, it is told the decision and its source (see
//! [`observe`](crate::observe)).
//!
//! # Over-admission after a failover
//!
//! Redis replication is asynchronous: a replica promoted after its primary
//! died may have missed the writes of the last replication lag `L`. The
//! admissions it forgets, and may admit again, are at most what the limit
//! allows within `L`: **`burst + rate·L` for GCRA**, **`limit`** for a fixed
//! or sliding window (only the current window's admissions still matter).
//! That is the over-admission bound per key and per failover. A lease is one
//! write like any other (a forgotten lease counts within the same bound,
//! and its holder still spends it: add one lease, `max` permits, per node).
//! While the failover runs, decisions follow the failure policy, whose local
//! share admits at most `share` of each quota per node over the outage.
//! Measured on a real cluster, with a replica made to lag: up to `burst`
//! per key for GCRA, a key's whole burst when the lag saw it spent (see [`cluster`](crate::cluster), "Guarantees");
//! [`Durability::Replicas`](crate::Durability::Replicas) brings it to 0, at
//! the cost of a replica's acknowledgement per check
//! ([`durability`](crate::durability)).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::Semaphore;
use tollgate::{Clock, ClockSource, Decision, ManualClock, Nanos};

use crate::backend::Redis;
use crate::breaker::Breakers;
use crate::deny_cache::DenyCache;
use crate::key::{BoundedKey, KeyCodec};
use crate::limit::Limit;
use crate::observe::RedisObserver;
use crate::policy::{Counters, Fault, Policy, Source, Stats};
use crate::script::Op;

mod builder;
mod carry_controls;
mod charge;
mod leases;
mod observed;
mod round_trip;

pub use builder::{CLUSTER_DEADLINE, DEADLINE, RedisLimiterBuilder};
pub use charge::{ChargeError, SOURCE_CHARGE};
use leases::Leases;
pub(crate) use round_trip::Reply;

pub mod batch;

/// A request that can never be admitted: its cost is above a limit's
/// capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CostError {
    /// The cost asked for.
    pub cost: u64,
    /// The most any request can cost (the smallest capacity of the limits).
    pub capacity: u64,
}

impl std::fmt::Display for CostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a request costing {} can never be admitted: the limiter holds at most {}",
            self.cost, self.capacity
        )
    }
}

impl std::error::Error for CostError {}

/// A decision and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The decision.
    pub decision: Decision,
    /// Who took it.
    pub source: Source,
}

/// Where the script's `now` comes from.
#[derive(Clone, Debug)]
pub(crate) enum Time {
    /// Redis's `TIME` (microseconds).
    Server,
    /// Test mode: the manual clock's nanoseconds, passed in.
    Manual(ManualClock),
}

/// A rate limiter whose state lives in Redis; clones share everything.
///
/// # Examples
///
/// ```no_run
/// use tollgate::{FixedWindow, Gcra, Quota};
/// use tollgate_redis::{FailurePolicy, Options, Redis, RedisLimiter};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let redis = Redis::connect("redis://127.0.0.1:6379", &Options::default()).await?;
/// let limiter = RedisLimiter::builder(redis, "api")
///     .limit(Gcra::new(Quota::per_second(10)?)?)
///     .limit(FixedWindow::new(Quota::per_day(1_000)?)?)
///     .failure_policy(FailurePolicy::Local { share: 0.25 })
///     .build()?;
/// let decision = limiter.check(b"user:42").await;
/// if decision.is_denied() {
///     println!("retry in {:?}", decision.retry_after());
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisLimiter {
    pub(crate) shared: Arc<Shared>,
}

/// Everything the clones of one limiter share (built by
/// [`RedisLimiterBuilder::build`]).
pub(crate) struct Shared {
    pub(crate) redis: Redis,
    pub(crate) limits: Vec<Limit>,
    pub(crate) codec: KeyCodec,
    /// The five script arguments of every limit.
    pub(crate) args: Vec<[String; 5]>,
    pub(crate) time: Time,
    /// Local time: deny cache, leases, local fallback.
    pub(crate) clock: ClockSource,
    pub(crate) capacity: u64,
    pub(crate) slack_ms: u64,
    pub(crate) deadline: Duration,
    /// One breaker per node (see [`breaker`](crate::breaker)).
    pub(crate) breakers: Breakers,
    pub(crate) open_for: Duration,
    pub(crate) in_flight: Arc<Semaphore>,
    pub(crate) policy: Policy,
    pub(crate) counters: Counters,
    pub(crate) deny_cache: Option<DenyCache>,
    pub(crate) leases: Option<Leases>,
    pub(crate) list_capacity: usize,
    pub(crate) carry: Option<crate::carry::CarrySpec>,
    /// A limit the module does not run (a calendar window): scripts only.
    pub(crate) scripts_only: bool,
    /// The limiter's name: the limit's name in observers' events.
    pub(crate) name: Box<str>,
    pub(crate) observer: Option<Arc<dyn RedisObserver>>,
    /// Dry-run (shadow): see [`RedisLimiter::is_dry_run`].
    pub(crate) dry_run: AtomicBool,
    /// `WAIT`'s arguments when admissions wait for replicas (see
    /// [`durability`](crate::durability)).
    pub(crate) wait: Option<(u32, u64)>,
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("limits", &self.shared.limits)
            .field("deadline", &self.shared.deadline)
            .field("observer", &self.shared.observer.is_some())
            .field("dry_run", &self.is_dry_run())
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// Takes one permit of `key`, if every limit has one.
    pub async fn check(&self, key: impl AsRef<[u8]>) -> Decision {
        // Every capacity is at least 1, so a cost of 1 is never an error.
        match self.check_n(key, 1).await {
            Ok(decision) => decision,
            Err(e) => Decision::from_parts(false, e.capacity, 0, Duration::MAX, Duration::ZERO),
        }
    }

    /// Takes `cost` permits of `key`, if every limit has them.
    ///
    /// # Errors
    ///
    /// [`CostError`] if `cost` is above a limit's capacity.
    pub async fn check_n(&self, key: impl AsRef<[u8]>, cost: u64) -> Result<Decision, CostError> {
        Ok(self.check_outcome(key, cost).await?.decision)
    }

    /// [`check_n`](Self::check_n), saying where the decision came from.
    ///
    /// # Errors
    ///
    /// [`CostError`] if `cost` is above a limit's capacity.
    pub async fn check_outcome(
        &self,
        key: impl AsRef<[u8]>,
        cost: u64,
    ) -> Result<Outcome, CostError> {
        self.check_cost(cost)?;
        let key = key.as_ref();
        let outcome = self.check_bounded(&BoundedKey::new(key), cost).await;
        if let Some(observer) = &self.shared.observer {
            self.report(&**observer, key, cost, &outcome);
        }
        Ok(outcome)
    }

    /// A decision of `cost` permits of `key`, within capacity.
    async fn check_bounded(&self, key: &BoundedKey, cost: u64) -> Outcome {
        self.check_local_first(key, cost, || self.check_plain(key, cost))
            .await
    }

    /// A check answered locally where it can be (a cached denial, a held
    /// lease), else by `remote` (the script call, alone or batched).
    pub(crate) async fn check_local_first<F: Future<Output = Outcome>>(
        &self,
        key: &BoundedKey,
        cost: u64,
        remote: impl FnOnce() -> F,
    ) -> Outcome {
        // Answers from the deny cache, a lease or the policy complete without
        // waiting: count them against the task's budget so that a caller
        // looping on them still lets the runtime run other tasks (among them
        // the connection that would end an outage).
        tokio::task::coop::consume_budget().await;
        let s = &self.shared;
        if let Some(cache) = &s.deny_cache {
            if let Some(decision) = cache.get(key, cost, s.clock.now()) {
                return self.counted(decision, Source::DenyCache);
            }
        }
        if let Some(leases) = &s.leases {
            if cost > 0 {
                return leases.check(self, key, cost).await;
            }
        }
        remote().await
    }

    /// Whether this limiter is in dry-run (shadow): its decisions are the
    /// real ones, taken and counted on Redis as usual (a denial changes no
    /// state, as always), but a caller acting on them lets refused requests
    /// through, and observers see
    /// [`Outcome::Shadow`](tollgate::observe::Outcome::Shadow) for them.
    /// The same meaning as the core's
    /// [`Limiter::is_dry_run`](tollgate::Limiter::is_dry_run) and the
    /// server's `shadow_mode` (see [`observe`](crate::observe)).
    pub fn is_dry_run(&self) -> bool {
        self.shared.is_dry_run()
    }

    /// Turns dry-run on or off, for every clone, from the next decision on.
    pub fn set_dry_run(&self, dry_run: bool) {
        // Relaxed: a flag read on its own, guarding no other memory; a
        // decision racing the change may see either value.
        self.shared.dry_run.store(dry_run, Ordering::Relaxed);
    }

    /// The limiter's name (the limit's name in observers' events).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Decides `cost` permits of `key` without taking them.
    ///
    /// # Errors
    ///
    /// [`CostError`] if `cost` is above a limit's capacity.
    pub async fn peek_n(&self, key: impl AsRef<[u8]>, cost: u64) -> Result<Decision, CostError> {
        self.check_cost(cost)?;
        Ok(self
            .decide(&BoundedKey::new(key.as_ref()), cost, Op::Peek)
            .await
            .decision)
    }

    /// Checks one permit of each key, concurrently on the shared connection
    /// (pipelined); the decisions in the keys' order.
    pub async fn check_batch<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Decision> {
        join_all(keys.iter().map(|k| self.check(k.as_ref()))).await
    }

    /// Decisions by source since the limiter was built.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// The limits, in order.
    pub fn limits(&self) -> &[Limit] {
        &self.shared.limits
    }

    /// The Redis keys of `key`, one per limit (for inspection and tests).
    pub fn redis_keys(&self, key: impl AsRef<[u8]>) -> Vec<Vec<u8>> {
        self.shared.codec.keys(key.as_ref())
    }

    /// Gives back every leased permit not spent yet (call before a clean
    /// shutdown). Without leases, does nothing.
    pub async fn shutdown(&self) {
        if let Some(leases) = &self.shared.leases {
            leases.return_all(self).await;
        }
    }

    /// Gives back the permits of leases past their TTL; leased limiters run
    /// it on every call for the key at hand, this sweeps every key.
    pub async fn return_expired_leases(&self) {
        if let Some(leases) = &self.shared.leases {
            leases.return_expired(self).await;
        }
    }

    fn check_cost(&self, cost: u64) -> Result<(), CostError> {
        let capacity = self.shared.capacity;
        if cost > capacity {
            return Err(CostError { cost, capacity });
        }
        Ok(())
    }

    pub(crate) fn counted(&self, decision: Decision, source: Source) -> Outcome {
        self.shared.counters.count(source, &decision);
        Outcome { decision, source }
    }

    pub(crate) fn now(&self) -> Nanos {
        self.shared.clock.now()
    }

    /// A check without leases.
    pub(crate) async fn check_plain(&self, key: &BoundedKey, cost: u64) -> Outcome {
        self.decide(key, cost, Op::Check).await
    }

    pub(crate) fn upgrade(shared: &std::sync::Weak<Shared>) -> Option<RedisLimiter> {
        shared.upgrade().map(|shared| RedisLimiter { shared })
    }

    /// One decision by the script, or by the policy if Redis cannot answer.
    async fn decide(&self, key: &BoundedKey, cost: u64, op: Op) -> Outcome {
        let sent = self.now();
        self.decided(
            key,
            cost,
            op,
            sent,
            self.ask(key, cost, op, cost, None).await,
        )
    }

    /// The outcome of a script call sent at `sent`: a denial cached, the
    /// decision counted, a fault sent to the failure policy.
    pub(crate) fn decided(
        &self,
        key: &BoundedKey,
        cost: u64,
        op: Op,
        sent: Nanos,
        asked: Result<Reply, (Fault, Duration)>,
    ) -> Outcome {
        match asked {
            Ok(reply) => {
                if let (Some(cache), Op::Check) = (&self.shared.deny_cache, op) {
                    if reply.decision.is_denied() {
                        cache.put(key, cost, sent, &reply.decision);
                    }
                }
                self.counted(reply.decision, Source::Redis)
            }
            Err((fault, retry)) => self.fallback(key, cost, fault, retry),
        }
    }

    pub(crate) fn fallback(
        &self,
        key: &BoundedKey,
        cost: u64,
        fault: Fault,
        retry: Duration,
    ) -> Outcome {
        let decision = self.shared.policy.decide(key, cost, retry);
        self.counted(decision, Source::Policy(fault))
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Nanoseconds per clock unit of the scripts.
    pub(crate) fn unit_nanos(&self) -> u64 {
        match self.shared.time {
            Time::Server => 1_000,
            Time::Manual(_) => 1,
        }
    }

    pub(crate) fn list_capacity(&self) -> usize {
        self.shared.list_capacity
    }

    pub(crate) fn codec(&self) -> &KeyCodec {
        &self.shared.codec
    }

    /// Forgets what this node holds locally for `key` (a cached denial, a
    /// lease's permits) after a control changed its state on Redis.
    pub(crate) fn forget_local(&self, key: &BoundedKey) {
        if let Some(cache) = &self.shared.deny_cache {
            cache.remove(key);
        }
        if let Some(leases) = &self.shared.leases {
            leases.forget(key);
        }
    }
}

impl Shared {
    pub(crate) fn deadline(&self) -> Duration {
        self.deadline
    }

    #[inline]
    pub(crate) fn is_dry_run(&self) -> bool {
        // Relaxed: see `RedisLimiter::set_dry_run`.
        self.dry_run.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::MAX_INLINE_KEY;
    use crate::{FailurePolicy, LeaseConfig};
    use tollgate::{Gcra, Quota};
    use tollgate_testkit::RedisServer;

    const KEYS: usize = 1_000;

    fn long_key(i: usize) -> Vec<u8> {
        let mut key = vec![b'k'; 64 * 1024];
        key[..8].copy_from_slice(&(i as u64).to_le_bytes());
        key
    }

    /// Bug: the deny cache, the leases and the local fallback
    /// were keyed by the caller's bytes: 1,000 distinct 64 KiB keys held 35
    /// to 63 MiB in each. They now hold the bounded key, at most
    /// `MAX_INLINE_KEY` bytes per entry (here 86: `#65536:<sha256 hex>`).
    #[tokio::test]
    async fn long_keys_take_bounded_memory_in_every_local_map() {
        let mut server = RedisServer::start();
        let options = crate::Options {
            response_timeout: Duration::from_millis(500),
            connection_timeout: Duration::from_millis(500),
            retries: 1,
        };
        let redis = Redis::connect(&server.url(), &options).await.unwrap();
        let one_per_hour = Gcra::new(Quota::per_hour(1).unwrap()).unwrap();
        let cached = RedisLimiter::builder(redis.clone(), "deny")
            .limit(one_per_hour.clone())
            .deny_cache(10 * KEYS)
            .deadline(Duration::from_secs(1))
            .build()
            .unwrap();
        let leased = RedisLimiter::builder(redis.clone(), "lease")
            .limit(Gcra::new(Quota::per_second(1_000).unwrap()).unwrap())
            .leases(LeaseConfig {
                ttl: Duration::from_secs(60),
                ..LeaseConfig::default()
            })
            .deadline(Duration::from_secs(1))
            .build()
            .unwrap();
        let local = RedisLimiter::builder(redis, "local")
            .limit(one_per_hour)
            .failure_policy(FailurePolicy::Local { share: 1.0 })
            .deadline(Duration::from_secs(1))
            .build()
            .unwrap();
        for i in 0..KEYS {
            let key = long_key(i);
            assert!(cached.check(&key).await.is_allowed());
            assert_eq!(
                cached.check_outcome(&key, 1).await.unwrap().source,
                Source::Redis
            );
            assert!(leased.check(&key).await.is_allowed());
        }
        let cache = cached.shared.deny_cache.as_ref().unwrap();
        let leases = cached_leases(&leased);
        assert_eq!(cache.len(), KEYS);
        for (what, bytes) in [("deny cache", cache.key_bytes()), ("leases", leases)] {
            assert!(
                bytes <= KEYS * MAX_INLINE_KEY,
                "{what}: {bytes} bytes of key for {KEYS} keys"
            );
        }
        server.kill();
        for i in 0..KEYS {
            let o = local.check_outcome(long_key(i), 1).await.unwrap();
            assert!(matches!(o.source, Source::Policy(_)), "{o:?}");
        }
        let longest = local
            .shared
            .policy
            .longest_local_key
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(longest > 0 && longest <= MAX_INLINE_KEY as u64, "{longest}");
        leased.shutdown().await;
    }

    fn cached_leases(limiter: &RedisLimiter) -> usize {
        limiter.shared.leases.as_ref().unwrap().key_bytes()
    }
}
