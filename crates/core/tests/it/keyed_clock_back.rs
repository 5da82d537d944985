//! A keyed limiter whose clock goes backwards across a sweep (
//! item 1: "keyed limiter re-credits after a sweep when the clock goes
//! back").
//!
//! The bug: fixed window 1/s, a check at 0.5 s is allowed; the clock moves to
//! 1.5 s and a sweep drops the key (its window is over); the clock goes back
//! to 0.6 s, and the key, re-created fresh, was decided at 0.6 s: a second
//! admission in the window [0 s, 1 s), which a plain [`Limiter`] fed the same
//! times denies.
//!
//! What holds now: a key re-created after a sweep is decided at the later of
//! the reading and the latest reading any sweep took (the removed state was
//! idle at that reading, so a fresh one answers exactly as it would have
//! there). The property below pins the whole behaviour: over random checks,
//! peeks, sweeps and clock jumps of 1 ns, about 1 s and about 1 h in both
//! directions, one key of a keyed limiter answers exactly (every field of
//! every [`Decision`]) as a plain [`Limiter`] on the same quota, fed the same
//! readings, except that while the key has no state the plain limiter is fed
//! the later of the reading and the sweeps' latest reading, and its waits
//! are then counted from the keyed request's own reading (
//! they were counted from the later instant). Before the fix the keyed
//! limiter decided a re-created key at the raw reading, and the property
//! failed for every algorithm.

use std::fmt::Debug;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate::{
    Algorithm, AllOf, Decision, FixedWindow, Gcra, KeyedLimiter, Limiter, ManualClock, Nanos,
    Quota, SlidingLog, SlidingWindow,
};

const SECOND: u64 = 1_000_000_000;
const HOUR: u64 = 3_600 * SECOND;
/// Where every run starts: far enough from the origin that a jump of an hour
/// back stays above it.
const START: u64 = 10 * HOUR;
const KEY: u64 = 7;

#[derive(Clone, Debug)]
enum Op {
    Check(u64),
    Peek(u64),
    /// Moves the clock by this many ns, forwards or backwards.
    Jump(i64),
    Sweep,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let second = SECOND as i64;
    let hour = HOUR as i64;
    let jump = prop_oneof![
        Just(1i64),
        Just(-1i64),
        (second / 10..=3 * second / 2),
        (-3 * second / 2..=-second / 10),
        (hour - second..=hour + second),
        (-hour - second..=-hour + second),
    ];
    let op = prop_oneof![
        5 => (0..=3u64).prop_map(Op::Check),
        1 => (0..=3u64).prop_map(Op::Peek),
        4 => jump.prop_map(Op::Jump),
        2 => Just(Op::Sweep),
    ];
    prop::collection::vec(op, 1..120)
}

/// 1 to 3 permits per second (not a whole number of ms, so that windows are
/// not aligned with the jumps), burst 1 to 3.
fn quota() -> impl Strategy<Value = Quota> {
    (1..=3u64, 0..1_000_000u64, 1..=3u64).prop_map(|(limit, extra, burst)| {
        Quota::new(limit, Duration::from_nanos(SECOND + extra))
            .and_then(|quota| quota.with_burst(burst))
            .expect("valid quota")
    })
}

fn matches_a_plain_limiter<A: Algorithm + Debug>(
    algorithm: A,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::starting_at(Nanos::new(START));
    let keyed: KeyedLimiter<u64, A> = KeyedLimiter::builder(algorithm.clone())
        .clock(clock.clone())
        .sweep_every(None)
        .build();
    // The plain limiter reads its own clock, set before each request.
    let plain_clock = ManualClock::starting_at(Nanos::new(START));
    let plain = Limiter::with_clock(algorithm, plain_clock.clone());
    // The latest reading any sweep took.
    let mut swept_at = Nanos::ZERO;
    for (step, op) in ops.iter().enumerate() {
        let now = clock.now_for_test();
        let absent = keyed.is_empty();
        let decided_at = if absent { now.max(swept_at) } else { now };
        plain_clock.set(decided_at);
        // The keyed limiter reports its waits from the reading `now`: the
        // plain limiter's, decided at `decided_at`, end at the same instants.
        let later = decided_at.as_u64() - now.as_u64();
        match *op {
            Op::Check(cost) => {
                let got = keyed.check_n(&KEY, cost);
                let want = plain.check_n(cost).map(|d| seen_earlier_by(d, later));
                prop_assert_eq!(got, want, "step {}: check_n({}) at {}", step, cost, now);
            }
            Op::Peek(cost) => {
                let got = keyed.peek_n(&KEY, cost);
                let want = plain.peek_n(cost).map(|d| seen_earlier_by(d, later));
                prop_assert_eq!(got, want, "step {}: peek_n({}) at {}", step, cost, now);
            }
            Op::Jump(by) => {
                let to = now.as_u64().saturating_add_signed(by);
                clock.set(Nanos::new(to));
            }
            Op::Sweep => {
                keyed.sweep();
                swept_at = swept_at.max(now);
            }
        }
    }
    Ok(())
}

/// `decision` as seen `by_ns` before the instant it was taken at: every wait
/// that is not zero (nor "never") grows by `by_ns`.
fn seen_earlier_by(decision: Decision, by_ns: u64) -> Decision {
    let later = |wait: Duration| {
        if wait.is_zero() || wait == Duration::from_nanos(u64::MAX) {
            wait
        } else {
            wait.saturating_add(Duration::from_nanos(by_ns))
                .min(Duration::from_nanos(u64::MAX))
        }
    };
    Decision::from_parts(
        decision.is_allowed(),
        decision.limit(),
        decision.remaining(),
        later(decision.retry_after()),
        later(decision.reset_after()),
    )
}

/// `ManualClock::now` through the trait, without importing it at every use.
trait NowForTest {
    fn now_for_test(&self) -> Nanos;
}

impl NowForTest for ManualClock {
    fn now_for_test(&self) -> Nanos {
        tollgate::Clock::now(self)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn gcra(quota in quota(), ops in ops()) {
        matches_a_plain_limiter(Gcra::new(quota).expect("representable"), &ops)?;
    }

    #[test]
    fn fixed_window(quota in quota(), ops in ops()) {
        matches_a_plain_limiter(FixedWindow::new(quota).expect("representable"), &ops)?;
    }

    #[test]
    fn sliding_log(quota in quota(), ops in ops()) {
        matches_a_plain_limiter(SlidingLog::new(quota).expect("representable"), &ops)?;
    }

    #[test]
    fn sliding_window(quota in quota(), slots in 1..=4u32, ops in ops()) {
        let wheel = SlidingWindow::new(quota, slots).expect("representable");
        matches_a_plain_limiter(wheel, &ops)?;
    }

    #[test]
    fn all_of(per_second in quota(), per_hour in 1..=5u64, ops in ops()) {
        let hourly = Quota::new(per_hour, Duration::from_secs(3_600)).expect("valid quota");
        let all = AllOf::new(vec![
            Gcra::new(per_second).expect("representable"),
            Gcra::new(hourly).expect("representable"),
        ])
        .expect("valid limits");
        matches_a_plain_limiter(all, &ops)?;
    }
}

/// The reported scenario, step by step: the admission at 0.6 s after the
/// sweep at 1.5 s counts in the window the sweep had reached, so that the
/// window [1 s, 2 s) is full when the clock gets back there; before the fix
/// it was counted in [0 s, 1 s), the second there, and [1 s, 2 s) admitted
/// again.
#[test]
fn regression_fixed_window_swept_key_is_not_recredited_when_the_clock_goes_back() {
    let at = |ms: u64| Nanos::new(ms * 1_000_000);
    let clock = ManualClock::starting_at(at(500));
    let one_per_second =
        FixedWindow::new(Quota::per_second(1).expect("valid quota")).expect("representable");
    let keyed: KeyedLimiter<String, FixedWindow> = KeyedLimiter::builder(one_per_second)
        .clock(clock.clone())
        .sweep_every(None)
        .build();
    assert!(keyed.check("k").is_allowed());
    clock.set(at(1_500));
    assert_eq!(keyed.sweep(), 1, "the window is over: the key is idle");
    clock.set(at(600));
    let again = keyed.check("k");
    assert!(again.is_allowed());
    // Decided at 1.5 s: the window it counts in resets at 2 s, 1.4 s after
    // the reading of 0.6 s (Regression: it said 500 ms, the wait
    // counted from 1.5 s).
    assert_eq!(again.reset_after(), Duration::from_millis(1_400));
    let peeked = keyed.peek("k");
    assert_eq!(peeked.reset_after(), Duration::from_millis(1_400));
    clock.set(at(700));
    assert!(keyed.check("k").is_denied());
    clock.set(at(1_500));
    assert!(
        keyed.check("k").is_denied(),
        "[1 s, 2 s) already admitted the request decided at 1.5 s"
    );
    clock.set(at(2_000));
    assert!(keyed.check("k").is_allowed());
}
