//! Faults, each under every failure policy at once (three limiters with
//! their own connections): Redis stopped (`kill -STOP`) and resumed, killed
//! and restarted, `CLIENT PAUSE`, and through a TCP fault proxy added
//! latency, a black hole and connection resets.
//!
//! For each: every decision returns within the deadline plus a margin, the
//! policy's decisions are exactly the configured ones, and once the fault
//! ends decisions go back to Redis. Real time, with wide margins: the
//! deadline is 10 ms and a decision may take up to 40 ms more on a loaded
//! 2-core machine (the point is that nothing waits for the client's own
//! timeouts or reconnects).

mod support;
use support::Connect as _;

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use support::Server;
use support::proxy::{Mode, Proxy};
use tollgate::{Gcra, Quota};
use tollgate_redis::{BreakerConfig, FailurePolicy, Options, Redis, RedisLimiter, Source};

const DEADLINE: Duration = Duration::from_millis(10);
const MARGIN: Duration = Duration::from_millis(40);
const FAULT_FOR: Duration = Duration::from_millis(700);
const SHARE: f64 = 0.1;
const RATE: u64 = 100;

/// One fault at a time: they share the machine's two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const POLICIES: [FailurePolicy; 3] = [
    FailurePolicy::FailOpen,
    FailurePolicy::FailClosed,
    FailurePolicy::Local { share: SHARE },
];

async fn limiter(url: &str, policy: FailurePolicy, name: String) -> RedisLimiter {
    let options = Options {
        response_timeout: Duration::from_millis(100),
        connection_timeout: Duration::from_millis(100),
        retries: 1,
    };
    let redis = tokio::time::timeout(Duration::from_secs(5), Redis::connect(url, &options))
        .await
        .expect("connect in time")
        .expect("connect");
    RedisLimiter::builder(redis, name)
        .limit(Gcra::new(Quota::per_second(RATE).unwrap()).unwrap())
        .failure_policy(policy)
        .deadline(DEADLINE)
        .breaker(BreakerConfig {
            threshold: 3,
            open_for: Duration::from_millis(100),
        })
        .build()
        .unwrap()
}

/// Calls for `run`, each timed: (source, allowed) per call.
async fn drive(limiter: &RedisLimiter, run: Duration) -> Vec<(Source, bool)> {
    let start = Instant::now();
    let mut seen = Vec::new();
    while start.elapsed() < run {
        let t = Instant::now();
        let o = limiter.check_outcome(b"k", 1).await.unwrap();
        let took = t.elapsed();
        assert!(
            took <= DEADLINE + MARGIN,
            "a decision took {took:?} ({:?})",
            o.source
        );
        seen.push((o.source, o.decision.is_allowed()));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    seen
}

async fn healthy(limiter: &RedisLimiter, what: &str) {
    for _ in 0..10 {
        let o = limiter.check_outcome(b"k", 1).await.unwrap();
        assert_eq!(o.source, Source::Redis, "{what}: not decided by Redis");
    }
}

/// Runs the three policies through `inject` … `heal`.
async fn fault(name: &str, url: &str, inject: impl FnOnce(), heal: impl FnOnce()) {
    let limiters = join_all(
        POLICIES
            .iter()
            .enumerate()
            .map(|(i, p)| limiter(url, *p, format!("{name}-{i}"))),
    )
    .await;
    for l in &limiters {
        healthy(l, "before the fault").await;
    }
    inject();
    let runs = join_all(limiters.iter().map(|l| drive(l, FAULT_FOR))).await;
    heal();
    for ((policy, run), limiter) in POLICIES.iter().zip(&runs).zip(&limiters) {
        let by_policy: Vec<bool> = run
            .iter()
            .filter(|(s, _)| matches!(s, Source::Policy(_)))
            .map(|(_, allowed)| *allowed)
            .collect();
        assert!(
            by_policy.len() >= 10,
            "{name} {policy:?}: only {} of {} decisions by the policy",
            by_policy.len(),
            run.len()
        );
        let allowed = by_policy.iter().filter(|a| **a).count() as f64;
        eprintln!(
            "{name} {policy:?}: {} decisions, {} by the policy, {allowed} of those admitted",
            run.len(),
            by_policy.len()
        );
        match policy {
            FailurePolicy::FailOpen => {
                assert!(by_policy.iter().all(|a| *a), "{name}: fail open denied")
            }
            FailurePolicy::FailClosed => assert!(
                by_policy.iter().all(|a| !*a),
                "{name}: fail closed admitted"
            ),
            FailurePolicy::Local { share } => {
                // The local share: burst 10, 10 per second, over the run.
                let quota = RATE as f64 * share;
                let bound = quota + quota * FAULT_FOR.as_secs_f64() + 1.0;
                assert!(
                    allowed >= 1.0 && allowed <= bound,
                    "{name}: local admitted {allowed}, bound {bound}"
                );
            }
            _ => unreachable!(),
        }
        let stats = limiter.stats();
        assert_eq!(
            stats.policy() as usize,
            by_policy.len(),
            "{name} {policy:?}: counters"
        );
    }
    // Recovery: back to Redis within a few seconds, then stays there.
    for l in &limiters {
        let start = Instant::now();
        loop {
            let o = l.check_outcome(b"k", 1).await.unwrap();
            if o.source == Source::Redis {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{name}: Redis not used again"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        healthy(l, "after the fault").await;
    }
}

async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    SERIAL.lock().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_then_resumed() {
    let _serial = serial().await;
    let server = Server::start();
    fault(
        "stop",
        &server.url(),
        || server.signal("-STOP"),
        || server.signal("-CONT"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_then_restarted() {
    let _serial = serial().await;
    let server = std::cell::RefCell::new(Server::start());
    let url = server.borrow().url();
    fault(
        "kill",
        &url,
        || server.borrow_mut().kill(),
        || server.borrow_mut().restart(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_pause() {
    let _serial = serial().await;
    let server = Server::start();
    fault(
        "pause",
        &server.url(),
        || {
            server.cli(&["CLIENT", "PAUSE", "5000", "ALL"]);
        },
        || {
            server.cli(&["CLIENT", "UNPAUSE"]);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_latency_through_the_proxy() {
    let _serial = serial().await;
    let server = Server::start();
    let proxy = Proxy::start(server.port).await;
    fault(
        "latency",
        &proxy.url(),
        || proxy.set(Mode::Latency(Duration::from_millis(30))),
        || proxy.set(Mode::Pass),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn black_hole_through_the_proxy() {
    let _serial = serial().await;
    let server = Server::start();
    let proxy = Proxy::start(server.port).await;
    fault(
        "hole",
        &proxy.url(),
        || proxy.set(Mode::BlackHole),
        || proxy.set(Mode::Pass),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_resets_through_the_proxy() {
    let _serial = serial().await;
    let server = Server::start();
    let proxy = Proxy::start(server.port).await;
    fault(
        "reset",
        &proxy.url(),
        || proxy.set(Mode::Reset),
        || proxy.set(Mode::Pass),
    )
    .await;
}

/// No queue of pending calls: beyond `max_in_flight`, calls go to the
/// policy at once instead of waiting behind the stuck ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_beyond_the_in_flight_bound_go_to_the_policy_at_once() {
    let _serial = serial().await;
    let server = Server::start();
    let redis = server.connect().await;
    let limiter = RedisLimiter::builder(redis, "bound")
        .limit(Gcra::new(Quota::per_second(RATE).unwrap()).unwrap())
        .failure_policy(FailurePolicy::FailClosed)
        .deadline(Duration::from_millis(50))
        .max_in_flight(4)
        // Never opens here: every call meets Redis or the bound.
        .breaker(BreakerConfig {
            threshold: u32::MAX,
            open_for: Duration::from_millis(100),
        })
        .build()
        .unwrap();
    healthy(&limiter, "before").await;
    server.signal("-STOP");
    let start = Instant::now();
    let outcomes = join_all((0..32).map(|_| limiter.check_outcome(b"k", 1))).await;
    let took = start.elapsed();
    server.signal("-CONT");
    let sources: Vec<Source> = outcomes.into_iter().map(|o| o.unwrap().source).collect();
    let timed_out = sources
        .iter()
        .filter(|s| **s == Source::Policy(tollgate_redis::Fault::Timeout))
        .count();
    let overloaded = sources
        .iter()
        .filter(|s| **s == Source::Policy(tollgate_redis::Fault::Overloaded))
        .count();
    assert_eq!((timed_out, overloaded), (4, 28), "{sources:?}");
    assert!(took <= Duration::from_millis(50) + MARGIN, "took {took:?}");
    let stats = limiter.stats();
    assert_eq!(
        (
            stats.policy_timeout,
            stats.policy_overloaded,
            stats.policy_denied
        ),
        (4, 28, 32)
    );
}
