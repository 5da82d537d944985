//! The decision both APIs share: validate, match, decide, count.
//!
//! # Semantics (envoyproxy/ratelimit's, with the choices written down)
//!
//! - Each descriptor is matched on its own ([`crate::rules`]) and answered
//!   in request order. No rule: OK with no limit. `unlimited`: OK, nothing
//!   counted. Otherwise its bucket is decided by the backend.
//! - Descriptors are decided independently: one over its limit does not
//!   undo the others (as envoyproxy/ratelimit, which increments every
//!   matched key). The overall answer is OVER_LIMIT if any is.
//! - `shadow_mode`: the bucket is decided and counted as usual, but a
//!   denial is answered OK (and counted in `rule_shadow_mode`).
//! - Costs: a cost of 0 only looks. A cost above what the rule can ever
//!   admit (its capacity: the burst for GCRA, the limit for windows) is bad
//!   input, refused before anything is decided.
//! - Bad input of any kind changes no state: everything is checked before
//!   the backend is asked.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tollgate::Decision;

use crate::backend::{Backend, BackendError, Hit};
use crate::config::{AlgorithmKind, QuotaConfig, ServerSettings};
use crate::metrics::{Api, Metrics, Refusal, RuleCounters};
use crate::rules::{Rule, RuleSet, bucket_key};

/// One descriptor of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// `(key, value)` entries, outermost first.
    pub entries: Vec<(String, String)>,
    /// This descriptor's cost; `None` takes the request's.
    pub cost: Option<u64>,
}

/// A request, as either API decodes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRequest {
    /// The domain.
    pub domain: String,
    /// The descriptors.
    pub descriptors: Vec<Descriptor>,
    /// The cost of descriptors that do not give their own.
    pub cost: u64,
}

/// The answer for one descriptor.
#[derive(Debug, Clone)]
pub enum Status {
    /// No rule matched: OK, no limit.
    NoRule,
    /// An `unlimited` rule matched: OK.
    Unlimited {
        /// The rule.
        rule: Arc<Rule>,
    },
    /// The bucket was decided.
    Decided {
        /// The rule.
        rule: Arc<Rule>,
        /// The backend's decision.
        decision: Decision,
        /// The quota that bound the decision (see [`binding_quota`]).
        quota: QuotaConfig,
    },
}

impl Status {
    /// Whether this descriptor is answered OVER_LIMIT (never in shadow mode).
    pub fn is_over_limit(&self) -> bool {
        match self {
            Status::Decided { rule, decision, .. } => decision.is_denied() && !rule.shadow_mode,
            _ => false,
        }
    }
}

/// What to do with one descriptor, decided before anything is counted.
enum Plan {
    NoRule,
    Unlimited(Arc<Rule>),
    Limited {
        rule: Arc<Rule>,
        key: String,
        cost: u64,
    },
}

/// The answer to a request.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// One status per descriptor, in request order.
    pub statuses: Vec<Status>,
}

impl Outcome {
    /// Whether any descriptor is over its limit.
    pub fn is_over_limit(&self) -> bool {
        self.statuses.iter().any(Status::is_over_limit)
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
    limits: RequestLimits,
    in_flight: Arc<Semaphore>,
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
            limits,
            in_flight: Arc::new(Semaphore::new(max_concurrent)),
        })
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

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
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
        let result = self.decide(request).await;
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

    async fn decide(&self, request: &CheckRequest) -> Result<Outcome, CheckError> {
        self.validate_shape(request)?;
        let rules = self.rules.load_full();
        // Match every descriptor and check every cost before deciding any.
        let mut plans = Vec::with_capacity(request.descriptors.len());
        for (i, descriptor) in request.descriptors.iter().enumerate() {
            let entries = descriptor
                .entries
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()));
            let cost = descriptor.cost.unwrap_or(request.cost);
            plans.push(match rules.find(&request.domain, entries.clone()) {
                None => Plan::NoRule,
                Some(rule) if rule.limits.is_none() => Plan::Unlimited(Arc::clone(rule)),
                Some(rule) => {
                    let capacity = rule.capacity();
                    if cost > capacity {
                        return Err(CheckError::Invalid(format!(
                            "descriptors[{i}]: a cost of {cost} can never be admitted under rule {} (at most {capacity} at once)",
                            rule.id
                        )));
                    }
                    Plan::Limited {
                        rule: Arc::clone(rule),
                        key: bucket_key(entries),
                        cost,
                    }
                }
            });
        }
        let hits: Vec<Hit<'_>> = plans
            .iter()
            .filter_map(|plan| match plan {
                Plan::Limited { rule, key, cost } => Some(Hit {
                    rule,
                    key,
                    cost: *cost,
                }),
                _ => None,
            })
            .collect();
        let decisions = if hits.is_empty() {
            Vec::new()
        } else {
            self.backend
                .decide(&hits)
                .await
                .map_err(CheckError::Backend)?
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
                Plan::Limited { rule, cost, .. } => {
                    let Some(decision) = decisions.next() else {
                        return Err(CheckError::Backend(BackendError::new("too few decisions")));
                    };
                    match counters.get(&rule.id) {
                        Some(counters) => counters.decided(cost, &decision, rule.shadow_mode),
                        None => {
                            self.metrics
                                .rule(&rule.id)
                                .decided(cost, &decision, rule.shadow_mode)
                        }
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
        Ok(Outcome { statuses })
    }

    fn validate_shape(&self, request: &CheckRequest) -> Result<(), CheckError> {
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
        for (i, descriptor) in request.descriptors.iter().enumerate() {
            if descriptor.entries.is_empty() {
                return invalid(format!("descriptors[{i}].entries: must not be empty"));
            }
            if descriptor.entries.len() > limits.max_entries {
                return invalid(format!(
                    "descriptors[{i}].entries: {} entries, at most {} allowed",
                    descriptor.entries.len(),
                    limits.max_entries
                ));
            }
            for (j, (key, value)) in descriptor.entries.iter().enumerate() {
                if key.is_empty() {
                    return invalid(format!(
                        "descriptors[{i}].entries[{j}].key: must not be empty"
                    ));
                }
                if key.len() > limits.max_key_bytes || value.len() > limits.max_key_bytes {
                    return invalid(format!(
                        "descriptors[{i}].entries[{j}]: key or value longer than {} bytes",
                        limits.max_key_bytes
                    ));
                }
            }
        }
        Ok(())
    }
}

fn counters(metrics: &Metrics, rules: &RuleSet) -> HashMap<Arc<str>, RuleCounters> {
    rules
        .rules()
        .iter()
        .map(|rule| (Arc::clone(&rule.id), metrics.rule(&rule.id)))
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
