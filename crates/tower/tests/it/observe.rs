//! The layer's observer and dry-run (`tollgate_tower::observe`), called
//! directly on a manual clock.

use crate::support;

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use http::StatusCode;
use support::{from_peer, header, ok_service, send};
use tollgate::observe::{Event, Observer, Outcome};
use tollgate::{Gcra, KeyedLimiter, ManualClock, Quota};
use tollgate_tower::{HeaderKey, OnMissingKey, PeerIp, RateLimitLayer};
use tower::Layer;

/// (limit, outcome, cost, key) of one event.
type Seen = (String, Outcome, u64, Option<String>);

#[derive(Default)]
struct Recorder {
    keys: bool,
    events: Mutex<Vec<Seen>>,
}

impl Observer for Recorder {
    fn on_decision(&self, event: &Event<'_>) {
        self.events.lock().unwrap().push((
            event.limit.to_owned(),
            event.outcome,
            event.cost,
            event.key.map(|k| k.to_string()),
        ));
    }
    fn wants_keys(&self) -> bool {
        self.keys
    }
}

fn per_ip(clock: &ManualClock) -> KeyedLimiter<IpAddr> {
    KeyedLimiter::builder(Gcra::new(Quota::per_minute(2).unwrap()).unwrap())
        .clock(clock.clone())
        .sweep_every(None)
        .build()
}

#[tokio::test(start_paused = true)]
async fn dry_run_lets_refusals_through_with_the_headers_of_their_429() {
    let clock = ManualClock::new();
    let recorder = Arc::new(Recorder::default());
    let layer = RateLimitLayer::builder(PeerIp::new(), per_ip(&clock))
        .policy_name("per-ip")
        .observer(recorder.clone())
        .dry_run(true)
        .build()
        .unwrap();
    let mut service = layer.layer(ok_service());
    let mut statuses = Vec::new();
    let mut last = None;
    for _ in 0..4 {
        let response = send(
            &mut service,
            from_peer("192.0.2.1").body(String::new()).unwrap(),
        )
        .await;
        statuses.push(response.status());
        last = Some(response);
    }
    assert_eq!(statuses, [StatusCode::OK; 4]);
    let last = last.unwrap();
    // What the 429 would have said: one permit per 30 s.
    assert_eq!(header(&last, "retry-after"), "30");
    assert_eq!(header(&last, "ratelimit"), "\"per-ip\";r=0;t=30");
    let events = recorder.events.lock().unwrap();
    assert_eq!(
        events.iter().map(|e| e.1).collect::<Vec<_>>(),
        [
            Outcome::Allowed,
            Outcome::Allowed,
            Outcome::Shadow,
            Outcome::Shadow
        ]
    );
    assert!(
        events
            .iter()
            .all(|e| e.0 == "per-ip" && e.2 == 1 && e.3.is_none())
    );
    // Counted as usual: the limiter's state is the same as without dry-run.
    assert!(
        layer
            .backend()
            .peek(&"192.0.2.1".parse::<IpAddr>().unwrap())
            .is_denied()
    );
}

#[tokio::test(start_paused = true)]
async fn dry_run_never_answers_a_request_itself() {
    let clock = ManualClock::new();
    // No key and a rejecting policy: still passed on in dry-run.
    let layer = RateLimitLayer::builder(
        HeaderKey::new(http::HeaderName::from_static("x-api-key")),
        {
            KeyedLimiter::<String>::builder(Gcra::new(Quota::per_minute(1).unwrap()).unwrap())
                .clock(clock.clone())
                .sweep_every(None)
                .build()
        },
    )
    .on_missing_key(OnMissingKey::Reject)
    .dry_run(true)
    .build()
    .unwrap();
    let mut service = layer.layer(ok_service());
    let response = send(
        &mut service,
        http::Request::builder().body(String::new()).unwrap(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn the_observer_sees_each_decision_and_keys_only_when_asked() {
    let clock = ManualClock::new();
    let recorder = Arc::new(Recorder {
        keys: true,
        ..Recorder::default()
    });
    let layer = RateLimitLayer::builder(PeerIp::new(), per_ip(&clock))
        .observer_with_keys(recorder.clone())
        .build()
        .unwrap();
    let mut service = layer.layer(ok_service());
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let response = send(
            &mut service,
            from_peer("192.0.2.7").body(String::new()).unwrap(),
        )
        .await;
        statuses.push(response.status());
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    let events = recorder.events.lock().unwrap();
    assert_eq!(
        events
            .iter()
            .map(|e| (e.0.as_str(), e.1, e.3.as_deref()))
            .collect::<Vec<_>>(),
        [
            ("default", Outcome::Allowed, Some("192.0.2.7")),
            ("default", Outcome::Allowed, Some("192.0.2.7")),
            ("default", Outcome::Denied, Some("192.0.2.7")),
        ]
    );
}
