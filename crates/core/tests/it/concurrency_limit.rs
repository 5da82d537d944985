//! Concurrency limits: the guarantee under many threads, priorities, panics,
//! and the keyed limiter's bounded memory.
//!
//! # The hammer
//!
//! Threads acquire and release slots of one limit (and of a few keys) as
//! fast as they can, with random costs and priorities. Beside the limiter,
//! an *independent* counter holds what the threads themselves know they
//! hold: each adds its cost right after its permit is granted and removes it
//! right before dropping the permit. That counter never exceeds what the
//! limiter has granted, so if it ever exceeds the limit, the limiter has
//! over-admitted. Every thread checks it after each of its own additions;
//! the test also checks that the limit was actually reached (the check is
//! not vacuous) and that every slot came back.

use std::sync::Barrier;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::thread;

use tollgate::concurrency::{
    ConcurrencyLimiter, KeyedConcurrencyLimiter, Priority, Reason, Shares,
};

const THREADS: usize = 8;
const ROUNDS: usize = 20_000;

/// A small xorshift: deterministic per thread, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn priority(&mut self) -> Priority {
        match self.next() % 3 {
            0 => Priority::Critical,
            1 => Priority::Default,
            _ => Priority::Sheddable,
        }
    }
}

/// What one hammer run saw.
struct Seen {
    admitted: u64,
    max_in_use: u32,
}

/// Hammers `acquire` from `THREADS` threads on `keys` keys; `acquire(key,
/// cost, priority)` returns a guard that releases on drop.
fn hammer<P: Send>(
    keys: usize,
    limit: u32,
    acquire: impl Fn(usize, u64, Priority) -> Option<P> + Sync,
) -> Seen {
    let in_use: Vec<AtomicU32> = (0..keys).map(|_| AtomicU32::new(0)).collect();
    let max_in_use = AtomicU32::new(0);
    let admitted = AtomicU64::new(0);
    let start = Barrier::new(THREADS);
    thread::scope(|scope| {
        for seed in 0..THREADS {
            let (in_use, max_in_use, admitted, start, acquire) =
                (&in_use, &max_in_use, &admitted, &start, &acquire);
            scope.spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (seed as u64 + 1));
                start.wait();
                for _ in 0..ROUNDS {
                    let key = (rng.next() % keys as u64) as usize;
                    let cost = 1 + rng.next() % 2;
                    let priority = rng.priority();
                    let Some(permit) = acquire(key, cost, priority) else {
                        continue;
                    };
                    // SeqCst: the counter is the test's own, independent of
                    // the limiter's orderings.
                    let now = in_use[key].fetch_add(cost as u32, Ordering::SeqCst) + cost as u32;
                    assert!(
                        now <= limit,
                        "{now} slots of key {key} in use, limit {limit}"
                    );
                    max_in_use.fetch_max(now, Ordering::SeqCst);
                    admitted.fetch_add(1, Ordering::Relaxed);
                    if rng.next() % 4 == 0 {
                        thread::yield_now();
                    }
                    in_use[key].fetch_sub(cost as u32, Ordering::SeqCst);
                    drop(permit);
                }
            });
        }
    });
    Seen {
        admitted: admitted.into_inner(),
        max_in_use: max_in_use.into_inner(),
    }
}

#[test]
fn hammer_direct_never_holds_more_than_the_limit() {
    let limiter = ConcurrencyLimiter::builder(4)
        .shares(Shares::none())
        .build()
        .unwrap();
    let seen = hammer(1, 4, |_, cost, priority| {
        limiter.try_acquire_as(cost, priority).ok()
    });
    println!(
        "direct hammer: {} threads x {ROUNDS} rounds, {} admitted, max {} in use",
        THREADS, seen.admitted, seen.max_in_use
    );
    assert_eq!(seen.max_in_use, 4, "the limit was reached");
    assert!(seen.admitted > 0);
    assert_eq!(limiter.in_flight(), 0, "every slot came back");
}

#[test]
fn hammer_with_priorities_and_waiters_never_holds_more_than_the_limit() {
    // Blocking waiters are not offered; tickets polled by a spinning thread
    // exercise the queue's hand-off under contention.
    let limiter = ConcurrencyLimiter::builder(3)
        .max_waiters(1_000)
        .build()
        .unwrap();
    let seen = hammer(1, 3, |_, cost, priority| {
        let mut ticket = limiter.enqueue(cost, priority).ok()?;
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        for _ in 0..64 {
            if let std::task::Poll::Ready(permit) =
                std::pin::Pin::new(&mut ticket).poll_with(&mut cx)
            {
                return Some(permit);
            }
            thread::yield_now();
        }
        None // dropped: leaves the queue, or releases an unclaimed grant
    });
    println!(
        "queue hammer: {} threads x {ROUNDS} rounds, {} admitted, max {} in use",
        THREADS, seen.admitted, seen.max_in_use
    );
    assert_eq!(seen.max_in_use, 3);
    assert_eq!(limiter.in_flight(), 0);
    assert!(!limiter.has_waiters());
}

/// `Future::poll` through a helper name, so that the hammer reads plainly.
trait PollWith {
    fn poll_with(
        self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<tollgate::concurrency::Permit>;
}

impl PollWith for std::pin::Pin<&mut tollgate::concurrency::Ticket> {
    fn poll_with(
        self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<tollgate::concurrency::Permit> {
        std::future::Future::poll(self, cx)
    }
}

#[test]
fn hammer_keyed_never_holds_more_than_the_limit_per_key() {
    let limiter = KeyedConcurrencyLimiter::<u64>::builder(2)
        .shares(Shares::none())
        .build()
        .unwrap();
    let seen = hammer(4, 2, |key, cost, priority| {
        limiter.try_acquire_as(&(key as u64), cost, priority).ok()
    });
    println!(
        "keyed hammer: {} threads x {ROUNDS} rounds, {} admitted, max {} in use",
        THREADS, seen.admitted, seen.max_in_use
    );
    assert_eq!(seen.max_in_use, 2);
    for key in 0..4 {
        assert_eq!(limiter.in_flight(&key), 0);
    }
    assert_eq!(limiter.sweep(), 0, "idle keys are all dropped");
}

#[test]
fn hammer_borrowed_permits_never_hold_more_than_the_limit() {
    let limiter = ConcurrencyLimiter::builder(4)
        .shares(Shares::none())
        .build()
        .unwrap();
    let seen = hammer(1, 4, |_, cost, priority| {
        limiter.try_acquire_borrowed_as(cost, priority).ok()
    });
    assert_eq!(seen.max_in_use, 4, "the limit was reached");
    assert!(seen.admitted > 0);
    assert_eq!(limiter.in_flight(), 0, "every slot came back");
}

#[test]
fn a_panic_releases_a_borrowed_permit() {
    let limiter = ConcurrencyLimiter::new(2).unwrap();
    let result = std::panic::catch_unwind(|| {
        let _permit = limiter.try_acquire_borrowed(2).unwrap();
        panic!("the request handler panics");
    });
    assert!(result.is_err());
    assert_eq!(limiter.in_flight(), 0);
    assert!(limiter.try_acquire_borrowed(2).is_ok());
}

#[test]
fn a_panic_releases_the_slots() {
    let limiter = ConcurrencyLimiter::new(2).unwrap();
    let clone = limiter.clone();
    let result = std::panic::catch_unwind(move || {
        let _permit = clone.try_acquire(2).unwrap();
        panic!("the request handler panics");
    });
    assert!(result.is_err());
    assert_eq!(limiter.in_flight(), 0);
    assert!(limiter.try_acquire(2).is_ok());
}

#[test]
fn priorities_are_refused_at_their_share() {
    // Limit 10, default shares: sheddable up to 5, default up to 9, critical 10.
    let limiter = ConcurrencyLimiter::new(10).unwrap();
    let mut held = Vec::new();
    for i in 0..5 {
        held.push(
            limiter
                .try_acquire_as(1, Priority::Sheddable)
                .unwrap_or_else(|d| panic!("{i}: {d}")),
        );
    }
    let refused = limiter.try_acquire_as(1, Priority::Sheddable).unwrap_err();
    assert_eq!(
        (refused.reason(), refused.in_flight(), refused.remaining()),
        (Reason::Full, 5, 0)
    );
    for _ in 5..9 {
        held.push(limiter.try_acquire_as(1, Priority::Default).unwrap());
    }
    assert_eq!(
        limiter
            .try_acquire_as(1, Priority::Default)
            .unwrap_err()
            .reason(),
        Reason::Full
    );
    // The last slot is critical's.
    held.push(limiter.try_acquire_as(1, Priority::Critical).unwrap());
    assert_eq!(
        limiter
            .try_acquire_as(1, Priority::Critical)
            .unwrap_err()
            .reason(),
        Reason::Full
    );
    // A cost that would cross a share is refused even with slots free.
    drop(held.drain(..6));
    assert_eq!(limiter.in_flight(), 4);
    assert!(
        limiter.try_acquire_as(2, Priority::Sheddable).is_err(),
        "4 + 2 > 5"
    );
    assert!(limiter.try_acquire_as(1, Priority::Sheddable).is_ok());
}

/// Under a flood of sheddable work, critical and default work still gets
/// the slots reserved for it: sheddable holds at most half the limit.
#[test]
fn sheddable_flood_leaves_the_reserve_to_critical_work() {
    let limiter = ConcurrencyLimiter::new(20).unwrap();
    let flood: Vec<_> = std::iter::from_fn(|| limiter.try_acquire_as(1, Priority::Sheddable).ok())
        .take(100)
        .collect();
    assert_eq!(flood.len(), 10);
    let default: Vec<_> = std::iter::from_fn(|| limiter.try_acquire_as(1, Priority::Default).ok())
        .take(100)
        .collect();
    assert_eq!(default.len(), 8, "default may fill up to 18");
    let critical: Vec<_> =
        std::iter::from_fn(|| limiter.try_acquire_as(1, Priority::Critical).ok())
            .take(100)
            .collect();
    assert_eq!(critical.len(), 2);
}

#[test]
fn custom_shares_apply() {
    let limiter = ConcurrencyLimiter::builder(100)
        .shares(Shares::new(10, 50).unwrap())
        .build()
        .unwrap();
    let _shed = limiter.try_acquire_as(10, Priority::Sheddable).unwrap();
    assert!(limiter.try_acquire_as(1, Priority::Sheddable).is_err());
    let _default = limiter.try_acquire_as(40, Priority::Default).unwrap();
    assert!(limiter.try_acquire_as(1, Priority::Default).is_err());
    assert!(limiter.try_acquire_as(50, Priority::Critical).is_ok());
}

#[test]
fn bad_configuration_is_a_typed_error() {
    assert!(ConcurrencyLimiter::new(0).is_err());
    assert!(ConcurrencyLimiter::new(u64::MAX).is_err());
    assert!(
        KeyedConcurrencyLimiter::<u8>::builder(1)
            .max_keys(0)
            .build()
            .is_err()
    );
    let limiter = ConcurrencyLimiter::new(3).unwrap();
    assert_eq!(
        limiter.try_acquire(u64::MAX).unwrap_err().reason(),
        Reason::Cost
    );
    assert_eq!(limiter.try_acquire(4).unwrap_err().reason(), Reason::Cost);
    assert!(limiter.set_limit(0).is_err());
}

#[test]
fn lowering_the_limit_revokes_nothing_and_grants_nothing_until_under_it() {
    let limiter = ConcurrencyLimiter::builder(4)
        .shares(Shares::none())
        .build()
        .unwrap();
    let a = limiter.try_acquire(2).unwrap();
    let b = limiter.try_acquire(2).unwrap();
    limiter.set_limit(2).unwrap();
    assert_eq!(limiter.in_flight(), 4);
    assert!(limiter.try_acquire(1).is_err());
    drop(a);
    assert!(limiter.try_acquire(1).is_err(), "2 in flight, limit 2");
    drop(b);
    assert!(limiter.try_acquire(2).is_ok());
}

#[test]
fn keyed_idle_keys_are_dropped_and_memory_stays_bounded() {
    let limiter = KeyedConcurrencyLimiter::<u64>::new(1).unwrap();
    for key in 0..100_000u64 {
        let permit = limiter.try_acquire(&key, 1).unwrap();
        drop(permit);
    }
    // One shard per 512 keys of the cap (64 shards): each sweeps at 64.
    assert!(limiter.len() <= 64 * 64, "{} keys held", limiter.len());
    assert_eq!(limiter.sweep(), 0);
}

#[test]
fn keyed_busy_keys_are_never_evicted_and_new_keys_are_refused_when_full() {
    let limiter = KeyedConcurrencyLimiter::<u64>::builder(1)
        .max_keys(100)
        .build()
        .unwrap();
    let held: Vec<_> = (0..100u64)
        .map(|key| limiter.try_acquire(&key, 1).unwrap())
        .collect();
    let refused = limiter.try_acquire(&1_000, 1).unwrap_err();
    assert_eq!(refused.reason(), Reason::TooManyKeys);
    // Every busy key kept its slot: a second acquisition is refused.
    for key in 0..100u64 {
        assert_eq!(limiter.in_flight(&key), 1);
        assert_eq!(
            limiter.try_acquire(&key, 1).unwrap_err().reason(),
            Reason::Full
        );
    }
    drop(held);
    // Once they are idle, new keys fit again (after the hold-off of refused inserts).
    let admitted = (1_000..1_200u64)
        .filter(|key| limiter.try_acquire(key, 1).is_ok())
        .count();
    assert!(admitted >= 190, "{admitted} new keys admitted");
}

#[test]
fn a_refused_new_key_leaves_nothing_behind() {
    let limiter = KeyedConcurrencyLimiter::<String>::new(2).unwrap();
    assert_eq!(
        limiter.try_acquire("big", 3).unwrap_err().reason(),
        Reason::Cost
    );
    assert!(limiter.is_empty());
}

#[test]
fn keyed_keys_are_named_by_any_borrowed_form() {
    // `String` and `CompactString` keys by `&str`, `u64` keys by `&u64`.
    let strings = KeyedConcurrencyLimiter::<String>::new(1).unwrap();
    let _a = strings.try_acquire("alice", 1).unwrap();
    assert_eq!(
        strings.try_acquire("alice", 1).unwrap_err().reason(),
        Reason::Full
    );
    let compact = KeyedConcurrencyLimiter::<tollgate::CompactString>::new(1).unwrap();
    let _b = compact.try_acquire("alice", 1).unwrap();
    assert_eq!(
        compact.try_acquire("alice", 1).unwrap_err().reason(),
        Reason::Full
    );
    assert_eq!(compact.limit("alice"), 1);
    let numbers = KeyedConcurrencyLimiter::<u64>::new(1).unwrap();
    let _c = numbers.try_acquire(&7, 1).unwrap();
    assert_eq!(numbers.in_flight(&7), 1);
}

/// Regression: a cost within the limit but above its priority's share could
/// never be granted, yet `enqueue` queued it, and the queued head then
/// blocked every later request of its own and lower priorities, with no
/// slot in use (`try_acquire_as` answered `Queued` with 0 in flight).
#[test]
fn a_cost_above_the_priority_share_is_refused_at_once_never_queued() {
    let limiter = ConcurrencyLimiter::new(10).unwrap();
    // Default's share of 10 is 9: a cost of 10 can never fit it.
    let refused = limiter.enqueue(10, Priority::Default).err().unwrap();
    assert_eq!(refused.reason(), Reason::Cost);
    assert_eq!(
        (refused.limit(), refused.in_flight(), refused.remaining()),
        (10, 0, 9)
    );
    assert!(!limiter.has_waiters(), "nothing was queued");
    assert!(limiter.try_acquire_as(1, Priority::Default).is_ok());
    assert!(limiter.try_acquire_as(1, Priority::Sheddable).is_ok());
    // The same for sheddable work (share 5), and for `try_acquire`.
    let refused = limiter.enqueue(6, Priority::Sheddable).err().unwrap();
    assert_eq!(refused.reason(), Reason::Cost);
    let refused = limiter.try_acquire_as(6, Priority::Sheddable).unwrap_err();
    assert_eq!(refused.reason(), Reason::Cost);
    // Within the share it still queues behind what is in use.
    let _held = limiter.try_acquire_as(7, Priority::Critical).unwrap();
    let ticket = limiter.enqueue(5, Priority::Sheddable).unwrap();
    assert!(limiter.has_waiters());
    drop(ticket);
    assert!(!limiter.has_waiters());
    // Critical work may still take the whole limit.
    let keyed = KeyedConcurrencyLimiter::<u32>::new(10).unwrap();
    let refused = keyed.enqueue(&1, 10, Priority::Default).err().unwrap();
    assert_eq!(refused.reason(), Reason::Cost);
}
