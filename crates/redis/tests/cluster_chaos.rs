//! Exact while the cluster changes under load: a real 3-master +
//! 3-replica Redis Cluster on loopback resharded, failed over and grown
//! while tasks call the limiter, with an independent count of admissions
//! per key checked against each limit's bound (see `admissions`).
//!
//! Every limiter here fails closed, so the failure policy admits nothing:
//! any admission beyond a bound was Redis's. Deadlines are generous (a
//! loaded 2-core machine runs the cluster, the load and the changes): what
//! is asserted is where each decision came from, the bounds, and that each
//! call returned by its deadline (with a second's slack for the scheduler),
//! never a speed. The two tests take one cluster each and run one at a
//! time.

#[path = "cluster_chaos/admissions.rs"]
mod admissions;
#[path = "cluster_chaos/isolation.rs"]
mod isolation;
#[path = "cluster_chaos/load.rs"]
mod load;

use std::time::{Duration, Instant};

use admissions::worst;
use load::{Controls, Load, Tally};
use tollgate::{FixedWindow, Gcra, Quota};
use tollgate_redis::{Durability, FailurePolicy, Options, Redis, RedisConfig, RedisLimiter};
use tollgate_testkit::{ReplicatedCluster, key_slot};

/// One cluster test at a time: each runs six to seven servers.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Each decision's deadline: long enough for a redirected, retried call on
/// a loaded machine, short against the test.
const DEADLINE: Duration = Duration::from_secs(2);

/// How late a decision answered at its deadline may be seen by its task on
/// a loaded machine.
const SCHEDULING: Duration = Duration::from_secs(1);

async fn connect(cluster: &ReplicatedCluster) -> Redis {
    let mut config = RedisConfig::cluster(cluster.urls());
    // The defaults but the timeouts, which a loaded machine needs longer.
    config.options = Options {
        response_timeout: Duration::from_millis(500),
        connection_timeout: Duration::from_millis(500),
        ..Options::default()
    };
    tokio::time::timeout(Duration::from_secs(10), Redis::open(&config))
        .await
        .expect("connect in time")
        .expect("connect")
}

fn gcra(per_second: u64, burst: u64) -> Gcra {
    Gcra::new(
        Quota::per_second(per_second)
            .unwrap()
            .with_burst(burst)
            .unwrap(),
    )
    .unwrap()
}

fn limiter(redis: &Redis, name: &str) -> tollgate_redis::RedisLimiterBuilder {
    RedisLimiter::builder(redis.clone(), name)
        .failure_policy(FailurePolicy::FailClosed)
        .deadline(DEADLINE)
}

/// `count` user keys of `limiter` whose Redis keys hash to one of `slots`.
fn keys_in(limiter: &RedisLimiter, slots: &[u16], count: usize) -> Vec<String> {
    (0u64..)
        .map(|i| format!("user-{i}"))
        .filter(|key| slots.contains(&key_slot(&limiter.redis_keys(key)[0])))
        .take(count)
        .collect()
}

/// Runs `change` on a blocking thread while `load` runs, with `before` and
/// `after` of load around it; returns what `change` returned.
async fn during<T: Send + 'static>(
    before: Duration,
    after: Duration,
    change: impl FnOnce() -> T + Send + 'static,
) -> T {
    tokio::time::sleep(before).await;
    let result = tokio::task::spawn_blocking(change)
        .await
        .expect("the change");
    tokio::time::sleep(after).await;
    result
}

/// Asserts that every call of `tally` was decided by Redis within the
/// deadline, and prints its figures.
fn all_by_redis(what: &str, tally: &Tally) {
    println!("{what}: {tally}");
    assert!(tally.calls > 500, "{what}: too little load: {tally}");
    assert_eq!(
        tally.by_policy, 0,
        "{what}: decisions lost to errors: {tally}"
    );
    assert!(
        tally.slowest < DEADLINE + SCHEDULING,
        "{what}: a call outlived its deadline: {tally}"
    );
}

/// Slots migrate step by step (one key per `MIGRATE`, `ASK` and `TRYAGAIN`
/// in between) under load, first between two masters, then to a master
/// added meanwhile: every decision is Redis's (none lost to an error, none
/// to the policy), no limit admits beyond its bound, and the client follows
/// to the new node without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_migrating_under_load_lose_no_decision_and_admit_within_the_limits() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut cluster = tokio::task::spawn_blocking(|| ReplicatedCluster::start(3, 1))
        .await
        .unwrap();
    let redis = connect(&cluster).await;
    let masters = cluster.masters();
    let (from, to) = (masters[0], masters[1]);
    // 12 slots of the first master, spread over its range.
    let owned = cluster.slots_of(from);
    let slots: Vec<u16> = owned
        .iter()
        .step_by(owned.len() / 12)
        .take(12)
        .copied()
        .collect();

    // The lean script (one key) and the general one (two keys in one slot:
    // split by the migration, they meet TRYAGAIN).
    let window = Duration::from_secs(1);
    let lean = limiter(&redis, "mig-lean")
        .limit(FixedWindow::new(Quota::new(5, window).unwrap()).unwrap())
        .build()
        .unwrap();
    let multi = limiter(&redis, "mig-multi")
        .limit(gcra(20, 4))
        .limit(FixedWindow::new(Quota::new(12, window).unwrap()).unwrap())
        .build()
        .unwrap();
    let lean_keys = keys_in(&lean, &slots, 36);
    let mut multi_keys = keys_in(&multi, &slots, 48);
    // Keys of their own for controls (a refund gives permits back: not
    // counted).
    let control_keys = multi_keys.split_off(36);
    let check_bounds = |what: &str, lean_tally: &Tally, multi_tally: &Tally| {
        let lean_excess = lean_tally.admissions.fixed_window_excess(5, window);
        let gcra_excess = multi_tally.admissions.gcra_excess(4, 20.0);
        let fixed_excess = multi_tally.admissions.fixed_window_excess(12, window);
        println!(
            "{what}: over-admission per key: lean {}, multi gcra {}, multi window {}",
            worst(&lean_excess),
            worst(&gcra_excess),
            worst(&fixed_excess)
        );
        assert_eq!(worst(&lean_excess), 0, "{what}: {lean_excess:?}");
        assert_eq!(worst(&gcra_excess), 0, "{what}: {gcra_excess:?}");
        assert_eq!(worst(&fixed_excess), 0, "{what}: {fixed_excess:?}");
        assert!(lean_tally.admissions.total() > 100 && multi_tally.admissions.total() > 100);
    };

    // 1. Between two masters.
    let controls = Controls::start(multi.clone(), control_keys.clone());
    let lean_load = Load::start(lean.clone(), lean_keys.clone(), 3, Duration::from_millis(2));
    let multi_load = Load::start(
        multi.clone(),
        multi_keys.clone(),
        3,
        Duration::from_millis(2),
    );
    let moving = slots.clone();
    let (cluster_back, moved) = during(Duration::from_millis(500), Duration::from_millis(500), {
        move || {
            let moved: usize = moving
                .iter()
                .map(|&slot| cluster.migrate_slot(slot, to, Duration::from_millis(15)))
                .sum();
            cluster.wait_converged();
            (cluster, moved)
        }
    })
    .await;
    cluster = cluster_back;
    let (lean_tally, multi_tally) = (lean_load.stop().await, multi_load.stop().await);
    let (refunds, failed) = controls.stop().await;
    println!(
        "migration between masters: {moved} keys moved in {} slots; {refunds} refunds, failed {failed:?}",
        slots.len()
    );
    assert!(
        refunds > 100 && failed.is_empty(),
        "controls lost: {failed:?} of {refunds}"
    );
    all_by_redis("migration, lean script", &lean_tally);
    all_by_redis("migration, two-key script", &multi_tally);
    // 108 keys at most (36 + 2·36); a key whose window ended may expire
    // before its turn.
    assert!(
        moved >= 54,
        "only {moved} keys moved: the load had not written them"
    );
    check_bounds("migration", &lean_tally, &multi_tally);
    for &slot in &slots {
        assert_eq!(cluster.owner_of(slot), to);
    }

    // 2. A new master joins and takes the same slots, under load, from the
    // same client.
    let lean_load = Load::start(lean.clone(), lean_keys.clone(), 3, Duration::from_millis(2));
    let multi_load = Load::start(
        multi.clone(),
        multi_keys.clone(),
        3,
        Duration::from_millis(2),
    );
    let moving = slots.clone();
    let (cluster_back, added, moved) =
        during(Duration::from_millis(300), Duration::from_millis(500), {
            move || {
                let added = cluster.add_master();
                let moved: usize = moving
                    .iter()
                    .map(|&slot| cluster.migrate_slot(slot, added, Duration::from_millis(5)))
                    .sum();
                cluster.wait_converged();
                (cluster, added, moved)
            }
        })
        .await;
    cluster = cluster_back;
    let (lean_tally, multi_tally) = (lean_load.stop().await, multi_load.stop().await);
    println!("migration to a new master: {moved} keys moved");
    all_by_redis("new node, lean script", &lean_tally);
    all_by_redis("new node, two-key script", &multi_tally);
    check_bounds("new node", &lean_tally, &multi_tally);
    // The keys now live on the new node, and the same client decides there.
    let before = cluster.cli(added, &["INFO", "commandstats"]);
    let stats_before = lean.stats().redis;
    for key in &lean_keys {
        let o = lean.check_outcome(key, 1).await.unwrap();
        assert_eq!(o.source, tollgate_redis::Source::Redis, "{key}");
    }
    assert_eq!(lean.stats().redis, stats_before + lean_keys.len() as u64);
    let after = cluster.cli(added, &["INFO", "commandstats"]);
    assert_ne!(before, after, "the new node was not asked");
    // Its slots, not a count of its keys: a key lives until its 1 s window
    // ends, and a loaded machine once took longer than that over the checks
    // above, so that fewer keys than were written were left to count.
    for &slot in &slots {
        assert_eq!(cluster.owner_of(slot), added, "slot {slot}");
    }
    drop(cluster);
}

/// Failovers under load: a manual `CLUSTER FAILOVER` loses nothing; a
/// master killed while its replica lags loses the admissions the replica
/// never received, at most the bound per key (here exactly `burst`), and
/// with `Durability::Replicas` none; and `WAIT`'s cost measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failovers_under_load_stay_within_the_stated_bound() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut cluster = tokio::task::spawn_blocking(|| ReplicatedCluster::start(3, 1))
        .await
        .unwrap();
    let redis = connect(&cluster).await;

    // WAIT's cost, on the healthy cluster: the same load with and without.
    // Every call must be Redis's there, so WAIT waits up to a second: a
    // healthy replica's acknowledgement can take over 100 ms on a loaded
    // 2-core machine, and an admission it missed would be Unreplicated
    // (timing, not the cost under test; WAIT returns as soon as the
    // replica acknowledges, so the cost measured is the same).
    let patient_wait = Durability::Replicas {
        replicas: 1,
        timeout: Duration::from_secs(1),
    };
    for round in 0..2 {
        for durable in [false, true] {
            let mut builder = limiter(&redis, &format!("cost-{round}-{durable}"))
                .limit(gcra(1_000_000, 1_000_000));
            if durable {
                builder = builder.durability(patient_wait);
            }
            let cost = builder.build().unwrap();
            let keys: Vec<String> = (0..64).map(|i| format!("k{i}")).collect();
            let load = Load::start(cost, keys, 4, Duration::ZERO);
            tokio::time::sleep(Duration::from_millis(600)).await;
            let tally = load.stop().await;
            println!(
                "cost, round {round}, {}: {:.0} calls/s, {}",
                if durable { "WAIT 1" } else { "no WAIT" },
                tally.rate(),
                tally.latency()
            );
            assert_eq!(tally.by_policy, 0, "{tally}");
        }
    }

    // 1. CLUSTER FAILOVER: the master stops writes until its replica has
    // them all: nothing lost. GCRA at 20/s, burst 4: every key admits at
    // its rate all along, so a lost write would admit one permit too many.
    let masters = cluster.masters();
    let manual = limiter(&redis, "fo-manual")
        .limit(gcra(20, 4))
        .build()
        .unwrap();
    let keys = keys_in(&manual, &cluster.slots_of(masters[0]), 48);
    let replica = cluster.replicas_of(masters[0])[0];
    let load = Load::start(manual.clone(), keys, 4, Duration::from_millis(2));
    let cluster_back = during(
        Duration::from_millis(500),
        Duration::from_millis(800),
        move || {
            cluster.manual_failover(replica);
            cluster
        },
    )
    .await;
    cluster = cluster_back;
    let tally = load.stop().await;
    println!("manual failover: {tally}");
    let excess = tally.admissions.gcra_excess(4, 20.0);
    println!("manual failover: over-admission per key {}", worst(&excess));
    assert_eq!(worst(&excess), 0, "{excess:?}");
    assert!(tally.slowest < DEADLINE + SCHEDULING, "{tally}");

    // 2. and 3. A master killed while its replica lags, without and with
    // WAIT. GCRA with a burst of 20 and 20 an hour: the lagging replica
    // misses every key's whole burst, which the promoted replica admits
    // again; the bound is burst + rate·lag per key.
    let burst = 20;
    let per_second = 20.0 / 3_600.0;
    // A replica that misses 100 ms here only refuses (fewer admitted, never
    // more), which the checks below allow.
    let wait = Durability::Replicas {
        replicas: 1,
        timeout: Duration::from_millis(100),
    };
    let masters = cluster.masters();
    for (victim, durable) in [(masters[1], false), (masters[2], true)] {
        let name = if durable { "fo-wait" } else { "fo-async" };
        let mut builder = limiter(&redis, name)
            .limit(Gcra::new(Quota::per_hour(burst).unwrap().with_burst(burst).unwrap()).unwrap());
        if durable {
            builder = builder.durability(wait);
        }
        let slow = builder.build().unwrap();
        let keys = keys_in(&slow, &cluster.slots_of(victim), 24);
        let replica = cluster.replicas_of(victim)[0];
        // The replica stops reading; 16 MiB of ballast fill the sockets
        // between them, so that what the master writes next waits in its
        // own memory, which the kill loses.
        let stopped = Instant::now();
        cluster.nodes[replica].signal("-STOP");
        // (a stopped reader's receive buffer does not grow: it stays near its
        // size when it stopped, 128 KiB by default)
        cluster.fill_replication_link(victim, 16 << 20);
        let lagging = Instant::now();
        let load = Load::start(slow.clone(), keys.clone(), 4, Duration::from_millis(1));
        let whole_bursts = keys.len() as u64 * burst;
        while load.admitted() < whole_bursts && lagging.elapsed() < Duration::from_millis(700) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let before_kill = load.admitted();
        cluster.kill(victim);
        let lag = stopped.elapsed();
        cluster.nodes[replica].signal("-CONT");
        // The replica takes over; the killed node comes back (empty) as its
        // replica, as an operator or an orchestrator would restart it: with
        // WAIT, the new master admits nothing until it has a replica again.
        let cluster_back = during(Duration::ZERO, Duration::from_millis(1_000), move || {
            cluster.wait_master(replica);
            cluster.restart(victim);
            cluster.wait_replica_of(victim, replica);
            cluster
        })
        .await;
        cluster = cluster_back;
        let tally = load.stop().await;
        let excess = tally.admissions.gcra_excess(burst, per_second);
        let bound = burst + (per_second * lag.as_secs_f64()).ceil() as u64;
        let what = if durable {
            "killed master, WAIT 1"
        } else {
            "killed master, no WAIT"
        };
        println!("{what}: {tally}");
        println!(
            "{what}: {before_kill} admitted while the replica lagged ({lag:?}), \
             over-admission per key {} (bound {bound})",
            worst(&excess)
        );
        assert!(worst(&excess) <= bound, "{what}: {excess:?}");
        assert!(tally.slowest < DEADLINE + SCHEDULING, "{what}: {tally}");
        if durable {
            assert_eq!(
                worst(&excess),
                0,
                "{what}: WAIT let an admission be lost: {excess:?}"
            );
        } else {
            // The loss is real: what WAIT is for.
            assert!(worst(&excess) > 0, "{what}: nothing was lost: {excess:?}");
        }
        // After the failover, Redis decides again: without WAIT each key
        // its whole burst again; with WAIT some permits may be taken by
        // admissions the new replica acknowledged too late (refused by the
        // policy: fewer admitted, never more).
        let admitted = tally.admissions.total() as u64;
        if durable {
            assert!(admitted > 0, "{what}: Redis never admitted again: {tally}");
        } else {
            assert!(admitted >= 2 * before_kill, "{what}: {tally}");
        }
    }
    drop(cluster);
}
