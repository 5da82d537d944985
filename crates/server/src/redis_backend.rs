//! The Redis backend: the counts on Redis or Redis Cluster, through
//! `tollgate-redis`. Configured by the file's `backend:` section
//! ([`RedisSettings`]); without one the server counts in memory.
//!
//! # Decisions
//!
//! - **One `RedisLimiter` per rule**, named by the rule's path
//!   (`domain.key_value…`, so the Redis keys read
//!   `<key_prefix>{<rule>|<bucket>}:<limit>`), holding the rule's limits;
//!   every limiter shares one multiplexed connection (or the cluster
//!   client). A request's descriptors are decided concurrently on it.
//! - **Batched across requests**: every decision goes through one
//!   `tollgate_redis::Batcher`, so that the decisions of concurrent
//!   requests (and of one request's descriptors) share script calls: a
//!   decision made while none other is in flight is sent alone at once; one
//!   made while others are in flight joins the next batch, which holds only
//!   what is already queued (never a timer). Each decision stays
//!   independent (its own reply, its own refusal), with its limiter's
//!   deadline, breaker and failure policy (see `tollgate_redis::limiter::batch`'s
//!   guarantees). Rules of several limits, sliding windows, Redis Cluster
//!   and the native module keep one call per decision.
//! - **Failure policy, deadline, breaker, deny cache, leases** are the
//!   Redis limiter's own, one setting for every rule. Every decision
//!   returns within the deadline plus the policy's (local) time, whatever
//!   Redis does; a decision taken by the policy is a decision like any
//!   other for the APIs (a fail-closed denial is `OVER_LIMIT` with the
//!   time until Redis is tried again as `retry_after`), and is counted
//!   under the metrics below. The backend therefore never answers an
//!   error: a Redis outage is visible in the metrics, not as 503s.
//! - **Redis must answer at start**: a wrong URL, refused credentials or
//!   TLS handshake, no sentinel naming the master, a module required but
//!   absent, or a Redis down when the server starts is an error at start
//!   (better found then than as a policy decision on every request); once
//!   started, outages and restarts are the policy's and the breaker's
//!   (reconnection included; behind Sentinel, the master is asked for
//!   again each time the breaker opens, so that the server follows a
//!   failover: see `tollgate_redis::backend`).
//! - **Connection settings** (TLS, ACL user and password, Sentinel, the
//!   native module) map field by field onto `tollgate_redis::RedisConfig`.
//! - **Across a reload**, a rule that keeps its path and its exact limits
//!   keeps its limiter (its leases, deny cache and counters). A rule whose
//!   limits change gets a new limiter: the Redis keys name the limits'
//!   parameters, so its buckets start afresh (unlike in memory, where
//!   permits taken stay taken under the new quota; state in Redis cannot be
//!   carried over between different scripts' parameters). A replaced or
//!   removed rule's limiter gives its leases back in the background; its
//!   keys expire by their TTL. A rule set with a limit the script cannot
//!   hold exactly (see `tollgate_redis::limit`) is refused whole.
//! - **Sliding log** is not run on Redis: the configuration refuses it
//!   under a Redis backend.
//! - **Shutdown** gives every lease back (one round trip per key holding
//!   one, each bounded by the deadline), after the last request.
//!
//! # Metrics
//!
//! Per rule (label `rule`), monotonic across reloads (a replaced limiter's
//! counts are kept):
//!
//! - `tollgate_redis_decisions_total{rule, source}`: decisions by who took
//!   them, `source` = `redis`, `deny_cache`, `lease` or `policy`;
//! - `tollgate_redis_policy_faults_total{rule, fault}`: why the policy
//!   decided, `fault` = `timeout`, `error`, `breaker_open`, `overloaded`
//!   (the backend errors: Redis not answering in time, answering an error,
//!   not asked while the breaker is open, not asked because too many calls
//!   were waiting);
//! - `tollgate_redis_policy_decisions_total{rule, result}`: the policy's
//!   answers, `result` = `allowed` or `denied`.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures_util::future::join_all;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tollgate::Decision;
use tollgate_redis::{Batcher, Limit, Options, Redis, RedisConfig, RedisLimiter, Stats, Target};

use crate::backend::{
    Backend, BackendError, BackendHealth, Control, ControlError, ControlFuture, DecideFuture, Hit,
    PolicyTotals,
};
use crate::config::{BuiltAlgorithm, RedisSettings, RedisTarget, RedisTls, redact_url};
use crate::rules::{Rule, RuleSet};

/// How long [`Backend::shutdown`] may spend giving leases back.
const SHUTDOWN_BUDGET: Duration = Duration::from_secs(5);

struct Installed {
    algorithm: BuiltAlgorithm,
    limiter: RedisLimiter,
}

/// Counts on Redis: one `RedisLimiter` per rule (see the [module docs](self)).
pub struct RedisBackend {
    redis: Redis,
    /// Coalesces concurrent decisions into fewer script calls.
    batcher: Batcher,
    settings: RedisSettings,
    /// Shared with the metrics collector.
    limiters: Arc<ArcSwap<HashMap<Arc<str>, Arc<Installed>>>>,
    /// Serialises installs (reloads are rare; decisions never take it).
    installing: Mutex<()>,
    /// Stats of limiters replaced or removed, per rule, for the metrics.
    retired: Arc<Mutex<HashMap<Arc<str>, Totals>>>,
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("redis", &self.redis)
            .field("rules", &self.limiters.load().len())
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Connects to the Redis or the cluster of `settings`.
    ///
    /// # Errors
    ///
    /// Redis does not answer within the connection timeout, or refuses.
    pub async fn connect(settings: &RedisSettings) -> Result<RedisBackend, BackendError> {
        let redis = Redis::open(&redis_config(settings))
            .await
            .map_err(|error| {
                BackendError::new(format!(
                    "cannot connect to {}: {error}",
                    target_name(settings)
                ))
            })?;
        Ok(RedisBackend::with_redis(redis, settings.clone()))
    }

    /// A backend on an existing connection.
    pub fn with_redis(redis: Redis, settings: RedisSettings) -> RedisBackend {
        RedisBackend {
            batcher: Batcher::new(&redis),
            redis,
            settings,
            limiters: Arc::new(ArcSwap::from_pointee(HashMap::new())),
            installing: Mutex::new(()),
            retired: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The limiter of rule `id`, if installed (for tests and inspection).
    pub fn limiter(&self, id: &str) -> Option<RedisLimiter> {
        self.limiters
            .load()
            .get(id)
            .map(|installed| installed.limiter.clone())
    }

    /// A limiter for `rule`; with leases only if `leases` (a limiter that is
    /// dropped at once must not strand a lease).
    fn build(
        &self,
        rule: &Rule,
        algorithm: &BuiltAlgorithm,
        leases: bool,
    ) -> Result<RedisLimiter, String> {
        let limits: Vec<Limit> = match algorithm {
            BuiltAlgorithm::Gcra(a) => a.limits().iter().cloned().map(Limit::from).collect(),
            BuiltAlgorithm::FixedWindow(a) => a.limits().iter().cloned().map(Limit::from).collect(),
            BuiltAlgorithm::SlidingWindow(a) => {
                a.limits().iter().cloned().map(Limit::from).collect()
            }
            BuiltAlgorithm::SlidingLog(_) => {
                return Err("sliding_log does not run on Redis (use sliding_window)".into());
            }
        };
        let s = &self.settings;
        let mut builder = RedisLimiter::builder(self.redis.clone(), &*rule.id)
            .prefix(s.key_prefix.clone())
            .failure_policy(s.failure_policy)
            .deadline(s.deadline)
            .breaker(s.breaker)
            .deny_cache(s.deny_cache);
        for limit in limits {
            builder = builder.limit(limit);
        }
        if let Some(config) = s.leases.filter(|_| leases) {
            builder = builder.leases(config);
        }
        builder.build().map_err(|error| error.to_string())
    }

    /// Keeps the stats of a limiter going away, and gives its leases back.
    fn retire(&self, id: &Arc<str>, limiter: RedisLimiter) {
        self.retired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(Arc::clone(id))
            .or_default()
            .add(&limiter.stats());
        if self.settings.leases.is_some() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move { limiter.shutdown().await });
            }
        }
    }
}

/// `tollgate-redis`'s connection settings for `settings`.
pub(crate) fn redis_config(settings: &RedisSettings) -> RedisConfig {
    let mut config = match &settings.target {
        RedisTarget::Single(url) => RedisConfig::single(url.clone()),
        RedisTarget::Cluster(urls) => RedisConfig::cluster(urls.iter().cloned()),
        RedisTarget::Sentinel(sentinel) => {
            let mut config =
                RedisConfig::sentinel(sentinel.sentinels.iter().cloned(), sentinel.master.clone());
            if let Target::Sentinel(own) = &mut config.target {
                own.username.clone_from(&sentinel.username);
                own.password.clone_from(&sentinel.password);
            }
            config
        }
    };
    config.username.clone_from(&settings.username);
    config.password.clone_from(&settings.password);
    config.tls = settings.tls.as_ref().map(RedisTls::to_config);
    config.module = settings.module;
    config.options = Options {
        response_timeout: settings.response_timeout,
        connection_timeout: settings.connection_timeout,
        retries: settings.retries,
    };
    config
}

/// What `settings` connect to, for messages (no credentials).
pub(crate) fn target_name(settings: &RedisSettings) -> String {
    let urls = |urls: &[String]| {
        urls.iter()
            .map(|url| redact_url(url))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match &settings.target {
        RedisTarget::Single(url) => redact_url(url),
        RedisTarget::Cluster(nodes) => format!("the cluster {}", urls(nodes)),
        RedisTarget::Sentinel(sentinel) => format!(
            "master '{}' of the sentinels {}",
            sentinel.master,
            urls(&sentinel.sentinels)
        ),
    }
}

/// One decision, batched with the concurrent ones (see the module docs).
async fn decide_one(batcher: &Batcher, limiter: &RedisLimiter, key: &str, cost: u64) -> Decision {
    let decision = if cost == 0 {
        batcher.peek_n(limiter, key, 0).await
    } else {
        batcher.check_n(limiter, key, cost).await
    };
    // The server checks costs first; only a reload that lowered the
    // capacity in between lands here: a denial, never to fit.
    decision.unwrap_or_else(|error| {
        Decision::from_parts(false, error.capacity, 0, Duration::MAX, Duration::ZERO)
    })
}

impl Backend for RedisBackend {
    fn install(&self, rules: &RuleSet) -> Result<(), BackendError> {
        let _one_at_a_time = self
            .installing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let old = self.limiters.load_full();
        let mut new = HashMap::with_capacity(rules.rules().len());
        // Build every new limiter before anything changes: a refusal leaves
        // the installed set as it was (the limiters built so far hold
        // nothing yet and are dropped).
        for rule in rules.rules() {
            let Some(limits) = &rule.limits else { continue };
            let installed = match old.get(&rule.id) {
                Some(installed) if installed.algorithm == limits.algorithm => Arc::clone(installed),
                _ => {
                    let limiter = self
                        .build(rule, &limits.algorithm, true)
                        .map_err(|error| BackendError::new(format!("rule {}: {error}", rule.id)))?;
                    Arc::new(Installed {
                        algorithm: limits.algorithm.clone(),
                        limiter,
                    })
                }
            };
            new.insert(Arc::clone(&rule.id), installed);
        }
        self.limiters.store(Arc::new(new));
        let current = self.limiters.load();
        for (id, installed) in old.iter() {
            let kept = current
                .get(id)
                .is_some_and(|now| Arc::ptr_eq(now, installed));
            if !kept {
                self.retire(id, installed.limiter.clone());
            }
        }
        Ok(())
    }

    fn decide<'a>(&'a self, hits: &'a [Hit<'a>]) -> DecideFuture<'a> {
        let limiters = self.limiters.load_full();
        Box::pin(async move {
            let decisions = hits.iter().map(|hit| {
                let limiters = &limiters;
                async move {
                    match (limiters.get(&hit.rule.id), &hit.rule.limits) {
                        (Some(installed), _) => {
                            decide_one(&self.batcher, &installed.limiter, hit.key, hit.cost).await
                        }
                        // A `limit` override, or raced a reload that removed
                        // the rule: decided by a limiter of its own, on the
                        // rule's keys (which name the limits).
                        (None, Some(limits)) => {
                            match self.build(hit.rule, &limits.algorithm, false) {
                                Ok(limiter) => {
                                    decide_one(&self.batcher, &limiter, hit.key, hit.cost).await
                                }
                                // Never "no limit" for a limit Redis cannot hold.
                                Err(_) => Decision::from_parts(
                                    false,
                                    limits.algorithm.capacity(),
                                    0,
                                    Duration::MAX,
                                    Duration::ZERO,
                                ),
                            }
                        }
                        // Unlimited rules never reach a backend.
                        (None, None) => unlimited(),
                    }
                }
            });
            Ok(join_all(decisions).await)
        })
    }

    fn register_metrics(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(RedisMetrics {
            limiters: Arc::clone(&self.limiters),
            retired: Arc::clone(&self.retired),
        }));
    }

    fn control<'a>(&'a self, rule: &'a Rule, key: &'a str, control: Control) -> ControlFuture<'a> {
        let installed = self.limiters.load().get(&rule.id).cloned();
        Box::pin(async move {
            let Some(installed) = installed else {
                return Err(ControlError::Backend(BackendError::new(format!(
                    "rule {} is not in force (a reload raced)",
                    rule.id
                ))));
            };
            let limiter = &installed.limiter;
            let applied = match control {
                Control::Reset => limiter.reset(key).await,
                Control::Refund(n) => limiter.refund(key, n).await,
                Control::Penalize(duration) => limiter.penalize(key, duration).await,
                Control::Deny => limiter.deny(key).await,
                Control::Allow => limiter.allow(key).await,
                Control::Unlist => limiter.unlist(key).await,
            };
            applied.map(drop).map_err(|error| match error {
                tollgate_redis::ControlError::ListFull { capacity } => ControlError::ListFull(
                    format!("the deny and allow lists hold their {capacity} keys already"),
                ),
                other => ControlError::Backend(BackendError::new(other.to_string())),
            })
        })
    }

    fn health(&self) -> BackendHealth {
        let mut t = self
            .retired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .fold(Totals::default(), |mut sum, t| {
                sum.sum(t);
                sum
            });
        for installed in self.limiters.load().values() {
            t.add(&installed.limiter.stats());
        }
        BackendHealth {
            kind: "redis",
            policy: Some(PolicyTotals {
                store: t.redis + t.deny_cache + t.lease,
                timeout: t.timeout,
                error: t.error,
                breaker_open: t.breaker_open,
                overloaded: t.overloaded,
                allowed: t.allowed,
                denied: t.denied,
            }),
        }
    }

    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            let limiters = self.limiters.load_full();
            let returns = join_all(limiters.values().map(|i| i.limiter.shutdown()));
            if tokio::time::timeout(SHUTDOWN_BUDGET, returns)
                .await
                .is_err()
            {
                tracing::warn!("leases not all given back within {SHUTDOWN_BUDGET:?}");
            }
        })
    }
}

fn unlimited() -> Decision {
    Decision::from_parts(true, u64::MAX, u64::MAX, Duration::ZERO, Duration::ZERO)
}

/// A limiter's [`Stats`], summed over the limiters a rule has had.
#[derive(Clone, Copy, Debug, Default)]
struct Totals {
    redis: u64,
    deny_cache: u64,
    lease: u64,
    timeout: u64,
    error: u64,
    breaker_open: u64,
    overloaded: u64,
    allowed: u64,
    denied: u64,
}

impl Totals {
    fn sum(&mut self, other: &Totals) {
        self.redis += other.redis;
        self.deny_cache += other.deny_cache;
        self.lease += other.lease;
        self.timeout += other.timeout;
        self.error += other.error;
        self.breaker_open += other.breaker_open;
        self.overloaded += other.overloaded;
        self.allowed += other.allowed;
        self.denied += other.denied;
    }

    fn add(&mut self, stats: &Stats) {
        self.redis += stats.redis;
        self.deny_cache += stats.deny_cache;
        self.lease += stats.lease;
        self.timeout += stats.policy_timeout;
        self.error += stats.policy_error;
        self.breaker_open += stats.policy_breaker_open;
        self.overloaded += stats.policy_overloaded;
        self.allowed += stats.policy_allowed;
        self.denied += stats.policy_denied;
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabel {
    rule: String,
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FaultLabel {
    rule: String,
    fault: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    rule: String,
    result: &'static str,
}

/// Reads every limiter's stats at each scrape (see the [module docs](self)).
struct RedisMetrics {
    limiters: Arc<ArcSwap<HashMap<Arc<str>, Arc<Installed>>>>,
    retired: Arc<Mutex<HashMap<Arc<str>, Totals>>>,
}

impl fmt::Debug for RedisMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisMetrics").finish_non_exhaustive()
    }
}

impl Collector for RedisMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let mut totals: HashMap<Arc<str>, Totals> = self
            .retired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (id, installed) in self.limiters.load().iter() {
            totals
                .entry(Arc::clone(id))
                .or_default()
                .add(&installed.limiter.stats());
        }
        let sources = Family::<SourceLabel, Counter>::default();
        let faults = Family::<FaultLabel, Counter>::default();
        let results = Family::<ResultLabel, Counter>::default();
        for (id, t) in &totals {
            let rule = id.to_string();
            for (source, n) in [
                ("redis", t.redis),
                ("deny_cache", t.deny_cache),
                ("lease", t.lease),
                ("policy", t.allowed + t.denied),
            ] {
                sources
                    .get_or_create(&SourceLabel {
                        rule: rule.clone(),
                        source,
                    })
                    .inc_by(n);
            }
            for (fault, n) in [
                ("timeout", t.timeout),
                ("error", t.error),
                ("breaker_open", t.breaker_open),
                ("overloaded", t.overloaded),
            ] {
                faults
                    .get_or_create(&FaultLabel {
                        rule: rule.clone(),
                        fault,
                    })
                    .inc_by(n);
            }
            for (result, n) in [("allowed", t.allowed), ("denied", t.denied)] {
                results
                    .get_or_create(&ResultLabel {
                        rule: rule.clone(),
                        result,
                    })
                    .inc_by(n);
            }
        }
        for (name, help, family) in [
            (
                "redis_decisions",
                "Decisions of the Redis backend by who took them",
                &sources as &dyn EncodeMetric,
            ),
            (
                "redis_policy_faults",
                "Decisions the failure policy took, by why Redis did not decide",
                &faults,
            ),
            (
                "redis_policy_decisions",
                "Decisions the failure policy took, by answer",
                &results,
            ),
        ] {
            let metric = encoder.encode_descriptor(name, help, None, family.metric_type())?;
            family.encode(metric)?;
        }
        Ok(())
    }
}
