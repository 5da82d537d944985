//! The `backend:` section: where the counts live (in memory by default,
//! Redis or Redis Cluster when given), read and checked within its mapping.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use super::parse_period;
use crate::yaml::checked_mapping;

/// Where the counts live.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum BackendSettings {
    /// In this process (the default): no Redis needed.
    #[default]
    Memory,
    /// On Redis or Redis Cluster.
    Redis(Box<RedisSettings>),
}

/// Which Redis (`Debug` hides the URLs' credentials).
#[derive(Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server: `redis://host:port/db`.
    Single(String),
    /// A cluster, reached through any of these nodes.
    Cluster(Vec<String>),
}

impl fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisTarget::Single(url) => f.debug_tuple("Single").field(&redact_url(url)).finish(),
            RedisTarget::Cluster(urls) => f
                .debug_tuple("Cluster")
                .field(&urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// The `backend:` section for Redis. Every key but `redis` / `cluster` is
/// optional; the defaults are `tollgate-redis`'s.
///
/// ```yaml
/// backend:
///   redis: redis://127.0.0.1:6379  # or cluster: [redis://10.0.0.1:7000, redis://10.0.0.2:7000]
///   failure_policy: local          # fail_open, fail_closed or local (the default)
///   local_share: 0.25              # local only: the share of each quota decided here
///   deadline: 5ms                  # per decision, whatever Redis does
///   response_timeout: 50ms         # the client's, per reply
///   connection_timeout: 50ms
///   retries: 2
///   breaker: {threshold: 3, open_for: 200ms}
///   deny_cache: 0                  # keys; 0: off
///   key_prefix: tollgate
///   leases: {initial: 8, max: 256, ttl: 100ms, max_keys: 100000}  # absent: off
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RedisSettings {
    /// The server or the cluster.
    pub target: RedisTarget,
    /// What to answer when Redis does not. By default, a local share of 1/4.
    pub failure_policy: tollgate_redis::FailurePolicy,
    /// The longest a decision waits for Redis. By default, 5 ms.
    pub deadline: Duration,
    /// How long the client waits for one reply. By default, 50 ms.
    pub response_timeout: Duration,
    /// How long a connection may take. By default, 50 ms.
    pub connection_timeout: Duration,
    /// Reconnections (single server) or retries (cluster). By default, 2.
    pub retries: u32,
    /// The circuit breaker. By default, 3 failures open it for 200 ms.
    pub breaker: tollgate_redis::BreakerConfig,
    /// Keys held by the deny cache; 0 disables it. By default, 0.
    pub deny_cache: usize,
    /// The prefix of every Redis key. By default, `tollgate`.
    pub key_prefix: String,
    /// Leases, if on. By default, off.
    pub leases: Option<tollgate_redis::LeaseConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BackendYaml {
    #[serde(default)]
    redis: Option<String>,
    #[serde(default)]
    cluster: Option<Vec<String>>,
    #[serde(default)]
    failure_policy: Option<PolicyYaml>,
    #[serde(default)]
    local_share: Option<f64>,
    #[serde(default)]
    deadline: Option<String>,
    #[serde(default)]
    response_timeout: Option<String>,
    #[serde(default)]
    connection_timeout: Option<String>,
    #[serde(default)]
    retries: Option<u32>,
    #[serde(default)]
    breaker: Option<BreakerYaml>,
    #[serde(default)]
    deny_cache: Option<usize>,
    #[serde(default)]
    key_prefix: Option<String>,
    #[serde(default)]
    leases: Option<LeasesYaml>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum PolicyYaml {
    FailOpen,
    FailClosed,
    Local,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BreakerYaml {
    #[serde(default)]
    threshold: Option<u32>,
    #[serde(default)]
    open_for: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LeasesYaml {
    #[serde(default)]
    initial: Option<u64>,
    #[serde(default)]
    max: Option<u64>,
    #[serde(default)]
    ttl: Option<String>,
    #[serde(default)]
    max_keys: Option<usize>,
}

#[derive(Default)]
pub(super) struct BackendSection(pub(super) BackendSettings);

impl<'de> Deserialize<'de> for BackendSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_mapping::<D, BackendYaml, BackendSection>(d)
    }
}

fn duration_of(field: &str, text: Option<&String>, default: Duration) -> Result<Duration, String> {
    match text {
        None => Ok(default),
        Some(text) => parse_period(text).map_err(|error| format!("{field}: {error}")),
    }
}

fn check_url(field: &str, url: &str) -> Result<(), String> {
    use redis::IntoConnectionInfo as _;
    url.into_connection_info()
        .map(drop)
        .map_err(|error| format!("{field}: invalid Redis URL '{}': {error}", redact_url(url)))
}

/// `url` without its credentials (`redis://user:secret@host` →
/// `redis://***@host`), for messages and logs.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let host_start = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..host_start].rfind('@') {
        Some(at) => format!("{}***{}", &url[..scheme_end], &rest[at..]),
        None => url.to_owned(),
    }
}

impl TryFrom<BackendYaml> for BackendSection {
    type Error = String;

    fn try_from(yaml: BackendYaml) -> Result<BackendSection, String> {
        let target = match (yaml.redis, yaml.cluster) {
            (Some(_), Some(_)) => return Err("give either redis or cluster, not both".into()),
            (None, None) => {
                return Err(
                    "redis: missing (give redis: URL or cluster: [URL, ...]; no backend section keeps the counts in memory)"
                        .into(),
                );
            }
            (Some(url), None) => {
                check_url("redis", &url)?;
                RedisTarget::Single(url)
            }
            (None, Some(urls)) => {
                if urls.is_empty() {
                    return Err("cluster: needs at least one node URL".into());
                }
                for (i, url) in urls.iter().enumerate() {
                    check_url(&format!("cluster[{i}]"), url)?;
                }
                RedisTarget::Cluster(urls)
            }
        };
        let policy = yaml.failure_policy.unwrap_or(PolicyYaml::Local);
        let failure_policy = match (policy, yaml.local_share) {
            (PolicyYaml::Local, share) => {
                let share = share.unwrap_or(0.25);
                if !(share > 0.0 && share <= 1.0) {
                    return Err(format!(
                        "local_share: must be above 0 and at most 1, not {share}"
                    ));
                }
                tollgate_redis::FailurePolicy::Local { share }
            }
            (_, Some(_)) => {
                return Err("local_share: only the local failure policy has a share".into());
            }
            (PolicyYaml::FailOpen, None) => tollgate_redis::FailurePolicy::FailOpen,
            (PolicyYaml::FailClosed, None) => tollgate_redis::FailurePolicy::FailClosed,
        };
        let options = tollgate_redis::Options::default();
        let mut breaker = tollgate_redis::BreakerConfig::default();
        if let Some(b) = &yaml.breaker {
            if let Some(threshold) = b.threshold {
                if threshold == 0 {
                    return Err("breaker.threshold: must be at least 1".into());
                }
                breaker.threshold = threshold;
            }
            breaker.open_for =
                duration_of("breaker.open_for", b.open_for.as_ref(), breaker.open_for)?;
        }
        let leases = match &yaml.leases {
            None => None,
            Some(l) => {
                let mut config = tollgate_redis::LeaseConfig::default();
                config.initial = l.initial.unwrap_or(config.initial);
                config.max = l.max.unwrap_or(config.max);
                config.ttl = duration_of("leases.ttl", l.ttl.as_ref(), config.ttl)?;
                config.max_keys = l.max_keys.unwrap_or(config.max_keys);
                if config.initial == 0 {
                    return Err("leases.initial: must be at least 1".into());
                }
                if config.max < config.initial {
                    return Err(format!(
                        "leases.max: must be at least initial ({})",
                        config.initial
                    ));
                }
                if config.max_keys == 0 {
                    return Err("leases.max_keys: must be at least 1".into());
                }
                Some(config)
            }
        };
        let key_prefix = yaml.key_prefix.unwrap_or_else(|| "tollgate".to_owned());
        if key_prefix.contains(['{', '}']) {
            return Err(
                "key_prefix: must not contain '{' or '}' (they would move the hash tag)".into(),
            );
        }
        Ok(BackendSection(BackendSettings::Redis(Box::new(
            RedisSettings {
                target,
                failure_policy,
                deadline: duration_of(
                    "deadline",
                    yaml.deadline.as_ref(),
                    Duration::from_millis(5),
                )?,
                response_timeout: duration_of(
                    "response_timeout",
                    yaml.response_timeout.as_ref(),
                    options.response_timeout,
                )?,
                connection_timeout: duration_of(
                    "connection_timeout",
                    yaml.connection_timeout.as_ref(),
                    options.connection_timeout,
                )?,
                retries: yaml.retries.unwrap_or(options.retries),
                breaker,
                deny_cache: yaml.deny_cache.unwrap_or(0),
                key_prefix,
                leases,
            },
        ))))
    }
}
