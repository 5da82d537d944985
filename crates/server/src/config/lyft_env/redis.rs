//! envoyproxy/ratelimit's Redis variables, turned into the YAML door's
//! `backend:` section and read by the same reader (one set of checks).
//!
//! # Decisions
//!
//! - `REDIS_URL` is read in `REDIS_TYPE`'s form: `host:port` (`SINGLE`),
//!   `host:port,host:port,…` (`CLUSTER`, the seed nodes), or
//!   `master,host:port,…` (`SENTINEL`: the master's name, then the
//!   sentinels). With `REDIS_SOCKET_TYPE=unix` it is the socket's path
//!   (`SINGLE` only: a cluster or sentinels over a Unix socket is refused,
//!   as envoyproxy/ratelimit cannot dial it either). Its default is
//!   envoyproxy/ratelimit's (`unix`, `/var/run/nutcracker/ratelimit.sock`).
//! - `REDIS_AUTH` is `password` or `user:password` (split at the first
//!   `:`); `REDIS_SENTINEL_AUTH` is the sentinels' password.
//! - `REDIS_TLS=true` is TLS with the system's roots; `REDIS_TLS_CACERT`,
//!   `REDIS_TLS_CLIENT_CERT` and `REDIS_TLS_CLIENT_KEY` add a CA and a
//!   client identity. With `REDIS_TLS` unset those three are accepted and
//!   have no effect, as there (a Deployment may mount certificates with
//!   TLS off); the backend logs once at start that they are ignored.
//!   `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true` is refused (tollgate
//!   always verifies the server's name).
//! - `REDIS_TIMEOUT` (10 s by default, as there) bounds each decision
//!   (tollgate's deadline), each reply and each connection: a drop-in
//!   waits for Redis as envoyproxy/ratelimit waits.
//! - **A Redis that fails is an error for the call**, as
//!   envoyproxy/ratelimit makes it (`failure_policy: error`): a decision
//!   Redis did not take (an error, a refusal such as `NOAUTH`, a timeout,
//!   the breaker open) fails the whole call (gRPC `UNAVAILABLE`), counted
//!   in `ratelimit.service.call.should_rate_limit.redis_error`, and
//!   Envoy's `failure_mode_deny` decides. tollgate's own variable
//!   `TOLLGATE_REDIS_FAILURE_POLICY` (`error`, `fail_open`, `fail_closed`,
//!   `local` or `local:<share>`) chooses another policy explicitly.
//! - `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true` makes `/healthcheck`
//!   answer 500 while Redis does not answer or refuses this server
//!   (`health_check: true`); unset, it answers 200 as there, and the status
//!   page shows the backend degraded.
//! - `REDIS_STARTUP_INITIAL_INTERVAL` (1 s), `REDIS_STARTUP_MAX_INTERVAL`
//!   (30 s) and `REDIS_STARTUP_MAX_ELAPSED_TIME` (0: forever) are the
//!   start's wait for Redis (`startup_retry:`): it `PING`s, and retries
//!   with a WARN line per try until `PONG`; the listeners are bound once
//!   Redis answered, as envoyproxy/ratelimit binds them.
//! - `LOCAL_CACHE_SIZE_IN_BYTES` (envoyproxy/ratelimit's cache of keys over
//!   their limit, in bytes) sizes the deny cache at one key per 128 bytes
//!   (at least one key when the size is above 0).
//! - `REDIS_POOL_SIZE`, `REDIS_PIPELINE_WINDOW`, `REDIS_PIPELINE_LIMIT`,
//!   `REDIS_CLUSTER_PIPELINE_PARALLELISM` are accepted and do nothing:
//!   tollgate multiplexes and pipelines every call on shared connections.
//!   `REDIS_POOL_ON_EMPTY_BEHAVIOR` other than `WAIT` is refused, as
//!   envoyproxy/ratelimit refuses it.

use std::time::Duration;

use serde_yaml_ng::{Mapping, Value};

use super::{Env, EnvError};
use crate::config::BackendSettings;
use crate::config::backend::{BackendSection, StartupRetry};

/// Bytes of `LOCAL_CACHE_SIZE_IN_BYTES` per deny-cache key.
const BYTES_PER_CACHED_KEY: usize = 128;

/// The Redis backend of `env`.
pub(super) fn backend(env: &Env) -> Result<BackendSettings, EnvError> {
    let socket = env.string("REDIS_SOCKET_TYPE", "unix").to_ascii_lowercase();
    let kind = env.string("REDIS_TYPE", "SINGLE").to_ascii_lowercase();
    let url = env.string("REDIS_URL", "/var/run/nutcracker/ratelimit.sock");
    let tls = env.bool("REDIS_TLS", false)?;
    let scheme = if tls { "rediss" } else { "redis" };
    let mut yaml = Mapping::new();
    let node = |address: &str| format!("{scheme}://{}", address.trim());
    match (socket.as_str(), kind.as_str()) {
        ("unix", "single") => {
            if tls {
                return Err(EnvError::new(
                    "REDIS_TLS",
                    "TLS over a Unix socket is not supported (set REDIS_SOCKET_TYPE=tcp)",
                ));
            }
            insert(&mut yaml, "redis", format!("unix://{url}"));
        }
        ("unix", _) => {
            return Err(EnvError::new(
                "REDIS_SOCKET_TYPE",
                format!("unix: a {kind} Redis is reached over tcp (set REDIS_SOCKET_TYPE=tcp)"),
            ));
        }
        ("tcp", "single") => insert(&mut yaml, "redis", node(&url)),
        ("tcp", "cluster") => {
            let nodes: Vec<Value> = url.split(',').map(|a| Value::String(node(a))).collect();
            yaml.insert("cluster".into(), Value::Sequence(nodes));
        }
        ("tcp", "sentinel") => {
            let mut parts = url.split(',');
            let master = parts.next().unwrap_or_default().trim().to_owned();
            let sentinels: Vec<Value> = parts.map(|a| Value::String(node(a))).collect();
            if master.is_empty() || sentinels.is_empty() {
                return Err(EnvError::new(
                    "REDIS_URL",
                    "with REDIS_TYPE=SENTINEL, give the master's name then the sentinels: master,host:port,host:port",
                ));
            }
            let mut sentinel = Mapping::new();
            insert(&mut sentinel, "master", master);
            sentinel.insert("sentinels".into(), Value::Sequence(sentinels));
            if let Some(password) = env.get("REDIS_SENTINEL_AUTH") {
                insert(&mut sentinel, "password", password.to_owned());
            }
            yaml.insert("sentinel".into(), Value::Mapping(sentinel));
        }
        ("tcp", other) => {
            return Err(EnvError::new(
                "REDIS_TYPE",
                format!("'{other}' is not a Redis type (SINGLE, CLUSTER or SENTINEL)"),
            ));
        }
        (other, _) => {
            return Err(EnvError::new(
                "REDIS_SOCKET_TYPE",
                format!("'{other}' is not a socket type (tcp or unix)"),
            ));
        }
    }
    if let Some(auth) = env.get("REDIS_AUTH") {
        match auth.split_once(':') {
            Some((user, password)) => {
                insert(&mut yaml, "username", user.to_owned());
                insert(&mut yaml, "password", password.to_owned());
            }
            None => insert(&mut yaml, "password", auth.to_owned()),
        }
    }
    if env.bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)? {
        return Err(EnvError::new(
            "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
            "true is not supported: tollgate always verifies the Redis server's name (give its CA with REDIS_TLS_CACERT)",
        ));
    }
    let files = [
        ("REDIS_TLS_CACERT", "ca_file"),
        ("REDIS_TLS_CLIENT_CERT", "cert_file"),
        ("REDIS_TLS_CLIENT_KEY", "key_file"),
    ];
    let mut tls_section = Mapping::new();
    let mut notices = Vec::new();
    for (variable, key) in files {
        if let Some(path) = env.get(variable) {
            if !tls {
                notices.push(format!(
                    "{variable} is set but REDIS_TLS is not: ignored, Redis is reached without TLS (as envoyproxy/ratelimit does)"
                ));
                continue;
            }
            insert(&mut tls_section, key, path.to_owned());
        }
    }
    if !tls_section.is_empty() {
        yaml.insert("tls".into(), Value::Mapping(tls_section));
    }
    let timeout = env.duration("REDIS_TIMEOUT", std::time::Duration::from_secs(10))?;
    if timeout.is_zero() {
        return Err(EnvError::new("REDIS_TIMEOUT", "must be above 0"));
    }
    let millis = format!("{}ms", timeout.as_millis().max(1));
    for key in ["deadline", "response_timeout", "connection_timeout"] {
        insert(&mut yaml, key, millis.clone());
    }
    let cache_bytes: usize = env.number("LOCAL_CACHE_SIZE_IN_BYTES", 0)?;
    if cache_bytes > 0 {
        let keys = (cache_bytes / BYTES_PER_CACHED_KEY).max(1);
        yaml.insert("deny_cache".into(), Value::Number(keys.into()));
    }
    let on_empty = env.string("REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT");
    if !on_empty.eq_ignore_ascii_case("wait") {
        return Err(EnvError::new(
            "REDIS_POOL_ON_EMPTY_BEHAVIOR",
            format!("'{on_empty}' is not supported (envoyproxy/ratelimit refuses it too): WAIT"),
        ));
    }
    // Accepted and checked, without effect (see the module docs).
    let _: usize = env.number("REDIS_POOL_SIZE", 10)?;
    let _ = env.duration("REDIS_PIPELINE_WINDOW", std::time::Duration::ZERO)?;
    let _: usize = env.number("REDIS_PIPELINE_LIMIT", 0)?;
    let _: usize = env.number("REDIS_CLUSTER_PIPELINE_PARALLELISM", 1)?;
    let (policy, share) = failure_policy(env)?;
    insert(&mut yaml, "failure_policy", policy.to_owned());
    if let Some(share) = share {
        yaml.insert("local_share".into(), Value::Number(share.into()));
    }
    let section: BackendSection = serde_yaml_ng::from_value(Value::Mapping(yaml))
        .map_err(|error| EnvError::new("REDIS_URL", format!("the Redis variables: {error}")))?;
    let mut backend = section.0;
    if let BackendSettings::Redis(redis) = &mut backend {
        redis.health_check = env.bool("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false)?;
        redis.startup_retry = Some(startup_retry(env)?);
        redis.notices = notices;
    }
    Ok(backend)
}

/// tollgate's `TOLLGATE_REDIS_FAILURE_POLICY`, else envoyproxy/ratelimit's
/// behaviour (`error`): the YAML's `failure_policy` and `local_share`.
fn failure_policy(env: &Env) -> Result<(&'static str, Option<f64>), EnvError> {
    const VARIABLE: &str = "TOLLGATE_REDIS_FAILURE_POLICY";
    let text = env.string(VARIABLE, "error").to_ascii_lowercase();
    let (name, share) = match text.split_once(':') {
        Some((name, share)) => (name.trim().to_owned(), Some(share.trim().to_owned())),
        None => (text.trim().to_owned(), None),
    };
    let policy = match name.as_str() {
        "error" => "error",
        "fail_open" => "fail_open",
        "fail_closed" => "fail_closed",
        "local" => "local",
        other => {
            return Err(EnvError::new(
                VARIABLE,
                format!(
                    "'{other}' is not a policy (error, fail_open, fail_closed, local or local:<share>)"
                ),
            ));
        }
    };
    let share = match share {
        None => None,
        Some(_) if policy != "local" => {
            return Err(EnvError::new(
                VARIABLE,
                "only local takes a share (local:0.25)",
            ));
        }
        Some(share) => Some(share.parse::<f64>().map_err(|_| {
            EnvError::new(
                VARIABLE,
                format!("'{share}' is not a share (above 0, at most 1)"),
            )
        })?),
    };
    Ok((policy, share))
}

/// envoyproxy/ratelimit's `REDIS_STARTUP_*`: 0 (or less) for the elapsed
/// time is forever, as there.
fn startup_retry(env: &Env) -> Result<StartupRetry, EnvError> {
    let defaults = StartupRetry::default();
    let initial = env.duration("REDIS_STARTUP_INITIAL_INTERVAL", defaults.initial)?;
    let max = env.duration("REDIS_STARTUP_MAX_INTERVAL", defaults.max)?;
    let elapsed = env.duration("REDIS_STARTUP_MAX_ELAPSED_TIME", Duration::ZERO)?;
    if initial.is_zero() {
        return Err(EnvError::new(
            "REDIS_STARTUP_INITIAL_INTERVAL",
            "must be above 0",
        ));
    }
    Ok(StartupRetry {
        initial,
        max: max.max(initial),
        give_up_after: (!elapsed.is_zero()).then_some(elapsed),
    })
}

fn insert(map: &mut Mapping, key: &str, value: String) {
    map.insert(Value::String(key.to_owned()), Value::String(value));
}
