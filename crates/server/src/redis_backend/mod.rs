//! The Redis backend: the counts on Redis or Redis Cluster, through
//! `tollgate-redis`. Configured by the file's `backend:` section
//! ([`RedisSettings`]); without one the server counts in memory.
//!
//! # Model
//!
//! One `RedisLimiter` per rule, named by the rule's path (keys read
//! `<key_prefix>{<rule>|<bucket>}:<limit>`), every limiter on one multiplexed
//! connection (or the cluster client). Every decision goes through one
//! `tollgate_redis::Batcher`: a decision made while none is in flight is sent
//! at once, others join the next batch of what is already queued (never a
//! timer); each stays independent, with its own reply, deadline, breaker and
//! failure policy. Budgets' charges, warm-up and Lyft's key layout (the
//! `lyft` submodule, `src/redis_backend/lyft.rs`) run on the same
//! limiters.
//!
//! # Guarantees
//!
//! - **Bounded**: every decision returns within the deadline plus the
//!   failure policy's local time, whatever Redis does; the policy's answer is
//!   a decision like any other (a fail-closed denial is `OVER_LIMIT` with the
//!   time until Redis is tried again), or with `failure_policy: error` the
//!   call fails ([`BackendError`]: gRPC `UNAVAILABLE`, HTTP 503).
//! - **Never silent** ([`watch`]): a failing Redis is logged at WARN, counted,
//!   shown on the status page and, with `health_check: true`, fails the
//!   health checks.
//! - **Never a fresh quota across a reload or an admin change**: a rule that
//!   keeps its limits keeps its limiter; changed limits carry each key's state
//!   (`Carry::Keep`), converted on Redis for every algorithm, and a change of
//!   algorithm is bridged (old and new limits decided together) for one old
//!   period, as in memory; list entries and penalties follow the key.
//! - **Refused at start, not per request**: a Redis that does not answer
//!   `PING` (wrong URL, credentials, TLS, Sentinel, a required module) stops
//!   the start, unless `startup_retry` waits for it; `sliding_log` and a limit
//!   the script cannot hold exactly are refused with the file's line.
//!
//! # Parameters (defaults from [`RedisSettings`] unless said)
//!
//! - `failure_policy`: `local`, a local share of 1/4 of each quota.
//! - `deadline`: 5 ms, 20 ms on a cluster (`tollgate-redis`'s defaults).
//! - `response_timeout`, `connection_timeout`: 50 ms; `retries`: 2.
//! - `breaker`: 3 failures open it for 200 ms (`tollgate-redis`'s default).
//! - `deny_cache`: 0 (off); `leases`: off; `wait:`: off; `key_prefix`: `tollgate`.
//! - `health_check`: false; `startup_retry`: none (Redis must answer at once).
//! - Probe: a `PING` every second ([`watch::PROBE_EVERY`]); WARN lines at most
//!   one per 10 s ([`watch::LOG_EVERY`]).
//! - Bridge: the longest old period plus 1 s of slack for TTLs and clocks
//!   (`carry.rs`); leases given back at shutdown within 5 s.
//!
//! # Metrics
//!
//! `tollgate_redis_decisions_total{rule, source}`,
//! `tollgate_redis_policy_faults_total{rule, fault}`,
//! `tollgate_redis_policy_decisions_total{rule, result}` (monotonic across
//! reloads) and `tollgate_redis_up{redis}`.
//!
//! Every decision in full (batching, the carry's pairing of limits, bridges,
//! lists across a change, budgets, warm-up, shutdown, the metrics' labels):
//! `crates/server/docs/redis.md`, "Inside the server".

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use futures_util::future::join_all;
use prometheus_client::registry::Registry;
use tollgate::{Carry, ClockSource, Decision};
use tollgate_redis::{
    Batcher, Limit, Options, Redis, RedisConfig, RedisLimiter, RedisLimiterBuilder, Source, Target,
};

mod carry;
mod connect;
mod lyft;
mod metrics;
pub mod watch;

use carry::{BRIDGE_SLACK, carried, carry_pairs, limits_of};
use metrics::{RedisMetrics, Totals};
use watch::{ProbeTask, Watch};

use crate::backend::{
    Backend, BackendError, BackendHealth, Control, ControlError, ControlFuture, DecideFuture, Hit,
    PolicyTotals, StoreHealth,
};
use crate::config::{
    BuiltAlgorithm, KeyLayout, LyftLayout, RedisSettings, RedisTarget, RedisTls, redact_url,
};
use crate::rules::{Rule, RuleSet};

/// How long [`Backend::shutdown`] may spend giving leases back.
const SHUTDOWN_BUDGET: Duration = Duration::from_secs(5);

struct Installed {
    algorithm: BuiltAlgorithm,
    limiter: RedisLimiter,
    /// Until when `limiter` also holds the previous limits (a bridge: see
    /// the module docs); `None` for a limiter of the rule's limits alone.
    bridge_until: Option<Instant>,
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
    /// `key_layout: lyft`: where and how its rules count.
    lyft: Option<lyft::Lyft>,
    /// Redis as seen from here: the main one, then the per-second one of
    /// Lyft's layout if any (see [`watch`]).
    watches: Vec<Watch>,
    /// Their probes, stopped with the backend.
    _probes: Vec<ProbeTask>,
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
    /// Connects to the Redis or the cluster of `settings`, and checks that
    /// it answers `PING`; with `startup_retry`, waits for it (see the
    /// `connect` submodule).
    ///
    /// # Errors
    ///
    /// Redis does not answer within the connection timeout, or refuses
    /// (with `startup_retry`, once its `give_up_after` has passed).
    pub async fn connect(settings: &RedisSettings) -> Result<RedisBackend, BackendError> {
        for notice in &settings.notices {
            tracing::warn!("{notice}");
        }
        let redis = connect::open(settings, "").await?;
        let mut backend = RedisBackend::with_redis(redis, settings.clone());
        if let KeyLayout::Lyft(layout) = &settings.key_layout {
            if let Some(per_second) = &layout.per_second {
                let second = RedisSettings {
                    target: per_second.target.clone(),
                    username: per_second.username.clone(),
                    password: per_second.password.clone(),
                    tls: per_second.tls.clone(),
                    ..settings.clone()
                };
                let redis = connect::open(&second, " (per-second limits)").await?;
                backend = backend.with_per_second_redis_named(redis, target_name(&second));
            }
        }
        Ok(backend)
    }

    /// Where Lyft's layout counts limits of unit `second` (its
    /// `REDIS_PERSECOND`): [`connect`](Self::connect) connects the
    /// settings' `per_second` Redis; a backend made
    /// [`with_redis`](Self::with_redis) counts them on its one Redis
    /// unless given one here. Without Lyft's layout, nothing.
    pub fn with_per_second_redis(self, redis: Redis) -> RedisBackend {
        self.with_per_second_redis_named(redis, "the per-second Redis".to_owned())
    }

    fn with_per_second_redis_named(mut self, redis: Redis, name: String) -> RedisBackend {
        if let Some(lyft) = &mut self.lyft {
            let watch = Watch::new(name, meanwhile(&self.settings));
            if let Some(probe) = watch.start_probe(redis.clone(), self.settings.response_timeout) {
                self._probes.push(probe);
            }
            self.watches.push(watch);
            lyft.set_per_second(redis);
        }
        self
    }

    /// The clock of Lyft's layout, read as UNIX time for its keys' window
    /// starts: a manual or custom clock as given (tests), any other as the
    /// system's wall clock. By default, the system's wall clock. Without
    /// Lyft's layout, nothing (tollgate's scripts read Redis's `TIME`).
    pub fn with_clock(mut self, clock: &ClockSource) -> RedisBackend {
        if let Some(lyft) = &mut self.lyft {
            lyft.set_clock(crate::backend::wall_clock(clock));
        }
        self
    }

    /// A backend on an existing connection; on a tokio runtime, its probe
    /// starts (see [`watch`]).
    pub fn with_redis(redis: Redis, settings: RedisSettings) -> RedisBackend {
        let watch = Watch::new(target_name(&settings), meanwhile(&settings));
        let probes = watch
            .start_probe(redis.clone(), settings.response_timeout)
            .into_iter()
            .collect();
        RedisBackend {
            watches: vec![watch],
            _probes: probes,
            batcher: Batcher::new(&redis),
            redis,
            limiters: Arc::new(ArcSwap::from_pointee(HashMap::new())),
            installing: Mutex::new(()),
            retired: Arc::new(Mutex::new(HashMap::new())),
            lyft: match &settings.key_layout {
                KeyLayout::Tollgate => None,
                KeyLayout::Lyft(layout) => Some(lyft::Lyft::new(
                    LyftLayout::clone(layout),
                    tollgate::SystemClock::new().into(),
                )),
            },
            settings,
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
        self.builder(&rule.id, algorithm, leases)?
            .build()
            .map_err(|error| error.to_string())
    }

    /// The builder of [`build`](Self::build), before `build()`.
    fn builder(
        &self,
        id: &str,
        algorithm: &BuiltAlgorithm,
        leases: bool,
    ) -> Result<RedisLimiterBuilder, String> {
        let limits = limits_of(algorithm)?;
        let s = &self.settings;
        let mut builder = RedisLimiter::builder(self.redis.clone(), id)
            .prefix(s.key_prefix.clone())
            .failure_policy(s.failure_policy)
            .deadline(s.deadline)
            .breaker(s.breaker)
            .deny_cache(s.deny_cache)
            .durability(s.durability);
        for limit in limits {
            builder = builder.limit(limit);
        }
        if let Some(config) = s.leases.filter(|_| leases) {
            builder = builder.leases(config);
        }
        Ok(builder)
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

    /// The limiter of `rule` whose limits become `algorithm`, after
    /// `previous` (see the module docs): each limit carries its keys' state
    /// from the previous limit it replaces where `tollgate-redis` can, and
    /// the previous limits it cannot carry stay in force beside the new
    /// ones (a bridge) until their keys hold nothing that still counts.
    fn successor(
        &self,
        rule: &Rule,
        algorithm: &BuiltAlgorithm,
        previous: Option<&BuiltAlgorithm>,
    ) -> Result<Installed, String> {
        let Some(previous) = previous else {
            return Ok(Installed {
                algorithm: algorithm.clone(),
                limiter: self.build(rule, algorithm, true)?,
                bridge_until: None,
            });
        };
        let (old, new) = (limits_of(previous)?, limits_of(algorithm)?);
        let mut pairs = carry_pairs(&old, &new);
        let mut bridged: Vec<Limit> = Vec::new();
        for (from, to) in pairs.iter().zip(&new) {
            if from != to && !carried(from, to) && !new.contains(from) && !bridged.contains(from) {
                bridged.push(from.clone());
            }
        }
        let horizon = bridged
            .iter()
            .map(Limit::horizon)
            .max()
            .map(|longest| longest.saturating_add(BRIDGE_SLACK));
        let mut builder = self.builder(&rule.id, algorithm, true)?;
        for limit in &bridged {
            // Paired with itself: its own keys, nothing to convert.
            builder = builder.limit(limit.clone());
            pairs.push(limit.clone());
        }
        let limiter = builder
            .carry_from(pairs, Carry::Keep)
            .build()
            .map_err(|error| error.to_string())?;
        Ok(Installed {
            algorithm: algorithm.clone(),
            limiter,
            bridge_until: horizon.and_then(|horizon| Instant::now().checked_add(horizon)),
        })
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

/// What the log lines say becomes of a decision Redis does not take.
fn meanwhile(settings: &RedisSettings) -> &'static str {
    if settings.fail_calls {
        return "calls whose decisions need it fail (failure_policy: error)";
    }
    match settings.failure_policy {
        tollgate_redis::FailurePolicy::FailOpen => {
            "its decisions admit (failure_policy: fail_open)"
        }
        tollgate_redis::FailurePolicy::FailClosed => {
            "its decisions deny (failure_policy: fail_closed)"
        }
        _ => "its decisions take a local share of each quota (failure_policy: local)",
    }
}

/// One decision, batched with the concurrent ones (see the module docs).
async fn decide_one(
    batcher: &Batcher,
    limiter: &RedisLimiter,
    key: &str,
    cost: u64,
) -> (Decision, Source) {
    let outcome = if cost == 0 {
        batcher.peek_outcome(limiter, key, 0).await
    } else {
        batcher.check_outcome(limiter, key, cost).await
    };
    match outcome {
        Ok(outcome) => (outcome.decision, outcome.source),
        // The server checks costs first; only a reload that lowered the
        // capacity in between lands here: a denial, never to fit.
        Err(error) => (
            Decision::from_parts(false, error.capacity, 0, Duration::MAX, Duration::ZERO),
            Source::Redis,
        ),
    }
}

/// A budget's charge (see [`crate::config::budget`]): recorded whether or
/// not it fits, by `tollgate_redis`'s atomic charge. A limiter that cannot
/// hold a debt (never, for a rule the configuration accepted as a budget)
/// is answered by a denial, never by an admission.
async fn charge_one(limiter: &RedisLimiter, key: &str, cost: u64) -> (Decision, Source) {
    match limiter.charge_outcome(key, cost).await {
        Ok(outcome) => (outcome.decision, outcome.source),
        Err(_) => (
            Decision::from_parts(false, 0, 0, Duration::MAX, Duration::ZERO),
            Source::Redis,
        ),
    }
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
        let mut changed = Vec::new();
        for rule in rules.rules() {
            let Some(limits) = &rule.limits else { continue };
            let installed = match old.get(&rule.id) {
                Some(installed) if installed.algorithm == limits.algorithm => Arc::clone(installed),
                previous => {
                    let installed = self
                        .successor(rule, &limits.algorithm, previous.map(|p| &p.algorithm))
                        .map_err(|error| BackendError::new(format!("rule {}: {error}", rule.id)))?;
                    if previous.is_some() {
                        changed.push(Arc::clone(&rule.id));
                    }
                    Arc::new(installed)
                }
            };
            new.insert(Arc::clone(&rule.id), installed);
        }
        self.limiters.store(Arc::new(new));
        let current = self.limiters.load_full();
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

    fn sweep(&self) {
        // Bridges past their end become limiters of the rule's limits alone.
        let now = Instant::now();
        if !self
            .limiters
            .load()
            .values()
            .any(|i| i.bridge_until.is_some_and(|end| end <= now))
        {
            return;
        }
        let _one_at_a_time = self
            .installing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let old = self.limiters.load_full();
        let mut new = HashMap::clone(&old);
        let mut ended = Vec::new();
        for (id, installed) in old.iter() {
            if installed.bridge_until.is_none_or(|end| end > now) {
                continue;
            }
            let built = self
                .builder(id, &installed.algorithm, true)
                .and_then(|builder| builder.build().map_err(|error| error.to_string()));
            match built {
                Ok(limiter) => {
                    new.insert(
                        Arc::clone(id),
                        Arc::new(Installed {
                            algorithm: installed.algorithm.clone(),
                            limiter,
                            bridge_until: None,
                        }),
                    );
                    ended.push(Arc::clone(id));
                }
                // It was built once with these limits; if it cannot be
                // again, the bridge (stricter) stays in force.
                Err(error) => tracing::warn!(rule = %id, %error, "cannot end a bridge"),
            }
        }
        self.limiters.store(Arc::new(new));
        for id in &ended {
            if let Some(installed) = old.get(id) {
                self.retire(id, installed.limiter.clone());
            }
        }
    }

    fn decide<'a>(&'a self, hits: &'a [Hit<'a>]) -> DecideFuture<'a> {
        let limiters = self.limiters.load_full();
        Box::pin(async move {
            // Lyft's layout first sorts out its hits (decided together:
            // `stop_increment_when_over_limit` looks at them all).
            let mut lyft_hits = Vec::new();
            let mut slots = Vec::with_capacity(hits.len());
            for hit in hits {
                let lyft_rule = self.lyft.as_ref().and_then(|_| lyft::lyft_rule(hit.rule));
                slots.push(match lyft_rule {
                    None => Slot::Tollgate,
                    Some(rule) => match self.lyft_limiter(&limiters, hit.rule) {
                        Some(limiter) => {
                            lyft_hits.push(lyft::LyftHit { hit, rule, limiter });
                            Slot::Lyft
                        }
                        // Never "no limit" for a limit Redis cannot hold.
                        None => Slot::Refused(lyft::refused(rule.limit())),
                    },
                });
            }
            let in_lyft = async {
                match &self.lyft {
                    Some(lyft) if !lyft_hits.is_empty() => {
                        lyft.decide(&self.redis, &lyft_hits).await
                    }
                    _ => Vec::new(),
                }
            };
            let in_tollgate = join_all(hits.iter().zip(&slots).map(|(hit, slot)| {
                let limiters = &limiters;
                async move {
                    if !matches!(slot, Slot::Tollgate) {
                        return None;
                    }
                    let charge = hit.rule.budget.is_some() && hit.cost > 0;
                    Some(match (limiters.get(&hit.rule.id), &hit.rule.limits) {
                        (Some(installed), _) if charge => {
                            charge_one(&installed.limiter, hit.key, hit.cost).await
                        }
                        (Some(installed), _) => {
                            decide_one(&self.batcher, &installed.limiter, hit.key, hit.cost).await
                        }
                        // A `limit` override, or raced a reload that removed
                        // the rule: decided by a limiter of its own, on the
                        // rule's keys (which name the limits).
                        (None, Some(limits)) => {
                            match self.build(hit.rule, &limits.algorithm, false) {
                                Ok(limiter) if charge => {
                                    charge_one(&limiter, hit.key, hit.cost).await
                                }
                                Ok(limiter) => {
                                    decide_one(&self.batcher, &limiter, hit.key, hit.cost).await
                                }
                                // Never "no limit" for a limit Redis cannot hold.
                                Err(_) => (
                                    Decision::from_parts(
                                        false,
                                        limits.algorithm.capacity(),
                                        0,
                                        Duration::MAX,
                                        Duration::ZERO,
                                    ),
                                    Source::Redis,
                                ),
                            }
                        }
                        // Unlimited rules never reach a backend.
                        (None, None) => (unlimited(), Source::Redis),
                    })
                }
            }));
            let (in_lyft, in_tollgate) = futures_util::future::join(in_lyft, in_tollgate).await;
            let mut in_lyft = in_lyft.into_iter();
            let mut failed = None;
            let mut decisions = Vec::with_capacity(hits.len());
            for (slot, tollgate) in slots.into_iter().zip(in_tollgate) {
                let (decision, source, watch) = match slot {
                    Slot::Tollgate => match tollgate {
                        Some((decision, source)) => (decision, source, 0),
                        None => (lyft::refused(0), Source::Redis, 0),
                    },
                    Slot::Lyft => match in_lyft.next() {
                        Some(decided) => (decided.decision, decided.source, decided.redis),
                        // Every slot holds its decision; a missing one is refused.
                        None => (lyft::refused(0), Source::Redis, 0),
                    },
                    Slot::Refused(decision) => (decision, Source::Redis, 0),
                };
                if let Some(watch) = self.watches.get(watch).or(self.watches.first()) {
                    watch.outcome(source);
                }
                if let Source::Policy(fault) = source {
                    failed.get_or_insert((fault, watch));
                }
                decisions.push(decision);
            }
            match failed {
                // Lyft's behaviour: the call fails, the caller's setting
                // (Envoy's `failure_mode_deny`) decides.
                Some((fault, watch)) if self.settings.fail_calls => {
                    let state = self.watches.get(watch).map(Watch::state);
                    let last = state
                        .and_then(|state| state.last_error)
                        .map(|error| format!(" (last error: {error})"))
                        .unwrap_or_default();
                    Err(BackendError::new(format!(
                        "Redis did not decide ({}){last}",
                        watch::FAULTS[watch::fault_index(fault)]
                    )))
                }
                _ => Ok(decisions),
            }
        })
    }

    fn counts_refused(&self, rule: &Rule) -> bool {
        self.lyft.as_ref().is_some_and(lyft::Lyft::counts_refused)
            && lyft::lyft_rule(rule).is_some()
    }

    fn register_metrics(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(RedisMetrics {
            limiters: Arc::clone(&self.limiters),
            retired: Arc::clone(&self.retired),
            watches: self.watches.clone(),
        }));
    }

    fn control<'a>(&'a self, rule: &'a Rule, key: &'a str, control: Control) -> ControlFuture<'a> {
        if self.lyft.is_some() && lyft::lyft_rule(rule).is_some() {
            // Lyft's keys hold a bare count (see the `lyft` module).
            return Box::pin(std::future::ready(Err(ControlError::Unsupported(
                control.name(),
            ))));
        }
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
        let states: Vec<watch::StoreState> = self.watches.iter().map(Watch::state).collect();
        let down = states.iter().find(|state| !state.up);
        let store = StoreHealth {
            up: down.is_none(),
            last_error: down.and_then(|state| state.last_error.clone()),
            down_seconds: down.and_then(|state| state.down_for).map(|d| d.as_secs()),
            health_check: self.settings.health_check,
            faults: states.iter().flat_map(|state| state.faults).sum(),
        };
        BackendHealth {
            kind: "redis",
            store: Some(store),
            policy: Some(PolicyTotals {
                store: t.redis + t.deny_cache + t.lease,
                timeout: t.timeout,
                error: t.error,
                breaker_open: t.breaker_open,
                overloaded: t.overloaded,
                unreplicated: t.unreplicated,
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

/// Who decides one hit of a request.
enum Slot {
    /// tollgate's layout, on the rule's limiter.
    Tollgate,
    /// Lyft's layout (the next of its decisions, in order).
    Lyft,
    /// Refused before asking.
    Refused(Decision),
}

impl RedisBackend {
    /// The limiter whose policy, breaker, deadline and stats a Lyft-layout
    /// hit of `rule` goes through: the installed one, or (an override, a
    /// rule a reload removed) one of its own; `None` if none can be built.
    fn lyft_limiter(
        &self,
        limiters: &HashMap<Arc<str>, Arc<Installed>>,
        rule: &Rule,
    ) -> Option<RedisLimiter> {
        match limiters.get(&rule.id) {
            Some(installed) => Some(installed.limiter.clone()),
            None => {
                let limits = rule.limits.as_ref()?;
                self.build(rule, &limits.algorithm, false).ok()
            }
        }
    }
}

fn unlimited() -> Decision {
    Decision::from_parts(true, u64::MAX, u64::MAX, Duration::ZERO, Duration::ZERO)
}
