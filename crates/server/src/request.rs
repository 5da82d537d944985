//! A rate-limit request and its answer, as both APIs (gRPC and HTTP)
//! decode and encode them and as the service, the concurrency leases and
//! the APIs share them: in their own module, so that those that read them
//! depend on it and not on each other.

use std::sync::Arc;

use tollgate::Decision;

use crate::config::{QuotaConfig, Unit};
use crate::rules::Rule;

/// One descriptor of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// `(key, value)` entries, outermost first.
    pub entries: Vec<(String, String)>,
    /// This descriptor's cost; `None` takes the request's.
    pub cost: Option<u64>,
    /// Envoy's `limit` override: decided under this limit instead of the
    /// rules' (see the module docs).
    pub limit: Option<LimitOverride>,
}

/// A limit a request asks for (Envoy's `RateLimitOverride`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitOverride {
    /// Requests per unit; 0 admits nothing.
    pub requests_per_unit: u64,
    /// The unit; `None` for Envoy's `UNKNOWN` (refused: OVER_LIMIT).
    pub unit: Option<Unit>,
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
        /// The quota that bound the decision (see [`binding_quota`](crate::service::binding_quota)).
        quota: QuotaConfig,
    },
    /// The descriptor cannot be decided as sent (see the module docs):
    /// OVER_LIMIT, nothing counted.
    Refused {
        /// The rule it matched, if it got that far.
        rule: Option<Arc<Rule>>,
        /// The limit it would have been decided under, if known.
        quota: Option<QuotaConfig>,
        /// Why, for logs and the HTTP API.
        reason: String,
    },
}

impl Status {
    /// Whether this descriptor is answered OVER_LIMIT (never in shadow mode).
    pub fn is_over_limit(&self) -> bool {
        match self {
            Status::Decided { rule, decision, .. } => decision.is_denied() && !rule.shadow_mode,
            Status::Refused { rule, .. } => !rule.as_ref().is_some_and(|rule| rule.shadow_mode),
            Status::NoRule | Status::Unlimited { .. } => false,
        }
    }
}

/// The answer to a request.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// One status per descriptor, in request order.
    pub statuses: Vec<Status>,
}

impl Status {
    /// Whether this descriptor was decided under a `quota_mode` rule.
    fn quota_mode(&self) -> bool {
        match self {
            Status::Decided { rule, .. } => rule.quota_mode,
            Status::Refused { rule, .. } => rule.as_ref().is_some_and(|rule| rule.quota_mode),
            Status::NoRule | Status::Unlimited { .. } => false,
        }
    }
}

impl Outcome {
    /// Whether the request is over the limit, as envoyproxy/ratelimit
    /// decides: a descriptor over its limit under a rule not in
    /// `quota_mode`, or every `quota_mode` descriptor over its limit (at
    /// least one).
    pub fn is_over_limit(&self) -> bool {
        let (mut quotas, mut quotas_over) = (0usize, 0usize);
        for status in &self.statuses {
            if status.quota_mode() {
                quotas += 1;
                quotas_over += usize::from(status.is_over_limit());
            } else if status.is_over_limit() {
                return true;
            }
        }
        quotas > 0 && quotas == quotas_over
    }
}
