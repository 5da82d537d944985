//! Deny and allow lists across a quota change on Redis: a listed
//! key stays listed under the new limits, whether or not a decision meets
//! it while the previous limits' keys may live (bug: a listed key not
//! decided during the carry period lost its marker with the old key: a
//! deny-listed key was admitted again, an allow-listed one counted). The
//! controls of a carrying limiter see the markers still under the old keys.

mod scenarios;
mod support;
use support::Connect as _;

use scenarios::carry_lists::*;
use tollgate::Carry;
use tollgate_redis::RedisLimiter;

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
        let clock = clock();
        let before = limiter(&redis, "lists", &old, &clock, None);
        let denied = format!("denied{i}");
        let allowed = format!("allowed{i}");
        assert_eq!(before.deny(&denied).await, Ok(true));
        assert_eq!(before.allow(&allowed).await, Ok(true));
        // Off any runtime: no background carry of the registry, so the
        // decisions below meet the markers under the old keys.
        let after = built_off_runtime(&redis, "lists", &new, &clock, (&old, Carry::Keep));
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
    let mut c = support::raw(server.url()).await;
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

/// `carry_controls` moves every registered key's markers to the new keys, over
/// several pages of the registry, idempotently; a state is left to the
/// decisions.
#[tokio::test]
async fn carrying_the_registry_moves_every_listed_key() {
    let server = support::Server::start();
    let redis = server.connect().await;
    scenarios::carry_lists::carrying_the_registry_keeps_every_key_listed(&redis, "pages", 600)
        .await;
    // The markers are under the new keys (the GCRA limit kept its key); the
    // old fixed window's key is gone.
    let clock = clock();
    let old = [gcra(5), fixed(100)];
    let new = [gcra(5), fixed(50)];
    let before = limiter(&redis, "pages", &old, &clock, None);
    let after = limiter(&redis, "pages", &new, &clock, None);
    assert_eq!(existing(&server, &after, "k0").await, 2);
    assert_eq!(existing(&server, &before, "k0").await, 1);
    assert!(before.check("counted").await.is_allowed());
    let carrying = built_off_runtime(&redis, "pages", &new, &clock, (&old, Carry::Keep));
    assert_eq!(carrying.carry_controls().await, Ok(0));
    assert_eq!(
        existing(&server, &before, "counted").await,
        2,
        "a state is carried by decisions only"
    );
}

/// Bug: a penalty on a key not decided during the carry period was lost
/// with the old key (the key admitted again under the new limits).
#[tokio::test]
async fn a_penalty_outlives_the_carry() {
    let server = support::Server::start();
    let redis = server.connect().await;
    scenarios::carry_lists::a_penalty_outlives_the_carry(&redis, "boxed", false).await;
    scenarios::carry_lists::a_penalty_outlives_the_carry(&redis, "boxed-carried", true).await;
    let registry = |name: &str| {
        let l = limiter(&redis, name, &[gcra(5)], &clock(), None);
        let key = l.redis_keys("x")[0].clone();
        // `<prefix>{<name>|x}<tag>` -> `<prefix>{<name>|#}penalties`.
        let head = key.iter().position(|&b| b == b'|').unwrap();
        let mut r = key[..=head].to_vec();
        r.extend_from_slice(b"#}penalties");
        r
    };
    let mut c = support::raw(server.url()).await;
    let held: Vec<String> = redis::cmd("ZRANGE")
        .arg(registry("boxed"))
        .arg(0)
        .arg(-1)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(held, ["boxed", "other"], "the ended penalty was dropped");
}

/// Bug: during the carry, a control ran on the new keys only: `unlist` of a
/// key whose marker was still under an old key answered `Ok(false)` (and
/// the next decision carried the marker back), and a reset, a penalty or a
/// listing left the old state to be carried back by the next decision.
#[tokio::test]
async fn controls_during_the_carry_see_the_previous_keys() {
    let server = support::Server::start();
    let redis = server.connect().await;
    scenarios::carry_lists::controls_during_the_carry_see_the_previous_keys(&redis, "ctl").await;
}

/// Built inside a runtime, a carrying limiter carries the registry by
/// itself, without a decision or a call. (Waits for the background task
/// with a bound far above its few milliseconds: a liveness check, not a
/// timing one.)
#[tokio::test]
async fn the_registry_is_carried_in_the_background() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let clock = clock();
    let old = [fixed(5)];
    let new = [fixed(3)];
    let before = limiter(&redis, "bg", &old, &clock, None);
    assert_eq!(before.deny("denied").await, Ok(true));
    let after = limiter(&redis, "bg", &new, &clock, Some((&old, Carry::Keep)));
    let mut waited = 0;
    while existing(&server, &before, "denied").await != 0 {
        assert!(waited < 2_000, "the registry was not carried");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        waited += 1;
    }
    assert_eq!(existing(&server, &after, "denied").await, 1);
    assert_eq!(after.carry_controls().await, Ok(0), "nothing left to move");
    clock.advance(PAST_THE_CARRY);
    assert!(after.check("denied").await.is_denied());
}
