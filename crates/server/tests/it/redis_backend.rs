//! The Redis backend against a real `redis-server` started by the test:
//! decisions shared through Redis by two servers, Redis stopped and
//! restarted mid-traffic under each failure policy, leases given back on
//! shutdown, metrics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tollgate_server::Server;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::support::*;
use tollgate_testkit::Stalls;

/// GCRA with a period of a day: no refill to speak of during a test.
const RULES: &str = "
domain: rl
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: big
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: window
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: sliding_window}
";

async fn check(server: &TestServer, key: &str, value: &str, dry_run: bool) -> Value {
    let body = json!({
        "domain": "rl",
        "descriptors": [{"entries": [{"key": key, "value": value}]}],
        "dry_run": dry_run,
    });
    let response = within(
        http_client()
            .post(server.url("/v1/check"))
            .json(&body)
            .send(),
    )
    .await
    .expect("http");
    assert_eq!(response.status(), 200);
    response.json().await.expect("json")
}

async fn grpc_code(server: &TestServer, key: &str, value: &str) -> Code {
    let mut client = server.grpc_client().await;
    within(client.should_rate_limit(request("rl", vec![descriptor(&[(key, value)])])))
        .await
        .expect("grpc")
        .into_inner()
        .overall_code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_one_limit_through_redis() {
    let redis = RedisServer::start();
    let rules = format!("{}{RULES}", redis.backend(crate::support::PATIENT));
    let a = start_with("", &rules).await;
    let b = start_with("", &rules).await;

    // 3 a day for alice, taken over both APIs of both servers.
    assert_eq!(grpc_code(&a, "user", "alice").await, Code::Ok);
    assert_eq!(
        check(&b, "user", "alice", false).await["overall_code"],
        "OK"
    );
    assert_eq!(grpc_code(&b, "user", "alice").await, Code::Ok);
    assert_eq!(grpc_code(&a, "user", "alice").await, Code::OverLimit);
    let denied = check(&a, "user", "alice", false).await;
    assert_eq!(denied["overall_code"], "OVER_LIMIT");
    assert!(denied["statuses"][0]["retry_after_ms"].as_u64().unwrap() > 0);
    // Another bucket is untouched.
    assert_eq!(
        check(&b, "user", "bob", true).await["statuses"][0]["remaining"],
        3
    );

    // The state is in Redis, under the rule's name and the bucket.
    let keys = redis.keys("tollgate{rl.user|*");
    // bob was only looked at: a look writes nothing.
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(keys[0].contains("alice"), "{keys:?}");
    redis.cli(&["FLUSHALL"]);
    assert_eq!(
        grpc_code(&a, "user", "alice").await,
        Code::Ok,
        "state was in Redis"
    );

    let text = a.metrics().await;
    assert!(
        metric(
            &text,
            r#"tollgate_redis_decisions_total{rule="rl.user",source="redis"}"#
        ) >= 4.0,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            r#"tollgate_redis_decisions_total{rule="rl.user",source="policy"}"#
        ),
        0.0
    );
    a.stop().await;
    b.stop().await;
}

/// How many clients ask at once while Redis is away.
const CLIENTS: usize = 4;

/// Asks `n` times on both APIs from each of [`CLIENTS`] concurrent clients
/// while Redis is away: every answer is `code`, each within `bound` plus
/// the longest scheduling stall the machine had meanwhile (measured by
/// `stalls`, so that a loaded machine widens the bound by what it did to
/// every thread, not by a guess).
async fn answers_while_down(
    server: &TestServer,
    n: usize,
    code: Code,
    bound: Duration,
    stalls: &Arc<Stalls>,
) {
    let expected = match code {
        Code::Ok => "OK",
        _ => "OVER_LIMIT",
    };
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..CLIENTS {
        let mut grpc = server.grpc_client().await;
        let http = http_client();
        let url = server.url("/v1/check");
        let stalls = Arc::clone(stalls);
        clients.spawn(async move {
            for i in 0..n {
                let started = Instant::now();
                let answer = within(grpc.should_rate_limit(request(
                    "rl",
                    vec![descriptor(&[("user", &format!("c{c}u{i}"))])],
                )))
                .await
                .expect("grpc")
                .into_inner();
                let took = started.elapsed();
                assert_eq!(answer.overall_code(), code, "grpc client {c} #{i}");
                assert!(
                    took < bound + stalls.worst(),
                    "grpc client {c} #{i} took {took:?}, bound {bound:?} + stalls {:?}",
                    stalls.worst()
                );

                let started = Instant::now();
                let body = json!({
                    "domain": "rl",
                    "descriptors": [{"entries": [{"key": "user", "value": format!("c{c}h{i}")}]}],
                });
                let response = within(http.post(&url).json(&body).send())
                    .await
                    .expect("http");
                assert_eq!(response.status(), 200, "http client {c} #{i}");
                let answer: Value = response.json().await.expect("json");
                let took = started.elapsed();
                assert_eq!(answer["overall_code"], expected, "http client {c} #{i}");
                assert!(
                    took < bound + stalls.worst(),
                    "http client {c} #{i} took {took:?}, bound {bound:?} + stalls {:?}",
                    stalls.worst()
                );
            }
        });
    }
    while let Some(client) = clients.join_next().await {
        client.expect("client panicked");
    }
}

/// Waits (bounded) until `server` decides through Redis again.
async fn until_redis_decides(server: &TestServer, rule: &str) {
    let name = format!(r#"tollgate_redis_decisions_total{{rule="{rule}",source="redis"}}"#);
    let before = metric(&server.metrics().await, &name);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _ = check(server, "user", "probe", false).await;
        if metric(&server.metrics().await, &name) > before {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "decisions never went back to Redis"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The deadline in these tests.
const DEADLINE_MS: u64 = 50;
/// What a request may take beyond the deadline: the HTTP / gRPC round trip
/// on loopback (well under a millisecond idle) and the scheduling of
/// [`CLIENTS`] × 2 concurrent requests plus the server on a loaded 2-core
/// machine (tens of milliseconds at worst). 200 ms is four deadlines: a
/// server that waited for Redis (its client's timeouts are [`REDIS_WAIT`])
/// instead of the deadline fails by a wide margin, and a busy machine does
/// not. Each bound also allows the longest scheduling stall measured while
/// Redis is away ([`Stalls`]): what a machine at load 5-8 did to every
/// thread, which no fixed margin covers.
const MARGIN: Duration = Duration::from_millis(200);
/// The Redis client's own response and connection timeouts: far above the
/// deadline, so that only the deadline can keep the answers in bound.
const REDIS_WAIT: &str = "2s";

/// Requests per client and API in each outage.
const ROUNDS: usize = 5;
/// The policy's decisions at least (two outages, two APIs): every request
/// asked while Redis was away.
#[allow(clippy::cast_precision_loss)]
const POLICY_DECISIONS: f64 = (2 * 2 * CLIENTS * ROUNDS) as f64;

async fn outage(policy: &str, code: Code) {
    let mut redis = RedisServer::start();
    let backend = redis.backend(&format!(
        "  failure_policy: {policy}\n  deadline: {DEADLINE_MS}ms\n  response_timeout: {REDIS_WAIT}\n  connection_timeout: {REDIS_WAIT}\n"
    ));
    let server = start_with("", &format!("{backend}{RULES}")).await;
    let bound = Duration::from_millis(DEADLINE_MS) + MARGIN;
    // Redis decides before the outage: asked until it does (bounded), as a
    // first call that misses the 50 ms deadline on a loaded machine is
    // timing, not the fault under test.
    until_redis_decides(&server, "rl.user").await;
    let stalls = Arc::new(Stalls::start());

    // A stopped process accepts and never answers: every decision waits out
    // the deadline (then the breaker answers at once).
    redis.signal("-STOP");
    answers_while_down(&server, ROUNDS, code, bound, &stalls).await;
    redis.signal("-CONT");
    until_redis_decides(&server, "rl.user").await;

    // Killed: connection refused. Then restarted, empty, on the same port.
    redis.kill();
    answers_while_down(&server, ROUNDS, code, bound, &stalls).await;
    redis.restart();
    until_redis_decides(&server, "rl.user").await;
    assert!(
        !redis.keys("tollgate{rl.user|*").is_empty(),
        "the restarted Redis holds the state again"
    );

    let text = server.metrics().await;
    let result = if code == Code::Ok {
        "allowed"
    } else {
        "denied"
    };
    assert!(
        metric(
            &text,
            &format!(
                r#"tollgate_redis_policy_decisions_total{{rule="rl.user",result="{result}"}}"#
            )
        ) >= POLICY_DECISIONS,
        "{text}"
    );
    let faults: f64 = ["timeout", "error", "breaker_open"]
        .iter()
        .map(|fault| {
            metric(
                &text,
                &format!(r#"tollgate_redis_policy_faults_total{{rule="rl.user",fault="{fault}"}}"#),
            )
        })
        .sum();
    assert!(faults >= POLICY_DECISIONS, "{text}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_fail_open_answers_ok_within_the_deadline() {
    outage("fail_open", Code::Ok).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_fail_closed_answers_over_limit_within_the_deadline() {
    outage("fail_closed", Code::OverLimit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_local_policy_holds_its_share_of_the_quota() {
    let mut redis = RedisServer::start();
    let backend = redis.backend(&format!(
        "  failure_policy: local\n  local_share: 0.5\n  deadline: {DEADLINE_MS}ms\n  response_timeout: {REDIS_WAIT}\n  connection_timeout: {REDIS_WAIT}\n"
    ));
    let server = start_with("", &format!("{backend}{RULES}")).await;
    let bound = Duration::from_millis(DEADLINE_MS) + MARGIN;
    assert_eq!(grpc_code(&server, "big", "warm").await, Code::Ok);
    let stalls = Stalls::start();
    redis.kill();
    // 100 a day, half of it here while Redis is away: 50, then denials.
    let mut client = server.grpc_client().await;
    let mut admitted = 0;
    for i in 0..60 {
        let started = Instant::now();
        let answer =
            within(client.should_rate_limit(request("rl", vec![descriptor(&[("big", "k")])])))
                .await
                .expect("grpc")
                .into_inner();
        let took = started.elapsed();
        assert!(
            took < bound + stalls.worst(),
            "#{i} took {took:?}, bound {bound:?} + stalls {:?}",
            stalls.worst()
        );
        if answer.overall_code() == Code::Ok {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 50);
    // Degrading to the local share is never invisible: the status page
    // shows Redis down with its error, `tollgate_redis_up` reads 0; the
    // health checks stay 200 (no `health_check: true`: the share limits).
    let status = status_json(&server).await;
    assert_eq!(status["backend"]["state"], "down", "{status}");
    assert_eq!(status["backend"]["store"]["up"], false, "{status}");
    assert!(
        status["backend"]["store"]["last_error"].as_str().is_some(),
        "{status}"
    );
    assert_eq!(readyz(&server).await, 200);
    let text = server.metrics().await;
    assert_eq!(
        metric(&text, r#"tollgate_redis_up{redis="main"}"#),
        0.0,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            r#"tollgate_redis_policy_decisions_total{rule="rl.big",result="allowed"}"#
        ),
        50.0,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            r#"tollgate_redis_policy_decisions_total{rule="rl.big",result="denied"}"#
        ),
        10.0,
        "{text}"
    );
    server.stop().await;
}

async fn status_json(server: &TestServer) -> Value {
    within(http_client().get(server.url("/status.json")).send())
        .await
        .expect("status")
        .json()
        .await
        .expect("json")
}

async fn readyz(server: &TestServer) -> u16 {
    within(http_client().get(server.url("/readyz")).send())
        .await
        .expect("readyz")
        .status()
        .as_u16()
}

/// `health_check: true`: `/readyz` answers 503 while Redis is away (the
/// probe sees it without traffic), 200 once it is back; the status page
/// says `ok` again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_follows_redis_when_asked() {
    let mut redis = RedisServer::start();
    let backend = redis.backend(&format!(
        "  health_check: true
  deadline: {DEADLINE_MS}ms
  response_timeout: {REDIS_WAIT}
  connection_timeout: {REDIS_WAIT}
"
    ));
    let server = start_with("", &format!("{backend}{RULES}")).await;
    assert_eq!(readyz(&server).await, 200);
    redis.kill();
    let end = Instant::now() + Duration::from_secs(10);
    while readyz(&server).await != 503 {
        assert!(Instant::now() < end, "/readyz never 503 with Redis away");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status_json(&server).await["backend"]["state"], "down");
    redis.restart();
    let end = Instant::now() + Duration::from_secs(10);
    while readyz(&server).await != 200 {
        assert!(Instant::now() < end, "/readyz never 200 with Redis back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let backend = cluster
        .backend("  deadline: 200ms\n  response_timeout: 500ms\n  connection_timeout: 500ms\n");
    let server = start_with("", &format!("{backend}{RULES}")).await;

    // Many users: their buckets spread over the three masters' slots.
    let users: Vec<String> = (0..12).map(|i| format!("user{i}")).collect();
    let mut client = server.grpc_client().await;
    for round in 0..4 {
        let descriptors = users.iter().map(|u| descriptor(&[("user", u)])).collect();
        let answer = within(client.should_rate_limit(request("rl", descriptors)))
            .await
            .expect("grpc")
            .into_inner();
        // 3 a day each: the fourth round is over for every one.
        let expected = if round < 3 { Code::Ok } else { Code::OverLimit };
        assert_eq!(answer.overall_code(), expected, "round {round}");
        assert!(
            answer.statuses.iter().all(|s| s.code() == expected),
            "round {round}"
        );
    }
    assert_eq!(
        check(&server, "user", "user5", false).await["overall_code"],
        "OVER_LIMIT"
    );
    assert_eq!(
        check(&server, "user", "fresh", false).await["overall_code"],
        "OK"
    );

    // The buckets are on the cluster, on more than one master.
    let holding = cluster
        .nodes
        .iter()
        .filter(|node| !node.keys("tollgate{rl.user|*").is_empty())
        .count();
    assert!(holding >= 2, "keys on {holding} masters");
    let total: usize = cluster
        .nodes
        .iter()
        .map(|node| node.keys("tollgate{rl.user|*").len())
        .sum();
    assert_eq!(total, users.len() + 1);
    let text = server.metrics().await;
    assert_eq!(
        metric(
            &text,
            r#"tollgate_redis_decisions_total{rule="rl.user",source="policy"}"#
        ),
        0.0,
        "{text}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_given_back_on_graceful_shutdown() {
    let redis = RedisServer::start();
    let leased = format!(
        "{}{RULES}",
        redis.backend(&format!(
            "  leases: {{initial: 8, max: 8, ttl: 10s}}\n{}",
            crate::support::PATIENT
        ))
    );
    let plain = format!("{}{RULES}", redis.backend(crate::support::PATIENT));
    let a = start_with("", &leased).await;
    let b = start_with("", &plain).await;

    // One request on A leases 8 of the 100 permits; B sees 92 in Redis.
    assert_eq!(check(&a, "big", "k", false).await["overall_code"], "OK");
    let left = |body: Value| {
        body["statuses"][0]["remaining"]
            .as_u64()
            .expect("remaining")
    };
    assert_eq!(left(check(&b, "big", "k", true).await), 92);
    // A answers the next ones from its lease: Redis does not move.
    assert_eq!(check(&a, "big", "k", false).await["overall_code"], "OK");
    assert_eq!(left(check(&b, "big", "k", true).await), 92);

    // Graceful shutdown gives the 6 unspent back.
    a.stop().await;
    assert_eq!(left(check(&b, "big", "k", true).await), 98);
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_keeps_unchanged_rules_and_never_refreshes_changed_ones() {
    let redis = RedisServer::start();
    let backend = redis.backend(crate::support::PATIENT);
    let server = start_with("", &format!("{backend}{RULES}")).await;
    for _ in 0..2 {
        assert_eq!(
            check(&server, "window", "w", false).await["overall_code"],
            "OK"
        );
    }
    assert_eq!(
        check(&server, "user", "u", false).await["overall_code"],
        "OK"
    );
    // `user` keeps its limits, `window` doubles its own.
    let changed = RULES.replace("requests_per_unit: 2,", "requests_per_unit: 4,");
    server.write_config("  reload_interval_ms: 0\n", &format!("{backend}{changed}"));
    server.reloader.reload().expect("reload");
    let left = |body: Value| {
        body["statuses"][0]["remaining"]
            .as_u64()
            .expect("remaining")
    };
    assert_eq!(left(check(&server, "user", "u", true).await), 2, "kept");
    // The sliding window spent its 2: carried as the core carries it
    // (`Carry::Keep`), they stay taken under the new 4, never afresh.
    assert_eq!(
        left(check(&server, "window", "w", true).await),
        2,
        "2 of 4 left, not 4"
    );
    for _ in 0..2 {
        assert_eq!(
            check(&server, "window", "w", false).await["overall_code"],
            "OK"
        );
    }
    assert_eq!(
        check(&server, "window", "w", false).await["overall_code"],
        "OVER_LIMIT"
    );
    assert_eq!(
        left(check(&server, "window", "x", true).await),
        4,
        "a new key: the new limit"
    );

    // A rule the script cannot hold exactly is refused whole, old rules stay.
    let inexact = format!(
        "{backend}{RULES}  - key: huge\n    rate_limit: {{unit: year, requests_per_unit: 10}}\n"
    );
    server.write_config("  reload_interval_ms: 0\n", &inexact);
    let error = server.reloader.reload().expect_err("refused");
    assert!(error.to_string().contains("rule rl.huge"), "{error}");
    assert_eq!(left(check(&server, "user", "u", true).await), 2);
    server.stop().await;
}

#[tokio::test]
async fn unreachable_redis_and_bad_backend_sections_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rules.yaml");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    std::fs::write(
        &path,
        format!(
            "server:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\nbackend:\n  redis: redis://127.0.0.1:{port}\n{RULES}"
        ),
    )
    .expect("write");
    let error = within(Server::from_config_file(&path).expect("valid").bind())
        .await
        .expect_err("nothing listens there");
    assert!(
        error
            .to_string()
            .contains("cannot connect to redis://127.0.0.1:"),
        "{error}"
    );

    for (section, needle, line) in [
        (
            "backend:\n  redis: redis://x\n  colour: red\n",
            "unknown field `colour`",
            5,
        ),
        (
            "backend:\n  redis: redis://x\n  failure_policy: shrug\n",
            "fail_open",
            5,
        ),
        (
            "backend:\n  redis: redis://x\n  deadline: 0ms\n",
            "deadline: must be longer than 0",
            4,
        ),
        (
            "backend:\n  redis: redis://x\n  failure_policy: fail_open\n  local_share: 0.5\n",
            "local_share",
            4,
        ),
        (
            "backend:\n  cluster: []\n",
            "cluster: needs at least one",
            4,
        ),
        ("backend:\n  redis: nonsense\n", "invalid Redis URL", 4),
        (
            "backend:\n  failure_policy: fail_open\n",
            "redis: missing",
            4,
        ),
    ] {
        std::fs::write(
            &path,
            format!("server:\n  reload_interval_ms: 0\n{section}{RULES}"),
        )
        .expect("write");
        let error = Server::from_config_file(&path).expect_err(needle);
        let text = error.to_string();
        assert!(text.contains(needle), "{needle}: {text}");
        assert!(text.starts_with(&path.display().to_string()), "{text}");
        assert_eq!(error.line(), Some(line), "{needle}: {text}");
    }

    // Redis runs no sliding log: refused at load, at the rule's line.
    std::fs::write(
        &path,
        format!(
            "backend:\n  redis: redis://127.0.0.1:{port}\n{RULES}  - key: log\n    rate_limit: {{unit: second, requests_per_unit: 1, algorithm: sliding_log}}\n"
        ),
    )
    .expect("write");
    let error = Server::from_config_file(&path).expect_err("sliding log");
    assert!(
        error
            .to_string()
            .contains("descriptors[3]: descriptor 'log': runs sliding_log"),
        "{error}"
    );
    assert_eq!(error.line(), Some(12), "{error}");
}

/// A warm-up rule on Redis: 60 a minute after a minute's warm-up, cold at a
/// third. Its first permit from cold costs 2,966.7 ms (the area of the
/// interval from 60 idle permits to 59: 3 s less half the slope's 1/15 s).
const WARM_RULES: &str = "
domain: rl
descriptors:
  - key: warm
    rate_limit: {unit: minute, requests_per_unit: 60, warmup: {period: 60s}}
";

/// Several servers warm one bucket together through Redis, deciding as the
/// in-memory backend does: from cold the first request anywhere is served
/// and every later one, on either server, waits out the cold cost of the
/// first (a server on its own state would serve its own first request at
/// once); the in-memory server, asked the same sequence, answers the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_warm_one_bucket_together_as_in_memory() {
    let redis = RedisServer::start();
    let on_redis = format!("{}{WARM_RULES}", redis.backend(crate::support::PATIENT));
    let a = start_with("", &on_redis).await;
    let b = start_with("", &on_redis).await;
    let memory = start_with("", WARM_RULES).await;

    async fn answers(server: &TestServer) -> (String, u64) {
        let answer = check(server, "warm", "svc", false).await;
        (
            answer["overall_code"].as_str().unwrap().to_owned(),
            answer["statuses"][0]["retry_after_ms"]
                .as_u64()
                .unwrap_or(0),
        )
    }
    let started = Instant::now();
    let fleet = [
        answers(&a).await,
        answers(&b).await,
        answers(&a).await,
        answers(&b).await,
    ];
    let alone = [
        answers(&memory).await,
        answers(&memory).await,
        answers(&memory).await,
        answers(&memory).await,
    ];
    // The cold cost, less what the sequence took in real time.
    let slack = u64::try_from(started.elapsed().as_millis()).unwrap() + 2;
    for (i, (fleet, alone)) in fleet.iter().zip(&alone).enumerate() {
        let want = if i == 0 { "OK" } else { "OVER_LIMIT" };
        assert_eq!(
            (fleet.0.as_str(), alone.0.as_str()),
            (want, want),
            "request {i}"
        );
        if i > 0 {
            for (who, retry) in [("fleet", fleet.1), ("memory", alone.1)] {
                assert!(
                    (2_967 - slack..=2_967).contains(&retry),
                    "{who} request {i}: retry after {retry} ms"
                );
            }
        }
    }
    // One state in Redis, "F S" (next free, idle permits), with its TTL.
    let keys = redis.keys("tollgate{rl.warm|*");
    assert_eq!(keys.len(), 1, "{keys:?}");
    let state = redis.cli(&["GET", &keys[0]]);
    assert!(state.trim().split(' ').count() == 2, "{state}");
    let ttl: i64 = redis.cli(&["PTTL", &keys[0]]).trim().parse().unwrap();
    // Until the bucket is as cold as a fresh one: the cost owed (2,967 ms)
    // and a second to regain the permit taken, plus 10 ms of slack.
    assert!((3_900..=3_977).contains(&ttl), "{ttl}");
    a.stop().await;
    b.stop().await;
    memory.stop().await;
}
