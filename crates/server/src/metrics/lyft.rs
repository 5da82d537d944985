//! envoyproxy/ratelimit's stats, kept as it keeps them: one counter per
//! StatsD-style name, from which both its StatsD lines
//! ([`super::statsd`]) and its Prometheus series ([`super::statsd_mapping`]) are
//! drawn, as its `gostats` store feeds its StatsD sink or its embedded
//! statsd_exporter.
//!
//! # Model
//!
//! Names, from its `src/stats/manager_impl.go` and `src/metrics/`:
//!
//! | stat | when |
//! |---|---|
//! | `ratelimit.service.rate_limit.<key>.total_hits` | permits asked for under a rule |
//! | `….<key>.over_limit` | the part of them over the limit |
//! | `….<key>.near_limit` | the part between `NEAR_LIMIT_RATIO` of the limit and the limit |
//! | `….<key>.within_limit` | permits admitted |
//! | `….<key>.shadow_mode` | the part over the limit of a rule in shadow mode |
//! | `ratelimit.service.config_load_success`, `_error` | configuration loads |
//! | `ratelimit_server.ShouldRateLimit.total_requests` | gRPC `ShouldRateLimit` calls |
//! | `ratelimit.service.call.should_rate_limit.redis_error` | calls failed because Redis did not decide |
//! | `ratelimit_server.ShouldRateLimit.response_time` | their time, a timer ([`super::response_time`]) |
//! | `ratelimit.service.rate_limit.<domain>.domain_not_found` | descriptors of a domain no configuration names |
//!
//! `<key>` is the rule's key as its config loader builds it (the domain, then
//! `key_value` per entry of the rule's path), or under `detailed_metric` /
//! `value_to_metric` the request's values
//! ([`crate::rules::Rule::metric_parts`]), sanitized as its
//! `SanitizeStatName` does.
//!
//! # Guarantees
//!
//! - A request's hits are split where they cross a threshold exactly as its
//!   `src/limiter/base_limiter.go` splits them, `before` and `after` read from
//!   the decision (for a fixed window, the window's counts).
//! - Request values never name a stat unless the file says so (a `limit`
//!   override counts under the descriptor's keys), and unknown domains are
//!   capped at [`MAX_DOMAINS_NOT_FOUND`] (100) counters (later ones under `_other`):
//!   clients cannot grow the stats without bound.
//! - A stat shows in Prometheus once it has counted, as its store flushes only
//!   counters that moved.
//!
//! # Parameters
//!
//! `NEAR_LIMIT_RATIO`: [`DEFAULT_NEAR_LIMIT_RATIO`], 0.8 (envoyproxy/ratelimit's), from the
//! configuration's telemetry settings.
//!
//! The counting formula and each decision in full:
//! `crates/server/docs/metrics.md`, "Inside the server".

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use prometheus_client::metrics::counter::Counter;
use regex::Regex;
use tollgate::Decision;

/// envoyproxy/ratelimit's per-rule stats, in [`StatCounters`]' order.
pub const RULE_STATS: [&str; 5] = [
    "total_hits",
    "over_limit",
    "near_limit",
    "within_limit",
    "shadow_mode",
];

/// The most domains counted apart in `domain_not_found`.
pub const MAX_DOMAINS_NOT_FOUND: usize = 100;

/// The scope of the per-rule stats.
const RULE_SCOPE: &str = "ratelimit.service.rate_limit.";

/// total_hits, over_limit, near_limit, within_limit, shadow_mode.
pub type StatCounters = [Counter; 5];

/// envoyproxy/ratelimit's default `NEAR_LIMIT_RATIO`.
pub const DEFAULT_NEAR_LIMIT_RATIO: f32 = 0.8;

/// The permits from which an admission counts as near the limit:
/// `floor(limit × ratio)`, computed in `f32` as envoyproxy/ratelimit does
/// (so that both count the same hits near the limit).
pub fn near_threshold(limit: u64, ratio: f32) -> u64 {
    // `as` saturates: a limit beyond f32's range gives a huge threshold,
    // the same as Go's conversion on these platforms.
    (limit as f32 * ratio).floor() as u64
}

/// Counts one decision of `cost` permits as envoyproxy/ratelimit does (see
/// the module docs, "Counting").
pub fn count(counters: &StatCounters, cost: u64, decision: &Decision, shadow: bool, ratio: f32) {
    let [
        total_hits,
        over_limit,
        near_limit,
        within_limit,
        shadow_mode,
    ] = counters;
    let limit = decision.limit();
    let near = near_threshold(limit, ratio);
    total_hits.inc_by(cost);
    if decision.is_allowed() {
        let after = limit.saturating_sub(decision.remaining());
        let before = after.saturating_sub(cost);
        within_limit.inc_by(cost);
        if after > near {
            near_limit.inc_by(if before >= near { cost } else { after - near });
        }
    } else {
        let before = limit.saturating_sub(decision.remaining());
        let after = before.saturating_add(cost);
        let over = if before >= limit {
            cost
        } else {
            near_limit.inc_by(limit - near.max(before));
            after - limit
        };
        over_limit.inc_by(over);
        if shadow {
            shadow_mode.inc_by(over);
        }
    }
}

/// envoyproxy/ratelimit's `SanitizeStatName`: `:` and `|` become `_`, and
/// the dots of every IPv4-shaped run (`\d{1,3}(\.\d{1,3}){3}`) become `_`.
pub fn sanitize(key: &str) -> String {
    static IPV4: OnceLock<Regex> = OnceLock::new();
    let ipv4 = IPV4.get_or_init(|| {
        // A constant pattern: it compiles.
        Regex::new(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}").unwrap_or_else(|_| unreachable!())
    });
    let replaced = key.replace([':', '|'], "_");
    ipv4.replace_all(&replaced, |caps: &regex::Captures<'_>| {
        caps[0].replace('.', "_")
    })
    .into_owned()
}

/// The key of a rule's stats: its domain, then its path's parts.
pub fn rule_key<'a>(domain: &str, parts: impl IntoIterator<Item = &'a str>) -> String {
    let mut key = domain.to_owned();
    for part in parts {
        key.push('.');
        key.push_str(part);
    }
    key
}

/// Every envoyproxy/ratelimit stat of this process.
#[derive(Debug, Default)]
pub struct LyftStats {
    /// Per sanitized rule key.
    rules: Mutex<HashMap<Arc<str>, StatCounters>>,
    config_load_success: Counter,
    config_load_error: Counter,
    should_rate_limit_calls: Counter,
    /// Calls that failed because the store (Redis) did not decide.
    redis_errors: Counter,
    /// `domain_not_found` per sanitized domain.
    domains_not_found: Mutex<HashMap<Arc<str>, Counter>>,
}

impl LyftStats {
    /// The counters of the rule key `key` (sanitized here), shared by every
    /// caller asking for the same key, as its `NewStats`.
    pub fn rule(&self, key: &str) -> StatCounters {
        let key = sanitize(key);
        // A poisoned lock only means a count panicked; the map is whole.
        let mut rules = self
            .rules
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        rules.entry(key.into()).or_default().clone()
    }

    /// Counts a configuration load.
    pub fn config_loaded(&self, ok: bool) {
        if ok {
            self.config_load_success.inc();
        } else {
            self.config_load_error.inc();
        }
    }

    /// Counts a gRPC `ShouldRateLimit` call.
    pub fn should_rate_limit_call(&self) {
        self.should_rate_limit_calls.inc();
    }

    /// Counts a call that failed because the store (Redis) did not decide
    /// (`ratelimit.service.call.should_rate_limit.redis_error`).
    pub fn redis_error(&self) {
        self.redis_errors.inc();
    }

    /// Counts a descriptor of the unknown `domain`.
    pub fn domain_not_found(&self, domain: &str) {
        let domain = sanitize(domain);
        let mut domains = self
            .domains_not_found
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key: Arc<str> =
            if domains.contains_key(domain.as_str()) || domains.len() < MAX_DOMAINS_NOT_FOUND {
                domain.into()
            } else {
                "_other".into()
            };
        domains.entry(key).or_default().inc();
    }

    /// Every stat's name (without tags) and value, in name order.
    pub fn snapshot(&self) -> Vec<(String, u64)> {
        let mut all = vec![
            (
                "ratelimit.service.config_load_success".to_owned(),
                self.config_load_success.get(),
            ),
            (
                "ratelimit.service.config_load_error".to_owned(),
                self.config_load_error.get(),
            ),
            (
                "ratelimit_server.ShouldRateLimit.total_requests".to_owned(),
                self.should_rate_limit_calls.get(),
            ),
            (
                "ratelimit.service.call.should_rate_limit.redis_error".to_owned(),
                self.redis_errors.get(),
            ),
        ];
        let rules = self
            .rules
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (key, counters) in rules.iter() {
            for (stat, counter) in RULE_STATS.iter().zip(counters) {
                all.push((format!("{RULE_SCOPE}{key}.{stat}"), counter.get()));
            }
        }
        drop(rules);
        let domains = self
            .domains_not_found
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (domain, counter) in domains.iter() {
            all.push((
                format!("{RULE_SCOPE}{domain}.domain_not_found"),
                counter.get(),
            ));
        }
        drop(domains);
        all.sort();
        all
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn counts(cost: u64, decision: Decision, shadow: bool) -> [u64; 5] {
        let counters = StatCounters::default();
        count(&counters, cost, &decision, shadow, DEFAULT_NEAR_LIMIT_RATIO);
        counters.map(|c| c.get())
    }

    fn allowed(limit: u64, remaining: u64) -> Decision {
        Decision::from_parts(true, limit, remaining, Duration::ZERO, Duration::ZERO)
    }

    fn denied(limit: u64, remaining: u64) -> Decision {
        Decision::from_parts(false, limit, remaining, Duration::ZERO, Duration::ZERO)
    }

    #[test]
    fn unit_hits_count_as_envoyproxy_ratelimit() {
        // limit 10, ratio 0.8: near from the 9th hit on.
        assert_eq!(counts(1, allowed(10, 2), false), [1, 0, 0, 1, 0]);
        assert_eq!(counts(1, allowed(10, 1), false), [1, 0, 1, 1, 0]);
        assert_eq!(counts(1, allowed(10, 0), false), [1, 0, 1, 1, 0]);
        assert_eq!(counts(1, denied(10, 0), false), [1, 1, 0, 0, 0]);
        assert_eq!(counts(1, denied(10, 0), true), [1, 1, 0, 0, 1]);
    }

    #[test]
    fn hits_are_split_at_the_thresholds() {
        // 7 used, 3 more: after = 10, near = 8: 2 of them near.
        assert_eq!(counts(3, allowed(10, 0), false), [3, 0, 2, 3, 0]);
        // 7 used, 5 asked: 2 over, 10 - max(8, 7) = 2 near.
        assert_eq!(counts(5, denied(10, 3), true), [5, 2, 2, 0, 2]);
        // A blocked rule (limit 0): every hit over.
        assert_eq!(counts(4, denied(0, 0), false), [4, 4, 0, 0, 0]);
    }

    #[test]
    fn sanitizes_as_envoyproxy_ratelimit() {
        assert_eq!(
            sanitize("edge.remote_address_50.0.0.5"),
            "edge.remote_address_50_0_0_5"
        );
        assert_eq!(sanitize("d.k_a:b|c"), "d.k_a_b_c");
        assert_eq!(sanitize("d.version_1.2.3"), "d.version_1.2.3");
    }

    #[test]
    fn one_key_one_set_of_counters() {
        let stats = LyftStats::default();
        stats.rule("d.k_1.2.3.4")[0].inc();
        stats.rule("d.k_1_2_3_4")[0].inc();
        let snapshot = stats.snapshot();
        assert!(
            snapshot.contains(&(
                "ratelimit.service.rate_limit.d.k_1_2_3_4.total_hits".to_owned(),
                2
            )),
            "{snapshot:?}"
        );
    }
}
