//! Against one real `redis-server`: atomicity, the 4-client real-time
//! bound, the multi-limit AND, the TTL invariant and `SCRIPT FLUSH` under load.

mod scenarios;
mod support;
use support::Connect as _;

use std::time::Duration;

use futures_util::future::join_all;
use scenarios::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_connections_with_time_frozen_admit_exactly_the_capacity() {
    let server = support::Server::start();
    let connections = join_all((0..64).map(|_| server.connect())).await;
    let hour = Duration::from_secs(3_600);
    frozen_time_admits_exactly_capacity(
        &connections,
        gcra(500, hour, 500),
        "atomic-gcra",
        b"hot",
        100,
    )
    .await;
    frozen_time_admits_exactly_capacity(&connections, fixed(700, hour), "atomic-fixed", b"hot", 50)
        .await;
    frozen_time_admits_exactly_capacity(
        &connections,
        sliding(900, hour, 12),
        "atomic-sliding",
        b"hot",
        50,
    )
    .await;
}

/// 3 s of real time: as telling as 10 s, and it keeps the suite short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_clients_in_real_time_stay_within_the_bound() {
    let server = support::Server::start();
    let clients = join_all((0..4).map(|_| server.connect())).await;
    real_time_clients_stay_within_gcra_bound(
        &clients,
        "realtime",
        b"shared",
        Duration::from_secs(3),
    )
    .await;
}

#[tokio::test]
async fn several_limits_of_a_key_are_decided_all_or_nothing() {
    let server = support::Server::start();
    several_limits_are_all_or_nothing(&server.connect().await, "and").await;
}

#[tokio::test]
async fn every_key_always_has_a_ttl_within_its_refill_time() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let mut raw = support::raw(server.url()).await;
    every_key_has_a_bounded_ttl(&redis, &mut raw, "ttl").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_during_load_is_recovered() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let port = server.port;
    let flush = move || {
        let _ = std::process::Command::new("redis-cli")
            .args(["-p", &port.to_string(), "SCRIPT", "FLUSH"])
            .stdout(std::process::Stdio::null())
            .status();
    };
    script_flush_under_load_is_recovered(&redis, flush, "flush").await;
}

/// The deny cache answers a standing denial locally, to the nanosecond of
/// its retry time, and never past it.
#[tokio::test]
async fn deny_cache_answers_until_the_exact_retry_time() {
    use tollgate::{ManualClock, Nanos};
    use tollgate_redis::{RedisLimiter, Source};
    let server = support::Server::start();
    let clock = ManualClock::starting_at(Nanos::new(1_000_000_000));
    let limiter = RedisLimiter::builder(server.connect().await, "deny")
        .limit(gcra(10, Duration::from_secs(1), 2))
        .manual_time(clock.clone())
        .deny_cache(1_000)
        .deadline(Duration::from_secs(2))
        .build()
        .unwrap();
    assert!(limiter.check(b"k").await.is_allowed());
    assert!(limiter.check(b"k").await.is_allowed());
    let first = limiter.check_outcome(b"k", 1).await.unwrap();
    assert_eq!(first.source, Source::Redis);
    assert_eq!(first.decision.retry_after(), Duration::from_millis(100));
    let cached = limiter.check_outcome(b"k", 1).await.unwrap();
    assert_eq!(cached.source, Source::DenyCache);
    assert_eq!(cached.decision, first.decision);
    // Another cost is not the cached request: asked of Redis.
    assert_eq!(
        limiter.check_outcome(b"k", 2).await.unwrap().source,
        Source::Redis
    );
    clock.advance(Duration::from_nanos(99_999_999));
    let last = limiter.check_outcome(b"k", 1).await.unwrap();
    assert_eq!(last.source, Source::DenyCache);
    assert_eq!(last.decision.retry_after(), Duration::from_nanos(1));
    clock.advance(Duration::from_nanos(1));
    let after = limiter.check_outcome(b"k", 1).await.unwrap();
    assert_eq!(after.source, Source::Redis);
    assert!(after.decision.is_allowed());
    assert_eq!(limiter.stats().deny_cache, 2);
}

/// A batch of keys is decided concurrently on the shared connection, one
/// decision per key, in order.
#[tokio::test]
async fn a_batch_decides_every_key_in_order() {
    use tollgate::{ManualClock, Nanos};
    let server = support::Server::start();
    let clock = ManualClock::starting_at(Nanos::new(1_000_000_000));
    let limiter = scenarios::frozen(
        &server.connect().await,
        "batch",
        gcra(1, Duration::from_secs(60), 1),
        &clock,
    );
    let keys: Vec<String> = (0..1_000).map(|i| format!("user:{i}")).collect();
    let first = limiter.check_batch(&keys).await;
    assert_eq!(first.len(), 1_000);
    assert!(first.iter().all(|d| d.is_allowed()));
    // One key spent again, so its slot in the answer is the denial.
    let mut mixed = keys[..10].to_vec();
    mixed.push("fresh".into());
    let second = limiter.check_batch(&mixed).await;
    assert!(second[..10].iter().all(|d| d.is_denied()));
    assert!(second[10].is_allowed());
}
