//! Regression: observers and dry-run on the Redis limiter, against a real
//! `redis-server`. Every decision is reported once, with the limiter's
//! name, the cost, the key only when asked for, and whether Redis or the
//! failure policy decided; dry-run reports refusals as shadow and a shadow
//! refusal consumes nothing.

mod support;
use support::Connect as _;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::observe::{Event, Observer, Outcome};
use tollgate::{Gcra, ManualClock, Nanos, Quota};
use tollgate_redis::{FailurePolicy, Limit, Redis, RedisLimiter, RedisObserver, Source};

/// What one event said.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    limit: String,
    outcome: Outcome,
    cost: u64,
    allowed: bool,
    key: Option<String>,
    source: Source,
}

/// Records every event, asking for keys or not.
#[derive(Clone, Default)]
struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    keys: bool,
}

impl Recorder {
    fn with_keys() -> Recorder {
        Recorder {
            keys: true,
            ..Recorder::default()
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn outcomes(&self) -> BTreeMap<&'static str, u64> {
        let mut counts = BTreeMap::new();
        for seen in self.seen() {
            *counts.entry(seen.outcome.as_str()).or_insert(0) += 1;
        }
        counts
    }
}

impl RedisObserver for Recorder {
    fn on_redis_decision(&self, event: &Event<'_>, source: Source) {
        self.seen.lock().unwrap().push(Seen {
            limit: event.limit.to_owned(),
            outcome: event.outcome,
            cost: event.cost,
            allowed: event.decision.is_allowed(),
            key: event.key.map(|key| key.to_string()),
            source,
        });
    }

    fn wants_keys(&self) -> bool {
        self.keys
    }
}

fn five_per_hour() -> Limit {
    Gcra::new(Quota::per_hour(5).unwrap()).unwrap().into()
}

fn clock() -> ManualClock {
    ManualClock::starting_at(Nanos::new(3_600_000_000_000))
}

fn limiter(redis: &Redis, name: &str, clock: &ManualClock) -> tollgate_redis::RedisLimiterBuilder {
    RedisLimiter::builder(redis.clone(), name)
        .limit(five_per_hour())
        .manual_time(clock.clone())
        .failure_policy(FailurePolicy::FailClosed)
        .deadline(Duration::from_secs(2))
}

fn counts(pairs: &[(&'static str, u64)]) -> BTreeMap<&'static str, u64> {
    pairs.iter().copied().collect()
}

/// Counts per outcome equal the decisions taken; peeks and refused costs
/// are not decisions; the limit's name is the limiter's; keys only when
/// asked for.
#[tokio::test]
async fn every_decision_is_reported_once_with_name_cost_and_source() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let clock = clock();
    let recorder = Recorder::default();
    let l = limiter(&redis, "login", &clock)
        .observer(recorder.clone())
        .build()
        .unwrap();
    let mut allowed = 0;
    for _ in 0..8 {
        allowed += u64::from(l.check(b"user:42").await.is_allowed());
    }
    assert!(l.check_n(b"user:42", 2).await.unwrap().is_denied());
    assert!(l.check_n(b"user:42", 6).await.is_err(), "above capacity");
    assert!(l.peek_n(b"user:42", 1).await.unwrap().is_denied());
    let batch = l.check_batch(&[b"a", b"b"]).await;
    assert!(batch.iter().all(|d| d.is_allowed()));
    assert_eq!(allowed, 5);

    assert_eq!(
        recorder.outcomes(),
        counts(&[("allowed", 7), ("denied", 4)]),
        "8 checks, one check_n, a batch of 2; not the peek, not the refused cost"
    );
    let seen = recorder.seen();
    assert!(seen.iter().all(|s| s.limit == "login" && s.key.is_none()));
    assert!(seen.iter().all(|s| s.source == Source::Redis));
    assert!(
        seen.iter()
            .all(|s| s.allowed == (s.outcome == Outcome::Allowed))
    );
    assert_eq!(seen[8].cost, 2);
    assert_eq!(seen.iter().map(|s| s.cost).sum::<u64>(), 8 + 2 + 2);
    assert_eq!(l.name(), "login");

    let keyed = Recorder::with_keys();
    let l = limiter(&redis, "keyed", &clock)
        .observer(keyed.clone())
        .build()
        .unwrap();
    let _ = l.check(b"user:\xffx").await;
    let _ = l.check("café").await;
    let keys: Vec<_> = keyed.seen().into_iter().map(|s| s.key).collect();
    assert_eq!(
        keys,
        [Some("user:\\xffx".to_owned()), Some("café".to_owned())]
    );
}

/// Decisions the failure policy takes are reported as such, once each,
/// as many as the limiter's own counters say.
#[tokio::test]
async fn a_policy_decision_is_marked_as_the_policys() {
    let mut server = support::Server::start();
    let redis = server.connect().await;
    let clock = clock();
    let recorder = Recorder::default();
    // The first decision must be Redis's: a deadline a healthy Redis meets
    // on a loaded machine too (the ones after the kill are refused at once).
    let l = limiter(&redis, "down", &clock)
        .deadline(Duration::from_secs(1))
        .observer(recorder.clone())
        .build()
        .unwrap();
    assert!(l.check(b"k").await.is_allowed());
    server.kill();
    for _ in 0..6 {
        assert!(l.check(b"k").await.is_denied(), "fail closed");
    }
    let seen = recorder.seen();
    assert_eq!(seen.len(), 7);
    assert_eq!(seen[0].source, Source::Redis);
    assert_eq!(seen[0].outcome, Outcome::Allowed);
    for s in &seen[1..] {
        assert!(matches!(s.source, Source::Policy(_)), "{s:?}");
        assert_eq!(s.outcome, Outcome::Denied);
    }
    let stats = l.stats();
    assert_eq!(stats.redis, 1);
    assert_eq!(stats.policy(), 6, "{stats:?}");
    assert_eq!(stats.policy_denied, 6, "{stats:?}");
}

/// A core observer works unchanged (the blanket `RedisObserver`), also
/// shared with a core limiter.
#[tokio::test]
async fn a_core_observer_works_unchanged() {
    #[derive(Default)]
    struct Plain(Mutex<Vec<(String, Outcome)>>);
    impl Observer for Plain {
        fn on_decision(&self, event: &Event<'_>) {
            let seen = (event.limit.to_owned(), event.outcome);
            self.0.lock().unwrap().push(seen);
        }
    }
    let server = support::Server::start();
    let redis = server.connect().await;
    let clock = clock();
    let plain = Arc::new(Plain::default());
    let fanout = tollgate::observe::Fanout::new().with(plain.clone());
    let l = limiter(&redis, "plain", &clock)
        .observer(fanout)
        .build()
        .unwrap();
    for _ in 0..6 {
        let _ = l.check(b"k").await;
    }
    let seen = plain.0.lock().unwrap().clone();
    let name = |o| ("plain".to_owned(), o);
    let mut want = vec![name(Outcome::Allowed); 5];
    want.push(name(Outcome::Denied));
    assert_eq!(seen, want);
}

/// The GCRA state of `key` on Redis, as stored.
async fn state(server: &support::Server, l: &RedisLimiter, key: &[u8]) -> Option<String> {
    let mut c = support::raw(server.url()).await;
    redis::cmd("GET")
        .arg(&l.redis_keys(key)[0])
        .query_async(&mut c)
        .await
        .unwrap()
}

/// Dry-run: decisions are the real ones, refusals are reported as shadow,
/// and a shadow refusal consumes nothing (the state on Redis is unchanged,
/// and the key refills exactly as if the refused requests never came).
#[tokio::test]
async fn dry_run_reports_refusals_as_shadow_and_they_consume_nothing() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let clock = clock();
    let recorder = Recorder::default();
    let l = limiter(&redis, "shadow", &clock)
        .dry_run(true)
        .observer(recorder.clone())
        .build()
        .unwrap();
    assert!(l.is_dry_run());
    for _ in 0..5 {
        assert!(l.check(b"k").await.is_allowed());
    }
    let full = state(&server, &l, b"k").await;
    assert!(full.is_some());
    for _ in 0..10 {
        let d = l.check(b"k").await;
        assert!(d.is_denied(), "the real decision");
    }
    assert_eq!(
        state(&server, &l, b"k").await,
        full,
        "no shadow refusal wrote"
    );
    assert_eq!(
        recorder.outcomes(),
        counts(&[("allowed", 5), ("shadow", 10)])
    );
    // One interval (12 min) later exactly one permit is back: the refusals
    // took nothing.
    clock.advance(Duration::from_secs(12 * 60));
    assert!(l.check(b"k").await.is_allowed());
    assert!(l.check(b"k").await.is_denied());

    // Off again: refusals are denials; every clone sees the change.
    let clone = l.clone();
    clone.set_dry_run(false);
    assert!(!l.is_dry_run());
    assert!(l.check(b"k").await.is_denied());
    let seen = recorder.seen();
    assert_eq!(seen.last().unwrap().outcome, Outcome::Denied);
    assert_eq!(l.stats().redis, 18);
}

/// Dry-run with the failure policy deciding: a fail-closed refusal is a
/// shadow one too, still marked as the policy's.
#[tokio::test]
async fn dry_run_marks_policy_refusals_as_shadow() {
    let mut server = support::Server::start();
    let redis = server.connect().await;
    let clock = clock();
    let recorder = Recorder::default();
    let l = limiter(&redis, "shadow-down", &clock)
        .deadline(Duration::from_millis(300))
        .dry_run(true)
        .observer(recorder.clone())
        .build()
        .unwrap();
    server.kill();
    assert!(l.check(b"k").await.is_denied());
    let seen = recorder.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].outcome, Outcome::Shadow);
    assert!(matches!(seen[0].source, Source::Policy(_)));
}

/// The core's `metrics` observer on the Redis limiter: counters by limit
/// and outcome, never by key.
#[cfg(feature = "metrics")]
#[tokio::test]
async fn the_metrics_observer_counts_redis_decisions() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use tollgate::observe::metrics::{DECISIONS, MetricsObserver};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // The test's runtime runs on this thread: the local recorder sees every
    // decision.
    let _guard = metrics::set_default_local_recorder(&recorder);
    let server = support::Server::start();
    let redis = server.connect().await;
    let clock = clock();
    let observer = Arc::new(MetricsObserver::new());
    let l = limiter(&redis, "api", &clock)
        .observer(observer.clone())
        .build()
        .unwrap();
    let shadow = limiter(&redis, "beta", &clock)
        .observer(observer)
        .dry_run(true)
        .build()
        .unwrap();
    for i in 0..8u8 {
        let _ = l.check([b'k', i % 2]).await;
    }
    for _ in 0..7 {
        let _ = shadow.check(b"k").await;
    }
    let mut counters = Vec::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let labels: BTreeMap<String, String> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        assert!(labels.keys().all(|k| k == "limit" || k == "outcome"));
        if let DebugValue::Counter(n) = value {
            if key.name() == DECISIONS && n > 0 {
                counters.push((labels["limit"].clone(), labels["outcome"].clone(), n));
            }
        }
    }
    counters.sort();
    let c = |l: &str, o: &str, n| (l.to_owned(), o.to_owned(), n);
    assert_eq!(
        counters,
        [
            c("api", "allowed", 8),
            c("beta", "allowed", 5),
            c("beta", "shadow", 2)
        ]
    );
}

/// The core's `tracing` observer on the Redis limiter: a `DEBUG` event per
/// refusal (a shadow one too), with the limiter's name and, when asked, the
/// key; none per admission.
#[cfg(feature = "tracing")]
#[tokio::test]
async fn the_tracing_observer_logs_redis_refusals() {
    use tollgate::observe::tracing::TracingObserver;
    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

    type Fields = Vec<(String, String)>;

    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<Fields>>>);

    struct Visitor(Fields);

    impl Visit for Visitor {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.push((field.name().to_owned(), format!("{value:?}")));
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.push((field.name().to_owned(), value.to_owned()));
        }
    }

    impl<S: tracing::Subscriber> Layer<S> for Capture {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            let mut fields = Visitor(Vec::new());
            event.record(&mut fields);
            let level = event.metadata().level().to_string();
            fields.0.push(("level".to_owned(), level));
            self.0.lock().unwrap().push(fields.0);
        }
    }

    let capture = Capture::default();
    // The test's runtime runs on this thread: the thread's default
    // subscriber sees every decision.
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let server = support::Server::start();
    let redis = server.connect().await;
    let clock = clock();
    let l = limiter(&redis, "api", &clock)
        .observer(TracingObserver::new().with_keys(true))
        .build()
        .unwrap();
    let shadow = limiter(&redis, "beta", &clock)
        .observer(TracingObserver::new())
        .dry_run(true)
        .build()
        .unwrap();
    for _ in 0..6 {
        let _ = l.check(b"user:7").await;
        let _ = shadow.check(b"k").await;
    }
    let events = capture.0.lock().unwrap().clone();
    let field =
        |fields: &Fields, name: &str| fields.iter().find(|f| f.0 == name).map(|f| f.1.clone());
    let seen: Vec<_> = events
        .iter()
        .map(|e| {
            (
                field(e, "limit"),
                field(e, "outcome"),
                field(e, "key"),
                field(e, "level"),
            )
        })
        .collect();
    let s = |v: &str| Some(v.to_owned());
    assert_eq!(
        seen,
        [
            (s("api"), s("denied"), s("user:7"), s("DEBUG")),
            (s("beta"), s("shadow"), None, s("DEBUG")),
        ],
        "{events:?}"
    );
}
