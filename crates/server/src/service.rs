//! The decision both APIs share: validate, match, decide, count.
//!
//! # Model
//!
//! Each descriptor of a request is matched on its own ([`crate::rules`]),
//! decided by the backend and answered in request order; the overall answer is
//! OVER_LIMIT if any descriptor is. The semantics are envoyproxy/ratelimit's,
//! with its choices written down:
//!
//! - no rule: OK with no limit; `unlimited`: OK, nothing counted;
//! - descriptors are independent (one over its limit does not undo the
//!   others, as envoyproxy/ratelimit increments every matched key);
//! - `shadow_mode` decides and counts but answers OK; a cost of 0 only looks;
//! - `replaces`: a rule another matched rule replaces is answered OK with no
//!   limit, nothing counted;
//! - `concurrency:` rules take a lease that only its TTL ends
//!   ([`crate::concurrency`]);
//! - under `budget:` ([`crate::config::budget`]) a cost of 0 looks and a cost
//!   of 1 or more is a charge recorded whether or not it fits, clamped at
//!   [`crate::config::budget::MAX_CHARGE_PERIODS`] times the capacity;
//! - a descriptor's `limit` (Envoy's dynamic limit) replaces the file's rule
//!   as a fixed window in a rule named `domain.key1.key2|N/unit`, but the
//!   file rule's deny list and penalties still refuse the key.
//!
//! # Guarantee: a bad descriptor never fails the call
//!
//! Envoy's default (`failure_mode_deny: false`) lets a request through when
//! the call fails, so a failed call would be an "allow" for every descriptor
//! in it. Only what Envoy's own configuration sets fails the call with
//! `INVALID_ARGUMENT` / 400 (an empty or oversize domain, no descriptors, more
//! than `max_descriptors`). Everything a client can shape (entries, keys,
//! values, a cost above the rule's capacity, an override of 0 or `UNKNOWN`
//! unit) is answered **OVER_LIMIT** per descriptor ([`Status::Refused`]),
//! nothing counted for it, the others decided normally: it can never admit
//! more than a valid request would.
//!
//! # Parameters
//!
//! From the file's `server:` section ([`crate::config::ServerSettings`]):
//! `max_descriptors` 64 per request, `max_entries` 32 per descriptor,
//! `max_key_bytes` 1,024 for a domain, key or value.
//!
//! Every case in full (oversized costs counted as envoyproxy/ratelimit
//! counts a `hits_addend` above the limit, the block list, budgets with Envoy
//! AI Gateway's flow, overrides and lists): `crates/server/docs/apis.md`,
//! "Inside the server".

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tollgate::Decision;

use crate::backend::{Backend, BackendError, Hit};
use crate::concurrency::Leases;
use std::fmt::Write as _;

use crate::config::budget::BudgetConfig;
use crate::config::{AlgorithmKind, Limits, QuotaConfig, ServerSettings};
use crate::metrics::{Api, Metrics, Refusal, RuleCounters};
pub use crate::request::{CheckRequest, Descriptor, LimitOverride, Outcome, Status};
use crate::rules::{Rule, RuleSet, bucket_key};
use crate::status::StatusBoard;
use crate::traces::{Ended, Traces};

/// Why a blocked rule's descriptor is OVER_LIMIT.
const BLOCKED: &str = "the rule admits nothing (requests_per_unit: 0)";

/// What to do with one descriptor, decided before anything is counted.
enum Plan {
    NoRule,
    Unlimited(Arc<Rule>),
    Limited {
        rule: Arc<Rule>,
        key: String,
        cost: u64,
        /// envoyproxy/ratelimit's stat key parts from the request's values
        /// (`detailed_metric`, `value_to_metric`).
        metric: Option<Vec<String>>,
        /// For a `limit` override: the file rule the descriptor matches and
        /// its bucket, whose deny list and penalties still apply (module
        /// docs, "Limit overrides").
        controls: Option<(Arc<Rule>, String)>,
    },
    /// Bad input: OVER_LIMIT, counted as a refusal, not under a rule.
    Refused {
        rule: Option<Arc<Rule>>,
        quota: Option<QuotaConfig>,
        reason: String,
    },
    /// A cost above the rule's capacity: OVER_LIMIT, its bucket only
    /// looked at (cost 0), so that the denial is counted under the rule
    /// from the window's count as envoyproxy/ratelimit counts it; where
    /// the backend counts refused hits ([`Backend::counts_refused`]),
    /// counted with its cost, as envoyproxy/ratelimit's `INCRBY`.
    Oversized {
        rule: Arc<Rule>,
        key: String,
        cost: u64,
        metric: Option<Vec<String>>,
        quota: Option<QuotaConfig>,
        reason: String,
    },
    /// A rule that admits nothing (`requests_per_unit: 0`): OVER_LIMIT,
    /// its denial counted under the rule.
    Blocked {
        rule: Arc<Rule>,
        quota: QuotaConfig,
        cost: u64,
        metric: Option<Vec<String>>,
    },
}

impl Plan {
    /// The rule matched, if any.
    fn rule(&self) -> Option<&Arc<Rule>> {
        match self {
            Plan::NoRule => None,
            Plan::Unlimited(rule)
            | Plan::Limited { rule, .. }
            | Plan::Oversized { rule, .. }
            | Plan::Blocked { rule, .. } => Some(rule),
            Plan::Refused { rule, .. } => rule.as_ref(),
        }
    }
}

/// Why a request was not decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckError {
    /// Bad input: 400 / `INVALID_ARGUMENT`. Nothing was changed.
    Invalid(String),
    /// The backend failed: 503 / `UNAVAILABLE`.
    Backend(BackendError),
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckError::Invalid(message) => f.write_str(message),
            CheckError::Backend(error) => write!(f, "{error}"),
        }
    }
}

/// The limits on a request's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// Most descriptors per request.
    pub max_descriptors: usize,
    /// Most entries per descriptor.
    pub max_entries: usize,
    /// Longest domain, key or value, in bytes.
    pub max_key_bytes: usize,
}

impl RequestLimits {
    pub(crate) fn of(settings: &ServerSettings) -> RequestLimits {
        RequestLimits {
            max_descriptors: settings.max_descriptors,
            max_entries: settings.max_entries,
            max_key_bytes: settings.max_key_bytes,
        }
    }
}

/// The rules, the backend and the metrics: what both APIs call.
pub struct Service {
    rules: ArcSwap<RuleSet>,
    /// Each rule's counters, swapped with the rules (a rule racing a reload
    /// falls back to a lookup by name).
    counters: ArcSwap<HashMap<Arc<str>, RuleCounters>>,
    backend: Arc<dyn Backend>,
    metrics: Arc<Metrics>,
    /// What the status page shows ([`crate::status`]).
    status: StatusBoard,
    /// Serialises rule changes (reloads, the admin API).
    changing: Mutex<()>,
    limits: RequestLimits,
    in_flight: Arc<Semaphore>,
    /// Concurrency rules' leases ([`crate::concurrency`]).
    leases: Arc<Leases>,
    /// A span per decision, when traces are on ([`crate::traces`]).
    traces: Option<Arc<Traces>>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("rules", &self.rules.load().rules().len())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Service {
    /// A service deciding with `backend` under `rules`.
    ///
    /// # Errors
    ///
    /// The backend cannot run one of the rules.
    pub fn new(
        rules: RuleSet,
        backend: Arc<dyn Backend>,
        metrics: Arc<Metrics>,
        limits: RequestLimits,
        max_concurrent: usize,
    ) -> Result<Service, BackendError> {
        backend.install(&rules)?;
        Ok(Service {
            counters: ArcSwap::from_pointee(counters(&metrics, &rules)),
            rules: ArcSwap::from_pointee(rules),
            backend,
            metrics,
            status: StatusBoard::new(),
            changing: Mutex::new(()),
            limits,
            in_flight: Arc::new(Semaphore::new(max_concurrent)),
            leases: Arc::new(Leases::memory(tollgate::ClockSource::default())),
            traces: None,
        })
    }

    /// Where concurrency rules keep their leases. By default, in memory
    /// on the monotonic clock.
    pub fn with_leases(mut self, leases: Arc<Leases>) -> Service {
        self.leases = leases;
        self
    }

    /// The limits on a request's shape.
    pub fn request_limits(&self) -> RequestLimits {
        self.limits
    }

    /// The concurrency rules' leases.
    pub fn leases(&self) -> &Arc<Leases> {
        &self.leases
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules.load_full()
    }

    /// Puts `rules` in force, atomically: a request sees the old rules or
    /// the new, never a mix.
    ///
    /// # Errors
    ///
    /// The backend cannot run one of the rules: the old rules stay.
    pub fn replace_rules(&self, rules: RuleSet) -> Result<(), BackendError> {
        let _one_at_a_time = self.changing.lock().unwrap_or_else(PoisonError::into_inner);
        self.install(rules)
    }

    /// Puts in force what `change` makes of the rules in force, as
    /// [`replace_rules`](Self::replace_rules) does: one change at a time
    /// (reloads included), so that a change made from the rules in force
    /// never undoes another (the admin API's, [`crate::http::admin`]).
    ///
    /// # Errors
    ///
    /// `change` or the backend refuses: the rules in force stay.
    pub fn change_rules(
        &self,
        change: impl FnOnce(&RuleSet) -> Result<RuleSet, BackendError>,
    ) -> Result<(), BackendError> {
        let _one_at_a_time = self.changing.lock().unwrap_or_else(PoisonError::into_inner);
        let rules = change(&self.rules.load())?;
        self.install(rules)
    }

    fn install(&self, rules: RuleSet) -> Result<(), BackendError> {
        self.backend.install(&rules)?;
        self.counters
            .store(Arc::new(counters(&self.metrics, &rules)));
        self.rules.store(Arc::new(rules));
        Ok(())
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Records a span per decision on `traces` (`TRACING_ENABLED`, see
    /// [`crate::traces`]). By default, none.
    #[must_use]
    pub fn with_traces(mut self, traces: Arc<Traces>) -> Service {
        self.traces = Some(traces);
        self
    }

    /// The tracer of the decisions, if any.
    pub fn traces(&self) -> Option<&Arc<Traces>> {
        self.traces.as_ref()
    }

    /// The metrics, shared (the StatsD sink holds them).
    pub fn metrics_arc(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// What the status page shows.
    pub fn status(&self) -> &StatusBoard {
        &self.status
    }

    /// Takes the status page's sample of this second ([`StatusBoard::sample`]).
    pub fn sample_status(&self) {
        self.status
            .sample(&self.rules.load(), &self.metrics, &*self.backend);
    }

    /// A slot for one request, or `None` when the server is at its limit
    /// (the caller answers 503 / `RESOURCE_EXHAUSTED` at once).
    pub fn admit(&self, api: Api) -> Option<OwnedSemaphorePermit> {
        let permit = Arc::clone(&self.in_flight).try_acquire_owned().ok();
        if permit.is_none() {
            self.metrics.refused(api, Refusal::Overloaded);
        }
        permit
    }

    /// Decides `request`.
    ///
    /// # Errors
    ///
    /// [`CheckError::Invalid`] for bad input (nothing changed),
    /// [`CheckError::Backend`] if the backend failed.
    pub async fn check(&self, api: Api, request: &CheckRequest) -> Result<Outcome, CheckError> {
        let started = Instant::now();
        let result = self.decide(api, request).await;
        if let Some(traces) = &self.traces {
            let ended = match &result {
                Ok(outcome) => Ended::Decided {
                    over_limit: outcome.is_over_limit(),
                },
                Err(CheckError::Invalid(_)) => Ended::Invalid,
                Err(CheckError::Backend(_)) => Ended::BackendError,
            };
            traces.decision(
                api,
                &request.domain,
                request.descriptors.len(),
                started.elapsed(),
                ended,
            );
        }
        match &result {
            Ok(outcome) => {
                self.metrics.latency(api, started.elapsed());
                tracing::debug!(
                    ?api,
                    domain = %request.domain,
                    descriptors = request.descriptors.len(),
                    over_limit = outcome.is_over_limit(),
                    "decided"
                );
            }
            Err(CheckError::Invalid(_)) => self.metrics.refused(api, Refusal::Invalid),
            Err(CheckError::Backend(_)) => self.metrics.backend_error(),
        }
        result
    }

    async fn decide(&self, api: Api, request: &CheckRequest) -> Result<Outcome, CheckError> {
        self.validate_call(request)?;
        let rules = self.rules.load_full();
        // Plan every descriptor before deciding any.
        let plans: Vec<Plan> = request
            .descriptors
            .iter()
            .enumerate()
            .map(|(i, descriptor)| {
                let plan = self.plan(&rules, &request.domain, request.cost, descriptor);
                if let Plan::Refused { reason, .. } | Plan::Oversized { reason, .. } = &plan {
                    self.metrics.refused(api, Refusal::InvalidDescriptor);
                    tracing::debug!(?api, domain = %request.domain, "descriptors[{i}]: {reason}: OVER_LIMIT");
                }
                plan
            })
            .collect();
        let plans = drop_replaced(plans);
        // A limited descriptor's bucket, then (for a `limit` override) its
        // file rule's bucket at cost 0, which only looks: denied only by a
        // deny list or a penalty. Both go in the one batch.
        let hits: Vec<Hit<'_>> = plans
            .iter()
            .flat_map(|plan| match plan {
                Plan::Limited {
                    rule,
                    key,
                    cost,
                    controls,
                    ..
                } => {
                    let decided = Hit {
                        rule,
                        key,
                        cost: *cost,
                    };
                    let looked = controls
                        .as_ref()
                        .map(|(rule, key)| Hit { rule, key, cost: 0 });
                    [Some(decided), looked]
                }
                // Looked at (cost 0), or counted where the backend counts
                // refused hits as envoyproxy/ratelimit does.
                Plan::Oversized {
                    rule, key, cost, ..
                } => {
                    let cost = if self.backend.counts_refused(rule) {
                        *cost
                    } else {
                        0
                    };
                    [Some(Hit { rule, key, cost }), None]
                }
                _ => [None, None],
            })
            .flatten()
            .collect();
        let decisions = if hits.is_empty() {
            Vec::new()
        } else {
            let started = Instant::now();
            let decisions = self.backend.decide(&hits).await;
            self.status.backend_latency(started.elapsed());
            decisions.map_err(CheckError::Backend)?
        };
        if decisions.len() != hits.len() {
            return Err(CheckError::Backend(BackendError::new(format!(
                "{} decisions for {} buckets",
                decisions.len(),
                hits.len()
            ))));
        }
        drop(hits);
        let mut decisions = decisions.into_iter();
        let counters = self.counters.load();
        let mut statuses = Vec::with_capacity(plans.len());
        for plan in plans {
            statuses.push(match plan {
                Plan::NoRule => Status::NoRule,
                Plan::Unlimited(rule) => Status::Unlimited { rule },
                Plan::Refused {
                    rule,
                    quota,
                    reason,
                } => Status::Refused {
                    rule,
                    quota,
                    reason,
                },
                Plan::Oversized {
                    rule,
                    cost,
                    metric,
                    quota,
                    reason,
                    ..
                } => {
                    let Some(looked) = decisions.next() else {
                        return Err(CheckError::Backend(BackendError::new("too few decisions")));
                    };
                    // The hits over the limit, from the count the look
                    // found (envoyproxy/ratelimit's base_limiter: 4 on an
                    // empty 3/min counts 4 hits, 1 over, 1 near).
                    let denial = Decision::from_parts(
                        false,
                        looked.limit(),
                        looked.remaining(),
                        looked.retry_after(),
                        looked.reset_after(),
                    );
                    self.count(&counters, &rule, cost, &denial, metric);
                    Status::Refused {
                        rule: Some(rule),
                        quota,
                        reason,
                    }
                }
                Plan::Blocked {
                    rule,
                    quota,
                    cost,
                    metric,
                } => {
                    // Counted as the denial it is (a former bug: a
                    // blocked rule's denials were counted nowhere).
                    let denial = Decision::from_parts(false, 0, 0, Duration::MAX, Duration::ZERO);
                    self.count(&counters, &rule, cost, &denial, metric);
                    Status::Refused {
                        rule: Some(rule),
                        quota: Some(quota),
                        reason: BLOCKED.into(),
                    }
                }
                Plan::Limited {
                    rule,
                    cost,
                    metric,
                    key,
                    controls,
                } => {
                    let Some(mut decision) = decisions.next() else {
                        return Err(CheckError::Backend(BackendError::new("too few decisions")));
                    };
                    if controls.is_some() {
                        let Some(looked) = decisions.next() else {
                            return Err(CheckError::Backend(BackendError::new(
                                "too few decisions",
                            )));
                        };
                        // The file rule's deny list or penalty refuses what
                        // the override admitted.
                        if looked.is_denied() && decision.is_allowed() {
                            decision = looked;
                        }
                    }
                    self.count(&counters, &rule, cost, &decision, metric);
                    if decision.is_denied() {
                        self.status.denied(&rule.id, &key, cost, rule.shadow_mode);
                    }
                    let quota = rule.limits.as_ref().and_then(|limits| {
                        binding_quota(limits.algorithm.kind(), &limits.quotas, &decision)
                    });
                    match quota {
                        Some(quota) => Status::Decided {
                            rule,
                            decision,
                            quota,
                        },
                        // Limited rules have at least one quota (checked at load).
                        None => Status::Unlimited { rule },
                    }
                }
            });
        }
        crate::concurrency::take_slots(&self.leases, &rules, request, &mut statuses).await;
        Ok(Outcome { statuses })
    }

    /// Counts `decision` of `cost` under `rule` (and its detailed labels).
    fn count(
        &self,
        counters: &HashMap<Arc<str>, RuleCounters>,
        rule: &Arc<Rule>,
        cost: u64,
        decision: &Decision,
        metric: Option<Vec<String>>,
    ) {
        let fresh;
        let rule_counters = match counters.get(&rule.id) {
            Some(counters) => counters,
            None => {
                fresh = self.metrics.rule(rule);
                &fresh
            }
        };
        match metric {
            None => rule_counters.decided(cost, decision, rule.shadow_mode),
            Some(parts) => rule_counters.decided_detailed(
                cost,
                decision,
                rule.shadow_mode,
                &self.metrics.detailed(rule, &parts),
            ),
        }
    }

    /// What to do with one descriptor: never an error (see the module docs).
    fn plan(
        &self,
        rules: &RuleSet,
        domain: &str,
        request_cost: u64,
        descriptor: &Descriptor,
    ) -> Plan {
        let refused =
            |rule: Option<&Arc<Rule>>, quota: Option<QuotaConfig>, reason: String| Plan::Refused {
                rule: rule.cloned(),
                quota,
                reason,
            };
        if !rules.has_domain(domain) {
            // envoyproxy/ratelimit's GetLimit counts each descriptor of a
            // domain it has no configuration for.
            self.metrics.domain_not_found(domain);
        }
        if let Err(reason) = self.validate_entries(descriptor) {
            return refused(None, None, reason);
        }
        let entries = descriptor
            .entries
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()));
        let cost = descriptor.cost.unwrap_or(request_cost);
        let dynamic;
        let mut controls = None;
        let (rule, key) = match descriptor.limit {
            // envoyproxy/ratelimit looks the domain up first: a domain it
            // has no configuration for has no limit, override or not.
            Some(_) if !rules.has_domain(domain) => return Plan::NoRule,
            Some(limit) => match dynamic_rule(domain, descriptor, limit) {
                Ok(rule) => {
                    dynamic = rule;
                    controls = controlling_rule(rules, domain, descriptor);
                    (&dynamic, bucket_key(entries))
                }
                Err((quota, reason)) => return refused(None, quota, reason),
            },
            None => match rules.find_bucket(domain, entries) {
                None => return Plan::NoRule,
                Some(found) => found,
            },
        };
        let metric = || {
            rule.metric_parts(
                descriptor
                    .entries
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            )
        };
        if let Some(quota) = rule.blocked {
            return Plan::Blocked {
                rule: Arc::clone(rule),
                quota,
                cost,
                metric: metric(),
            };
        }
        let Some(limits) = &rule.limits else {
            return Plan::Unlimited(Arc::clone(rule));
        };
        let capacity = rule.capacity();
        if rule.budget.is_some() {
            // A budget's charge is recorded whatever it is (module docs,
            // "Budgets"), up to the cap of one charge.
            let charged = BudgetConfig::chargeable(capacity, cost);
            if charged < cost {
                tracing::warn!(rule = %rule.id, cost, charged, "a budget's charge above its cap is clamped");
            }
            return Plan::Limited {
                metric: metric(),
                rule: Arc::clone(rule),
                key,
                cost: charged,
                controls,
            };
        }
        if cost > capacity {
            let reason = format!(
                "a cost of {cost} can never be admitted under rule {} (at most {capacity} at once)",
                rule.id
            );
            return Plan::Oversized {
                metric: metric(),
                rule: Arc::clone(rule),
                key,
                cost,
                quota: limits.quotas.first().copied(),
                reason,
            };
        }
        Plan::Limited {
            metric: metric(),
            rule: Arc::clone(rule),
            key,
            cost,
            controls,
        }
    }

    /// The checks on the call itself: what Envoy's configuration sets, not
    /// a client (see the module docs).
    fn validate_call(&self, request: &CheckRequest) -> Result<(), CheckError> {
        let limits = &self.limits;
        let invalid = |message: String| Err(CheckError::Invalid(message));
        if request.domain.is_empty() {
            return invalid("domain: rate limit domain must not be empty".into());
        }
        if request.domain.len() > limits.max_key_bytes {
            return invalid(format!(
                "domain: longer than {} bytes",
                limits.max_key_bytes
            ));
        }
        if request.descriptors.is_empty() {
            return invalid("descriptors: rate limit descriptor list must not be empty".into());
        }
        if request.descriptors.len() > limits.max_descriptors {
            return invalid(format!(
                "descriptors: {} descriptors, at most {} allowed",
                request.descriptors.len(),
                limits.max_descriptors
            ));
        }
        Ok(())
    }

    /// The checks on one descriptor's entries.
    fn validate_entries(&self, descriptor: &Descriptor) -> Result<(), String> {
        let limits = &self.limits;
        if descriptor.entries.is_empty() {
            return Err("entries: must not be empty".into());
        }
        if descriptor.entries.len() > limits.max_entries {
            return Err(format!(
                "entries: {} entries, at most {} allowed",
                descriptor.entries.len(),
                limits.max_entries
            ));
        }
        for (j, (key, value)) in descriptor.entries.iter().enumerate() {
            if key.is_empty() {
                return Err(format!("entries[{j}].key: must not be empty"));
            }
            if key.len() > limits.max_key_bytes || value.len() > limits.max_key_bytes {
                return Err(format!(
                    "entries[{j}]: key or value longer than {} bytes",
                    limits.max_key_bytes
                ));
            }
        }
        Ok(())
    }
}

/// The rule a `limit` override stands for (see the module docs), or why
/// it cannot be decided (with the limit asked, when it has a unit).
fn dynamic_rule(
    domain: &str,
    descriptor: &Descriptor,
    limit: LimitOverride,
) -> Result<Arc<Rule>, (Option<QuotaConfig>, String)> {
    let Some(unit) = limit.unit else {
        return Err((None, "limit.unit: UNKNOWN is no unit".into()));
    };
    let quota = QuotaConfig {
        requests_per_unit: limit.requests_per_unit,
        period: unit.period(),
        unit: Some(unit),
        burst: None,
        slots: None,
        warmup: None,
    };
    if limit.requests_per_unit == 0 {
        return Err((
            Some(quota),
            "limit.requests_per_unit: 0 admits nothing".into(),
        ));
    }
    let limits = Limits::new(AlgorithmKind::FixedWindow, vec![quota])
        .map_err(|error| (Some(quota), format!("limit: {error}")))?;
    let mut id = domain.to_owned();
    for (key, _) in &descriptor.entries {
        id.push('.');
        id.push_str(key);
    }
    let _ = write!(id, "|{}/{}", limit.requests_per_unit, unit.name());
    Ok(Arc::new(Rule {
        id: id.into(),
        domain: domain.to_owned(),
        path: descriptor
            .entries
            .iter()
            .map(|(key, _)| (key.clone(), None))
            .collect(),
        name: None,
        shadow_mode: false,
        quota_mode: false,
        limits: Some(limits),
        blocked: None,
        dynamic: true,
        replaces: Vec::new(),
        metric_values: Vec::new(),
        // The file rule's concurrency limit still applies (see
        // `crate::concurrency`).
        concurrency: None,
        budget: None,
        metadata: None,
    }))
}

/// The file rule whose deny list and penalties a `limit` override's
/// descriptor still answers to, with its bucket: the rule the descriptor
/// matches without the override, if it has limits (only a limited rule has
/// lists and penalties) and is not in shadow mode (which never denies).
fn controlling_rule(
    rules: &RuleSet,
    domain: &str,
    descriptor: &Descriptor,
) -> Option<(Arc<Rule>, String)> {
    let entries = descriptor
        .entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()));
    let (rule, key) = rules.find_bucket(domain, entries)?;
    (rule.limits.is_some() && rule.blocked.is_none() && !rule.shadow_mode)
        .then(|| (Arc::clone(rule), key))
}

/// envoyproxy/ratelimit's `replaces`: every rule named by the `replaces` of
/// a rule matched in this request (limited, unlimited or blocked) is not
/// applied: its descriptor is answered as matching no rule (OK, nothing
/// counted).
fn drop_replaced(plans: Vec<Plan>) -> Vec<Plan> {
    let replaced: Vec<&str> = plans
        .iter()
        .filter_map(Plan::rule)
        .flat_map(|rule| rule.replaces.iter().map(String::as_str))
        .collect();
    if replaced.is_empty() {
        return plans;
    }
    let is_replaced = |plan: &Plan| {
        plan.rule()
            .and_then(|rule| rule.name.as_deref())
            .is_some_and(|name| replaced.contains(&name))
    };
    let keep: Vec<bool> = plans.iter().map(|plan| !is_replaced(plan)).collect();
    plans
        .into_iter()
        .zip(keep)
        .map(|(plan, keep)| if keep { plan } else { Plan::NoRule })
        .collect()
}

fn counters(metrics: &Metrics, rules: &RuleSet) -> HashMap<Arc<str>, RuleCounters> {
    rules
        .rules()
        .iter()
        .map(|rule| (Arc::clone(&rule.id), metrics.rule(rule)))
        .collect()
}

/// The quota that bound `decision`: the first whose capacity is the
/// decision's limit (the core's `AllOf` reports the binding limit's
/// capacity, not its index; two quotas of one capacity report the first).
pub fn binding_quota(
    kind: AlgorithmKind,
    quotas: &[QuotaConfig],
    decision: &Decision,
) -> Option<QuotaConfig> {
    let capacity = |q: &QuotaConfig| match kind {
        AlgorithmKind::Gcra => q.burst.unwrap_or(q.requests_per_unit),
        _ => q.requests_per_unit,
    };
    quotas
        .iter()
        .find(|q| capacity(q) == decision.limit())
        .or(quotas.first())
        .copied()
}
