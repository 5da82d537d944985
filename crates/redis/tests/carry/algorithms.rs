//! Regression: a change of limits carries every algorithm's state on Redis
//! as the core's `carry_cell` does (the script carried only GCRA and fixed
//! windows: a sliding window, a calendar window or a warm-up started
//! afresh, losing its count and a charge's debt, so that a reload that
//! loosened nothing gave a spent key a whole new quota; a change of
//! algorithm did too, where the core charges the permits counted into the
//! new limit). Parity: the same admissions and charges, a change, then the
//! same schedule of checks and looks through the core's
//! `KeyedLimiter::set_default` and through a Redis limiter built with
//! `carry_from`, every field of every answer compared.

use std::time::Duration;

use tollgate::algorithm::any::AnyAlgorithm;
use tollgate::{Carry, FixedWindow, Gcra, KeyedLimiter, ManualClock, Nanos, Quota};
use tollgate::{SlidingWindow, WarmUp};
use tollgate_redis::{CalendarUnit, CalendarWindow, Limit, Redis, RedisLimiter};

use crate::support;
use crate::support::Connect as _;

const SEC: u64 = 1_000_000_000;

fn limiter(
    redis: &Redis,
    limit: Limit,
    clock: &ManualClock,
    from: Option<(Limit, Carry)>,
) -> RedisLimiter {
    let mut b = support::on_manual_clock(redis, "carry-all", clock).limit(limit);
    if let Some((old, rule)) = from {
        b = b.carry_from([old], rule);
    }
    b.build().unwrap()
}

/// One limit, as the core's algorithm and as Redis's limit.
#[derive(Clone)]
struct Both(AnyAlgorithm, Limit);

fn per(limit: u64, period: Duration) -> Quota {
    Quota::new(limit, period).unwrap()
}

fn gcra(limit: u64, period: Duration, burst: u64) -> Both {
    let g = Gcra::new(per(limit, period).with_burst(burst).unwrap()).unwrap();
    Both(AnyAlgorithm::Gcra(g.clone()), g.into())
}

fn fixed(limit: u64, period: Duration) -> Both {
    let f = FixedWindow::new(per(limit, period)).unwrap();
    Both(AnyAlgorithm::FixedWindow(f.clone()), f.into())
}

fn sliding(limit: u64, period: Duration, slots: u32) -> Both {
    let w = SlidingWindow::new(per(limit, period), slots).unwrap();
    Both(AnyAlgorithm::SlidingWindow(w.clone()), w.into())
}

fn calendar(unit: CalendarUnit, limit: u64) -> Both {
    let w = CalendarWindow::new(unit, limit).unwrap();
    Both(AnyAlgorithm::Calendar(w.clone()), w.into())
}

fn warm(limit: u64, burst: u64, warmup: Duration) -> Both {
    let w = WarmUp::new(
        Quota::per_second(limit).unwrap().with_burst(burst).unwrap(),
        warmup,
    )
    .unwrap();
    Both(AnyAlgorithm::WarmUp(w.clone()), w.into())
}

/// `taken` admissions of `cost` and a charge of `charged` under `old`,
/// `gap` later a change to `new` by `rule`, then a schedule of checks and
/// looks `step` apart: the core's answers and Redis's agree at every step.
/// Returns the denials after the change.
#[allow(clippy::too_many_arguments)]
async fn same_as_the_core(
    redis: &Redis,
    key: &str,
    old: &Both,
    new: &Both,
    rule: Carry,
    (taken, cost): (u64, u64),
    charged: u64,
    gap: Duration,
    step: Duration,
) -> usize {
    // Unix ns below 2^53 (test mode): 1970-01-05 10:20, a Monday.
    let start = Nanos::new(4 * 86_400 * SEC + 37_200 * SEC);
    let core_clock = ManualClock::starting_at(start);
    let core = KeyedLimiter::<String, AnyAlgorithm>::builder(old.0.clone())
        .clock(core_clock.clone())
        .build();
    let clock = ManualClock::starting_at(start);
    let before = limiter(redis, old.1.clone(), &clock, None);
    for i in 0..taken {
        let want = support::fields(&core.check_n(key, cost).unwrap());
        let got = support::fields(&before.check_n(key, cost).await.unwrap());
        assert_eq!(got, want, "{key}: admission {i} before the change");
    }
    if charged > 0 {
        let _ = core.charge(key, charged);
        let got = before.charge_outcome(key, charged).await.unwrap();
        assert_eq!(got.source, tollgate_redis::Source::Redis, "{key}");
        let want = core.peek_n(key, 1).unwrap();
        let got = before.peek_n(key, 1).await.unwrap();
        assert_eq!(
            support::fields(&got),
            support::fields(&want),
            "{key}: after the charge"
        );
    }
    core_clock.advance(gap);
    clock.advance(gap);
    core.set_default(new.0.clone(), rule);
    let after = limiter(redis, new.1.clone(), &clock, Some((old.1.clone(), rule)));
    let mut denied = 0;
    for i in 0..24 {
        let (want, got) = if i % 3 == 1 {
            (
                core.peek_n(key, 0).unwrap(),
                after.peek_n(key, 0).await.unwrap(),
            )
        } else {
            (core.check(key), after.check(key).await)
        };
        assert_eq!(
            support::fields(&got),
            support::fields(&want),
            "{key}: step {i} after the change"
        );
        denied += usize::from(want.is_denied());
        core_clock.advance(step);
        clock.advance(step);
    }
    denied
}

/// Every algorithm the scripts store, raised, lowered and reshaped, with
/// and without a charge's debt, by every rule; and changes of algorithm.
#[tokio::test]
async fn every_algorithm_carries_as_the_core() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let s = Duration::from_secs(1);
    let min = Duration::from_secs(60);
    let ms = Duration::from_millis;
    // (name, old, new, taken, charged, gap, step)
    let cases: Vec<(&str, Both, Both, u64, u64, Duration, Duration)> = vec![
        // Sliding window, same geometry: raised, lowered, in debt.
        (
            "s-up",
            sliding(10, min, 6),
            sliding(20, min, 6),
            7,
            0,
            ms(10_500),
            s * 5,
        ),
        (
            "s-down",
            sliding(10, min, 6),
            sliding(4, min, 6),
            8,
            0,
            ms(10_500),
            s * 5,
        ),
        (
            "s-debt-up",
            sliding(10, min, 6),
            sliding(15, min, 6),
            6,
            25,
            s * 3,
            s * 9,
        ),
        (
            "s-debt-down",
            sliding(10, min, 6),
            sliding(5, min, 6),
            6,
            25,
            s * 3,
            s * 9,
        ),
        // Sliding window, another geometry.
        (
            "s-slots",
            sliding(10, min, 6),
            sliding(10, min, 4),
            7,
            0,
            ms(20_500),
            s * 5,
        ),
        (
            "s-period",
            sliding(10, min, 6),
            sliding(30, min * 3, 3),
            9,
            12,
            s * 7,
            s * 20,
        ),
        // Calendar windows: raised, lowered, in debt, another unit.
        (
            "c-up",
            calendar(CalendarUnit::Minute, 10),
            calendar(CalendarUnit::Minute, 20),
            7,
            0,
            s * 5,
            s * 6,
        ),
        (
            "c-down",
            calendar(CalendarUnit::Minute, 10),
            calendar(CalendarUnit::Minute, 4),
            8,
            0,
            s * 5,
            s * 6,
        ),
        (
            "c-debt",
            calendar(CalendarUnit::Hour, 10),
            calendar(CalendarUnit::Hour, 20),
            3,
            40,
            s * 5,
            min * 12,
        ),
        (
            "c-unit",
            calendar(CalendarUnit::Minute, 10),
            calendar(CalendarUnit::Hour, 30),
            6,
            0,
            s,
            min * 2,
        ),
        // Fixed window and GCRA in debt (their carry was there; the debt was not tested).
        (
            "f-debt",
            fixed(10, min),
            fixed(5, min),
            4,
            30,
            s * 5,
            s * 20,
        ),
        (
            "g-debt",
            gcra(10, s, 5),
            gcra(20, s, 10),
            3,
            20,
            ms(100),
            ms(250),
        ),
        // Warm-up: raised, lowered, another warm-up period.
        (
            "w-up",
            warm(4, 4, s * 2),
            warm(8, 8, s * 2),
            3,
            0,
            ms(100),
            ms(130),
        ),
        (
            "w-down",
            warm(8, 8, s * 2),
            warm(2, 2, s),
            6,
            0,
            ms(50),
            ms(170),
        ),
        // Across algorithms: the permits counted, charged into the new one.
        (
            "x-f-s",
            fixed(10, min),
            sliding(10, min, 6),
            7,
            0,
            s * 5,
            s * 4,
        ),
        (
            "x-s-g",
            sliding(10, min, 6),
            gcra(10, min, 10),
            8,
            6,
            s * 5,
            s * 4,
        ),
        ("x-g-f", gcra(10, s, 10), fixed(20, min), 9, 0, ms(50), s),
        (
            "x-w-g",
            warm(4, 4, s * 2),
            gcra(4, s, 4),
            3,
            0,
            ms(10),
            ms(90),
        ),
        (
            "x-f-c",
            fixed(10, min),
            calendar(CalendarUnit::Minute, 10),
            6,
            8,
            s * 5,
            s * 4,
        ),
        ("x-f-w", fixed(10, min), warm(4, 4, s * 2), 3, 0, s, ms(110)),
        (
            "x-g-w",
            gcra(10, s, 10),
            warm(8, 8, s * 2),
            9,
            0,
            ms(20),
            ms(70),
        ),
    ];
    let mut kept_denials = 0;
    for (name, old, new, taken, charged, gap, step) in &cases {
        let mut denied = Vec::new();
        let warm_up = matches!(old.1, Limit::WarmUp(_));
        for rule in [Carry::Keep, Carry::Proportional, Carry::Reset] {
            let key = format!("{name}-{rule:?}");
            // No charge on a warm-up (neither backend charges one here).
            let charged = if warm_up { 0 } else { *charged };
            let taken = (*taken, 1);
            denied.push(
                same_as_the_core(&redis, &key, old, new, rule, taken, charged, *gap, *step).await,
            );
        }
        // What was carried shows: Keep refuses no less than Reset, and
        // the schedules reach denials.
        assert!(denied[0] >= denied[2], "{name}: denials {denied:?}");
        kept_denials += denied[0];
    }
    assert!(kept_denials > 3 * cases.len(), "{kept_denials} denials");
}

/// Regression: a limit lowered more than `DEBT_PERIODS + 1`-fold (17)
/// with a large debt: the core kept every permit taken (its carry had no
/// cap), Redis only what its stored formats hold (windows) or more than
/// the core's charge cap (GCRA, warm-up, a change of algorithm into them).
/// Both now keep the one debt cap, `DEBT_PERIODS` periods of the new
/// quota: every algorithm, lowered 50-fold, by every rule, compared over
/// 24 steps that span the cap and past it.
#[tokio::test]
async fn a_limit_lowered_past_the_cap_keeps_the_cores_debt() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let s = Duration::from_secs(1);
    let min = Duration::from_secs(60);
    // (name, old, new, (admissions, cost), charged, gap, step)
    type Case = (
        &'static str,
        Both,
        Both,
        (u64, u64),
        u64,
        Duration,
        Duration,
    );
    let cases: Vec<Case> = vec![
        (
            "gl",
            gcra(100, min, 100),
            gcra(2, min, 2),
            (1, 60),
            1_000,
            s,
            min,
        ),
        ("fl", fixed(100, min), fixed(2, min), (1, 60), 1_000, s, min),
        (
            "cl",
            calendar(CalendarUnit::Minute, 100),
            calendar(CalendarUnit::Minute, 2),
            (1, 60),
            1_000,
            s,
            min,
        ),
        (
            "sl",
            sliding(100, min, 6),
            sliding(2, min, 6),
            (1, 60),
            1_000,
            s,
            min,
        ),
        (
            "sl-geo",
            sliding(100, min, 6),
            sliding(3, min * 2, 4),
            (1, 90),
            600,
            s,
            min * 2,
        ),
        (
            "wl",
            warm(100, 100, s * 2),
            warm(2, 2, s),
            (1, 100),
            0,
            s / 10,
            s,
        ),
        // Across algorithms: the permits counted, charged into the new one
        // up to its cap.
        (
            "x-f-gl",
            fixed(100, min),
            gcra(2, min, 2),
            (1, 100),
            0,
            s,
            min,
        ),
        (
            "x-g-wl",
            gcra(100, s, 100),
            warm(2, 2, s),
            (1, 100),
            0,
            s / 100,
            s,
        ),
        (
            "x-s-fl",
            sliding(100, min, 6),
            fixed(3, min),
            (1, 100),
            0,
            s,
            min,
        ),
    ];
    for (name, old, new, taken, charged, gap, step) in &cases {
        let mut denied = Vec::new();
        for rule in [Carry::Keep, Carry::Proportional, Carry::Reset] {
            let key = format!("{name}-{rule:?}");
            denied.push(
                same_as_the_core(&redis, &key, old, new, rule, *taken, *charged, *gap, *step).await,
            );
        }
        // The debt shows: Keep is refused for more than a few steps.
        assert!(denied[0] > 4, "{name}: denials {denied:?}");
    }
}
