//! Warm-up against its reference model (`support::warm_model`): any rate,
//! warm-up period and cold factor ≥ 1, any arrival pattern. A [`Limiter`], a
//! [`KeyedLimiter`] key and an [`AllOf`] of the one limit, driven side by side
//! with the model on a manual clock, answer identical decisions (allowed,
//! limit, remaining, retry_after, reset_after) at every step, checks and
//! peeks alike. Equal decisions for one thread make every window admit
//! exactly what the model admits; the thread hammer (`concurrency`) and the
//! loom models cover many threads.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::support::model::Expected;
use super::support::warm_model::WarmUpModel;
use tollgate::{AllOf, KeyedLimiter, Limiter, ManualClock, Nanos, Quota, QuotaError, WarmUp};

/// The parameters of one case.
#[derive(Clone, Copy, Debug)]
struct Params {
    limit: u64,
    period: u64,
    burst: u64,
    warmup: u64,
    cold_factor: u32,
}

fn params() -> impl Strategy<Value = Params> {
    let period = prop_oneof![
        2 => prop::sample::select(vec![1_000_000, 1_000_000_000, 60_000_000_000]),
        1 => 1..=(1u64 << 40),
    ];
    let warmup = prop_oneof![
        2 => prop::sample::select(vec![1_000_000_000, 4_000_000_000, 60_000_000_000]),
        1 => 1..=(1u64 << 42),
    ];
    (1..=1_000u64, period, 1..=8u64, warmup, 1..=12u32).prop_map(
        |(limit, period, burst, warmup, cold_factor)| Params {
            limit,
            period,
            burst,
            warmup,
            cold_factor,
        },
    )
}

/// How far the clock moves before a step.
#[derive(Clone, Copy, Debug)]
enum Gap {
    /// Not at all.
    Zero,
    /// By this many ns.
    By(u64),
    /// To exactly where the last denial said to retry, or one ns before.
    Retry,
    RetryMinusOne,
    /// By this fraction (in 1/16) of the warm-up period: partly or fully cold.
    Warmup(u64),
}

#[derive(Clone, Copy, Debug)]
struct Step {
    gap: Gap,
    cost: u64,
    peek: bool,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let gap = prop_oneof![
        2 => Just(Gap::Zero),
        3 => (1..=(1u64 << 34)).prop_map(Gap::By),
        4 => Just(Gap::Retry),
        1 => Just(Gap::RetryMinusOne),
        2 => (1..=24u64).prop_map(Gap::Warmup),
    ];
    let step = (gap, 0..=9u64, prop::bool::weighted(0.2)).prop_map(|(gap, cost, peek)| Step {
        gap,
        cost,
        peek,
    });
    prop::collection::vec(step, 1..60)
}

fn expected(decision: tollgate::Decision) -> Expected {
    Expected::from(decision)
}

fn against_model(p: Params, start: u64, steps: &[Step]) -> Result<(), TestCaseError> {
    let quota = Quota::new(p.limit, Duration::from_nanos(p.period))
        .unwrap()
        .with_burst(p.burst)
        .unwrap();
    let warm = match WarmUp::with_cold_factor(quota, Duration::from_nanos(p.warmup), p.cold_factor)
    {
        Ok(warm) => warm,
        // Refused only when `max` passes 2^62 units (see the module docs).
        Err(QuotaError::Overflow { .. }) => {
            let g = gcd(p.limit, p.period);
            let units =
                u128::from(p.warmup) * u128::from(p.limit / g) * (u128::from(p.cold_factor) + 5);
            prop_assert!(units > 1 << 62, "refused {p:?}");
            return Ok(());
        }
        Err(other) => return Err(TestCaseError::fail(format!("{p:?}: {other}"))),
    };
    let mut model = WarmUpModel::new(p.limit, p.period, p.burst, p.warmup, p.cold_factor);
    let clock = ManualClock::starting_at(Nanos::new(start));
    let limiter = Limiter::with_clock(warm.clone(), clock.clone());
    let keyed: KeyedLimiter<u8, WarmUp> = KeyedLimiter::builder(warm.clone())
        .clock(clock.clone())
        .build();
    let all = Limiter::with_clock(AllOf::new(vec![warm]).unwrap(), clock.clone());
    let mut now = start;
    let mut last_retry = 0u64;
    for (i, step) in steps.iter().enumerate() {
        let by = match step.gap {
            Gap::Zero => 0,
            Gap::By(ns) => ns,
            Gap::Retry => last_retry,
            Gap::RetryMinusOne => last_retry.saturating_sub(1),
            Gap::Warmup(sixteenths) => p.warmup / 16 * sixteenths,
        };
        // Instants stay far below the end of the clock.
        if now.saturating_add(by) > 1 << 62 {
            break;
        }
        now += by;
        clock.set(Nanos::new(now));
        let want = model.decide(now, step.cost, !step.peek);
        let got = if step.cost > p.burst {
            prop_assert!(limiter.check_n(step.cost).is_err());
            prop_assert!(!want.allowed);
            continue;
        } else if step.peek {
            [
                limiter.peek_n(step.cost).unwrap(),
                keyed.peek_n(&7, step.cost).unwrap(),
                all.peek_n(step.cost).unwrap(),
            ]
        } else {
            [
                limiter.check_n(step.cost).unwrap(),
                keyed.check_n(&7, step.cost).unwrap(),
                all.check_n(step.cost).unwrap(),
            ]
        };
        for (who, decision) in ["limiter", "keyed", "all of"].iter().zip(got) {
            prop_assert_eq!(
                expected(decision),
                want,
                "{} step {} at {} ns: {:?}, {:?}",
                who,
                i,
                now,
                step,
                p
            );
        }
        if !want.allowed && want.retry_after_ns != u64::MAX {
            last_retry = want.retry_after_ns;
        }
    }
    Ok(())
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn warm_up_matches_model(p in params(), start in 0..(1u64 << 61), steps in steps()) {
        against_model(p, start, &steps)?;
    }
}

/// Bad parameters are refused with a typed error, never run.
#[test]
fn bad_warm_up_parameters_are_refused() {
    let quota = Quota::per_second(10).unwrap();
    assert!(matches!(
        WarmUp::with_cold_factor(quota, Duration::from_secs(10), 0),
        Err(QuotaError::InvalidParameter { .. })
    ));
    assert!(matches!(
        WarmUp::new(quota, Duration::ZERO),
        Err(QuotaError::InvalidParameter { .. })
    ));
    // 10^9 per second warming up for a year: 2^62 units and more.
    let fast = Quota::per_second(1_000_000_007).unwrap();
    assert!(matches!(
        WarmUp::new(fast, Duration::from_secs(365 * 86_400)),
        Err(QuotaError::Overflow { .. })
    ));
}

/// In an `AllOf` with another algorithm, through `AnyAlgorithm`: each limit
/// keeps its own rule, all-or-nothing. A warm-up of 2 per second beside 3
/// per day: the warm-up spaces the first two, the day refuses the fourth.
#[test]
fn warm_up_in_all_of_beside_a_daily_limit() {
    use tollgate::algorithm::any::AnyAlgorithm;
    let warm = WarmUp::new(Quota::per_second(2).unwrap(), Duration::from_secs(4)).unwrap();
    let day = tollgate::FixedWindow::new(Quota::per_day(3).unwrap()).unwrap();
    let limits = AllOf::new(vec![AnyAlgorithm::from(warm), AnyAlgorithm::from(day)]).unwrap();
    let clock = ManualClock::new();
    let limiter = Limiter::with_clock(limits, clock.clone());
    assert!(limiter.check().is_allowed());
    let owed = limiter.check();
    assert!(owed.is_denied());
    assert_eq!(owed.retry_after(), Duration::from_millis(1_375));
    clock.advance(owed.retry_after());
    assert!(limiter.check().is_allowed());
    clock.advance(Duration::from_secs(10));
    assert!(limiter.check().is_allowed());
    clock.advance(Duration::from_secs(10));
    let day_full = limiter.check();
    assert!(day_full.is_denied());
    assert_eq!(day_full.limit(), 3);
    assert_eq!(tollgate::Algorithm::quotas(&limiter.algorithm()).len(), 2);
}

/// A key is dropped once its state is as cold as a fresh one (what is owed
/// paid, the warm-up period idle), and not before: dropping it then
/// changes no decision.
#[test]
fn a_warm_up_key_is_evicted_once_cold_again() {
    let warm = WarmUp::new(Quota::per_second(2).unwrap(), Duration::from_secs(4)).unwrap();
    let clock = ManualClock::new();
    let keyed: KeyedLimiter<u8, WarmUp> = KeyedLimiter::builder(warm)
        .clock(clock.clone())
        .sweep_every(None)
        .build();
    for _ in 0..3 {
        while keyed.check(&1).is_denied() {
            clock.advance(Duration::from_millis(125));
        }
    }
    // Three permits from cold owe 0.875 s after the third; 3 idle permits
    // come back in 1.5 s.
    clock.advance(Duration::from_millis(875 + 1_499));
    assert_eq!(keyed.sweep(), 0);
    assert_eq!(keyed.len(), 1);
    clock.advance(Duration::from_millis(1));
    assert_eq!(keyed.sweep(), 1);
    assert!(keyed.is_empty());
}

// ---------------------------------------------------------------------------
// Shared test vectors: `tests/vectors/warm_up.json`
// ---------------------------------------------------------------------------

/// One vector case: a fresh limit, steps on a clock starting at 0, and the
/// model's decision at every step (the format of `tests/vectors/README.md`,
/// with the warm-up's two parameters).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WarmCase {
    pub name: String,
    pub description: String,
    pub limit: u64,
    pub period_ns: u64,
    pub burst: u64,
    pub warmup_ns: u64,
    pub cold_factor: u32,
    pub steps: Vec<WarmStep>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WarmStep {
    pub now_ns: u64,
    pub cost: u64,
    pub expect: Expected,
}

/// What a case does: acquire as Guava does (check; if denied, record the
/// denial and check again at exactly `retry_after`), sleep, or check once.
#[derive(Clone, Copy)]
enum Act {
    Acquire(u64),
    Sleep(u64),
    Once(u64),
}

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;

fn warm_case(
    name: &str,
    description: &str,
    (limit, period_ns, burst): (u64, u64, u64),
    (warmup_ns, cold_factor): (u64, u32),
    acts: &[Act],
) -> WarmCase {
    let mut model = WarmUpModel::new(limit, period_ns, burst, warmup_ns, cold_factor);
    let mut now = 0;
    let mut steps = Vec::new();
    for act in acts {
        match *act {
            Act::Sleep(ns) => now += ns,
            Act::Once(cost) => {
                let expect = model.decide(now, cost, true);
                steps.push(WarmStep {
                    now_ns: now,
                    cost,
                    expect,
                });
            }
            Act::Acquire(cost) => loop {
                let expect = model.decide(now, cost, true);
                steps.push(WarmStep {
                    now_ns: now,
                    cost,
                    expect,
                });
                if expect.allowed {
                    break;
                }
                now += expect.retry_after_ns;
            },
        }
    }
    WarmCase {
        name: name.to_owned(),
        description: description.to_owned(),
        limit,
        period_ns,
        burst,
        warmup_ns,
        cold_factor,
        steps,
    }
}

fn warm_cases() -> Vec<WarmCase> {
    use Act::{Acquire, Once, Sleep};
    let eight = [Acquire(1); 8];
    let mut guava = eight.to_vec();
    guava.extend([Sleep(4_500 * MS)]);
    guava.extend(eight);
    guava.extend([Sleep(2_500 * MS)]);
    guava.extend(eight);
    let mut factor_10 = eight.to_vec();
    factor_10.extend([Sleep(4_200 * MS)]);
    factor_10.extend(eight);
    factor_10.extend([Sleep(1_200 * MS)]);
    factor_10.extend(eight);
    // A deterministic mix of gaps, costs and looks (cost 0).
    let mut mixed = Vec::new();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..40 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        mixed.push(match x % 7 {
            0 => Sleep(x % (3 * S)),
            1 => Once(0),
            2 | 3 => Once(1 + (x >> 8) % 3),
            _ => Acquire(1 + (x >> 16) % 3),
        });
    }
    vec![
        warm_case(
            "warm_up_guava_2_per_second_4s",
            "Guava's testWarmUp: 2/s, 4 s warm-up, cold factor 3: from cold the waits are 1.375, 1.125, 0.875, 0.625 s, then 0.5 s; 4.5 s idle is cold again, 2.5 s is not",
            (2, S, 2),
            (4 * S, 3),
            &guava,
        ),
        warm_case(
            "warm_up_guava_5_per_second_cold_factor_10",
            "Guava's testWarmUpWithColdFactor: 5/s, 4 s, cold factor 10: 1.7525, 1.2575, 0.7625, 0.300227273 s, then 0.2 s",
            (5, S, 5),
            (4 * S, 10),
            &factor_10,
        ),
        warm_case(
            "warm_up_partial_then_idle",
            "three permits from cold, the debt repaid, 1 s idle: two idle permits back, so the next cost 1.125 s",
            (2, S, 2),
            (4 * S, 3),
            &[
                Acquire(1),
                Acquire(1),
                Acquire(1),
                Sleep(1_875 * MS),
                Acquire(1),
                Acquire(1),
                Acquire(1),
            ],
        ),
        warm_case(
            "warm_up_odd_rate_costs_and_looks",
            "7 per 3 s, burst 3, 10 s warm-up, cold factor 4: costs of 1 to 3 permits, looks of cost 0, gaps up to 3 s; costs with remainders rounded up",
            (7, 3 * S, 3),
            (10 * S, 4),
            &mixed,
        ),
    ]
}

fn vectors_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/warm_up.json")
}

/// The committed vectors are what the model generates now. To regenerate
/// after a deliberate change: `TOLLGATE_WRITE_VECTORS=1 cargo test -p
/// tollgate --test it -- properties::warm_up::warm_up_vectors`, then review the diff.
#[test]
fn warm_up_vectors_are_what_the_model_says() {
    let cases = warm_cases();
    let mut text = serde_json::to_string_pretty(&cases).unwrap();
    text.push('\n');
    for case in &cases {
        for step in &case.steps {
            let e = &step.expect;
            for n in [step.now_ns, e.retry_after_ns, e.reset_after_ns] {
                assert!(n < 1 << 53 || n == u64::MAX, "{}: {n}", case.name);
            }
        }
    }
    if std::env::var_os("TOLLGATE_WRITE_VECTORS").is_some_and(|v| v == "1") {
        std::fs::write(vectors_path(), &text).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(vectors_path()).unwrap_or_default();
    assert!(
        committed == text,
        "tests/vectors/warm_up.json is not what the model generates now"
    );
}

/// The core's limiter replays every vector.
#[test]
fn warm_up_limiters_replay_every_vector() {
    let cases: Vec<WarmCase> =
        serde_json::from_str(&std::fs::read_to_string(vectors_path()).unwrap()).unwrap();
    assert_eq!(cases.len(), 4);
    for case in cases {
        let quota = Quota::new(case.limit, Duration::from_nanos(case.period_ns))
            .unwrap()
            .with_burst(case.burst)
            .unwrap();
        let warm = WarmUp::with_cold_factor(
            quota,
            Duration::from_nanos(case.warmup_ns),
            case.cold_factor,
        )
        .unwrap();
        let clock = ManualClock::new();
        let limiter = Limiter::with_clock(warm, clock.clone());
        for (i, step) in case.steps.iter().enumerate() {
            clock.set(Nanos::new(step.now_ns));
            let got = expected(limiter.check_n(step.cost).unwrap());
            assert_eq!(got, step.expect, "{} step {i}", case.name);
        }
    }
}
