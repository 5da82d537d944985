//! Deny and allow lists and penalties across a quota change, on
//! a server and on a cluster alike: a listed or penalised key stays so
//! under the new limits.

use std::time::Duration;

use tollgate::{Carry, FixedWindow, Gcra, ManualClock, Nanos, Quota};
use tollgate_redis::{FailurePolicy, Limit, Redis, RedisLimiter};

pub const NEVER: Duration = Duration::from_nanos(u64::MAX);

/// Past every previous key's life and the TTL slack of the test mode.
pub const PAST_THE_CARRY: Duration = Duration::from_secs(3 * 3_600);

pub fn limiter(
    redis: &Redis,
    name: &str,
    limits: &[Limit],
    clock: &ManualClock,
    from: Option<(&[Limit], Carry)>,
) -> RedisLimiter {
    let mut b = RedisLimiter::builder(redis.clone(), name)
        .manual_time(clock.clone())
        .failure_policy(FailurePolicy::FailClosed)
        .deadline(Duration::from_secs(5));
    for limit in limits {
        b = b.limit(limit.clone());
    }
    if let Some((old, rule)) = from {
        b = b.carry_from(old.iter().cloned(), rule);
    }
    b.build().unwrap()
}

/// Built off any runtime: no background carry of the registry, so the test
/// decides when it is carried (or that it never is).
pub fn built_off_runtime(
    redis: &Redis,
    name: &str,
    limits: &[Limit],
    clock: &ManualClock,
    from: (&[Limit], Carry),
) -> RedisLimiter {
    std::thread::scope(|scope| {
        scope
            .spawn(|| limiter(redis, name, limits, clock, Some(from)))
            .join()
            .unwrap()
    })
}

pub fn gcra(per_second: u64) -> Limit {
    Gcra::new(Quota::per_second(per_second).unwrap())
        .unwrap()
        .into()
}

pub fn fixed(limit: u64) -> Limit {
    FixedWindow::new(Quota::new(limit, Duration::from_secs(60)).unwrap())
        .unwrap()
        .into()
}

pub fn clock() -> ManualClock {
    ManualClock::starting_at(Nanos::new(3_600_000_000_000))
}

/// `keys` keys listed under the previous limits (even: denied, odd:
/// allowed), the registry carried by `carry_controls`, then decided past the
/// carry as listed; a second carry moves nothing.
pub async fn carrying_the_registry_keeps_every_key_listed(redis: &Redis, name: &str, keys: usize) {
    let clock = clock();
    let old = [gcra(5), fixed(100)];
    let new = [gcra(5), fixed(50)];
    let before = limiter(redis, name, &old, &clock, None);
    let keys: Vec<String> = (0..keys).map(|i| format!("k{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let listed = if i % 2 == 0 {
            before.deny(key).await
        } else {
            before.allow(key).await
        };
        assert_eq!(listed, Ok(true), "{key}");
    }
    let after = built_off_runtime(redis, name, &new, &clock, (&old, Carry::Keep));
    assert_eq!(after.carry_controls().await, Ok(keys.len() as u64));
    assert_eq!(after.carry_controls().await, Ok(0), "idempotent");
    clock.advance(PAST_THE_CARRY);
    for (i, key) in keys.iter().enumerate() {
        for _ in 0..3 {
            let d = after.check(key).await;
            if i % 2 == 0 {
                assert!(d.is_denied() && d.retry_after() == NEVER, "{key}: {d:?}");
            } else {
                // A look of 1 at its fresh state (4 of the GCRA's 5
                // left), as the core reports an allow-listed key.
                assert!(d.is_allowed() && d.remaining() == 4, "{key}: {d:?}");
            }
        }
    }
}

/// During the carry every control sees the previous keys: an unlist finds
/// the marker still there, and a reset, a penalty or a listing drops the
/// previous state too (the next decision must not carry it back).
pub async fn controls_during_the_carry_see_the_previous_keys(redis: &Redis, name: &str) {
    let clock = clock();
    let old = [gcra(5)];
    let new = [gcra(10)];
    let before = limiter(redis, name, &old, &clock, None);
    assert_eq!(before.deny("denied").await, Ok(true));
    for key in ["reset", "boxed", "listed"] {
        for _ in 0..5 {
            assert!(before.check(key).await.is_allowed());
        }
    }
    let after = built_off_runtime(redis, name, &new, &clock, (&old, Carry::Keep));

    assert_eq!(after.unlist("denied").await, Ok(true));
    assert!(after.check("denied").await.is_allowed());

    assert_eq!(after.reset("reset").await, Ok(true));
    let d = after.check("reset").await;
    assert_eq!(d.remaining(), 9, "full, then one taken: {d:?}");

    assert_eq!(
        after.penalize("boxed", Duration::from_secs(1)).await,
        Ok(true)
    );
    assert!(after.check("boxed").await.is_denied());
    clock.advance(Duration::from_secs(1));
    let d = after.check("boxed").await;
    assert_eq!(d.remaining(), 9, "full after the penalty: {d:?}");

    assert_eq!(after.deny("listed").await, Ok(true));
    assert_eq!(after.unlist("listed").await, Ok(true));
    let d = after.check("listed").await;
    assert_eq!(d.remaining(), 9, "full after unlisting: {d:?}");
}

/// A penalty longer than the carry period, on a key not decided during
/// it, still holds under the new limits, for its remaining time; then the
/// key is full. With the penalties' registry carried (`carried`) or by the
/// decisions themselves.
pub async fn a_penalty_outlives_the_carry(redis: &Redis, name: &str, carried: bool) {
    let clock = clock();
    let old = [gcra(5), fixed(100)];
    let new = [gcra(10), fixed(100)];
    let before = limiter(redis, name, &old, &clock, None);
    let ten_hours = Duration::from_secs(10 * 3_600);
    assert_eq!(before.penalize("boxed", ten_hours).await, Ok(true));
    // An ended penalty leaves the registry when the next one is set.
    assert_eq!(
        before.penalize("short", Duration::from_secs(1)).await,
        Ok(true)
    );
    clock.advance(Duration::from_secs(2));
    assert_eq!(before.penalize("other", ten_hours).await, Ok(true));
    let after = built_off_runtime(redis, name, &new, &clock, (&old, Carry::Keep));
    if carried {
        assert_eq!(after.carry_controls().await, Ok(2), "boxed and other");
    }
    clock.advance(PAST_THE_CARRY);
    let left = ten_hours - Duration::from_secs(2) - PAST_THE_CARRY;
    for key in ["boxed", "other"] {
        let d = after.check(key).await;
        assert!(d.is_denied(), "{key}: {d:?}");
        let expected = if key == "boxed" {
            left
        } else {
            left + Duration::from_secs(2)
        };
        assert_eq!(d.retry_after(), expected, "{key}: {d:?}");
    }
    clock.advance(ten_hours);
    let d = after.check("boxed").await;
    assert!(d.is_allowed() && d.remaining() == 9, "{d:?}");
}
