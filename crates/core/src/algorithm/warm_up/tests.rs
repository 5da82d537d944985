//! The model of the docs, Guava's published tables, and the corner cases.

use super::*;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;

fn guava() -> WarmUp {
    WarmUp::new(Quota::per_second(2).unwrap(), Duration::from_secs(4)).unwrap()
}

#[test]
fn the_model_of_the_docs() {
    let w = guava();
    // threshold 4 and max 8 permits, in units of one permit.
    assert_eq!(u128::from(w.threshold), 4 * w.permit);
    assert_eq!(u128::from(w.max), 8 * w.permit);
    // Costs from cold: 1.375, 1.125, 0.875, 0.625, then 0.5 s.
    let mut stored = w.max;
    let mut costs = Vec::new();
    for _ in 0..6 {
        costs.push(w.cost(stored, 1).unwrap());
        stored -= (w.permit as u64).min(stored);
    }
    assert_eq!(
        costs,
        [
            1_375 * MS,
            1_125 * MS,
            875 * MS,
            625 * MS,
            500 * MS,
            500 * MS
        ]
    );
    // Cooling: 0.5 s idle per permit, cold again after 4 s.
    let hot = WarmState {
        next_free: 10 * SEC,
        stored: 0,
    };
    assert_eq!(w.cold_at(&hot), 14 * SEC);
    assert_eq!(u128::from(w.idle_at(&hot, 10 * SEC + SEC / 2)), w.permit);
}

#[test]
fn a_denial_and_a_cost_of_zero_write_nothing() {
    let w = guava();
    let (first, next) = w.transition(&w.fresh(), Nanos::new(0), 1);
    assert!(first.is_allowed());
    let next = next.unwrap();
    let (denied, write) = w.transition(&next, Nanos::new(SEC), 1);
    assert!(denied.is_denied());
    assert_eq!(write, None);
    assert_eq!(denied.retry_after(), Duration::from_millis(375));
    let (looked, write) = w.transition(&next, Nanos::new(2 * SEC), 0);
    assert!(looked.is_allowed());
    assert_eq!(write, None);
}

#[test]
fn clock_going_backwards_never_recredits() {
    let w = guava();
    let (_, next) = w.transition(&w.fresh(), Nanos::new(100 * SEC), 2);
    let next = next.unwrap();
    for back in [1, SEC, 50 * SEC] {
        let (d, write) = w.transition(&next, Nanos::new(100 * SEC - back), 1);
        assert!(d.is_denied(), "went back {back} ns");
        assert_eq!(write, None);
    }
}

#[test]
fn bad_parameters_are_refused() {
    let q = Quota::per_second(2).unwrap();
    assert!(matches!(
        WarmUp::with_cold_factor(q, Duration::from_secs(1), 0),
        Err(QuotaError::InvalidParameter { .. })
    ));
    assert!(matches!(
        WarmUp::new(q, Duration::ZERO),
        Err(QuotaError::InvalidParameter { .. })
    ));
    assert!(matches!(
        WarmUp::new(
            Quota::per_second(1_000_003).unwrap(),
            Duration::from_secs(1 << 40)
        ),
        Err(QuotaError::Overflow { .. })
    ));
    assert!(WarmUp::with_cold_factor(q, Duration::from_secs(3_600), 1).is_ok());
}

/// What Guava's test harness records: `R` the wait of an acquire, `U`
/// a sleep of the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    R(u64),
    U(u64),
}
use Event::{R, U};

/// Guava's `acquire()` as [`Limiter::acquire`](crate::Limiter::acquire)
/// runs it on a manual clock: check, and on a denial advance the clock
/// by `retry_after` and check again. Returns the time waited.
fn acquire(limiter: &crate::Limiter<WarmUp, crate::ManualClock>) -> u64 {
    let mut waited = 0;
    loop {
        let decision = limiter.check();
        if decision.is_allowed() {
            return waited;
        }
        let wait = decision.retry_after();
        waited += wait.as_nanos() as u64;
        limiter.clock().advance(wait);
    }
}

/// Replays `script` (`R(_)`: one acquire; `U(d)`: sleep `d`) on a fresh
/// limiter, with both uses of the algorithm: refusing (the `check`
/// loop of a `Limiter`) and waiting ([`WarmUp::reserve`], Guava's
/// `acquire`, sleeping until the instant it returns). Both must record
/// `script` exactly, to the nanosecond.
fn replay(warm: WarmUp, script: &[Event]) {
    let clock = crate::ManualClock::new();
    let limiter = crate::Limiter::with_clock(warm.clone(), clock.clone());
    let mut state = warm.fresh();
    let mut now = 0;
    let (mut refused, mut waited) = (Vec::new(), Vec::new());
    for event in script {
        match *event {
            R(_) => {
                refused.push(R(acquire(&limiter)));
                let (ready, next) = warm.reserve(&state, Nanos::new(now), 1).unwrap();
                waited.push(R(ready.as_u64() - now));
                (now, state) = (ready.as_u64(), next);
            }
            U(sleep) => {
                clock.advance(Duration::from_nanos(sleep));
                now += sleep;
                refused.push(U(sleep));
                waited.push(U(sleep));
            }
        }
    }
    assert_eq!(refused, script, "check, then wait retry_after");
    assert_eq!(waited, script, "reserve, then sleep until ready");
}

/// Guava's `RateLimiterTest.testWarmUp`: 2 per second, 4 s warm-up,
/// cold factor 3. Guava prints these as R0.00, R1.38, R1.13, R0.88,
/// R0.63, R0.50 (seconds, two decimals); here to the nanosecond, from
/// the model's areas (see the module docs).
#[test]
fn guava_table_2_per_second_4_s_warm_up() {
    let cold = [
        R(0),
        R(1_375 * MS),
        R(1_125 * MS),
        R(875 * MS),
        R(625 * MS),
        R(500 * MS),
        R(500 * MS),
        R(500 * MS),
    ];
    let mut script = cold.to_vec();
    // Repay the last acquire, then 4 s idle: cold again.
    script.extend([U(500 * MS), U(4_000 * MS)]);
    script.extend(cold);
    // Repay, then only 2 s idle: back to the threshold, not cold.
    script.extend([U(500 * MS), U(2_000 * MS)]);
    script.extend([R(0)].into_iter().chain([R(500 * MS); 7]));
    replay(guava(), &script);
}

/// A partial warm-up: three permits from cold leave 5 idle permits;
/// 1 s of idleness after the last one is repaid adds 2 (one per 0.5 s),
/// so the next permits come from 7: 1.125 s, 0.875 s, 0.625 s, then
/// the stable 0.5 s.
#[test]
fn guava_model_after_a_partial_warm_up() {
    let script = [
        R(0),
        R(1_375 * MS),
        R(1_125 * MS),
        U(875 * MS),
        U(1_000 * MS),
        R(0),
        R(1_125 * MS),
        R(875 * MS),
        R(625 * MS),
        R(500 * MS),
        R(500 * MS),
    ];
    replay(guava(), &script);
}

/// Guava's `testWarmUpWithColdFactor`: 5 per second, 4 s warm-up, cold
/// factor 10 (Guava prints R1.75, R1.26, R0.76, R0.30, R0.20). The ramp
/// is 40/11 permits wide: the fourth cost, 0.2 + 0.495·(7/11)²/2 s, is
/// 300_227_272.7 ns, rounded up.
#[test]
fn guava_table_5_per_second_cold_factor_10() {
    let warm = WarmUp::with_cold_factor(Quota::per_second(5).unwrap(), Duration::from_secs(4), 10)
        .unwrap();
    let cold = [
        R(0),
        R(1_752_500_000),
        R(1_257_500_000),
        R(762_500_000),
        R(300_227_273),
        R(200 * MS),
        R(200 * MS),
        R(200 * MS),
    ];
    let mut script = cold.to_vec();
    script.extend([U(200 * MS), U(4_000 * MS)]);
    script.extend(cold);
    // 1 s idle: still warm (it takes 4 s to go cold).
    script.extend([U(200 * MS), U(1_000 * MS)]);
    script.extend([R(0)].into_iter().chain([R(200 * MS); 7]));
    replay(warm, &script);
}

/// Guava's `testWarmUpWithColdFactor1`: no warm-up at all.
#[test]
fn cold_factor_1_is_the_stable_rate() {
    let warm =
        WarmUp::with_cold_factor(Quota::per_second(5).unwrap(), Duration::from_secs(4), 1).unwrap();
    let mut script = [R(0)]
        .into_iter()
        .chain([R(200 * MS); 7])
        .collect::<Vec<_>>();
    script.push(U(340 * MS));
    script.extend([R(0)].into_iter().chain([R(200 * MS); 7]));
    replay(warm, &script);
}

#[test]
fn closed_is_closed() {
    let w = guava();
    let (d, write) = w.transition(&w.closed(), Nanos::new(5), 1);
    assert!(d.is_denied());
    assert_eq!(d.retry_after().as_nanos(), u128::from(u64::MAX));
    assert_eq!(write, None);
    assert_eq!(w.reserve(&w.closed(), Nanos::new(5), 1), None);
}
