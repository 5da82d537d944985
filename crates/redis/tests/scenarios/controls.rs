//! the controls (reset, refund, penalty, deny and allow lists) on
//! every shape of limiter: one GCRA limit and one fixed window (the lean
//! scripts, or the module's fast path), a sliding window and two limits of
//! one key (the general script). Time is a manual clock; each scenario
//! states the contract's expected numbers (`/work/wt/CONTRACT-20.md`).

use std::time::Duration;

use tollgate::{Decision, ManualClock, Nanos};
use tollgate_redis::{ControlError, FailurePolicy, Limit, Redis, RedisLimiter};

use super::{fixed, gcra, sliding};

const NEVER: Duration = Duration::from_nanos(u64::MAX);
const SECOND: Duration = Duration::from_secs(1);

/// Every shape: a label and its limits, each holding 5 permits.
pub fn shapes() -> Vec<(&'static str, Vec<Limit>)> {
    vec![
        ("gcra", vec![gcra(5, SECOND, 5)]),
        ("fixed", vec![fixed(5, Duration::from_secs(60))]),
        ("sliding", vec![sliding(5, Duration::from_secs(60), 4)]),
        (
            "both",
            vec![gcra(5, SECOND, 5), fixed(8, Duration::from_secs(3_600))],
        ),
    ]
}

pub fn limiter(redis: &Redis, name: &str, limits: &[Limit], clock: &ManualClock) -> RedisLimiter {
    let mut builder = RedisLimiter::builder(redis.clone(), name)
        .manual_time(clock.clone())
        .failure_policy(FailurePolicy::FailClosed)
        .deadline(Duration::from_secs(5));
    for limit in limits {
        builder = builder.limit(limit.clone());
    }
    builder.build().unwrap()
}

fn clock() -> ManualClock {
    // A whole minute: the windows start here.
    ManualClock::starting_at(Nanos::new(600_000_000_000))
}

async fn take(limiter: &RedisLimiter, key: &[u8], n: u64) {
    for i in 0..n {
        let d = limiter.check(key).await;
        assert!(d.is_allowed(), "take {i} of {n}: {d:?}");
    }
}

async fn remaining(limiter: &RedisLimiter, key: &[u8]) -> u64 {
    limiter.peek_n(key, 0).await.unwrap().remaining()
}

fn denied_until(d: &Decision, left: Duration) {
    assert!(d.is_denied(), "{d:?}");
    assert_eq!(
        (d.remaining(), d.retry_after(), d.reset_after()),
        (0, left, left),
        "{d:?}"
    );
}

/// Every control on every shape; `name` keeps the keys apart.
pub async fn every_control_on_every_shape(redis: &Redis, name: &str) {
    for (label, limits) in shapes() {
        let name = format!("{name}-{label}");
        reset_puts_the_key_back_to_full(redis, &name, &limits).await;
        refund_gives_back_never_above_full(redis, &name, &limits).await;
        penalty_denies_for_its_time_then_the_key_is_full(redis, &name, &limits).await;
        lists_decide_before_any_limit(redis, &name, &limits).await;
    }
    sliding_refund_takes_the_current_slot_first(redis, name).await;
    lists_are_bounded(redis, name).await;
}

pub async fn reset_puts_the_key_back_to_full(redis: &Redis, name: &str, limits: &[Limit]) {
    let clock = clock();
    let l = limiter(redis, &format!("{name}-reset"), limits, &clock);
    take(&l, b"k", 5).await;
    assert!(l.check(b"k").await.is_denied(), "{name}");
    assert_eq!(l.reset(b"k").await, Ok(true), "{name}");
    assert_eq!(remaining(&l, b"k").await, 5, "{name}");
    // Idempotent: nothing left to drop.
    assert_eq!(l.reset(b"k").await, Ok(false), "{name}");
    take(&l, b"k", 5).await;
    assert!(l.check(b"k").await.is_denied(), "{name}");
    // A reset cancels a penalty.
    assert_eq!(l.penalize(b"k", SECOND * 30).await, Ok(true), "{name}");
    assert_eq!(l.reset(b"k").await, Ok(true), "{name}");
    assert!(l.check(b"k").await.is_allowed(), "{name}");
}

pub async fn refund_gives_back_never_above_full(redis: &Redis, name: &str, limits: &[Limit]) {
    let clock = clock();
    let l = limiter(redis, &format!("{name}-refund"), limits, &clock);
    // Absent key: nothing to give back.
    assert_eq!(l.refund(b"k", 1).await, Ok(false), "{name}");
    take(&l, b"k", 3).await;
    assert_eq!(remaining(&l, b"k").await, 2, "{name}");
    assert_eq!(l.refund(b"k", 2).await, Ok(true), "{name}");
    assert_eq!(remaining(&l, b"k").await, 4, "{name}");
    // Never above full.
    assert_eq!(l.refund(b"k", 1_000).await, Ok(true), "{name}");
    assert_eq!(remaining(&l, b"k").await, 5, "{name}");
    assert_eq!(l.refund(b"k", 1).await, Ok(false), "{name}: full");
    assert_eq!(l.refund(b"k", 0).await, Ok(false), "{name}");
    // The refunded permits count as never taken: 5 + 2 admitted, no more.
    take(&l, b"k", 5).await;
    assert_eq!(l.refund(b"k", 2).await, Ok(true), "{name}");
    take(&l, b"k", 2).await;
    assert!(l.check(b"k").await.is_denied(), "{name}");
}

pub async fn penalty_denies_for_its_time_then_the_key_is_full(
    redis: &Redis,
    name: &str,
    limits: &[Limit],
) {
    let clock = clock();
    let l = limiter(redis, &format!("{name}-penalty"), limits, &clock);
    take(&l, b"k", 2).await;
    assert_eq!(l.penalize(b"k", Duration::ZERO).await, Ok(false), "{name}");
    assert_eq!(l.penalize(b"k", SECOND * 3).await, Ok(true), "{name}");
    denied_until(&l.check(b"k").await, SECOND * 3);
    clock.advance(SECOND);
    denied_until(&l.check(b"k").await, SECOND * 2);
    // Only extends.
    assert_eq!(l.penalize(b"k", SECOND).await, Ok(false), "{name}");
    denied_until(&l.check(b"k").await, SECOND * 2);
    assert_eq!(l.penalize(b"k", SECOND * 4).await, Ok(true), "{name}");
    denied_until(&l.check(b"k").await, SECOND * 4);
    // Counts nothing, and nothing to refund.
    assert_eq!(l.refund(b"k", 1).await, Ok(false), "{name}");
    denied_until(&l.peek_n(b"k", 1).await.unwrap(), SECOND * 4);
    clock.advance(SECOND * 4);
    // Over: the key is full.
    assert_eq!(remaining(&l, b"k").await, 5, "{name}");
    take(&l, b"k", 5).await;
    // Past the clock's end: never, until reset.
    assert_eq!(l.penalize(b"k", Duration::MAX).await, Ok(true), "{name}");
    denied_until(&l.check(b"k").await, NEVER);
    assert_eq!(l.penalize(b"k", SECOND).await, Ok(false), "{name}");
    assert_eq!(l.reset(b"k").await, Ok(true), "{name}");
    assert_eq!(remaining(&l, b"k").await, 5, "{name}");
}

pub async fn lists_decide_before_any_limit(redis: &Redis, name: &str, limits: &[Limit]) {
    let clock = clock();
    let l = limiter(redis, &format!("{name}-lists"), limits, &clock);
    take(&l, b"k", 5).await;
    assert_eq!(l.deny(b"k").await, Ok(true), "{name}");
    assert_eq!(l.deny(b"k").await, Ok(false), "{name}");
    for _ in 0..3 {
        denied_until(&l.check(b"k").await, NEVER);
    }
    // A refund gives back into the state the list keeps aside.
    assert_eq!(l.refund(b"k", 1).await, Ok(true), "{name}");
    denied_until(&l.check(b"k").await, NEVER);
    // Allowed: admitted without counting (what each decision reports, a
    // look at the state kept aside, is compared with the core's in
    // controls/parity.rs).
    assert_eq!(l.allow(b"k").await, Ok(true), "{name}");
    for _ in 0..20 {
        let d = l.check(b"k").await;
        assert!(d.is_allowed(), "{name}: {d:?}");
    }
    let d = l.check_n(b"k", 5).await.unwrap();
    assert!(d.is_allowed(), "{name}: {d:?}");
    assert_eq!(l.unlist(b"k").await, Ok(true), "{name}");
    assert_eq!(l.unlist(b"k").await, Ok(false), "{name}");
    // Unlisted: the key is as the listing found it (the core keeps a listed
    // key's state): the 5 taken before still count, less the one refunded.
    assert!(l.check(b"k").await.is_allowed(), "{name}");
    assert!(l.check(b"k").await.is_denied(), "{name}");
    // Under a list, a reset drops the state kept aside, and a penalty
    // waits for the unlisting (the list decides first).
    assert_eq!(l.deny(b"k").await, Ok(true), "{name}");
    assert_eq!(l.reset(b"k").await, Ok(true), "{name}");
    assert_eq!(l.penalize(b"k", SECOND).await, Ok(true), "{name}");
    assert_eq!(l.penalize(b"k", SECOND).await, Ok(false), "{name}");
    denied_until(&l.check(b"k").await, NEVER);
    assert_eq!(l.unlist(b"k").await, Ok(true), "{name}");
    denied_until(&l.check(b"k").await, SECOND);
    // The penalty over: counted again, from full.
    clock.advance(SECOND);
    take(&l, b"k", 5).await;
    assert!(l.check(b"k").await.is_denied(), "{name}");
    // Another key is not listed.
    assert_eq!(l.deny(b"k").await, Ok(true), "{name}");
    assert!(l.check(b"other").await.is_allowed(), "{name}");
}

/// The contract's sliding window refund: the current slot first, then
/// older ones.
pub async fn sliding_refund_takes_the_current_slot_first(redis: &Redis, name: &str) {
    let clock = clock();
    let limits = [sliding(5, Duration::from_secs(60), 4)];
    let l = limiter(redis, &format!("{name}-sliding-order"), &limits, &clock);
    take(&l, b"k", 2).await;
    clock.advance(Duration::from_secs(15));
    take(&l, b"k", 2).await;
    // 3 back: both of the current slot, 1 of the older one.
    assert_eq!(l.refund(b"k", 3).await, Ok(true));
    assert_eq!(remaining(&l, b"k").await, 4);
    // When the older slot leaves the window, nothing is left counted.
    clock.advance(Duration::from_secs(50));
    assert_eq!(remaining(&l, b"k").await, 5);
}

/// The lists hold at most `list_capacity` keys: one more is a typed error,
/// never a silent drop; listing a key again or unlisting makes room.
pub async fn lists_are_bounded(redis: &Redis, name: &str) {
    let clock = clock();
    let l = RedisLimiter::builder(redis.clone(), format!("{name}-cap"))
        .limit(gcra(5, SECOND, 5))
        .manual_time(clock.clone())
        .failure_policy(FailurePolicy::FailClosed)
        .deadline(Duration::from_secs(5))
        .list_capacity(2)
        .build()
        .unwrap();
    assert_eq!(l.deny(b"a").await, Ok(true));
    assert_eq!(l.allow(b"b").await, Ok(true));
    assert_eq!(
        l.deny(b"c").await,
        Err(ControlError::ListFull { capacity: 2 })
    );
    assert!(
        l.check(b"c").await.is_allowed(),
        "c was not listed: counted"
    );
    // Already listed keys still move between the lists.
    assert_eq!(l.allow(b"a").await, Ok(true));
    assert_eq!(l.unlist(b"a").await, Ok(true));
    assert_eq!(l.deny(b"c").await, Ok(true));
    denied_until(&l.check(b"c").await, NEVER);
}

/// Atomicity: refunds and a deny racing `connections` × `calls` checks on
/// one key, time frozen (`limits` on the key all in one slot). After the
/// key is spent, exactly the refunded permits are admitted again, in every
/// limit at once; once the deny is in, nothing more is.
pub async fn refunds_racing_checks_admit_exactly_the_refunds(
    connections: &[Redis],
    name: &str,
    key: &[u8],
    calls: usize,
) {
    const REFUNDS: u64 = 10;
    const EACH: u64 = 5;
    let clock = clock();
    let limits = [
        gcra(300, Duration::from_secs(3_600), 300),
        fixed(400, Duration::from_secs(86_400)),
    ];
    let limiters: Vec<RedisLimiter> = connections
        .iter()
        .map(|r| limiter(r, name, &limits, &clock))
        .collect();
    let l = &limiters[0];
    assert!(l.check_n(key, 300).await.unwrap().is_allowed());
    let checks = limiters.iter().map(|l| {
        let l = l.clone();
        let key = key.to_vec();
        tokio::spawn(async move {
            let mut admitted = 0u64;
            for _ in 0..calls {
                admitted += u64::from(l.check(&key).await.is_allowed());
            }
            admitted
        })
    });
    let refunds = (0..REFUNDS).map(|i| {
        let l = limiters[i as usize % limiters.len()].clone();
        let key = key.to_vec();
        tokio::spawn(async move { l.refund(&key, EACH).await })
    });
    let (admitted, refunded) = futures_util::future::join(
        futures_util::future::join_all(checks),
        futures_util::future::join_all(refunds),
    )
    .await;
    for r in refunded {
        // The debt never falls below 250 permits: each refund gives 5 back.
        assert_eq!(r.unwrap(), Ok(true), "{name}");
    }
    let admitted: u64 = admitted.into_iter().map(|r| r.unwrap()).sum();
    assert_eq!(
        admitted,
        REFUNDS * EACH,
        "{name}: admitted after the refunds"
    );
    // The fixed window counted the same: 300 + 50 admitted − 50 refunded.
    let day = RedisLimiter::builder(l_redis(connections), name)
        .limit(limits[1].clone())
        .manual_time(clock.clone())
        .build()
        .unwrap();
    assert_eq!(day.peek_n(key, 0).await.unwrap().remaining(), 100, "{name}");
    // A deny racing checks: after it returns, every check is denied.
    assert_eq!(l.refund(key, 300).await, Ok(true));
    let deny = l.deny(key);
    let racing = futures_util::future::join_all(limiters.iter().map(|l| l.check(key)));
    let (denied, _) = futures_util::future::join(deny, racing).await;
    assert_eq!(denied, Ok(true));
    for l in &limiters {
        denied_until(&l.check(key).await, NEVER);
    }
}

fn l_redis(connections: &[Redis]) -> Redis {
    connections[0].clone()
}
