//! `StripedLimiter`: the split, the fallback, its decisions against a model
//! of independent GCRA meters, and no over-admission under many threads.
//!
//! The guarantee under test (module docs of `tollgate::striped`): any
//! interval of length `t` admits at most `burst + rate·t` permits in all,
//! `rate = limit / period` exactly. The checker (`support::window`) gets it
//! as `Bound::Rate { burst, scale: limit, interval_ticks: period_ns }`: the
//! quota's exact rate, not one `Gcra`'s rounded one, since each stripe
//! rounds its own interval.

use crate::support;

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use proptest::prelude::*;
use support::model::{Expected, GcraModel, Model};
use support::recording::{RecordingClock, take_reading};
use support::window::{Bound, Guarantee};
use tollgate::{
    Algorithm, Clock, CostError, ManualClock, Nanos, Quota, QuotaError, StripedLimiter,
};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;

const fn send_sync_clone<T: Send + Sync + Clone>() {}

const _: () = {
    send_sync_clone::<StripedLimiter>();
    send_sync_clone::<StripedLimiter<ManualClock>>();
};

fn quota(limit: u64, period_ns: u64, burst: u64) -> Quota {
    Quota::new(limit, Duration::from_nanos(period_ns))
        .and_then(|q| q.with_burst(burst))
        .expect("valid quota")
}

fn striped(quota: Quota, stripes: usize, clock: &ManualClock) -> StripedLimiter<ManualClock> {
    StripedLimiter::with_clock(quota, stripes, clock.clone()).expect("valid striped limiter")
}

/// The whole quota's bound, at its exact rate.
fn bound(quota: Quota) -> Guarantee {
    Guarantee {
        algorithm: "striped gcra",
        bounds: vec![Bound::Rate {
            burst: quota.burst(),
            scale: quota.limit(),
            interval_ticks: quota.period_nanos(),
        }],
    }
}

// ---------------------------------------------------------------------------
// Unit tests on a manual clock
// ---------------------------------------------------------------------------

#[test]
fn the_split_is_exact_with_the_remainders_on_the_first_stripes() {
    let clock = ManualClock::new();
    let limiter = striped(Quota::per_second(10).unwrap(), 3, &clock);
    let parts: Vec<(u64, u64, Duration)> = (0..limiter.stripes())
        .map(|i| {
            let q = limiter.stripe(i).unwrap().quota();
            (q.limit(), q.burst(), q.period())
        })
        .collect();
    let second = Duration::from_secs(1);
    assert_eq!(parts, [(4, 4, second), (3, 3, second), (3, 3, second)]);
    assert_eq!(limiter.capacity(), 4);
    assert_eq!(limiter.quota(), &Quota::per_second(10).unwrap());

    // Limit and burst split apart: 7 per minute, burst 5, over 4 stripes.
    let limiter = striped(
        Quota::per_minute(7).unwrap().with_burst(5).unwrap(),
        4,
        &clock,
    );
    let parts: Vec<(u64, u64)> = (0..4)
        .map(|i| {
            let q = limiter.stripe(i).unwrap().quota();
            (q.limit(), q.burst())
        })
        .collect();
    assert_eq!(parts, [(2, 2), (2, 1), (2, 1), (1, 1)]);
    assert_eq!(limiter.capacity(), 2);
}

#[test]
fn one_thread_takes_the_whole_burst_through_the_fallback() {
    let clock = ManualClock::starting_at(Nanos::new(5 * SEC));
    let limiter = striped(Quota::per_second(10).unwrap(), 3, &clock);
    for taken in 1..=10 {
        let decision = limiter.check();
        assert!(decision.is_allowed(), "permit {taken}: {decision}");
        assert_eq!(decision.limit(), 10);
        // One thread alone: the sum of the stripes is exact.
        assert_eq!(decision.remaining(), 10 - taken, "permit {taken}");
    }
    let denied = limiter.check();
    assert!(denied.is_denied());
    assert_eq!(denied.remaining(), 0);
    // The 4-per-second stripe is the first back: 250 ms.
    assert_eq!(denied.retry_after(), Duration::from_millis(250));
    // Every stripe full again after its whole burst: 1 s.
    assert_eq!(denied.reset_after(), Duration::from_secs(1));

    clock.advance(Duration::from_nanos(250 * MS - 1));
    assert!(limiter.check().is_denied());
    clock.advance(Duration::from_nanos(1));
    assert!(limiter.check().is_allowed());
    assert!(limiter.check().is_denied());
}

#[test]
fn it_refills_at_the_quotas_rate() {
    let clock = ManualClock::new();
    let q = Quota::per_second(10).unwrap();
    let limiter = striped(q, 3, &clock);
    let mut admitted = Vec::new();
    // 10 s in steps of 1 ms, as many checks as admitted at each instant.
    for _ in 0..=10_000 {
        while limiter.check().is_allowed() {
            admitted.push((clock.now().as_u64(), 1));
        }
        clock.advance(Duration::from_millis(1));
    }
    // The burst at 0, then 10 per second for 10 s.
    assert_eq!(admitted.len(), 10 + 100);
    let report = bound(q).check(&admitted).expect("burst + rate·t");
    assert!(report.saturated(), "{report:?}");
    // Each whole second after the first burst admits exactly the limit.
    for s in 1..10 {
        let in_second = admitted
            .iter()
            .filter(|&&(t, _)| t > s * SEC && t <= (s + 1) * SEC)
            .count();
        assert_eq!(in_second, 10, "second {s}");
    }
}

#[test]
fn a_cost_above_the_largest_stripe_is_an_error() {
    let clock = ManualClock::new();
    let limiter = striped(Quota::per_second(10).unwrap(), 3, &clock);
    assert_eq!(limiter.check_n(5).unwrap_err(), CostError::new(5, 4));
    assert_eq!(limiter.peek_n(5).unwrap_err(), CostError::new(5, 4));
    assert_eq!(
        limiter.check_n_from(1, u64::MAX).unwrap_err(),
        CostError::new(u64::MAX, 4)
    );
    // Nothing was taken; 4 fits (in stripe 0 only).
    assert_eq!(limiter.peek().remaining(), 9);
    let decision = limiter.check_n_from(1, 4).unwrap();
    assert!(decision.is_allowed());
    assert_eq!(decision.remaining(), 6);
    assert!(limiter.check_n(4).unwrap().is_denied());
}

#[test]
fn a_cost_that_fits_no_single_stripe_is_denied_with_the_largest_that_does() {
    // 2 per second, burst 4, over 2 stripes: 1/s burst 2 each.
    let clock = ManualClock::new();
    let limiter = striped(quota(2, SEC, 4), 2, &clock);
    assert!(limiter.check_n_from(0, 1).unwrap().is_allowed());
    let after = limiter.check_n_from(1, 1).unwrap();
    assert_eq!(after.remaining(), 2);
    // 1 + 1 left, in two stripes: 2 at once fits neither.
    let denied = limiter.check_n(2).unwrap();
    assert!(denied.is_denied());
    assert_eq!(denied.remaining(), 1);
    assert_eq!(denied.retry_after(), Duration::from_secs(1));
    assert!(limiter.check().is_allowed());
}

#[test]
fn the_number_of_stripes_is_checked() {
    let clock = ManualClock::new();
    let q = Quota::per_second(10).unwrap().with_burst(3).unwrap();
    assert!(matches!(
        StripedLimiter::with_clock(q, 0, clock.clone()),
        Err(QuotaError::InvalidParameter { .. })
    ));
    // At most min(limit, burst) = 3: every stripe holds a permit.
    assert!(matches!(
        StripedLimiter::with_clock(q, 4, clock.clone()),
        Err(QuotaError::TooLarge { max: 3, .. })
    ));
    assert!(matches!(
        StripedLimiter::with_clock(q, usize::MAX, clock.clone()),
        Err(QuotaError::TooLarge { max: 3, .. })
    ));
    let limiter = StripedLimiter::with_clock(q, 3, clock.clone()).unwrap();
    assert_eq!((limiter.stripes(), limiter.capacity()), (3, 1));
    // The limit bounds it too.
    let q = Quota::per_second(2).unwrap().with_burst(100).unwrap();
    assert!(matches!(
        StripedLimiter::with_clock(q, 3, clock.clone()),
        Err(QuotaError::TooLarge { max: 2, .. })
    ));
    // A stripe's own quota is checked by `Gcra::new`: 17 per ns is too fast.
    let q = quota(17, 1, 17);
    assert!(matches!(
        StripedLimiter::with_clock(q, 1, clock.clone()),
        Err(QuotaError::TooFast { .. })
    ));
    assert!(StripedLimiter::new(Quota::per_second(4).unwrap(), 4).is_ok());
    // And at most `MAX_STRIPES`, however large the quota.
    let q = Quota::per_second(1 << 20).unwrap();
    assert!(matches!(
        StripedLimiter::with_clock(q, tollgate::striped::MAX_STRIPES + 1, clock.clone()),
        Err(QuotaError::TooLarge { max: 1_024, .. })
    ));
    let limiter = StripedLimiter::with_clock(q, 1_024, clock.clone()).unwrap();
    assert_eq!((limiter.stripes(), limiter.capacity()), (1_024, 1_024));
    assert!(limiter.home_stripe() < 1_024);
}

#[test]
fn peeks_and_denials_change_nothing() {
    let clock = ManualClock::new();
    let q = quota(6, SEC, 6);
    let touched = striped(q, 3, &clock);
    let fresh = striped(q, 3, &clock);
    let script = [(0, 2), (0, 2), (0, 1), (100 * MS, 1), (0, 2), (400 * MS, 2)];
    for (i, &(step, cost)) in script.iter().enumerate() {
        clock.advance(Duration::from_nanos(step));
        // Peeks, costs of 0, and requests that are denied, before each step.
        for _ in 0..3 {
            let _ = touched.peek();
            let _ = touched.peek_n(2).unwrap();
            let _ = touched.check_n(0).unwrap();
            for first in 0..3 {
                let probe = touched.check_n_from(first, 2).unwrap();
                if probe.is_allowed() {
                    // Not a denial: undo by taking the same from `fresh`.
                    let twin = fresh.check_n_from(first, 2).unwrap();
                    assert_eq!(probe, twin, "step {i}");
                }
            }
        }
        let a = touched.check_n_from(i, cost).unwrap();
        let b = fresh.check_n_from(i, cost).unwrap();
        assert_eq!(a, b, "step {i}");
        assert_eq!(touched.peek(), fresh.peek(), "step {i}");
    }
}

#[test]
fn admit_takes_what_check_takes() {
    let clock = ManualClock::new();
    let q = quota(10, SEC, 7);
    let checked = striped(q, 3, &clock);
    let admitted = striped(q, 3, &clock);
    let costs = [1, 3, 1, 2, 3, 1, 1, 2, 0, 1];
    for (i, &cost) in costs.iter().cycle().take(200).enumerate() {
        clock.advance(Duration::from_millis(if i % 3 == 0 { 70 } else { 0 }));
        let decision = checked.check_n(cost).unwrap();
        assert_eq!(
            admitted.admit_n(cost).unwrap(),
            decision.is_allowed(),
            "{i}"
        );
        assert_eq!(admitted.peek(), checked.peek(), "{i}");
    }
    clock.advance(Duration::from_secs(1));
    assert!(admitted.admit());
    assert_eq!(admitted.admit_n(4), Err(CostError::new(4, 3)));
}

#[test]
fn clones_share_one_state() {
    let clock = ManualClock::new();
    let a = striped(Quota::per_second(4).unwrap(), 2, &clock);
    let b = a.clone();
    assert!(a.check_n(2).unwrap().is_allowed());
    assert!(b.check_n(2).unwrap().is_allowed());
    assert!(a.peek().is_denied());
    assert!(b.check().is_denied());
    assert!(format!("{a:?}").contains("stripes: 2"));
}

// ---------------------------------------------------------------------------
// Property: one thread against n independent GCRA meters tried in order
// ---------------------------------------------------------------------------

/// The model: one `GcraModel` per stripe (with that stripe's quota), tried
/// from `first` in order; an admission reports the sum of what each has
/// left and the latest reset, a denial the earliest retry, the latest
/// reset and the largest stripe's `remaining`.
struct StripedModel {
    burst: u64,
    stripes: Vec<GcraModel>,
}

impl StripedModel {
    fn new(limiter: &StripedLimiter<ManualClock>) -> StripedModel {
        StripedModel {
            burst: limiter.quota().burst(),
            stripes: (0..limiter.stripes())
                .map(|i| GcraModel::new(*limiter.stripe(i).unwrap().quota()))
                .collect(),
        }
    }

    fn decide(&self, now: u64, first: usize, cost: u64, record: bool) -> Expected {
        let n = self.stripes.len();
        let mut denial = Expected {
            allowed: false,
            limit: self.burst,
            remaining: 0,
            retry_after_ns: u64::MAX,
            reset_after_ns: 0,
        };
        for k in 0..n {
            let i = (first + k) % n;
            let answer = if record {
                self.stripes[i].check(now, cost)
            } else {
                self.stripes[i].peek(now, cost)
            };
            if answer.allowed {
                let mut admitted = Expected {
                    limit: self.burst,
                    ..answer
                };
                for (j, other) in self.stripes.iter().enumerate() {
                    if j != i {
                        let left = other.peek(now, 0);
                        admitted.remaining += left.remaining;
                        admitted.reset_after_ns = admitted.reset_after_ns.max(left.reset_after_ns);
                    }
                }
                return admitted;
            }
            denial.remaining = denial.remaining.max(answer.remaining);
            denial.retry_after_ns = denial.retry_after_ns.min(answer.retry_after_ns);
            denial.reset_after_ns = denial.reset_after_ns.max(answer.reset_after_ns);
        }
        denial
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// `check_n_from(first, cost)`.
    Check { first: usize, cost: u64 },
    /// `peek_n(cost)`, from the thread's own stripe.
    Peek { cost: u64 },
    /// `check()`, from the thread's own stripe.
    CheckOwn,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..8usize, 0..=6u64).prop_map(|(first, cost)| Op::Check { first, cost }),
        1 => (0..=6u64).prop_map(|cost| Op::Peek { cost }),
        1 => Just(Op::CheckOwn),
    ]
}

fn striped_quota() -> impl Strategy<Value = (Quota, usize)> {
    (
        1..=24u64,
        prop::sample::select(vec![7u64, 100, 1_000, 999_983, SEC]),
        1..=24u64,
        1..=4usize,
    )
        .prop_map(|(limit, period, burst, n)| {
            let n = n.min(limit.min(burst) as usize);
            (quota(limit, period, burst), n)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn one_thread_matches_independent_meters_tried_in_order(
        (q, n) in striped_quota(),
        start in 0..=u64::from(u32::MAX),
        steps in prop::collection::vec((0..=2_000u64, op()), 1..120),
    ) {
        let clock = ManualClock::starting_at(Nanos::new(start));
        let limiter = striped(q, n, &clock);
        let model = StripedModel::new(&limiter);
        let capacity = limiter.capacity();
        let mut admitted = Vec::new();
        // Steps of up to twice the period, in thousandths of it.
        let period = q.period_nanos();
        for (i, (step, op)) in steps.into_iter().enumerate() {
            clock.advance(Duration::from_nanos(period / 1_000 * step + step % 2));
            let now = clock.now().as_u64();
            match op {
                Op::Check { first, cost } => match limiter.check_n_from(first, cost) {
                    Ok(decision) => {
                        prop_assert!(cost <= capacity);
                        let expected = model.decide(now, first % n, cost, true);
                        prop_assert_eq!(Expected::from(decision), expected, "step {} at {}", i, now);
                        if decision.is_allowed() {
                            admitted.push((now, cost));
                        } else {
                            prop_assert!(decision.remaining() < cost);
                        }
                    }
                    Err(error) => {
                        prop_assert!(cost > capacity);
                        prop_assert_eq!(error, CostError::new(cost, capacity));
                    }
                },
                Op::Peek { cost } => match limiter.peek_n(cost) {
                    Ok(decision) => {
                        let expected = model.decide(now, limiter.home_stripe(), cost, false);
                        prop_assert_eq!(Expected::from(decision), expected, "step {} at {}", i, now);
                    }
                    Err(error) => prop_assert_eq!(error, CostError::new(cost, capacity)),
                },
                Op::CheckOwn => {
                    let decision = limiter.check();
                    let expected = model.decide(now, limiter.home_stripe(), 1, true);
                    prop_assert_eq!(Expected::from(decision), expected, "step {} at {}", i, now);
                    if decision.is_allowed() {
                        admitted.push((now, 1));
                    }
                }
            }
        }
        if let Err(violation) = bound(q).check(&admitted) {
            return Err(TestCaseError::fail(violation.to_string()));
        }
    }
}

// ---------------------------------------------------------------------------
// Many threads
// ---------------------------------------------------------------------------

#[test]
fn frozen_clock_threads_admit_exactly_the_burst() {
    const BURST: u64 = 1_000;
    const COSTS: [u64; 5] = [1, 2, 3, 5, 1];
    for (threads, stripes) in [(2, 2), (3, 2), (4, 4), (4, 3)] {
        for mixed in [false, true] {
            let clock = ManualClock::starting_at(Nanos::new(3_600 * SEC + 123));
            let limiter = striped(quota(BURST, SEC, BURST), stripes, &clock);
            let barrier = Barrier::new(threads);
            let admitted: u64 = thread::scope(|scope| {
                let workers: Vec<_> = (0..threads)
                    .map(|id| {
                        let limiter = limiter.clone();
                        let barrier = &barrier;
                        scope.spawn(move || {
                            barrier.wait();
                            let mut taken = 0;
                            let mixed_attempts = if mixed { 2 * BURST } else { 0 };
                            // Then cost 1 until denied: every stripe is empty.
                            for i in 0.. {
                                let cost = if i < mixed_attempts {
                                    COSTS[(id + i as usize) % COSTS.len()]
                                } else {
                                    1
                                };
                                let decision = limiter.check_n(cost).expect("within capacity");
                                assert_eq!(decision.limit(), BURST);
                                if decision.is_allowed() {
                                    taken += cost;
                                    assert!(decision.remaining() < BURST);
                                } else {
                                    assert!(decision.remaining() < cost);
                                    assert!(decision.retry_after() > Duration::ZERO);
                                    if i >= mixed_attempts {
                                        break;
                                    }
                                }
                            }
                            taken
                        })
                    })
                    .collect();
                workers.into_iter().map(|w| w.join().expect("worker")).sum()
            });
            assert_eq!(
                admitted, BURST,
                "{threads} threads on {stripes} stripes, mixed {mixed}"
            );
            let after = limiter.peek();
            assert!(after.is_denied() && after.remaining() == 0, "{after}");
        }
    }
}

/// Workers hammer one striped limiter while the main thread moves the clock
/// in small steps; every admission is recorded at the reading its decision
/// used and checked against `burst + rate·t` over every interval. Every
/// stripe is a GCRA, whose bound holds at its readings in any order (see
/// `tests/concurrency.rs`), so no gate is needed.
fn moving_hammer(q: Quota, stripes: usize, workers: usize, costs: &'static [u64], max_step: u64) {
    let clock = ManualClock::starting_at(Nanos::new(7 * SEC));
    let limiter = StripedLimiter::with_clock(
        q,
        stripes,
        RecordingClock {
            clock: clock.clone(),
            // A preemption between reading and deciding, now and then.
            yield_every: 3,
        },
    )
    .expect("valid striped limiter");
    let done = AtomicBool::new(false);
    let barrier = Barrier::new(workers + 1);
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15 ^ (workers as u64) << 8 ^ stripes as u64;
    let admitted: Vec<(u64, u64)> = thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|id| {
                let limiter = limiter.clone();
                let (done, barrier) = (&done, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    let mut admitted = Vec::new();
                    let mut i = id;
                    // Relaxed: a stop flag; the join publishes the results.
                    while !done.load(Ordering::Relaxed) {
                        let cost = costs[i % costs.len()];
                        i += 1;
                        let decision = if cost == 1 {
                            limiter.check()
                        } else {
                            limiter.check_n(cost).expect("within capacity")
                        };
                        let now = take_reading();
                        if decision.is_allowed() {
                            admitted.push((now, cost));
                        }
                    }
                    admitted
                })
            })
            .collect();
        barrier.wait();
        for _ in 0..20_000 {
            // xorshift: steps of 1 to `max_step` ns.
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            clock.advance(Duration::from_nanos(1 + seed % max_step));
            for _ in 0..4 {
                thread::yield_now();
            }
        }
        done.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("worker"))
            .collect()
    });
    let report = bound(q).check(&admitted).unwrap_or_else(|violation| {
        panic!("{q} over {stripes} stripes, {workers} workers: {violation}")
    });
    println!(
        "{q} over {stripes} stripes, {workers} workers: {} admissions, {} permits; \
         fullest {:?}",
        admitted.len(),
        report.permits,
        report.fullest
    );
    // The load came near the burst, so that the check means something (not
    // exactly: the permits left may be spread over stripes below the cost
    // of the next request, and a step may refill the bucket between checks).
    let (_, most, allowed) = report.fullest[0];
    assert!(most * 4 >= allowed * 3, "{report:?}");
}

#[test]
fn moving_clock_threads_never_over_admit() {
    // 10 per µs (100 ns apart), burst 50, steps of up to 100 ns.
    moving_hammer(quota(10, 1_000, 50), 2, 2, &[1, 1, 3], 100);
    // 3 per 10 µs (fractional interval), burst 12, 3 stripes, 4 workers.
    moving_hammer(quota(3, 10_000, 12), 3, 4, &[1, 2, 1, 4], 3_000);
    // 1,000 per ms, burst 1,000, 4 stripes, 3 workers, larger costs.
    moving_hammer(quota(1_000, MS, 1_000), 4, 3, &[1, 10, 100, 1], 2_000);
}

#[test]
fn gcra_parameters_of_each_stripe_are_its_share() {
    let limiter = StripedLimiter::new(quota(999, 60 * SEC, 10), 3).unwrap();
    let total: u64 = (0..3)
        .map(|i| limiter.stripe(i).unwrap().quota().limit())
        .sum();
    assert_eq!(total, 999);
    // Each stripe's effective rate is at most its share (rounded down).
    for i in 0..3 {
        let g = limiter.stripe(i).unwrap();
        let q = g.quota();
        assert!(
            u128::from(g.interval_ticks()) * u128::from(q.limit())
                >= u128::from(q.period_nanos()) * u128::from(g.scale())
        );
        assert_eq!(g.capacity(), q.burst());
    }
}
