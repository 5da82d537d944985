//! Property tests: a [`KeyedLimiter`] with overrides behaves exactly like one
//! independent direct [`Limiter`] per key, each on the same clock and under
//! that key's quota.
//!
//! Six keys: keys 0 and 3 have an exact override, odd keys get the override
//! function's quota (key 3's exact override wins over it), keys 2 and 4 run
//! the default; the three quotas are random. A random sequence of checks (any
//! cost, including 0 and costs above a key's capacity), peeks, clock steps and
//! sweeps runs on the keyed limiter and on the direct limiters side by side:
//! every answer is identical (all fields of every [`Decision`], or the same
//! [`CostError`](tollgate::CostError)). Sweeping is thereby shown lossless, and
//! no key's state or quota leaks into another's.
//!
//! Each of the four algorithms runs through one generic helper.

use std::fmt::Debug;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate::{
    Algorithm, FixedWindow, Gcra, KeyedLimiter, Limiter, ManualClock, Nanos, Quota, SlidingLog,
    SlidingWindow,
};

const KEYS: u64 = 6;
const MS: u64 = 1_000_000;
/// The longest period generated.
const MAX_PERIOD: u64 = 40 * MS;

/// One step of a sequence.
#[derive(Clone, Debug)]
enum Op {
    Check { key: u64, cost: u64 },
    Peek { key: u64, cost: u64 },
    Advance(u64),
    Sweep,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let key = 0..KEYS;
    // Up to one above the largest capacity generated (16).
    let cost = prop_oneof![3 => 0..4u64, 1 => 0..=17u64];
    let op = prop_oneof![
        6 => (key.clone(), cost.clone()).prop_map(|(key, cost)| Op::Check { key, cost }),
        2 => (key, cost).prop_map(|(key, cost)| Op::Peek { key, cost }),
        3 => prop_oneof![
            Just(1u64),
            1..=MAX_PERIOD / 8,
            1..=2 * MAX_PERIOD,
        ]
        .prop_map(Op::Advance),
        1 => Just(Op::Sweep),
    ];
    prop::collection::vec(op, 1..400)
}

/// A quota of 1 to 8 permits per period of up to 40 ms (not a whole number of
/// ms, so that windows are not aligned with the steps), burst 1 to 16.
fn quota() -> impl Strategy<Value = Quota> {
    (1..=8u64, 1..=MAX_PERIOD, 1..=16u64).prop_map(|(limit, period, burst)| {
        Quota::new(limit, Duration::from_nanos(period))
            .and_then(|quota| quota.with_burst(burst))
            .expect("valid quota")
    })
}

/// Where the clock starts: near the origin, or far into its life.
fn start() -> impl Strategy<Value = u64> {
    prop_oneof![0..=MAX_PERIOD, 0..=1u64 << 50]
}

/// The algorithm key `key` runs, given the default, exact and function ones.
fn algorithm_for<A: Clone>(key: u64, default: &A, exact: &A, function: &A) -> A {
    if key == 0 || key == 3 {
        exact.clone()
    } else if key % 2 == 1 {
        function.clone()
    } else {
        default.clone()
    }
}

fn keyed_matches_one_limiter_per_key<A: Algorithm + Clone + Debug>(
    default: A,
    exact: A,
    function: A,
    start: u64,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::starting_at(Nanos::new(start));
    let odd = function.clone();
    let keyed: KeyedLimiter<u64, A> = KeyedLimiter::builder(default.clone())
        .clock(clock.clone())
        .sweep_every(None)
        .override_key(0, exact.clone())
        .override_key(3, exact.clone())
        .override_with(move |key: &u64| (key % 2 == 1).then(|| odd.clone()))
        .build();
    let direct: Vec<_> = (0..KEYS)
        .map(|key| {
            let algorithm = algorithm_for(key, &default, &exact, &function);
            Limiter::with_clock(algorithm, clock.clone())
        })
        .collect();
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Check { key, cost } => {
                let limiter = &direct[key as usize];
                let (got, want) = if cost == 1 && key % 2 == 0 {
                    (Ok(keyed.check(&key)), Ok(limiter.check()))
                } else {
                    (keyed.check_n(&key, cost), limiter.check_n(cost))
                };
                prop_assert_eq!(got, want, "step {}: check_n({}, {})", step, key, cost);
            }
            Op::Peek { key, cost } => {
                let limiter = &direct[key as usize];
                let (got, want) = if cost == 1 {
                    (Ok(keyed.peek(&key)), Ok(limiter.peek()))
                } else {
                    (keyed.peek_n(&key, cost), limiter.peek_n(cost))
                };
                prop_assert_eq!(got, want, "step {}: peek_n({}, {})", step, key, cost);
            }
            Op::Advance(by) => clock.advance(Duration::from_nanos(by)),
            Op::Sweep => {
                keyed.sweep();
            }
        }
        prop_assert!(keyed.len() <= KEYS as usize);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn gcra_keyed_is_one_limiter_per_key(
        quotas in (quota(), quota(), quota()),
        start in start(),
        ops in ops(),
    ) {
        let make = |quota| Gcra::new(quota).expect("representable");
        let (default, exact, function) = (make(quotas.0), make(quotas.1), make(quotas.2));
        keyed_matches_one_limiter_per_key(default, exact, function, start, &ops)?;
    }

    #[test]
    fn fixed_window_keyed_is_one_limiter_per_key(
        quotas in (quota(), quota(), quota()),
        start in start(),
        ops in ops(),
    ) {
        let make = |quota| FixedWindow::new(quota).expect("representable");
        let (default, exact, function) = (make(quotas.0), make(quotas.1), make(quotas.2));
        keyed_matches_one_limiter_per_key(default, exact, function, start, &ops)?;
    }

    #[test]
    fn sliding_log_keyed_is_one_limiter_per_key(
        quotas in (quota(), quota(), quota()),
        start in start(),
        ops in ops(),
    ) {
        let make = |quota| SlidingLog::new(quota).expect("representable");
        let (default, exact, function) = (make(quotas.0), make(quotas.1), make(quotas.2));
        keyed_matches_one_limiter_per_key(default, exact, function, start, &ops)?;
    }

    #[test]
    fn sliding_window_keyed_is_one_limiter_per_key(
        quotas in (quota(), quota(), quota()),
        slots in (1..=6u32, 1..=6u32, 1..=6u32),
        start in start(),
        ops in ops(),
    ) {
        let make = |quota, slots| SlidingWindow::new(quota, slots).expect("representable");
        let default = make(quotas.0, slots.0);
        let exact = make(quotas.1, slots.1);
        let function = make(quotas.2, slots.2);
        keyed_matches_one_limiter_per_key(default, exact, function, start, &ops)?;
    }
}
