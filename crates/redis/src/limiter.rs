//! [`RedisLimiter`]: the core's limits, decided on Redis.
//!
//! # One decision
//!
//! 1. The deny cache, if enabled, answers a standing denial.
//! 2. A held lease, if leases are enabled, answers from local permits.
//! 3. The circuit breaker, if open, sends the call to the failure policy.
//! 4. A slot among `max_in_flight` is taken *without waiting*; none free
//!    sends the call to the policy (no unbounded queue of pending calls).
//! 5. The script runs on the shared multiplexed connection, bounded by the
//!    deadline (default 5 ms); a timeout or an error goes to the policy and
//!    counts towards opening the breaker — except an error the script itself
//!    answered for this call ([`Fault::Script`]: Redis is up, the problem is
//!    the key's), which goes to the policy without touching the breaker.
//!    A value at a key that is not a state of its limit (another type,
//!    garbage) is no error at all: the script repairs it (see
//!    [`script`], "Foreign values").
//!
//! Every decision therefore returns within the deadline plus the time to
//! run the policy, whatever Redis does.
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

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::Semaphore;
use tollgate::{Clock, ClockSource, Decision, ManualClock, MonotonicClock, Nanos};

use crate::backend::Redis;
use crate::breaker::{Breaker, BreakerConfig, Pass};
use crate::deny_cache::DenyCache;
use crate::key::{BoundedKey, KeyCodec};
use crate::lease::{LeaseConfig, Leases};
use crate::limit::{ConfigError, Limit, Unit, binding};
use crate::policy::{Counters, FailurePolicy, Fault, Policy, Source, Stats};
use crate::script::{self, Op, Script};
use redis::Cmd;

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
enum Time {
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
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    redis: Redis,
    pub(crate) limits: Vec<Limit>,
    codec: KeyCodec,
    /// The five script arguments of every limit.
    args: Vec<[String; 5]>,
    time: Time,
    /// Local time: deny cache, leases, local fallback.
    pub(crate) clock: ClockSource,
    capacity: u64,
    slack_ms: u64,
    deadline: Duration,
    breaker: Breaker,
    open_for: Duration,
    in_flight: Arc<Semaphore>,
    policy: Policy,
    pub(crate) counters: Counters,
    deny_cache: Option<DenyCache>,
    leases: Option<Leases>,
    list_capacity: usize,
    carry: Option<crate::carry::CarrySpec>,
    /// A limit the module does not run (a calendar window): scripts only.
    scripts_only: bool,
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("limits", &self.shared.limits)
            .field("deadline", &self.shared.deadline)
            .finish_non_exhaustive()
    }
}

/// Builds a [`RedisLimiter`]; every setting but the limits has a default.
#[derive(Debug)]
pub struct RedisLimiterBuilder {
    redis: Redis,
    name: String,
    prefix: String,
    limits: Vec<Limit>,
    policy: FailurePolicy,
    deadline: Duration,
    breaker: BreakerConfig,
    max_in_flight: usize,
    deny_cache: Option<usize>,
    leases: Option<LeaseConfig>,
    manual: Option<ManualClock>,
    slack: Option<Duration>,
    list_capacity: usize,
    carry_from: Option<(Vec<Limit>, tollgate::Carry)>,
}

impl RedisLimiterBuilder {
    /// Adds a limit; a request is admitted only if every limit admits it,
    /// and then it is taken from all of them, in one round trip.
    pub fn limit(mut self, limit: impl Into<Limit>) -> Self {
        self.limits.push(limit.into());
        self
    }

    /// The prefix of every key (no braces). By default, `tollgate`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// What to answer when Redis does not. By default,
    /// [`FailurePolicy::Local`] with a share of 1/4.
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The longest a decision waits for Redis. By default, 5 ms.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The circuit breaker. By default, [`BreakerConfig::default`].
    pub fn breaker(mut self, breaker: BreakerConfig) -> Self {
        self.breaker = breaker;
        self
    }

    /// The most calls waiting on Redis at once; beyond, calls go to the
    /// policy at once. By default, 4,096.
    pub fn max_in_flight(mut self, max: usize) -> Self {
        self.max_in_flight = max;
        self
    }

    /// Answers standing denials locally (see
    /// [`deny_cache`](crate::deny_cache)), holding at most `capacity` keys;
    /// `0` disables it. By default, disabled.
    pub fn deny_cache(mut self, capacity: usize) -> Self {
        self.deny_cache = (capacity > 0).then_some(capacity);
        self
    }

    /// Takes permits in batches (see [`lease`](crate::lease)). By default,
    /// no leases.
    pub fn leases(mut self, config: LeaseConfig) -> Self {
        self.leases = Some(config);
        self
    }

    /// Test mode: the script's `now` is this clock's, in nanoseconds, and
    /// local time (deny cache, leases, fallback) too. By default, the
    /// server's `TIME`.
    pub fn manual_time(mut self, clock: ManualClock) -> Self {
        self.manual = Some(clock);
        self
    }

    /// Added to every key's TTL. By default, 10 ms on the server's clock,
    /// 10 minutes in test mode (where the manual clock does not follow real
    /// time, while TTLs do).
    pub fn ttl_slack(mut self, slack: Duration) -> Self {
        self.slack = Some(slack);
        self
    }

    /// The most keys the deny and allow lists hold together (see
    /// [`controls`](crate::controls)); listing one more is
    /// [`ControlError::ListFull`](crate::ControlError::ListFull). By
    /// default, 100,000.
    pub fn list_capacity(mut self, capacity: usize) -> Self {
        self.list_capacity = capacity;
        self
    }

    /// Carries each key's state from `previous` limits (the same number,
    /// in the same order: limit `i` replaces `previous[i]`) by the `carry`
    /// rule, atomically on the key's first decision under the new limits
    /// (see [`carry`](crate::carry)). By default, nothing is carried: a
    /// changed limit starts its keys afresh.
    pub fn carry_from(
        mut self,
        previous: impl IntoIterator<Item = Limit>,
        carry: tollgate::Carry,
    ) -> Self {
        self.carry_from = Some((previous.into_iter().collect(), carry));
        self
    }

    /// The limiter.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for no limits, a limit the script cannot run exactly,
    /// a bad name or prefix, or an invalid policy or lease setting.
    pub fn build(self) -> Result<RedisLimiter, ConfigError> {
        if self.limits.is_empty() {
            return Err(ConfigError::NoLimits);
        }
        if self.deadline.is_zero() || self.max_in_flight == 0 || self.breaker.threshold == 0 {
            return Err(ConfigError::Invalid(
                "the deadline, max_in_flight and breaker threshold must be above 0",
            ));
        }
        let (time, unit, clock) = match self.manual {
            Some(clock) => (
                Time::Manual(clock.clone()),
                Unit(1),
                ClockSource::Manual(clock),
            ),
            None => (
                Time::Server,
                Unit(1_000),
                ClockSource::Monotonic(MonotonicClock::new()),
            ),
        };
        for limit in &self.limits {
            limit.check_exact(unit)?;
        }
        let descriptors: Vec<String> = self.limits.iter().map(Limit::tag).collect();
        let codec =
            KeyCodec::new(&self.prefix, &self.name, &descriptors).map_err(ConfigError::Name)?;
        let args = self.limits.iter().map(|l| l.args(unit)).collect();
        let capacity = self.limits.iter().map(Limit::capacity).min().unwrap_or(0);
        let slack = self.slack.unwrap_or(match time {
            Time::Server => Duration::from_millis(10),
            Time::Manual(_) => Duration::from_secs(600),
        });
        if slack > Duration::from_secs(86_400) {
            // The script refuses it: a key must not outlive its state by so
            // long that the GCRA state's modulus wraps (see `script`).
            return Err(ConfigError::Invalid(
                "the TTL slack must be at most one day",
            ));
        }
        let policy = Policy::new(self.policy, &self.limits, &clock)?;
        let leases = match self.leases {
            Some(config) => Some(Leases::new(config, capacity)?),
            None => None,
        };
        let lease_ttl = leases.as_ref().map(Leases::ttl);
        let scripts_only = self.limits.iter().any(|l| matches!(l, Limit::Calendar(_)));
        let carry = match self.carry_from {
            Some((previous, rule)) => crate::carry::CarrySpec::new(
                &self.prefix,
                &self.name,
                &previous,
                &self.limits,
                rule,
                unit,
                clock.now().saturating_add(slack),
            )?,
            None => None,
        };
        let limiter = RedisLimiter {
            shared: Arc::new(Shared {
                redis: self.redis,
                limits: self.limits,
                codec,
                args,
                time,
                clock,
                capacity,
                slack_ms: u64::try_from(slack.as_millis()).unwrap_or(u64::MAX),
                deadline: self.deadline,
                breaker: Breaker::new(self.breaker),
                open_for: self.breaker.open_for,
                in_flight: Arc::new(Semaphore::new(self.max_in_flight)),
                policy,
                counters: Counters::default(),
                deny_cache: self.deny_cache.map(DenyCache::new),
                leases,
                list_capacity: self.list_capacity,
                carry,
                scripts_only,
            }),
        };
        if let Some(ttl) = lease_ttl {
            crate::lease::spawn_sweeper(Arc::downgrade(&limiter.shared), ttl);
        }
        Ok(limiter)
    }
}

/// What the script answered, decoded.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    pub(crate) decision: Decision,
    /// Permits taken (a lease may take more than asked).
    pub(crate) taken: u64,
    /// The script's clock reading, in clock units.
    pub(crate) now: i64,
    /// Per limit: the raw reset value (GCRA: ticks), for refunds.
    pub(crate) resets: Vec<i64>,
    /// For an admission, the end of the earliest fixed window it counted in.
    pub(crate) window_end: Option<Duration>,
}

impl RedisLimiter {
    /// A builder for limiter `name` (which, with the key, names the Redis
    /// keys) on `redis`.
    pub fn builder(redis: Redis, name: impl Into<String>) -> RedisLimiterBuilder {
        RedisLimiterBuilder {
            redis,
            name: name.into(),
            prefix: "tollgate".into(),
            limits: Vec::new(),
            policy: FailurePolicy::default(),
            deadline: Duration::from_millis(5),
            breaker: BreakerConfig::default(),
            max_in_flight: 4_096,
            deny_cache: None,
            leases: None,
            manual: None,
            slack: None,
            list_capacity: 100_000,
            carry_from: None,
        }
    }

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
        // Answers from the deny cache, a lease or the policy complete without
        // waiting: count them against the task's budget so that a caller
        // looping on them still lets the runtime run other tasks (among them
        // the connection that would end an outage).
        tokio::task::coop::consume_budget().await;
        // Bounded once: every map below, and the Redis keys, use it.
        let key = &BoundedKey::new(key.as_ref());
        let s = &self.shared;
        if let Some(cache) = &s.deny_cache {
            if let Some(decision) = cache.get(key, cost, s.clock.now()) {
                return Ok(self.counted(decision, Source::DenyCache));
            }
        }
        if let Some(leases) = &s.leases {
            if cost > 0 {
                return Ok(leases.check(self, key, cost).await);
            }
        }
        Ok(self.check_plain(key, cost).await)
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
        match self.ask(key, cost, op, cost, None).await {
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

    /// Runs the script through the breaker, the in-flight bound and the
    /// deadline. `Err` carries the fault and when Redis will next be tried.
    pub(crate) async fn ask(
        &self,
        key: &BoundedKey,
        cost: u64,
        op: Op,
        extra: u64,
        refund: Option<&Reply>,
    ) -> Result<Reply, (Fault, Duration)> {
        let s = &self.shared;
        if let Pass::Refuse(retry) = s.breaker.pass() {
            return Err((Fault::BreakerOpen, retry));
        }
        let Ok(_slot) = s.in_flight.clone().try_acquire_owned() else {
            return Err((Fault::Overloaded, s.deadline));
        };
        let outcome =
            tokio::time::timeout(s.deadline, self.call(key, cost, op, extra, refund)).await;
        let fault = match outcome {
            Ok(Ok(reply)) => {
                s.breaker.success();
                return Ok(reply);
            }
            Ok(Err(e)) if script::is_call_error(&e) => {
                // Redis answered: it is up. The fault is this key's or this
                // call's (bug of issue 17: one malformed key opened the
                // breaker for every key).
                s.breaker.success();
                return Err((Fault::Script, Duration::ZERO));
            }
            Ok(Err(_)) => Fault::Error,
            Err(_) => Fault::Timeout,
        };
        if s.breaker.failure() {
            s.redis.reconnect();
        }
        Err((fault, s.open_for))
    }

    /// One script call. `extra` is the fifth argument: the lease's need, or
    /// a refund's stamp.
    async fn call(
        &self,
        key: &BoundedKey,
        cost: u64,
        op: Op,
        extra: u64,
        refund: Option<&Reply>,
    ) -> Result<Reply, redis::RedisError> {
        let s = &self.shared;
        let keys = s.codec.keys_of(key);
        let now = match &s.time {
            Time::Server => String::new(),
            Time::Manual(clock) => clock.now().as_u64().to_string(),
        };
        let mut connection = s.redis.connection();
        // The module if detected, else the lean script for this shape, else
        // the general one; on `unknown command` the module falls back to the
        // same script (see `module`).
        let which = match (op, s.limits.as_slice()) {
            (Op::Check | Op::Peek, [Limit::Gcra(_)]) => Script::Gcra,
            (Op::Check | Op::Peek, [Limit::FixedWindow(_)]) => Script::Fixed,
            _ => Script::Decide,
        };
        let args = |cmd: &mut Cmd| {
            cmd.arg(op.code()).arg(&now).arg(cost).arg(s.slack_ms);
            match refund {
                Some(lease) => cmd.arg(lease.now),
                None => cmd.arg(extra),
            };
            for (i, args) in s.args.iter().enumerate() {
                for a in args {
                    cmd.arg(a.as_str());
                }
                let x = refund.map_or(0, |lease| lease.resets.get(i).copied().unwrap_or(0));
                cmd.arg(x);
            }
        };
        let carrying = s.carry.as_ref().filter(|c| c.active(s.clock.now()));
        let raw = match carrying {
            // Always the script: the module takes no previous limits.
            Some(carry) => {
                let mut all = keys.clone();
                all.extend(carry.keys_of(key));
                script::run(&mut connection, Script::Carry, &all, |cmd| {
                    args(cmd);
                    carry.args(cmd);
                })
                .await?
            }
            // The module knows no calendar (see `calendar`).
            None if s.scripts_only => script::run(&mut connection, which, &keys, args).await?,
            None => Redis::decide(&s.redis, &mut connection, which, &keys, args).await?,
        };
        self.decode(&raw).ok_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::Parse,
                "tollgate: unexpected script reply",
                format!("{raw:?}"),
            ))
        })
    }

    fn decode(&self, raw: &[i64]) -> Option<Reply> {
        let limits = &self.shared.limits;
        let (&[allowed, taken, now], rest) = raw.split_first_chunk::<{ script::HEAD_REPLY }>()?;
        if rest.is_empty() {
            // A refund's reply.
            return Some(Reply {
                decision: Decision::from_parts(allowed == 1, 0, 0, Duration::ZERO, Duration::ZERO),
                taken: 0,
                now,
                resets: Vec::new(),
                window_end: None,
            });
        }
        if rest.len() != limits.len() * script::PER_LIMIT_REPLY {
            return None;
        }
        let mut decisions = Vec::with_capacity(limits.len());
        let mut resets = Vec::with_capacity(limits.len());
        let mut window_end: Option<Duration> = None;
        for (limit, chunk) in limits
            .iter()
            .zip(rest.chunks_exact(script::PER_LIMIT_REPLY))
        {
            let raw: [i64; 4] = chunk.try_into().ok()?;
            let decision = limit.decision(raw)?;
            if let Limit::FixedWindow(_) | Limit::Calendar(_) = limit {
                let end = decision.reset_after();
                window_end = Some(window_end.map_or(end, |w| w.min(end)));
            }
            decisions.push(decision);
            resets.push(raw[3]);
        }
        let decision = binding(decisions)?;
        if decision.is_allowed() != (allowed == 1) {
            return None;
        }
        Some(Reply {
            decision,
            taken: u64::try_from(taken).ok()?,
            now,
            resets,
            window_end,
        })
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Runs a control's script (always a script, never the module: see
    /// [`controls`](crate::controls)) through the breaker, the in-flight
    /// bound and the deadline, as a decision is; a fault is returned, never
    /// answered by the failure policy.
    pub(crate) async fn run_control(
        &self,
        which: Script,
        keys: &[Vec<u8>],
        args: impl Fn(&mut Cmd),
    ) -> Result<Vec<i64>, Fault> {
        let s = &self.shared;
        if let Pass::Refuse(_) = s.breaker.pass() {
            return Err(Fault::BreakerOpen);
        }
        let Ok(_slot) = s.in_flight.clone().try_acquire_owned() else {
            return Err(Fault::Overloaded);
        };
        let mut connection = s.redis.connection();
        let call = script::run(&mut connection, which, keys, args);
        let fault = match tokio::time::timeout(s.deadline, call).await {
            Ok(Ok(reply)) => {
                s.breaker.success();
                return Ok(reply);
            }
            Ok(Err(e)) if script::is_call_error(&e) => {
                s.breaker.success();
                return Err(Fault::Script);
            }
            Ok(Err(_)) => Fault::Error,
            Err(_) => Fault::Timeout,
        };
        if s.breaker.failure() {
            s.redis.reconnect();
        }
        Err(fault)
    }

    /// The arguments of a control's call: the decision's, with `op` and
    /// `cost` (see [`controls`](crate::controls)).
    pub(crate) fn control_args(&self, op: &str, cost: u64, cmd: &mut Cmd) {
        let s = &self.shared;
        let now = match &s.time {
            Time::Server => String::new(),
            Time::Manual(clock) => clock.now().as_u64().to_string(),
        };
        cmd.arg(op).arg(now).arg(cost).arg(s.slack_ms).arg(0);
        for args in &s.args {
            for a in args {
                cmd.arg(a.as_str());
            }
            cmd.arg(0);
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::MAX_INLINE_KEY;
    use tollgate::{Gcra, Quota};
    use tollgate_testkit::RedisServer;

    const KEYS: usize = 1_000;

    fn long_key(i: usize) -> Vec<u8> {
        let mut key = vec![b'k'; 64 * 1024];
        key[..8].copy_from_slice(&(i as u64).to_le_bytes());
        key
    }

    /// Bug (issue 17): the deny cache, the leases and the local fallback
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
