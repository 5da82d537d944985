//! Edge values, one table per concern, run for every algorithm they apply to:
//! extreme rates, extreme costs, the clock at its origin and after decades,
//! clocks going backwards, denials that must not write, and every
//! [`QuotaError`].

use std::time::Duration;

use tollgate::algorithm::sliding_log::{LogState, MAX_LOG_LIMIT};
use tollgate::algorithm::sliding_window::{MAX_SLOTS, WheelState};
use tollgate::{
    Algorithm, AllOf, Carry, Clock, CostError, Decision, FixedWindow, Gcra, KeyedLimiter, Limiter,
    ManualClock, Nanos, Quota, QuotaError, SlidingLog, SlidingWindow,
};

const NS: u64 = 1;
const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
const MINUTE: u64 = 60 * SEC;
const HOUR: u64 = 3_600 * SEC;
const YEAR: u64 = 365 * 86_400 * SEC;

/// Slots of every wheel in the tables: uneven for most periods.
const SLOTS: u32 = 7;

// ---------------------------------------------------------------------------
// Building any algorithm from one table row
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Gcra,
    Fixed,
    Log,
    Wheel,
}

const KINDS: [Kind; 4] = [Kind::Gcra, Kind::Fixed, Kind::Log, Kind::Wheel];

enum Built {
    Gcra(Gcra),
    Fixed(FixedWindow),
    Log(SlidingLog),
    Wheel(SlidingWindow),
}

/// Runs `$body` with `$alg` bound to the concrete algorithm inside `$built`.
macro_rules! with_algorithm {
    ($built:expr, $alg:ident => $body:expr) => {
        match $built {
            Built::Gcra($alg) => $body,
            Built::Fixed($alg) => $body,
            Built::Log($alg) => $body,
            Built::Wheel($alg) => $body,
        }
    };
}

fn quota(limit: u64, period_ns: u64, burst: u64) -> Quota {
    Quota::new(limit, Duration::from_nanos(period_ns))
        .and_then(|q| q.with_burst(burst))
        .expect("a valid quota")
}

fn build(kind: Kind, quota: Quota) -> Result<Built, QuotaError> {
    Ok(match kind {
        Kind::Gcra => Built::Gcra(Gcra::new(quota)?),
        Kind::Fixed => Built::Fixed(FixedWindow::new(quota)?),
        Kind::Log => Built::Log(SlidingLog::new(quota)?),
        Kind::Wheel => Built::Wheel(SlidingWindow::new(quota, SLOTS)?),
    })
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).expect("a duration below 2^64 ns")
}

/// Every number a decision carries, for comparisons that name them.
fn numbers(d: Decision) -> (bool, u64, u64, u64, u64) {
    (
        d.is_allowed(),
        d.limit(),
        d.remaining(),
        nanos(d.retry_after()),
        nanos(d.reset_after()),
    )
}

// ---------------------------------------------------------------------------
// 1. Rates from 1 per 10 years to 1.6·10¹⁰ per second
// ---------------------------------------------------------------------------

/// What one algorithm does with a row's quota.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// Runs it; after the burst taken at the origin, the first request fits
    /// again after this many ns.
    Retry(u64),
    /// Refuses it with the error whose `Debug` starts with this name.
    Refused(&'static str),
}
use Expect::{Refused, Retry};

struct RateRow {
    name: &'static str,
    limit: u64,
    period_ns: u64,
    burst: u64,
    /// In [`KINDS`] order: GCRA, fixed window, sliding log, sliding window.
    expect: [Expect; 4],
}

const RATES: &[RateRow] = &[
    RateRow {
        name: "1 per 10 years",
        limit: 1,
        period_ns: 10 * YEAR,
        burst: 1,
        expect: [Retry(10 * YEAR); 4],
    },
    RateRow {
        // The largest burst whose burst × interval leaves 36 years of clock
        // time in 64 bits of ticks.
        name: "1 per 10 years, burst 54",
        limit: 1,
        period_ns: 10 * YEAR,
        burst: 54,
        expect: [Retry(10 * YEAR); 4],
    },
    RateRow {
        name: "1 per second",
        limit: 1,
        period_ns: SEC,
        burst: 1,
        expect: [Retry(SEC); 4],
    },
    RateRow {
        // 3.33 ms apart: the next permit at 3,333,334 ns, not 3,333,333.
        name: "3 per 10 ms",
        limit: 3,
        period_ns: 10 * MS,
        burst: 3,
        expect: [
            Retry(3_333_334),
            Retry(10 * MS),
            Retry(10 * MS),
            Retry(10 * MS),
        ],
    },
    RateRow {
        // The GCRA rounds the interval up to 1/16 ns: 60,060,060.06 ns → 60,060,061.
        name: "999 per minute, burst 7",
        limit: 999,
        period_ns: MINUTE,
        burst: 7,
        expect: [
            Retry(60_060_061),
            Retry(MINUTE),
            Retry(MINUTE),
            Retry(MINUTE),
        ],
    },
    RateRow {
        name: "10^9 per second",
        limit: 1_000_000_000,
        period_ns: SEC,
        burst: 1_000_000_000,
        expect: [Retry(1), Retry(SEC), Refused("TooLarge"), Retry(SEC)],
    },
    RateRow {
        // The same rate with a limit a sliding log accepts.
        name: "10^6 per ms",
        limit: 1_000_000,
        period_ns: MS,
        burst: 1_000_000,
        expect: [Retry(1), Retry(MS), Retry(MS), Retry(MS)],
    },
    RateRow {
        name: "10 per ns, burst 1",
        limit: 10,
        period_ns: NS,
        burst: 1,
        expect: [Retry(1); 4],
    },
    RateRow {
        // 1.6·10¹⁰ per second, the fastest GCRA: 1/16 ns per permit, and
        // still a whole nanosecond to wait, never 0.
        name: "16 per ns",
        limit: 16,
        period_ns: NS,
        burst: 16,
        expect: [Retry(1), Refused("Overflow"), Retry(1), Retry(1)],
    },
    RateRow {
        name: "17 per ns",
        limit: 17,
        period_ns: NS,
        burst: 17,
        expect: [Refused("TooFast"), Refused("Overflow"), Retry(1), Retry(1)],
    },
    RateRow {
        name: "2^64 − 1 per second",
        limit: u64::MAX,
        period_ns: SEC,
        burst: u64::MAX,
        expect: [
            Refused("TooFast"),
            Refused("Overflow"),
            Refused("TooLarge"),
            Retry(SEC),
        ],
    },
];

/// Takes the whole capacity at `start` (one permit, then the rest at once),
/// checks the denial that follows, and that it is exact: denied 1 ns before
/// `retry_after`, admitted at it. Returns `retry_after` in ns.
fn burst_then_retry<A: Algorithm>(what: &str, algorithm: A, start: u64) -> u64 {
    let clock = ManualClock::starting_at(Nanos::new(start));
    let limiter = Limiter::with_clock(algorithm, clock.clone());
    let capacity = limiter.algorithm().capacity();

    let first = limiter.check();
    assert!(first.is_allowed(), "{what}: the first request: {first}");
    assert_eq!(
        (first.limit(), first.remaining()),
        (capacity, capacity - 1),
        "{what}"
    );
    if capacity > 1 {
        let rest = limiter.check_n(capacity - 1).expect("within capacity");
        assert!(rest.is_allowed(), "{what}: the rest of the burst: {rest}");
        assert_eq!(rest.remaining(), 0, "{what}");
    }

    let denied = limiter.check();
    assert!(
        denied.is_denied(),
        "{what}: one more than the burst: {denied}"
    );
    assert_eq!(denied.remaining(), 0, "{what}");
    let retry = nanos(denied.retry_after());
    assert!(retry > 0, "{what}: a denial with retry_after 0");
    assert!(
        denied.reset_after() >= denied.retry_after(),
        "{what}: {denied}"
    );

    // No overflow into allow-all: the same instant keeps answering the same.
    for _ in 0..1_000 {
        assert_eq!(limiter.check(), denied, "{what}");
    }
    assert!(limiter.check_n(capacity).expect("capacity").is_denied());

    clock.set(Nanos::new(start + retry - 1));
    let early = limiter.check();
    assert!(
        early.is_denied(),
        "{what}: admitted 1 ns before retry_after"
    );
    assert_eq!(nanos(early.retry_after()), 1, "{what}: {early}");
    clock.set(Nanos::new(start + retry));
    let on_time = limiter.check();
    assert!(
        on_time.is_allowed(),
        "{what}: refused at retry_after: {on_time}"
    );
    retry
}

/// Where the fixed window and the wheel expect the first retry after a burst
/// at `start`: the next window, or the start of the slot `n` after the
/// burst's.
fn window_retry(kind: Kind, period: u64, start: u64) -> Option<u64> {
    let (period, start) = (u128::from(period), u128::from(start));
    let retry = match kind {
        Kind::Fixed => period - start % period,
        Kind::Wheel => {
            let n = u128::from(SLOTS);
            let epoch = start * n / period;
            ((epoch + n) * period).div_ceil(n) - start
        }
        Kind::Gcra | Kind::Log => return None,
    };
    Some(u64::try_from(retry).expect("fits"))
}

#[test]
fn every_rate_admits_its_burst_and_retries_exactly() {
    for row in RATES {
        let q = quota(row.limit, row.period_ns, row.burst);
        for (kind, expect) in KINDS.into_iter().zip(row.expect) {
            let what = format!("{} ({kind:?})", row.name);
            match (build(kind, q), expect) {
                (Ok(built), Retry(at_origin)) => {
                    // At the clock's origin, then at an unaligned instant
                    // after years of uptime.
                    let retry = with_algorithm!(built, a => burst_then_retry(&what, a, 0));
                    assert_eq!(retry, at_origin, "{what} at the origin");
                    let start = 5 * YEAR + 123_456_789_012;
                    let built = build(kind, q).expect("built once already");
                    let retry = with_algorithm!(built, a => burst_then_retry(&what, a, start));
                    let expected = window_retry(kind, row.period_ns, start).unwrap_or(at_origin);
                    assert_eq!(retry, expected, "{what} at {start} ns");
                }
                (Err(error), Refused(name)) => {
                    assert!(
                        format!("{error:?}").starts_with(name),
                        "{what}: expected {name}, got {error:?}"
                    );
                }
                (Ok(_), Refused(name)) => panic!("{what}: accepted, expected {name}"),
                (Err(error), Retry(_)) => panic!("{what}: refused with {error}"),
            }
        }
    }
}

#[test]
fn fractional_rates_never_run_ahead_of_the_quota() {
    // Permits taken as soon as allowed (at one instant while they fit, then
    // at `retry_after`): the n-th after the burst is never earlier than
    // n·period/limit. With a burst above one nanosecond's worth of permits
    // plus one, the fraction of a permit left when the clock moves by whole
    // nanoseconds stays in the bucket, so it is also never later than the
    // interval's rounding (under 1/16 ns per permit) plus 1 ns; with a burst
    // of 1 that fraction overflows, and only the first bound holds.
    for (limit, period, burst) in [
        (3, 10 * MS, 1),
        (3, 10 * MS, 2),
        (999, MINUTE, 2),
        (7, 3, 4),
        (13, 7, 3),
        (31, 2, 16),
        (16, 1, 32),
    ] {
        let what = format!("{limit} per {period} ns, burst {burst}");
        let gcra = Gcra::new(quota(limit, period, burst)).expect("valid");
        let clock = ManualClock::new();
        let limiter = Limiter::with_clock(gcra, clock.clone());
        for _ in 0..burst {
            assert!(limiter.check().is_allowed(), "{what}");
        }
        assert!(limiter.check().is_denied(), "{what}");
        let (limit, period) = (u128::from(limit), u128::from(period));
        let mut n = 0u128;
        for _ in 0..2_000 {
            let d = limiter.check();
            if d.is_denied() {
                assert!(d.retry_after() > Duration::ZERO, "{what}: {d}");
                clock.advance(d.retry_after());
                assert!(
                    limiter.peek().is_allowed(),
                    "{what}: refused at retry_after"
                );
                continue;
            }
            n += 1;
            let now = u128::from(clock.now().as_u64());
            assert!(
                now * limit >= n * period,
                "{what}: permit {n} at {now} ns, ahead of the rate"
            );
            assert!(
                burst == 1 || 16 * limit * now < 16 * n * period + n * limit + 16 * limit,
                "{what}: permit {n} at {now} ns, later than the rounding allows"
            );
        }
        assert!(n >= 500, "{what}: {n} permits");
    }
}

// ---------------------------------------------------------------------------
// 2. Costs: 0, 1, the capacity, one more, u64::MAX
// ---------------------------------------------------------------------------

fn costs<A: Algorithm>(what: &str, algorithm: A) {
    let clock = ManualClock::starting_at(Nanos::new(HOUR));
    let limiter = Limiter::with_clock(algorithm, clock);
    let capacity = limiter.algorithm().capacity();

    // Cost 0: allowed, takes nothing, on a fresh and on an exhausted limiter.
    let zero = limiter.check_n(0).expect("cost 0");
    assert!(zero.is_allowed(), "{what}: {zero}");
    assert_eq!(zero.remaining(), capacity, "{what}");
    assert_eq!(limiter.check_n(0).expect("cost 0"), zero, "{what}");

    // Cost 1.
    let one = limiter.check_n(1).expect("cost 1");
    assert!(one.is_allowed(), "{what}: {one}");
    assert_eq!(one.remaining(), capacity - 1, "{what}");

    // The whole capacity no longer fits; the rest does, exactly.
    let all = limiter.check_n(capacity).expect("the capacity");
    assert!(all.is_denied(), "{what}: {all}");
    assert_eq!(all.remaining(), capacity - 1, "{what}");
    let rest = limiter.check_n(capacity - 1).expect("the rest");
    assert!(rest.is_allowed(), "{what}: {rest}");
    assert_eq!(rest.remaining(), 0, "{what}");

    let zero = limiter.check_n(0).expect("cost 0");
    assert!(zero.is_allowed(), "{what}: cost 0 when exhausted: {zero}");
    assert_eq!(zero.remaining(), 0, "{what}");
    assert!(limiter.check().is_denied(), "{what}");

    // Above the capacity: an error, not a denial, with the numbers right.
    for cost in [capacity + 1, u64::MAX] {
        let error: CostError = limiter.check_n(cost).expect_err("above the capacity");
        assert_eq!((error.cost(), error.capacity()), (cost, capacity), "{what}");
        assert_eq!(limiter.peek_n(cost), Err(error), "{what}");
        let message = error.to_string();
        assert!(
            message.contains(&cost.to_string()) && message.contains(&capacity.to_string()),
            "{what}: {message}"
        );
    }
}

fn fresh_costs<A: Algorithm>(what: &str, algorithm: A) {
    let limiter = Limiter::with_clock(algorithm, ManualClock::new());
    let capacity = limiter.algorithm().capacity();
    let all = limiter.check_n(capacity).expect("the capacity");
    assert!(
        all.is_allowed(),
        "{what}: the whole capacity at once: {all}"
    );
    assert_eq!(all.remaining(), 0, "{what}");
    assert!(limiter.check().is_denied(), "{what}");
}

#[test]
fn costs_zero_one_capacity_one_more_and_max() {
    for q in [
        quota(10, SEC, 4),
        quota(1, MINUTE, 1),
        quota(1_000, MS, 1_000),
    ] {
        for kind in KINDS {
            let what = format!("{q} ({kind:?})");
            with_algorithm!(build(kind, q).expect("valid"), a => costs(&what, a));
            with_algorithm!(build(kind, q).expect("valid"), a => fresh_costs(&what, a));
        }
    }
}

#[test]
fn costs_above_the_capacity_are_denied_forever_by_the_raw_transitions() {
    // The pure transitions take any cost (the Limiter refuses these earlier
    // with a CostError): denied, retry_after at its maximum, nothing written,
    // on a fresh state and on a used one, without overflowing.
    let q = quota(10, SEC, 4);
    let gcra = Gcra::new(q).expect("valid");
    let fixed = FixedWindow::new(q).expect("valid");
    let (_, gcra_used) = gcra.transition(0, Nanos::new(SEC), 1);
    let (_, fixed_used) = fixed.transition(0, Nanos::new(SEC), 1);
    for cost in [5, 11, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
        for tat in [0, gcra_used.expect("admitted")] {
            if cost <= 10 && tat == 0 {
                continue;
            }
            let (d, next) = gcra.transition(tat, Nanos::new(SEC + 1), cost);
            assert!(d.is_denied(), "gcra cost {cost}: {d}");
            assert_eq!(
                (next, nanos(d.retry_after())),
                (None, u64::MAX),
                "gcra cost {cost}"
            );
        }
        if cost <= 10 {
            continue;
        }
        for word in [0, fixed_used.expect("admitted")] {
            let (d, next) = fixed.transition(word, Nanos::new(SEC + 1), cost);
            assert!(d.is_denied(), "fixed window cost {cost}: {d}");
            assert_eq!(
                (next, nanos(d.retry_after())),
                (None, u64::MAX),
                "fixed cost {cost}"
            );
        }
        let log = SlidingLog::new(q).expect("valid");
        let wheel = SlidingWindow::new(q, SLOTS).expect("valid");
        let mut log_state = LogState::default();
        let mut wheel_state = wheel.new_state();
        for used in [false, true] {
            if used {
                log.admit(&mut log_state, Nanos::new(SEC), 1);
                wheel.admit(&mut wheel_state, Nanos::new(SEC), 1);
            }
            let d = log.decide(&log_state, Nanos::new(SEC + 1), cost);
            assert!(d.is_denied(), "sliding log cost {cost}: {d}");
            assert_eq!(nanos(d.retry_after()), u64::MAX, "sliding log cost {cost}");
            let d = wheel.decide(&wheel_state, Nanos::new(SEC + 1), cost);
            assert!(d.is_denied(), "sliding window cost {cost}: {d}");
            assert_eq!(
                nanos(d.retry_after()),
                u64::MAX,
                "sliding window cost {cost}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// 3. The clock at its origin and after decades
// ---------------------------------------------------------------------------

/// Decisions for a fixed script of (offset, cost) from `base`.
fn script_from<A: Algorithm>(algorithm: A, base: u64, script: &[(u64, u64)]) -> Vec<Decision> {
    let clock = ManualClock::starting_at(Nanos::new(base));
    let limiter = Limiter::with_clock(algorithm, clock.clone());
    script
        .iter()
        .map(|&(offset, cost)| {
            clock.set(Nanos::new(base + offset));
            limiter.check_n(cost).expect("within capacity")
        })
        .collect()
}

/// The largest burst a GCRA of 17 per second accepts: `17` reduces to no
/// fraction with a denominator up to 16, so ticks are 1/16 ns, and
/// `burst × ⌈16·10⁹/17⌉ + 36 years × 16` must fit in a `u64`.
const LARGEST_17_PER_SECOND_BURST: u64 = 299_633_578;

#[test]
fn the_origin_and_decades_of_uptime_behave_the_same() {
    // (quota, time unit of the script, whether 5 and 30 years are whole
    // multiples of the period). Unaligned, only the algorithms that do not
    // count from the clock's origin (GCRA, sliding log) are compared.
    let rows = [
        (quota(3, 10 * MS, 2), 10 * MS, true),
        (quota(5, SEC, 5), SEC, true),
        (quota(999, MINUTE, 7), MINUTE, true),
        (quota(16, 2, 16), 2, true),
        (quota(17, SEC, LARGEST_17_PER_SECOND_BURST), SEC, true),
        // The largest burst at 1 per year; the script and its waits end
        // within the 36 years of clock time promised.
        (quota(1, YEAR, 548), YEAR / 12, true),
        (quota(1, 10 * YEAR, 1), MINUTE, false),
    ];
    let bases = [0, 5 * YEAR, 30 * YEAR];
    for (q, unit, aligned) in rows {
        for kind in KINDS {
            if !aligned && matches!(kind, Kind::Fixed | Kind::Wheel) {
                continue;
            }
            let Ok(built) = build(kind, q) else {
                continue; // refused: see the rate table
            };
            let capacity = with_algorithm!(built, a => a.capacity());
            let two = capacity.min(2);
            let mut script = vec![(0, 1), (0, capacity - 1), (0, 1), (1, 1), (unit / 3, two)];
            for k in [1, 2, 3, 5, 8] {
                let t = (k * unit / 3).max(1);
                script.extend([(t - 1, 1), (t, 1), (t, two), (t + 1, 1)]);
            }
            script.extend([(10 * unit, two), (10 * unit, 1), (10 * unit + 1, 1)]);
            let runs: Vec<Vec<Decision>> = bases
                .iter()
                .map(|&base| {
                    with_algorithm!(build(kind, q).expect("valid"), a => script_from(a, base, &script))
                })
                .collect();
            assert!(
                runs[0].iter().any(|d| d.is_allowed()) && runs[0].iter().any(|d| d.is_denied()),
                "{q} ({kind:?}): {:?}",
                runs[0]
            );
            for (base, run) in bases.iter().zip(&runs).skip(1) {
                for (i, (at_origin, later)) in runs[0].iter().zip(run).enumerate() {
                    assert_eq!(
                        numbers(*at_origin),
                        numbers(*later),
                        "{q} ({kind:?}): step {i} {:?} differs at base {base} ns",
                        script[i]
                    );
                }
            }
        }
    }
}

/// Regression: `Gcra::new` accepted any `burst·T` up to `u64::MAX` ticks, but
/// the TAT runs up to `now + burst·T`, so such a limiter failed closed long
/// before the 36 years of clock time its docs promise (1 per year with a burst
/// of 584 refused its burst after a few months; 1 per 584 years admitted only
/// at the clock's origin). Every accepted quota now runs for 36 years.
#[test]
fn every_accepted_gcra_admits_its_whole_burst_after_36_years() {
    let mut accepted = 0;
    for (limit, period, burst, ok) in [
        (1, YEAR, 548, true),
        (1, YEAR, 549, false),
        (1, YEAR, 584, false),
        (1, 10 * YEAR, 54, true),
        (1, 10 * YEAR, 58, false),
        (1, u64::MAX - 36 * YEAR, 1, true),
        (1, u64::MAX, 1, false),
        (17, SEC, LARGEST_17_PER_SECOND_BURST, true),
        (17, SEC, LARGEST_17_PER_SECOND_BURST + 1, false),
        (16, NS, 100_000_000_000_000_000, true),
        (16, NS, u64::MAX / 2, false),
    ] {
        let what = format!("{limit} per {period} ns, burst {burst}");
        match Gcra::new(quota(limit, period, burst)) {
            Ok(gcra) => {
                assert!(ok, "{what}: accepted");
                accepted += 1;
                for start in [0, 30 * YEAR, 36 * YEAR] {
                    let limiter = Limiter::with_clock(
                        gcra.clone(),
                        ManualClock::starting_at(Nanos::new(start)),
                    );
                    let d = limiter.check_n(burst).expect("the burst");
                    assert!(d.is_allowed(), "{what}: the burst at {start} ns: {d}");
                    assert!(limiter.check().is_denied(), "{what}");
                }
            }
            Err(error) => {
                assert!(!ok, "{what}: refused with {error}");
                assert!(
                    matches!(error, QuotaError::Overflow { .. }),
                    "{what}: {error:?}"
                );
            }
        }
    }
    assert_eq!(accepted, 5);
}

// ---------------------------------------------------------------------------
// 4. A clock that goes backwards never re-credits
// ---------------------------------------------------------------------------

fn backwards<A: Algorithm>(what: &str, algorithm: A) {
    let start = 5 * YEAR + 7;
    let clock = ManualClock::starting_at(Nanos::new(start));
    let limiter = Limiter::with_clock(algorithm, clock.clone());
    let capacity = limiter.algorithm().capacity();
    assert!(limiter.check_n(capacity).expect("capacity").is_allowed());
    let before = limiter.peek();
    assert!(before.is_denied(), "{what}");
    for back in [1, SEC, HOUR] {
        clock.set(Nanos::new(start - back));
        for cost in [1, capacity] {
            let d = limiter.check_n(cost).expect("capacity");
            assert!(d.is_denied(), "{what}: {back} ns back, cost {cost}: {d}");
            assert_eq!(d.remaining(), 0, "{what}: {back} ns back");
            // The wait, counted from the earlier reading, is no shorter.
            assert!(
                d.retry_after() >= before.retry_after(),
                "{what}: {back} ns back, retry_after {:?} < {:?}",
                d.retry_after(),
                before.retry_after()
            );
        }
        clock.set(Nanos::new(start));
        assert_eq!(
            limiter.peek(),
            before,
            "{what}: {back} ns back changed the state"
        );
    }
}

#[test]
fn a_clock_going_backwards_never_recredits() {
    for q in [
        quota(10, SEC, 3),
        quota(1, 10 * YEAR, 1),
        quota(16, NS, 16),
        quota(5, 2 * HOUR, 5),
    ] {
        for kind in KINDS {
            let what = format!("{q} ({kind:?})");
            let Ok(built) = build(kind, q) else {
                continue;
            };
            with_algorithm!(built, a => backwards(&what, a));
        }
    }
}

#[test]
fn a_clock_going_backwards_writes_nothing_in_the_transitions() {
    let q = quota(10, SEC, 3);
    let start = 5 * YEAR + 7;
    let gcra = Gcra::new(q).expect("valid");
    let fixed = FixedWindow::new(q).expect("valid");
    let log = SlidingLog::new(q).expect("valid");
    let wheel = SlidingWindow::new(q, SLOTS).expect("valid");
    let tat = gcra
        .transition(0, Nanos::new(start), 3)
        .1
        .expect("admitted");
    let word = fixed
        .transition(0, Nanos::new(start), 10)
        .1
        .expect("admitted");
    let mut log_state = LogState::default();
    log.admit(&mut log_state, Nanos::new(start), 10);
    let mut wheel_state = wheel.new_state();
    wheel.admit(&mut wheel_state, Nanos::new(start), 10);
    for back in [1, SEC, HOUR] {
        let then = Nanos::new(start - back);
        let (d, next) = gcra.transition(tat, then, 1);
        assert!(d.is_denied() && next.is_none(), "gcra {back} back: {d}");
        let (d, next) = fixed.transition(word, then, 1);
        assert!(
            d.is_denied() && next.is_none(),
            "fixed window {back} back: {d}"
        );
        let copy = log_state.clone();
        assert!(log.decide(&log_state, then, 1).is_denied());
        assert_eq!(log_state, copy);
        let copy = wheel_state.clone();
        assert!(wheel.decide(&wheel_state, then, 1).is_denied());
        assert_eq!(wheel_state, copy);
    }
}

// ---------------------------------------------------------------------------
// 5. A rejection leaves the state bit for bit unchanged
// ---------------------------------------------------------------------------

/// Requests every denial table below tries: instants relative to the last
/// admission, and costs.
fn probes(period: u64) -> Vec<(u64, u64)> {
    let mut probes = Vec::new();
    for offset in [
        0,
        1,
        period / 7,
        period / 2,
        period - 1,
        period,
        period + 1,
        3 * period,
    ] {
        for cost in [0, 1, 2, 3, 9, 10, 11, 1_000, u64::MAX] {
            probes.push((offset, cost));
        }
    }
    probes
}

/// States reached by scripts of admissions, ending at `last` ns.
fn scripts(start: u64, period: u64) -> Vec<Vec<(u64, u64)>> {
    vec![
        vec![],
        vec![(start, 1)],
        vec![(start, 3)],
        vec![(start, 10)],
        vec![(start, 4), (start + period / 3, 3), (start + period / 2, 3)],
        vec![(start, 9), (start + period - 1, 1)],
        vec![(start, 5), (start + period, 5), (start + period + 1, 5)],
    ]
}

#[test]
fn word_transitions_write_nothing_on_a_denial() {
    let period = SEC;
    let start = 30 * YEAR + 11;
    for burst in [3, 10] {
        let q = quota(10, period, burst);
        let gcra = Gcra::new(q).expect("valid");
        let fixed = FixedWindow::new(q).expect("valid");
        let (mut denials, mut admissions) = (0, 0);
        for script in scripts(start, period) {
            let (mut tat, mut word, mut last) = (0, 0, start);
            for &(t, cost) in &script {
                tat = gcra.transition(tat, Nanos::new(t), cost).1.unwrap_or(tat);
                word = fixed
                    .transition(word, Nanos::new(t), cost)
                    .1
                    .unwrap_or(word);
                last = t;
            }
            for (offset, cost) in probes(period) {
                let now = Nanos::new(last + offset);
                for (name, state, transition) in [
                    ("gcra", tat, gcra.transition(tat, now, cost)),
                    ("fixed window", word, fixed.transition(word, now, cost)),
                ] {
                    let (d, next) = transition;
                    if d.is_denied() {
                        denials += 1;
                        assert_eq!(
                            next, None,
                            "{name} {script:?} +{offset} cost {cost}: wrote on {d}"
                        );
                        assert!(d.retry_after() > Duration::ZERO, "{name}: {d}");
                    } else {
                        admissions += 1;
                        // Cost 0 only looks; anything else moves the state.
                        assert_eq!(next.is_none(), cost == 0, "{name} cost {cost}");
                        assert_ne!(
                            next,
                            Some(state),
                            "{name} cost {cost}: admitted without a change"
                        );
                    }
                }
            }
        }
        assert!(
            denials > 100 && admissions > 100,
            "{denials} denials, {admissions} admissions"
        );
    }
}

#[test]
fn locked_decisions_never_change_the_state() {
    let period = SEC;
    let start = 30 * YEAR + 11;
    let q = quota(10, period, 10);
    let log = SlidingLog::new(q).expect("valid");
    let wheel = SlidingWindow::new(q, SLOTS).expect("valid");
    let mut denials = 0;
    for script in scripts(start, period) {
        let mut log_state = LogState::default();
        let mut wheel_state: WheelState = wheel.new_state();
        let mut last = start;
        for &(t, cost) in &script {
            if log.decide(&log_state, Nanos::new(t), cost).is_allowed() {
                log.admit(&mut log_state, Nanos::new(t), cost);
            }
            if wheel.decide(&wheel_state, Nanos::new(t), cost).is_allowed() {
                wheel.admit(&mut wheel_state, Nanos::new(t), cost);
            }
            last = t;
        }
        for (offset, cost) in probes(period) {
            let now = Nanos::new(last + offset);
            let (log_copy, wheel_copy) = (log_state.clone(), wheel_state.clone());
            let d = log.decide(&log_state, now, cost);
            assert_eq!(log_state, log_copy);
            assert_eq!(
                log.decide(&log_state, now, cost),
                d,
                "sliding log: not a function"
            );
            let e = wheel.decide(&wheel_state, now, cost);
            assert_eq!(wheel_state, wheel_copy);
            assert_eq!(
                wheel.decide(&wheel_state, now, cost),
                e,
                "sliding window: not a function"
            );
            for (name, d) in [("sliding log", d), ("sliding window", e)] {
                if d.is_denied() {
                    denials += 1;
                    assert!(
                        d.retry_after() > Duration::ZERO,
                        "{name} +{offset} cost {cost}: {d}"
                    );
                }
            }
        }
    }
    assert!(denials > 100, "{denials}");
}

/// Through the limiter: a denial (from the lock or from the published hint)
/// leaves every answer `peek_n` gives as it was.
fn denial_then_peek<A: Algorithm>(what: &str, algorithm: A) {
    let clock = ManualClock::starting_at(Nanos::new(HOUR));
    let limiter = Limiter::with_clock(algorithm, clock.clone());
    let capacity = limiter.algorithm().capacity();
    let look = |limiter: &Limiter<A, ManualClock>| -> Vec<Decision> {
        [0, 1, 2, capacity - 1, capacity]
            .into_iter()
            .map(|cost| limiter.peek_n(cost).expect("within capacity"))
            .collect()
    };
    // Partly used: a request for one more than remains is denied.
    assert!(
        limiter
            .check_n(capacity - 2)
            .expect("capacity")
            .is_allowed()
    );
    clock.advance(Duration::from_nanos(1));
    let before = look(&limiter);
    for _ in 0..3 {
        assert!(
            limiter.check_n(capacity).expect("capacity").is_denied(),
            "{what}"
        );
        assert_eq!(
            look(&limiter),
            before,
            "{what}: a partial denial changed the state"
        );
    }
    // Exhausted: cost 1 is denied (from the hint, for a locked state).
    assert!(limiter.check_n(2).expect("capacity").is_allowed(), "{what}");
    let before = look(&limiter);
    assert!(before[1].is_denied(), "{what}");
    for _ in 0..3 {
        let d = limiter.check();
        assert_eq!(d, before[1], "{what}: check and peek disagree");
        assert_eq!(look(&limiter), before, "{what}: a denial changed the state");
    }
}

#[test]
fn a_denial_through_the_limiter_changes_nothing_peek_can_see() {
    for q in [
        quota(10, SEC, 4),
        quota(3, 10 * MS, 3),
        quota(1_000, MINUTE, 1_000),
    ] {
        for kind in KINDS {
            let what = format!("{q} ({kind:?})");
            with_algorithm!(build(kind, q).expect("valid"), a => denial_then_peek(&what, a));
        }
    }
}

// ---------------------------------------------------------------------------
// 6. Every QuotaError, with a message that names the problem
// ---------------------------------------------------------------------------

/// One refusal: what was asked, the outcome, the expected variant (the start
/// of its `Debug`), and words its message must contain.
type ErrorCase = (
    &'static str,
    Result<(), QuotaError>,
    &'static str,
    &'static [&'static str],
);

#[test]
fn quota_errors_name_the_problem() {
    let too_long = Duration::from_nanos(u64::MAX) + Duration::from_nanos(1);
    let cases: Vec<ErrorCase> = vec![
        (
            "zero limit",
            Quota::new(0, Duration::from_secs(1)).map(drop),
            "ZeroLimit",
            &["limit"],
        ),
        (
            "per_second(0)",
            Quota::per_second(0).map(drop),
            "ZeroLimit",
            &["limit"],
        ),
        (
            "per_day(0)",
            Quota::per_day(0).map(drop),
            "ZeroLimit",
            &["limit"],
        ),
        (
            "zero period",
            Quota::new(1, Duration::ZERO).map(drop),
            "ZeroPeriod",
            &["period"],
        ),
        (
            "zero burst",
            Quota::per_second(1).and_then(|q| q.with_burst(0)).map(drop),
            "ZeroBurst",
            &["burst"],
        ),
        (
            "period of 2^64 ns",
            Quota::new(1, too_long).map(drop),
            "PeriodTooLong",
            &["period", "2^64"],
        ),
        (
            "period of Duration::MAX",
            Quota::new(1, Duration::MAX).map(drop),
            "PeriodTooLong",
            &["period"],
        ),
        (
            "gcra: 17 per ns",
            Gcra::new(quota(17, NS, 1)).map(drop),
            "TooFast",
            &["gcra", "16000000000 per second"],
        ),
        (
            "gcra: 2^64 − 1 per ns",
            Gcra::new(quota(u64::MAX, NS, 1)).map(drop),
            "TooFast",
            &["gcra"],
        ),
        (
            "gcra: 1 per 10 years, burst 55",
            Gcra::new(quota(1, 10 * YEAR, 55)).map(drop),
            "Overflow",
            &["gcra", "burst", "64 bits"],
        ),
        (
            "gcra: 1 per 584 years, burst 2",
            Gcra::new(quota(1, u64::MAX, 2)).map(drop),
            "Overflow",
            &["gcra", "64 bits"],
        ),
        (
            "fixed window: 2^40 per µs",
            FixedWindow::new(quota(1 << 40, US, 1)).map(drop),
            "Overflow",
            &["fixed window", "64 bits"],
        ),
        (
            "fixed window: 2^64 − 1 per second",
            FixedWindow::new(quota(u64::MAX, SEC, 1)).map(drop),
            "Overflow",
            &["fixed window"],
        ),
        (
            "sliding log: 2^20 + 1",
            SlidingLog::new(quota(MAX_LOG_LIMIT + 1, SEC, 1)).map(drop),
            "TooLarge",
            &["sliding log", "limit", "1048576"],
        ),
        (
            "sliding window: 0 slots",
            SlidingWindow::new(quota(1, SEC, 1), 0).map(drop),
            "InvalidParameter",
            &["sliding window", "slots"],
        ),
        (
            "sliding window: 2^16 + 1 slots",
            SlidingWindow::new(quota(1, SEC, 1), MAX_SLOTS + 1).map(drop),
            "TooLarge",
            &["sliding window", "slots", "65536"],
        ),
    ];
    for (what, result, variant, words) in cases {
        let error = result.expect_err(what);
        assert!(
            format!("{error:?}").starts_with(variant),
            "{what}: {error:?}"
        );
        let message = error.to_string();
        assert!(!message.is_empty(), "{what}");
        for word in words {
            assert!(
                message.contains(word),
                "{what}: {message:?} does not name {word:?}"
            );
        }
    }

    // The largest accepted values, one step below each refusal.
    assert!(Quota::new(1, Duration::from_nanos(u64::MAX)).is_ok());
    assert!(Gcra::new(quota(16, NS, 1)).is_ok());
    assert!(Gcra::new(quota(1, 10 * YEAR, 54)).is_ok());
    assert!(Gcra::new(quota(17, SEC, LARGEST_17_PER_SECOND_BURST)).is_ok());
    assert!(Gcra::new(quota(17, SEC, LARGEST_17_PER_SECOND_BURST + 1)).is_err());
    let longest = u64::MAX - 36 * YEAR;
    assert!(Gcra::new(quota(1, longest, 1)).is_ok());
    assert!(Gcra::new(quota(1, longest + 1, 1)).is_err());
    assert!(Gcra::new(quota(1, YEAR, 548)).is_ok());
    assert!(Gcra::new(quota(1, YEAR, 549)).is_err());
    assert!(FixedWindow::new(quota(1_000_000_000, SEC, 1)).is_ok());
    assert!(SlidingLog::new(quota(MAX_LOG_LIMIT, SEC, 1)).is_ok());
    assert!(SlidingWindow::new(quota(1, SEC, 1), MAX_SLOTS).is_ok());
    assert!(SlidingWindow::new(quota(u64::MAX, u64::MAX, 1), 1).is_ok());
}

// ---------------------------------------------------------------------------
// 7. The end of the clock: a finite wait is a wait a clock can finish
// ---------------------------------------------------------------------------

/// Every finite wait a decision at `now` reports names an instant a
/// [`Nanos`] can hold, and is true there: at `now + retry_after` the same
/// request is admitted; at `now + reset_after` the limiter is as if never used
/// (a peek of cost 0 reports `reset_after` 0). "Never" is `u64::MAX`.
fn finite_waits_come_true<A: Algorithm>(
    what: &str,
    limiter: &Limiter<A, ManualClock>,
    clock: &ManualClock,
    cost: u64,
    d: Decision,
) {
    let now = clock.now().as_u64();
    let retry = nanos(d.retry_after());
    if d.is_denied() && retry != u64::MAX {
        let at = now
            .checked_add(retry)
            .unwrap_or_else(|| panic!("{what}: retry_after {retry} ns at {now} is past the end"));
        clock.set(Nanos::new(at));
        let then = limiter.peek_n(cost).expect("within capacity");
        assert!(then.is_allowed(), "{what}: refused at retry_after: {then}");
        clock.set(Nanos::new(now));
    }
    let reset = nanos(d.reset_after());
    if reset != u64::MAX {
        let at = now
            .checked_add(reset)
            .unwrap_or_else(|| panic!("{what}: reset_after {reset} ns at {now} is past the end"));
        clock.set(Nanos::new(at));
        let then = limiter.peek_n(0).expect("cost 0");
        assert_eq!(
            then.reset_after(),
            Duration::ZERO,
            "{what}: not reset at reset_after ({reset} ns from {now}): {then}"
        );
        clock.set(Nanos::new(now));
    }
}

fn end_of_the_clock<A: Algorithm>(what: &str, algorithm: A, start: u64) -> usize {
    let clock = ManualClock::starting_at(Nanos::new(start));
    let limiter = Limiter::with_clock(algorithm, clock.clone());
    let capacity = limiter.algorithm().capacity();
    let mut denials = 0;
    for step in 0..6 {
        let cost = if step % 2 == 0 { 1 } else { capacity };
        let d = limiter.check_n(cost).expect("within capacity");
        denials += usize::from(d.is_denied());
        let what = format!("{what}, step {step} at {}: {d}", clock.now().as_u64());
        finite_waits_come_true(&what, &limiter, &clock, cost, d);
        clock.set(Nanos::new(clock.now().as_u64().saturating_add(capacity)));
    }
    denials
}

/// Regression: a fixed window of 1/s on a clock at
/// `Nanos::MAX` denied the second request with `retry_after` ≈ 290 ms, the
/// start of a window after the last instant a clock can name. The same class
/// for every algorithm: a finite wait must end on a nameable instant, and be
/// true there.
#[test]
fn no_finite_wait_points_past_the_end_of_the_clock() {
    let clock = ManualClock::starting_at(Nanos::MAX);
    let limiter = Limiter::with_clock(
        FixedWindow::new(quota(1, SEC, 1)).expect("valid"),
        clock.clone(),
    );
    assert!(limiter.check().is_allowed());
    let denied = limiter.check();
    assert!(denied.is_denied());
    assert_eq!(nanos(denied.retry_after()), u64::MAX, "{denied}");
    assert_eq!(nanos(denied.reset_after()), u64::MAX, "{denied}");

    let mut denials = 0;
    for q in [
        quota(1, SEC, 1),
        quota(3, SEC, 2),
        quota(10, HOUR, 10),
        quota(7, 3, 4),
        quota(16, NS, 16),
    ] {
        let period = q.period_nanos();
        for start in [
            u64::MAX,
            u64::MAX - 1,
            u64::MAX - period / 2,
            u64::MAX - period,
            u64::MAX - 2 * period,
            u64::MAX / 3 + 1,
            u64::MAX / 16,
        ] {
            for kind in KINDS {
                let Ok(built) = build(kind, q) else {
                    continue;
                };
                let what = format!("{q} ({kind:?}) from {start}");
                denials += with_algorithm!(built, a => end_of_the_clock(&what, a, start));
            }
        }
    }
    assert!(denials > 50, "{denials} denials");
}

/// Regression: a GCRA past the end of its ticks denied
/// every request but reported `remaining = burst` and `reset_after = 0`,
/// which reads as "full". It is closed: none remain, and neither a retry nor
/// a reset ever comes.
#[test]
fn a_gcra_past_its_lifetime_reports_itself_closed() {
    // 1/s counts in whole ns: the last permit would end past u64::MAX.
    // 3/s counts in thirds of a ns: its ticks end at u64::MAX / 3 ns.
    for (q, at) in [
        (quota(1, SEC, 1), u64::MAX),
        (quota(10, SEC, 10), u64::MAX - 1),
        (quota(3, SEC, 3), u64::MAX / 3 + 1),
        (quota(3, SEC, 3), u64::MAX),
    ] {
        let limiter = Limiter::with_clock(
            Gcra::new(q).expect("valid"),
            ManualClock::starting_at(Nanos::new(at)),
        );
        for cost in [0, 1, q.burst()] {
            let d = limiter.check_n(cost).expect("within capacity");
            let what = format!("{q} at {at}, cost {cost}: {d}");
            if cost == 0 {
                assert_eq!(d.remaining(), 0, "{what}");
                continue;
            }
            assert!(d.is_denied(), "{what}");
            assert_eq!(
                (
                    d.remaining(),
                    nanos(d.retry_after()),
                    nanos(d.reset_after())
                ),
                (0, u64::MAX, u64::MAX),
                "{what}"
            );
        }
    }
    // Near the end, what remains is what still fits before it.
    let g = Gcra::new(quota(1, SEC, 10)).expect("valid");
    let limiter = Limiter::with_clock(g, ManualClock::starting_at(Nanos::new(u64::MAX - 3 * SEC)));
    let d = limiter.check();
    assert!(d.is_allowed(), "{d}");
    assert_eq!(d.remaining(), 2, "{d}");
}

// ---------------------------------------------------------------------------
// 8. AllOf: reset_after is the time until every limit is full
// ---------------------------------------------------------------------------

/// Regression: AllOf of 10/s and 100/day reported the
/// binding limit's `reset_after` (100 ms) though the day limit held the permit
/// for 864 s: a `RateLimit-Reset` built from it understated.
#[test]
fn all_of_resets_when_its_slowest_limit_is_full() {
    let clock = ManualClock::new();
    let limits = AllOf::new(vec![
        Gcra::new(quota(10, SEC, 10)).expect("valid"),
        Gcra::new(quota(100, 86_400 * SEC, 100)).expect("valid"),
    ])
    .expect("limits");
    let limiter = Limiter::with_clock(limits, clock.clone());
    let first = limiter.check();
    assert!(first.is_allowed());
    assert_eq!((first.limit(), first.remaining()), (10, 9), "{first}");
    assert_eq!(first.reset_after(), Duration::from_secs(864), "{first}");
    assert!(limiter.check_n(9).expect("capacity").is_allowed());
    // Denied by the second; the day holds 10 permits: 8,640 s to full.
    let denied = limiter.check();
    assert!(denied.is_denied());
    assert_eq!(denied.retry_after(), Duration::from_millis(100), "{denied}");
    assert_eq!(denied.reset_after(), Duration::from_secs(8_640), "{denied}");
    // Peeks agree; a peek that would be admitted by one limit does not add
    // its cost to the other's reset.
    assert_eq!(limiter.peek(), denied);
    clock.set(Nanos::new(8_640 * SEC));
    assert_eq!(
        limiter.peek_n(0).expect("cost 0").reset_after(),
        Duration::ZERO
    );
    clock.set(Nanos::new(8_640 * SEC - 1));
    assert!(limiter.peek_n(0).expect("cost 0").reset_after() > Duration::ZERO);

    // With windows: 10 per second and 12 per minute, from an aligned instant.
    let clock = ManualClock::starting_at(Nanos::new(600 * SEC));
    let limits = AllOf::new(vec![
        FixedWindow::new(quota(10, SEC, 10)).expect("valid"),
        FixedWindow::new(quota(12, 60 * SEC, 12)).expect("valid"),
    ])
    .expect("limits");
    let limiter = Limiter::with_clock(limits, clock.clone());
    let d = limiter.check_n(10).expect("capacity");
    assert_eq!((d.limit(), d.remaining()), (10, 0), "{d}");
    assert_eq!(d.reset_after(), Duration::from_secs(60), "{d}");
    let d = limiter.check();
    assert!(d.is_denied());
    assert_eq!(
        (d.retry_after(), d.reset_after()),
        (Duration::from_secs(1), Duration::from_secs(60)),
        "{d}"
    );
}

// ---------------------------------------------------------------------------
// 9. Carry::Keep: permits taken stay taken, whatever the changes
// ---------------------------------------------------------------------------

/// Takes the whole capacity of `limits[0]` on a frozen clock, then moves the
/// default (or an override) through `limits[1..]` with `Carry::Keep`, and
/// returns how many more permits one at a time are admitted at the end.
fn admitted_after_keep_changes<A: Algorithm>(limits: &[A], through_override: bool) -> u64 {
    let clock = ManualClock::starting_at(Nanos::new(600 * SEC + 123));
    let key = "k".to_string();
    let builder = KeyedLimiter::builder(limits[0].clone())
        .clock(clock.clone())
        .sweep_every(None);
    let limiter: KeyedLimiter<String, A> = if through_override {
        builder.override_key(key.clone(), limits[0].clone()).build()
    } else {
        builder.build()
    };
    let capacity = limits[0].capacity();
    assert!(
        limiter
            .check_n(&key, capacity)
            .expect("capacity")
            .is_allowed()
    );
    for next in &limits[1..] {
        if through_override {
            limiter.set_override(key.clone(), next.clone(), Carry::Keep);
        } else {
            limiter.set_default(next.clone(), Carry::Keep);
        }
        let d = limiter.peek_n(&key, 0).expect("cost 0");
        assert_eq!(
            d.remaining(),
            next.capacity().saturating_sub(capacity),
            "after a change to {:?}: {d}",
            next.quota()
        );
    }
    let mut admitted = 0;
    while admitted < 1_000 && limiter.check(&key).is_allowed() {
        admitted += 1;
    }
    admitted
}

/// Regression: GCRA 20/s burst 20 on a frozen clock: 20
/// taken, lowered to 10 with `Keep`, raised back to 20 with `Keep`, admitted
/// 10 more (30 at one instant); through an override 10 → 3 → 10 gave 7
/// back. Every algorithm, both ways of changing.
#[test]
fn keep_never_gives_back_permits_taken() {
    for through_override in [false, true] {
        let gcra = |n| Gcra::new(quota(n, SEC, n)).expect("valid");
        let fixed = |n| FixedWindow::new(quota(n, SEC, n)).expect("valid");
        let log = |n| SlidingLog::new(quota(n, SEC, n)).expect("valid");
        let wheel = |n| SlidingWindow::new(quota(n, SEC, n), SLOTS).expect("valid");
        let wheel_other = |n, slots| SlidingWindow::new(quota(n, SEC, n), slots).expect("valid");
        let all = |n: u64| {
            AllOf::new(vec![
                gcra(n),
                Gcra::new(quota(n, 60 * SEC, n)).expect("valid"),
            ])
            .expect("limits")
        };
        let at = format!("through an override: {through_override}");
        assert_eq!(
            admitted_after_keep_changes(&[gcra(20), gcra(10), gcra(20)], through_override),
            0,
            "gcra 20 → 10 → 20, {at}"
        );
        assert_eq!(
            admitted_after_keep_changes(&[gcra(10), gcra(3), gcra(10)], through_override),
            0,
            "gcra 10 → 3 → 10, {at}"
        );
        assert_eq!(
            admitted_after_keep_changes(&[gcra(10), gcra(3), gcra(20)], through_override),
            10,
            "gcra 10 → 3 → 20, {at}"
        );
        assert_eq!(
            admitted_after_keep_changes(&[fixed(10), fixed(3), fixed(10)], through_override),
            0,
            "fixed window, {at}"
        );
        assert_eq!(
            admitted_after_keep_changes(
                &[fixed(10), fixed(1), fixed(2), fixed(12)],
                through_override
            ),
            2,
            "fixed window 10 → 1 → 2 → 12, {at}"
        );
        assert_eq!(
            admitted_after_keep_changes(&[log(10), log(3), log(10)], through_override),
            0,
            "sliding log, {at}"
        );
        assert_eq!(
            admitted_after_keep_changes(&[wheel(10), wheel(3), wheel(10)], through_override),
            0,
            "sliding window, {at}"
        );
        assert_eq!(
            admitted_after_keep_changes(
                &[wheel_other(10, 4), wheel_other(3, 9), wheel_other(10, 4)],
                through_override
            ),
            0,
            "sliding window, other slots, {at}"
        );
        assert_eq!(
            admitted_after_keep_changes(&[all(10), all(3), all(10)], through_override),
            0,
            "all of, {at}"
        );
    }
}
