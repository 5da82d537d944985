//! Robustness: a key holding a value that is not a limiter state
//! is that key's problem, never Redis's; the script refuses arguments it
//! cannot use; and the client's memory is bounded in bytes with long keys.

mod support;
use support::Connect as _;

use std::time::Duration;

use redis::AsyncCommands as _;
use tollgate::{FixedWindow, Gcra, ManualClock, Nanos, Quota, SlidingWindow};
use tollgate_redis::{BreakerConfig, FailurePolicy, Limit, Redis, RedisLimiter, Source};

/// Fail-closed, on a manual clock that never moves: the counts these tests
/// assert cannot drift with how long a loaded machine takes between two
/// calls (a 1 s window once turned over between the calls and the peek).
fn closed(redis: &Redis, name: &str, limits: &[Limit]) -> RedisLimiter {
    let clock = ManualClock::starting_at(Nanos::new(3_600_000_000_000));
    let mut builder = RedisLimiter::builder(redis.clone(), name).manual_time(clock);
    for limit in limits {
        builder = builder.limit(limit.clone());
    }
    builder
        .failure_policy(FailurePolicy::FailClosed)
        .deadline(Duration::from_secs(2))
        .breaker(BreakerConfig {
            threshold: 3,
            open_for: Duration::from_secs(60),
        })
        .build()
        .unwrap()
}

/// Each algorithm alone (the lean scripts for GCRA and the fixed window, the
/// general one for the sliding window), and each first in a pair (the general
/// script for all three): the poisoned key is the first limit's.
fn limits() -> Vec<(&'static str, Vec<Limit>)> {
    let q = Quota::new(10, Duration::from_secs(1))
        .unwrap()
        .with_burst(5)
        .unwrap();
    let gcra: Limit = Gcra::new(q).unwrap().into();
    let fixed: Limit = FixedWindow::new(q).unwrap().into();
    let sliding: Limit = SlidingWindow::new(q, 4).unwrap().into();
    let day: Limit = FixedWindow::new(Quota::per_day(1_000).unwrap())
        .unwrap()
        .into();
    vec![
        ("gcra", vec![gcra.clone()]),
        ("fixed", vec![fixed.clone()]),
        ("sliding", vec![sliding.clone()]),
        ("gcra-and", vec![gcra, day.clone()]),
        ("fixed-and", vec![fixed, day.clone()]),
        ("sliding-and", vec![sliding, day]),
    ]
}

/// Bug: `SET <victim's key> garbage`, three `check("victim")`,
/// and `check("healthy-user")` was decided by `Policy(BreakerOpen)` (denied
/// under fail-closed), and the bad value was never repaired. Now a foreign
/// value at a key reads as no state and is overwritten by the admission, for
/// every algorithm and every kind of foreign value (garbage, a number out of
/// range, another Redis type), and no other key is affected.
#[tokio::test]
async fn a_malformed_key_is_repaired_and_never_opens_the_breaker() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let mut raw = support::raw(server.url()).await;
    for (alg, limits) in limits() {
        for (i, poison) in [
            "garbage",
            "-5",
            "1.5",
            "99999999999999999999",
            "list",
            "hash",
        ]
        .iter()
        .enumerate()
        {
            let name = format!("malformed-{alg}-{i}");
            let limiter = closed(&redis, &name, &limits);
            let victim = limiter.redis_keys("victim")[0].clone();
            let _: () = raw.del(&victim).await.unwrap();
            match *poison {
                "list" => {
                    let _: () = raw.lpush(&victim, "x").await.unwrap();
                }
                "hash" => {
                    let _: () = raw.hset(&victim, "h", "nope").await.unwrap();
                }
                value => {
                    let _: () = raw.set(&victim, value).await.unwrap();
                }
            }
            for call in 0..3 {
                let o = limiter.check_outcome("victim", 1).await.unwrap();
                assert_eq!(o.source, Source::Redis, "{name} call {call}: {o:?}");
                assert!(o.decision.is_allowed(), "{name} call {call}: {o:?}");
            }
            let healthy = limiter.check_outcome("healthy-user", 1).await.unwrap();
            assert_eq!(healthy.source, Source::Redis, "{name}: {healthy:?}");
            assert!(healthy.decision.is_allowed(), "{name}");
            assert_eq!(limiter.stats().policy(), 0, "{name}");
            // Repaired: the key now holds a state with a TTL, and counts.
            let ttl: i64 = raw.pttl(&victim).await.unwrap();
            assert!(ttl > 0, "{name}: TTL {ttl}");
            let left = limiter.peek_n("victim", 1).await.unwrap().remaining();
            let expected = limits[0].capacity() - 4;
            assert_eq!(
                left, expected,
                "{name}: the repaired key did not count its 3"
            );
        }
    }
}

/// Bug: a sliding window hash whose total is above the sum of its slots
/// (`HSET key h <a future epoch> t <limit>`, no slot) passed the script's
/// checks, and the denial's retry walk never ended: the script ran until
/// Redis answered `BUSY` to every client. Such a hash is now foreign (every
/// write keeps the total the sum of the slots): read as no state and
/// replaced by the admission; the walk also stops past the head.
#[tokio::test]
async fn a_sliding_total_above_its_slots_is_foreign_and_never_hangs_the_script() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let mut raw = support::raw(server.url()).await;
    for (alg, limits) in limits()
        .into_iter()
        .filter(|(a, _)| a.starts_with("sliding"))
    {
        let limiter = closed(&redis, &format!("total-{alg}"), &limits);
        let victim = limiter.redis_keys("victim")[0].clone();
        let capacity = limits[0].capacity();
        let _: () = raw
            .hset_multiple(
                &victim,
                &[
                    ("h", "9000000000000000".to_owned()),
                    ("t", capacity.to_string()),
                ],
            )
            .await
            .unwrap();
        let o = limiter.check_outcome("victim", 1).await.unwrap();
        assert_eq!(o.source, Source::Redis, "{alg}: {o:?}");
        assert!(o.decision.is_allowed(), "{alg}: {o:?}");
        let total: String = raw.hget(&victim, "t").await.unwrap();
        assert_eq!(total, "1", "{alg}: the foreign hash was not replaced");
    }
}

/// Bug: called directly by `EVALSHA`, the script accepted a cost
/// of -2 or 1.5. Both scripts (the lean GCRA one and the general one) now
/// refuse every argument that is not what the contract says with an error
/// reply of their own, and write nothing.
#[tokio::test]
async fn the_scripts_refuse_bad_arguments() {
    let server = support::Server::start();
    let mut raw = support::raw(server.url()).await;
    // op now cost slack stamp | g scale interval capacity m x: 10/s, burst 5
    // on the server's clock (m = 9e15 / (1000 · 1)).
    let good = support::gcra_check_args("100000000", "500000000");
    let mut bad = Vec::new();
    for (index, values) in [
        (0, &["x", "", "cc"][..]),
        (1, &["-5", "1.5", "abc", "nan"][..]),
        (
            2,
            &["-2", "1.5", "x", "1e400", "nan", "inf", "-0.5", ""][..],
        ),
        (3, &["-1", "0.5", "y", "86400001"][..]),
        // stamp and x: unused by a check, still refused if not natural.
        (4, &["-1", "1.5", "x"][..]),
        (5, &["z", ""][..]),
        (6, &["0", "17", "2.5", "-1"][..]),
        (7, &["0", "-100", "1.5"][..]),
        (
            8,
            &[
                "0",
                "99999999999999999999",
                "2.5",
                "99999999",
                "4503599627370496",
            ][..],
        ),
        (9, &["0", "1", "8999999999999", "9000000000001", "1.5"][..]),
        (10, &["-1", "0.5", "y"][..]),
    ] {
        for v in values {
            let mut args = good.clone();
            args[index] = v.to_string();
            bad.push(args);
        }
    }
    for source in [
        tollgate_redis::script::SOURCE_GCRA,
        tollgate_redis::script::SOURCE,
    ] {
        let reply = eval(&mut raw, source, &good).await.expect("the valid call");
        // Admitted: 1 permit taken (the lean reply: its debt after, 10^8).
        assert!(reply == [100_000_000] || reply[..2] == [1, 1], "{reply:?}");
        let _: () = raw.del("k").await.unwrap();
        for args in &bad {
            let got = eval(&mut raw, source, args).await;
            let e = got.expect_err(&format!("accepted {args:?}"));
            assert!(
                e.to_string().contains("tollgate: invalid arguments"),
                "{args:?}: not the script's own error: {e}"
            );
            let exists: bool = raw.exists("k").await.unwrap();
            assert!(!exists, "{args:?} wrote");
        }
    }
    // The lean fixed window script and the general one refuse the same.
    let fixed: Vec<String> = ["c", "", "1", "10", "0", "f", "1000000", "10", "0", "0", "0"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    let mut bad = Vec::new();
    for (index, values) in [
        (0, &["x", "l"][..]),
        (1, &["-5", "1.5"][..]),
        (2, &["-2", "1.5", "inf"][..]),
        (3, &["-1", "86400001"][..]),
        (4, &["-1", "1.5"][..]),
        (6, &["0", "1.5", "4503599627370496"][..]),
        (7, &["0", "-1", "2.5"][..]),
        (8, &["1", "x"][..]),
        (9, &["1"][..]),
        (10, &["-1", "0.5"][..]),
    ] {
        for v in values {
            let mut args = fixed.clone();
            args[index] = v.to_string();
            bad.push(args);
        }
    }
    let reply = eval(&mut raw, tollgate_redis::script::SOURCE_FIXED, &fixed)
        .await
        .expect("the valid call");
    // Admitted, 9 left in a window of 1 s: 9 · (10^6 + 1) + the time left.
    assert!(reply[0] >= 9_000_009 && reply[0] <= 10_000_009, "{reply:?}");
    let _: () = raw.del("k").await.unwrap();
    for source in [
        tollgate_redis::script::SOURCE_FIXED,
        tollgate_redis::script::SOURCE,
    ] {
        for args in &bad {
            // "l" is valid for the general script (a lease).
            if source == tollgate_redis::script::SOURCE && args[0] == "l" {
                continue;
            }
            let e = eval(&mut raw, source, args)
                .await
                .expect_err(&format!("accepted {args:?}"));
            assert!(e.to_string().contains("tollgate: invalid arguments"), "{e}");
            let exists: bool = raw.exists("k").await.unwrap();
            assert!(!exists, "{args:?} wrote");
        }
    }
    // The general script checks the other algorithms' numbers and the count.
    let windows: [&[&str]; 6] = [
        &["f", "1000000", "1.5", "0", "0", "0"],
        &["f", "-1", "10", "0", "0", "0"],
        &["s", "1000000", "0", "10", "0", "0"],
        &["s", "1000000", "4", "10", "0", "-3"],
        &["f", "1000000", "10", "0", "0"],
        &["q", "1000000", "10", "0", "0", "0"],
    ];
    for limit in windows {
        let mut args: Vec<String> = good[..5].to_vec();
        args.extend(limit.iter().map(|a| a.to_string()));
        let e = eval(&mut raw, tollgate_redis::script::SOURCE, &args)
            .await
            .expect_err(&format!("accepted {args:?}"));
        assert!(e.to_string().contains("tollgate: invalid arguments"), "{e}");
    }
}

async fn eval(
    raw: &mut redis::aio::MultiplexedConnection,
    source: &str,
    args: &[String],
) -> redis::RedisResult<Vec<i64>> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(source).arg(1).arg("k");
    for a in args {
        cmd.arg(a);
    }
    // A lean script's compact reply is one number (see `script::expand_lean`).
    match cmd.query_async(raw).await? {
        redis::Value::Int(v) => Ok(vec![v]),
        other => Ok(redis::from_redis_value(other)?),
    }
}
