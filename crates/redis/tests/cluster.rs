//! The same scenarios on a real 3-master Redis Cluster, with keys on every
//! shard. One cluster for the whole binary: starting one takes seconds.

mod scenarios;
mod support;
use support::Connect as _;

use std::time::Duration;

use futures_util::future::join_all;
use scenarios::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scenarios() {
    let cluster = support::Cluster::start();
    let redis = cluster.connect().await;
    assert!(redis.is_cluster());

    // The core's vectors, each case's key on the shard its name hashes to.
    scenarios::vectors::every_vector_step_matches_the_core(&redis).await;

    // Atomicity: 64 connections with time frozen, on keys spread over the shards.
    let connections = join_all((0..64).map(|_| cluster.connect())).await;
    let hour = Duration::from_secs(3_600);
    for key in ["a", "b", "c", "d", "e", "f"] {
        frozen_time_admits_exactly_capacity(
            &connections,
            gcra(300, hour, 300),
            "atomic-gcra",
            key.as_bytes(),
            40,
        )
        .await;
    }
    frozen_time_admits_exactly_capacity(&connections, fixed(400, hour), "atomic-fixed", b"g", 40)
        .await;
    frozen_time_admits_exactly_capacity(
        &connections,
        sliding(500, hour, 12),
        "atomic-sliding",
        b"h",
        40,
    )
    .await;
    for (i, node) in cluster.nodes.iter().enumerate() {
        let keys: u64 = node.cli(&["DBSIZE"]).parse().unwrap_or(0);
        assert!(
            keys > 0,
            "shard {i} holds no limiter key: the keys did not spread"
        );
    }

    // Four independent clients in real time (3 s rather than 10).
    let clients = join_all((0..4).map(|_| cluster.connect())).await;
    real_time_clients_stay_within_gcra_bound(
        &clients,
        "realtime",
        b"shared",
        Duration::from_secs(3),
    )
    .await;

    // Several limits of one key: one slot, all-or-nothing.
    several_limits_are_all_or_nothing(&redis, "and").await;

    // the controls: every one on every shape, keys on every shard,
    // and refunds and a deny racing 64 connections on one key.
    scenarios::controls::every_control_on_every_shape(&redis, "ctl").await;
    for key in ["a", "b", "c"] {
        scenarios::controls::refunds_racing_checks_admit_exactly_the_refunds(
            &connections,
            "ctl-race",
            key.as_bytes(),
            10,
        )
        .await;
    }

    // Lists across a quota change: the registry (one slot) carried to keys
    // on every shard; controls during the carry see the previous keys.
    scenarios::carry_lists::carrying_the_registry_keeps_every_key_listed(&redis, "lists", 40).await;
    scenarios::carry_lists::controls_during_the_carry_see_the_previous_keys(&redis, "lists-ctl")
        .await;
    scenarios::carry_lists::a_penalty_outlives_the_carry(&redis, "boxed", true).await;

    // TTL invariant.
    let urls = cluster.urls();
    let mut raw = redis::cluster::ClusterClient::new(urls.clone())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    every_key_has_a_bounded_ttl(&redis, &mut raw, "ttl").await;

    // SCRIPT FLUSH on every node under load.
    let ports: Vec<u16> = cluster.nodes.iter().map(|n| n.port).collect();
    let flush = move || {
        for port in &ports {
            let _ = std::process::Command::new("redis-cli")
                .args(["-p", &port.to_string(), "SCRIPT", "FLUSH"])
                .stdout(std::process::Stdio::null())
                .status();
        }
    };
    script_flush_under_load_is_recovered(&redis, flush, "flush").await;

    // A stopped shard: decisions within the deadline, by the policy, and
    // back on Redis once it resumes.
    let limiter = tollgate_redis::RedisLimiter::builder(redis.clone(), "shard-stop")
        .limit(gcra(1_000, Duration::from_secs(1), 1_000))
        .failure_policy(tollgate_redis::FailurePolicy::FailClosed)
        .deadline(Duration::from_millis(10))
        .build()
        .unwrap();
    // Finding a key per shard is not under test: a long deadline there, so
    // that a script reloaded after the flush above (NOSCRIPT, then EVAL) on
    // a loaded machine is not mistaken for a fault.
    let setup = tollgate_redis::RedisLimiter::builder(redis.clone(), "shard-stop")
        .limit(gcra(1_000, Duration::from_secs(1), 1_000))
        .failure_policy(tollgate_redis::FailurePolicy::FailClosed)
        .deadline(Duration::from_secs(2))
        .build()
        .unwrap();
    let mut per_node: Vec<Option<String>> = vec![None; cluster.nodes.len()];
    for i in 0..200 {
        let key = format!("s{i}");
        let o = setup.check_outcome(&key, 1).await.unwrap();
        assert!(o.decision.is_allowed(), "{key}: {o:?} {:?}", setup.stats());
        let redis_key = String::from_utf8(limiter.redis_keys(&key)[0].clone()).unwrap();
        for (n, node) in cluster.nodes.iter().enumerate() {
            if per_node[n].is_none() && node.cli(&["EXISTS", &redis_key]) == "1" {
                per_node[n] = Some(key.clone());
            }
        }
        if per_node.iter().all(Option::is_some) {
            break;
        }
    }
    let keys: Vec<String> = per_node
        .into_iter()
        .map(|k| k.expect("a key on every shard"))
        .collect();
    // Timing: each decision within the 10 ms deadline, 40 ms of margin,
    // and the longest scheduling stall the machine had meanwhile (measured,
    // see tollgate_testkit::Stalls).
    let stalls = tollgate_testkit::Stalls::start();
    cluster.nodes[0].signal("-STOP");
    let start = std::time::Instant::now();
    let mut by_policy = 0;
    while start.elapsed() < Duration::from_millis(500) {
        let t = std::time::Instant::now();
        let o = limiter.check_outcome(&keys[0], 1).await.unwrap();
        let took = t.elapsed();
        assert!(
            took <= Duration::from_millis(50) + stalls.worst(),
            "took {took:?}, longest stall {:?}",
            stalls.worst()
        );
        if matches!(o.source, tollgate_redis::Source::Policy(_)) {
            assert!(o.decision.is_denied(), "fail closed admitted");
            by_policy += 1;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(by_policy >= 10, "only {by_policy} decisions by the policy");
    cluster.nodes[0].signal("-CONT");
    for key in &keys {
        let start = std::time::Instant::now();
        while limiter.check_outcome(key, 1).await.unwrap().source != tollgate_redis::Source::Redis {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "shard of {key} not used again"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
