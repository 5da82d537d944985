//! The Redis backend's key layout, and envoyproxy/ratelimit's variables
//! that shape it: `CACHE_KEY_PREFIX`, `EXPIRATION_JITTER_MAX_SECONDS`,
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` and the `REDIS_PERSECOND*`
//! family (a second Redis for per-second limits). The YAML reads
//!
//! ```yaml
//! backend:
//!   redis: redis://10.0.0.1:6379
//!   key_layout: lyft                      # tollgate (the default) or lyft
//!   lyft:                                 # key_layout: lyft only; each key optional
//!     key_prefix: "ratelimit:"            # CACHE_KEY_PREFIX; by default ""
//!     expiration_jitter_max: 300s         # EXPIRATION_JITTER_MAX_SECONDS; by default 300s
//!     stop_increment_when_over_limit: false  # by default false
//!     count_over_limit: false             # by default false; from Lyft's environment true
//!     per_second: {redis: redis://10.0.0.2:6379}  # REDIS_PERSECOND_*: redis, cluster
//!                                         # or sentinel, username, password..., tls
//! ```
//!
//! and [`LyftLayout::from_env`] reads the same from Lyft's variables through
//! an injectable lookup. What the layout does is in
//! [`crate::redis_backend`]'s `lyft` module.
//!
//! # Decisions
//!
//! - **`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`** keeps Lyft's meaning for
//!   a request's *other* descriptors: `false` (Lyft's default), each
//!   descriptor is counted on its own, so one over its limit does not spare
//!   the others; `true`, a request with a descriptor over its limit counts
//!   none of its descriptors (Lyft: a look at every key first, then the
//!   increments; here too, so a race between the two steps can count the
//!   others, as in Lyft). Without `count_over_limit` the refused
//!   descriptor itself is never counted, whatever the value (tollgate's
//!   rule: a refusal writes nothing), where Lyft counts it: see the
//!   backend's module docs for what that changes.
//! - **`count_over_limit`** (true from Lyft's environment, false by
//!   default in the YAML): every hit is counted, over the limit too, with
//!   Lyft's own `INCRBY` + `EXPIRE`, so that the answers are Lyft's
//!   whichever pod answers (a mixed fleet, Lyft's `token-quota.sh` flow of
//!   hits 0 then 1); with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` a
//!   request whose descriptors would go over counts only those (Lyft's
//!   `getHitsAddend`). Off, tollgate's rule holds: a refusal writes
//!   nothing.
//! - **`EXPIRATION_JITTER_MAX_SECONDS`**: each write's TTL is the unit's
//!   length plus a uniform random `[0, max)` seconds, as Lyft; 0 or less
//!   (Lyft's test is `> 0`) is no jitter.
//! - **`REDIS_PERSECOND`**: limits of unit `second` count on the second
//!   Redis, every other limit on the first, as Lyft. The second Redis has
//!   its own target, credentials and TLS switch; it shares the first's
//!   timeouts, deadline, breaker and failure policy. With `TLS` on it takes
//!   the first's certificates (`REDIS_TLS_*` are shared in Lyft too), or the
//!   system's roots if the first has none.
//! - **Accepted, no effect**: `REDIS_PERSECOND_POOL_SIZE`,
//!   `_PIPELINE_WINDOW`, `_PIPELINE_LIMIT`, `_CLUSTER_PIPELINE_PARALLELISM`,
//!   `_POOL_ON_EMPTY_BEHAVIOR` and `_TIMEOUT` (tollgate multiplexes and
//!   batches one connection per server, and bounds each decision by its
//!   deadline): each is still parsed as Lyft parses it, so that a value
//!   Lyft would refuse is refused here too.
//! - **Unix sockets** (`REDIS_PERSECOND_SOCKET_TYPE=unix`, Lyft's default)
//!   reach a single server only; with a cluster or sentinels it is refused.

use std::time::Duration;

use serde::Deserialize;
use tollgate_redis::Secret;

use super::connection::{self, PasswordYaml, RedisTarget, RedisTls, SentinelSection, TlsSection};
use crate::yaml::checked_mapping;

/// How the Redis backend names and counts its keys.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum KeyLayout {
    /// tollgate's keys (`<key_prefix>{<rule>|<bucket>}:<limit>`): every
    /// algorithm, hash-tagged per bucket. The default.
    #[default]
    Tollgate,
    /// envoyproxy/ratelimit's keys and counts for fixed-window rules (the
    /// other rules keep tollgate's keys).
    Lyft(Box<LyftLayout>),
}

/// `key_layout: lyft`'s settings (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct LyftLayout {
    /// Before every key (`CACHE_KEY_PREFIX`). By default, empty.
    pub key_prefix: String,
    /// The most random time added to each key's TTL, in whole seconds
    /// (`EXPIRATION_JITTER_MAX_SECONDS`). By default, 300 s (Lyft's).
    pub expiration_jitter_max: Duration,
    /// A request with a descriptor over its limit counts none of its
    /// descriptors (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`). By default,
    /// false.
    pub stop_increment_when_over_limit: bool,
    /// Every hit counts, over the limit too, as Lyft's pods count
    /// (module docs). By default, false (from Lyft's environment, true).
    pub count_over_limit: bool,
    /// Where limits of unit `second` count (`REDIS_PERSECOND*`). By
    /// default, on the backend's Redis with the others.
    pub per_second: Option<PerSecondRedis>,
}

impl Default for LyftLayout {
    fn default() -> LyftLayout {
        LyftLayout {
            key_prefix: String::new(),
            expiration_jitter_max: Duration::from_secs(DEFAULT_JITTER_SECS),
            stop_increment_when_over_limit: false,
            count_over_limit: false,
            per_second: None,
        }
    }
}

/// Lyft's `EXPIRATION_JITTER_MAX_SECONDS` default.
const DEFAULT_JITTER_SECS: u64 = 300;

/// The second Redis, for per-second limits.
#[derive(Debug, Clone, PartialEq)]
pub struct PerSecondRedis {
    /// The server, the cluster or the sentinels.
    pub target: RedisTarget,
    /// ACL user. By default, none.
    pub username: Option<String>,
    /// Password. By default, none.
    pub password: Option<Secret>,
    /// TLS. By default, none.
    pub tls: Option<RedisTls>,
}

/// A variable of Lyft's that cannot be honoured as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {message}")]
pub struct LyftEnvError {
    /// The variable.
    pub variable: &'static str,
    /// What is wrong with its value.
    pub message: String,
}

fn bad(variable: &'static str, message: impl Into<String>) -> LyftEnvError {
    LyftEnvError {
        variable,
        message: message.into(),
    }
}

/// Every variable [`LyftLayout::from_env`] reads.
pub const LYFT_LAYOUT_VARIABLES: [&str; 16] = [
    "CACHE_KEY_PREFIX",
    "EXPIRATION_JITTER_MAX_SECONDS",
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    "REDIS_PERSECOND",
    "REDIS_PERSECOND_SOCKET_TYPE",
    "REDIS_PERSECOND_TYPE",
    "REDIS_PERSECOND_URL",
    "REDIS_PERSECOND_POOL_SIZE",
    "REDIS_PERSECOND_AUTH",
    "REDIS_PERSECOND_SENTINEL_AUTH",
    "REDIS_PERSECOND_TLS",
    "REDIS_PERSECOND_PIPELINE_WINDOW",
    "REDIS_PERSECOND_PIPELINE_LIMIT",
    "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
    "REDIS_PERSECOND_TIMEOUT",
    "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
];

impl LyftLayout {
    /// The layout Lyft's variables ask for, read through `lookup` (the
    /// process environment in production: `|name| std::env::var(name).ok()`).
    /// `main_tls` is the first Redis's TLS, which the second takes when
    /// `REDIS_PERSECOND_TLS` is on (see the module docs).
    ///
    /// # Errors
    ///
    /// [`LyftEnvError`] naming the first variable whose value Lyft would
    /// refuse or tollgate cannot honour.
    pub fn from_env(
        lookup: &dyn Fn(&str) -> Option<String>,
        main_tls: Option<&RedisTls>,
    ) -> Result<LyftLayout, LyftEnvError> {
        let get = |name: &str| lookup(name).filter(|value| !value.is_empty());
        let key_prefix = lookup("CACHE_KEY_PREFIX").unwrap_or_default();
        let jitter = match get("EXPIRATION_JITTER_MAX_SECONDS") {
            None => DEFAULT_JITTER_SECS,
            Some(text) => {
                let seconds: i64 = text.trim().parse().map_err(|_| {
                    bad(
                        "EXPIRATION_JITTER_MAX_SECONDS",
                        format!("'{text}' is not a whole number of seconds"),
                    )
                })?;
                u64::try_from(seconds).unwrap_or(0)
            }
        };
        let stop = go_bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", get)?;
        let per_second = if go_bool("REDIS_PERSECOND", get)? {
            Some(per_second_from_env(get, main_tls)?)
        } else {
            None
        };
        Ok(LyftLayout {
            key_prefix,
            expiration_jitter_max: Duration::from_secs(jitter),
            stop_increment_when_over_limit: stop,
            count_over_limit: true,
            per_second,
        })
    }
}

/// A boolean as Go's `strconv.ParseBool` reads it; unset or empty: false.
fn go_bool(
    variable: &'static str,
    get: impl Fn(&str) -> Option<String>,
) -> Result<bool, LyftEnvError> {
    match get(variable) {
        None => Ok(false),
        Some(text) => crate::config::go_syntax::parse_bool(&text).ok_or_else(|| {
            bad(
                variable,
                format!("'{text}' is not a boolean (true or false)"),
            )
        }),
    }
}

/// A duration as Go's `time.ParseDuration` reads it (`0`, `150us`,
/// `1m30s`…): checked only, the value has no effect here.
fn check_go_duration(variable: &'static str, text: &str) -> Result<(), LyftEnvError> {
    // Go accepts a negative duration here (these values have no effect).
    let text = text.trim();
    let magnitude = text.strip_prefix('-').unwrap_or(text);
    crate::config::go_syntax::parse_duration(magnitude)
        .map(|_| ())
        .map_err(|_| bad(variable, format!("'{text}' is not a duration (150us, 10s)")))
}

fn check_int(
    variable: &'static str,
    get: &impl Fn(&str) -> Option<String>,
) -> Result<(), LyftEnvError> {
    match get(variable) {
        Some(text) if text.trim().parse::<i64>().is_err() => {
            Err(bad(variable, format!("'{text}' is not a whole number")))
        }
        _ => Ok(()),
    }
}

/// Lyft's `user:password` or `password`.
fn credentials(auth: Option<String>) -> (Option<String>, Option<Secret>) {
    match auth {
        None => (None, None),
        Some(auth) => match auth.split_once(':') {
            Some((user, password)) => (
                Some(user.to_owned()),
                Some(Secret::from(password.to_owned())),
            ),
            None => (None, Some(Secret::from(auth))),
        },
    }
}

fn per_second_from_env(
    get: impl Fn(&str) -> Option<String>,
    main_tls: Option<&RedisTls>,
) -> Result<PerSecondRedis, LyftEnvError> {
    for variable in [
        "REDIS_PERSECOND_POOL_SIZE",
        "REDIS_PERSECOND_PIPELINE_LIMIT",
        "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
    ] {
        check_int(variable, &get)?;
    }
    for variable in ["REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_TIMEOUT"] {
        if let Some(text) = get(variable) {
            check_go_duration(variable, &text)?;
        }
    }
    if let Some(text) = get("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR") {
        if !["WAIT", "CREATE", "ERROR"].contains(&text.to_ascii_uppercase().as_str()) {
            return Err(bad(
                "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
                format!("'{text}' is not WAIT, CREATE or ERROR"),
            ));
        }
    }
    let tls = go_bool("REDIS_PERSECOND_TLS", &get)?;
    let socket = get("REDIS_PERSECOND_SOCKET_TYPE").unwrap_or_else(|| "unix".into());
    let unix = match socket.as_str() {
        "unix" => true,
        "tcp" => false,
        other => {
            return Err(bad(
                "REDIS_PERSECOND_SOCKET_TYPE",
                format!("'{other}' is not tcp or unix"),
            ));
        }
    };
    let url = get("REDIS_PERSECOND_URL")
        .unwrap_or_else(|| "/var/run/nutcracker/ratelimitpersecond.sock".into());
    let kind = get("REDIS_PERSECOND_TYPE").unwrap_or_else(|| "SINGLE".into());
    let (username, password) = credentials(get("REDIS_PERSECOND_AUTH"));
    let scheme = if tls { "rediss" } else { "redis" };
    let tcp_url = |address: &str| {
        let address = address.trim();
        if address.contains("://") {
            address.to_owned()
        } else {
            format!("{scheme}://{address}")
        }
    };
    let target = match kind.to_ascii_lowercase().as_str() {
        "single" if unix => RedisTarget::Single(format!("unix://{}", url.trim())),
        "single" => RedisTarget::Single(tcp_url(&url)),
        "cluster" | "sentinel" if unix => {
            return Err(bad(
                "REDIS_PERSECOND_SOCKET_TYPE",
                format!(
                    "unix sockets reach one server, not a {}",
                    kind.to_ascii_lowercase()
                ),
            ));
        }
        "cluster" => RedisTarget::Cluster(url.split(',').map(tcp_url).collect()),
        "sentinel" => {
            let mut parts = url.split(',');
            let master = parts.next().unwrap_or_default().trim().to_owned();
            let sentinels: Vec<String> = parts.map(tcp_url).collect();
            if master.is_empty() || sentinels.is_empty() {
                return Err(bad(
                    "REDIS_PERSECOND_URL",
                    "a sentinel URL is <master name>,<sentinel1>,...,<sentinelN>",
                ));
            }
            let (sentinel_user, sentinel_password) =
                credentials(get("REDIS_PERSECOND_SENTINEL_AUTH"));
            RedisTarget::Sentinel(connection::SentinelSettings {
                sentinels,
                master,
                username: sentinel_user,
                password: sentinel_password,
            })
        }
        other => {
            return Err(bad(
                "REDIS_PERSECOND_TYPE",
                format!("'{other}' is not SINGLE, CLUSTER or SENTINEL"),
            ));
        }
    };
    Ok(PerSecondRedis {
        target,
        username,
        password,
        tls: tls.then(|| main_tls.cloned().unwrap_or_default()),
    })
}

/// `lyft:` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct LyftYaml {
    #[serde(default)]
    key_prefix: Option<String>,
    #[serde(default)]
    expiration_jitter_max: Option<String>,
    #[serde(default)]
    stop_increment_when_over_limit: Option<bool>,
    #[serde(default)]
    count_over_limit: Option<bool>,
    #[serde(default)]
    per_second: Option<PerSecondSection>,
}

/// `per_second:` as written: a target and its credentials.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PerSecondYaml {
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
    password_file: Option<std::path::PathBuf>,
    #[serde(default)]
    password_env: Option<String>,
    #[serde(default)]
    tls: Option<TlsSection>,
}

struct PerSecondSection(PerSecondRedis);

impl<'de> Deserialize<'de> for PerSecondSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_mapping::<D, PerSecondYaml, PerSecondSection>(d)
    }
}

impl TryFrom<PerSecondYaml> for PerSecondSection {
    type Error = String;

    fn try_from(yaml: PerSecondYaml) -> Result<PerSecondSection, String> {
        let target = connection::target(yaml.redis, yaml.cluster, yaml.sentinel)?;
        let password = PasswordYaml {
            password: yaml.password,
            password_file: yaml.password_file,
            password_env: yaml.password_env,
        }
        .read("")?;
        Ok(PerSecondSection(PerSecondRedis {
            target,
            username: yaml.username,
            password,
            tls: yaml.tls.map(|TlsSection(tls)| tls),
        }))
    }
}

/// The layout of `key_layout:` and `lyft:` (see the module docs).
pub(super) fn layout(
    key_layout: Option<&str>,
    lyft: Option<LyftYaml>,
) -> Result<KeyLayout, String> {
    match (key_layout.unwrap_or("tollgate"), lyft) {
        ("tollgate", None) => Ok(KeyLayout::Tollgate),
        ("tollgate", Some(_)) => Err("lyft: only with key_layout: lyft".into()),
        ("lyft", lyft) => {
            let yaml = lyft.unwrap_or_default();
            let mut layout = LyftLayout::default();
            if let Some(prefix) = yaml.key_prefix {
                layout.key_prefix = prefix;
            }
            if let Some(text) = yaml.expiration_jitter_max {
                layout.expiration_jitter_max = match text.trim() {
                    "0" | "0s" => Duration::ZERO,
                    text => {
                        let jitter = super::parse_period(text)
                            .map_err(|error| format!("lyft.expiration_jitter_max: {error}"))?;
                        if jitter.subsec_nanos() != 0 {
                            return Err(
                                "lyft.expiration_jitter_max: a whole number of seconds (TTLs are in seconds)"
                                    .into(),
                            );
                        }
                        jitter
                    }
                };
            }
            if let Some(count) = yaml.count_over_limit {
                layout.count_over_limit = count;
            }
            if let Some(stop) = yaml.stop_increment_when_over_limit {
                layout.stop_increment_when_over_limit = stop;
            }
            layout.per_second = yaml.per_second.map(|PerSecondSection(redis)| redis);
            Ok(KeyLayout::Lyft(Box::new(layout)))
        }
        (other, _) => Err(format!("key_layout: '{other}' is not tollgate or lyft")),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<LyftLayout, LyftEnvError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        LyftLayout::from_env(&|name| map.get(name).cloned(), None)
    }

    #[test]
    fn lyfts_defaults() {
        // The YAML's defaults, but that Lyft's environment counts refusals.
        assert_eq!(
            env(&[]).unwrap(),
            LyftLayout {
                count_over_limit: true,
                ..LyftLayout::default()
            }
        );
        assert_eq!(
            LyftLayout::default().expiration_jitter_max,
            Duration::from_secs(300)
        );
    }

    #[test]
    fn variables_read_as_lyft_reads_them() {
        let layout = env(&[
            ("CACHE_KEY_PREFIX", "rl:"),
            ("EXPIRATION_JITTER_MAX_SECONDS", "0"),
            ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "True"),
            ("REDIS_PERSECOND", "1"),
            ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
            ("REDIS_PERSECOND_URL", "redis-persecond:6379"),
            ("REDIS_PERSECOND_AUTH", "user:pass"),
            ("REDIS_PERSECOND_POOL_SIZE", "5"),
            ("REDIS_PERSECOND_PIPELINE_WINDOW", "150us"),
            ("REDIS_PERSECOND_PIPELINE_LIMIT", "8"),
        ])
        .unwrap();
        assert_eq!(layout.key_prefix, "rl:");
        assert_eq!(layout.expiration_jitter_max, Duration::ZERO);
        assert!(layout.stop_increment_when_over_limit);
        let per_second = layout.per_second.unwrap();
        assert_eq!(
            per_second.target,
            RedisTarget::Single("redis://redis-persecond:6379".into())
        );
        assert_eq!(per_second.username.as_deref(), Some("user"));
        assert!(per_second.password.is_some());
        assert_eq!(per_second.tls, None);
        // Negative: no jitter, as Lyft (`> 0`).
        assert_eq!(
            env(&[("EXPIRATION_JITTER_MAX_SECONDS", "-5")])
                .unwrap()
                .expiration_jitter_max,
            Duration::ZERO
        );
        // Lyft's default socket is unix.
        let unix = env(&[
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_URL", "/tmp/r.sock"),
        ])
        .unwrap()
        .per_second
        .unwrap();
        assert_eq!(
            unix.target,
            RedisTarget::Single("unix:///tmp/r.sock".into())
        );
        let cluster = env(&[
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
            ("REDIS_PERSECOND_TYPE", "cluster"),
            ("REDIS_PERSECOND_TLS", "true"),
            ("REDIS_PERSECOND_URL", "a:7000,b:7000"),
        ])
        .unwrap()
        .per_second
        .unwrap();
        assert_eq!(
            cluster.target,
            RedisTarget::Cluster(vec!["rediss://a:7000".into(), "rediss://b:7000".into()])
        );
        assert_eq!(cluster.tls, Some(RedisTls::default()));
        let sentinel = env(&[
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
            ("REDIS_PERSECOND_TYPE", "SENTINEL"),
            ("REDIS_PERSECOND_URL", "main,s1:26379,s2:26379"),
            ("REDIS_PERSECOND_SENTINEL_AUTH", "secret"),
        ])
        .unwrap()
        .per_second
        .unwrap();
        let RedisTarget::Sentinel(sentinel) = sentinel.target else {
            panic!("a sentinel target");
        };
        assert_eq!(sentinel.master, "main");
        assert_eq!(sentinel.sentinels.len(), 2);
        assert!(sentinel.password.is_some());
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (pairs, variable) in [
            (
                vec![("EXPIRATION_JITTER_MAX_SECONDS", "5m")],
                "EXPIRATION_JITTER_MAX_SECONDS",
            ),
            (
                vec![("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "yes")],
                "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
            ),
            (vec![("REDIS_PERSECOND", "on")], "REDIS_PERSECOND"),
            (
                vec![
                    ("REDIS_PERSECOND", "true"),
                    ("REDIS_PERSECOND_TYPE", "ring"),
                ],
                "REDIS_PERSECOND_TYPE",
            ),
            (
                vec![
                    ("REDIS_PERSECOND", "true"),
                    ("REDIS_PERSECOND_SOCKET_TYPE", "udp"),
                ],
                "REDIS_PERSECOND_SOCKET_TYPE",
            ),
            (
                vec![
                    ("REDIS_PERSECOND", "true"),
                    ("REDIS_PERSECOND_TYPE", "CLUSTER"),
                ],
                "REDIS_PERSECOND_SOCKET_TYPE",
            ),
            (
                vec![
                    ("REDIS_PERSECOND", "true"),
                    ("REDIS_PERSECOND_POOL_SIZE", "ten"),
                ],
                "REDIS_PERSECOND_POOL_SIZE",
            ),
            (
                vec![
                    ("REDIS_PERSECOND", "true"),
                    ("REDIS_PERSECOND_PIPELINE_WINDOW", "150"),
                ],
                "REDIS_PERSECOND_PIPELINE_WINDOW",
            ),
            (
                vec![
                    ("REDIS_PERSECOND", "true"),
                    ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
                    ("REDIS_PERSECOND_TYPE", "SENTINEL"),
                    ("REDIS_PERSECOND_URL", "main"),
                ],
                "REDIS_PERSECOND_URL",
            ),
        ] {
            let error = env(&pairs).unwrap_err();
            assert_eq!(error.variable, variable, "{pairs:?}: {error}");
            assert!(error.to_string().starts_with(variable), "{error}");
        }
    }

    fn yaml(backend: &str) -> Result<KeyLayout, crate::config::ConfigError> {
        let text = format!("backend:\n  redis: redis://a\n{backend}domain: d\n");
        let config = crate::config::Config::from_yaml(std::path::Path::new("t.yaml"), &text)?;
        match config.backend {
            crate::config::BackendSettings::Redis(redis) => Ok(redis.key_layout),
            crate::config::BackendSettings::Memory => panic!("a redis backend"),
        }
    }

    #[test]
    fn the_yaml_layout() {
        assert_eq!(yaml("").unwrap(), KeyLayout::Tollgate);
        assert_eq!(
            yaml("  key_layout: lyft\n").unwrap(),
            KeyLayout::Lyft(Box::default())
        );
        let KeyLayout::Lyft(layout) = yaml(
            "  key_layout: lyft\n  lyft: {key_prefix: 'rl:', expiration_jitter_max: 10s, stop_increment_when_over_limit: true, per_second: {redis: 'redis://b:6379', password: pw}}\n",
        )
        .unwrap() else {
            panic!("lyft");
        };
        assert_eq!(layout.key_prefix, "rl:");
        assert_eq!(layout.expiration_jitter_max, Duration::from_secs(10));
        assert!(layout.stop_increment_when_over_limit);
        let per_second = layout.per_second.unwrap();
        assert_eq!(
            per_second.target,
            RedisTarget::Single("redis://b:6379".into())
        );
        assert!(per_second.password.is_some());
        for (text, needle) in [
            ("  key_layout: envoy\n", "key_layout"),
            (
                "  lyft: {key_prefix: x}\n",
                "lyft: only with key_layout: lyft",
            ),
            (
                "  key_layout: lyft\n  lyft: {expiration_jitter_max: 1500ms}\n",
                "lyft.expiration_jitter_max",
            ),
            ("  key_layout: lyft\n  lyft: {prefix: x}\n", "prefix"),
            ("  key_layout: lyft\n  lyft: {per_second: {}}\n", "redis"),
        ] {
            let error = yaml(text).unwrap_err();
            assert!(error.to_string().contains(needle), "{needle}: {error}");
        }
    }

    #[test]
    fn go_durations() {
        for ok in ["0", "150us", "1m30s", "10s", "1.5h", "500µs"] {
            assert!(check_go_duration("V", ok).is_ok(), "{ok}");
        }
        for bad in ["", "150", "s", "10x", "1m30"] {
            assert!(check_go_duration("V", bad).is_err(), "{bad}");
        }
    }
}
