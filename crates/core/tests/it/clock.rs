//! What the clock docs claim about readings that go backwards, tested: no
//! clock promises ordered readings across threads (the default
//! [`QuantaClock`] reads per-core counters that can be a few cycles apart,
//! governor#299), and the limiters do not need it. Whatever state readings
//! that go backwards and forwards have left, a reading earlier than the
//! latest one the limiter has seen is decided no more generously than that
//! latest one: never an admission the latest reading would deny, never more
//! permits remaining for the same answer. A backwards reading is decided as "no time passed" or
//! as a longer wait, never as a refill.
//!
//! And the defaults: `Limiter::new` and `KeyedLimiter::new` run on the
//! time-stamp counter clock, with `MonotonicClock` one line away.

use std::fmt::Debug;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate::{
    Algorithm, AllOf, Clock, ClockSource, FixedWindow, Gcra, KeyedLimiter, Limiter, ManualClock,
    MonotonicClock, Nanos, QuantaClock, Quota, SlidingLog, SlidingWindow,
};

const SECOND: u64 = 1_000_000_000;
const START: u64 = 10 * 3_600 * SECOND;

/// Readings as steps from the previous one, forwards or backwards, small
/// (a counter a few cycles behind) and large (a clock set back).
fn steps() -> impl Strategy<Value = Vec<(i64, u64)>> {
    let second = SECOND as i64;
    let step = prop_oneof![
        3 => -50i64..=50,
        3 => -second / 2..=second / 2,
        2 => -3 * second..=3 * second,
        1 => -3_600 * second..=3_600 * second,
    ];
    prop::collection::vec((step, 1..=3u64), 1..200)
}

fn quota() -> impl Strategy<Value = Quota> {
    (1..=5u64, SECOND / 2..=2 * SECOND, 1..=5u64).prop_map(|(limit, period, burst)| {
        Quota::new(limit, Duration::from_nanos(period))
            .and_then(|quota| quota.with_burst(burst))
            .expect("valid quota")
    })
}

fn never_above_the_running_maximum<A: Algorithm + Debug>(
    algorithm: A,
    steps: &[(i64, u64)],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::starting_at(Nanos::new(START));
    let limiter = Limiter::with_clock(algorithm, clock.clone());
    let (mut reading, mut latest) = (START, 0);
    for (index, &(step, cost)) in steps.iter().enumerate() {
        reading = reading.saturating_add_signed(step);
        latest = latest.max(reading);
        // The same state, asked at the latest reading and at this one.
        clock.set(Nanos::new(latest));
        let at_latest = limiter.peek_n(cost);
        clock.set(Nanos::new(reading));
        let at_reading = limiter.peek_n(cost);
        if let (Ok(at_latest), Ok(at_reading)) = (at_latest, at_reading) {
            prop_assert!(
                !at_reading.is_allowed() || at_latest.is_allowed(),
                "step {}: cost {} allowed {} ns before the latest reading, denied at it",
                index,
                cost,
                latest - reading
            );
            // `remaining` counts after the cost when admitted, before it
            // when denied: comparable between two answers of one kind.
            prop_assert!(
                at_reading.is_allowed() != at_latest.is_allowed()
                    || at_reading.remaining() <= at_latest.remaining(),
                "step {}: {} remaining {} ns before the latest reading, {} at it",
                index,
                at_reading.remaining(),
                latest - reading,
                at_latest.remaining()
            );
        }
        let _ = limiter.check_n(cost);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn gcra_backwards_readings_never_refill(quota in quota(), steps in steps()) {
        never_above_the_running_maximum(Gcra::new(quota).expect("representable"), &steps)?;
    }

    #[test]
    fn fixed_window_backwards_readings_never_refill(quota in quota(), steps in steps()) {
        never_above_the_running_maximum(FixedWindow::new(quota).expect("representable"), &steps)?;
    }

    #[test]
    fn sliding_log_backwards_readings_never_refill(quota in quota(), steps in steps()) {
        never_above_the_running_maximum(SlidingLog::new(quota).expect("representable"), &steps)?;
    }

    #[test]
    fn sliding_window_backwards_readings_never_refill(
        quota in quota(),
        slots in 1..=4u32,
        steps in steps(),
    ) {
        let wheel = SlidingWindow::new(quota, slots).expect("representable");
        never_above_the_running_maximum(wheel, &steps)?;
    }

    #[test]
    fn all_of_backwards_readings_never_refill(a in quota(), b in quota(), steps in steps()) {
        let all = AllOf::new(vec![
            Gcra::new(a).expect("representable"),
            Gcra::new(b).expect("representable"),
        ])
        .expect("valid limits");
        never_above_the_running_maximum(all, &steps)?;
    }
}

#[test]
fn the_defaults_read_the_time_stamp_counter_clock() {
    let gcra = Gcra::new(Quota::per_second(10).expect("valid quota")).expect("representable");
    // The type says it: `Limiter::new` is a `Limiter<_, QuantaClock>`.
    let direct: Limiter<Gcra, QuantaClock> = Limiter::new(gcra.clone());
    assert!(direct.check().is_allowed());
    let keyed: KeyedLimiter<u64> = KeyedLimiter::new(gcra.clone());
    assert!(matches!(keyed.clock(), ClockSource::Quanta(_)));
    // The monotonic clock, one line away.
    let monotonic = Limiter::with_clock(gcra.clone(), MonotonicClock::new());
    assert!(monotonic.check().is_allowed());
    let keyed: KeyedLimiter<u64> = KeyedLimiter::builder(gcra)
        .clock(MonotonicClock::new())
        .build();
    assert!(matches!(keyed.clock(), ClockSource::Monotonic(_)));
}

/// Every `QuantaClock` counts from one origin: two made apart read within
/// the time between their reads, as two `MonotonicClock`s do.
#[test]
fn quanta_clocks_share_one_origin() {
    let first = QuantaClock::new();
    std::thread::sleep(Duration::from_millis(20));
    let second = QuantaClock::new();
    let (a, b) = (first.now(), second.now());
    // Read back to back: far less apart than the 20 ms between the two
    // clocks' creation (which would separate two per-clock origins).
    assert!(
        a.as_u64().abs_diff(b.as_u64()) < 10_000_000,
        "{a} and {b} from two clocks"
    );
    assert!(b.as_u64() >= 20_000_000, "the origin is the first clock's");
}
