//! Leases against a real server: N nodes hammering one key never exceed the
//! shared quota, unused permits come back, and leases save round trips.

mod scenarios;
mod support;
use support::Connect as _;

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use scenarios::*;
use tollgate::{ManualClock, Nanos};
use tollgate_redis::{FailurePolicy, Fault, LeaseConfig, Limit, Redis, RedisLimiter, Source};

fn leased(
    redis: &Redis,
    name: &str,
    limit: Limit,
    clock: Option<&ManualClock>,
    config: LeaseConfig,
) -> RedisLimiter {
    let mut b = RedisLimiter::builder(redis.clone(), name)
        .limit(limit)
        .leases(config)
        .failure_policy(FailurePolicy::FailClosed)
        .deadline(Duration::from_secs(2));
    if let Some(clock) = clock {
        b = b.manual_time(clock.clone());
    }
    b.build().unwrap()
}

/// Eight nodes, time frozen: at most the capacity admitted in all, and after
/// a clean shutdown the shared state holds exactly what was spent.
async fn nodes_share_one_quota(server: &support::Server, limit: Limit, name: &str) {
    let capacity = limit.capacity();
    let clock = ManualClock::starting_at(Nanos::new(3_000_000_000_000));
    let config = LeaseConfig {
        initial: 4,
        max: 64,
        ..LeaseConfig::default()
    };
    let nodes: Vec<RedisLimiter> = join_all((0..8).map(|_| server.connect()))
        .await
        .iter()
        .map(|r| leased(r, name, limit.clone(), Some(&clock), config))
        .collect();
    let tasks = nodes.iter().map(|n| {
        let n = n.clone();
        tokio::spawn(async move {
            let mut admitted = 0u64;
            for _ in 0..250 {
                let o = n.check_outcome(b"hot", 1).await.unwrap();
                assert!(
                    matches!(o.source, Source::Redis | Source::Lease),
                    "{:?}",
                    o.source
                );
                admitted += u64::from(o.decision.is_allowed());
            }
            admitted
        })
    });
    let admitted: u64 = join_all(tasks).await.into_iter().map(|r| r.unwrap()).sum();
    assert!(
        admitted <= capacity,
        "{name}: {admitted} admitted, capacity {capacity}"
    );
    let leased_answers: u64 = nodes.iter().map(|n| n.stats().lease).sum();
    // Most admissions came from leases, without a round trip (the denials,
    // once the quota is spent, each take one: the deny cache is off here).
    assert!(
        2 * leased_answers > admitted,
        "{name}: {leased_answers} of {admitted} from leases"
    );
    for n in &nodes {
        n.shutdown().await;
    }
    // What is left in the shared state is exactly what was not spent.
    let plain = frozen(&server.connect().await, name, limit.clone(), &clock);
    let remaining = plain.peek_n(b"hot", 0).await.unwrap().remaining();
    assert_eq!(
        remaining,
        capacity - admitted,
        "{name}: unused permits did not all come back"
    );
    // And nodes took (nearly) all of it: with 2,000 calls for less, a lease
    // left unspent at the end is the only gap.
    assert!(
        admitted + 8 * 64 >= capacity,
        "{name}: only {admitted} admitted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_with_leases_never_exceed_the_shared_quota() {
    let server = support::Server::start();
    let hour = Duration::from_secs(3_600);
    nodes_share_one_quota(&server, gcra(1_000, hour, 1_000), "lease-gcra").await;
    nodes_share_one_quota(&server, fixed(1_000, hour), "lease-fixed").await;
    nodes_share_one_quota(&server, sliding(1_000, hour, 10), "lease-sliding").await;
}

/// Real time: nodes with leases stay within `burst + rate·(t + TTL)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leased_nodes_in_real_time_stay_within_the_lease_bound() {
    let server = support::Server::start();
    let (rate, burst) = (500u64, 50u64);
    let ttl = Duration::from_millis(50);
    let config = LeaseConfig {
        initial: 4,
        max: 32,
        ttl,
        ..LeaseConfig::default()
    };
    let nodes: Vec<RedisLimiter> = join_all((0..4).map(|_| server.connect()))
        .await
        .iter()
        .map(|r| {
            leased(
                r,
                "lease-real",
                gcra(rate, Duration::from_secs(1), burst),
                None,
                config,
            )
        })
        .collect();
    let run = Duration::from_secs(2);
    let start = Instant::now();
    let tasks = nodes.iter().map(|n| {
        let n = n.clone();
        tokio::spawn(async move {
            let mut admitted = 0u64;
            while start.elapsed() < run {
                admitted += u64::from(n.check(b"hot").await.is_allowed());
            }
            admitted
        })
    });
    let admitted: u64 = join_all(tasks).await.into_iter().map(|r| r.unwrap()).sum();
    let elapsed = start.elapsed().as_secs_f64();
    let bound = burst as f64 + rate as f64 * (elapsed + ttl.as_secs_f64());
    assert!(
        (admitted as f64) <= bound,
        "{admitted} admitted, bound {bound:.0}"
    );
    assert!(
        (admitted as f64) >= 0.7 * rate as f64 * run.as_secs_f64(),
        "{admitted} admitted"
    );
    let leased_answers: u64 = nodes.iter().map(|n| n.stats().lease).sum();
    assert!(leased_answers > 0);
    for n in &nodes {
        n.shutdown().await;
    }
}

/// A lease past its TTL gives its unspent permits back.
#[tokio::test]
async fn an_expired_lease_gives_back_what_it_did_not_spend() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let clock = ManualClock::starting_at(Nanos::new(9_000_000_000));
    let hour = Duration::from_secs(3_600);
    for (name, limit) in [
        ("exp-fixed", fixed(100, hour)),
        ("exp-gcra", gcra(100, hour, 100)),
    ] {
        let node = leased(
            &redis,
            name,
            limit.clone(),
            Some(&clock),
            LeaseConfig::default(),
        );
        let plain = frozen(&redis, name, limit, &clock);
        assert_eq!(
            node.check_outcome(b"k", 1).await.unwrap().source,
            Source::Redis
        );
        assert_eq!(
            node.check_outcome(b"k", 1).await.unwrap().source,
            Source::Lease
        );
        // The lease took 8: 92 left in the shared state.
        assert_eq!(plain.peek_n(b"k", 0).await.unwrap().remaining(), 92);
        clock.advance(Duration::from_millis(150));
        node.return_expired_leases().await;
        assert_eq!(
            plain.peek_n(b"k", 0).await.unwrap().remaining(),
            98,
            "{name}"
        );
    }
}

/// Regression, the cause of "a freshly started process's first lease
/// call answered `Unavailable { fault: Error }`": a lease is decided by the
/// general script (`decide.lua`, 500 lines), which a fresh server compiled
/// inside the first call (`EVALSHA`, `NOSCRIPT`, then `EVAL` with the
/// source); with several processes starting at once the reply could come
/// after the connection's `response_timeout` (50 ms), and the client's
/// timeout was counted as an error. Now every script is loaded when the
/// connection is made (this test failed before: no script was cached).
#[tokio::test]
async fn a_fresh_connection_finds_every_script_compiled() {
    let server = support::Server::start();
    let _redis = server.connect().await;
    for source in [
        tollgate_redis::script::SOURCE,
        tollgate_redis::script::SOURCE_GCRA,
        tollgate_redis::script::SOURCE_FIXED,
        tollgate_redis::script::SOURCE_CONTROLS,
        tollgate_redis::script::SOURCE_LISTS,
    ] {
        let sha = redis::Script::new(source).get_hash().to_owned();
        assert_eq!(server.cli(&["SCRIPT", "EXISTS", &sha]).trim(), "1", "{sha}");
    }
}

/// The same regression: a reply later than the connection's `response_timeout`
/// (Redis paused for 300 ms, the limiter's deadline 2 s) is a timeout, not
/// an error (it was `Fault::Error`: failed before the fix).
#[tokio::test]
async fn a_reply_after_the_response_timeout_is_a_timeout() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let node = leased(
        &redis,
        "paused",
        Limit::Gcra(tollgate::Gcra::new(tollgate::Quota::per_second(10).unwrap()).unwrap()),
        None,
        LeaseConfig::default(),
    );
    server.cli(&["CLIENT", "PAUSE", "300", "ALL"]);
    let outcome = node.check_outcome(b"k", 1).await.unwrap();
    assert_eq!(
        outcome.source,
        Source::Policy(Fault::Timeout),
        "{outcome:?}"
    );
}
