//! The checked rules: what a file means once read and validated (domains,
//! descriptor trees, limits with their algorithm built by the core), the
//! types [`crate::rules`] and the backends are built from.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use tollgate::algorithm::any::AnyAlgorithm;
use tollgate::{AllOf, FixedWindow, Gcra, SlidingLog, SlidingWindow};

/// One domain's rules.
#[derive(Debug, Clone, PartialEq)]
pub struct DomainConfig {
    /// The domain requests name.
    pub domain: String,
    /// The top-level descriptors.
    pub descriptors: Vec<DescriptorConfig>,
    /// How a request forwarded by a reverse proxy becomes descriptors
    /// ([`super::actions`], [`crate::http::forward_auth`]); `None`: the domain
    /// is not served by the forward-auth endpoint.
    pub forward_auth: Option<std::sync::Arc<super::actions::ForwardAuthConfig>>,
}

/// One node of a domain's tree.
#[derive(Debug, Clone, PartialEq)]
pub struct DescriptorConfig {
    /// The entry's key.
    pub key: String,
    /// The entry's value; `None` matches any value, one bucket per value.
    pub value: Option<String>,
    /// The limit at this node, if any.
    pub limit: Option<LimitConfig>,
    /// The concurrency limit at this node, if any
    /// ([`super::concurrency`]).
    pub concurrency: Option<super::ConcurrencyConfig>,
    /// The limits are a budget of this unit, charged what was spent
    /// ([`super::budget`]); `None`: a gate.
    pub budget: Option<super::budget::BudgetConfig>,
    /// Decide and count, but always answer OK.
    pub shadow_mode: bool,
    /// envoyproxy/ratelimit's `quota_mode` (see [`crate::rules::Rule`]).
    pub quota_mode: bool,
    /// envoyproxy/ratelimit's `metadata`, as written: sent in the RLS
    /// answer's dynamic metadata when that is on ([`crate::grpc`]); no
    /// decision depends on it.
    pub metadata: Option<serde_yaml_ng::Value>,
    /// The names of the limits this node's limit replaces
    /// (envoyproxy/ratelimit's `replaces`): when both match descriptors of
    /// one request, the replaced limit is not applied.
    pub replaces: Vec<String>,
    /// envoyproxy/ratelimit's `share_threshold` (only on a value holding a
    /// `*`): every value matching the pattern counts in one bucket, named
    /// by the pattern, instead of one bucket per value.
    pub share_threshold: bool,
    /// envoyproxy/ratelimit's `detailed_metric`: this node's limit counts
    /// its envoyproxy/ratelimit metrics under the request's values.
    pub detailed_metric: bool,
    /// envoyproxy/ratelimit's `value_to_metric`: this entry's request value
    /// names the envoyproxy/ratelimit metrics of the limits at and under it.
    pub value_to_metric: bool,
    /// Deeper nodes.
    pub descriptors: Vec<DescriptorConfig>,
}

/// The limit of a node.
#[derive(Debug, Clone, PartialEq)]
pub enum LimitConfig {
    /// Never limited.
    Unlimited {
        /// The limit's name, reported in responses.
        name: Option<String>,
    },
    /// `requests_per_unit: 0`: every request over the limit
    /// (envoyproxy/ratelimit's way to block a value).
    Blocked {
        /// The limit's name, reported in responses.
        name: Option<String>,
        /// The quota as written (0 per unit).
        quota: QuotaConfig,
    },
    /// Limited by one or several quotas, all-or-nothing.
    Limited {
        /// The limit's name, reported in responses.
        name: Option<String>,
        /// The quotas and their algorithm.
        limits: Limits,
    },
}

/// The algorithms a rule can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlgorithmKind {
    /// GCRA / token bucket (the default).
    Gcra,
    /// Fixed window (envoyproxy/ratelimit's algorithm).
    FixedWindow,
    /// Sliding log: exact, for small limits.
    SlidingLog,
    /// Sliding window counter with `slots`.
    SlidingWindow,
    /// Fixed window aligned to UTC calendar units (`calendar:`).
    Calendar,
    /// Guava's warm-up (`warmup:`): a cold limit starts at
    /// `rate / cold_factor` and ramps to the rate.
    WarmUp,
    /// Several algorithms in one rule (never written in a file: each
    /// quota says its own).
    #[serde(skip)]
    Mixed,
}

impl AlgorithmKind {
    /// The name used in the file.
    pub fn name(self) -> &'static str {
        match self {
            AlgorithmKind::Gcra => "gcra",
            AlgorithmKind::FixedWindow => "fixed_window",
            AlgorithmKind::SlidingLog => "sliding_log",
            AlgorithmKind::SlidingWindow => "sliding_window",
            AlgorithmKind::Calendar => "calendar",
            AlgorithmKind::WarmUp => "warm_up",
            AlgorithmKind::Mixed => "mixed",
        }
    }
}

/// One quota as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaConfig {
    /// Requests per period.
    pub requests_per_unit: u64,
    /// The period.
    pub period: Duration,
    /// The envoy unit when the period is exactly one.
    pub unit: Option<Unit>,
    /// GCRA's burst.
    pub burst: Option<u64>,
    /// The sliding window's slots.
    pub slots: Option<u32>,
    /// The warm-up's parameters.
    pub warmup: Option<Warmup>,
}

/// `warmup: {period: 60s, cold_factor: 3}` of a warm-up quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Warmup {
    /// How long a cold limit takes to reach its rate at full use.
    pub period: Duration,
    /// A cold limit runs at `rate / cold_factor` (whole, ≥ 1; default 3).
    pub cold_factor: u32,
}

/// envoyproxy/ratelimit's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// 1 s.
    Second,
    /// 60 s.
    Minute,
    /// 3,600 s.
    Hour,
    /// 86,400 s.
    Day,
    /// 7 days.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// The unit named `text`, in any case (`second` … `year`).
    pub fn parse(text: &str) -> Option<Unit> {
        match text.to_ascii_lowercase().as_str() {
            "second" => Some(Unit::Second),
            "minute" => Some(Unit::Minute),
            "hour" => Some(Unit::Hour),
            "day" => Some(Unit::Day),
            "week" => Some(Unit::Week),
            "month" => Some(Unit::Month),
            "year" => Some(Unit::Year),
            _ => None,
        }
    }

    /// The unit's name in the file (lower case).
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// The unit's length.
    pub fn period(self) -> Duration {
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        })
    }

    /// The unit whose length is exactly `period`.
    pub fn of_period(period: Duration) -> Option<Unit> {
        [
            Unit::Second,
            Unit::Minute,
            Unit::Hour,
            Unit::Day,
            Unit::Week,
            Unit::Month,
            Unit::Year,
        ]
        .into_iter()
        .find(|unit| unit.period() == period)
    }
}

/// Validated quotas with their built algorithm (one algorithm type per
/// rule: see the module docs).
#[derive(Clone, PartialEq)]
pub struct Limits {
    /// The quotas, in file order.
    pub quotas: Vec<QuotaConfig>,
    /// The algorithm, built.
    pub algorithm: BuiltAlgorithm,
}

impl fmt::Debug for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limits")
            .field("algorithm", &self.algorithm.kind())
            .field("quotas", &self.quotas)
            .finish()
    }
}

/// A rule's algorithm, built and validated by the core.
#[derive(Clone, PartialEq)]
pub enum BuiltAlgorithm {
    /// GCRA limits.
    Gcra(AllOf<Gcra>),
    /// Fixed windows.
    FixedWindow(AllOf<FixedWindow>),
    /// Sliding logs.
    SlidingLog(AllOf<SlidingLog>),
    /// Sliding windows.
    SlidingWindow(AllOf<SlidingWindow>),
    /// Any algorithms, one per quota (calendar windows, or a rule mixing
    /// algorithms): the core's `AllOf<AnyAlgorithm>`.
    Mixed(AllOf<AnyAlgorithm>),
}

impl BuiltAlgorithm {
    /// Which algorithm.
    pub fn kind(&self) -> AlgorithmKind {
        match self {
            BuiltAlgorithm::Gcra(_) => AlgorithmKind::Gcra,
            BuiltAlgorithm::FixedWindow(_) => AlgorithmKind::FixedWindow,
            BuiltAlgorithm::SlidingLog(_) => AlgorithmKind::SlidingLog,
            BuiltAlgorithm::SlidingWindow(_) => AlgorithmKind::SlidingWindow,
            BuiltAlgorithm::Mixed(_) => {
                let kinds = self.kinds();
                match kinds.first() {
                    Some(&first) if kinds.iter().all(|&kind| kind == first) => first,
                    _ => AlgorithmKind::Mixed,
                }
            }
        }
    }

    /// Each quota's algorithm, in order.
    pub fn kinds(&self) -> Vec<AlgorithmKind> {
        match self {
            BuiltAlgorithm::Mixed(all) => all
                .limits()
                .iter()
                .map(|limit| match limit {
                    AnyAlgorithm::Gcra(_) => AlgorithmKind::Gcra,
                    AnyAlgorithm::FixedWindow(_) => AlgorithmKind::FixedWindow,
                    AnyAlgorithm::SlidingLog(_) => AlgorithmKind::SlidingLog,
                    AnyAlgorithm::SlidingWindow(_) => AlgorithmKind::SlidingWindow,
                    AnyAlgorithm::WarmUp(_) => AlgorithmKind::WarmUp,
                    // Calendar, and any algorithm the core adds.
                    _ => AlgorithmKind::Calendar,
                })
                .collect(),
            other => {
                let n = match other {
                    BuiltAlgorithm::Gcra(a) => a.limits().len(),
                    BuiltAlgorithm::FixedWindow(a) => a.limits().len(),
                    BuiltAlgorithm::SlidingLog(a) => a.limits().len(),
                    BuiltAlgorithm::SlidingWindow(a) => a.limits().len(),
                    BuiltAlgorithm::Mixed(_) => 0,
                };
                vec![other.kind(); n]
            }
        }
    }

    /// The most one request may cost.
    pub fn capacity(&self) -> u64 {
        use tollgate::Algorithm;
        match self {
            BuiltAlgorithm::Gcra(a) => a.capacity(),
            BuiltAlgorithm::FixedWindow(a) => a.capacity(),
            BuiltAlgorithm::SlidingLog(a) => a.capacity(),
            BuiltAlgorithm::SlidingWindow(a) => a.capacity(),
            BuiltAlgorithm::Mixed(a) => a.capacity(),
        }
    }
}
