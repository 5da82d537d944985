//! Every variable of envoyproxy/ratelimit's `src/settings/settings.go`,
//! with its default there and what tollgate does with it: the table the
//! README prints, and the names that say "this is Lyft's environment".

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
        handling: Handling::Read,
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
        handling: Handling::Area("see Redis key layout"),
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
        handling: Handling::Area("see Redis key layout"),
    },
    Variable {
        name: "REDIS_PERSECOND_PIPELINE_LIMIT",
        default: "0",
        handling: Handling::Area("see Redis key layout"),
    },
    Variable {
        name: "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
        default: "1",
        handling: Handling::Area("see Redis key layout"),
    },
    Variable {
        name: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        default: "false",
        handling: Handling::NoOp(
            "a Redis outage is answered by the failure policy, not by the health check",
        ),
    },
    Variable {
        name: "REDIS_TIMEOUT",
        default: "10s",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_PERSECOND_TIMEOUT",
        default: "10s",
        handling: Handling::Area("see Redis key layout"),
    },
    Variable {
        name: "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        default: "WAIT",
        handling: Handling::Read,
    },
    Variable {
        name: "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
        default: "WAIT",
        handling: Handling::Area("see Redis key layout"),
    },
    Variable {
        name: "REDIS_STARTUP_INITIAL_INTERVAL",
        default: "1s",
        handling: Handling::NoOp(
            "Redis is connected at start; an unreachable Redis stops the start (the orchestrator restarts it)",
        ),
    },
    Variable {
        name: "REDIS_STARTUP_MAX_INTERVAL",
        default: "30s",
        handling: Handling::NoOp(
            "Redis is connected at start; an unreachable Redis stops the start (the orchestrator restarts it)",
        ),
    },
    Variable {
        name: "REDIS_STARTUP_MAX_ELAPSED_TIME",
        default: "0",
        handling: Handling::NoOp(
            "Redis is connected at start; an unreachable Redis stops the start (the orchestrator restarts it)",
        ),
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
        handling: Handling::Refused("true: quota mode is not supported"),
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
