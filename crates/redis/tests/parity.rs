//! Parity: the core's test vectors (`crates/core/tests/vectors/core.json`)
//! replayed through the script in test mode (`now` passed in) give the same
//! decision, limit, remaining, retry_after and reset_after at every step, for
//! GCRA, fixed window and sliding window (sliding log is not on Redis); and
//! the warm-up vectors (`vectors/warm_up.json`) through `warm_up.lua`.

#[path = "parity/budget.rs"]
mod budget;
mod scenarios;
mod support;
use support::Connect as _;
use tollgate_redis::script::{Lean, expand_lean};

#[tokio::test]
async fn every_vector_step_matches_the_core() {
    let server = support::Server::start();
    scenarios::vectors::every_vector_step_matches_the_core(&server.connect().await).await;
}

/// The lean scripts (GCRA, fixed window) and the general one, fed the same
/// vector steps on two keys, give the same reply at every step (the lean
/// scripts' compact reply read by `expand_lean`, as the client reads it) and
/// leave the same state.
#[tokio::test]
async fn the_lean_and_the_general_scripts_agree_on_every_vector() {
    let server = support::Server::start();
    let mut raw = support::raw(server.url()).await;
    let mut compared = [0; 2];
    let mut compact = [0; 2];
    for case in scenarios::vectors::cases() {
        let Some(limit) = scenarios::vectors::limit_of(&case) else {
            continue;
        };
        let (lean, params, which, shape) = match &limit {
            tollgate_redis::Limit::Gcra(g) => (
                tollgate_redis::script::SOURCE_GCRA,
                [
                    "g".to_owned(),
                    g.scale().to_string(),
                    g.interval_ticks().to_string(),
                    g.capacity_ticks().to_string(),
                    (9_000_000_000_000_000 / g.scale()).to_string(),
                ],
                0,
                Lean::Gcra {
                    interval: g.interval_ticks(),
                    capacity: g.capacity_ticks(),
                },
            ),
            tollgate_redis::Limit::FixedWindow(_) => (
                tollgate_redis::script::SOURCE_FIXED,
                [
                    "f".to_owned(),
                    limit.quota().period_nanos().to_string(),
                    limit.quota().limit().to_string(),
                    "0".to_owned(),
                    "0".to_owned(),
                ],
                1,
                Lean::Fixed {
                    period: limit.quota().period_nanos(),
                    limit: limit.quota().limit(),
                    unit_nanos: 1,
                },
            ),
            _ => continue,
        };
        for (i, step) in case.steps.iter().enumerate() {
            let mut args = vec![
                "c".to_owned(),
                step.now_ns.to_string(),
                step.cost.to_string(),
                "600000".to_owned(),
                "0".to_owned(),
            ];
            args.extend(params.iter().cloned());
            args.push("0".to_owned());
            let mut replies = Vec::new();
            for (key, source) in [("lean", lean), ("general", tollgate_redis::script::SOURCE)] {
                let key = format!("{}:{key}", case.name);
                let reply: redis::Value = redis::cmd("EVAL")
                    .arg(source)
                    .arg(1)
                    .arg(&key)
                    .arg(&args)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                // The lean scripts answer one number (a marker, the full
                // form): read as the client reads it.
                let reply = match reply {
                    redis::Value::Int(v) => {
                        assert_eq!(source, lean, "{} step {i}: {v}", case.name);
                        compact[which] += 1;
                        expand_lean(&[v], shape, true, step.cost, step.now_ns as i64)
                            .unwrap_or_else(|| panic!("{} step {i}: {v} unreadable", case.name))
                    }
                    other => redis::from_redis_value::<Vec<i64>>(other).unwrap(),
                };
                let state: Option<String> = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                replies.push((reply, state));
            }
            assert_eq!(replies[0], replies[1], "{} step {i}", case.name);
            compared[which] += 1;
        }
    }
    assert!(
        compared.iter().all(|&n| n > 20),
        "steps compared: {compared:?}"
    );
    // Every vector step is a decision from the state: the compact reply.
    assert_eq!(compact, compared, "compact replies");
}

/// Off the vectors' path ([`scenarios::lean_cases`]), the same calls
/// through a lean script and the general one on two keys give the same
/// reply (the lean one read back by `expand_lean`) and leave the same
/// state.
#[tokio::test]
async fn the_lean_replies_read_back_as_the_general_ones_off_the_vectors() {
    use tollgate_redis::script::SOURCE;
    let server = support::Server::start();
    let mut raw = support::raw(server.url()).await;
    let mut forms = std::collections::BTreeMap::new();
    for scenarios::lean_cases::LeanCase {
        name,
        source: lean,
        limit: params,
        shape,
        steps,
    } in scenarios::lean_cases::cases()
    {
        for (i, &(op, now, cost)) in steps.iter().enumerate() {
            let mut args = vec![op.to_owned(), now.to_string(), cost.to_string()];
            args.extend(["600000", "0"].map(str::to_owned));
            args.extend(params.map(str::to_owned));
            args.push("0".to_owned());
            let mut replies = Vec::new();
            for (key, source) in [("lean", lean), ("general", SOURCE)] {
                let key = format!("off-vectors:{name}:{key}");
                let reply: redis::Value = redis::cmd("EVAL")
                    .arg(source)
                    .arg(1)
                    .arg(&key)
                    .arg(&args)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                let reply = match reply {
                    redis::Value::Int(v) => {
                        *forms.entry((name, "compact")).or_insert(0) += 1;
                        expand_lean(&[v], shape, op == "c", cost, now as i64)
                            .unwrap_or_else(|| panic!("{name} step {i}: {v} unreadable"))
                    }
                    other => {
                        let reply: Vec<i64> = redis::from_redis_value(other).unwrap();
                        if source == lean {
                            *forms.entry((name, "general")).or_insert(0) += 1;
                            assert_eq!(
                                expand_lean(&reply, shape, true, cost, 0),
                                Some(reply.clone())
                            );
                        }
                        reply
                    }
                };
                let state: Option<String> = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                replies.push((reply, state));
            }
            assert_eq!(replies[0], replies[1], "{name} step {i}: {op} {now} {cost}");
        }
    }
    // Which form each case answered (every general reply of the lean
    // scripts above is the fixed window's inexact cases).
    let forms: Vec<_> = forms.into_iter().collect();
    assert_eq!(
        forms,
        [
            (("fixed", "compact"), 8),
            (("fixed-clock-back", "compact"), 1),
            (("fixed-clock-back", "general"), 3),
            (("fixed-inexact", "general"), 4),
            (("gcra", "compact"), 10),
        ]
    );
}

/// `gcra.lua`'s short form (`interval capacity`: a check of cost 1 on the
/// server's clock with the default slack) decides as the full form it
/// stands for: on two keys, called in turn, the same admissions and
/// denials, and replies, states and TTLs apart by no more than the time
/// between the calls; a short form out of range is refused as the full one
/// is, and writes nothing.
#[tokio::test]
async fn the_gcra_short_form_decides_as_the_full_form() {
    use tollgate_redis::script::SOURCE_GCRA;
    let server = support::Server::start();
    let mut raw = support::raw(server.url()).await;
    // 1 per hour (ticks of 1 ns), a burst of 3.
    let (interval, capacity) = ("3600000000000", "10800000000000");
    let full = support::gcra_check_args(interval, capacity);
    let full: Vec<&str> = full.iter().map(String::as_str).collect();
    let short = [interval, capacity];
    let second: i64 = 1_000_000_000;
    let mut signs = Vec::new();
    for i in 0..5 {
        let mut replies = Vec::new();
        for (key, args) in [("full", &full[..]), ("short", &short[..])] {
            let key = format!("short-form:{key}");
            let reply: i64 = redis::cmd("EVAL")
                .arg(SOURCE_GCRA)
                .arg(1)
                .arg(&key)
                .arg(args)
                .query_async(&mut raw)
                .await
                .unwrap();
            let (state, ttl): (Option<i64>, i64) = redis::pipe()
                .cmd("GET")
                .arg(&key)
                .cmd("PTTL")
                .arg(&key)
                .query_async(&mut raw)
                .await
                .unwrap();
            replies.push((reply, state.unwrap_or(-1), ttl));
        }
        let [(a, state_a, ttl_a), (b, state_b, ttl_b)] = replies[..] else {
            unreachable!()
        };
        assert_eq!(a.signum(), b.signum(), "step {i}: {a} {b}");
        assert!((a - b).abs() < second, "step {i}: {a} {b}");
        assert!(
            (state_a - state_b).abs() < second,
            "step {i}: {state_a} {state_b}"
        );
        assert!((ttl_a - ttl_b).abs() < 1_000, "step {i}: {ttl_a} {ttl_b}");
        signs.push(a.signum());
    }
    assert_eq!(signs, [1, 1, 1, -1, -1], "a burst of 3, then denied");
    for bad in [
        vec![interval],
        vec!["0", capacity],
        vec!["-1", capacity],
        vec![interval, "5"],
        vec!["1.5", capacity],
        vec!["nan", capacity],
        vec![interval, "inf"],
        vec![interval, "4503599627370496"],
        vec!["c", interval, capacity],
    ] {
        let reply: redis::RedisResult<i64> = redis::cmd("EVAL")
            .arg(SOURCE_GCRA)
            .arg(1)
            .arg("short-form:bad")
            .arg(&bad)
            .query_async(&mut raw)
            .await;
        let error = reply.expect_err(&format!("{bad:?} refused"));
        assert!(error.to_string().contains("invalid arguments"), "{error}");
    }
    let written: bool = redis::cmd("EXISTS")
        .arg("short-form:bad")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(!written);
}

/// The client sends the short form for a cost-1 GCRA check on the
/// server's clock, and the full form otherwise (the slow log records
/// every command's arguments).
#[tokio::test]
async fn the_client_sends_the_short_form_when_it_stands_for_the_call() {
    use tollgate::{Gcra, Quota};
    use tollgate_redis::{FailurePolicy, RedisLimiter};
    let server = support::Server::start();
    let redis = server.connect().await;
    let mut raw = support::raw(server.url()).await;
    let limiter = RedisLimiter::builder(redis.clone(), "short")
        .limit(Gcra::new(Quota::per_hour(5).unwrap()).unwrap())
        .failure_policy(FailurePolicy::FailClosed)
        .build()
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(limiter.check(b"k").await.is_allowed());
    assert!(limiter.check_n(b"k", 2).await.unwrap().is_allowed());
    assert!(limiter.peek_n(b"k", 1).await.unwrap().is_allowed());
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(100)
        .query_async(&mut raw)
        .await
        .unwrap();
    // Each entry: id, time, duration, the command's words, …
    let mut scripts: Vec<usize> = log
        .into_iter()
        .filter_map(|entry| {
            let redis::Value::Array(fields) = entry else {
                return None;
            };
            let words: Vec<String> = redis::from_redis_value(fields.get(3)?.clone()).ok()?;
            words[0].starts_with("EVAL").then_some(words.len())
        })
        .collect();
    scripts.reverse();
    // EVALSHA sha 1 key + 2, then + 11 for the cost of 2 and the peek.
    assert_eq!(scripts, [6, 15, 15]);
}

// ---------------------------------------------------------------------------
// Warm-up: `warm_up.lua` against the core's vectors, and a fleet on one key
// ---------------------------------------------------------------------------

/// A case of `crates/core/tests/vectors/warm_up.json` (its README's format,
/// with the warm-up's two parameters).
#[derive(serde::Deserialize)]
struct WarmCase {
    name: String,
    limit: u64,
    period_ns: u64,
    burst: u64,
    warmup_ns: u64,
    cold_factor: u32,
    steps: Vec<WarmStep>,
}

#[derive(serde::Deserialize)]
struct WarmStep {
    now_ns: u64,
    cost: u64,
    expect: WarmExpect,
}

#[derive(Debug, PartialEq, serde::Deserialize)]
struct WarmExpect {
    allowed: bool,
    limit: u64,
    remaining: u64,
    retry_after_ns: u64,
    reset_after_ns: u64,
}

fn warm_of(case: &WarmCase) -> tollgate::WarmUp {
    let quota = tollgate::Quota::new(case.limit, std::time::Duration::from_nanos(case.period_ns))
        .unwrap()
        .with_burst(case.burst)
        .unwrap();
    tollgate::WarmUp::with_cold_factor(
        quota,
        std::time::Duration::from_nanos(case.warmup_ns),
        case.cold_factor,
    )
    .unwrap()
}

fn warm_cases() -> Vec<WarmCase> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../core/tests/vectors/warm_up.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every step of every warm-up vector, through the script in test mode,
/// gives the core's decision to the nanosecond; a peek before each check
/// answers the same and writes nothing.
#[tokio::test]
async fn warm_up_script_matches_every_vector() {
    use tollgate_redis::warm_up::{Op, call};
    let server = support::Server::start();
    let mut raw = support::raw(server.url()).await;
    let cases = warm_cases();
    assert_eq!(cases.len(), 4);
    for case in &cases {
        let warm = warm_of(case);
        let key = format!("warm:{}", case.name);
        for (i, step) in case.steps.iter().enumerate() {
            let now = Some(tollgate::Nanos::new(step.now_ns));
            for op in [Op::Peek, Op::Check] {
                let (decision, _) = call(&mut raw, &key, &warm, op, now, step.cost)
                    .await
                    .unwrap();
                let got = WarmExpect {
                    allowed: decision.is_allowed(),
                    limit: decision.limit(),
                    remaining: decision.remaining(),
                    retry_after_ns: decision.retry_after().as_nanos() as u64,
                    reset_after_ns: decision.reset_after().as_nanos() as u64,
                };
                assert_eq!(got, step.expect, "{} step {i} ({op:?})", case.name);
            }
        }
    }
}

/// The general script (`decide.lua`) runs a warm-up limit as the core does:
/// every step of every warm-up vector through a `RedisLimiter` in test mode
/// (a peek, then the check) gives the core's decision to the nanosecond.
#[tokio::test]
async fn the_general_script_decides_warm_up_as_the_core() {
    use tollgate_redis::{FailurePolicy, Limit, RedisLimiter, Source};
    let server = support::Server::start();
    let redis = server.connect().await;
    for case in &warm_cases() {
        let clock = tollgate::ManualClock::new();
        let limiter = RedisLimiter::builder(redis.clone(), &case.name)
            .limit(Limit::from(warm_of(case)))
            .manual_time(clock.clone())
            .failure_policy(FailurePolicy::FailClosed)
            .deadline(std::time::Duration::from_secs(2))
            .build()
            .unwrap();
        for (i, step) in case.steps.iter().enumerate() {
            clock.set(tollgate::Nanos::new(step.now_ns));
            let peek = limiter.peek_n(b"k", step.cost).await;
            let outcome = limiter.check_outcome(b"k", step.cost).await.unwrap();
            assert_eq!(outcome.source, Source::Redis, "{} step {i}", case.name);
            for (what, decision) in [("peek", peek), ("check", Ok(outcome.decision))] {
                let d = decision.unwrap_or_else(|e| panic!("{} step {i}: {e:?}", case.name));
                let got = WarmExpect {
                    allowed: d.is_allowed(),
                    limit: d.limit(),
                    remaining: d.remaining(),
                    retry_after_ns: d.retry_after().as_nanos() as u64,
                    reset_after_ns: d.reset_after().as_nanos() as u64,
                };
                assert_eq!(got, step.expect, "{} step {i} ({what})", case.name);
            }
        }
    }
}

/// A warm-up limit beside a GCRA limit on one key, all-or-nothing in one
/// script call, decides as the core's `AllOf` of the same two limits on the
/// same schedule (mixed costs, refunds through the controls, a long idle
/// that cools the key again): same decisions at every step.
#[tokio::test]
async fn warm_up_beside_gcra_decides_as_the_cores_all_of() {
    use std::time::Duration;
    use tollgate::algorithm::any::AnyAlgorithm;
    use tollgate_redis::{FailurePolicy, Limit, RedisLimiter};
    let server = support::Server::start();
    let redis = server.connect().await;
    let warm = tollgate::WarmUp::new(
        tollgate::Quota::per_second(4)
            .unwrap()
            .with_burst(2)
            .unwrap(),
        Duration::from_secs(2),
    )
    .unwrap();
    let gcra = tollgate::Gcra::new(tollgate::Quota::per_second(3).unwrap()).unwrap();
    let clock = tollgate::ManualClock::new();
    let core = tollgate::Limiter::with_clock(
        tollgate::AllOf::new(vec![
            AnyAlgorithm::WarmUp(warm.clone()),
            AnyAlgorithm::Gcra(gcra.clone()),
        ])
        .unwrap(),
        clock.clone(),
    );
    let limiter = RedisLimiter::builder(redis.clone(), "warm-and-gcra")
        .limit(Limit::from(warm))
        .limit(Limit::from(gcra))
        .manual_time(clock.clone())
        .failure_policy(FailurePolicy::FailClosed)
        .deadline(Duration::from_secs(2))
        .build()
        .unwrap();
    let mut instants: Vec<u64> = (0..160).map(|i| i * 50_000_000).collect();
    instants.extend((0..40).map(|i| 20_000_000_000 + i * 37_000_000));
    let (mut allowed, mut denied_by_warm_up) = (0, 0);
    for (i, &t) in instants.iter().enumerate() {
        clock.set(tollgate::Nanos::new(t));
        let cost = [1, 1, 2][i % 3];
        let want = core.check_n(cost).unwrap();
        let got = limiter.check_n(b"k", cost).await.unwrap();
        // Every field, a denial's `reset_after` too (the core's AllOf: the
        // longest time back to full with nothing taken).
        let fields = |d: tollgate::Decision| support::fields(&d);
        assert_eq!(fields(got), fields(want), "step {i} at {t} ns, cost {cost}");
        if want.is_allowed() {
            allowed += 1;
        } else if want.limit() == 2 {
            denied_by_warm_up += 1;
        }
        if i % 13 == 12 {
            // The refund's own answer is not compared: the next check is.
            let _ = core.refund(1);
            limiter.refund(b"k", 1).await.unwrap();
        }
    }
    // Both limits bound the key at some point.
    assert!(
        allowed > 20 && denied_by_warm_up > 20,
        "{allowed} {denied_by_warm_up}"
    );
}
