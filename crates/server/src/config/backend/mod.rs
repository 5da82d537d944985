//! The `backend:` section: where the counts live (in memory by default,
//! Redis, Redis Cluster or a Sentinel-managed master when given), read and
//! checked within its mapping. How to reach Redis (target, credentials,
//! TLS, module) is read by [`connection`]; the limiter settings here.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use tollgate_redis::{ModuleUse, Secret};

use super::parse_period;
use crate::yaml::checked_mapping;

mod connection;
mod lyft;
mod startup;

use connection::{ModuleYaml, PasswordYaml, SentinelSection, TlsSection};
pub use connection::{RedisTarget, RedisTls, SentinelSettings, redact_url};
pub use lyft::{KeyLayout, LYFT_LAYOUT_VARIABLES, LyftEnvError, LyftLayout, PerSecondRedis};
pub use startup::StartupRetry;

/// Where the counts live.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum BackendSettings {
    /// In this process (the default): no Redis needed.
    #[default]
    Memory,
    /// On Redis or Redis Cluster.
    Redis(Box<RedisSettings>),
}

/// The `backend:` section for Redis. Every key but the target (`redis`,
/// `cluster` or `sentinel`) is optional; the defaults are `tollgate-redis`'s.
///
/// ```yaml
/// backend:
///   redis: redis://127.0.0.1:6379  # or cluster: [redis://10.0.0.1:7000, redis://10.0.0.2:7000]
///   # or sentinel: {sentinels: [redis://10.0.0.1:26379], master: main,
///   #               username: ..., password / password_file / password_env: ...}
///   username: tollgate             # ACL user; absent: the default user
///   password_file: /run/secrets/redis  # or password: ..., or password_env: REDIS_PASSWORD
///   tls: {ca_file: ca.pem, cert_file: client.pem, key_file: client.key}  # each optional
///   module: detect                 # detect (the default), never or require
///   failure_policy: local          # fail_open, fail_closed, local (the default) or error
///   local_share: 0.25              # local only: the share of each quota decided here
///   deadline: 5ms                  # per decision, whatever Redis does (a cluster: 20ms)
///   response_timeout: 50ms         # the client's, per reply
///   connection_timeout: 50ms
///   retries: 2
///   breaker: {threshold: 3, open_for: 200ms}
///   deny_cache: 0                  # keys; 0: off
///   key_prefix: tollgate
///   leases: {initial: 8, max: 256, ttl: 100ms, max_keys: 100000}  # absent: off
///   wait: {replicas: 1, timeout: 2ms}  # WAIT after each check; absent: off
///   key_layout: tollgate           # or lyft: envoyproxy/ratelimit's keys (see `KeyLayout`)
///   lyft: {key_prefix: '', expiration_jitter_max: 300s}  # key_layout: lyft only
///   health_check: false            # true: /healthcheck 500, /readyz 503 while Redis fails
///   startup_retry: {initial: 1s, max: 30s, give_up_after: 10m}  # absent: Redis must answer at once
/// ```
///
/// `failure_policy: error` answers a call whose decision Redis did not
/// take with an error (gRPC `UNAVAILABLE`, HTTP 503), as
/// envoyproxy/ratelimit does: the caller's own setting (Envoy's
/// `failure_mode_deny`) decides. Whatever the policy, a Redis that fails
/// is logged, counted and shown (see [`crate::redis_backend`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RedisSettings {
    /// The server, the cluster or the sentinels.
    pub target: RedisTarget,
    /// ACL user on the data nodes. By default, none (the `default` user).
    pub username: Option<String>,
    /// Password on the data nodes (`password`, `password_file` or
    /// `password_env`). By default, none (or the URL's).
    pub password: Option<Secret>,
    /// TLS for every connection. By default, none (TLS with the system's
    /// roots for a `rediss://` URL).
    pub tls: Option<RedisTls>,
    /// Whether to use the native module. By default, detected.
    pub module: ModuleUse,
    /// What to answer when Redis does not. By default, a local share of 1/4.
    /// With [`fail_calls`](Self::fail_calls) the limiters fail closed
    /// (never answered: the call fails first).
    pub failure_policy: tollgate_redis::FailurePolicy,
    /// `failure_policy: error`: a call one of whose decisions Redis did not
    /// take fails as a whole, as envoyproxy/ratelimit's does. By default,
    /// false.
    pub fail_calls: bool,
    /// Health checks (`/healthcheck`, `/readyz`) fail while Redis does not
    /// answer or refuses this server (`health_check: true`;
    /// envoyproxy/ratelimit's `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`). By
    /// default, false: they answer 200 and the status page shows the
    /// backend degraded.
    pub health_check: bool,
    /// How the start waits for Redis; `None`: Redis must answer at once.
    /// By default, `None` (from envoyproxy/ratelimit's environment, its
    /// `REDIS_STARTUP_*`).
    pub startup_retry: Option<StartupRetry>,
    /// Lines logged once when the backend starts: settings accepted
    /// without effect (from envoyproxy/ratelimit's environment). By
    /// default, none.
    pub notices: Vec<String>,
    /// The longest a decision waits for Redis. By default, the library's:
    /// 5 ms, 20 ms on a cluster (room for a redirection while slots move;
    /// see `tollgate_redis::cluster`).
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
    /// Whether an admission waits for replicas (`wait:`; see
    /// [`tollgate_redis::durability`]). By default, it does not.
    pub durability: tollgate_redis::Durability,
    /// How keys are named and counted. By default, tollgate's layout.
    pub key_layout: KeyLayout,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BackendYaml {
    #[serde(default)]
    redis: Option<String>,
    #[serde(default)]
    cluster: Option<Vec<String>>,
    #[serde(default)]
    sentinel: Option<SentinelSection>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    password_file: Option<PathBuf>,
    #[serde(default)]
    password_env: Option<String>,
    #[serde(default)]
    tls: Option<TlsSection>,
    #[serde(default)]
    module: Option<ModuleYaml>,
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
    #[serde(default)]
    key_layout: Option<String>,
    #[serde(default)]
    lyft: Option<lyft::LyftYaml>,
    #[serde(default)]
    wait: Option<WaitYaml>,
    #[serde(default)]
    health_check: Option<bool>,
    #[serde(default)]
    startup_retry: Option<startup::StartupYaml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitYaml {
    replicas: u32,
    timeout: String,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum PolicyYaml {
    FailOpen,
    FailClosed,
    Local,
    Error,
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

impl TryFrom<BackendYaml> for BackendSection {
    type Error = String;

    fn try_from(yaml: BackendYaml) -> Result<BackendSection, String> {
        let target = connection::target(yaml.redis, yaml.cluster, yaml.sentinel)?;
        let password = PasswordYaml {
            password: yaml.password,
            password_file: yaml.password_file,
            password_env: yaml.password_env,
        }
        .read("")?;
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
            // `error`: the call fails before the policy's answer is used.
            (PolicyYaml::FailClosed | PolicyYaml::Error, None) => {
                tollgate_redis::FailurePolicy::FailClosed
            }
        };
        let fail_calls = policy == PolicyYaml::Error;
        let startup_retry = yaml
            .startup_retry
            .map(startup::StartupYaml::read)
            .transpose()?;
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
        let key_layout = lyft::layout(yaml.key_layout.as_deref(), yaml.lyft)?;
        let default_deadline = match target {
            RedisTarget::Cluster(_) => tollgate_redis::limiter::CLUSTER_DEADLINE,
            _ => tollgate_redis::limiter::DEADLINE,
        };
        let deadline = duration_of("deadline", yaml.deadline.as_ref(), default_deadline)?;
        let durability = match yaml.wait {
            None => tollgate_redis::Durability::Master,
            Some(wait) => {
                let durability = tollgate_redis::Durability::Replicas {
                    replicas: wait.replicas,
                    timeout: duration_of("wait.timeout", Some(&wait.timeout), Duration::ZERO)?,
                };
                durability
                    .check(deadline)
                    .map_err(|error| format!("wait: {error}"))?;
                durability
            }
        };
        Ok(BackendSection(BackendSettings::Redis(Box::new(
            RedisSettings {
                target,
                username: yaml.username,
                password,
                tls: yaml.tls.map(|TlsSection(tls)| tls),
                module: yaml.module.map_or(ModuleUse::Detect, ModuleUse::from),
                failure_policy,
                fail_calls,
                health_check: yaml.health_check.unwrap_or(false),
                startup_retry,
                notices: Vec::new(),
                deadline,
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
                key_layout,
                durability,
            },
        ))))
    }
}
