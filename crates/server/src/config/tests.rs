//! The file's parsing and validation, error places included.

use std::time::Duration;

use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_yaml(Path::new("rules.yaml"), text)
}

#[test]
fn envoy_file_reads_as_is() {
    let config = parse(
        "domain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit:\n      unit: SECOND\n      requests_per_unit: 500\n  - key: database\n    rate_limit: {unlimited: true}\n",
    )
    .unwrap();
    assert_eq!(config.domains[0].domain, "mongo_cps");
    assert_eq!(config.domains[0].descriptors.len(), 2);
    assert_eq!(config.server, ServerSettings::default());
}

#[test]
fn errors_name_file_line_and_field() {
    let error = parse(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
    )
    .unwrap_err();
    let text = error.to_string();
    assert!(text.starts_with("rules.yaml:"), "{text}");
    assert!(error.line().is_some(), "{text}");
    assert_eq!(error.line(), Some(3), "{text}");
    assert!(
        text.contains("descriptors[0]: descriptor 'a': rate_limit.unit"),
        "{text}"
    );
    assert!(
        text.contains("unit: invalid rate limit unit 'fortnight'"),
        "{text}"
    );

    let error = parse("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, bogus: 2}\n").unwrap_err();
    assert!(error.to_string().contains("bogus"), "{error}");
    assert!(matches!(error.line(), Some(3 | 4)), "{error}");
}

/// Regression: the checks that need more than one field (duplicates,
/// sliding_log under Redis, token conflicts) ran after parsing and
/// named no line.
#[test]
fn cross_field_errors_name_the_line_and_field() {
    for (text, line, needle) in [
        (
            "domains:\n  - domain: a\n  - domain: b\n  - domain: a\n",
            4,
            "domains[2]: domain: duplicate domain 'a'",
        ),
        (
            "domains:\n  - domain: ''\n",
            2,
            "domains[0]: domain: config file cannot have empty domain",
        ),
        (
            "domain: ''\n",
            1,
            "domain: config file cannot have empty domain",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n  - key: b\n    value: x\n  - key: b\n    value: x\n",
            6,
            "descriptors[2]: duplicate descriptor key 'b' value 'x'",
        ),
        (
            "domains:\n  - domain: d\n    descriptors:\n      - key: a\n      - key: a\n",
            5,
            "domains[0].descriptors[1]: duplicate descriptor key 'a' without a value",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: n\n      - key: n\n",
            6,
            "descriptors[0].descriptors[1]: duplicate descriptor key 'n'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n  - key: b\n    descriptors:\n      - key: c\n        rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_log}\nbackend:\n  redis: redis://localhost\n",
            6,
            "descriptors[1].descriptors[0]: descriptor 'c': runs sliding_log",
        ),
        (
            "server:\n  grpc_listen: 127.0.0.1:0\n\n  bearer_token: t\n  bearer_token_file: /x\n",
            2,
            "server: bearer_token: give either bearer_token or bearer_token_file",
        ),
        (
            "domain: d\nserver:\n  bearer_token: ''\n",
            3,
            "server: bearer_token: must not be empty",
        ),
    ] {
        let error = parse(text).unwrap_err();
        let shown = error.to_string();
        assert_eq!(error.line(), Some(line), "{needle}: {shown}");
        assert!(shown.starts_with(&format!("rules.yaml:{line}:")), "{shown}");
        assert!(shown.contains(needle), "{needle}: {shown}");
    }
    // The same sliding_log rule is fine in memory.
    assert!(parse("domain: d\ndescriptors:\n  - key: c\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_log}\n").is_ok());
}

#[test]
fn default_settings_listen_on_loopback_only() {
    let settings = ServerSettings::default();
    for addr in [settings.grpc_listen, settings.http_listen] {
        assert!(addr.ip().is_loopback(), "{addr}");
    }
    assert_eq!(settings.grpc_listen.port(), 8081);
    assert_eq!(settings.http_listen.port(), 8080);
    // A file without a server section gets the same.
    assert_eq!(parse("domain: d\n").expect("valid").server, settings);
}

#[test]
fn semantic_errors() {
    for (text, needle) in [
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n",
            "when unlimited",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limits:\n      - {unit: second, requests_per_unit: 0}\n",
            "at least 1",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: fixed_window, burst: 2}\n",
            "burst",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n  - key: a\n",
            "duplicate descriptor",
        ),
        ("domain: d\ndescriptors:\n  - key: ''\n", "empty key"),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limits:\n      - {unit: second, requests_per_unit: 5}\n      - {calendar: fortnight, requests_per_unit: 50}\n",
            "rate_limits[1].calendar: invalid calendar unit",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {period: 0s, requests_per_unit: 5}\n",
            "period",
        ),
        (
            "domains:\n  - domain: d\n  - domain: d\n",
            "duplicate domain",
        ),
        ("descriptors: []\n", "empty domain"),
    ] {
        let error = parse(text).unwrap_err().to_string();
        assert!(error.contains(needle), "{needle}: {error}");
    }
}

/// Several algorithms in one rule (a GCRA per second and a sliding log
/// per day; was refused before calendar windows): the core's
/// `AllOf<AnyAlgorithm>`, each quota with its own algorithm.
#[test]
fn rate_limits_mix_algorithms() {
    let config = parse(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limits:\n      - {unit: second, requests_per_unit: 5}\n      - {unit: day, requests_per_unit: 50, algorithm: sliding_log}\n      - {calendar: month, requests_per_unit: 500}\n",
    )
    .expect("valid");
    let Some(LimitConfig::Limited { limits, .. }) = &config.domains[0].descriptors[0].limit else {
        panic!("limited");
    };
    assert_eq!(limits.algorithm.kind(), AlgorithmKind::Mixed);
    assert_eq!(
        limits.algorithm.kinds(),
        vec![
            AlgorithmKind::Gcra,
            AlgorithmKind::SlidingLog,
            AlgorithmKind::Calendar
        ]
    );
    assert_eq!(limits.algorithm.capacity(), 5);
    assert_eq!(limits.quotas[2].period, Duration::from_secs(31 * 86_400));
    // Under Redis, a sliding log among them is refused (no sliding log there).
    let error = parse(
        "backend:\n  redis: redis://127.0.0.1:1\ndomain: d\ndescriptors:\n  - key: a\n    rate_limits:\n      - {unit: second, requests_per_unit: 5}\n      - {unit: day, requests_per_unit: 50, algorithm: sliding_log}\n",
    )
    .expect_err("refused");
    assert!(error.to_string().contains("sliding_log"), "{error}");
}

#[test]
fn extensions() {
    let config = parse(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {period: 10s, requests_per_unit: 20, burst: 5}\n  - key: b\n    rate_limits:\n      - {unit: second, requests_per_unit: 5, algorithm: sliding_window, slots: 4}\n      - {unit: hour, requests_per_unit: 50, algorithm: sliding_window}\n",
    )
    .unwrap();
    let Some(LimitConfig::Limited { limits, .. }) = &config.domains[0].descriptors[0].limit else {
        panic!("limited")
    };
    assert_eq!(limits.quotas[0].period, Duration::from_secs(10));
    assert_eq!(limits.quotas[0].unit, None);
    assert_eq!(limits.algorithm.capacity(), 5);
    let Some(LimitConfig::Limited { limits, .. }) = &config.domains[0].descriptors[1].limit else {
        panic!("limited")
    };
    assert_eq!(limits.algorithm.kind(), AlgorithmKind::SlidingWindow);
    assert_eq!(limits.quotas[1].slots, Some(DEFAULT_SLOTS));
}

#[test]
fn backend_defaults_to_memory_and_reads_every_redis_key() {
    let config = parse("domain: d\n").unwrap();
    assert_eq!(config.backend, BackendSettings::Memory);

    let config = parse("backend:\n  redis: redis://127.0.0.1:6379/2\ndomain: d\n").unwrap();
    let BackendSettings::Redis(redis) = &config.backend else {
        panic!("redis")
    };
    assert_eq!(
        redis.target,
        RedisTarget::Single("redis://127.0.0.1:6379/2".into())
    );
    assert_eq!(
        redis.failure_policy,
        tollgate_redis::FailurePolicy::Local { share: 0.25 }
    );
    assert_eq!(redis.deadline, Duration::from_millis(5));
    assert_eq!(redis.leases, None);
    // A cluster's default deadline leaves room for a redirection.
    let cluster = parse("backend:\n  cluster: [redis://a:7000]\ndomain: d\n").unwrap();
    let BackendSettings::Redis(on_cluster) = &cluster.backend else {
        panic!("redis")
    };
    assert_eq!(on_cluster.deadline, Duration::from_millis(20));
    assert_eq!(redis.key_prefix, "tollgate");
    assert_eq!(redis.durability, tollgate_redis::Durability::Master);

    let config = parse(
        "backend:\n  cluster: [redis://a:7000, redis://b:7000]\n  failure_policy: local\n  local_share: 0.5\n  deadline: 20ms\n  breaker: {threshold: 5, open_for: 1s}\n  deny_cache: 1000\n  key_prefix: rl\n  leases: {max: 64, ttl: 50ms}\n  wait: {replicas: 1, timeout: 3ms}\ndomain: d\n",
    )
    .unwrap();
    let BackendSettings::Redis(redis) = &config.backend else {
        panic!("redis")
    };
    assert_eq!(
        redis.target,
        RedisTarget::Cluster(vec!["redis://a:7000".into(), "redis://b:7000".into()])
    );
    assert_eq!(
        redis.failure_policy,
        tollgate_redis::FailurePolicy::Local { share: 0.5 }
    );
    assert_eq!(redis.deadline, Duration::from_millis(20));
    assert_eq!(redis.breaker.threshold, 5);
    assert_eq!(redis.breaker.open_for, Duration::from_secs(1));
    assert_eq!(redis.deny_cache, 1000);
    assert_eq!(redis.key_prefix, "rl");
    let leases = redis.leases.unwrap();
    assert_eq!((leases.initial, leases.max), (8, 64));
    assert_eq!(leases.ttl, Duration::from_millis(50));
    assert_eq!(
        redis.durability,
        tollgate_redis::Durability::Replicas {
            replicas: 1,
            timeout: Duration::from_millis(3)
        }
    );
}

#[test]
fn redis_urls_lose_their_credentials_in_messages() {
    assert_eq!(
        redact_url("redis://u:s3cret@h:6379/0"),
        "redis://***@h:6379/0"
    );
    assert_eq!(redact_url("redis://:s3cret@h"), "redis://***@h");
    assert_eq!(redact_url("redis://h:6379"), "redis://h:6379");
    assert_eq!(redact_url("nonsense"), "nonsense");
}

#[test]
fn backend_reads_sentinel_credentials_tls_and_the_module() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    let ca = dir.path().join("ca.pem");
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(&ca, cert.pem()).unwrap();
    let text = format!(
        "backend:\n  sentinel:\n    sentinels: [redis://10.0.0.1:26379, redis://10.0.0.2:26379]\n    master: main\n    username: watcher\n    password: sentinel-secret\n  username: tollgate\n  password_file: {}\n  tls: {{ca_file: {}}}\n  module: require\ndomain: d\n",
        secret.display(),
        ca.display()
    );
    let config = parse(&text).unwrap();
    let BackendSettings::Redis(redis) = &config.backend else {
        panic!("redis")
    };
    let RedisTarget::Sentinel(sentinel) = &redis.target else {
        panic!("sentinel")
    };
    assert_eq!(sentinel.sentinels.len(), 2);
    assert_eq!(sentinel.master, "main");
    assert_eq!(sentinel.username.as_deref(), Some("watcher"));
    assert_eq!(
        sentinel.password,
        Some(tollgate_redis::Secret::from("sentinel-secret"))
    );
    assert_eq!(redis.username.as_deref(), Some("tollgate"));
    // One line ending dropped.
    assert_eq!(redis.password, Some(tollgate_redis::Secret::from("s3cret")));
    let tls = redis.tls.as_ref().unwrap();
    assert_eq!(
        tls.ca.as_ref().map(|(_, pem)| pem.clone()),
        Some(cert.pem().into_bytes())
    );
    assert_eq!(redis.module, tollgate_redis::ModuleUse::Require);
    let shown = format!("{config:?}");
    assert!(
        !shown.contains("s3cret") && !shown.contains("sentinel-secret"),
        "{shown}"
    );

    // A file that is no PEM: refused with a line.
    let error = parse(&format!(
        "backend:\n  redis: redis://a\n  tls:\n    ca_file: {}\ndomain: d\n",
        not_pem.display()
    ))
    .unwrap_err();
    assert!(error.to_string().contains("tls.ca_file"), "{error}");
    assert!(matches!(error.line(), Some(3 | 4)), "{error}");
}

#[test]
fn bad_backend_sections() {
    for (text, needle) in [
        (
            "backend:\n  redis: redis://a\n  cluster: [redis://b]\n",
            "not several",
        ),
        (
            "backend:\n  cluster: [redis://b]\n  sentinel: {sentinels: [redis://s:26379], master: m}\n",
            "not several",
        ),
        (
            "backend:\n  sentinel: {sentinels: [], master: m}\n",
            "sentinel.sentinels",
        ),
        (
            "backend:\n  sentinel: {sentinels: [redis://s:26379]}\n",
            "sentinel.master",
        ),
        (
            "backend:\n  sentinel: {sentinels: ['nope://x'], master: m}\n",
            "sentinel.sentinels[0]",
        ),
        (
            "backend:\n  redis: redis://a\n  password: x\n  password_env: Y\n",
            "one of password, password_file or password_env",
        ),
        (
            "backend:\n  redis: redis://a\n  password_file: /nonexistent/tollgate/secret\n",
            "password_file: cannot read",
        ),
        (
            "backend:\n  redis: redis://a\n  password_env: TOLLGATE_TEST_SURELY_UNSET_VARIABLE\n",
            "is not set",
        ),
        (
            "backend:\n  redis: redis://a\n  tls: {cert_file: c.pem}\n",
            "needs its key",
        ),
        (
            "backend:\n  redis: redis://a\n  tls: {ca_file: /nonexistent/tollgate/ca.pem}\n",
            "tls.ca_file: cannot read",
        ),
        (
            "backend:\n  redis: redis://a\n  module: sometimes\n",
            "module",
        ),
        (
            "backend:\n  redis: redis://a\n  local_share: 0\n",
            "local_share",
        ),
        (
            "backend:\n  redis: redis://a\n  leases: {initial: 0}\n",
            "leases.initial",
        ),
        (
            "backend:\n  redis: redis://a\n  wait: {replicas: 0, timeout: 2ms}\n",
            "wait: durability: at least one replica",
        ),
        (
            "backend:\n  redis: redis://a\n  wait: {replicas: 1, timeout: 5ms}\n",
            "shorter than the deadline",
        ),
        (
            "backend:\n  redis: redis://a\n  wait: {replicas: 1, timeout: 0s}\n",
            "wait.timeout",
        ),
        (
            "backend:\n  redis: redis://a\n  wait: {replicas: 1, timeout: soon}\n",
            "wait.timeout",
        ),
        (
            "backend:\n  redis: redis://a\n  wait: {replicas: 1}\n",
            "timeout",
        ),
        (
            "backend:\n  redis: redis://a\n  leases: {initial: 9, max: 8}\n",
            "leases.max",
        ),
        (
            "backend:\n  redis: redis://a\n  breaker: {threshold: 0}\n",
            "breaker.threshold",
        ),
        (
            "backend:\n  redis: redis://a\n  key_prefix: 'a{b'\n",
            "key_prefix",
        ),
        (
            "backend:\n  redis: redis://a\n  deadline: soon\n",
            "deadline",
        ),
        ("backend: redis://a\n", "a mapping"),
    ] {
        let error = parse(&format!("{text}domain: d\n")).unwrap_err();
        assert!(error.to_string().contains(needle), "{needle}: {error}");
        assert!(error.line().is_some(), "{error}");
    }
}

/// `warmup:` runs the core's warm-up: 2 per second after 4 s, cold at a
/// third of it; the first request at once, the next after 1.375 s.
#[test]
fn warm_up_rules() {
    use tollgate::{Limiter, ManualClock};
    let config = parse(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2, warmup: {period: 4s}}\n  - key: b\n    rate_limits:\n      - {unit: second, requests_per_unit: 5, warmup: {period: 1m, cold_factor: 4}}\n      - {unit: day, requests_per_unit: 500}\n",
    )
    .expect("valid");
    let Some(LimitConfig::Limited { limits, .. }) = &config.domains[0].descriptors[0].limit else {
        panic!("limited")
    };
    assert_eq!(limits.algorithm.kind(), AlgorithmKind::WarmUp);
    assert_eq!(
        limits.quotas[0].warmup,
        Some(Warmup {
            period: Duration::from_secs(4),
            cold_factor: 3
        })
    );
    let BuiltAlgorithm::Mixed(all) = &limits.algorithm else {
        panic!("warm-up runs as the core's AllOf<AnyAlgorithm>")
    };
    let limiter = Limiter::with_clock(all.clone(), ManualClock::new());
    assert!(limiter.check().is_allowed());
    assert_eq!(limiter.check().retry_after(), Duration::from_millis(1_375));
    let Some(LimitConfig::Limited { limits, .. }) = &config.domains[0].descriptors[1].limit else {
        panic!("limited")
    };
    assert_eq!(
        limits.algorithm.kinds(),
        vec![AlgorithmKind::WarmUp, AlgorithmKind::Gcra]
    );
    for (text, needle) in [
        (
            "{unit: second, requests_per_unit: 2, warmup: {period: 4s, cold_factor: 0}}",
            "warmup.cold_factor",
        ),
        (
            "{unit: second, requests_per_unit: 2, warmup: {period: 0s}}",
            "warmup.period",
        ),
        (
            "{unit: second, requests_per_unit: 2, warmup: {period: 4s, cold: 3}}",
            "cold",
        ),
        (
            "{unit: second, requests_per_unit: 2, algorithm: warm_up}",
            "warmup: missing",
        ),
        (
            "{unit: second, requests_per_unit: 2, algorithm: gcra, warmup: {period: 4s}}",
            "only the warm_up algorithm",
        ),
        (
            "{calendar: day, requests_per_unit: 2, warmup: {period: 4s}}",
            "warmup",
        ),
        (
            "{unit: second, requests_per_unit: 1000000007, warmup: {period: 3650d}}",
            "warm-up",
        ),
    ] {
        let file = format!("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {text}\n");
        let error = parse(&file).expect_err(text).to_string();
        assert!(error.contains(needle), "{text}: {error}");
    }
    // Under Redis too: the general script runs warm-up limits.
    parse(
        "backend:\n  redis: redis://127.0.0.1:1\ndomain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2, warmup: {period: 4s}}\n",
    )
    .expect("warm-up under Redis");
}
