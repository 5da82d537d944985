//! One node's fault stays that node's fault: with the client's default
//! settings (deadline, timeouts, breaker), a reshard, a master added, a
//! `WAIT` no replica answers, a stopped master and a killed one each send
//! to the failure policy at most the keys of the slots or the node
//! concerned; the keys of every other master stay Redis's (at most 1 % of
//! their calls to the policy), and no limit admits beyond its bound.
//!
//! The clusters run with `cluster-require-full-coverage no`, the setting
//! the crate's docs ask for (with Redis's default, `yes`, every node
//! refuses every slot while a failed master is not yet replaced: see
//! `tollgate_redis::cluster`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tollgate::{FixedWindow, Quota};
use tollgate_redis::{Durability, FailurePolicy, Redis, RedisConfig, RedisLimiter, Source};
use tollgate_testkit::{ReplicatedCluster, Stalls};

use crate::admissions::worst;
use crate::load::{Load, Tally};
use crate::{ONE_AT_A_TIME, during, gcra, keys_in};

/// The most the keys of healthy masters may give the policy.
const HEALTHY_SHARE: f64 = 0.01;

/// The client's default deadline on a cluster (the crate's
/// `CLUSTER_DEADLINE`).
const DEFAULT_DEADLINE: Duration = Duration::from_millis(20);

/// The most the keys outside a reshard may give the policy when a call
/// of theirs timed out: a healthy node's call can take longer than
/// [`DEFAULT_DEADLINE`] (the source master runs each `MIGRATE` to its end
/// before anything else, and a loaded machine stalls threads), and three
/// in a row open its breaker for a moment, whatever the client does (seen
/// at load 10-13 on 2 cores: 148 of 8,345 calls, 1.8 %, and 70 of 4,730,
/// 1.5 %).
const STALLED_SHARE: f64 = 0.05;

/// Every limiter's GCRA: 20 a second, a burst of 10; the load asks each
/// key about twice as often, so that a lost write would show as an excess.
const RATE: u64 = 20;
const BURST: u64 = 10;

/// A 3-master, 3-replica cluster that keeps serving the slots it still
/// covers.
async fn cluster() -> ReplicatedCluster {
    tokio::task::spawn_blocking(|| {
        let cluster = ReplicatedCluster::start(3, 1);
        for i in cluster.live().collect::<Vec<_>>() {
            let reply = cluster.cli(i, &["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
            assert_eq!(reply, "OK");
        }
        cluster
    })
    .await
    .unwrap()
}

/// A client with every default setting.
async fn connect_defaults(cluster: &ReplicatedCluster) -> Redis {
    let config = RedisConfig::cluster(cluster.urls());
    tokio::time::timeout(Duration::from_secs(10), Redis::open(&config))
        .await
        .expect("connect in time")
        .expect("connect")
}

/// A limiter with the defaults but the policy, which fails closed so that
/// every admission is Redis's.
fn defaults(redis: &Redis, name: &str) -> tollgate_redis::RedisLimiterBuilder {
    RedisLimiter::builder(redis.clone(), name)
        .limit(gcra(RATE, BURST))
        .failure_policy(FailurePolicy::FailClosed)
}

/// The slots of `masters`, together.
fn slots_of(cluster: &ReplicatedCluster, masters: &[usize]) -> Vec<u16> {
    masters.iter().flat_map(|&m| cluster.slots_of(m)).collect()
}

/// Asserts that the keys of healthy masters were Redis's, but for at most
/// [`HEALTHY_SHARE`] of their calls.
fn healthy(what: &str, tally: &Tally) {
    println!("{what}, healthy masters' keys: {tally}");
    assert!(tally.calls > 300, "{what}: too little load: {tally}");
    assert!(
        tally.policy_share() <= HEALTHY_SHARE,
        "{what}: the keys of healthy masters went to the policy: {tally}"
    );
}

/// The policy's answers for the keys of the node at fault, and for how
/// long after `since`.
fn affected(what: &str, tally: &Tally, since: Instant) {
    let span = tally
        .policy_span
        .map(|(first, last)| {
            format!(
                "{:?} to {:?} after the fault",
                first.saturating_duration_since(since),
                last.saturating_duration_since(since)
            )
        })
        .unwrap_or_default();
    println!("{what}, affected keys: {tally}; policy answers {span}");
}

/// A reshard under load, and a master whose replica stopped answering
/// `WAIT`, with the defaults: the keys outside the moving slots never go to
/// the policy; the durable limiter's admissions on that master are refused
/// as `Unreplicated` (what happened), not held behind one another until
/// they time out, and nothing else on that master waits for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reshard_or_a_silent_replica_touches_only_its_own_keys() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = cluster().await;
    let redis = connect_defaults(&cluster).await;
    let masters = cluster.masters();

    // 1. 16 slots of the first master move to the second (one key per
    // MIGRATE, 2 ms apart), under load on the moving slots' keys and on
    // keys of every master outside them.
    let limiter = defaults(&redis, "reshard")
        .limit(FixedWindow::new(Quota::new(15, Duration::from_secs(1)).unwrap()).unwrap())
        .build()
        .unwrap();
    let owned = cluster.slots_of(masters[0]);
    let moving: Vec<u16> = owned
        .iter()
        .step_by(owned.len() / 16)
        .take(16)
        .copied()
        .collect();
    let moving_keys = keys_in(&limiter, &moving, 48);
    let moving_set: BTreeSet<u16> = moving.iter().copied().collect();
    let outside: Vec<u16> = slots_of(&cluster, &masters)
        .into_iter()
        .filter(|s| !moving_set.contains(s))
        .collect();
    let outside_keys = keys_in(&limiter, &outside, 96);
    // How late the machine schedules a thread meanwhile: with the default
    // 20 ms deadline, a stall past it is a timeout of a healthy node too.
    let stalls = Stalls::start();
    let inside = Load::start(limiter.clone(), moving_keys, 2, Duration::from_millis(1));
    let rest = Load::start(limiter.clone(), outside_keys, 3, Duration::from_millis(1));
    let to = masters[1];
    let cluster = during(
        Duration::from_millis(300),
        Duration::from_millis(300),
        move || {
            for &slot in &moving {
                cluster.migrate_slot(slot, to, Duration::from_millis(2));
            }
            cluster.wait_converged();
            cluster
        },
    )
    .await;
    let (inside, rest) = (inside.stop().await, rest.stop().await);
    println!("reshard, moving slots' keys: {inside}");
    println!("reshard, other keys: {rest}");
    assert!(rest.calls > 300 && inside.calls > 100, "too little load");
    // Nothing but timing: a fault other than a timeout (or the breaker
    // those opened) would be the reshard's.
    assert!(
        rest.faults
            .keys()
            .all(|fault| fault == "Timeout" || fault == "BreakerOpen"),
        "reshard: keys outside the moving slots failed: {rest}"
    );
    if rest.faults.contains_key("Timeout") {
        // Timing, measured: a healthy node's call took longer than the
        // deadline (a MIGRATE holding the source master, a stalled thread).
        let stall = stalls.worst();
        println!(
            "reshard: slowest call {:?}, longest stall {stall:?} (deadline {DEFAULT_DEADLINE:?})",
            rest.slowest
        );
        assert!(
            rest.policy_share() <= STALLED_SHARE,
            "reshard: keys outside the moving slots went to the policy beyond {STALLED_SHARE} \
             (longest stall {stall:?}): {rest}"
        );
    } else {
        assert_eq!(
            rest.by_policy, 0,
            "reshard: keys outside the moving slots went to the policy: {rest}"
        );
    }
    for tally in [&inside, &rest] {
        assert_eq!(worst(&tally.admissions.gcra_excess(BURST, RATE as f64)), 0);
        assert_eq!(
            worst(
                &tally
                    .admissions
                    .fixed_window_excess(15, Duration::from_secs(1))
            ),
            0
        );
    }

    // 2. The replica of the second master stops: `WAIT 1` there is never
    // answered in time. A durable limiter on its keys, a plain one on
    // other keys of the same master and of the others.
    let master = masters[1];
    let replica = cluster.replicas_of(master)[0];
    let durable = defaults(&redis, "durable")
        .deadline(Duration::from_millis(500))
        .durability(Durability::Replicas {
            replicas: 1,
            timeout: Duration::from_millis(10),
        })
        .build()
        .unwrap();
    let plain = defaults(&redis, "plain").build().unwrap();
    let master_slots = cluster.slots_of(master);
    let durable_keys = keys_in(&durable, &master_slots, 16);
    let same_master_keys = keys_in(&plain, &master_slots, 32);
    let other_keys = keys_in(&plain, &slots_of(&cluster, &[masters[0], masters[2]]), 32);
    cluster.nodes[replica].signal("-STOP");
    let stopped = Instant::now();
    let durable_load = Load::start(durable.clone(), durable_keys, 4, Duration::from_millis(1));
    let same_load = Load::start(plain.clone(), same_master_keys, 2, Duration::from_millis(1));
    let other_load = Load::start(plain.clone(), other_keys, 2, Duration::from_millis(1));
    // Shorter than the node timeout: the cluster does not act on it.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let durable_tally = durable_load.stop().await;
    let (same, other) = (same_load.stop().await, other_load.stop().await);
    cluster.nodes[replica].signal("-CONT");
    affected("silent replica, WAIT 1", &durable_tally, stopped);
    healthy("silent replica, same master, no WAIT", &same);
    healthy("silent replica, other masters", &other);
    assert_eq!(durable_tally.admissions.total(), 0, "{durable_tally}");
    let unreplicated = durable_tally
        .faults
        .get("Unreplicated")
        .copied()
        .unwrap_or(0);
    let timeouts = durable_tally.faults.get("Timeout").copied().unwrap_or(0);
    assert!(
        unreplicated > 0 && timeouts * 20 <= unreplicated,
        "WAIT's refusals must say Unreplicated, not Timeout: {durable_tally}"
    );
    drop(cluster);
}

/// A master stopped (a partition shorter than the node timeout), then a
/// master killed and replaced by its replica, under load with the
/// defaults: the keys of the other masters stay Redis's throughout; the
/// victim's keys go to the policy while it cannot answer, and are Redis's
/// again once the replica took over and the client read the new map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_or_killed_master_sends_only_its_own_slots_to_the_policy() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut cluster = cluster().await;
    let redis = connect_defaults(&cluster).await;
    let masters = cluster.masters();
    let limiter = defaults(&redis, "iso").build().unwrap();

    for (round, victim) in [(0, masters[0]), (1, masters[1])] {
        let what = if round == 0 {
            "stopped master"
        } else {
            "killed master"
        };
        let others: Vec<usize> = masters.iter().copied().filter(|&m| m != victim).collect();
        let victim_keys = keys_in(&limiter, &cluster.slots_of(victim), 24);
        let other_keys = keys_in(&limiter, &slots_of(&cluster, &others), 48);
        let replica = cluster.replicas_of(victim)[0];
        let hit = Load::start(
            limiter.clone(),
            victim_keys.clone(),
            2,
            Duration::from_millis(1),
        );
        let spared = Load::start(limiter.clone(), other_keys, 3, Duration::from_millis(1));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let fault = Instant::now();
        let replaced = if round == 0 {
            cluster.nodes[victim].signal("-STOP");
            tokio::time::sleep(Duration::from_millis(1_000)).await;
            cluster.nodes[victim].signal("-CONT");
            tokio::time::sleep(Duration::from_millis(500)).await;
            None
        } else {
            cluster.kill(victim);
            let back = during(Duration::ZERO, Duration::from_millis(600), move || {
                cluster.wait_master(replica);
                (cluster, Instant::now())
            })
            .await;
            cluster = back.0;
            Some(back.1)
        };
        let (hit, spared) = (hit.stop().await, spared.stop().await);
        affected(what, &hit, fault);
        if let Some(replaced) = replaced {
            println!(
                "{what}: replica promoted {:?} after the kill",
                replaced - fault
            );
        }
        healthy(what, &spared);
        assert!(hit.by_policy > 0, "{what}: the fault was not seen: {hit}");
        // A healthy replication link: the bound is the burst (and the rate
        // over a lag of a few ms, under one permit).
        let excess = hit.admissions.gcra_excess(BURST, RATE as f64);
        println!("{what}: over-admission per key {}", worst(&excess));
        assert!(worst(&excess) <= BURST + 1, "{what}: {excess:?}");
        assert_eq!(worst(&spared.admissions.gcra_excess(BURST, RATE as f64)), 0);
        // The victim's keys are Redis's again (the new master's, for the
        // killed one), once the client read the new map.
        let deadline = Instant::now() + Duration::from_secs(2);
        for key in &victim_keys {
            loop {
                let o = limiter.check_outcome(key, 1).await.unwrap();
                if o.source == Source::Redis {
                    break;
                }
                assert!(Instant::now() < deadline, "{what}: {key} never back: {o:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    drop(cluster);
}

/// A master added under load with the defaults (a new `redis-server`,
/// `CLUSTER MEET`, then 16 slots of the first master migrated to it, one
/// key per `MIGRATE`, 2 ms apart): no limit admits beyond its bound; the
/// keys outside the moving slots stay Redis's (at most 1 % of their calls
/// to the policy); and the client finds the new node by itself — the moving
/// keys are decided there afterwards, by Redis, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_added_under_load_takes_its_slots_without_touching_the_rest() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = cluster().await;
    let redis = connect_defaults(&cluster).await;
    let masters = cluster.masters();
    // Two keys per user key (GCRA and a window): split by the migration,
    // they meet `TRYAGAIN`, the hardest case for the moving keys.
    let limiter = defaults(&redis, "grow")
        .limit(FixedWindow::new(Quota::new(15, Duration::from_secs(1)).unwrap()).unwrap())
        .build()
        .unwrap();
    let owned = cluster.slots_of(masters[0]);
    let moving: Vec<u16> = owned
        .iter()
        .step_by(owned.len() / 16)
        .take(16)
        .copied()
        .collect();
    // Few keys, so that each is asked for more than its limit: a lost or
    // repeated write would show as an excess.
    let moving_keys = keys_in(&limiter, &moving, 24);
    let moving_set: BTreeSet<u16> = moving.iter().copied().collect();
    let outside: Vec<u16> = slots_of(&cluster, &masters)
        .into_iter()
        .filter(|s| !moving_set.contains(s))
        .collect();
    let outside_keys = keys_in(&limiter, &outside, 36);
    let inside = Load::start(
        limiter.clone(),
        moving_keys.clone(),
        2,
        Duration::from_millis(1),
    );
    let rest = Load::start(limiter.clone(), outside_keys, 3, Duration::from_millis(1));
    let started = Instant::now();
    let (cluster, added) = during(
        Duration::from_millis(300),
        Duration::from_millis(300),
        move || {
            let mut cluster = cluster;
            let added = cluster.add_master();
            let reply = cluster.cli(
                added,
                &["CONFIG", "SET", "cluster-require-full-coverage", "no"],
            );
            assert_eq!(reply, "OK");
            for &slot in &moving {
                cluster.migrate_slot(slot, added, Duration::from_millis(2));
            }
            cluster.wait_converged();
            (cluster, added)
        },
    )
    .await;
    let (inside, rest) = (inside.stop().await, rest.stop().await);
    affected("node added, moving slots", &inside, started);
    healthy("node added", &rest);
    assert!(inside.calls > 100, "too little load: {inside}");
    assert!(
        inside.admissions.total() < inside.calls as usize
            && rest.admissions.total() < rest.calls as usize,
        "the load never met the limits"
    );
    for tally in [&inside, &rest] {
        println!(
            "node added: over-admission per key: gcra {}, window {}",
            worst(&tally.admissions.gcra_excess(BURST, RATE as f64)),
            worst(
                &tally
                    .admissions
                    .fixed_window_excess(15, Duration::from_secs(1))
            )
        );
        assert_eq!(worst(&tally.admissions.gcra_excess(BURST, RATE as f64)), 0);
        assert_eq!(
            worst(
                &tally
                    .admissions
                    .fixed_window_excess(15, Duration::from_secs(1))
            ),
            0
        );
    }
    for &slot in &moving_set {
        assert_eq!(cluster.owner_of(slot), added, "slot {slot}");
    }

    // The client found the new node: the moving keys are decided by Redis,
    // on it (its calls grow), with no refresh asked for.
    let calls_there = |cluster: &ReplicatedCluster| {
        let stats = cluster.cli(added, &["INFO", "commandstats"]);
        stats
            .lines()
            .filter_map(|line| line.split("calls=").nth(1))
            .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
            .sum::<u64>()
    };
    let before = calls_there(&cluster);
    for key in &moving_keys {
        let o = limiter.check_outcome(key, 1).await.unwrap();
        assert_eq!(o.source, Source::Redis, "{key}: {o:?}");
    }
    let after = calls_there(&cluster);
    println!(
        "node added: {} calls on the new node for {} keys",
        after - before,
        moving_keys.len()
    );
    assert!(
        after - before >= moving_keys.len() as u64,
        "the new node was not asked: {before} then {after} calls"
    );
    // No count of its keys: each lives until its 1 s window ends, which can
    // fall between the last check and the count (the slots are checked
    // above, the calls here).
    drop(cluster);
}
