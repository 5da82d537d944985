//! Concurrency leases on a real 3-master Redis Cluster: keys on every
//! shard, the limit per key held across nodes, a lease detached on one node
//! released by another, and a node that dies holding slots freeing them at
//! the lease TTL.

mod support;
use support::Connect as _;

use std::time::Duration;

use futures_util::future::join_all;
use tollgate::{ManualClock, Nanos};
use tollgate_redis::FailurePolicy;
use tollgate_redis::Redis;
use tollgate_redis::concurrency::{RedisConcurrencyLimiter, RedisPermit, Refusal};

fn limiter(redis: &Redis, limit: u64, clock: &ManualClock) -> RedisConcurrencyLimiter {
    RedisConcurrencyLimiter::builder(redis.clone(), "cluster-jobs", limit)
        .lease_ttl(Duration::from_secs(10))
        .deadline(Duration::from_secs(2))
        .failure_policy(FailurePolicy::FailClosed)
        .manual_time(clock.clone())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_on_a_cluster_hold_the_limit_per_key_on_every_shard() {
    let cluster = support::Cluster::start();
    let clock = ManualClock::starting_at(Nanos::new(1_000_000_000_000));
    let nodes: Vec<RedisConcurrencyLimiter> = join_all((0..3).map(|_| cluster.connect()))
        .await
        .iter()
        .map(|redis| {
            assert!(redis.is_cluster());
            limiter(redis, 3, &clock)
        })
        .collect();
    let keys: Vec<Vec<u8>> = (0..24).map(|i| format!("queue-{i}").into_bytes()).collect();

    // Three nodes race for every key, 4 attempts each: exactly 3 granted
    // per key, wherever its slot lives.
    let mut held = Vec::new();
    for key in &keys {
        let attempts = nodes
            .iter()
            .flat_map(|node| (0..4).map(move |_| node.try_acquire(key, 1)));
        let granted: Vec<_> = join_all(attempts)
            .await
            .into_iter()
            .filter_map(Result::ok)
            .collect();
        assert_eq!(granted.len(), 3, "key {:?}", String::from_utf8_lossy(key));
        held.push(granted);
    }
    for (i, node) in cluster.nodes.iter().enumerate() {
        let count: u64 = node.cli(&["DBSIZE"]).trim().parse().unwrap_or(0);
        assert!(
            count > 0,
            "shard {i} holds no lease key: the keys did not spread"
        );
    }

    // A lease detached on node 0 is released by node 2 (a server handing
    // lease ids to its clients); a second release finds nothing.
    let permit = held[0].pop().expect("a permit");
    let lease = permit.detach().expect("a Redis lease");
    assert!(matches!(
        nodes[1].try_acquire(&keys[0], 1).await,
        Err(Refusal::Full {
            held: 3,
            limit: 3,
            ..
        })
    ));
    assert_eq!(nodes[2].release_lease(&lease).await, Ok(true));
    assert_eq!(nodes[2].release_lease(&lease).await, Ok(false));
    let again = nodes[1]
        .try_acquire(&keys[0], 1)
        .await
        .expect("the slot is free");
    assert!(again.release().await);

    // Node 0 dies holding every other lease: nothing is released, and the
    // slots come back when the leases expire, not before.
    std::mem::forget(held);
    clock.advance(Duration::from_millis(9_999));
    for (i, key) in keys.iter().enumerate() {
        // The first key holds 2 (one lease was released above), the others 3.
        let free = if i == 0 { 1 } else { 0 };
        assert!(
            nodes[1].try_acquire(key, free + 1).await.is_err(),
            "not yet expired"
        );
    }
    clock.advance(Duration::from_millis(1));
    let mut all = Vec::new();
    for key in &keys {
        let permit = nodes[1].try_acquire(key, 3).await;
        all.push(permit.expect("the dead node's leases expired"));
    }
    // Every key lives with a TTL no longer than the lease's, on its shard.
    for node in &cluster.nodes {
        for key in node.keys("tollgate*") {
            let pttl: i64 = node.cli(&["PTTL", &key]).trim().parse().unwrap();
            assert!(pttl > 0 && pttl <= 10_000, "{key}: PTTL {pttl}");
        }
    }
    for permit in all {
        assert!(permit.release().await);
    }
    for node in &cluster.nodes {
        assert!(
            node.keys("tollgate*").is_empty(),
            "released keys are deleted"
        );
    }
}

/// A lease from a cluster that is not under test: a call that misses a
/// short deadline on a loaded 2-core machine is timing, not the fault
/// under test, and is asked again (at most ten times).
async fn lease_in_time(limiter: &RedisConcurrencyLimiter, key: &[u8], what: &str) -> RedisPermit {
    let mut late = 0;
    loop {
        match limiter.try_acquire(key, 1).await {
            Ok(permit) => return permit,
            Err(Refusal::Unavailable {
                fault: tollgate_redis::Fault::Timeout,
                ..
            }) if late < 10 => late += 1,
            other => panic!("{what}: {other:?} after {late} timeouts"),
        }
    }
}

/// A key whose slot the cluster keeps refusing (its master says `ASK` the
/// other node, which answers `MOVED` back: a migration half set up) times
/// out every call, as a timeout for the policy; none of those counts
/// towards the node's breaker, so every call still asks Redis, and the
/// first call after the migration ends is Redis's. (Before, the third
/// timeout opened the breaker, and the calls after it were refused by the
/// breaker without asking.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reshard_that_outlasts_the_deadline_opens_no_breaker() {
    let cluster = support::Cluster::start();
    let redis = cluster.connect().await;
    let limiter = RedisConcurrencyLimiter::builder(redis, "reshard-jobs", 2)
        .deadline(Duration::from_millis(50))
        .failure_policy(FailurePolicy::FailClosed)
        .build()
        .unwrap();
    let key = b"queue-moving";
    // The key's master (found by the lease it holds) and another node.
    let permit = lease_in_time(&limiter, key, "a lease").await;
    let redis_key = "tollgate{reshard-jobs|queue-moving}c";
    let owner = cluster.node_of(redis_key.as_bytes());
    assert!(owner < cluster.nodes.len(), "the lease's key is on no node");
    assert!(permit.release().await);
    let slot = cluster.nodes[owner].cli(&["CLUSTER", "KEYSLOT", redis_key]);
    let other = (owner + 1) % cluster.nodes.len();
    let other_id = cluster.nodes[other].cli(&["CLUSTER", "MYID"]);
    let set = |args: &[&str]| {
        let reply = cluster.nodes[owner].cli(args);
        assert_eq!(reply.trim(), "OK", "{args:?}");
    };
    set(&[
        "CLUSTER",
        "SETSLOT",
        slot.trim(),
        "MIGRATING",
        other_id.trim(),
    ]);
    for call in 0..6 {
        match limiter.try_acquire(key, 1).await {
            Err(Refusal::Unavailable { fault, .. }) => {
                assert_eq!(fault, tollgate_redis::Fault::Timeout, "call {call}")
            }
            other => panic!("call {call}: {other:?}"),
        }
    }
    set(&["CLUSTER", "SETSLOT", slot.trim(), "STABLE"]);
    let permit = lease_in_time(&limiter, key, "Redis's again").await;
    assert!(permit.is_leased());
    assert!(permit.release().await);
}
