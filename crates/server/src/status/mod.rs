//! The status page: `GET /status`, a small HTML page embedded in the
//! binary, and `GET /status.json`, the numbers it polls every second.
//!
//! # What it shows
//!
//! - **The loaded rules**: path, limits, algorithm, shadow mode.
//! - **Decisions per second per rule** (allowed / denied / shadow) over the
//!   last five minutes, and each rule's totals, from the rule counters that
//!   feed `/metrics` (one source of truth: [`series`]); concurrency-only
//!   rules count their leases instead.
//! - **Concurrency leases per rule**: acquired, refused by reason, released,
//!   expired ([`crate::metrics::ConcurrencyStats`]).
//! - **The most-denied keys right now**, and apart the denials shadow mode
//!   answered OK: Space-Saving sketches ([`sketch`]) over the current window
//!   and the one before, each key with its count and its error.
//! - **Backend health**: its kind, the time it took to decide, for Redis who
//!   took the decisions (Redis or the policy, by fault) and its `state`
//!   (`down`, `degraded`, `ok`).
//!
//! # Guarantees
//!
//! - The page and `/metrics` never disagree: both read the same counters.
//! - A key's true denied permits lie in `[count - error, count]`; memory is
//!   bounded by the sketch's counters, whatever the keys sent.
//! - A backend the failure policy covers for is never shown `ok`, whatever
//!   the health checks answer.
//! - The data (`/status.json`: rules, rates, client keys, which may name
//!   users) sits behind the bearer token like `/metrics`; the static page
//!   does not, and keeps the token in the tab's `sessionStorage` (never a URL
//!   or a cookie). Nothing is loaded from elsewhere
//!   (`Content-Security-Policy: default-src 'self'`).
//!
//! # Parameters
//!
//! - [`series::POINTS`]: 300 one-second points per rule (five minutes).
//! - [`TOP_COUNTERS`]: 64 counters per window of the most-denied keys.
//! - [`TOP_WINDOW_SECONDS`]: 60 s a window, so "now" is the last one to two
//!   minutes.
//!
//! What each number is made of in full (the counters behind allowed, denied
//! and shadow, the chart's axes, the breaker as seen from decisions, the
//! backend's states): `crates/server/docs/admin-and-status.md`, "Inside the
//! server".

pub mod page;
pub mod series;
pub mod sketch;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;

use crate::backend::{Backend, PolicyTotals, StoreHealth};
use crate::metrics::Metrics;
use crate::rules::{Rule, RuleSet};
use series::{Series, Totals};
use sketch::Windowed;

/// Counters per window of the most-denied keys' sketch.
pub const TOP_COUNTERS: usize = 64;

/// The length of one window of the most-denied keys, in samples (seconds).
pub const TOP_WINDOW_SECONDS: u64 = 60;

/// How many of the most-denied keys the page shows.
pub const TOP_SHOWN: usize = 10;

/// How often the server calls [`StatusBoard::sample`].
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The page, its script and its style, embedded.
pub const PAGE: &str = include_str!("../../assets/status.html");
/// The page's script.
pub const SCRIPT: &str = include_str!("../../assets/status.js");
/// The page's style.
pub const STYLE: &str = include_str!("../../assets/status.css");

/// The page's `Content-Security-Policy`: nothing but its own files.
pub const CSP: &str = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'";

type DeniedKey = (Arc<str>, String);

/// The backend's time to decide, per sample.
#[derive(Debug, Default)]
struct Latency {
    sum_ns: AtomicU64,
    count: AtomicU64,
    max_ns: AtomicU64,
}

/// One second of the backend's health.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct BackendPoint {
    /// Mean time the backend took per request, in microseconds.
    pub latency_mean_us: u64,
    /// Longest, in microseconds.
    pub latency_max_us: u64,
    /// Requests the backend decided.
    pub requests: u64,
    /// Policy decisions by fault, and store decisions, in the second.
    pub policy: PolicyTotals,
}

#[derive(Debug, Default)]
struct BackendSamples {
    last: Option<PolicyTotals>,
    points: std::collections::VecDeque<BackendPoint>,
}

/// What the status page shows, gathered as the server runs (see the
/// [module docs](self)).
#[derive(Debug)]
pub struct StatusBoard {
    top: Mutex<Windowed<DeniedKey>>,
    /// The denials shadow mode answered OK.
    top_shadow: Mutex<Windowed<DeniedKey>>,
    series: Mutex<Series>,
    latency: Latency,
    backend: Mutex<BackendSamples>,
    /// Samples taken, to rotate the sketch's windows.
    samples: AtomicU64,
}

impl Default for StatusBoard {
    fn default() -> StatusBoard {
        StatusBoard::new()
    }
}

impl StatusBoard {
    /// Nothing seen yet.
    pub fn new() -> StatusBoard {
        StatusBoard {
            top: Mutex::new(Windowed::new(TOP_COUNTERS)),
            top_shadow: Mutex::new(Windowed::new(TOP_COUNTERS)),
            series: Mutex::new(Series::default()),
            latency: Latency::default(),
            backend: Mutex::new(BackendSamples::default()),
            samples: AtomicU64::new(0),
        }
    }

    /// Counts a denial of `cost` permits for `bucket` under `rule`;
    /// `shadow` when shadow mode answered it OK.
    pub fn denied(&self, rule: &Arc<str>, bucket: &str, cost: u64, shadow: bool) {
        let key = (Arc::clone(rule), bucket.to_owned());
        let sketch = if shadow { &self.top_shadow } else { &self.top };
        // A poisoned lock means a panic mid-update of a sketch that is
        // still a sketch: keep counting.
        sketch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add(&key, cost);
    }

    /// Records how long the backend took to decide one request.
    pub fn backend_latency(&self, elapsed: Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        // Relaxed: three independent statistics; a sample racing this may
        // see one of them in this second and another in the next, which
        // moves one request between two seconds' means.
        self.latency.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.latency.count.fetch_add(1, Ordering::Relaxed);
        self.latency.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// Takes one sample: each rule's totals for the chart, the backend's
    /// second, and every [`TOP_WINDOW_SECONDS`] a new window of the
    /// most-denied keys. Called every [`SAMPLE_EVERY`] by the server.
    pub fn sample(&self, rules: &RuleSet, metrics: &Metrics, backend: &dyn Backend) {
        let totals: Vec<(Arc<str>, Totals)> = rules
            .rules()
            .iter()
            .filter_map(|rule| Some((Arc::clone(&rule.id), rule_totals(metrics, rule)?)))
            .collect();
        self.series
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .sample(totals);

        // Relaxed: see `backend_latency`.
        let sum = self.latency.sum_ns.swap(0, Ordering::Relaxed);
        let count = self.latency.count.swap(0, Ordering::Relaxed);
        let max = self.latency.max_ns.swap(0, Ordering::Relaxed);
        let now = backend.health().policy;
        let mut samples = self.backend.lock().unwrap_or_else(PoisonError::into_inner);
        let policy = match (now, samples.last) {
            (Some(now), Some(last)) => policy_since(now, last),
            _ => PolicyTotals::default(),
        };
        samples.last = now;
        if samples.points.len() == series::POINTS {
            samples.points.pop_front();
        }
        samples.points.push_back(BackendPoint {
            latency_mean_us: sum.checked_div(count).unwrap_or(0) / 1_000,
            latency_max_us: max / 1_000,
            requests: count,
            policy,
        });
        drop(samples);

        // Relaxed: only this sampler touches the count.
        let taken = self.samples.fetch_add(1, Ordering::Relaxed) + 1;
        if taken % TOP_WINDOW_SECONDS == 0 {
            for sketch in [&self.top, &self.top_shadow] {
                sketch
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .rotate();
            }
        }
    }

    /// The numbers `/status.json` answers (see the [module docs](self)).
    pub fn snapshot(&self, rules: &RuleSet, metrics: &Metrics, backend: &dyn Backend) -> Snapshot {
        let series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let rules_out = rules
            .rules()
            .iter()
            .map(|rule| RuleStatus {
                rule: rule.id.to_string(),
                domain: rule.domain.clone(),
                name: rule.name.clone(),
                shadow_mode: rule.shadow_mode,
                limit: describe(rule),
                totals: rule_totals(metrics, rule),
                concurrency: rule
                    .concurrency
                    .map(|_| metrics.concurrency().totals(&rule.id)),
                budget: metrics.rule(rule).budget_totals(),
                points: series.points(&rule.id),
            })
            .collect();
        drop(series);
        let health = backend.health();
        let points: Vec<BackendPoint> = self
            .backend
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .points
            .iter()
            .copied()
            .collect();
        let last = points.last().copied().unwrap_or_default();
        let breaker = match health.policy {
            None => "n/a",
            Some(_) if last.policy.breaker_open > 0 => "open",
            Some(_)
                if last.policy.timeout
                    + last.policy.error
                    + last.policy.overloaded
                    + last.policy.unreplicated
                    > 0 =>
            {
                "degraded"
            }
            Some(_) => "ok",
        };
        let state = match &health.store {
            None => "n/a",
            Some(store) if !store.up => "down",
            Some(_) if breaker != "ok" && breaker != "n/a" => "degraded",
            Some(_) => "ok",
        };
        Snapshot {
            sample_seconds: SAMPLE_EVERY.as_secs(),
            chart_points: series::POINTS,
            rules: rules_out,
            top_denied: top_of(&self.top),
            top_shadow: top_of(&self.top_shadow),
            backend: BackendStatus {
                kind: health.kind,
                breaker,
                state,
                store: health.store,
                policy: health.policy,
                last,
                points,
            },
        }
    }
}

/// The most denied keys of `sketch`.
fn top_of(sketch: &Mutex<Windowed<DeniedKey>>) -> TopDenied {
    let (top, total) = {
        let sketch = sketch.lock().unwrap_or_else(PoisonError::into_inner);
        (sketch.top(TOP_SHOWN), sketch.total())
    };
    TopDenied {
        window_seconds: TOP_WINDOW_SECONDS,
        counters: TOP_COUNTERS,
        denied_permits: total,
        keys: top
            .into_iter()
            .map(|c| DeniedKeyStatus {
                rule: c.key.0.to_string(),
                key: readable_bucket(&c.key.1),
                count: c.count,
                error: c.error,
            })
            .collect(),
    }
}

/// A rule's counts: its rate decisions, or for a rule of concurrency slots
/// alone its leases (see the [module docs](self)); `None` for an unlimited
/// rule, which counts nothing.
fn rule_totals(metrics: &Metrics, rule: &Rule) -> Option<Totals> {
    if rule.limits.is_some() || rule.blocked.is_some() {
        let [_total, over_limit, _near, within_limit, shadow_mode] = metrics.rule(rule).totals();
        return Some(Totals {
            allowed: within_limit,
            denied: over_limit.saturating_sub(shadow_mode),
            shadow: shadow_mode,
        });
    }
    rule.concurrency?;
    let leases = metrics.concurrency().totals(&rule.id);
    let refused = leases
        .refused_full
        .saturating_add(leases.refused_cost)
        .saturating_add(leases.refused_unavailable);
    let (denied, shadow) = if rule.shadow_mode {
        (0, refused)
    } else {
        (refused, 0)
    };
    Some(Totals {
        allowed: leases.acquired,
        denied,
        shadow,
    })
}

fn policy_since(now: PolicyTotals, last: PolicyTotals) -> PolicyTotals {
    PolicyTotals {
        store: now.store.saturating_sub(last.store),
        timeout: now.timeout.saturating_sub(last.timeout),
        error: now.error.saturating_sub(last.error),
        breaker_open: now.breaker_open.saturating_sub(last.breaker_open),
        overloaded: now.overloaded.saturating_sub(last.overloaded),
        unreplicated: now.unreplicated.saturating_sub(last.unreplicated),
        allowed: now.allowed.saturating_sub(last.allowed),
        denied: now.denied.saturating_sub(last.denied),
    }
}

/// A rule's limit in words: `2/minute fixed_window`, several joined by
/// ` + `, `unlimited`, `blocked`.
pub fn describe(rule: &Rule) -> String {
    if rule.blocked.is_some() {
        return "blocked (requests_per_unit: 0)".into();
    }
    let slots = rule
        .concurrency
        .map(|c| format!("concurrency {} (lease {:?})", c.limit, c.lease_ttl));
    let Some(limits) = &rule.limits else {
        return slots.unwrap_or_else(|| "unlimited".into());
    };
    let kind = limits.algorithm.kind();
    let kinds = limits.algorithm.kinds();
    let quotas: Vec<String> = limits
        .quotas
        .iter()
        .zip(&kinds)
        .map(|(q, this)| {
            let per = q.unit.map_or_else(
                || format!("{}ms", q.period.as_millis()),
                |unit| unit.name().to_owned(),
            );
            let mut text = match q.burst {
                Some(burst) => format!("{}/{per} burst {burst}", q.requests_per_unit),
                None => format!("{}/{per}", q.requests_per_unit),
            };
            if let Some(warmup) = q.warmup {
                text.push_str(&format!(
                    " (warm-up {}ms, cold at 1/{})",
                    warmup.period.as_millis(),
                    warmup.cold_factor
                ));
            }
            // A rule mixing algorithms names each limit's.
            if kind == crate::config::AlgorithmKind::Mixed {
                text.push(' ');
                text.push_str(this.name());
            }
            text
        })
        .collect();
    let rate = if kind == crate::config::AlgorithmKind::Mixed {
        quotas.join(" + ")
    } else {
        format!("{} {}", quotas.join(" + "), kind.name())
    };
    let rate = match &rule.budget {
        Some(budget) => format!("{rate}, a budget of {}", budget.unit),
        None => rate,
    };
    match slots {
        Some(slots) => format!("{rate} + {slots}"),
        None => rate,
    }
}

/// A bucket key (`4:user5:alice`, see [`crate::rules::bucket_key`]) as
/// `user=alice`, entries joined by `, `; the raw key if it is not one.
pub fn readable_bucket(bucket: &str) -> String {
    fn field(rest: &str) -> Option<(&str, &str)> {
        let (len, rest) = rest.split_once(':')?;
        let len: usize = len.parse().ok()?;
        Some((rest.get(..len)?, rest.get(len..)?))
    }
    let mut out = Vec::new();
    let mut rest = bucket;
    while !rest.is_empty() {
        let Some((key, after)) = field(rest) else {
            return bucket.to_owned();
        };
        let Some((value, after)) = field(after) else {
            return bucket.to_owned();
        };
        out.push(format!("{key}={value}"));
        rest = after;
    }
    out.join(", ")
}

/// `/status.json`.
#[derive(Debug, Serialize)]
pub struct Snapshot {
    /// Seconds between two points of a chart.
    pub sample_seconds: u64,
    /// The most points a chart keeps: its time axis spans this many samples.
    pub chart_points: usize,
    /// Every loaded rule, in file order.
    pub rules: Vec<RuleStatus>,
    /// The most-denied keys: denials answered OVER_LIMIT.
    pub top_denied: TopDenied,
    /// The keys most denied in shadow mode (answered OK), apart.
    pub top_shadow: TopDenied,
    /// The backend.
    pub backend: BackendStatus,
}

/// One rule on the page.
#[derive(Debug, Serialize)]
pub struct RuleStatus {
    /// Its path, as `/metrics` labels it.
    pub rule: String,
    /// Its domain.
    pub domain: String,
    /// Its `name`, if any.
    pub name: Option<String>,
    /// Whether denials are answered OK.
    pub shadow_mode: bool,
    /// Its limit in words.
    pub limit: String,
    /// Its counts so far (`None` for an unlimited rule, which counts
    /// nothing; a blocked rule counts its denials; a rule of concurrency
    /// slots alone its leases).
    pub totals: Option<Totals>,
    /// Its concurrency leases so far, from the counters `/metrics`
    /// exports (`None` for a rule without `concurrency:`).
    pub concurrency: Option<crate::metrics::ConcurrencyTotals>,
    /// A budget rule's totals in its unit (spent, overdrawn, looks
    /// refused), from the counters `/metrics` exports (`None` for a gate).
    pub budget: Option<crate::metrics::budget::BudgetTotals>,
    /// Per second, oldest first.
    pub points: Vec<Totals>,
}

/// The most-denied keys.
#[derive(Debug, Serialize)]
pub struct TopDenied {
    /// One window's length; the keys cover this window and the one before.
    pub window_seconds: u64,
    /// Counters per window.
    pub counters: usize,
    /// Denied permits over both windows, every key.
    pub denied_permits: u64,
    /// The keys, most denied first.
    pub keys: Vec<DeniedKeyStatus>,
}

/// One of the most-denied keys.
#[derive(Debug, Serialize)]
pub struct DeniedKeyStatus {
    /// The rule.
    pub rule: String,
    /// The bucket, as `key=value, …`.
    pub key: String,
    /// Denied permits, at most.
    pub count: u64,
    /// `count - error` denied permits at least.
    pub error: u64,
}

/// The backend.
#[derive(Debug, Serialize)]
pub struct BackendStatus {
    /// `memory`, `redis` or `custom`.
    pub kind: &'static str,
    /// `open`, `degraded`, `ok`, or `n/a` without a failure policy.
    pub breaker: &'static str,
    /// `down`, `degraded`, `ok`, or `n/a` without a store (module docs).
    pub state: &'static str,
    /// Whether its store answers, and why not.
    pub store: Option<StoreHealth>,
    /// Its decisions so far by who took them, when it has a policy.
    pub policy: Option<PolicyTotals>,
    /// The last second.
    pub last: BackendPoint,
    /// Per second, oldest first.
    pub points: Vec<BackendPoint>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_read_as_entries() {
        let bucket = crate::rules::bucket_key([("user", "alice"), ("path", "a:b")]);
        assert_eq!(readable_bucket(&bucket), "user=alice, path=a:b");
        assert_eq!(readable_bucket("not a bucket"), "not a bucket");
        assert_eq!(readable_bucket(""), "");
    }
}
