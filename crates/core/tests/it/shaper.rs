//! The shaper on a manual clock: its pure transition against GCRA, FIFO
//! schedules against a reference model under reservations, refusals, cancels
//! and time, settle for more and for less, and blocking waiters.
//!
//! The reference: every reservation still alive (not cancelled while
//! pending, not refused), in order, is released at the first nanosecond at or
//! after both its arrival and the release before it at which the GCRA model
//! (`support::model`, a leaky bucket meter) admits it. A cancel reschedules
//! the reservations after it as if it had never been made, but none before
//! the cancel itself: to the reference, their arrival becomes the later of
//! the two.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use proptest::prelude::*;
use support::algorithms::{gcra, quota};
use support::model::{GcraModel, Model};
use support::window::Guaranteed;
use tollgate::shaper::slot;
use tollgate::{Gcra, ManualClock, MonotonicClock, Nanos, Refusal, Reservation, Shaper};

fn shaper(
    limit: u64,
    period_ns: u64,
    burst: u64,
    max_delay_ns: u64,
    clock: &ManualClock,
) -> Shaper<ManualClock> {
    Shaper::builder(quota(limit, period_ns).with_burst(burst).unwrap())
        .max_delay(Duration::from_nanos(max_delay_ns))
        .max_waiters(1 << 20)
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// The releases the reference gives `live` reservations `(arrival, cost)`.
fn reference(gcra: &Gcra, live: &[(u64, u64)]) -> Vec<u64> {
    let model = GcraModel::new(*gcra.quota());
    let mut last = 0;
    live.iter()
        .map(|&(arrival, cost)| {
            let from = arrival.max(last);
            let seen = model.peek(from, cost);
            let release = if seen.allowed {
                from
            } else {
                from + seen.retry_after_ns
            };
            assert!(model.check(release, cost).allowed);
            last = release;
            release
        })
        .collect()
}

use tollgate::Algorithm;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// `slot` is the first instant at which `Gcra::transition` admits, and
    /// leaves the TAT the transition writes.
    #[test]
    fn slot_is_the_first_instant_the_transition_admits(
        limit in 1u64..40,
        period in 3u64..5_000,
        burst in 1u64..8,
        tat in 0u64..200_000,
        arrival in 0u64..20_000,
        cost in 0u64..8,
    ) {
        let cost = cost.min(burst);
        let gcra = gcra(limit, period, burst);
        let (release, after) = slot(&gcra, tat, Nanos::new(arrival), cost).unwrap();
        prop_assert!(release.as_u64() >= arrival);
        let (decision, written) = gcra.transition(tat, release, cost);
        prop_assert!(decision.is_allowed());
        prop_assert_eq!(written.unwrap_or(tat.max(release.as_u64() * gcra.scale())), after.max(tat));
        if cost > 0 {
            prop_assert_eq!(written, Some(after));
        }
        if release.as_u64() > arrival {
            let (earlier, _) = gcra.transition(tat, Nanos::new(release.as_u64() - 1), cost);
            prop_assert!(earlier.is_denied());
        }
    }

    /// Random reservations, cancels of pending ones, refusals and time: every
    /// live reservation's instant equals the reference's, refusals are
    /// exactly those the reference would wait too long for, and the instants
    /// obey the GCRA bound.
    #[test]
    fn schedules_match_the_reference(
        limit in 1u64..6,
        period in 10u64..2_000,
        burst in 1u64..4,
        max_delay in 0u64..20_000,
        ops in proptest::collection::vec((0u8..10, 0u64..4, 0u64..600, any::<prop::sample::Index>()), 1..60),
    ) {
        let clock = ManualClock::new();
        let shaper = shaper(limit, period, burst, max_delay, &clock);
        let gcra = gcra(limit, period, burst);
        // Every reservation made, alive or not: (arrival, cost, handle).
        let mut made: Vec<(u64, u64, Option<Reservation<ManualClock>>)> = Vec::new();
        for (kind, cost, step, pick) in ops {
            let cost = cost.min(burst);
            match kind {
                0..=5 => {
                    let now = clock.now_u64();
                    let mut live = alive(&made);
                    live.push((now, cost));
                    let expected = *reference(&gcra, &live).last().unwrap();
                    match shaper.reserve(cost) {
                        Ok(reservation) => {
                            prop_assert!(expected - now <= max_delay);
                            prop_assert_eq!(reservation.ready_at().as_u64(), expected);
                            made.push((now, cost, Some(reservation)));
                        }
                        Err(Refusal::TooLong { wait, .. }) => {
                            prop_assert!(expected - now > max_delay);
                            prop_assert_eq!(wait, Duration::from_nanos(expected - now));
                        }
                        Err(other) => prop_assert!(false, "unexpected refusal {other}"),
                    }
                }
                6..=7 => {
                    // Cancel a reservation that is still pending.
                    let now = clock.now_u64();
                    let pending: Vec<usize> = made
                        .iter()
                        .enumerate()
                        .filter(|(_, (_, _, handle))| {
                            handle.as_ref().is_some_and(|r| r.ready_at().as_u64() > now)
                        })
                        .map(|(at, _)| at)
                        .collect();
                    if !pending.is_empty() {
                        let at = pending[pick.index(pending.len())];
                        let reservation = made[at].2.take().unwrap();
                        prop_assert_eq!(reservation.cancel(), made[at].1);
                        // Those after it are rescheduled, but none before now:
                        // none of them has run.
                        for later in &mut made[at + 1..] {
                            later.0 = later.0.max(now);
                        }
                    }
                }
                _ => clock.advance(Duration::from_nanos(step)),
            }
            let live = alive(&made);
            let expected = reference(&gcra, &live);
            let actual: Vec<u64> = made
                .iter()
                .filter_map(|(_, _, handle)| handle.as_ref())
                .map(|r| r.ready_at().as_u64())
                .collect();
            prop_assert_eq!(&actual, &expected);
        }
        let admissions: Vec<(u64, u64)> = made
            .iter()
            .filter_map(|(_, cost, handle)| handle.as_ref().map(|r| (r.ready_at().as_u64(), *cost)))
            .collect();
        prop_assert!(gcra.guarantee().check(&admissions).is_ok());
        // Keep every reservation used: dropping them would give permits back
        // in an order the test does not model.
        for (_, _, handle) in made {
            if let Some(reservation) = handle {
                reservation.consume();
            }
        }
    }
}

/// The reservations not cancelled.
fn alive(made: &[(u64, u64, Option<Reservation<ManualClock>>)]) -> Vec<(u64, u64)> {
    made.iter()
        .filter(|(_, _, handle)| handle.is_some())
        .map(|&(arrival, cost, _)| (arrival, cost))
        .collect()
}

trait NowU64 {
    fn now_u64(&self) -> u64;
}

impl NowU64 for ManualClock {
    fn now_u64(&self) -> u64 {
        use tollgate::Clock;
        self.now().as_u64()
    }
}

#[test]
fn burst_first_then_one_per_interval_in_fifo_order() {
    let clock = ManualClock::new();
    // 10 per second (T = 100 ms), burst 3.
    let shaper = shaper(10, 1_000_000_000, 3, 10_000_000_000, &clock);
    let instants: Vec<u64> = (0..6)
        .map(|_| {
            let reservation = shaper.reserve(1).unwrap();
            let at = reservation.ready_at().as_u64();
            reservation.consume();
            at
        })
        .collect();
    let ms = 1_000_000;
    assert_eq!(instants, [0, 0, 0, 100 * ms, 200 * ms, 300 * ms]);
    assert_eq!(shaper.waiters(), 3);
    clock.advance(Duration::from_millis(200));
    // Reading the schedule releases what is due.
    let next = shaper.reserve(1).unwrap();
    assert_eq!(next.ready_at().as_u64(), 400 * ms);
    assert_eq!(shaper.waiters(), 2);
    next.consume();
}

#[test]
fn refusals_are_immediate_and_take_nothing() {
    let clock = ManualClock::new();
    let shaper = Shaper::builder(quota(1, 1_000).with_burst(1).unwrap())
        .max_delay(Duration::from_nanos(2_000))
        .max_waiters(2)
        .clock(clock.clone())
        .build()
        .unwrap();
    let a = shaper.reserve(1).unwrap(); // at 0, not waiting
    let b = shaper.reserve(1).unwrap(); // 1_000
    let c = shaper.reserve(1).unwrap(); // 2_000
    assert_eq!(
        shaper.reserve(1).unwrap_err(),
        Refusal::TooLong {
            wait: Duration::from_nanos(3_000),
            max_delay: Duration::from_nanos(2_000)
        }
    );
    assert!(
        matches!(shaper.reserve(2).unwrap_err(), Refusal::Cost(error) if error.capacity() == 1)
    );
    clock.advance(Duration::from_nanos(1_500));
    // b released; c pending; one more fits in time and in the queue.
    let d = shaper.reserve(1).unwrap();
    assert_eq!(d.ready_at(), Nanos::new(3_000));
    assert_eq!(shaper.waiters(), 2);
    let shaper_full = shaper.reserve(1).unwrap_err();
    // 4_000 is within 2_000 + 1_500 of now? No: 4_000 − 1_500 = 2_500 > max.
    assert!(matches!(shaper_full, Refusal::TooLong { .. }));
    // The refused ones changed nothing: cancelling c moves d into its slot.
    assert_eq!(c.cancel(), 1);
    assert_eq!(d.ready_at(), Nanos::new(2_000));
    for r in [a, b, d] {
        r.consume();
    }
}

#[test]
fn the_waiter_cap_refuses_only_callers_who_would_wait() {
    let clock = ManualClock::new();
    let shaper = Shaper::builder(quota(1, 1_000).with_burst(2).unwrap())
        .max_delay(Duration::from_secs(1))
        .max_waiters(1)
        .clock(clock.clone())
        .build()
        .unwrap();
    let immediate = [shaper.reserve(1).unwrap(), shaper.reserve(1).unwrap()];
    let waiting = shaper.reserve(1).unwrap();
    assert_eq!(
        shaper.reserve(1).unwrap_err(),
        Refusal::Full { max_waiters: 1 }
    );
    assert_eq!(waiting.ready_at(), Nanos::new(1_000));
    waiting.consume();
    for r in immediate {
        r.consume();
    }
}

#[test]
fn cancelling_at_each_position_reschedules_exactly() {
    for victim in 0..5 {
        let clock = ManualClock::new();
        let shaper = shaper(1, 1_000, 2, u64::MAX, &clock);
        let gcra = gcra(1, 1_000, 2);
        let mut made = Vec::new();
        for i in 0..5u64 {
            clock.set(Nanos::new(i * 100));
            made.push((i * 100, 1 + i % 2, Some(shaper.reserve(1 + i % 2).unwrap())));
        }
        let cost = made[victim].1;
        let given_back = made[victim].2.take().unwrap().cancel();
        for later in &mut made[victim + 1..] {
            later.0 = later.0.max(400);
        }
        // The first two were due at once (burst 2): released, not pending, so
        // they come back only as far as later reservations allow.
        if made_pending(victim) {
            assert_eq!(given_back, cost);
            let live: Vec<(u64, u64)> = made
                .iter()
                .filter(|m| m.2.is_some())
                .map(|m| (m.0, m.1))
                .collect();
            let actual: Vec<u64> = made
                .iter()
                .filter_map(|m| m.2.as_ref().map(|r| r.ready_at().as_u64()))
                .collect();
            assert_eq!(actual, reference(&gcra, &live), "victim {victim}");
        }
        for (_, _, handle) in made {
            if let Some(r) = handle {
                r.consume();
            }
        }
    }
}

fn made_pending(victim: usize) -> bool {
    // Costs 1, 2, 1, 2, 1 at 0, 100, ... 400 with T = 1000, burst 2: the
    // first is due at once, the rest wait past 400.
    victim > 0
}

#[test]
fn dropping_a_reservation_gives_it_back() {
    let clock = ManualClock::new();
    let shaper = shaper(1, 1_000, 1, u64::MAX, &clock);
    let first = shaper.reserve(1).unwrap();
    let second = shaper.reserve(1).unwrap();
    {
        let _dropped = shaper.reserve(1).unwrap();
    }
    let third = shaper.reserve(1).unwrap();
    assert_eq!(third.ready_at(), Nanos::new(2_000));
    drop(second);
    assert_eq!(third.ready_at(), Nanos::new(1_000));
    first.consume();
    third.consume();
}

#[test]
fn settling_for_less_after_the_release_refunds_exactly_when_nothing_followed() {
    let clock = ManualClock::new();
    // 1 per µs, burst 4.
    let shaper = shaper(1, 1_000, 4, u64::MAX, &clock);
    let mut big = shaper.reserve(4).unwrap();
    assert_eq!(big.wait(), Nanos::ZERO);
    clock.advance(Duration::from_nanos(500));
    assert_eq!(big.settle(1), 3);
    // As if only 1 had been taken at 0: at 500 there is room for 3.
    let next = shaper.reserve(3).unwrap();
    assert_eq!(next.ready_at(), Nanos::new(500));
    next.consume();
    let after = shaper.reserve(1).unwrap();
    // The bucket holds 1 (from 0, half drained) + 3 → full until 1_000.
    assert_eq!(after.ready_at(), Nanos::new(1_000));
    after.consume();
}

#[test]
fn settling_for_less_never_refunds_more_than_exact_when_others_followed() {
    let clock = ManualClock::new();
    let shaper = shaper(1, 1_000, 1, u64::MAX, &clock);
    let mut first = shaper.reserve(1).unwrap();
    first.wait();
    let second = shaper.reserve(1).unwrap(); // pending, at 1_000
    clock.advance(Duration::from_nanos(100));
    // The exact answer: with the first free, the second would be at 100 and
    // the next at 1_100. The bound lets the second stay where it is.
    let refunded = first.settle(0);
    assert!(refunded <= 1);
    let second_at = second.ready_at().as_u64();
    assert!(second_at >= 100);
    let third = shaper.reserve(1).unwrap();
    assert!(third.ready_at().as_u64() >= second_at + 1_000);
    second.consume();
    third.consume();
}

#[test]
fn settling_for_more_makes_the_next_callers_wait_not_the_queued_ones() {
    let clock = ManualClock::new();
    let shaper = shaper(1, 1_000, 2, u64::MAX, &clock);
    let mut work = shaper.reserve(1).unwrap();
    work.wait();
    let queued = shaper.reserve(2).unwrap(); // room for 1 more now; waits until 1_000
    assert_eq!(queued.ready_at(), Nanos::new(1_000));
    assert_eq!(work.settle(3), 0);
    // The queued one keeps its slot; the debt of 2 falls on the next caller.
    assert_eq!(queued.ready_at(), Nanos::new(1_000));
    let next = shaper.reserve(1).unwrap();
    assert_eq!(next.ready_at(), Nanos::new(4_000));
    queued.consume();
    next.consume();
}

#[test]
fn settling_for_more_with_nobody_waiting_charges_the_state() {
    let clock = ManualClock::new();
    let shaper = shaper(1, 1_000, 2, u64::MAX, &clock);
    let mut work = shaper.reserve(1).unwrap();
    work.wait();
    assert_eq!(work.settle(2), 0);
    // 2 taken at 0: the next waits a whole interval.
    let next = shaper.reserve(1).unwrap();
    assert_eq!(next.ready_at(), Nanos::new(1_000));
    next.consume();
}

#[test]
fn blocking_waiters_are_released_in_fifo_order_on_a_manual_clock() {
    let clock = ManualClock::new();
    let shaper = shaper(1, 1_000, 1, u64::MAX, &clock);
    shaper.reserve(1).unwrap().consume(); // the burst
    let released = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..4u64 {
        // Reserve in order on this thread, wait on another.
        let mut reservation = shaper.reserve(1).unwrap();
        assert_eq!(reservation.ready_at(), Nanos::new((i + 1) * 1_000));
        let released = Arc::clone(&released);
        let clock = clock.clone();
        threads.push(thread::spawn(move || {
            let at = reservation.wait();
            use tollgate::Clock;
            released
                .lock()
                .unwrap()
                .push((i, at.as_u64(), clock.now().as_u64()));
        }));
    }
    for step in 1..=4u64 {
        clock.set(Nanos::new(step * 1_000));
        // Wait until the thread due at this step has run.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while released.lock().unwrap().len() < step as usize {
            assert!(
                std::time::Instant::now() < deadline,
                "waiter {step} never woke"
            );
            thread::sleep(Duration::from_millis(1));
        }
    }
    for thread in threads {
        thread.join().unwrap();
    }
    let released = released.lock().unwrap().clone();
    for (order, &(i, at, woke)) in released.iter().enumerate() {
        assert_eq!(i, order as u64);
        assert_eq!(at, (i + 1) * 1_000);
        assert!(woke >= at, "released early");
    }
}

#[test]
fn threads_waiting_at_once_stay_within_the_bound_on_the_real_clock() {
    // 2,000 per second, burst 5: 4 threads × 25 waits ≈ 50 ms.
    let quota = quota(2_000, 1_000_000_000).with_burst(5).unwrap();
    let shaper = Shaper::builder(quota)
        .max_delay(Duration::from_secs(5))
        .clock(MonotonicClock::new())
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let shaper = shaper.clone();
            let _stop = Arc::clone(&stop);
            thread::spawn(move || {
                use tollgate::Clock;
                (0..25)
                    .map(|_| {
                        let at = shaper.acquire(1).unwrap();
                        let woke = shaper.clock().now();
                        assert!(woke >= at, "released before its instant");
                        (at.as_u64(), 1)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let admissions: Vec<(u64, u64)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    stop.store(true, Ordering::Relaxed);
    assert_eq!(admissions.len(), 100);
    let report = Gcra::new(quota).unwrap().guarantee().check(&admissions);
    assert!(report.is_ok(), "{report:?}");
}

#[test]
fn peek_tells_the_wait_without_taking_anything() {
    let clock = ManualClock::new();
    let shaper = shaper(1, 1_000, 2, u64::MAX, &clock);
    let now = shaper.peek_n(2).unwrap();
    assert!(now.is_allowed());
    assert_eq!(now.remaining(), 0);
    shaper.reserve(2).unwrap().consume();
    let queued = shaper.reserve(1).unwrap();
    let next = shaper.peek_n(1).unwrap();
    assert!(next.is_denied());
    assert_eq!(next.retry_after(), Duration::from_nanos(2_000));
    assert!(shaper.peek_n(3).is_err());
    // Peeking took nothing: the next reservation is where peek said.
    let after = shaper.reserve(1).unwrap();
    assert_eq!(after.ready_at(), Nanos::new(2_000));
    queued.consume();
    after.consume();
}
