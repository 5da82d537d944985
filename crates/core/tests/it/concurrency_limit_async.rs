//! Waiting for slots (feature `tokio`): FIFO order within a priority,
//! higher priorities first, `max_delay`, the queue cap, and cancellation at
//! every point, on tokio's paused clock.
#![cfg(feature = "tokio")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::concurrency::{
    ConcurrencyLimiter, KeyedConcurrencyLimiter, Priority, Reason, Shares,
};

fn limiter(limit: u64) -> ConcurrencyLimiter {
    ConcurrencyLimiter::builder(limit)
        .shares(Shares::none())
        .max_delay(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Spawns a waiter that records `name` when granted and holds the slot
/// until `hold` passes.
fn waiter(
    limiter: &ConcurrencyLimiter,
    order: &Arc<Mutex<Vec<&'static str>>>,
    name: &'static str,
    priority: Priority,
) -> tokio::task::JoinHandle<()> {
    let (limiter, order) = (limiter.clone(), order.clone());
    tokio::spawn(async move {
        let permit = limiter.acquire(1, priority).await.unwrap();
        order.lock().unwrap().push(name);
        tokio::time::sleep(Duration::from_millis(1)).await;
        drop(permit);
    })
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_fifo_within_a_priority() {
    let limiter = limiter(1);
    let order = Arc::new(Mutex::new(Vec::new()));
    let held = limiter.try_acquire(1).unwrap();
    let mut tasks = Vec::new();
    for name in ["first", "second", "third"] {
        tasks.push(waiter(&limiter, &order, name, Priority::Default));
        tokio::task::yield_now().await; // let it enqueue
    }
    assert!(limiter.has_waiters());
    drop(held);
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), ["first", "second", "third"]);
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_higher_priority_waiter_is_served_first() {
    let limiter = limiter(1);
    let order = Arc::new(Mutex::new(Vec::new()));
    let held = limiter.try_acquire(1).unwrap();
    let shed = waiter(&limiter, &order, "sheddable", Priority::Sheddable);
    tokio::task::yield_now().await;
    let default = waiter(&limiter, &order, "default", Priority::Default);
    tokio::task::yield_now().await;
    let critical = waiter(&limiter, &order, "critical", Priority::Critical);
    tokio::task::yield_now().await;
    drop(held);
    for task in [shed, default, critical] {
        task.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), ["critical", "default", "sheddable"]);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_gives_up_after_max_delay_taking_nothing() {
    let limiter = ConcurrencyLimiter::builder(1)
        .max_delay(Duration::from_millis(100))
        .build()
        .unwrap();
    let _held = limiter.try_acquire(1).unwrap();
    let start = tokio::time::Instant::now();
    let refused = limiter.acquire(1, Priority::Default).await.unwrap_err();
    assert_eq!(refused.reason(), Reason::TimedOut);
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    assert_eq!(limiter.in_flight(), 1);
    assert!(!limiter.has_waiters(), "the waiter left the queue");
}

#[tokio::test(start_paused = true)]
async fn the_queue_cap_and_an_impossible_cost_are_refused_at_once() {
    let limiter = ConcurrencyLimiter::builder(1)
        .max_waiters(1)
        .build()
        .unwrap();
    let _held = limiter.try_acquire(1).unwrap();
    let _queued = limiter.enqueue(1, Priority::Default).unwrap();
    let start = tokio::time::Instant::now();
    let full = limiter.acquire(1, Priority::Default).await.unwrap_err();
    assert_eq!(full.reason(), Reason::QueueFull);
    let cost = limiter.acquire(2, Priority::Default).await.unwrap_err();
    assert_eq!(cost.reason(), Reason::Cost);
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn an_aborted_waiter_leaves_the_queue_and_the_next_one_is_served() {
    let limiter = limiter(1);
    let held = limiter.try_acquire(1).unwrap();
    let quitter = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.acquire(1, Priority::Default).await.map(drop) })
    };
    tokio::task::yield_now().await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let next = waiter(&limiter, &order, "next", Priority::Default);
    tokio::task::yield_now().await;
    quitter.abort();
    assert!(quitter.await.unwrap_err().is_cancelled());
    drop(held);
    next.await.unwrap();
    assert_eq!(*order.lock().unwrap(), ["next"]);
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_grant_never_claimed_comes_back() {
    let limiter = limiter(1);
    let held = limiter.try_acquire(1).unwrap();
    let ticket = limiter.enqueue(1, Priority::Default).unwrap();
    assert!(ticket.is_queued());
    drop(held); // the slot is handed to the ticket...
    assert_eq!(limiter.in_flight(), 1);
    drop(ticket); // ...which is dropped before it is polled
    assert_eq!(limiter.in_flight(), 0);
    assert!(limiter.try_acquire(1).is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_future_dropped_while_holding_its_permit_releases_it() {
    let limiter = limiter(1);
    let task = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            let _permit = limiter.acquire(1, Priority::Default).await.unwrap();
            std::future::pending::<()>().await;
        })
    };
    tokio::task::yield_now().await;
    assert_eq!(limiter.in_flight(), 1);
    task.abort();
    let _ = task.await;
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn keyed_waiters_are_per_key() {
    let limiter = KeyedConcurrencyLimiter::<&str>::builder(1)
        .max_delay(Duration::from_millis(50))
        .build()
        .unwrap();
    let held = limiter.try_acquire(&"a", 1).unwrap();
    // Another key is not held up.
    let b = limiter.acquire(&"b", 1, Priority::Default).await.unwrap();
    let waiting = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.acquire(&"a", 1, Priority::Default).await.map(drop) })
    };
    tokio::task::yield_now().await;
    drop(held);
    waiting.await.unwrap().unwrap();
    drop(b);
    assert_eq!(limiter.in_flight(&"a"), 0);
    assert_eq!(limiter.sweep(), 0);
}
