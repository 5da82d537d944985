//! The batch path against a real `redis-server`: exact counts under
//! concurrency, one entry's refusal answered alone, and decisions equal to
//! the limiter's own.

use super::*;
use crate::Options;
use crate::policy::Source;
use std::time::Duration;
use tollgate::{FixedWindow, Gcra, ManualClock, Quota};
use tollgate_testkit::RedisServer;

async fn connect(server: &RedisServer) -> Redis {
    let options = Options {
        response_timeout: Duration::from_secs(5),
        connection_timeout: Duration::from_secs(5),
        retries: 1,
    };
    Redis::connect(&server.url(), &options).await.unwrap()
}

/// A limiter whose deadline no test machine misses: the counts below are
/// Redis's, never the failure policy's.
fn limiter(redis: &Redis, name: &str, limit: impl Into<Limit>) -> RedisLimiter {
    RedisLimiter::builder(redis.clone(), name)
        .limit(limit)
        .deadline(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn gcra(burst: u64) -> Gcra {
    Gcra::new(Quota::per_hour(burst).unwrap()).unwrap()
}

fn fixed(limit: u64) -> FixedWindow {
    FixedWindow::new(Quota::per_hour(limit).unwrap()).unwrap()
}

/// Checks `n` permits of `key` through `batcher`, each in a task of its own;
/// the number admitted.
async fn admitted(batcher: &Batcher, limiter: &RedisLimiter, key: &str, n: usize) -> usize {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (batcher, limiter, key) = (batcher.clone(), limiter.clone(), key.to_owned());
            tokio::spawn(async move { batcher.check_n(&limiter, key, 1).await.unwrap() })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += usize::from(task.await.unwrap().is_allowed());
    }
    admitted
}

/// 1,000 concurrent checks of one key admit exactly the burst (GCRA) or
/// the window's limit (fixed), every one decided by Redis, in far fewer
/// script calls than decisions. On one thread the schedule is fixed: the
/// first two checks find a call free and go alone, the 998 others queue
/// before either is answered, and leave in ⌈998 / 64⌉ = 16 batches.
#[tokio::test]
async fn concurrent_checks_count_exactly_in_fewer_calls() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    for (name, limit, expected) in [
        ("gcra", Limit::from(gcra(100)), 100),
        ("fixed", Limit::from(fixed(50)), 50),
    ] {
        let batcher = Batcher::new(&redis);
        let limiter = limiter(&redis, name, limit);
        assert_eq!(admitted(&batcher, &limiter, "k", 1_000).await, expected);
        let stats = limiter.stats();
        assert_eq!((stats.redis, stats.policy()), (1_000, 0), "{stats:?}");
        assert_eq!(
            batcher.stats(),
            BatchStats {
                alone: MAX_OUTSTANDING as u64,
                batched: 998,
                batches: 998_u64.div_ceil(MAX_BATCH as u64),
            }
        );
    }
}

/// The same on a multi-threaded runtime (where the split between lone and
/// batched calls depends on the schedule): exact counts per key, with keys
/// of two limiters in the same batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_checks_of_many_keys_and_limiters_count_exactly() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let batcher = Batcher::new(&redis);
    let by_rate = limiter(&redis, "rate", gcra(30));
    let by_window = limiter(&redis, "window", fixed(20));
    let mut runs = Vec::new();
    for key in ["a", "b", "c", "d"] {
        for limiter in [&by_rate, &by_window] {
            let (batcher, limiter) = (batcher.clone(), limiter.clone());
            runs.push(tokio::spawn(async move {
                admitted(&batcher, &limiter, key, 200).await
            }));
        }
    }
    for (i, run) in runs.into_iter().enumerate() {
        let expected = if i % 2 == 0 { 30 } else { 20 };
        assert_eq!(run.await.unwrap(), expected, "run {i}");
    }
    for limiter in [&by_rate, &by_window] {
        let stats = limiter.stats();
        assert_eq!((stats.redis, stats.policy()), (800, 0), "{stats:?}");
    }
    let stats = batcher.stats();
    assert_eq!(stats.alone + stats.batched, 1_600, "{stats:?}");
}

fn entry(limiter: &RedisLimiter, key: &str, cost: u64) -> (Entry, oneshot::Receiver<Answer>) {
    let (answer, answered) = oneshot::channel();
    let key = limiter
        .shared()
        .codec
        .keys_of(&BoundedKey::new(key.as_bytes()))
        .pop()
        .unwrap();
    let entry = Entry {
        limiter: limiter.clone(),
        key,
        op: Op::Check,
        now: String::new(),
        cost,
        answer,
    };
    (entry, answered)
}

/// One entry its script refuses (a cost no limiter sends: above 2^53), in
/// a batch with a key holding a foreign value (a hash) and a plain key: the
/// refused entry alone answers an error, [`Fault::Script`]; the others are
/// decided and admitted, the foreign value repaired.
#[tokio::test]
async fn a_batch_with_one_refused_entry_answers_the_others() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let batcher = Batcher::new(&redis);
    let limiter = limiter(&redis, "mixed", gcra(10));
    let foreign = limiter.redis_keys("foreign").pop().unwrap();
    let foreign = String::from_utf8(foreign).unwrap();
    server.cli(&["HSET", &foreign, "field", "value"]);
    let (mut batch, mut answers) = (Vec::new(), Vec::new());
    for (key, cost) in [("plain", 1), ("refused", 1 << 60), ("foreign", 2)] {
        let (entry, answered) = entry(&limiter, key, cost);
        batch.push(entry);
        answers.push(answered);
    }
    batcher.inner.send(batch).await;
    let mut answers: Vec<Answer> = answers
        .into_iter()
        .map(|mut answered| answered.try_recv().unwrap())
        .collect();
    assert_eq!(answers[1], Err(Fault::Script));
    for (i, cost) in [(0, 1), (2, 2)] {
        let raw = std::mem::replace(&mut answers[i], Err(Fault::Error)).unwrap();
        // The lean script's compact reply, read back as the call does.
        let raw = limiter
            .expand_compact(&raw, true, Op::Check, cost, 0)
            .unwrap_or(raw);
        let reply = limiter.decode(&raw).unwrap();
        assert!(reply.decision.is_allowed(), "{:?}", reply.decision);
        assert_eq!(reply.taken, cost);
        assert_eq!(reply.decision.remaining(), 10 - cost);
    }
    assert_eq!(server.cli(&["TYPE", &foreign]).trim(), "string");
    assert_eq!(batcher.stats().batches, 1);
}

/// A refused entry goes to its limiter's failure policy as a script fault,
/// without counting towards the breaker (the rule, per entry).
#[tokio::test]
async fn a_refused_entry_is_the_policys_and_spares_the_breaker() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let batcher = Batcher::with_lone_calls(&redis, false);
    let limiter = RedisLimiter::builder(redis.clone(), "policy")
        .limit(gcra(10))
        .deadline(Duration::from_secs(10))
        .breaker(crate::BreakerConfig {
            threshold: 1,
            open_for: Duration::from_secs(3_600),
        })
        .build()
        .unwrap();
    // The script refuses a `now` that is not a number; no limiter sends one.
    let (entry, answered) = entry(&limiter, "k", 1);
    let mut bad = entry;
    bad.now = "not a number".into();
    batcher.inner.send(vec![bad]).await;
    assert_eq!(answered.await.unwrap(), Err(Fault::Script));
    // Through the public path the breaker stays closed: the next decision is
    // Redis's.
    let outcome = batcher.check_outcome(&limiter, "k", 1).await.unwrap();
    assert_eq!(outcome.source, Source::Redis);
    assert!(outcome.decision.is_allowed());
}

/// Batched decisions are the limiter's own, to the nanosecond: the same
/// sequence of checks and peeks on a manual clock, through the lone path of
/// one limiter and the batch path of a twin (same limits, other keys),
/// gives equal decisions, for GCRA and for a fixed window.
#[tokio::test]
async fn batched_decisions_equal_the_limiters_own() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    for (name, limit) in [
        (
            "g",
            Limit::from(Gcra::new(Quota::per_second(5).unwrap().with_burst(3).unwrap()).unwrap()),
        ),
        (
            "f",
            Limit::from(FixedWindow::new(Quota::per_second(4).unwrap()).unwrap()),
        ),
    ] {
        let clock = ManualClock::new();
        let twin = |suffix: &str| {
            RedisLimiter::builder(redis.clone(), format!("{name}{suffix}"))
                .limit(limit.clone())
                .manual_time(clock.clone())
                .deadline(Duration::from_secs(10))
                .build()
                .unwrap()
        };
        let (lone, batched) = (twin("-lone"), twin("-batched"));
        // Every call a batch (of one).
        let batcher = Batcher::with_lone_calls(&redis, false);
        for step in 0..60_u64 {
            let cost = step % 3;
            let peek = step % 7 == 3;
            let (a, b) = if peek {
                (
                    lone.peek_n("k", cost).await.unwrap(),
                    batcher.peek_n(&batched, "k", cost).await.unwrap(),
                )
            } else {
                (
                    lone.check_n("k", cost).await.unwrap(),
                    batcher.check_n(&batched, "k", cost).await.unwrap(),
                )
            };
            let parts = |d: Decision| {
                (
                    d.is_allowed(),
                    d.limit(),
                    d.remaining(),
                    d.retry_after(),
                    d.reset_after(),
                )
            };
            assert_eq!(parts(a), parts(b), "{name} step {step}");
            clock.advance(Duration::from_millis(37 * (step % 5)));
        }
        assert_eq!(batcher.stats().alone, 0);
        assert_eq!(batcher.stats().batched, 60);
        assert_eq!(batched.stats().redis, 60);
    }
}

/// Found in review: a decision through the batcher bypassed the limiter's
/// observer (the batcher was written before observers existed), so a
/// limiter observed, or in dry-run, saw nothing of the server's decisions.
/// Every batched check, lone or in a batch, admitted or denied, is
/// reported once, as `RedisLimiter::check_n` reports it.
#[tokio::test]
async fn batched_checks_are_reported_to_the_limiters_observer() {
    use std::sync::Mutex;

    #[derive(Default)]
    struct Seen(Mutex<Vec<(bool, Source)>>);
    impl crate::RedisObserver for Seen {
        fn on_redis_decision(&self, event: &tollgate::observe::Event<'_>, source: Source) {
            self.0
                .lock()
                .unwrap()
                .push((event.decision.is_allowed(), source));
        }
    }

    let server = RedisServer::start();
    let redis = connect(&server).await;
    let seen = Arc::new(Seen::default());
    let observed = RedisLimiter::builder(redis.clone(), "observed")
        .limit(gcra(3))
        .deadline(Duration::from_secs(10))
        .observer(ObserverHandle(Arc::clone(&seen)))
        .build()
        .unwrap();
    let batcher = Batcher::new(&redis);
    let forced = Batcher::with_lone_calls(&redis, false);
    let mut allowed = 0;
    for i in 0..5 {
        let b = if i % 2 == 0 { &batcher } else { &forced };
        allowed += u64::from(b.check_n(&observed, "k", 1).await.unwrap().is_allowed());
    }
    assert_eq!(allowed, 3);
    let seen = seen.0.lock().unwrap();
    assert_eq!(seen.len(), 5, "every check reported once");
    assert_eq!(seen.iter().filter(|(a, _)| *a).count(), 3);
    assert!(seen.iter().all(|(_, source)| *source == Source::Redis));

    struct ObserverHandle(Arc<Seen>);
    impl crate::RedisObserver for ObserverHandle {
        fn on_redis_decision(&self, event: &tollgate::observe::Event<'_>, source: Source) {
            self.0.on_redis_decision(event, source);
        }
    }
}
