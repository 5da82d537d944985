//! The Redis backend through the layer, against a real `redis-server` started
//! on a free loopback port: per-client decisions in Redis with exact
//! headers, then the limiter's failure policy once Redis is gone.

mod support;

use std::time::{Duration, Instant};

use http::StatusCode;
use support::{from_peer, header, ok_service, send};
use tollgate::{Gcra, Quota};
use tollgate_redis::{FailurePolicy, Options, Redis, RedisLimiter};
use tollgate_testkit::RedisServer;
use tollgate_tower::{PeerIp, RateLimitLayer};
use tower::Layer;

/// The limiter's deadline: the decisions before the kill must be Redis's,
/// so one that a healthy Redis meets on a loaded 2-core machine too (the
/// answer after the kill comes at once: the connection is refused).
const DEADLINE: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_decides_per_client_and_the_failure_policy_answers_when_it_is_gone() {
    let mut server = RedisServer::start();
    let redis = Redis::connect(&server.url(), &Options::default())
        .await
        .expect("connects");
    // Two per minute per client; Redis gone: deny.
    let limiter = RedisLimiter::builder(redis, "tower-test")
        .limit(Gcra::new(Quota::per_minute(2).unwrap()).unwrap())
        .failure_policy(FailurePolicy::FailClosed)
        .deadline(DEADLINE)
        .build()
        .expect("limiter");
    let mut service = RateLimitLayer::builder(PeerIp::new(), limiter.clone())
        .headers_on_success(true)
        .build()
        .unwrap()
        .layer(ok_service());
    let request = |peer: &str| from_peer(peer).body(String::new()).unwrap();

    let first = send(&mut service, request("192.0.2.1")).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(header(&first, "ratelimit"), "\"default\";r=1");
    assert_eq!(
        send(&mut service, request("192.0.2.1")).await.status(),
        StatusCode::OK
    );
    let denied = send(&mut service, request("192.0.2.1")).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = header(&denied, "retry-after").parse().expect("seconds");
    assert!((29..=30).contains(&retry), "retry-after {retry}");
    // Another client has its own bucket, in Redis.
    assert_eq!(
        send(&mut service, request("192.0.2.2")).await.status(),
        StatusCode::OK
    );

    // Redis gone: the limiter's policy (fail closed) answers within its
    // deadline, as a 429, not an outage.
    server.kill();
    let started = Instant::now();
    let closed = send(&mut service, request("192.0.2.3")).await;
    assert_eq!(closed.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(!header(&closed, "retry-after").is_empty());
    assert!(
        started.elapsed() < DEADLINE + Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}
