//! Issue 20, deny and allow lists across a quota change on Redis: a listed
//! key stays listed under the new limits, whether or not a decision meets
//! it while the previous limits' keys may live (bug: a listed key not
//! decided during the carry period lost its marker with the old key: a
//! deny-listed key was admitted again, an allow-listed one counted). The
//! controls of a carrying limiter see the markers still under the old keys.

mod support;
use support::Connect as _;

use std::time::Duration;

use tollgate::{Carry, FixedWindow, Gcra, ManualClock, Nanos, Quota};
use tollgate_redis::{FailurePolicy, Limit, Redis, RedisLimiter};

const NEVER: Duration = Duration::from_nanos(u64::MAX);

fn limiter(
    redis: &Redis,
    limits: &[Limit],
    clock: &ManualClock,
    from: Option<(&[Limit], Carry)>,
) -> RedisLimiter {
    let mut b = RedisLimiter::builder(redis.clone(), "lists")
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

fn gcra(per_second: u64) -> Limit {
    Gcra::new(Quota::per_second(per_second).unwrap())
        .unwrap()
        .into()
}

fn fixed(limit: u64) -> Limit {
    FixedWindow::new(Quota::new(limit, Duration::from_secs(60)).unwrap())
        .unwrap()
        .into()
}

/// Past every previous key's life and the TTL slack of the test mode.
const PAST_THE_CARRY: Duration = Duration::from_secs(3 * 3_600);

/// Bug: a key listed under the previous limits and not decided during the
/// carry period was decided as unlisted afterwards (its marker stayed under
/// the old key name): the deny list let it in, the allow list counted it.
#[tokio::test]
async fn a_listed_key_not_decided_during_the_carry_stays_listed() {
    let server = support::Server::start();
    let redis = server.connect().await;
    for (i, (old, new)) in [
        (vec![gcra(5)], vec![gcra(10)]),
        (vec![fixed(5)], vec![fixed(3)]),
        (vec![gcra(5), fixed(100)], vec![gcra(5), fixed(50)]),
    ]
    .into_iter()
    .enumerate()
    {
        let clock = ManualClock::starting_at(Nanos::new(3_600_000_000_000));
        let before = limiter(&redis, &old, &clock, None);
        let denied = format!("denied{i}");
        let allowed = format!("allowed{i}");
        assert_eq!(before.deny(&denied).await, Ok(true));
        assert_eq!(before.allow(&allowed).await, Ok(true));
        // Off any runtime: no background carry of the registry, so the
        // decisions below meet the markers under the old keys.
        let after = built_off_runtime(&redis, &new, &clock, (&old, Carry::Keep));
        clock.advance(PAST_THE_CARRY);
        for _ in 0..3 {
            let d = after.check(&denied).await;
            assert!(d.is_denied() && d.retry_after() == NEVER, "{i}: {d:?}");
        }
        for _ in 0..20 {
            let d = after.check(&allowed).await;
            assert!(d.is_allowed(), "{i}: {d:?}");
        }
        assert_eq!(after.unlist(&denied).await, Ok(true), "{i}");
        assert_eq!(after.unlist(&allowed).await, Ok(true), "{i}");
        assert!(after.check(&denied).await.is_allowed(), "{i}");
    }
}

/// The Redis keys of `key` that exist, among `limiter`'s.
async fn existing(server: &support::Server, limiter: &RedisLimiter, key: &str) -> usize {
    let client = redis::Client::open(server.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let mut n = 0;
    for k in limiter.redis_keys(key) {
        let found: bool = redis::cmd("EXISTS")
            .arg(k)
            .query_async(&mut c)
            .await
            .unwrap();
        n += usize::from(found);
    }
    n
}

/// Built off any runtime: no background carry, so the test decides when
/// the registry is carried.
fn built_off_runtime(
    redis: &Redis,
    limits: &[Limit],
    clock: &ManualClock,
    from: (&[Limit], Carry),
) -> RedisLimiter {
    std::thread::scope(|scope| {
        scope
            .spawn(|| limiter(redis, limits, clock, Some(from)))
            .join()
            .unwrap()
    })
}

/// `carry_lists` moves every registered key's markers to the new keys in
/// one pass, idempotently, and a listed key stays decided as listed.
#[tokio::test]
async fn carrying_the_registry_moves_every_listed_key() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let clock = ManualClock::starting_at(Nanos::new(3_600_000_000_000));
    let old = [gcra(5), fixed(100)];
    let new = [gcra(5), fixed(50)];
    let before = limiter(&redis, &old, &clock, None);
    let keys: Vec<String> = (0..600).map(|i| format!("k{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let listed = if i % 2 == 0 {
            before.deny(key).await
        } else {
            before.allow(key).await
        };
        assert_eq!(listed, Ok(true));
    }
    assert!(before.check("counted").await.is_allowed());
    let after = built_off_runtime(&redis, &new, &clock, (&old, Carry::Keep));
    assert_eq!(after.carry_lists().await, Ok(600), "one page is 256");
    assert_eq!(after.carry_lists().await, Ok(0), "idempotent");
    // Markers now under the new keys (the GCRA limit kept its key); the old
    // fixed window's keys are gone.
    assert_eq!(existing(&server, &after, "k0").await, 2);
    assert_eq!(existing(&server, &before, "k0").await, 1);
    clock.advance(PAST_THE_CARRY);
    for (i, key) in keys.iter().enumerate().step_by(37) {
        let d = after.check(key).await;
        assert_eq!(d.is_allowed(), i % 2 == 1, "{key}: {d:?}");
    }
    assert_eq!(
        existing(&server, &before, "counted").await,
        2,
        "a state is carried by decisions only"
    );
}

/// Bug: during the carry, a control ran on the new keys only: `unlist` of a
/// key whose marker was still under an old key answered `Ok(false)` (and
/// the next decision carried the marker back), and a reset, a penalty or a
/// listing left the old state to be carried back by the next decision.
#[tokio::test]
async fn controls_during_the_carry_see_the_previous_keys() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let clock = ManualClock::starting_at(Nanos::new(3_600_000_000_000));
    let old = [gcra(5)];
    let new = [gcra(10)];
    let before = limiter(&redis, &old, &clock, None);
    assert_eq!(before.deny("denied").await, Ok(true));
    for key in ["reset", "boxed", "listed"] {
        for _ in 0..5 {
            assert!(before.check(key).await.is_allowed());
        }
    }
    let after = built_off_runtime(&redis, &new, &clock, (&old, Carry::Keep));

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
