//! A Redis that refuses the server, stops mid-run, or is not there yet at
//! start, with the server run from envoyproxy/ratelimit's environment:
//! loud (WARN lines, counters, health), an error for Envoy as Lyft makes
//! it, and waited for at start as `REDIS_STARTUP_*` say.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::lyft_env::support::{
    Counts, LyftServer, RedisServer, config_dir, descriptor, http_client, request, start,
    try_start, within, write,
};

const RULES: &str = "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 100}\n";

/// The variables of these tests: the health check follows Redis, and the
/// start retries quickly.
const FAST: &[(&str, &str)] = &[
    ("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true"),
    ("REDIS_STARTUP_INITIAL_INTERVAL", "50ms"),
    ("REDIS_STARTUP_MAX_INTERVAL", "100ms"),
    ("REDIS_TIMEOUT", "1s"),
];

/// The log lines written while it is held, on this thread (the tests run
/// on a current-thread runtime: the server's tasks log here too).
struct Logs {
    lines: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture() -> Logs {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Sink(Arc::clone(&lines));
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish();
        Logs {
            lines,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// The WARN lines containing `text`.
    fn warnings(&self, text: &str) -> Vec<String> {
        let bytes = self
            .lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|line| line.contains(" WARN ") && line.contains(text))
            .map(str::to_owned)
            .collect()
    }
}

/// Polls `done` every 20 ms until it holds, for at most 10 s.
async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !done().await {
        assert!(Instant::now() < end, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn healthcheck(server: &LyftServer) -> u16 {
    http_client()
        .get(format!("http://{}/healthcheck", server.http))
        .send()
        .await
        .expect("healthcheck")
        .status()
        .as_u16()
}

/// One hit on `rl`'s `user` rule: the overall code, or the gRPC error.
async fn check(server: &LyftServer) -> Result<Code, tonic::Status> {
    let mut client = server.grpc_client().await;
    let answer =
        within(client.should_rate_limit(request("rl", vec![descriptor(&[("user", "alice")])])))
            .await?;
    Ok(answer.into_inner().overall_code())
}

fn redis_errors(server: &LyftServer) -> u64 {
    server
        .service
        .metrics()
        .lyft_snapshot()
        .into_iter()
        .find(|(name, _)| name == "ratelimit.service.call.should_rate_limit.redis_error")
        .map_or(0, |(_, n)| n)
}

fn store_error(server: &LyftServer) -> Option<String> {
    let health = server.service.backend().health();
    let store = health.store.expect("a Redis backend has a store");
    (!store.up).then(|| store.last_error.unwrap_or_default())
}

fn layout(root: &std::path::Path) {
    write(&config_dir(root).join("rl.yaml"), RULES);
}

/// A Redis that starts wanting a password the server lacks (`requirepass`
/// set, the server's connections dropped): every call fails to Envoy
/// (`UNAVAILABLE`, so its `failure_mode_deny` decides), counted in Lyft's
/// `redis_error`; one WARN line names `NOAUTH`; `/healthcheck` answers
/// 500 (`REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`) and the status shows the
/// error. Once the password is lifted, all is as before. Before: every
/// call was answered by a local share of the quota, 200, nothing logged.
#[tokio::test]
async fn a_redis_that_refuses_the_server_is_loud_and_an_error_for_envoy() {
    let logs = Logs::capture();
    let redis = RedisServer::start();
    let server = start(Counts::Redis(&redis), FAST, layout).await;
    assert_eq!(check(&server).await.expect("decided"), Code::Ok);
    assert_eq!(healthcheck(&server).await, 200);

    redis.cli(&["CONFIG", "SET", "requirepass", "s3cret"]);
    let auth = ["-a", "s3cret", "--no-auth-warning"];
    redis.cli(&[&auth[..], &["CLIENT", "KILL", "TYPE", "normal"]].concat());

    for _ in 0..20 {
        let error = check(&server).await.expect_err("Redis refuses: an error");
        assert_eq!(error.code(), tonic::Code::Unavailable, "{error}");
    }
    assert!(redis_errors(&server) >= 20, "{}", redis_errors(&server));
    eventually("a WARN line naming NOAUTH", async || {
        !logs.warnings("NOAUTH").is_empty()
    })
    .await;
    eventually("/healthcheck 500", async || {
        healthcheck(&server).await == 500
    })
    .await;
    let error = store_error(&server).expect("shown down");
    assert!(error.contains("NOAUTH"), "{error}");
    let lines = logs.warnings("NOAUTH").len();
    assert!(
        lines <= 2,
        "one line per failure, not per request: {lines}\n{:?}",
        logs.warnings("")
    );

    redis.cli(&[&auth[..], &["CONFIG", "SET", "requirepass", ""]].concat());
    eventually("/healthcheck 200 again", async || {
        healthcheck(&server).await == 200
    })
    .await;
    eventually("decided again", async || check(&server).await.is_ok()).await;
    assert_eq!(store_error(&server), None);
    eventually("a WARN line saying Redis answers again", async || {
        !logs.warnings("answers again").is_empty()
    })
    .await;
    server.stop().await;
}

/// Redis stopped mid-run: calls fail to Envoy and the health check fails;
/// restarted on its port, the server finds it again by itself (its probe
/// reconnects) and serves.
#[tokio::test]
async fn redis_stopped_mid_run_fails_calls_then_serves_again() {
    let logs = Logs::capture();
    let mut redis = RedisServer::start();
    let server = start(Counts::Redis(&redis), FAST, layout).await;
    assert_eq!(check(&server).await.expect("decided"), Code::Ok);

    redis.kill();
    let error = check(&server).await.expect_err("Redis is gone: an error");
    assert_eq!(error.code(), tonic::Code::Unavailable, "{error}");
    eventually("/healthcheck 500", async || {
        healthcheck(&server).await == 500
    })
    .await;
    eventually("a WARN line", async || !logs.warnings("fails").is_empty()).await;
    assert!(redis_errors(&server) >= 1);

    redis.restart();
    eventually("/healthcheck 200 again", async || {
        healthcheck(&server).await == 200
    })
    .await;
    eventually("decided again", async || {
        matches!(check(&server).await, Ok(Code::Ok))
    })
    .await;
    server.stop().await;
}

/// No Redis at start: the server waits (a WARN line per try, at most one
/// a second) instead of exiting, and serves once Redis is started. With
/// `REDIS_STARTUP_MAX_ELAPSED_TIME` it gives up after that long, naming
/// the wait. Before: the start failed at once.
#[tokio::test]
async fn redis_absent_at_start_is_waited_for() {
    let logs = Logs::capture();
    let port = tollgate_testkit::free_port();
    let starting = tokio::spawn(async move {
        try_start(Counts::Absent(port), FAST, layout)
            .await
            .map_err(|error| error.to_string())
    });
    eventually("a WARN line for a retry", async || {
        !logs.warnings("Retrying Redis connection").is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!starting.is_finished(), "the start waits for Redis");
    let retries = logs.warnings("Retrying Redis connection").len();
    assert!(retries <= 2, "rate-limited: {retries} lines");

    let _redis = RedisServer::start_on(port, false);
    let server = within(starting).await.expect("task").expect("started");
    assert_eq!(check(&server).await.expect("decided"), Code::Ok);
    assert!(!logs.warnings("answers after").is_empty());
    server.stop().await;

    let gone = tollgate_testkit::free_port();
    let mut short = FAST.to_vec();
    short.push(("REDIS_STARTUP_MAX_ELAPSED_TIME", "300ms"));
    let started = Instant::now();
    let error = match try_start(Counts::Absent(gone), &short, layout).await {
        Ok(_) => panic!("no Redis: the start gives up"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("timed out waiting for Redis"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
}
