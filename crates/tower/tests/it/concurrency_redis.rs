//! The concurrency-limit layer on Redis leases (feature `redis`), against a
//! real `redis-server` on a free loopback port: two nodes (two layers, two
//! connections) share the limit per client; a response holds its lease
//! until its body is done; a node that dies holding slots frees them when
//! its leases expire (the leases' clock is a manual one: no waiting on
//! time).

use crate::support;

use std::time::Duration;

use http::StatusCode;
use support::{NETWORK_TIMEOUT, body, from_peer, ok_service, send};
use tollgate::{ManualClock, Nanos};
use tollgate_redis::concurrency::RedisConcurrencyLimiter;
use tollgate_redis::{FailurePolicy, Options, Redis};
use tollgate_testkit::RedisServer;
use tollgate_tower::PeerIp;
use tollgate_tower::concurrency::ConcurrencyLimitLayer;
use tower::Layer;

async fn node(server: &RedisServer, clock: &ManualClock) -> RedisConcurrencyLimiter {
    let redis = Redis::connect(&server.url(), &Options::default())
        .await
        .expect("connects");
    RedisConcurrencyLimiter::builder(redis, "tower-jobs", 2)
        .lease_ttl(Duration::from_secs(10))
        .deadline(Duration::from_secs(2))
        .failure_policy(FailurePolicy::FailClosed)
        .manual_time(clock.clone())
        .build()
        .expect("limiter")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_leases_hold_slots_across_nodes_and_a_dead_holder_frees_them_after_the_ttl() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::new(1_000_000_000_000));
    let (a, b) = (node(&server, &clock).await, node(&server, &clock).await);
    let mut first = ConcurrencyLimitLayer::new(PeerIp::new(), a).layer(ok_service());
    let mut second = ConcurrencyLimitLayer::builder(PeerIp::new(), b)
        .too_many_requests(Duration::from_secs(1))
        .build()
        .layer(ok_service());
    let request = |peer: &str| from_peer(peer).body(String::new()).unwrap();

    // Node 1 holds both slots of the client while its responses live.
    let held = vec![
        send(&mut first, request("192.0.2.1")).await,
        send(&mut first, request("192.0.2.1")).await,
    ];
    assert!(held.iter().all(|r| r.status() == StatusCode::OK));
    assert_eq!(
        send(&mut second, request("192.0.2.1")).await.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "node 2 sees node 1's leases"
    );
    assert_eq!(
        send(&mut first, request("192.0.2.1")).await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    // Another client has its own slots.
    let other = send(&mut second, request("192.0.2.2")).await;
    assert_eq!(other.status(), StatusCode::OK);

    // A response read to its end gives its lease back (in the background:
    // polled until node 2 gets the slot, bounded).
    let mut held = held;
    let done = held.pop().expect("a response");
    assert_eq!(body(done).await, "ok");
    let freed = tokio::time::timeout(NETWORK_TIMEOUT, async {
        loop {
            let response = send(&mut second, request("192.0.2.1")).await;
            if response.status() == StatusCode::OK {
                return response;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the released lease frees its slot");

    // Node 1 dies holding its last response (never dropped, never
    // released); node 2 dies too: both slots stay taken until the leases'
    // TTL, then come back.
    std::mem::forget(held);
    std::mem::forget(freed);
    clock.advance(Duration::from_millis(9_999));
    assert_eq!(
        send(&mut second, request("192.0.2.1")).await.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "not yet expired"
    );
    clock.advance(Duration::from_millis(1));
    let after = [
        send(&mut second, request("192.0.2.1")).await,
        send(&mut second, request("192.0.2.1")).await,
    ];
    assert!(
        after.iter().all(|r| r.status() == StatusCode::OK),
        "the dead holders' leases expired"
    );
}
