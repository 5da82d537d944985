use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::*;
use crate::config::{AlgorithmKind, DomainConfig, LimitConfig, RedisTarget};

fn env(pairs: &[(&str, &str)]) -> Env {
    pairs.iter().copied().collect()
}

fn redis(settings: &LyftSettings) -> &crate::config::RedisSettings {
    match &settings.config.backend {
        BackendSettings::Redis(redis) => redis,
        BackendSettings::Memory => panic!("in memory"),
    }
}

#[test]
fn an_empty_environment_takes_envoyproxy_ratelimits_defaults() {
    let settings = LyftSettings::read(&Env::default()).expect("defaults");
    let server = &settings.config.server;
    assert_eq!(server.http_listen, SocketAddr::from(([0, 0, 0, 0], 8080)));
    assert_eq!(server.grpc_listen, SocketAddr::from(([0, 0, 0, 0], 8081)));
    assert_eq!(
        server.debug_listen,
        Some(SocketAddr::from(([0, 0, 0, 0], 6070)))
    );
    assert_eq!(
        server.grpc_max_connection_age,
        Some(std::time::Duration::from_secs(86_400))
    );
    assert!(!server.response_headers);
    assert_eq!(server.response_header_names.limit, "RateLimit-Limit");
    assert_eq!(
        settings.runtime.dir,
        PathBuf::from("/srv/runtime_data/current/config")
    );
    assert_eq!(
        redis(&settings).target,
        RedisTarget::Single("unix:///var/run/nutcracker/ratelimit.sock".into())
    );
    assert_eq!(settings.log.filter, "warn");
    assert!(!settings.log.json);
    assert_eq!(settings.config_type, ConfigType::File);
}

/// The `ratelimit` service's environment in envoyproxy/ratelimit's own
/// `docker-compose.yml`, unchanged.
#[test]
fn the_docker_compose_environment_is_read_as_envoyproxy_ratelimit_reads_it() {
    let env = env(&[
        ("USE_STATSD", "false"),
        ("LOG_LEVEL", "debug"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis:6379"),
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("MEMCACHE_HOST_PORT", "memcached:11211"),
    ]);
    assert!(is_lyft_environment(&env));
    let settings = LyftSettings::read(&env).expect("docker-compose");
    assert_eq!(
        settings.runtime.dir,
        PathBuf::from("/data/ratelimit/config")
    );
    assert!(settings.runtime.redis);
    assert_eq!(
        redis(&settings).target,
        RedisTarget::Single("redis://redis:6379".into())
    );
    // Lyft's debug, without the HTTP/2 and gRPC libraries' frame logs.
    assert_eq!(
        settings.log.filter,
        format!("debug,{}", super::QUIET_LIBRARIES)
    );
    assert!(settings.log.filter.contains("h2=info"));
    // Its memcached address has no effect with Redis: said once at start.
    assert_eq!(
        settings.notices,
        [
            "MEMCACHE_HOST_PORT is set but has no effect: read only with BACKEND_TYPE=memcache, which is refused"
        ]
    );
}

#[test]
fn the_generic_names_alone_do_not_make_a_lyft_environment() {
    assert!(!is_lyft_environment(&env(&[
        ("HOST", "box"),
        ("PORT", "3000"),
        ("LOG_LEVEL", "info"),
        ("PATH", "/bin"),
    ])));
    assert!(is_lyft_environment(&env(&[("RUNTIME_ROOT", "/data")])));
    assert!(is_lyft_environment(&env(&[("REDIS_URL", "redis:6379")])));
}

#[test]
fn unsupported_values_are_refused_naming_the_variable() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("BACKEND_TYPE", "memcache")], "BACKEND_TYPE"),
        (&[("BACKEND_TYPE", "etcd")], "BACKEND_TYPE"),
        (
            &[("GRPC_CLIENT_TLS_CACERT", "/ca.pem")],
            "GRPC_CLIENT_TLS_CACERT",
        ),
        (&[("GRPC_CLIENT_TLS_SAN", "client")], "GRPC_CLIENT_TLS_SAN"),
        (&[("GRPC_UDS", "/tmp/rl.sock")], "GRPC_UDS"),
        (&[("QUOTA_MODE", "maybe")], "QUOTA_MODE"),
        (&[("GRPC_SERVER_USE_TLS", "true")], "GRPC_SERVER_TLS_CERT"),
        (
            &[
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TLS", "true"),
                ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
            ],
            "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
        ),
        (
            &[("TOLLGATE_REDIS_FAILURE_POLICY", "shrug")],
            "TOLLGATE_REDIS_FAILURE_POLICY",
        ),
        (
            &[("REDIS_STARTUP_INITIAL_INTERVAL", "soon")],
            "REDIS_STARTUP_INITIAL_INTERVAL",
        ),
        (
            &[("REDIS_SOCKET_TYPE", "tcp"), ("REDIS_TYPE", "ring")],
            "REDIS_TYPE",
        ),
        (&[("REDIS_TYPE", "cluster")], "REDIS_SOCKET_TYPE"),
        (
            &[("REDIS_POOL_ON_EMPTY_BEHAVIOR", "ERROR")],
            "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        ),
        (&[("LOG_LEVEL", "loud")], "LOG_LEVEL"),
        (&[("PORT", "http")], "PORT"),
        (&[("SHADOW_MODE", "maybe")], "SHADOW_MODE"),
        (&[("CONFIG_TYPE", "ETCD")], "CONFIG_TYPE"),
        (
            &[("LIMIT_LIMIT_HEADER", "bad header")],
            "LIMIT_LIMIT_HEADER",
        ),
    ];
    for (pairs, variable) in cases {
        let error = LyftSettings::read(&env(pairs)).expect_err(variable);
        assert_eq!(error.variable(), *variable, "{pairs:?}: {error}");
        assert!(error.to_string().starts_with(variable), "{error}");
    }
    let memcache = LyftSettings::read(&env(&[("BACKEND_TYPE", "memcache")])).expect_err("memcache");
    assert!(
        memcache.to_string().contains("memcache is not supported"),
        "{memcache}"
    );
}

#[test]
fn accepted_no_op_and_other_area_variables_start() {
    let settings = LyftSettings::read(&env(&[
        ("BACKEND_TYPE", "memory"),
        ("REDIS_PIPELINE_WINDOW", "150us"),
        ("REDIS_PIPELINE_LIMIT", "8"),
        ("REDIS_POOL_SIZE", "20"),
        ("RESPONSE_DYNAMIC_METADATA", "true"),
        ("GRPC_MAX_CONNECTION_AGE_GRACE", "5m"),
        // One stats sink at a time, as envoyproxy/ratelimit's runner.
        ("USE_STATSD", "false"),
        ("USE_PROMETHEUS", "true"),
        ("CACHE_KEY_PREFIX", "rl_"),
        ("CONFIG_GRPC_XDS_NODE_ID", "node"),
    ]))
    .expect("accepted");
    assert_eq!(settings.config.backend, BackendSettings::Memory);
}

#[test]
fn redis_types_auth_and_timeouts_take_lyfts_forms() {
    let cluster = LyftSettings::read(&env(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "CLUSTER"),
        ("REDIS_URL", "10.0.0.1:7000,10.0.0.2:7000"),
        ("REDIS_AUTH", "ada:secret"),
        ("REDIS_TIMEOUT", "250ms"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "1280"),
    ]))
    .expect("cluster");
    let r = redis(&cluster);
    assert_eq!(
        r.target,
        RedisTarget::Cluster(vec![
            "redis://10.0.0.1:7000".into(),
            "redis://10.0.0.2:7000".into()
        ])
    );
    assert_eq!(r.username.as_deref(), Some("ada"));
    assert_eq!(
        r.password
            .as_ref()
            .map(tollgate_redis::Secret::expose)
            .as_deref(),
        Some("secret")
    );
    assert_eq!(r.response_timeout, std::time::Duration::from_millis(250));
    assert_eq!(r.deny_cache, 10);

    let sentinel = LyftSettings::read(&env(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_URL", "mymaster,10.0.0.1:26379,10.0.0.2:26379"),
        ("REDIS_AUTH", "only-a-password"),
        ("REDIS_SENTINEL_AUTH", "sentinel-secret"),
    ]))
    .expect("sentinel");
    let r = redis(&sentinel);
    assert_eq!(r.username, None);
    assert_eq!(
        r.password
            .as_ref()
            .map(tollgate_redis::Secret::expose)
            .as_deref(),
        Some("only-a-password")
    );
    let RedisTarget::Sentinel(s) = &r.target else {
        panic!("{:?}", r.target)
    };
    assert_eq!(s.master, "mymaster");
    assert_eq!(
        s.sentinels,
        ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"]
    );
    assert_eq!(
        s.password
            .as_ref()
            .map(tollgate_redis::Secret::expose)
            .as_deref(),
        Some("sentinel-secret")
    );

    let tls = LyftSettings::read(&env(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis.internal:6380"),
        ("REDIS_TLS", "true"),
    ]))
    .expect("tls");
    assert_eq!(
        redis(&tls).target,
        RedisTarget::Single("rediss://redis.internal:6380".into())
    );
}

// ---- the config directory ----

fn dir_of(root: &Path) -> RuntimeDir {
    RuntimeDir {
        dir: root.to_owned(),
        ignore_dot_files: false,
        merge_domains: false,
        shadow_mode: false,
        quota_mode: false,
        redis: false,
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

const A: &str =
    "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n";

#[test]
fn every_file_of_the_directory_is_read_recursively_as_fixed_windows() {
    let tmp = tempfile::tempdir().expect("tmp");
    write(&tmp.path().join("a.yaml"), A);
    write(
        &tmp.path().join("nested/b.yml"),
        "domains:\n  - domain: b\n  - domain: c\n    descriptors:\n      - key: k\n        rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra}\n",
    );
    let dir = dir_of(tmp.path());
    let domains = dir.load(&dir.snapshot().expect("read")).expect("load");
    let names: Vec<_> = domains.iter().map(|d| d.domain.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let kind = |d: &DomainConfig| match &d.descriptors[0].limit {
        Some(LimitConfig::Limited { limits, .. }) => limits.algorithm.kind(),
        other => panic!("{other:?}"),
    };
    // No algorithm named: envoyproxy/ratelimit's fixed window; named: kept.
    assert_eq!(kind(&domains[0]), AlgorithmKind::FixedWindow);
    assert_eq!(kind(&domains[2]), AlgorithmKind::Gcra);
}

#[test]
fn a_domain_in_two_files_is_refused_unless_merged_as_lyft_merges() {
    let tmp = tempfile::tempdir().expect("tmp");
    write(&tmp.path().join("a.yaml"), A);
    write(
        &tmp.path().join("b.yaml"),
        "domain: a\ndescriptors:\n  - key: other\n    rate_limit: {unit: hour, requests_per_unit: 9}\n",
    );
    let mut dir = dir_of(tmp.path());
    let snapshot = dir.snapshot().expect("read");
    let error = dir.load(&snapshot).expect_err("duplicate");
    assert!(error.message().contains("duplicate domain 'a'"), "{error}");
    assert!(error.message().contains("MERGE_DOMAIN_CONFIG"), "{error}");
    dir.merge_domains = true;
    let merged = dir.load(&snapshot).expect("merged");
    assert_eq!(merged.len(), 1);
    let keys: Vec<_> = merged[0]
        .descriptors
        .iter()
        .map(|d| d.key.as_str())
        .collect();
    assert_eq!(keys, ["k", "other"]);
    // The same top-level key and value from both files: refused, as there.
    write(&tmp.path().join("c.yaml"), A);
    let error = dir
        .load(&dir.snapshot().expect("read"))
        .expect_err("duplicate key");
    assert!(
        error
            .message()
            .contains("duplicate descriptor composite key"),
        "{error}"
    );
}

#[test]
fn dot_files_follow_runtime_ignoredotfiles_and_kubelet_entries_are_never_walked() {
    let tmp = tempfile::tempdir().expect("tmp");
    // A ConfigMap volume: the real file in a timestamped directory, reached
    // through `..data` and a top-level link.
    write(&tmp.path().join("..2026_11_27_06_00_00.1/a.yaml"), A);
    std::os::unix::fs::symlink("..2026_11_27_06_00_00.1", tmp.path().join("..data")).expect("link");
    std::os::unix::fs::symlink("..data/a.yaml", tmp.path().join("a.yaml")).expect("link");
    write(&tmp.path().join(".hidden.yaml"), "domain: hidden\n");
    let mut dir = dir_of(tmp.path());
    let names = |dir: &RuntimeDir| -> Vec<String> {
        dir.load(&dir.snapshot().expect("read"))
            .expect("load")
            .into_iter()
            .map(|d| d.domain)
            .collect()
    };
    assert_eq!(names(&dir), ["hidden", "a"]);
    dir.ignore_dot_files = true;
    assert_eq!(names(&dir), ["a"]);
}

#[test]
fn no_rule_file_is_refused_and_shadow_mode_shadows_every_rule() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut dir = dir_of(tmp.path());
    let error = dir.load(&dir.snapshot().expect("read")).expect_err("empty");
    assert!(
        error
            .message()
            .contains("FORCE_START_WITHOUT_INITIAL_CONFIG"),
        "{error}"
    );
    write(
        &tmp.path().join("a.yaml"),
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n    descriptors:\n      - key: j\n        rate_limit: {unit: minute, requests_per_unit: 1}\n",
    );
    dir.shadow_mode = true;
    let domains = dir.load(&dir.snapshot().expect("read")).expect("load");
    assert!(domains[0].descriptors[0].shadow_mode);
    assert!(domains[0].descriptors[0].descriptors[0].shadow_mode);
}

#[test]
fn a_rule_file_holds_rules_only() {
    let error = crate::Config::domains_from_lyft_yaml(
        Path::new("a.yaml"),
        "server:\n  http_listen: 127.0.0.1:1\ndomain: a\n",
        false,
    )
    .expect_err("server section");
    assert!(error.message().starts_with("server:"), "{error}");
}

#[test]
fn force_start_starts_without_the_directory() {
    let env = env(&[
        ("BACKEND_TYPE", "memory"),
        ("RUNTIME_ROOT", "/nonexistent/tollgate"),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
    ]);
    let settings = LyftSettings::read(&env).expect("read");
    let (config, snapshot) = settings.load().expect("forced");
    assert!(config.domains.is_empty());
    assert!(snapshot.is_empty());
    let strict = LyftSettings {
        force_start: false,
        ..settings
    };
    assert!(strict.load().is_err());
}

#[test]
fn the_docs_table_lists_every_variable() {
    let readme = include_str!("../../../docs/replacing-envoyproxy-ratelimit.md");
    for variable in VARIABLES {
        assert!(
            readme.contains(&format!("| `{}` |", variable.name)),
            "{} is missing from crates/server/docs/replacing-envoyproxy-ratelimit.md",
            variable.name
        );
    }
}

#[test]
fn the_other_areas_variables_reach_their_settings() {
    // Redis: envoyproxy/ratelimit's key layout, so a rollout shares a count.
    let settings = LyftSettings::read(&env(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis:6379"),
        ("CACHE_KEY_PREFIX", "rl:"),
        ("EXPIRATION_JITTER_MAX_SECONDS", "0"),
        ("NEAR_LIMIT_RATIO", "0.5"),
        ("USE_STATSD", "false"),
    ]))
    .expect("read");
    match &redis(&settings).key_layout {
        crate::config::KeyLayout::Lyft(layout) => {
            assert_eq!(layout.key_prefix, "rl:");
            assert_eq!(layout.expiration_jitter_max, std::time::Duration::ZERO);
        }
        crate::config::KeyLayout::Tollgate => panic!("Lyft's environment keeps Lyft's keys"),
    }
    assert_eq!(settings.telemetry.near_limit_ratio, 0.5);
    assert!(settings.telemetry.statsd.is_none());
    assert!(settings.xds.is_none());

    // In memory there are no keys to share.
    let memory = LyftSettings::read(&env(&[("BACKEND_TYPE", "memory")])).expect("read");
    assert_eq!(memory.config.backend, BackendSettings::Memory);

    // xDS: the control plane replaces the directory.
    let xds = LyftSettings::read(&env(&[
        ("BACKEND_TYPE", "memory"),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", "127.0.0.1:18000"),
        ("CONFIG_GRPC_XDS_NODE_ID", "rl-1"),
    ]))
    .expect("read");
    let plane = xds.xds.expect("xDS selected");
    assert_eq!(plane.node_id, "rl-1");

    // Each area's refusals name their variable through this door too.
    for (variable, value) in [
        ("EXPIRATION_JITTER_MAX_SECONDS", "soon"),
        ("NEAR_LIMIT_RATIO", "lots"),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "never"),
    ] {
        let mut pairs = vec![
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis:6379"),
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ];
        pairs.push((variable, value));
        let error = LyftSettings::read(&env(&pairs)).expect_err(variable);
        assert_eq!(error.variable(), variable, "{error}");
    }
}

/// A Deployment that mounts Redis certificates with TLS off starts, as
/// envoyproxy/ratelimit's does: the files are ignored and said so once.
#[test]
fn redis_tls_files_without_redis_tls_are_ignored_with_a_notice() {
    let settings = LyftSettings::read(&env(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "127.0.0.1:6379"),
        ("REDIS_TLS_CACERT", "/certs/ca.pem"),
        ("REDIS_TLS_CLIENT_CERT", "/certs/client.pem"),
    ]))
    .expect("accepted");
    let redis = redis(&settings);
    assert_eq!(redis.tls, None);
    assert_eq!(redis.notices.len(), 2, "{:?}", redis.notices);
    assert!(redis.notices[0].starts_with("REDIS_TLS_CACERT is set but REDIS_TLS is not"));
}

/// From Lyft's environment a Redis that fails is an error for the call,
/// the start waits for Redis (forever by default), and the health check
/// follows `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`; tollgate's own variable
/// picks another policy.
#[test]
fn redis_failures_are_lyfts_unless_a_policy_is_chosen() {
    let base = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "127.0.0.1:6379"),
    ];
    let settings = LyftSettings::read(&env(&base)).expect("read");
    let first = redis(&settings);
    assert!(first.fail_calls);
    assert!(!first.health_check);
    let retry = first.startup_retry.expect("waits");
    assert_eq!(retry.initial, std::time::Duration::from_secs(1));
    assert_eq!(retry.max, std::time::Duration::from_secs(30));
    assert_eq!(retry.give_up_after, None);

    let mut vars = base.to_vec();
    vars.extend([
        ("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true"),
        ("REDIS_STARTUP_INITIAL_INTERVAL", "50ms"),
        ("REDIS_STARTUP_MAX_INTERVAL", "200ms"),
        ("REDIS_STARTUP_MAX_ELAPSED_TIME", "2s"),
        ("TOLLGATE_REDIS_FAILURE_POLICY", "local:0.5"),
    ]);
    let settings = LyftSettings::read(&env(&vars)).expect("read");
    let redis = redis(&settings);
    assert!(!redis.fail_calls);
    assert!(redis.health_check);
    assert_eq!(
        redis.failure_policy,
        tollgate_redis::FailurePolicy::Local { share: 0.5 }
    );
    let retry = redis.startup_retry.expect("waits");
    assert_eq!(retry.initial, std::time::Duration::from_millis(50));
    assert_eq!(retry.max, std::time::Duration::from_millis(200));
    assert_eq!(retry.give_up_after, Some(std::time::Duration::from_secs(2)));
}
