//! The shipped observers: `metrics` (checked with metrics-util's debugging
//! recorder) and `tracing` (checked with a capturing layer).

#[cfg(feature = "metrics")]
mod metrics {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use tollgate::observe::metrics::{COST, DECISIONS, MetricsObserver};
    use tollgate::{Gcra, Limiter, ManualClock, Quota};

    #[test]
    fn counts_decisions_by_limit_and_outcome_never_by_key() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let observer = std::sync::Arc::new(MetricsObserver::new());
            let limiter = Limiter::builder(Gcra::new(Quota::per_second(2).unwrap()).unwrap())
                .clock(ManualClock::new())
                .name("api")
                .observer(observer.clone())
                .build();
            for _ in 0..5 {
                let _ = limiter.check();
            }
            let shadow = Limiter::builder(Gcra::new(Quota::per_second(1).unwrap()).unwrap())
                .clock(ManualClock::new())
                .name("beta")
                .observer(observer)
                .dry_run(true)
                .build();
            let _ = shadow.check_n(1);
            let _ = shadow.check_n(1);
        });
        let mut counters = Vec::new();
        let mut costs = Vec::new();
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            assert!(labels.iter().all(|(k, _)| k == "limit" || k == "outcome"));
            match value {
                DebugValue::Counter(n) if key.name() == DECISIONS && n > 0 => {
                    counters.push((labels, n))
                }
                DebugValue::Histogram(values) if key.name() == COST => {
                    costs.push((labels, values.len()))
                }
                _ => {}
            }
        }
        counters.sort();
        let l = |limit: &str, outcome: &str| {
            vec![
                ("limit".to_owned(), limit.to_owned()),
                ("outcome".to_owned(), outcome.to_owned()),
            ]
        };
        assert_eq!(
            counters,
            [
                (l("api", "allowed"), 2),
                (l("api", "denied"), 3),
                (l("beta", "allowed"), 1),
                (l("beta", "shadow"), 1),
            ]
        );
        costs.sort();
        assert_eq!(
            costs,
            [
                (vec![("limit".to_owned(), "api".to_owned())], 5),
                (vec![("limit".to_owned(), "beta".to_owned())], 2),
            ]
        );
    }
}

#[cfg(feature = "tracing")]
mod tracing_observer {
    use std::sync::{Arc, Mutex};

    use tollgate::observe::tracing::TracingObserver;
    use tollgate::{Gcra, Limiter, ManualClock, Quota};
    use tracing::field::{Field, Visit};
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::{Context, SubscriberExt};
    use tracing_subscriber::registry::LookupSpan;

    /// A list of (name, value) fields.
    type Recorded = Vec<(String, String)>;

    /// Every event's fields, and every field recorded on a span.
    #[derive(Clone, Default)]
    struct Capture {
        events: Arc<Mutex<Vec<Recorded>>>,
        recorded: Arc<Mutex<Vec<(String, String)>>>,
    }

    struct Fields(Vec<(String, String)>);

    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.push((field.name().to_owned(), format!("{value:?}")));
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.push((field.name().to_owned(), value.to_owned()));
        }
        fn record_u64(&mut self, field: &Field, value: u64) {
            self.0.push((field.name().to_owned(), value.to_string()));
        }
    }

    impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            let mut fields = Fields(Vec::new());
            event.record(&mut fields);
            fields
                .0
                .push(("level".to_owned(), event.metadata().level().to_string()));
            self.events.lock().unwrap().push(fields.0);
        }
        fn on_record(
            &self,
            _: &tracing::span::Id,
            values: &tracing::span::Record<'_>,
            _: Context<'_, S>,
        ) {
            let mut fields = Fields(Vec::new());
            values.record(&mut fields);
            self.recorded.lock().unwrap().extend(fields.0);
        }
    }

    fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
        fields.iter().find(|f| f.0 == name).map(|f| f.1.as_str())
    }

    #[test]
    fn an_event_per_refusal_and_span_fields_per_decision() {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::registry().with(capture.clone());
        tracing::subscriber::with_default(subscriber, || {
            let keyed = tollgate::KeyedLimiter::<String>::builder(
                Gcra::new(Quota::per_second(1).unwrap()).unwrap(),
            )
            .clock(ManualClock::new())
            .sweep_every(None)
            .name("per-user")
            .observer_with_keys(TracingObserver::new().with_keys(true))
            .build();
            let limiter = Limiter::builder(Gcra::new(Quota::per_second(1).unwrap()).unwrap())
                .clock(ManualClock::new())
                .name("api")
                .observer(TracingObserver::new())
                .build();
            let span = tracing::info_span!(
                "request",
                tollgate.limit = tracing::field::Empty,
                tollgate.outcome = tracing::field::Empty
            );
            let _entered = span.enter();
            assert!(limiter.check().is_allowed());
            assert!(limiter.check().is_denied());
            assert!(keyed.check("alice").is_allowed());
            assert!(keyed.check("alice").is_denied());
        });
        let events = capture.events.lock().unwrap();
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(field(&events[0], "limit"), Some("api"));
        assert_eq!(field(&events[0], "outcome"), Some("denied"));
        assert_eq!(field(&events[0], "retry_after_ms"), Some("1000"));
        assert_eq!(field(&events[0], "level"), Some("DEBUG"));
        assert_eq!(field(&events[0], "key"), None);
        assert_eq!(field(&events[1], "limit"), Some("per-user"));
        assert_eq!(field(&events[1], "key"), Some("alice"));
        let recorded = capture.recorded.lock().unwrap();
        let outcomes: Vec<&str> = recorded
            .iter()
            .filter(|f| f.0 == "tollgate.outcome")
            .map(|f| f.1.as_str())
            .collect();
        assert_eq!(outcomes, ["allowed", "denied", "allowed", "denied"]);
    }
}
