//! Calendar windows on Redis: windows start at UTC boundaries
//! (minute, hour, day, Monday, the 1st of the month), not at the first
//! request; and `AllOf` across algorithms (GCRA per second plus a calendar
//! month) in one call. The manual clock is Unix time in nanoseconds (test
//! mode, kept below 2^53 ns: the first 104 days of 1970).

mod support;
use support::Connect as _;

use std::time::Duration;

use tollgate::{Gcra, ManualClock, Nanos, Quota};
use tollgate_redis::{CalendarUnit, CalendarWindow, FailurePolicy, Limit, Redis, RedisLimiter};

const SEC: u64 = 1_000_000_000;
const DAY: u64 = 86_400 * SEC;

fn limiter(redis: &Redis, name: &str, limits: Vec<Limit>, clock: &ManualClock) -> RedisLimiter {
    let mut b = RedisLimiter::builder(redis.clone(), name)
        .manual_time(clock.clone())
        .failure_policy(FailurePolicy::FailClosed)
        .deadline(Duration::from_secs(5));
    for l in limits {
        b = b.limit(l);
    }
    b.build().unwrap()
}

fn calendar(limit: u64, unit: CalendarUnit) -> Limit {
    CalendarWindow::new(unit, limit).unwrap().into()
}

/// `limit` taken at `at` (Unix ns); the next one waits exactly until
/// `boundary`, and is admitted there.
async fn spent_until(redis: &Redis, name: &str, unit: CalendarUnit, at: u64, boundary: u64) {
    let clock = ManualClock::starting_at(Nanos::new(at));
    let l = limiter(redis, name, vec![calendar(3, unit)], &clock);
    for _ in 0..3 {
        assert!(l.check("k").await.is_allowed(), "{name}");
    }
    let d = l.check("k").await;
    assert!(d.is_denied(), "{name}: {d:?}");
    let left = Duration::from_nanos(boundary - at);
    assert_eq!((d.retry_after(), d.reset_after()), (left, left), "{name}");
    clock.advance(left - Duration::from_nanos(1));
    assert!(l.check("k").await.is_denied(), "{name}: 1 ns before");
    clock.advance(Duration::from_nanos(1));
    let d = l.check("k").await;
    assert!(d.is_allowed() && d.remaining() == 2, "{name}: {d:?}");
}

#[tokio::test]
async fn windows_start_at_utc_boundaries() {
    let server = support::Server::start();
    let redis = server.connect().await;
    use CalendarUnit::*;
    // 1970-01-01 00:00:59.5 → the minute ends at 00:01:00.
    spent_until(&redis, "minute", Minute, 59 * SEC + SEC / 2, 60 * SEC).await;
    // 10:20 → 11:00.
    spent_until(&redis, "hour", Hour, 37_200 * SEC, 39_600 * SEC).await;
    // Day 3, 18:00 → day 4.
    spent_until(&redis, "day", Day, 3 * DAY + 64_800 * SEC, 4 * DAY).await;
    // Thursday 1970-01-01 (the epoch) → Monday 1970-01-05.
    spent_until(&redis, "week-1", Week, 0, 4 * DAY).await;
    // Sunday 1970-01-11 23:00 → Monday 1970-01-12.
    spent_until(&redis, "week-2", Week, 11 * DAY - 3_600 * SEC, 11 * DAY).await;
    // 1970-01-31 23:59 → February 1st (day 31).
    spent_until(&redis, "month-jan", Month, 31 * DAY - 60 * SEC, 31 * DAY).await;
    // 1970-02-10 → March 1st (day 59: 1970 is not a leap year).
    spent_until(&redis, "month-feb", Month, 40 * DAY, 59 * DAY).await;
    // 1970-03-31 12:00 → April 1st (day 90).
    spent_until(
        &redis,
        "month-mar",
        Month,
        89 * DAY + 43_200 * SEC,
        90 * DAY,
    )
    .await;
}

/// GCRA per second and a calendar month on one key, one call each: the
/// second refills, the month does not, and a denial by the month waits
/// until the 1st.
#[tokio::test]
async fn gcra_per_second_and_a_calendar_month_together() {
    let server = support::Server::start();
    let redis = server.connect().await;
    // 1970-02-27 00:00.
    let start = 57 * DAY;
    let clock = ManualClock::starting_at(Nanos::new(start));
    let per_second: Limit = Gcra::new(Quota::per_second(10).unwrap()).unwrap().into();
    let l = limiter(
        &redis,
        "and",
        vec![per_second, calendar(25, CalendarUnit::Month)],
        &clock,
    );
    for round in 0..2 {
        for _ in 0..10 {
            assert!(l.check("k").await.is_allowed(), "round {round}");
        }
        let d = l.check("k").await;
        assert!(d.is_denied(), "{d:?}");
        assert_eq!(
            d.retry_after(),
            Duration::from_millis(100),
            "the second binds"
        );
        clock.advance(Duration::from_secs(1));
    }
    for _ in 0..5 {
        assert!(l.check("k").await.is_allowed());
    }
    clock.advance(Duration::from_secs(1));
    let d = l.check("k").await;
    assert!(d.is_denied(), "{d:?}");
    // The month binds: until 1970-03-01 00:00 (day 59).
    let left = Duration::from_nanos(59 * DAY - (start + 3 * SEC));
    assert_eq!(d.retry_after(), left, "{d:?}");
    clock.advance(left);
    assert!(l.check_n("k", 2).await.unwrap().is_allowed(), "March");
    // Controls work on calendar limits too.
    assert_eq!(l.refund("k", 1).await, Ok(true));
    assert_eq!(l.peek_n("k", 0).await.unwrap().remaining(), 9);
    assert_eq!(l.reset("k").await, Ok(true));
    assert_eq!(l.peek_n("k", 0).await.unwrap().remaining(), 10);
}

/// Parity with the core's `CalendarWindow` on the same manual Unix clock:
/// every decision the same, across boundaries of every unit.
#[tokio::test]
async fn decisions_match_the_core_calendar_window() {
    let server = support::Server::start();
    let redis = server.connect().await;
    use CalendarUnit::*;
    for (unit, start, step) in [
        (Minute, 50 * SEC, 3 * SEC),
        (Hour, 3_500 * SEC, 20 * SEC),
        (Day, DAY - 600 * SEC, 40 * SEC),
        (Week, 4 * DAY - 600 * SEC, 50 * SEC),
        (Month, 31 * DAY - 900 * SEC, 60 * SEC),
        (Month, 59 * DAY - 900 * SEC, 60 * SEC),
    ] {
        let window = CalendarWindow::new(unit, 4).unwrap();
        let core_clock = ManualClock::starting_at(Nanos::new(start));
        let core = tollgate::Limiter::with_clock(window.clone(), core_clock.clone());
        let clock = ManualClock::starting_at(Nanos::new(start));
        let l = limiter(
            &redis,
            &format!("parity-{unit:?}-{start}"),
            vec![window.into()],
            &clock,
        );
        for i in 0..40 {
            let cost = [1, 2, 1, 3][i % 4];
            let want = core.check_n(cost).unwrap();
            let got = l.check_n("k", cost).await.unwrap();
            assert_eq!(got, want, "{unit:?} from {start}: call {i}");
            core_clock.advance(Duration::from_nanos(step));
            clock.advance(Duration::from_nanos(step));
        }
    }
}
