//! Concurrency leases against a real `redis-server`: the limit holds across
//! nodes, a release frees the slot in one round trip, every key has a TTL,
//! a node that dies holding slots frees them when its leases expire, and
//! the failure policies apply when Redis is gone.

mod support;
use support::Connect as _;

use std::time::Duration;

use futures_util::future::join_all;
use tollgate::{ManualClock, Nanos};
use tollgate_redis::concurrency::{RedisConcurrencyLimiter, Refusal};
use tollgate_redis::{BreakerConfig, FailurePolicy, Redis};

fn limiter(
    redis: &Redis,
    name: &str,
    limit: u64,
    clock: &ManualClock,
    policy: FailurePolicy,
) -> RedisConcurrencyLimiter {
    RedisConcurrencyLimiter::builder(redis.clone(), name, limit)
        .lease_ttl(Duration::from_secs(10))
        .deadline(Duration::from_secs(2))
        .failure_policy(policy)
        .manual_time(clock.clone())
        .build()
        .unwrap()
}

#[tokio::test]
async fn slots_are_leased_up_to_the_limit_and_released_in_one_round_trip() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let clock = ManualClock::starting_at(Nanos::new(1_000_000_000_000));
    let limiter = limiter(&redis, "api", 3, &clock, FailurePolicy::FailClosed);

    let a = limiter.try_acquire(b"alice", 2).await.unwrap();
    let b = limiter.try_acquire(b"alice", 1).await.unwrap();
    assert!(a.is_leased() && b.is_leased());
    match limiter.try_acquire(b"alice", 1).await {
        Err(Refusal::Full {
            held,
            limit,
            first_expiry,
        }) => {
            assert_eq!((held, limit), (3, 3));
            assert_eq!(first_expiry, Duration::from_secs(10));
        }
        other => panic!("expected Full, got {other:?}"),
    }
    assert!(matches!(
        limiter.try_acquire(b"alice", 4).await,
        Err(Refusal::Cost { limit: 3 })
    ));
    // Another key is independent.
    let other = limiter.try_acquire(b"bob", 3).await.unwrap();

    // Every key lives with a TTL, named as the module docs say
    // (`<prefix>{<name>|<key>}c`; Regression: the docs said `}:c`).
    let mut keys = server.keys("tollgate*");
    keys.sort();
    assert_eq!(keys, ["tollgate{api|alice}c", "tollgate{api|bob}c"]);
    for key in &keys {
        let pttl: i64 = server.cli(&["PTTL", key]).trim().parse().unwrap();
        assert!(pttl > 0 && pttl <= 10_000, "{key}: PTTL {pttl}");
    }

    assert!(b.release().await);
    let again = limiter.try_acquire(b"alice", 1).await.unwrap();
    assert!(again.release().await);
    assert!(a.release().await);
    assert!(other.release().await);
    assert!(
        server.keys("tollgate*").is_empty(),
        "released keys are deleted"
    );
}

#[tokio::test]
async fn a_node_that_dies_holding_slots_frees_them_after_the_lease_ttl() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let clock = ManualClock::starting_at(Nanos::new(1_000_000_000_000));
    let dying = limiter(&redis, "jobs", 2, &clock, FailurePolicy::FailClosed);
    let survivor = limiter(&redis, "jobs", 2, &clock, FailurePolicy::FailClosed);

    // The node takes both slots and dies: its permits are never released.
    let held = vec![
        dying.try_acquire(b"queue", 1).await.unwrap(),
        dying.try_acquire(b"queue", 1).await.unwrap(),
    ];
    std::mem::forget(held);
    drop(dying);

    assert!(matches!(
        survivor.try_acquire(b"queue", 1).await,
        Err(Refusal::Full { held: 2, .. })
    ));
    clock.advance(Duration::from_millis(9_999));
    assert!(
        survivor.try_acquire(b"queue", 1).await.is_err(),
        "not yet expired"
    );
    clock.advance(Duration::from_millis(1));
    let both = survivor
        .try_acquire(b"queue", 2)
        .await
        .expect("the dead node's leases expired");
    assert!(both.release().await);
}

#[tokio::test]
async fn an_extended_lease_outlives_its_first_ttl() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let clock = ManualClock::starting_at(Nanos::new(1_000_000_000_000));
    let limiter = limiter(&redis, "long", 1, &clock, FailurePolicy::FailClosed);
    let permit = limiter.try_acquire(b"k", 1).await.unwrap();
    clock.advance(Duration::from_secs(8));
    assert!(permit.extend().await);
    clock.advance(Duration::from_secs(8));
    assert!(
        limiter.try_acquire(b"k", 1).await.is_err(),
        "still held after 16 s"
    );
    clock.advance(Duration::from_secs(3));
    assert!(!permit.extend().await, "expired: cannot be extended");
    assert!(limiter.try_acquire(b"k", 1).await.is_ok());
}

#[tokio::test]
async fn nodes_racing_for_one_key_never_hold_more_than_the_limit() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let clock = ManualClock::starting_at(Nanos::new(1_000_000_000_000));
    let nodes: Vec<_> = (0..4)
        .map(|_| limiter(&redis, "race", 5, &clock, FailurePolicy::FailClosed))
        .collect();
    let attempts = nodes
        .iter()
        .flat_map(|node| (0..10).map(move |_| node.try_acquire(b"hot", 1)));
    let results = join_all(attempts).await;
    let granted: Vec<_> = results.into_iter().filter_map(Result::ok).collect();
    assert_eq!(granted.len(), 5, "exactly the limit across 4 nodes");
    for permit in granted {
        assert!(permit.release().await);
    }
    assert!(server.keys("tollgate*").is_empty());
}

#[tokio::test]
async fn the_failure_policies_apply_when_redis_is_gone() {
    let mut server = support::Server::start();
    let redis = server.connect().await;
    let clock = ManualClock::starting_at(Nanos::new(1_000_000_000_000));
    let build = |policy| {
        RedisConcurrencyLimiter::builder(redis.clone(), "down", 4)
            .deadline(Duration::from_millis(300))
            .breaker(BreakerConfig {
                threshold: 1_000,
                open_for: Duration::from_secs(1),
            })
            .failure_policy(policy)
            .manual_time(clock.clone())
            .build()
            .unwrap()
    };
    let closed = build(FailurePolicy::FailClosed);
    let open = build(FailurePolicy::FailOpen);
    let local = build(FailurePolicy::Local { share: 0.5 });
    server.kill();

    assert!(matches!(
        closed.try_acquire(b"k", 1).await,
        Err(Refusal::Unavailable { .. })
    ));
    let admitted = open.try_acquire(b"k", 1).await.unwrap();
    assert!(!admitted.is_leased());
    // The local share: ⌊4 · 0.5⌋ = 2 slots.
    let first = local.try_acquire(b"k", 1).await.unwrap();
    let second = local.try_acquire(b"k", 1).await.unwrap();
    assert!(matches!(
        local.try_acquire(b"k", 1).await,
        Err(Refusal::Unavailable { .. })
    ));
    drop(first);
    let third = local.try_acquire(b"k", 1).await.unwrap();
    drop((second, third, admitted));
}

#[tokio::test]
async fn a_dropped_permit_is_released_in_the_background() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let clock = ManualClock::starting_at(Nanos::new(1_000_000_000_000));
    let limiter = limiter(&redis, "drop", 1, &clock, FailurePolicy::FailClosed);
    drop(limiter.try_acquire(b"k", 1).await.unwrap());
    // The release runs on a spawned task: wait for it, bounded.
    tokio::time::timeout(Duration::from_secs(10), async {
        while server.keys("tollgate*").len() == 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the dropped permit was released");
    assert!(limiter.try_acquire(b"k", 1).await.unwrap().release().await);
}
