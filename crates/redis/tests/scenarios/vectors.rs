//! The core's test vectors (`crates/core/tests/vectors/core.json`), replayed
//! through the script in test mode on a server or a cluster.

use std::time::Duration;

use serde::Deserialize;
use tollgate::{FixedWindow, Gcra, ManualClock, Nanos, Quota, SlidingWindow};
use tollgate_redis::{FailurePolicy, Limit, Redis, RedisLimiter, Source};

#[derive(Deserialize)]
pub struct Case {
    pub name: String,
    algorithm: String,
    quota: QuotaSpec,
    slots: Option<u32>,
    pub steps: Vec<Step>,
}

#[derive(Deserialize)]
struct QuotaSpec {
    limit: u64,
    period_ns: u64,
    burst: u64,
}

#[derive(Deserialize)]
pub struct Step {
    pub now_ns: u64,
    pub cost: u64,
    expect: Expect,
}

#[derive(Deserialize, Debug, PartialEq, Eq)]
struct Expect {
    allowed: bool,
    limit: u64,
    remaining: u64,
    retry_after_ns: u64,
    reset_after_ns: u64,
}

pub fn limit_of(case: &Case) -> Option<Limit> {
    let q = Quota::new(case.quota.limit, Duration::from_nanos(case.quota.period_ns))
        .and_then(|q| q.with_burst(case.quota.burst))
        .expect("valid quota");
    Some(match case.algorithm.as_str() {
        "gcra" => Gcra::new(q).expect("gcra").into(),
        "fixed_window" => FixedWindow::new(q).expect("fixed window").into(),
        "sliding_window" => SlidingWindow::new(q, case.slots.expect("slots"))
            .expect("sliding window")
            .into(),
        _ => return None,
    })
}

/// Every case of `core.json`.
pub fn cases() -> Vec<Case> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../core/tests/vectors/core.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("core.json")).expect("json")
}

/// Replays every GCRA, fixed window and sliding window case of the core's
/// vectors through `redis` in test mode: the same answers at every step.
pub async fn every_vector_step_matches_the_core(redis: &Redis) {
    let cases = cases();
    let mut replayed = [0usize; 3];
    for case in &cases {
        let Some(limit) = limit_of(case) else {
            assert_eq!(
                case.algorithm, "sliding_log",
                "an unknown algorithm in core.json"
            );
            continue;
        };
        let index = ["gcra", "fixed_window", "sliding_window"]
            .iter()
            .position(|a| *a == case.algorithm)
            .expect("known");
        let clock = ManualClock::new();
        let limiter = RedisLimiter::builder(redis.clone(), &case.name)
            .limit(limit)
            .manual_time(clock.clone())
            .failure_policy(FailurePolicy::FailClosed)
            .deadline(Duration::from_secs(2))
            .build()
            .expect("limiter");
        for (i, step) in case.steps.iter().enumerate() {
            clock.set(Nanos::new(step.now_ns));
            let outcome = limiter
                .check_outcome(b"vector-key", step.cost)
                .await
                .expect("cost within capacity");
            assert_eq!(outcome.source, Source::Redis, "{} step {i}", case.name);
            let d = outcome.decision;
            let got = Expect {
                allowed: d.is_allowed(),
                limit: d.limit(),
                remaining: d.remaining(),
                retry_after_ns: u64::try_from(d.retry_after().as_nanos()).expect("u64"),
                reset_after_ns: u64::try_from(d.reset_after().as_nanos()).expect("u64"),
            };
            assert_eq!(
                got, step.expect,
                "{} step {i} at {} ns, cost {}",
                case.name, step.now_ns, step.cost
            );
        }
        replayed[index] += 1;
    }
    // Every case of the three algorithms ran (the file has 13, 10 and 10).
    assert!(replayed.iter().all(|&n| n >= 10), "replayed {replayed:?}");
}
