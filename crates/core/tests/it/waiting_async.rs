//! Async waiting on tokio's paused clock: the shaper's FIFO order, immediate
//! refusals, exact refunds when a waiting future is dropped at any point, many
//! tasks at once within the bound, and `until_ready` on plain and keyed
//! limiters. Feature `tokio`.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::algorithms::{gcra, quota};
use support::window::Guaranteed;
use tokio::time::Instant;
use tollgate::{Clock, KeyedLimiter, Limiter, Nanos, Refusal, Shaper, SlidingLog, TokioClock};

fn shaper(limit: u64, period: Duration, burst: u64, max_delay: Duration) -> Shaper<TokioClock> {
    Shaper::builder(
        tollgate::Quota::new(limit, period)
            .unwrap()
            .with_burst(burst)
            .unwrap(),
    )
    .max_delay(max_delay)
    .clock(TokioClock::new())
    .build()
    .unwrap()
}

/// Lets every spawned task run until it waits on the timer.
async fn settle_tasks() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn waiters_are_released_in_arrival_order_at_their_instants() {
    // 10 per second, burst 1: one every 100 ms.
    let shaper = shaper(10, Duration::from_secs(1), 1, Duration::from_secs(10));
    let start = Instant::now();
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let shaper = shaper.clone();
        let log = Arc::clone(&log);
        tasks.push(tokio::spawn(async move {
            let at = shaper.until_ready(1).await.unwrap();
            log.lock().unwrap().push((i, at, start.elapsed()));
        }));
        // Arrive in order.
        settle_tasks().await;
    }
    for task in tasks {
        task.await.unwrap();
    }
    let log = log.lock().unwrap().clone();
    let order: Vec<u64> = log.iter().map(|&(i, _, _)| i).collect();
    assert_eq!(order, (0..8).collect::<Vec<_>>());
    for &(i, at, woke) in &log {
        assert_eq!(at, Nanos::new(i * 100_000_000));
        assert!(woke >= at.as_duration(), "task {i} ran before its instant");
        // Paused time: the timer fires at its (millisecond) deadline.
        assert!(woke - at.as_duration() <= Duration::from_millis(1));
    }
}

#[tokio::test(start_paused = true)]
async fn a_caller_over_max_delay_is_refused_without_time_passing() {
    let shaper = shaper(10, Duration::from_secs(1), 1, Duration::from_millis(150));
    let first = shaper.reserve(1).unwrap();
    let second = shaper.reserve(1).unwrap();
    let before = Instant::now();
    let refused = shaper.until_ready(1).await.unwrap_err();
    assert_eq!(Instant::now(), before);
    assert_eq!(
        refused,
        Refusal::TooLong {
            wait: Duration::from_millis(200),
            max_delay: Duration::from_millis(150)
        }
    );
    first.consume();
    second.consume();
}

/// Drops the `victim`-th of six waiting tasks after `after` of paused time,
/// at each point of its wait, and checks that every other task is released
/// exactly where it would have been had the victim never come.
#[tokio::test(start_paused = true)]
async fn dropping_a_waiting_future_at_any_point_refunds_exactly() {
    for victim in 0..6u64 {
        for after_ms in [0u64, 1, 50, 99, 150, 250, 420] {
            let shaper = shaper(10, Duration::from_secs(1), 1, Duration::from_secs(10));
            let start = Instant::now();
            let log = Arc::new(Mutex::new(Vec::new()));
            let mut handles = Vec::new();
            for i in 0..6u64 {
                let shaper = shaper.clone();
                let log = Arc::clone(&log);
                handles.push(tokio::spawn(async move {
                    let at = shaper.until_ready(1).await.unwrap();
                    log.lock().unwrap().push((i, at.as_u64()));
                }));
                settle_tasks().await;
            }
            tokio::time::sleep_until(start + Duration::from_millis(after_ms)).await;
            handles[victim as usize].abort();
            settle_tasks().await;
            for handle in handles {
                let _ = handle.await;
            }
            let log = log.lock().unwrap().clone();
            // The victim ran if its instant came first (victim·100 ms ≤ after).
            let victim_ran = victim * 100 <= after_ms;
            let mut expected = Vec::new();
            let mut next = 0;
            for i in 0..6u64 {
                if i == victim && !victim_ran {
                    continue;
                }
                // Tasks already released keep their instants; the rest close
                // the gap, but never before the moment of the cancel.
                let slot = next * 100_000_000;
                let at = if i < victim || victim_ran {
                    i * 100_000_000
                } else {
                    slot.max(after_ms * 1_000_000)
                };
                expected.push((i, at));
                next += 1;
            }
            assert_eq!(log, expected, "victim {victim} dropped after {after_ms} ms");
            // Nothing pending is left, and the permits are all accounted for.
            assert_eq!(shaper.waiters(), 0);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn many_tasks_at_once_stay_within_the_bound_and_never_run_early() {
    // 1,000 per second, burst 20; 400 tasks of cost 1 or 2.
    let quota = quota(1_000, 1_000_000_000).with_burst(20).unwrap();
    let shaper = Shaper::builder(quota)
        .max_delay(Duration::from_secs(60))
        .clock(TokioClock::new())
        .build()
        .unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..400u64)
        .map(|i| {
            let shaper = shaper.clone();
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let cost = 1 + i % 2;
                let at = shaper.until_ready(cost).await.unwrap();
                let woke = shaper.clock().now();
                log.lock()
                    .unwrap()
                    .push((i, at.as_u64(), woke.as_u64(), cost));
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), 400);
    for &(i, at, woke, _) in &log {
        assert!(woke >= at, "task {i} woke at {woke} before {at}");
    }
    let admissions: Vec<(u64, u64)> = log.iter().map(|&(_, at, _, cost)| (at, cost)).collect();
    let report = gcra(1_000, 1_000_000_000, 20)
        .guarantee()
        .check(&admissions)
        .unwrap();
    assert!(report.saturated(), "{report:?}");
    // 600 permits at 1 per ms after a burst of 20: the last at 580 ms.
    let last = log.iter().map(|&(_, at, _, _)| at).max().unwrap();
    assert_eq!(last, 580_000_000);
}

#[tokio::test(start_paused = true)]
async fn a_high_rate_is_released_in_batches_on_the_millisecond_timer() {
    // 100,000 per second with 2,000 waiters: 20 ms of schedule. Every waiter
    // is released within the timer's millisecond of its instant.
    let shaper = shaper(100_000, Duration::from_secs(1), 1, Duration::from_secs(1));
    let start = shaper.clock().now();
    let tasks: Vec<_> = (0..2_000)
        .map(|_| {
            let shaper = shaper.clone();
            tokio::spawn(async move {
                let at = shaper.until_ready(1).await.unwrap();
                (at, shaper.clock().now())
            })
        })
        .collect();
    let mut worst = Duration::ZERO;
    let mut instants = Vec::new();
    for task in tasks {
        let (at, woke) = task.await.unwrap();
        assert!(woke >= at);
        worst = worst.max(woke.saturating_duration_since(at));
        instants.push(at.as_u64());
    }
    instants.sort_unstable();
    // Exactly 10 µs apart: the rate is exact over the run.
    for pair in instants.windows(2) {
        assert_eq!(pair[1] - pair[0], 10_000);
    }
    assert_eq!(instants[0], start.as_u64());
    assert!(
        worst <= Duration::from_millis(1),
        "worst lateness {worst:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn until_ready_waits_exactly_retry_after_on_plain_and_keyed_limiters() {
    let clock = TokioClock::new();
    let limiter = Limiter::with_clock(gcra(10, 1_000_000_000, 1), clock);
    let start = Instant::now();
    assert!(limiter.until_ready().await.is_allowed());
    assert!(limiter.until_ready().await.is_allowed());
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    assert!(limiter.until_ready_n(2).await.is_err());

    let keyed: KeyedLimiter<String, SlidingLog> =
        KeyedLimiter::builder(SlidingLog::new(quota(2, 1_000_000_000)).unwrap())
            .clock(clock)
            .sweep_every(None)
            .build();
    let start = Instant::now();
    for _ in 0..3 {
        assert!(keyed.until_ready("a").await.is_allowed());
    }
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    // Another key is not held up.
    assert!(keyed.until_ready_n("b", 2).await.unwrap().is_allowed());
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_until_ready_takes_nothing() {
    let clock = TokioClock::new();
    let limiter = Limiter::with_clock(gcra(1, 1_000_000_000, 1), clock);
    assert!(limiter.check().is_allowed());
    let waited = tokio::time::timeout(Duration::from_millis(500), limiter.until_ready()).await;
    assert!(waited.is_err());
    // Still exactly one permit per second: due at 1 s, not later.
    let start = Instant::now();
    assert!(limiter.until_ready().await.is_allowed());
    assert_eq!(start.elapsed(), Duration::from_millis(500));
}
