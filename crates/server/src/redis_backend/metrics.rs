//! The Redis backend's metrics (see the [`redis_backend`](super) module
//! docs): every limiter's [`Stats`], read at each scrape, summed per rule
//! over the limiters it has had; and `tollgate_redis_up`, 1 while each
//! Redis answers and 0 while it fails (see [`super::watch`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tollgate_redis::Stats;

use super::Installed;
use super::watch::Watch;

/// A limiter's [`Stats`], summed over the limiters a rule has had.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Totals {
    pub(super) redis: u64,
    pub(super) deny_cache: u64,
    pub(super) lease: u64,
    pub(super) timeout: u64,
    pub(super) error: u64,
    pub(super) breaker_open: u64,
    pub(super) overloaded: u64,
    pub(super) script: u64,
    pub(super) unreplicated: u64,
    pub(super) allowed: u64,
    pub(super) denied: u64,
}

impl Totals {
    pub(super) fn sum(&mut self, other: &Totals) {
        self.redis += other.redis;
        self.deny_cache += other.deny_cache;
        self.lease += other.lease;
        self.timeout += other.timeout;
        self.error += other.error;
        self.breaker_open += other.breaker_open;
        self.overloaded += other.overloaded;
        self.script += other.script;
        self.unreplicated += other.unreplicated;
        self.allowed += other.allowed;
        self.denied += other.denied;
    }

    pub(super) fn add(&mut self, stats: &Stats) {
        self.redis += stats.redis;
        self.deny_cache += stats.deny_cache;
        self.lease += stats.lease;
        self.timeout += stats.policy_timeout;
        self.error += stats.policy_error;
        self.breaker_open += stats.policy_breaker_open;
        self.overloaded += stats.policy_overloaded;
        self.script += stats.policy_script;
        self.unreplicated += stats.policy_unreplicated;
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
struct RedisLabel {
    redis: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    rule: String,
    result: &'static str,
}

/// Reads every limiter's stats at each scrape (see the [module docs](self)).
pub(super) struct RedisMetrics {
    pub(super) limiters: Arc<ArcSwap<HashMap<Arc<str>, Arc<Installed>>>>,
    pub(super) retired: Arc<Mutex<HashMap<Arc<str>, Totals>>>,
    /// The backend's Redis, then its per-second Redis.
    pub(super) watches: Vec<Watch>,
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
                ("script", t.script),
                ("unreplicated", t.unreplicated),
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
                "Decisions Redis did not take, by why (answered by the failure policy, or failing the call with failure_policy: error)",
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
        let up = Family::<RedisLabel, Gauge>::default();
        for (i, watch) in self.watches.iter().enumerate() {
            let redis = if i == 0 { "main" } else { "per_second" };
            up.get_or_create(&RedisLabel { redis })
                .set(i64::from(watch.is_up()));
        }
        let metric = encoder.encode_descriptor(
            "redis_up",
            "1 while Redis answers this server, 0 while it fails or refuses it",
            None,
            up.metric_type(),
        )?;
        up.encode(metric)?;
        Ok(())
    }
}
