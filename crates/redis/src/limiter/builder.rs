//! [`RedisLimiterBuilder`]: the settings of a [`RedisLimiter`], their
//! defaults and their validation.
//!
//! Every setting but the limits has a default; [`build`] refuses a
//! setting the limiter could not honour (no limit, a limit the scripts
//! cannot run exactly, a zero deadline, an invalid policy, lease or carry)
//! with a [`ConfigError`], never a panic. Building spawns the background
//! tasks the settings need (the lease sweeper, the carry of listed keys)
//! when a tokio runtime is running; they end with the last clone of the
//! limiter.
//!
//! [`build`]: RedisLimiterBuilder::build

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::sync::Semaphore;
use tollgate::{Clock, ClockSource, ManualClock, MonotonicClock};

use super::carry_controls;
use super::leases::{self, Leases};
use crate::backend::Redis;
use crate::breaker::{BreakerConfig, Breakers};
use crate::deny_cache::DenyCache;
use crate::durability::Durability;
use crate::key::KeyCodec;
use crate::lease::LeaseConfig;
use crate::limit::{ConfigError, Limit, Unit};
use crate::limiter::{RedisLimiter, Shared, Time};
use crate::observe::RedisObserver;
use crate::policy::{Counters, FailurePolicy, Policy};

/// The default deadline of a decision on a single server.
pub const DEADLINE: Duration = Duration::from_millis(5);

/// The default deadline of a decision on a cluster: the single server's,
/// plus what a slot migration adds to a call — an `ASK` or `MOVED`
/// redirection (one more round trip, to another node), a `TRYAGAIN` pause
/// (1, 2, 4 ms…) — with room for a loaded host. Measured during a reshard
/// under load on a shared 2-core machine (`BENCHMARKS.md`, "Cluster under
/// change"): calls outside the moving slots took up to 8 ms and went to
/// the policy at 5 ms; at 20 ms none did.
pub const CLUSTER_DEADLINE: Duration = Duration::from_millis(20);

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
            deadline: None,
            breaker: BreakerConfig::default(),
            max_in_flight: 4_096,
            deny_cache: None,
            leases: None,
            manual: None,
            slack: None,
            list_capacity: 100_000,
            carry_from: None,
            observer: None,
            dry_run: false,
            durability: Durability::Master,
        }
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
    /// `None`: [`DEADLINE`], or [`CLUSTER_DEADLINE`] on a cluster.
    deadline: Option<Duration>,
    breaker: BreakerConfig,
    max_in_flight: usize,
    deny_cache: Option<usize>,
    leases: Option<LeaseConfig>,
    manual: Option<ManualClock>,
    slack: Option<Duration>,
    list_capacity: usize,
    carry_from: Option<(Vec<Limit>, tollgate::Carry)>,
    observer: Option<Arc<dyn RedisObserver>>,
    dry_run: bool,
    durability: Durability,
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

    /// The longest a decision waits for Redis. By default, 5 ms on a
    /// single server ([`DEADLINE`]) and 20 ms on a cluster
    /// ([`CLUSTER_DEADLINE`]: a call there may follow a redirection or two
    /// while slots move; see [`cluster`](crate::cluster)).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
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

    /// Calls `observer` once per decision of `check`, `check_n` and
    /// `check_outcome` (not `peek_n`, not the controls), with the limiter's
    /// name as the limit's name and where the decision came from (see
    /// [`observe`](crate::observe)). Any core
    /// [`Observer`](tollgate::observe::Observer) is a [`RedisObserver`]:
    /// the core's `metrics` and `tracing` observers work unchanged. By
    /// default, none (and no cost).
    pub fn observer(mut self, observer: impl RedisObserver) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// Starts in dry-run (see [`RedisLimiter::is_dry_run`]). By default,
    /// `false`.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// When an admission is answered: once the master applied it, or once
    /// replicas acknowledged it too (`WAIT`; see
    /// [`durability`](crate::durability) for what each guarantees across a
    /// failover, and its cost). By default, [`Durability::Master`].
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The limiter.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for no limits, a limit the script cannot run exactly,
    /// a bad name or prefix, or an invalid policy, lease or durability
    /// setting.
    pub fn build(self) -> Result<RedisLimiter, ConfigError> {
        if self.limits.is_empty() {
            return Err(ConfigError::NoLimits);
        }
        let deadline = self.deadline.unwrap_or(if self.redis.is_cluster() {
            CLUSTER_DEADLINE
        } else {
            DEADLINE
        });
        if deadline.is_zero() || self.max_in_flight == 0 || self.breaker.threshold == 0 {
            return Err(ConfigError::Invalid(
                "the deadline, max_in_flight and breaker threshold must be above 0",
            ));
        }
        self.durability.check(deadline)?;
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
        // Calendar limits run on the general script alone (warm-up goes to
        // a module that decides it: see `module`).
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
                deadline,
                breakers: Breakers::new(self.breaker),
                open_for: self.breaker.open_for,
                in_flight: Arc::new(Semaphore::new(self.max_in_flight)),
                policy,
                counters: Counters::default(),
                deny_cache: self.deny_cache.map(DenyCache::new),
                leases,
                list_capacity: self.list_capacity,
                carry,
                scripts_only,
                name: self.name.into_boxed_str(),
                observer: self.observer,
                dry_run: AtomicBool::new(self.dry_run),
                wait: self.durability.wait(),
            }),
        };
        if limiter.shared.carry.is_some() {
            let retry = self.breaker.open_for.max(Duration::from_millis(100));
            carry_controls::spawn_controls_carry(Arc::downgrade(&limiter.shared), retry);
        }
        if let Some(ttl) = lease_ttl {
            leases::spawn_sweeper(Arc::downgrade(&limiter.shared), ttl);
        }
        Ok(limiter)
    }
}
