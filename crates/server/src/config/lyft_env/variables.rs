//! Every variable of envoyproxy/ratelimit's `src/settings/settings.go`,
//! with its default there and what tollgate does with it: the table
//! `docs/replacing-envoyproxy-ratelimit.md` prints, and the names that say
//! "this is Lyft's environment".
//!
//! No variable is silently ignored: a variable set is read with its
//! meaning, refused at start with its name, or logged once at start (at
//! `WARN`, [`without_effect`]) as having no effect: always for the
//! [`Handling::NoOp`] ones, and for the others where the environment
//! turns their feature off (`GRPC_SERVER_TLS_CERT` without
//! `GRPC_SERVER_USE_TLS=true`, `REDIS_*` with `BACKEND_TYPE=memory`, the
//! xDS variables without `CONFIG_TYPE=GRPC_XDS_SOTW`…), where
//! envoyproxy/ratelimit ignores them without a word.

/// What tollgate does with one variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handling {
    /// Read with envoyproxy/ratelimit's meaning (see [`super`]).
    Read,
    /// Accepted and checked, without effect: why.
    NoOp(&'static str),
    /// Refused at start, naming the variable: for which values.
    Refused(&'static str),
    /// Read by another part of the server (telemetry, xDS, the Redis key
    /// layout).
    Area(&'static str),
}

/// One of envoyproxy/ratelimit's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variable {
    /// Its name.
    pub name: &'static str,
    /// Its default in envoyproxy/ratelimit (empty: none).
    pub default: &'static str,
    /// What tollgate does with it.
    pub handling: Handling,
}

/// Names too common in containers to say, alone, that the environment is
/// envoyproxy/ratelimit's (`PORT` is set by many platforms, `HOST` by
/// shells).
const GENERIC: &[&str] = &["HOST", "PORT", "LOG_LEVEL", "LOG_FORMAT"];

/// Whether `env` sets any of envoyproxy/ratelimit's variables other than
/// the generic `HOST`, `PORT`, `LOG_LEVEL` and `LOG_FORMAT`: `tollgate serve` without `--config` then runs from
/// the environment.
pub fn is_lyft_environment(env: &super::Env) -> bool {
    VARIABLES
        .iter()
        .any(|v| !GENERIC.contains(&v.name) && env.is_set(v.name))
}

/// One line per variable set in `env` that has no effect there (see the
/// module docs): `NAME is set but has no effect: why`. The Redis TLS
/// files without `REDIS_TLS` are reported by the Redis settings instead
/// ([`crate::config::RedisSettings::notices`]).
pub fn without_effect(env: &super::Env) -> Vec<String> {
    VARIABLES
        .iter()
        .filter(|variable| env.is_set(variable.name))
        .filter_map(|variable| {
            let why = match variable.handling {
                Handling::NoOp(why) => Some(why.to_owned()),
                _ => switched_off(env, variable.name),
            }?;
            Some(format!("{} is set but has no effect: {why}", variable.name))
        })
        .collect()
}

/// Why `name` has no effect in `env`, for a variable whose feature
/// another variable turns off.
fn switched_off(env: &super::Env, name: &str) -> Option<String> {
    let on = |switch: &str, default: bool| env.bool(switch, default).unwrap_or(default);
    let is = |switch: &str, default: &str, value: &str| {
        env.string(switch, default).eq_ignore_ascii_case(value)
    };
    let unless = |holds: bool, why: &str| (!holds).then(|| why.to_owned());
    let xds = is("CONFIG_TYPE", "FILE", "GRPC_XDS_SOTW");
    let redis = is("BACKEND_TYPE", "redis", "redis");
    match name {
        "GRPC_SERVER_TLS_CERT" | "GRPC_SERVER_TLS_KEY" => unless(
            on("GRPC_SERVER_USE_TLS", false),
            "GRPC_SERVER_USE_TLS is not true",
        ),
        _ if name.starts_with("CONFIG_GRPC_XDS_") || name.starts_with("XDS_CLIENT_") => {
            unless(xds, "CONFIG_TYPE is not GRPC_XDS_SOTW")
        }
        _ if name.starts_with("RUNTIME_") || name == "MERGE_DOMAIN_CONFIG" => unless(
            !xds,
            "CONFIG_TYPE=GRPC_XDS_SOTW: the rules come from the control plane, not the config directory",
        ),
        "LIMIT_LIMIT_HEADER" | "LIMIT_REMAINING_HEADER" | "LIMIT_RESET_HEADER" => unless(
            on("LIMIT_RESPONSE_HEADERS_ENABLED", false),
            "LIMIT_RESPONSE_HEADERS_ENABLED is not true",
        ),
        "REDIS_TLS_CACERT" | "REDIS_TLS_CLIENT_CERT" | "REDIS_TLS_CLIENT_KEY" if redis => None,
        _ if !redis
            && (name.starts_with("REDIS_")
                || matches!(
                    name,
                    "CACHE_KEY_PREFIX"
                        | "EXPIRATION_JITTER_MAX_SECONDS"
                        | "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"
                        | "LOCAL_CACHE_SIZE_IN_BYTES"
                )) =>
        {
            Some("BACKEND_TYPE is not redis".to_owned())
        }
        "REDIS_SENTINEL_AUTH" => unless(
            is("REDIS_TYPE", "SINGLE", "SENTINEL"),
            "REDIS_TYPE is not SENTINEL",
        ),
        "REDIS_PERSECOND_SENTINEL_AUTH" if on("REDIS_PERSECOND", false) => unless(
            is("REDIS_PERSECOND_TYPE", "SINGLE", "SENTINEL"),
            "REDIS_PERSECOND_TYPE is not SENTINEL",
        ),
        _ if name.starts_with("REDIS_PERSECOND_") => {
            unless(on("REDIS_PERSECOND", false), "REDIS_PERSECOND is not true")
        }
        _ if name.starts_with("TRACING_") && name != "TRACING_ENABLED" => {
            unless(on("TRACING_ENABLED", false), "TRACING_ENABLED is not true")
        }
        "STATSD_HOST" | "STATSD_PORT" | "STATS_FLUSH_INTERVAL" | "EXTRA_TAGS" => unless(
            !on("DISABLE_STATS", false) && (on("USE_STATSD", true) || on("USE_DOG_STATSD", false)),
            "no StatsD sink (USE_STATSD and USE_DOG_STATSD are false, or DISABLE_STATS is true)",
        ),
        "PROMETHEUS_ADDR" | "PROMETHEUS_PATH" => unless(
            !on("DISABLE_STATS", false) && on("USE_PROMETHEUS", false),
            "USE_PROMETHEUS is not true (tollgate's /metrics on the HTTP listener is always served)",
        ),
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS" => unless(
            !env.is_set("PROMETHEUS_MAPPER_YAML"),
            "PROMETHEUS_MAPPER_YAML gives the mapping (its own scale)",
        ),
        _ => None,
    }
}

/// The table, in settings.go's order.
pub const VARIABLES: &[Variable] = &[
    Variable {
        name: "HOST",
        default: "0.0.0.0",
        handling: Handling::Read,
    },
    Variable {
        name: "PORT",
        default: "8080",
        handling: Handling::Read,
    },
    Variable {
        name: "DEBUG_HOST",
        default: "0.0.0.0",
        handling: Handling::Read,
    },
    Variable {
        name: "DEBUG_PORT",
        default: "6070",
        handling: Handling::Read,
    },
    Variable {
        name: "GRPC_UDS",
        default: "",
        handling: Handling::Refused(
            "any value: gRPC over a Unix socket is not supported; use GRPC_HOST and GRPC_PORT",
        ),
    },
    Variable {
        name: "GRPC_HOST",
        default: "0.0.0.0",
        handling: Handling::Read,
    },
    Variable {
        name: "GRPC_PORT",
        default: "8081",
        handling: Handling::Read,
    },
    Variable {
        name: "GRPC_MAX_CONNECTION_AGE",
        default: "24h",
        handling: Handling::Read,
    },
    Variable {
        name: "GRPC_MAX_CONNECTION_AGE_GRACE",
        default: "1h",
        handling: Handling::NoOp(
            "an aged connection is drained (GOAWAY), its requests in flight answered, never cut",
        ),
    },
    Variable {
        name: "GRPC_SERVER_USE_TLS",
        default: "false",
        handling: Handling::Read,
    },
    Variable {
        name: "GRPC_SERVER_TLS_CERT",
        default: "",
        handling: Handling::Read,
    },
    Variable {
        name: "GRPC_SERVER_TLS_KEY",
        default: "",
        handling: Handling::Read,
    },
    Variable {
        name: "GRPC_CLIENT_TLS_CACERT",
        default: "",
        handling: Handling::Refused("any value: client certificates are not verified"),
    },
    Variable {
        name: "GRPC_CLIENT_TLS_SAN",
        default: "",
        handling: Handling::Refused("any value: client certificates are not verified"),
    },
    Variable {
        name: "LOG_LEVEL",
        default: "WARN",
        handling: Handling::Read,
    },
    Variable {
        name: "LOG_FORMAT",
        default: "text",
        handling: Handling::Read,
    },
    Variable {
        name: "CONFIG_TYPE",
        default: "FILE",
        handling: Handling::Read,
    },
    Variable {
        name: "FORCE_START_WITHOUT_INITIAL_CONFIG",
        default: "false",
        handling: Handling::Read,
    },
    Variable {
        name: "CONFIG_GRPC_XDS_NODE_ID",
        default: "default",
        handling: Handling::Area("see xDS"),
    },
    Variable {
        name: "CONFIG_GRPC_XDS_NODE_METADATA",
        default: "",
        handling: Handling::Area("see xDS"),
    },
    Variable {
        name: "CONFIG_GRPC_XDS_SERVER_URL",
        default: "localhost:18000",
        handling: Handling::Area("see xDS"),
    },
    Variable {
        name: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        default: "3s",
        handling: Handling::Area("see xDS"),
    },
    Variable {
        name: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
        default: "",
        handling: Handling::Area("see xDS"),
    },
    Variable {
        name: "CONFIG_GRPC_XDS_SERVER_USE_TLS",
        default: "false",
        handling: Handling::Area("see xDS"),
    },
    Variable {
        name: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
        default: "",
        handling: Handling::Area("see xDS"),
    },
    Variable {
        name: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
        default: "",
        handling: Handling::Area("see xDS"),
    },
    Variable {
        name: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
        default: "",
        handling: Handling::Area("see xDS"),
    },
    Variable {
        name: "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
        default: "",
        handling: Handling::Area("see xDS"),
    },
    Variable {
        name: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
        default: "10s",
        handling: Handling::Area("see xDS"),
    },
    Variable {
        name: "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
        default: "60s",
        handling: Handling::Area("see xDS"),
    },
    Variable {
        name: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
        default: "0.5",
        handling: Handling::Area("see xDS"),
    },
    Variable {
        name: "XDS_CLIENT_BACKOFF_JITTER",
        default: "true",
        handling: Handling::Area("see xDS"),
    },
    Variable {
        name: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
        default: "",
        handling: Handling::Area("see xDS"),
    },
    Variable {
        name: "USE_DOG_STATSD",
        default: "false",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "USE_DOG_STATSD_MOGRIFIERS",
        default: "",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "USE_STATSD",
        default: "true",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "STATSD_HOST",
        default: "localhost",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "STATSD_PORT",
        default: "8125",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "EXTRA_TAGS",
        default: "",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "STATS_FLUSH_INTERVAL",
        default: "10s",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "DISABLE_STATS",
        default: "false",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "USE_PROMETHEUS",
        default: "false",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "PROMETHEUS_ADDR",
        default: ":9090",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "PROMETHEUS_PATH",
        default: "/metrics",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "PROMETHEUS_MAPPER_YAML",
        default: "",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        default: "false",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "RUNTIME_ROOT",
        default: "/srv/runtime_data/current",
        handling: Handling::Read,
    },
    Variable {
        name: "RUNTIME_SUBDIRECTORY",
        default: "",
        handling: Handling::Read,
    },
    Variable {
        name: "RUNTIME_APPDIRECTORY",
        default: "config",
        handling: Handling::Read,
    },
    Variable {
        name: "RUNTIME_IGNOREDOTFILES",
        default: "false",
        handling: Handling::Read,
    },
    Variable {
        name: "RUNTIME_WATCH_ROOT",
        default: "true",
        handling: Handling::NoOp(
            "which directory goruntime watches; tollgate reads the same files, every file under the directory, reloaded on any change",
        ),
    },
    Variable {
        name: "EXPIRATION_JITTER_MAX_SECONDS",
        default: "300",
        handling: Handling::Area("see Redis key layout"),
    },
    Variable {
        name: "LOCAL_CACHE_SIZE_IN_BYTES",
        default: "0",
        handling: Handling::Read,
    },
    Variable {
        name: "NEAR_LIMIT_RATIO",
        default: "0.8",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "CACHE_KEY_PREFIX",
        default: "",
        handling: Handling::Area("see Redis key layout"),
    },
    Variable {
        name: "BACKEND_TYPE",
        default: "redis",
        handling: Handling::Read,
    },
    Variable {
        name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
        default: "false",
        handling: Handling::Area("see Redis key layout"),
    },
    Variable {
        name: "LIMIT_RESPONSE_HEADERS_ENABLED",
        default: "false",
        handling: Handling::Read,
    },
    Variable {
        name: "LIMIT_LIMIT_HEADER",
        default: "RateLimit-Limit",
        handling: Handling::Read,
    },
    Variable {
        name: "LIMIT_REMAINING_HEADER",
        default: "RateLimit-Remaining",
        handling: Handling::Read,
    },
    Variable {
        name: "LIMIT_RESET_HEADER",
        default: "RateLimit-Reset",
        handling: Handling::Read,
    },
    Variable {
        name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
        default: "false",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_SOCKET_TYPE",
        default: "unix",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_TYPE",
        default: "SINGLE",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_URL",
        default: "/var/run/nutcracker/ratelimit.sock",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_POOL_SIZE",
        default: "10",
        handling: Handling::NoOp("every call is multiplexed and pipelined on shared connections"),
    },
    Variable {
        name: "REDIS_AUTH",
        default: "",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_TLS",
        default: "false",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_TLS_CLIENT_CERT",
        default: "",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_TLS_CLIENT_KEY",
        default: "",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_TLS_CACERT",
        default: "",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
        default: "false",
        handling: Handling::Refused("true: the server name is always verified"),
    },
    Variable {
        name: "REDIS_PIPELINE_WINDOW",
        default: "0",
        handling: Handling::NoOp("every call is multiplexed and pipelined on shared connections"),
    },
    Variable {
        name: "REDIS_PIPELINE_LIMIT",
        default: "0",
        handling: Handling::NoOp("every call is multiplexed and pipelined on shared connections"),
    },
    Variable {
        name: "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        default: "1",
        handling: Handling::NoOp("every call is multiplexed and pipelined on shared connections"),
    },
    Variable {
        name: "REDIS_PERSECOND",
        default: "false",
        handling: Handling::Area("see Redis key layout"),
    },
    Variable {
        name: "REDIS_PERSECOND_SOCKET_TYPE",
        default: "unix",
        handling: Handling::Area("see Redis key layout"),
    },
    Variable {
        name: "REDIS_PERSECOND_TYPE",
        default: "SINGLE",
        handling: Handling::Area("see Redis key layout"),
    },
    Variable {
        name: "REDIS_PERSECOND_URL",
        default: "/var/run/nutcracker/ratelimitpersecond.sock",
        handling: Handling::Area("see Redis key layout"),
    },
    Variable {
        name: "REDIS_PERSECOND_POOL_SIZE",
        default: "10",
        handling: Handling::NoOp(
            "checked only: the per-second Redis shares the first's connections' multiplexing, timeouts and deadline",
        ),
    },
    Variable {
        name: "REDIS_PERSECOND_AUTH",
        default: "",
        handling: Handling::Area("see Redis key layout"),
    },
    Variable {
        name: "REDIS_PERSECOND_TLS",
        default: "false",
        handling: Handling::Area("see Redis key layout"),
    },
    Variable {
        name: "REDIS_SENTINEL_AUTH",
        default: "",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_PERSECOND_SENTINEL_AUTH",
        default: "",
        handling: Handling::Area("see Redis key layout"),
    },
    Variable {
        name: "REDIS_PERSECOND_PIPELINE_WINDOW",
        default: "0",
        handling: Handling::NoOp(
            "checked only: the per-second Redis shares the first's connections' multiplexing, timeouts and deadline",
        ),
    },
    Variable {
        name: "REDIS_PERSECOND_PIPELINE_LIMIT",
        default: "0",
        handling: Handling::NoOp(
            "checked only: the per-second Redis shares the first's connections' multiplexing, timeouts and deadline",
        ),
    },
    Variable {
        name: "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
        default: "1",
        handling: Handling::NoOp(
            "checked only: the per-second Redis shares the first's connections' multiplexing, timeouts and deadline",
        ),
    },
    Variable {
        name: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        default: "false",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_TIMEOUT",
        default: "10s",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_PERSECOND_TIMEOUT",
        default: "10s",
        handling: Handling::NoOp(
            "checked only: the per-second Redis shares the first's connections' multiplexing, timeouts and deadline",
        ),
    },
    Variable {
        name: "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        default: "WAIT",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
        default: "WAIT",
        handling: Handling::NoOp(
            "checked only: the per-second Redis shares the first's connections' multiplexing, timeouts and deadline",
        ),
    },
    Variable {
        name: "REDIS_STARTUP_INITIAL_INTERVAL",
        default: "1s",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_STARTUP_MAX_INTERVAL",
        default: "30s",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_STARTUP_MAX_ELAPSED_TIME",
        default: "0",
        handling: Handling::Read,
    },
    Variable {
        name: "MEMCACHE_HOST_PORT",
        default: "",
        handling: Handling::NoOp("read only with BACKEND_TYPE=memcache, which is refused"),
    },
    Variable {
        name: "MEMCACHE_MAX_IDLE_CONNS",
        default: "2",
        handling: Handling::NoOp("read only with BACKEND_TYPE=memcache, which is refused"),
    },
    Variable {
        name: "MEMCACHE_SRV",
        default: "",
        handling: Handling::NoOp("read only with BACKEND_TYPE=memcache, which is refused"),
    },
    Variable {
        name: "MEMCACHE_SRV_REFRESH",
        default: "0",
        handling: Handling::NoOp("read only with BACKEND_TYPE=memcache, which is refused"),
    },
    Variable {
        name: "MEMCACHE_TLS",
        default: "false",
        handling: Handling::NoOp("read only with BACKEND_TYPE=memcache, which is refused"),
    },
    Variable {
        name: "MEMCACHE_TLS_CLIENT_CERT",
        default: "",
        handling: Handling::NoOp("read only with BACKEND_TYPE=memcache, which is refused"),
    },
    Variable {
        name: "MEMCACHE_TLS_CLIENT_KEY",
        default: "",
        handling: Handling::NoOp("read only with BACKEND_TYPE=memcache, which is refused"),
    },
    Variable {
        name: "MEMCACHE_TLS_CACERT",
        default: "",
        handling: Handling::NoOp("read only with BACKEND_TYPE=memcache, which is refused"),
    },
    Variable {
        name: "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
        default: "false",
        handling: Handling::NoOp("read only with BACKEND_TYPE=memcache, which is refused"),
    },
    Variable {
        name: "SHADOW_MODE",
        default: "false",
        handling: Handling::Read,
    },
    Variable {
        name: "QUOTA_MODE",
        default: "false",
        handling: Handling::Read,
    },
    Variable {
        name: "RESPONSE_DYNAMIC_METADATA",
        default: "false",
        handling: Handling::Read,
    },
    Variable {
        name: "MERGE_DOMAIN_CONFIG",
        default: "false",
        handling: Handling::Read,
    },
    Variable {
        name: "TRACING_ENABLED",
        default: "false",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "TRACING_SERVICE_NAME",
        default: "RateLimit",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "TRACING_SERVICE_NAMESPACE",
        default: "",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "TRACING_SERVICE_INSTANCE_ID",
        default: "",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "TRACING_EXPORTER_PROTOCOL",
        default: "http",
        handling: Handling::Area("see telemetry"),
    },
    Variable {
        name: "TRACING_SAMPLING_RATE",
        default: "1",
        handling: Handling::Area("see telemetry"),
    },
];
