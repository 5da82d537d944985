//! `key_layout: lyft` against real `redis-server`s: a rolling upgrade,
//! where envoyproxy/ratelimit's pods (played here by a plain Redis client
//! doing what its Go code does: `INCRBY` then `EXPIRE` on the key it
//! builds, admitting when the result is within the limit) and tollgate's
//! server decide the same descriptors on one Redis.

use redis::AsyncCommands as _;
use tollgate::Nanos;
use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_server::grpc::proto::envoy::r#type::v3::RateLimitUnit;

use crate::support::*;

/// 20 s into a minute, an hour and a day (UNIX seconds; 1699920000 is a
/// midnight, UTC).
const NOW: u64 = 1_699_920_000 + 20;

const RULES: &str = "
domain: rl
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
  - key: path
    value: /api/*
    share_threshold: true
    descriptors:
      - key: method
        rate_limit: {unit: hour, requests_per_unit: 3, algorithm: fixed_window}
  - key: burst
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: fixed_window}
  - key: gcra
    rate_limit: {unit: minute, requests_per_unit: 2}
";

/// One of Lyft's pods, as its `fixed_cache_impl.go` counts (without its
/// local cache): the key as `cache_key.go` writes it, `INCRBY` then
/// `EXPIRE` (unit + jitter), admitted iff the result is within the limit.
struct LyftPod {
    connection: redis::aio::MultiplexedConnection,
    prefix: &'static str,
}

impl LyftPod {
    async fn on(url: &str, prefix: &'static str) -> LyftPod {
        let client = redis::Client::open(url).expect("url");
        let connection = within(client.get_multiplexed_async_connection())
            .await
            .expect("connect");
        LyftPod { connection, prefix }
    }

    /// Lyft's key, written out as its Go code writes it.
    fn key(&self, domain: &str, entries: &[(&str, &str)], divider: u64, now: u64) -> String {
        let mut key = format!("{}{domain}_", self.prefix);
        for (k, v) in entries {
            key.push_str(&format!("{k}_{v}_"));
        }
        key.push_str(&((now / divider) * divider).to_string());
        key
    }

    async fn should_rate_limit(
        &mut self,
        entries: &[(&str, &str)],
        (limit, divider): (u64, u64),
        hits: u64,
        now: u64,
    ) -> bool {
        let key = self.key("rl", entries, divider, now);
        let after: u64 = self.connection.incr(&key, hits).await.expect("INCRBY");
        let _: bool = self
            .connection
            .expire(&key, divider as i64)
            .await
            .expect("EXPIRE");
        after <= limit
    }
}

fn backend(url: &str, lyft: &str) -> String {
    format!("backend:\n  redis: {url}\n{PATIENT}  key_layout: lyft\n  lyft: {lyft}\n")
}

async fn code(server: &TestServer, entries: &[(&str, &str)], hits: u32) -> Code {
    let mut client = server.grpc_client().await;
    let mut req = request("rl", vec![descriptor(entries)]);
    req.hits_addend = hits;
    within(client.should_rate_limit(req))
        .await
        .expect("grpc")
        .into_inner()
        .overall_code()
}

fn at(server: &TestServer, now: u64) {
    server.clock.set(Nanos::new(now * 1_000_000_000));
}

/// The rolling upgrade: a Lyft pod and tollgate's server take turns on
/// the same descriptor; together they admit exactly the limit, and the
/// keys tollgate writes are Lyft's, byte for byte, with Lyft's counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lyft_pods_and_tollgate_share_one_count() {
    let redis = RedisServer::start();
    let rules = format!(
        "{}{RULES}",
        backend(
            &redis.url(),
            "{key_prefix: 'ratelimit:', expiration_jitter_max: 0s}"
        )
    );
    let server = start_with("", &rules).await;
    at(&server, NOW);
    let mut pod = LyftPod::on(&redis.url(), "ratelimit:").await;
    let alice = [("user", "alice")];

    // tollgate alone first: the key is Lyft's, the value Lyft's count.
    assert_eq!(code(&server, &alice, 1).await, Code::Ok);
    let key = pod.key("rl", &alice, 60, NOW);
    assert_eq!(key, "ratelimit:rl_user_alice_1699920000");
    assert_eq!(redis.keys("*"), vec![key.clone()]);
    assert_eq!(redis.cli(&["GET", &key]), "1");
    let ttl: u64 = redis.cli(&["TTL", &key]).parse().unwrap();
    assert!((1..=60).contains(&ttl), "TTL {ttl}");

    // Then both, in turn, with Lyft's hits_addend of 2 on tollgate's side.
    let (mut by_lyft, mut by_tollgate) = (0, 1);
    for _ in 0..10 {
        if pod.should_rate_limit(&alice, (10, 60), 1, NOW).await {
            by_lyft += 1;
        }
        if code(&server, &alice, 2).await == Code::Ok {
            by_tollgate += 2;
        }
    }
    assert_eq!(
        by_lyft + by_tollgate,
        10,
        "lyft {by_lyft}, tollgate {by_tollgate}"
    );
    assert!(by_lyft > 0 && by_tollgate > 1);
    // Lyft's refused hits are in the count; tollgate's are not.
    let count: u64 = redis.cli(&["GET", &key]).parse().unwrap();
    assert_eq!(count, 1 + 10 + (by_tollgate - 1));
    assert_eq!(redis.keys("*"), vec![key.clone()]);

    // A new minute is a new key, for both.
    at(&server, NOW + 60);
    assert_eq!(code(&server, &alice, 1).await, Code::Ok);
    assert!(pod.should_rate_limit(&alice, (10, 60), 9, NOW + 60).await);
    assert_eq!(code(&server, &alice, 1).await, Code::OverLimit);
    assert_eq!(
        redis.cli(&["GET", &pod.key("rl", &alice, 60, NOW + 60)]),
        "10"
    );
    // Lyft's duration_until_reset: the window's end, 40 s away.
    let mut client = server.grpc_client().await;
    let status = within(client.should_rate_limit(request("rl", vec![descriptor(&alice)])))
        .await
        .expect("grpc")
        .into_inner()
        .statuses
        .remove(0);
    assert_eq!(status.code(), Code::OverLimit);
    assert_eq!(status.limit_remaining, 0);
    assert_eq!(status.duration_until_reset.map(|d| d.seconds), Some(40));

    // share_threshold: every value matching the wildcard counts under the
    // pattern, in Lyft's key as in its own.
    for path in ["/api/a", "/api/b"] {
        assert_eq!(
            code(&server, &[("path", path), ("method", "GET")], 1).await,
            Code::Ok
        );
    }
    let shared = [("path", "/api/*"), ("method", "GET")];
    assert!(pod.should_rate_limit(&shared, (3, 3600), 1, NOW).await);
    assert_eq!(
        code(&server, &[("path", "/api/c"), ("method", "GET")], 1).await,
        Code::OverLimit
    );
    assert_eq!(redis.cli(&["GET", &pod.key("rl", &shared, 3600, NOW)]), "3");

    // A rule Lyft cannot share (GCRA) keeps tollgate's keys.
    assert_eq!(code(&server, &[("gcra", "x")], 1).await, Code::Ok);
    let tollgate_keys = redis.keys("tollgate{*");
    assert_eq!(tollgate_keys.len(), 1, "{tollgate_keys:?}");
    assert!(tollgate_keys[0].starts_with("tollgate{rl.gcra|"));
    server.stop().await;
}

/// Concurrent traffic from both fleets on one key: never above the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_fleets_never_admit_above_the_limit() {
    let redis = RedisServer::start();
    let rules = format!(
        "{}{RULES}",
        backend(&redis.url(), "{expiration_jitter_max: 0s}")
    );
    let server = start_with("", &rules).await;
    at(&server, NOW);
    let bob = [("user", "bob")];
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let mut pod = LyftPod::on(&redis.url(), "").await;
        tasks.spawn(async move {
            let mut admitted = 0;
            for _ in 0..10 {
                admitted += u64::from(
                    pod.should_rate_limit(&[("user", "bob")], (10, 60), 1, NOW)
                        .await,
                );
            }
            admitted
        });
    }
    for _ in 0..4 {
        let mut client = server.grpc_client().await;
        tasks.spawn(async move {
            let mut admitted = 0;
            for _ in 0..10 {
                let response =
                    within(client.should_rate_limit(request("rl", vec![descriptor(&bob)])))
                        .await
                        .expect("grpc")
                        .into_inner();
                admitted += u64::from(response.overall_code() == Code::Ok);
            }
            admitted
        });
    }
    let mut total = 0;
    while let Some(admitted) = tasks.join_next().await {
        total += admitted.expect("task");
    }
    assert_eq!(total, 10);
    server.stop().await;
}

/// `per_second` (REDIS_PERSECOND): per-second limits count on the second
/// Redis, the others on the first; the jitter lands in the TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_second_limits_count_on_the_second_redis() {
    let main = RedisServer::start();
    let second = RedisServer::start();
    let lyft = format!(
        "{{expiration_jitter_max: 100s, per_second: {{redis: '{}'}}}}",
        second.url()
    );
    let rules = format!("{}{RULES}", backend(&main.url(), &lyft));
    let server = start_with("", &rules).await;
    at(&server, NOW);
    assert_eq!(code(&server, &[("burst", "b")], 2).await, Code::Ok);
    assert_eq!(code(&server, &[("burst", "b")], 1).await, Code::OverLimit);
    assert_eq!(code(&server, &[("user", "u")], 1).await, Code::Ok);
    assert_eq!(second.keys("*"), vec![format!("rl_burst_b_{NOW}")]);
    assert_eq!(second.cli(&["GET", &format!("rl_burst_b_{NOW}")]), "2");
    assert_eq!(main.keys("*"), vec!["rl_user_u_1699920000".to_owned()]);
    let ttl: u64 = main.cli(&["TTL", "rl_user_u_1699920000"]).parse().unwrap();
    assert!(
        (1..160).contains(&ttl),
        "TTL {ttl}: 60 s + [0, 100) s of jitter"
    );
    let ttl: u64 = second
        .cli(&["TTL", &format!("rl_burst_b_{NOW}")])
        .parse()
        .unwrap();
    assert!(
        (1..101).contains(&ttl),
        "TTL {ttl}: 1 s + [0, 100) s of jitter"
    );
    // The next second is a fresh window.
    at(&server, NOW + 1);
    assert_eq!(code(&server, &[("burst", "b")], 1).await, Code::Ok);
    server.stop().await;
}

/// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: a request with a descriptor
/// over its limit counts none of its other descriptors when on; each is
/// counted on its own when off (Lyft's default). Never the refused one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_increment_when_over_limit_spares_the_other_descriptors() {
    for stop in [false, true] {
        let redis = RedisServer::start();
        let lyft = format!("{{expiration_jitter_max: 0s, stop_increment_when_over_limit: {stop}}}");
        let rules = format!("{}{RULES}", backend(&redis.url(), &lyft));
        let server = start_with("", &rules).await;
        at(&server, NOW);
        let full = [("burst", "full")];
        assert_eq!(code(&server, &full, 2).await, Code::Ok);
        let mut client = server.grpc_client().await;
        let both = request(
            "rl",
            vec![descriptor(&full), descriptor(&[("user", "carol")])],
        );
        let response = within(client.should_rate_limit(both))
            .await
            .expect("grpc")
            .into_inner();
        assert_eq!(response.overall_code(), Code::OverLimit);
        assert_eq!(response.statuses[1].code(), Code::Ok);
        let carol = redis.cli(&["GET", "rl_user_carol_1699920000"]);
        assert_eq!(carol, if stop { "" } else { "1" }, "stop: {stop}");
        assert_eq!(redis.cli(&["GET", &format!("rl_burst_full_{NOW}")]), "2");
        server.stop().await;
    }
}

/// Redis Cluster: Lyft's keys have no hash tag; each lands in its own slot
/// and is counted there, for both fleets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lyft_keys_on_a_cluster() {
    let cluster = RedisCluster::start();
    let rules = format!(
        "backend:\n  cluster: [{}]\n{PATIENT}  key_layout: lyft\n  lyft: {{expiration_jitter_max: 0s}}\n{RULES}",
        cluster.urls().join(", ")
    );
    let server = start_with("", &rules).await;
    at(&server, NOW);
    let users: Vec<String> = (0..12).map(|i| format!("u{i}")).collect();
    for user in &users {
        let mut client = server.grpc_client().await;
        let mut req = request("rl", vec![descriptor(&[("user", user)])]);
        req.hits_addend = 10;
        let response = within(client.should_rate_limit(req))
            .await
            .expect("grpc")
            .into_inner();
        assert_eq!(response.overall_code(), Code::Ok);
    }
    let mut nodes = std::collections::HashSet::new();
    for user in &users {
        let key = format!("rl_user_{user}_1699920000");
        let node = cluster.node_of(key.as_bytes());
        assert!(node < 3, "{key} is on no node");
        assert_eq!(cluster.nodes[node].cli(&["GET", &key]), "10");
        nodes.insert(node);
    }
    assert!(nodes.len() > 1, "12 keys in one slot's node: {nodes:?}");
    assert_eq!(code(&server, &[("user", "u0")], 1).await, Code::OverLimit);
    server.stop().await;
}

/// A request's `limit` override is Lyft's too: it counts in Lyft's key,
/// with the override's unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_overrides_count_in_lyft_keys() {
    let redis = RedisServer::start();
    let rules = format!(
        "{}{RULES}",
        backend(&redis.url(), "{expiration_jitter_max: 0s}")
    );
    let server = start_with("", &rules).await;
    at(&server, NOW);
    let mut pod = LyftPod::on(&redis.url(), "").await;
    let tenant = [("tenant", "t1")];
    let overridden = || {
        let mut d = descriptor(&tenant);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 3,
            unit: RateLimitUnit::Hour as i32,
        });
        request("rl", vec![d])
    };
    let mut client = server.grpc_client().await;
    let mut decide = async || {
        within(client.should_rate_limit(overridden()))
            .await
            .expect("grpc")
            .into_inner()
            .overall_code()
    };
    assert_eq!(decide().await, Code::Ok);
    assert!(pod.should_rate_limit(&tenant, (3, 3600), 1, NOW).await);
    assert_eq!(decide().await, Code::Ok);
    assert_eq!(decide().await, Code::OverLimit);
    assert_eq!(redis.keys("*"), vec!["rl_tenant_t1_1699920000".to_owned()]);
    assert_eq!(redis.cli(&["GET", "rl_tenant_t1_1699920000"]), "3");
    server.stop().await;
}

/// A key holding something other than a count, and Redis gone: the rule's
/// failure policy decides (here fail_closed), counted in its metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_go_to_the_rules_failure_policy() {
    let mut redis = RedisServer::start();
    let rules = format!(
        "{}  failure_policy: fail_closed\n{RULES}",
        backend(&redis.url(), "{expiration_jitter_max: 0s}")
    );
    let server = start_with("", &rules).await;
    at(&server, NOW);
    redis.cli(&["SET", "rl_user_x_1699920000", "not a count"]);
    assert_eq!(code(&server, &[("user", "x")], 1).await, Code::OverLimit);
    assert_eq!(redis.cli(&["GET", "rl_user_x_1699920000"]), "not a count");
    assert_eq!(code(&server, &[("user", "y")], 1).await, Code::Ok);
    redis.kill();
    assert_eq!(code(&server, &[("user", "z")], 1).await, Code::OverLimit);
    let text = server.metrics().await;
    assert_eq!(
        metric(
            &text,
            r#"tollgate_redis_decisions_total{rule="rl.user",source="policy"}"#
        ),
        2.0,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            r#"tollgate_redis_decisions_total{rule="rl.user",source="redis"}"#
        ),
        1.0
    );
    server.stop().await;
}

/// The admin controls (reset, lists, penalties…) need a marker in the
/// key's state, which Lyft's bare count has no room for: refused for a
/// rule in Lyft's keys, applied as before to a rule in tollgate's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_controls_are_refused_on_lyft_keys() {
    use tollgate_server::Backend as _;
    use tollgate_server::backend::{Control, ControlError};
    use tollgate_server::config::BackendSettings;
    use tollgate_server::rules::RuleSet;

    let redis = RedisServer::start();
    let text = format!("{}{RULES}", backend(&redis.url(), "{}"));
    let config =
        tollgate_server::Config::from_yaml(std::path::Path::new("t.yaml"), &text).expect("config");
    let BackendSettings::Redis(settings) = &config.backend else {
        panic!("a redis backend");
    };
    let backend = tollgate_server::RedisBackend::connect(settings)
        .await
        .expect("connect");
    let rules = RuleSet::new(&config);
    backend.install(&rules).expect("install");
    let rule = |id: &str| {
        rules
            .rules()
            .iter()
            .find(|rule| &*rule.id == id)
            .expect("rule")
            .clone()
    };
    let user = rule("rl.user");
    assert_eq!(
        backend.control(&user, "k", Control::Deny).await,
        Err(ControlError::Unsupported("deny"))
    );
    let gcra = rule("rl.gcra");
    assert_eq!(backend.control(&gcra, "k", Control::Reset).await, Ok(()));
}
