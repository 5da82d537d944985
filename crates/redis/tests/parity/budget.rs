//! Budgets on Redis against the core: the same seeded schedule of checks,
//! peeks and charges (small, over the room, absurd) on a manual clock, run
//! by a core `Limiter` and by a `RedisLimiter` in test mode (`now` in ns),
//! answers the same at every step, for every algorithm the scripts charge
//! (fixed window, calendar windows, sliding window, GCRA) and for several
//! limits of one key (the core's `AllOf`). A charge into debt is read back
//! by the checks (refused until repaid at the quota's rate), and repeated
//! charges stay at the core's cap.

use std::time::Duration;

use tollgate::algorithm::any::AnyAlgorithm;
use tollgate::algorithm::{Algorithm, DEBT_PERIODS};
use tollgate::{AllOf, Decision, FixedWindow, Gcra, Limiter, ManualClock, Nanos, Quota};
use tollgate_redis::{CalendarUnit, CalendarWindow, Limit, Redis, RedisLimiter};

use crate::support;
use crate::support::Connect as _;

const SEC: u64 = 1_000_000_000;
/// The test mode's clock stays below 2^53 ns (104 days of Unix time).
const LAST: u64 = 100 * 86_400 * SEC;

/// A seeded generator (SplitMix64): the schedule is the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn limiter(redis: &Redis, name: &str, limits: &[Limit], clock: &ManualClock) -> RedisLimiter {
    let mut b = support::on_manual_clock(redis, name, clock);
    for l in limits {
        b = b.limit(l.clone());
    }
    b.build().unwrap()
}

/// What is compared of a decision: every field, a denial's `reset_after`
/// included where several limits decide (the core's `AllOf`: the longest
/// of every limit's time back to full with nothing taken; the script used
/// to report the admitting limits' with the denied cost taken). Waits are
/// compared as the scripts' doubles hold them: exact below 2^53 ns (104
/// days), correctly rounded beyond (a calendar month's debt).
fn fields(d: Decision) -> (bool, u64, u64, u128, u128) {
    let double = |w: Duration| w.as_nanos() as f64 as u128;
    (
        d.is_allowed(),
        d.limit(),
        d.remaining(),
        double(d.retry_after()),
        double(d.reset_after()),
    )
}

/// Runs `steps` seeded steps on the core's `algorithm` and on Redis's
/// `limits` side by side from `start` (Unix ns); `period` scales the clock's
/// steps and `capacity` the costs. Returns (admitted checks, charges that
/// went over, checks refused while in debt) to show the schedule reached
/// every case.
#[allow(clippy::too_many_arguments)]
async fn replay<A: Algorithm>(
    redis: &Redis,
    name: &str,
    algorithm: A,
    limits: &[Limit],
    start: u64,
    period: u64,
    capacity: u64,
    steps: usize,
    seed: u64,
) -> (u32, u32, u32) {
    let clock = ManualClock::starting_at(Nanos::new(start));
    let core = Limiter::with_clock(algorithm, clock.clone());
    let redis_limiter = limiter(redis, name, limits, &clock);
    let mut rng = Rng(seed);
    let (mut admitted, mut over, mut owed) = (0, 0, 0);
    for i in 0..steps {
        let at = tollgate::Clock::now(&clock).as_u64();
        let what = rng.below(100);
        if what < 40 {
            let cost = [0, 1, 1, 1, 2, capacity / 3, capacity][rng.below(7) as usize];
            let want = core.check_n(cost).map(fields).map_err(|_| ());
            let got = redis_limiter
                .check_n("k", cost)
                .await
                .map(fields)
                .map_err(|_| ());
            assert_eq!(got, want, "{name} step {i} at {at}: check {cost}");
            match want {
                Ok(w) if w.0 => admitted += 1,
                Ok(_) if core.peek_n(0).is_ok_and(|d| d.is_denied()) => owed += 1,
                _ => {}
            }
        } else if what < 55 {
            let cost = rng.below(capacity + 1);
            let want = core.peek_n(cost).map(fields).map_err(|_| ());
            let got = redis_limiter
                .peek_n("k", cost)
                .await
                .map(fields)
                .map_err(|_| ());
            assert_eq!(got, want, "{name} step {i} at {at}: peek {cost}");
        } else if what < 65 {
            let cost = match rng.below(60) {
                0 => u64::MAX,
                1 => capacity * (DEBT_PERIODS + 3),
                2..=7 => 1 + rng.below(3 * capacity),
                _ => 1 + rng.below(capacity),
            };
            let charge = core.charge(cost);
            let outcome = redis_limiter.charge_outcome("k", cost).await.unwrap();
            assert_eq!(
                outcome.source,
                tollgate_redis::Source::Redis,
                "{name} step {i}"
            );
            if charge.decision().is_denied() {
                over += 1;
            }
            // The answer carries the state after the charge as the core's
            // Charge::decision (a peek of one permit); `allowed` is whether
            // the charge fitted.
            let (_, limit, remaining, retry, reset) = fields(outcome.decision);
            let (_, want_limit, want_remaining, want_retry, want_reset) = fields(charge.decision());
            assert_eq!(
                (limit, remaining, retry, reset),
                (want_limit, want_remaining, want_retry, want_reset),
                "{name} step {i} at {at}: the answer to a charge of {cost}"
            );
            // The state after the charge, as a look and as one permit see it.
            for look in [0, 1] {
                let want = core.peek_n(look).map(fields).ok();
                let got = redis_limiter.peek_n("k", look).await.map(fields).ok();
                assert_eq!(
                    got, want,
                    "{name} step {i} at {at}: peek {look} after a charge of {cost}"
                );
            }
        } else {
            // Mostly within a period, sometimes several periods on.
            let by = match rng.below(10) {
                0 => period * (1 + rng.below(DEBT_PERIODS)),
                1..=4 => period / 2 + rng.below(period),
                _ => 1 + rng.below(period / 8),
            };
            if at + by < LAST {
                clock.advance(Duration::from_nanos(by));
            }
        }
    }
    (admitted, over, owed)
}

fn per(limit: u64, period: Duration) -> Quota {
    Quota::new(limit, period).unwrap()
}

/// Fixed windows, calendar windows (minute, hour, day, week, month) and
/// sliding windows of 1, 3 and 10 slots: the core's answers at every step
/// of a schedule of checks, looks and charges into debt.
#[tokio::test]
async fn window_budgets_decide_as_the_core() {
    let server = support::Server::start();
    let redis = server.connect().await;
    // Unix ns, below 2^53 (test mode): 1970-01-05 10:20, a Monday.
    let start = 4 * 86_400 * SEC + 37_200 * SEC;
    let mut cases: Vec<(String, AnyAlgorithm, Limit, u64)> = Vec::new();
    for (limit, period) in [(10, 60 * SEC), (7, 3_600 * SEC)] {
        let fixed = FixedWindow::new(per(limit, Duration::from_nanos(period))).unwrap();
        cases.push((
            format!("fixed-{limit}"),
            AnyAlgorithm::FixedWindow(fixed.clone()),
            Limit::from(fixed),
            period,
        ));
        for slots in [1, 3, 10] {
            let wheel =
                tollgate::SlidingWindow::new(per(limit, Duration::from_nanos(period)), slots)
                    .unwrap();
            cases.push((
                format!("sliding-{limit}-{slots}"),
                AnyAlgorithm::SlidingWindow(wheel.clone()),
                Limit::from(wheel),
                period,
            ));
        }
    }
    for (unit, period) in [
        (CalendarUnit::Minute, 60 * SEC),
        (CalendarUnit::Hour, 3_600 * SEC),
        (CalendarUnit::Day, 86_400 * SEC),
        (CalendarUnit::Week, 7 * 86_400 * SEC),
        (CalendarUnit::Month, 28 * 86_400 * SEC),
    ] {
        let w = CalendarWindow::new(unit, 9).unwrap();
        cases.push((
            format!("calendar-{unit:?}"),
            AnyAlgorithm::Calendar(w.clone()),
            Limit::from(w),
            period,
        ));
    }
    for (n, (name, algorithm, limit, period)) in cases.into_iter().enumerate() {
        let capacity = limit.quota().limit();
        let steps = if period > 86_400 * SEC { 150 } else { 300 };
        let (admitted, over, owed) = replay(
            &redis,
            &name,
            algorithm,
            &[limit],
            start,
            period,
            capacity,
            steps,
            n as u64 + 1,
        )
        .await;
        assert!(
            admitted > 2 && over > 2 && owed > 2,
            "{name}: {admitted} admitted, {over} charges over, {owed} refused in debt"
        );
    }
}

/// GCRA budgets (the debt past the burst, capped as the core caps it, now
/// also over repeated charges) and several limits of one key charged in one
/// script call: the core's `AllOf` of a GCRA, a fixed window and a sliding
/// window.
#[tokio::test]
async fn gcra_and_several_limits_decide_as_the_core() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let start = 86_400 * SEC;
    let gcra = Gcra::new(per(20, Duration::from_secs(60)).with_burst(5).unwrap()).unwrap();
    let (admitted, over, _) = replay(
        &redis,
        "gcra",
        AnyAlgorithm::Gcra(gcra.clone()),
        &[Limit::from(gcra.clone())],
        start,
        60 * SEC,
        5,
        400,
        11,
    )
    .await;
    assert!(admitted > 5 && over > 5, "gcra: {admitted} {over}");

    let fixed = FixedWindow::new(per(12, Duration::from_secs(600))).unwrap();
    let wheel = tollgate::SlidingWindow::new(per(30, Duration::from_secs(3_600)), 4).unwrap();
    let all = AllOf::new(vec![
        AnyAlgorithm::Gcra(gcra.clone()),
        AnyAlgorithm::FixedWindow(fixed.clone()),
        AnyAlgorithm::SlidingWindow(wheel.clone()),
    ])
    .unwrap();
    let (admitted, over, _) = replay(
        &redis,
        "all-of",
        all,
        &[Limit::from(gcra), Limit::from(fixed), Limit::from(wheel)],
        start,
        3_600 * SEC,
        5,
        400,
        12,
    )
    .await;
    assert!(admitted > 5 && over > 5, "all-of: {admitted} {over}");
}

/// Repeated charges stay at the core's cap: a key charged far past its
/// limit many times owes exactly `DEBT_PERIODS` periods of debt (the
/// script answers what it recorded), so the first look admitted after is
/// the one at which the core's limiter admits it, `DEBT_PERIODS` periods
/// on (a window: the start of the window `DEBT_PERIODS + 1` later; GCRA:
/// `DEBT_PERIODS` periods plus the burst's refill). Before the cap was kept
/// in the stored state, each charge added up to its own cap.
#[tokio::test]
async fn repeated_charges_stay_at_the_cores_cap() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let start = 86_400 * SEC;
    let minute = Duration::from_secs(60);
    let gcra = Gcra::new(per(10, minute)).unwrap();
    let fixed = FixedWindow::new(per(10, minute)).unwrap();
    let wheel = tollgate::SlidingWindow::new(per(10, minute), 6).unwrap();
    let month = CalendarWindow::new(CalendarUnit::Minute, 10).unwrap();
    for (name, algorithm, limit) in [
        (
            "cap-gcra",
            AnyAlgorithm::Gcra(gcra.clone()),
            Limit::from(gcra),
        ),
        (
            "cap-fixed",
            AnyAlgorithm::FixedWindow(fixed.clone()),
            Limit::from(fixed),
        ),
        (
            "cap-sliding",
            AnyAlgorithm::SlidingWindow(wheel.clone()),
            Limit::from(wheel),
        ),
        (
            "cap-calendar",
            AnyAlgorithm::Calendar(month.clone()),
            Limit::from(month),
        ),
    ] {
        let clock = ManualClock::starting_at(Nanos::new(start));
        let core = Limiter::with_clock(algorithm, clock.clone());
        let remote = limiter(&redis, name, &[limit], &clock);
        let mut recorded = 0;
        for _ in 0..5 {
            recorded += core.charge(100).recorded();
            let outcome = remote.charge_outcome("k", 100).await.unwrap();
            assert!(outcome.decision.is_denied(), "{name}: over");
        }
        // Five charges of 100: the cap holds 10 · (DEBT_PERIODS + 1) = 170.
        assert_eq!(recorded, 10 * (DEBT_PERIODS + 1), "{name}: the core's cap");
        // The stored state owes what the core's does: the first look
        // admitted, minute by minute, comes at the same minute.
        let mut waited = 0;
        loop {
            let want = core.peek_n(1).unwrap();
            let got = remote.peek_n("k", 1).await.unwrap();
            assert_eq!(fields(got), fields(want), "{name} at {waited} min");
            if want.is_allowed() {
                break;
            }
            waited += 1;
            assert!(waited <= DEBT_PERIODS + 2, "{name}: still refused");
            clock.advance(minute);
        }
        assert!(waited >= DEBT_PERIODS, "{name}: freed after {waited} min");
    }
}

/// Script calls the server has run (`EVAL` and `EVALSHA`).
fn script_calls(server: &support::Server) -> u64 {
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter(|line| line.starts_with("cmdstat_eval"))
        .filter_map(|line| {
            let calls = line.split_once("calls=")?.1;
            calls.split(',').next()?.parse::<u64>().ok()
        })
        .sum()
}

/// A charge's outcome is one script call, the state after it included (it
/// was two: the charge, then a peek), and answers as the core's charge.
#[tokio::test]
async fn a_charge_is_one_round_trip() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let clock = ManualClock::starting_at(Nanos::new(86_400 * SEC));
    let fixed = FixedWindow::new(per(10, Duration::from_secs(60))).unwrap();
    let wheel = tollgate::SlidingWindow::new(per(30, Duration::from_secs(600)), 5).unwrap();
    let core = Limiter::with_clock(
        AllOf::new(vec![
            AnyAlgorithm::FixedWindow(fixed.clone()),
            AnyAlgorithm::SlidingWindow(wheel.clone()),
        ])
        .unwrap(),
        clock.clone(),
    );
    let remote = limiter(
        &redis,
        "one-trip",
        &[Limit::from(fixed), Limit::from(wheel)],
        &clock,
    );
    // The first call of each script loads it (a NOSCRIPT, then EVAL).
    let _ = remote.peek_n("k", 0).await.unwrap();
    let _ = remote.charge_outcome("warm", 1).await.unwrap();
    for cost in [3, 6, 1, 25, 4, 2] {
        let before = script_calls(&server);
        let got = remote.charge_outcome("k", cost).await.unwrap();
        assert_eq!(script_calls(&server) - before, 1, "a charge of {cost}");
        let want = core.charge(cost).decision();
        let rest = |d: Decision| {
            let (_, limit, remaining, retry, reset) = fields(d);
            (limit, remaining, retry, reset)
        };
        assert_eq!(rest(got.decision), rest(want), "a charge of {cost}");
        clock.advance(Duration::from_secs(7));
    }
}
