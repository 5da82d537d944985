//! Metrics: tollgate's own, and envoyproxy/ratelimit's under its names.
//!
//! # Model
//!
//! `/metrics` serves Prometheus text 0.0.4 by default and OpenMetrics
//! 1.0.0 to a scraper whose `Accept` asks for it ([`text`]): the series
//! names are the same in both. envoyproxy/ratelimit's stats are kept as it
//! keeps them ([`lyft`]), named for Prometheus by its statsd_exporter
//! mapping ([`crate::config::statsd_mapping`], applied by
//! [`statsd_mapping`]) and sent to StatsD by [`statsd`];
//! [`crate::config::telemetry`] says where they go. Built on
//! `prometheus-client` (typed label sets, no global recorder, so that two
//! servers in one process keep apart).
//!
//! The series:
//!
//! - per rule (label `rule`, the rule's path): `tollgate_rule_total_hits_total`,
//!   `_over_limit_total`, `_near_limit_total`, `_within_limit_total`,
//!   `_shadow_mode_total`, in permits as envoyproxy/ratelimit counts;
//! - envoyproxy/ratelimit's own under its names
//!   (`ratelimit_service_rate_limit_{total_hits,…}{domain,key1[,key2]}`,
//!   `ratelimit_service_config_load_{success,error}`,
//!   `ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`);
//! - decision latency per API, requests refused before a decision (by
//!   reason), configuration loads by result, `tollgate_backend_errors`;
//! - budgets: `tollgate_budget_{spent,overdrawn,refused_looks}_total{rule, unit}`
//!   ([`budget`]); leases: `tollgate_concurrency_{acquired,released,expired,refused}_total`
//!   ([`ConcurrencyStats`], which the status page reads too).
//!
//! # Guarantees
//!
//! - Bounded by the file, never by request values: `rule` is the rule's
//!   path; under `detailed_metric` / `value_to_metric` at most
//!   [`DETAILED_VALUES_PER_RULE`] (100) keys per rule, later ones folded into
//!   `<domain>._other._other`, kept across reloads so that a reload cannot
//!   raise the bound.
//! - `tollgate_backend_errors` counts exactly the requests that got no
//!   decision (503 / `UNAVAILABLE`); decisions the Redis failure policy took
//!   are counted by fault under `tollgate_redis_policy_faults_total`
//!   ([`crate::redis_backend`]), so an alert on it means "requests got no
//!   decision".
//! - Label values are lower case (`api="grpc"`), as envoyproxy/ratelimit's
//!   and Prometheus' conventions have them.
//!
//! # Parameters
//!
//! `NEAR_LIMIT_RATIO`: [`lyft::DEFAULT_NEAR_LIMIT_RATIO`], 0.8 (envoyproxy/ratelimit's); where the
//! stats go: [`crate::config::telemetry`].
//!
//! Each series in full (labels, the mapping's names, what counts as a backend
//! error): `crates/server/docs/metrics.md`, "Inside the server".

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::fmt::Write as _;

pub mod budget;
pub mod lyft;
pub mod response_time;
pub mod statsd;
pub mod statsd_mapping;
pub mod text;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tollgate::Decision;

use crate::config::statsd_mapping::Mapping;
use crate::rules::Rule;
use lyft::LyftStats;
pub use lyft::StatCounters;
use statsd_mapping::Series;
use text::Format;

/// Which API a request came through (label value `grpc` or `http`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Api {
    /// Envoy RLS over gRPC.
    Grpc,
    /// The HTTP JSON API.
    Http,
}

/// Why a request was refused before any decision (label values in
/// snake case: `invalid`, `invalid_descriptor`, `unauthenticated`,
/// `overloaded`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Refusal {
    /// Bad input: 400 / `INVALID_ARGUMENT`.
    Invalid,
    /// One descriptor that cannot be decided as sent: answered OVER_LIMIT,
    /// the call's other descriptors decided (counted per descriptor).
    InvalidDescriptor,
    /// Missing or wrong token.
    Unauthenticated,
    /// Too many requests in flight: 503 / `RESOURCE_EXHAUSTED`.
    Overloaded,
}

impl EncodeLabelValue for Api {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(match self {
            Api::Grpc => "grpc",
            Api::Http => "http",
        })
    }
}

impl EncodeLabelValue for Refusal {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(match self {
            Refusal::Invalid => "invalid",
            Refusal::InvalidDescriptor => "invalid_descriptor",
            Refusal::Unauthenticated => "unauthenticated",
            Refusal::Overloaded => "overloaded",
        })
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabel {
    rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabel {
    api: Api,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabel {
    api: Api,
    reason: Refusal,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// One rule's counters (clones of the registered ones): tollgate's and
/// envoyproxy/ratelimit's names, counted together.
#[derive(Clone, Debug)]
pub struct RuleCounters {
    /// tollgate's, in [`lyft::RULE_STATS`]' order.
    ours: StatCounters,
    /// envoyproxy/ratelimit's, for the rule's own key.
    lyft: StatCounters,
    /// `NEAR_LIMIT_RATIO`.
    near_limit_ratio: f32,
    /// A budget rule's counters, in its unit ([`budget`]).
    budget: Option<budget::BudgetCounters>,
}

fn count(counters: &StatCounters, cost: u64, decision: &Decision, shadow: bool, ratio: f32) {
    let [
        total_hits,
        over_limit,
        near_limit,
        within_limit,
        shadow_mode,
    ] = counters;
    total_hits.inc_by(cost);
    if decision.is_allowed() {
        within_limit.inc_by(cost);
        // More than floor(limit × ratio) in use, as envoyproxy/ratelimit's
        // threshold (with a ratio of 0.8: less than 20% left).
        let in_use = decision.limit().saturating_sub(decision.remaining());
        if in_use > lyft::near_threshold(decision.limit(), ratio) {
            near_limit.inc_by(cost);
        }
    } else {
        over_limit.inc_by(cost);
        if shadow {
            shadow_mode.inc_by(cost);
        }
    }
}

impl RuleCounters {
    /// tollgate's counts so far: total_hits, over_limit, near_limit,
    /// within_limit, shadow_mode (what
    /// `/metrics` shows; the status page reads them, see
    /// [`crate::status`]). Each is read on its own: a read racing a
    /// decision may see it in one counter and not yet in another, which
    /// the next read makes whole.
    pub fn totals(&self) -> [u64; 5] {
        let mut totals = [0; 5];
        for (total, counter) in totals.iter_mut().zip(&self.ours) {
            *total = counter.get();
        }
        totals
    }

    /// A budget rule's totals so far, in its unit ([`budget`]).
    pub fn budget_totals(&self) -> Option<budget::BudgetTotals> {
        self.budget.as_ref().map(budget::BudgetCounters::totals)
    }

    /// Counts one decision of `cost`; `shadow` if the rule is in shadow mode.
    pub fn decided(&self, cost: u64, decision: &Decision, shadow: bool) {
        if let Some(budget) = &self.budget {
            budget.decided(cost, decision);
        }
        let ratio = self.near_limit_ratio;
        count(&self.ours, cost, decision, shadow, ratio);
        lyft::count(&self.lyft, cost, decision, shadow, ratio);
    }

    /// As [`RuleCounters::decided`], but envoyproxy/ratelimit's counts go
    /// to `lyft` (a `detailed_metric` / `value_to_metric` label set, see
    /// [`Metrics::detailed`]) instead of the rule's own labels.
    pub fn decided_detailed(
        &self,
        cost: u64,
        decision: &Decision,
        shadow: bool,
        lyft: &StatCounters,
    ) {
        if let Some(budget) = &self.budget {
            budget.decided(cost, decision);
        }
        let ratio = self.near_limit_ratio;
        count(&self.ours, cost, decision, shadow, ratio);
        lyft::count(lyft, cost, decision, shadow, ratio);
    }
}

/// The most distinct keys one rule's `detailed_metric` / `value_to_metric`
/// counts get; later ones are counted under `<domain>._other._other`.
pub const DETAILED_VALUES_PER_RULE: usize = 100;

/// Per rule id, the keys its detailed counts got.
type DetailedSeen = HashMap<Arc<str>, HashSet<String>>;

/// Every metric the server exports.
pub struct Metrics {
    registry: Registry,
    total_hits: Family<RuleLabel, Counter>,
    over_limit: Family<RuleLabel, Counter>,
    near_limit: Family<RuleLabel, Counter>,
    within_limit: Family<RuleLabel, Counter>,
    shadow_mode: Family<RuleLabel, Counter>,
    /// envoyproxy/ratelimit's stats.
    lyft: LyftStats,
    /// How they are named for Prometheus.
    mapping: Mapping,
    /// envoyproxy/ratelimit's `response_time` timer, named by `mapping`.
    response_time: response_time::ResponseTime,
    /// `NEAR_LIMIT_RATIO`.
    near_limit_ratio: f32,
    /// Per rule id, the detailed keys given so far (bounded by
    /// [`DETAILED_VALUES_PER_RULE`]).
    detailed: Mutex<DetailedSeen>,
    latency: Family<ApiLabel, Histogram>,
    refused: Family<RefusalLabel, Counter>,
    config_loads: Family<ResultLabel, Counter>,
    config_ok: Gauge,
    backend_errors: Counter,
    /// Budget rules' counters ([`budget`]).
    budgets: budget::BudgetFamilies,
    /// The concurrency lease counters in force ([`ConcurrencyStats`]).
    concurrency: Arc<Mutex<ConcurrencyStats>>,
    /// Encoding takes `&Registry` only, but one scrape at a time is plenty.
    encoding: Mutex<()>,
}

/// envoyproxy/ratelimit's key of a rule's own stats: its domain, then its
/// path's `key_value` (or `key`) parts.
pub fn lyft_rule_key(rule: &Rule) -> String {
    let parts: Vec<String> = rule
        .path
        .iter()
        .map(|(key, value)| match value {
            Some(value) => format!("{key}_{value}"),
            None => key.clone(),
        })
        .collect();
    lyft::rule_key(&rule.domain, parts.iter().map(String::as_str))
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric at zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("tollgate");
        let total_hits = Family::<RuleLabel, Counter>::default();
        let over_limit = Family::<RuleLabel, Counter>::default();
        let near_limit = Family::<RuleLabel, Counter>::default();
        let within_limit = Family::<RuleLabel, Counter>::default();
        let shadow_mode = Family::<RuleLabel, Counter>::default();
        // 1 µs to ~16 s.
        let latency = Family::<ApiLabel, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(1e-6, 2.0, 24))) as fn() -> Histogram,
        );
        let refused = Family::<RefusalLabel, Counter>::default();
        let config_loads = Family::<ResultLabel, Counter>::default();
        let config_ok = Gauge::default();
        let backend_errors = Counter::default();
        registry.register(
            "rule_total_hits",
            "Permits asked for under each rule",
            total_hits.clone(),
        );
        registry.register(
            "rule_over_limit",
            "Permits denied under each rule",
            over_limit.clone(),
        );
        registry.register(
            "rule_near_limit",
            "Permits admitted with more than NEAR_LIMIT_RATIO (by default 0.8) of the limit in use",
            near_limit.clone(),
        );
        registry.register(
            "rule_within_limit",
            "Permits admitted under each rule",
            within_limit.clone(),
        );
        registry.register(
            "rule_shadow_mode",
            "Permits denied but answered OK because the rule is in shadow mode",
            shadow_mode.clone(),
        );
        registry.register(
            "decision_duration_seconds",
            "Time to decide one request, from decoded request to answer",
            latency.clone(),
        );
        registry.register(
            "requests_refused",
            "Requests refused before any decision",
            refused.clone(),
        );
        registry.register(
            "config_loads",
            "Configuration loads and reloads by result",
            config_loads.clone(),
        );
        registry.register(
            "config_last_load_ok",
            "1 if the last configuration load succeeded, 0 if the old rules are still running",
            config_ok.clone(),
        );
        registry.register(
            "backend_errors",
            "Requests the backend could not decide",
            backend_errors.clone(),
        );
        let budgets = budget::BudgetFamilies::default();
        budgets.register(&mut registry);
        let concurrency = Arc::new(Mutex::new(ConcurrencyStats::default()));
        registry.register_collector(Box::new(ConcurrencyCollector(Arc::clone(&concurrency))));
        Metrics {
            concurrency,
            registry,
            lyft: LyftStats::default(),
            response_time: response_time::ResponseTime::new(&Mapping::default()),
            mapping: Mapping::default(),
            near_limit_ratio: lyft::DEFAULT_NEAR_LIMIT_RATIO,
            detailed: Mutex::new(HashMap::new()),
            total_hits,
            over_limit,
            near_limit,
            within_limit,
            shadow_mode,
            latency,
            refused,
            config_loads,
            config_ok,
            backend_errors,
            budgets,
            encoding: Mutex::new(()),
        }
    }

    /// The counters of `rule`, looked up once so that counting a decision
    /// allocates nothing.
    pub fn rule(&self, rule: &Rule) -> RuleCounters {
        let label = RuleLabel {
            rule: rule.id.to_string(),
        };
        RuleCounters {
            ours: [
                &self.total_hits,
                &self.over_limit,
                &self.near_limit,
                &self.within_limit,
                &self.shadow_mode,
            ]
            .map(|family| family.get_or_create(&label).clone()),
            lyft: self.lyft.rule(&lyft_rule_key(rule)),
            near_limit_ratio: self.near_limit_ratio,
            budget: rule
                .budget
                .as_ref()
                .map(|budget| self.budgets.of(&rule.id, &budget.unit)),
        }
    }

    /// envoyproxy/ratelimit's counters of `rule` for the request's own
    /// key parts (`detailed_metric`, `value_to_metric`, see
    /// [`Rule::metric_parts`]): at most [`DETAILED_VALUES_PER_RULE`] keys
    /// per rule, so that clients sending ever new values cannot grow the
    /// metrics without bound; beyond, `<domain>._other._other`.
    pub fn detailed(&self, rule: &Rule, parts: &[String]) -> StatCounters {
        let key = lyft::rule_key(&rule.domain, parts.iter().map(String::as_str));
        let key = {
            // A poisoned lock only means a scrape or count panicked; the
            // set is still a valid set.
            let mut seen = self
                .detailed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let set = seen.entry(Arc::clone(&rule.id)).or_default();
            if set.contains(&key) || set.len() < DETAILED_VALUES_PER_RULE {
                set.insert(key.clone());
                key
            } else {
                lyft::rule_key(&rule.domain, ["_other", "_other"])
            }
        };
        self.lyft.rule(&key)
    }

    /// Records how long a decision took.
    pub fn latency(&self, api: Api, elapsed: Duration) {
        self.latency
            .get_or_create(&ApiLabel { api })
            .observe(elapsed.as_secs_f64());
    }

    /// Counts a request refused before any decision.
    pub fn refused(&self, api: Api, reason: Refusal) {
        self.refused
            .get_or_create(&RefusalLabel { api, reason })
            .inc();
    }

    /// Counts a configuration load.
    pub fn config_loaded(&self, ok: bool) {
        let result = if ok { "success" } else { "error" };
        self.config_loads
            .get_or_create(&ResultLabel { result })
            .inc();
        self.config_ok.set(i64::from(ok));
        self.lyft.config_loaded(ok);
    }

    /// The registry, to add a backend's metrics before serving.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Exports `stats` (the lease store's counters, see
    /// [`ConcurrencyStats`]) in place of the counters it had.
    #[must_use]
    pub fn with_concurrency(self, stats: ConcurrencyStats) -> Metrics {
        *self
            .concurrency
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = stats;
        self
    }

    /// The concurrency lease counters exported.
    pub fn concurrency(&self) -> ConcurrencyStats {
        self.concurrency
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Counts a gRPC `ShouldRateLimit` call, whatever its answer
    /// (envoyproxy/ratelimit's `ratelimit_server.ShouldRateLimit.total_requests`).
    pub fn should_rate_limit_call(&self) {
        self.lyft.should_rate_limit_call();
    }

    /// Times a gRPC `ShouldRateLimit` call, whatever its answer
    /// (envoyproxy/ratelimit's `ratelimit_server.ShouldRateLimit.response_time`).
    pub fn should_rate_limit_time(&self, elapsed: Duration) {
        self.response_time.observe(elapsed);
    }

    /// The `response_time` values (milliseconds) not yet sent to StatsD.
    pub fn take_response_times(&self) -> Vec<u64> {
        self.response_time.take_pending()
    }

    /// Counts a descriptor of a domain no configuration names
    /// (envoyproxy/ratelimit's `ratelimit.service.rate_limit.<domain>.domain_not_found`).
    pub fn domain_not_found(&self, domain: &str) {
        self.lyft.domain_not_found(domain);
    }

    /// Counts a backend error.
    pub fn backend_error(&self) {
        self.backend_errors.inc();
        // envoyproxy/ratelimit's name for the same: its only store is Redis.
        self.lyft.redis_error();
    }

    /// Counts `near_limit` above `floor(limit × ratio)` permits in use
    /// (`NEAR_LIMIT_RATIO`), for the rules' counters made from now on. By
    /// default, 0.8.
    #[must_use]
    pub fn with_near_limit_ratio(mut self, ratio: f32) -> Metrics {
        self.near_limit_ratio = ratio;
        self
    }

    /// Names envoyproxy/ratelimit's stats for Prometheus with `mapping`
    /// (`PROMETHEUS_MAPPER_YAML`). By default, its built-in mapping.
    #[must_use]
    pub fn with_mapping(mut self, mapping: Mapping) -> Metrics {
        self.response_time = response_time::ResponseTime::new(&mapping);
        self.mapping = mapping;
        self
    }

    /// envoyproxy/ratelimit's stats: StatsD names and totals.
    pub fn lyft_snapshot(&self) -> Vec<(String, u64)> {
        self.lyft.snapshot()
    }

    /// Every metric in `format` (see [`text`]).
    pub fn encode_as(&self, format: Format) -> String {
        let _one = self
            .encoding
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut ours = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode_registry(&mut ours, &self.registry);
        let lyft: Vec<(Series, u64)> = self
            .lyft
            .snapshot()
            .into_iter()
            .filter_map(|(stat, value)| {
                Some((statsd_mapping::counter_series(&self.mapping, &stat)?, value))
            })
            .collect();
        match format {
            Format::OpenMetrics => {
                text::encode_lyft(&lyft, format, &mut ours);
                self.response_time.encode(&mut ours);
                ours.push_str("# EOF\n");
                ours
            }
            Format::Text => {
                let mut out = String::with_capacity(ours.len());
                text::openmetrics_to_text(&ours, &mut out);
                text::encode_lyft(&lyft, format, &mut out);
                self.response_time.encode(&mut out);
                out
            }
        }
    }

    /// Every metric in OpenMetrics.
    pub fn encode(&self) -> String {
        self.encode_as(Format::OpenMetrics)
    }
}

/// A concurrency rule's lease counts ([`ConcurrencyStats`]), cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConcurrencyTotals {
    /// Leases granted (HTTP `/v1/acquire`, and RLS / `/v1/check` slots).
    pub acquired: u64,
    /// Refused: every slot of the bucket taken.
    pub refused_full: u64,
    /// Refused: a cost above the limit (never grantable).
    pub refused_cost: u64,
    /// Refused: the lease store could not grant (Redis down and the
    /// policy refuses, or the memory table full).
    pub refused_unavailable: u64,
    /// Leases given back before their TTL.
    pub released: u64,
    /// Leases whose TTL ended first, as this server saw them end (see
    /// [`ConcurrencyStats`]).
    pub expired: u64,
}

/// The one set of concurrency lease counters, per rule, that both
/// `/metrics` and the status page's JSON read: `tollgate_concurrency_
/// {acquired,released,expired}_total{rule}` and
/// `tollgate_concurrency_refused_total{rule, reason}` (`reason` = `full`,
/// `cost`, `unavailable`). Counted by [`crate::concurrency::Leases`];
/// `rule` is the rule's path (bounded by the file). A lease granted by
/// the fail-open policy (it holds nothing) counts as acquired, under its
/// rule, and its release is not counted (it names no rule).
///
/// `expired` counts leases that ended by their TTL in this server's memory
/// (the in-memory store, and the local failure policy's leases on Redis):
/// on Redis the script drops expired leases server-side, unseen, so a
/// Redis lease never released is in neither `released` nor `expired`.
/// Counts are kept per rule path for the life of the process (a reload
/// does not reset them).
#[derive(Debug, Clone, Default)]
pub struct ConcurrencyStats(Arc<Mutex<HashMap<Arc<str>, ConcurrencyTotals>>>);

impl ConcurrencyStats {
    /// Applies `count` to `rule`'s totals.
    pub(crate) fn count(&self, rule: &Arc<str>, count: impl FnOnce(&mut ConcurrencyTotals)) {
        let mut all = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        count(all.entry(Arc::clone(rule)).or_default());
    }

    /// `rule`'s totals (zero for a rule never counted).
    pub fn totals(&self, rule: &str) -> ConcurrencyTotals {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(rule)
            .copied()
            .unwrap_or_default()
    }

    fn all(&self) -> Vec<(Arc<str>, ConcurrencyTotals)> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(rule, totals)| (Arc::clone(rule), *totals))
            .collect()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConcurrencyRefusalLabel {
    rule: String,
    reason: &'static str,
}

/// Reads the [`ConcurrencyStats`] in force at each scrape.
#[derive(Debug)]
struct ConcurrencyCollector(Arc<Mutex<ConcurrencyStats>>);

impl prometheus_client::collector::Collector for ConcurrencyCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        let stats = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let acquired = Family::<RuleLabel, Counter>::default();
        let released = Family::<RuleLabel, Counter>::default();
        let expired = Family::<RuleLabel, Counter>::default();
        let refused = Family::<ConcurrencyRefusalLabel, Counter>::default();
        for (rule, t) in stats.all() {
            let label = RuleLabel {
                rule: rule.to_string(),
            };
            acquired.get_or_create(&label).inc_by(t.acquired);
            released.get_or_create(&label).inc_by(t.released);
            expired.get_or_create(&label).inc_by(t.expired);
            for (reason, n) in [
                ("full", t.refused_full),
                ("cost", t.refused_cost),
                ("unavailable", t.refused_unavailable),
            ] {
                refused
                    .get_or_create(&ConcurrencyRefusalLabel {
                        rule: rule.to_string(),
                        reason,
                    })
                    .inc_by(n);
            }
        }
        for (name, help, family) in [
            (
                "concurrency_acquired",
                "Concurrency leases granted, per rule",
                &acquired as &dyn EncodeMetric,
            ),
            (
                "concurrency_refused",
                "Concurrency leases refused, per rule and reason",
                &refused,
            ),
            (
                "concurrency_released",
                "Concurrency leases given back, per rule",
                &released,
            ),
            (
                "concurrency_expired",
                "Concurrency leases ended by their TTL in this server's memory, per rule",
                &expired,
            ),
        ] {
            let metric = encoder.encode_descriptor(name, help, None, family.metric_type())?;
            family.encode(metric)?;
        }
        Ok(())
    }
}
