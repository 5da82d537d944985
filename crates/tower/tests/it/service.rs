//! The service called directly (no network), on a manual clock or tokio's
//! paused clock: sharing, readiness, exact headers, keys, costs, modes.

use crate::support;

use std::convert::Infallible;
use std::net::IpAddr;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use support::{TokioClock, body, from_peer, header, ok_service, send};
use tollgate::{AllOf, Decision, Gcra, KeyedLimiter, Limiter, ManualClock, Quota};
use tollgate_tower::cost::by_content_length;
use tollgate_tower::response::retry_after_secs;
use tollgate_tower::{
    BuildError, Global, HeaderKey, KeyError, KeyExtractor, KeyFn, OnMissingKey, OrKey, PeerIp,
    RateLimitLayer, Rejection, settle,
};
use tower::{Layer, Service, ServiceExt};

fn gcra(quota: Quota) -> Gcra {
    Gcra::new(quota).unwrap()
}

fn per_ip(quota: Quota, clock: &ManualClock) -> KeyedLimiter<IpAddr> {
    KeyedLimiter::builder(gcra(quota))
        .clock(clock.clone())
        .sweep_every(None)
        .build()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[tokio::test(start_paused = true)]
async fn clones_and_layered_copies_share_one_limiter() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(PeerIp::new(), per_ip(Quota::per_minute(3).unwrap(), &clock));
    let mut a = layer.layer(ok_service());
    let mut b = a.clone();
    let mut c = layer.clone().layer(ok_service());
    let statuses = [
        send(&mut a, from_peer("192.0.2.1").body(String::new()).unwrap())
            .await
            .status(),
        send(&mut b, from_peer("192.0.2.1").body(String::new()).unwrap())
            .await
            .status(),
        send(&mut c, from_peer("192.0.2.1").body(String::new()).unwrap())
            .await
            .status(),
        send(&mut a, from_peer("192.0.2.1").body(String::new()).unwrap())
            .await
            .status(),
        send(&mut c, from_peer("192.0.2.1").body(String::new()).unwrap())
            .await
            .status(),
    ];
    use StatusCode as S;
    assert_eq!(
        statuses,
        [
            S::OK,
            S::OK,
            S::OK,
            S::TOO_MANY_REQUESTS,
            S::TOO_MANY_REQUESTS
        ]
    );
    // Another client is untouched.
    let other = send(&mut b, from_peer("192.0.2.2").body(String::new()).unwrap()).await;
    assert_eq!(other.status(), S::OK);
    assert_eq!(layer.backend().len(), 2);
}

/// The headers of a denial, computed from the decision by hand.
fn expected(decision: &Decision, window: u64) -> (String, String, String) {
    let secs_up = |d: Duration| d.as_secs() + u64::from(d.subsec_nanos() > 0);
    (
        secs_up(decision.retry_after()).max(1).to_string(),
        format!("\"default\";q={};w={window}", decision.limit()),
        format!(
            "\"default\";r={};t={}",
            decision.remaining(),
            secs_up(decision.retry_after())
        ),
    )
}

#[tokio::test(start_paused = true)]
async fn denial_headers_are_exactly_the_decision() {
    let clock = ManualClock::new();
    // 2 per minute: one permit back every 30 s.
    let limiter = per_ip(Quota::per_minute(2).unwrap(), &clock);
    let twin = limiter.clone();
    let layer = RateLimitLayer::builder(PeerIp::new(), limiter)
        .policy_quota(Quota::per_minute(2).unwrap())
        .build()
        .unwrap();
    let mut service = layer.layer(ok_service());
    let request = || from_peer("192.0.2.1").body(String::new()).unwrap();
    for _ in 0..2 {
        assert_eq!(send(&mut service, request()).await.status(), StatusCode::OK);
    }
    // After 0 s, 12.5 s, 29.999999999 s: the wait shrinks, never to 0.
    let mut seen = Vec::new();
    for advance in [
        Duration::ZERO,
        Duration::from_millis(12_500),
        Duration::from_nanos(17_499_999_999),
    ] {
        clock.advance(advance);
        let decision = twin.peek(&ip("192.0.2.1"));
        assert!(decision.is_denied());
        let response = send(&mut service, request()).await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let (retry, policy, current) = expected(&decision, 60);
        assert_eq!(header(&response, "retry-after"), retry);
        assert_eq!(header(&response, "ratelimit-policy"), policy);
        assert_eq!(header(&response, "ratelimit"), current);
        assert_eq!(
            header(&response, "content-type"),
            "text/plain; charset=utf-8"
        );
        seen.push((retry, current));
    }
    let seen: Vec<(&str, &str)> = seen.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(
        seen,
        [
            ("30", "\"default\";r=0;t=30"),
            ("18", "\"default\";r=0;t=18"),
            ("1", "\"default\";r=0;t=1"),
        ]
    );
    clock.advance(Duration::from_nanos(1));
    assert_eq!(send(&mut service, request()).await.status(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn a_sub_second_wait_is_one_second_and_remaining_never_negative() {
    let clock = ManualClock::new();
    // 100 per second, bursts of 3: 10 ms between permits.
    let limiter = per_ip(
        Quota::per_second(100).unwrap().with_burst(3).unwrap(),
        &clock,
    );
    let layer = RateLimitLayer::builder(PeerIp::new(), limiter)
        .headers_on_success(true)
        .build()
        .unwrap();
    let mut service = layer.layer(ok_service());
    let mut remaining = Vec::new();
    for _ in 0..5 {
        let response = send(
            &mut service,
            from_peer("192.0.2.9").body(String::new()).unwrap(),
        )
        .await;
        remaining.push((response.status().as_u16(), header(&response, "ratelimit")));
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(header(&response, "retry-after"), "1");
        } else {
            assert_eq!(header(&response, "retry-after"), "");
            assert_eq!(header(&response, "ratelimit-policy"), "\"default\";q=3");
        }
    }
    assert_eq!(
        remaining,
        [
            (200, "\"default\";r=2".to_owned()),
            (200, "\"default\";r=1".to_owned()),
            (200, "\"default\";r=0".to_owned()),
            (429, "\"default\";r=0;t=1".to_owned()),
            (429, "\"default\";r=0;t=1".to_owned()),
        ]
    );
    // Rounded up, never 0, for every denial a decision can carry.
    for nanos in [1, 999_999_999, 1_000_000_000, 1_000_000_001] {
        let limiter = Limiter::with_clock(
            gcra(Quota::new(1, Duration::from_nanos(nanos)).unwrap()),
            ManualClock::new(),
        );
        let _ = limiter.check();
        let denied = limiter.check();
        assert!(denied.is_denied());
        let secs = retry_after_secs(&denied);
        assert!(secs >= 1);
        assert!(Duration::from_secs(secs) >= denied.retry_after());
        assert!(Duration::from_secs(secs - 1) < denied.retry_after());
    }
}

/// A service that is ready only when its gate is open, and counts calls.
#[derive(Clone)]
struct Gated {
    open: Arc<AtomicBool>,
    calls: Arc<AtomicUsize>,
}

impl Service<Request<String>> for Gated {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // SeqCst: a test flag, no performance at stake.
        if self.open.load(Ordering::SeqCst) {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }

    fn call(&mut self, _: Request<String>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(Response::new("ok".to_owned())))
    }
}

#[tokio::test(start_paused = true)]
async fn readiness_is_the_inner_services_and_takes_no_permit() {
    let clock = ManualClock::new();
    let gated = Gated {
        open: Arc::new(AtomicBool::new(false)),
        calls: Arc::new(AtomicUsize::new(0)),
    };
    let layer = RateLimitLayer::new(
        Global,
        Limiter::with_clock(gcra(Quota::per_minute(2).unwrap()), clock),
    );
    let mut service = layer.layer(gated.clone());
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    assert!(service.poll_ready(&mut cx).is_pending());
    gated.open.store(true, Ordering::SeqCst);
    // Polling ready many times takes nothing from the limiter.
    for _ in 0..100 {
        assert!(service.poll_ready(&mut cx).is_ready());
    }
    let request = || Request::new(String::new());
    assert_eq!(send(&mut service, request()).await.status(), StatusCode::OK);
    assert_eq!(send(&mut service, request()).await.status(), StatusCode::OK);
    assert_eq!(
        send(&mut service, request()).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // The denial never reached the inner service.
    assert_eq!(gated.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_missing_key_is_answered_as_configured() {
    let clock = ManualClock::new();
    // No connection info: the server is misconfigured.
    let layer = RateLimitLayer::new(PeerIp::new(), per_ip(Quota::per_minute(1).unwrap(), &clock));
    let mut service = layer.layer(ok_service());
    let response = send(&mut service, Request::new(String::new())).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(header(&response, "retry-after").is_empty());
    let text = body(response).await;
    assert!(
        String::from_utf8_lossy(&text).contains("no connection address"),
        "{text:?}"
    );

    let api_key = || HeaderKey::new(HeaderName::from_static("x-api-key"));
    let keyed = || {
        KeyedLimiter::<String>::builder(gcra(Quota::per_minute(1).unwrap()))
            .clock(clock.clone())
            .sweep_every(None)
            .build()
    };
    // No API key: the client's fault.
    let mut service = RateLimitLayer::new(api_key(), keyed()).layer(ok_service());
    assert_eq!(
        send(&mut service, Request::new(String::new()))
            .await
            .status(),
        StatusCode::BAD_REQUEST
    );

    // Explicitly one shared bucket for anonymous clients.
    let limiter = keyed();
    let layer = RateLimitLayer::builder(api_key(), limiter.clone())
        .on_missing_key(OnMissingKey::Use("anonymous".to_owned()))
        .build()
        .unwrap();
    let mut service = layer.layer(ok_service());
    assert_eq!(
        send(&mut service, Request::new(String::new()))
            .await
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        send(&mut service, Request::new(String::new()))
            .await
            .status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert!(limiter.peek("anonymous").is_denied());
    let keyed_request = Request::get("/")
        .header("x-api-key", "k1")
        .body(String::new())
        .unwrap();
    assert_eq!(
        send(&mut service, keyed_request).await.status(),
        StatusCode::OK
    );

    // Explicitly unlimited.
    let layer = RateLimitLayer::builder(api_key(), keyed())
        .on_missing_key(OnMissingKey::Allow)
        .build()
        .unwrap();
    let mut service = layer.layer(ok_service());
    for _ in 0..3 {
        assert_eq!(
            send(&mut service, Request::new(String::new()))
                .await
                .status(),
            StatusCode::OK
        );
    }
}

#[tokio::test(start_paused = true)]
async fn api_keys_get_their_tier_and_anonymous_clients_their_address() {
    type Key = OrKey<String, IpAddr>;
    let clock = ManualClock::new();
    // Anonymous 2 per second, keyed clients 5 per second, all under 6 per day.
    let limits = |per_second| {
        AllOf::new(vec![
            gcra(Quota::per_second(per_second).unwrap()),
            gcra(Quota::per_day(6).unwrap()),
        ])
        .unwrap()
    };
    let limiter: KeyedLimiter<Key, AllOf<Gcra>> = KeyedLimiter::builder(limits(2))
        .override_with(move |key: &Key| matches!(key, OrKey::First(_)).then(|| limits(5)))
        .clock(clock.clone())
        .sweep_every(None)
        .build();
    let extractor = HeaderKey::new(HeaderName::from_static("x-api-key")).or(PeerIp::new());
    let mut service = RateLimitLayer::new(extractor, limiter).layer(ok_service());
    let anonymous = || from_peer("192.0.2.1").body(String::new()).unwrap();
    let keyed = || {
        from_peer("192.0.2.1")
            .header("x-api-key", "k1")
            .body(String::new())
            .unwrap()
    };
    let mut admitted = (0, 0);
    for _ in 0..10 {
        admitted.0 += usize::from(send(&mut service, anonymous()).await.status() == StatusCode::OK);
        admitted.1 += usize::from(send(&mut service, keyed()).await.status() == StatusCode::OK);
    }
    assert_eq!(admitted, (2, 5));
    // A second later the day's limit binds the keyed client: 1 more.
    clock.advance(Duration::from_secs(1));
    let mut more = 0;
    for _ in 0..5 {
        more += usize::from(send(&mut service, keyed()).await.status() == StatusCode::OK);
    }
    assert_eq!(more, 1);
    let denied = send(&mut service, keyed()).await;
    assert_eq!(header(&denied, "ratelimit-policy"), "\"default\";q=6");
}

#[tokio::test(start_paused = true)]
async fn costs_come_from_the_request() {
    let clock = ManualClock::new();
    let limiter = Limiter::with_clock(gcra(Quota::per_minute(10).unwrap()), clock);
    let layer = RateLimitLayer::builder(Global, limiter)
        .cost(by_content_length(NonZeroU64::new(100).unwrap(), 10))
        .build()
        .unwrap();
    let mut service = layer.layer(ok_service());
    let post = |length: &str| {
        Request::post("/")
            .header("content-length", length)
            .body(String::new())
            .unwrap()
    };
    // 450 bytes: 5 permits; then 400: 4; then 200 does not fit in the 1 left.
    assert_eq!(
        send(&mut service, post("450")).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        send(&mut service, post("400")).await.status(),
        StatusCode::OK
    );
    let denied = send(&mut service, post("200")).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    // One left, the request cost two: no `t` (the next permit's time is
    // not in the decision; `retry_after` is when both fit).
    assert_eq!(header(&denied, "ratelimit"), "\"default\";r=1");
    // Above the quota's capacity: never admissible.
    let too_big = send(&mut service, post("5000")).await;
    assert_eq!(too_big.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(header(&too_big, "retry-after").is_empty());
    // A route weight.
    let limiter = Limiter::with_clock(gcra(Quota::per_minute(10).unwrap()), ManualClock::new());
    let layer = RateLimitLayer::builder(Global, limiter)
        .cost(|parts: &http::request::Parts| if parts.uri.path() == "/search" { 4 } else { 1 })
        .build()
        .unwrap();
    let mut service = layer.layer(ok_service());
    let mut admitted = 0;
    for _ in 0..5 {
        let search = Request::get("/search").body(String::new()).unwrap();
        admitted += usize::from(send(&mut service, search).await.status() == StatusCode::OK);
    }
    assert_eq!(admitted, 2);
    assert_eq!(
        send(&mut service, Request::new(String::new()))
            .await
            .status(),
        StatusCode::OK
    );
}

#[tokio::test(start_paused = true)]
async fn a_custom_rejection_keeps_the_rate_limit_headers() {
    let limiter = Limiter::with_clock(gcra(Quota::per_minute(1).unwrap()), ManualClock::new());
    let layer = RateLimitLayer::builder(Global, limiter)
        .policy_name("api")
        .on_rejection(|rejection: &Rejection| {
            let retry = rejection
                .decision()
                .map_or(0, |d| d.retry_after().as_millis());
            Response::builder()
                .status(rejection.status())
                .header("content-type", "application/json")
                .body(format!("{{\"retry_ms\":{retry}}}"))
                .unwrap()
        })
        .build()
        .unwrap();
    let mut service = layer.layer(ok_service());
    let _ = send(&mut service, Request::new(String::new())).await;
    let denied = send(&mut service, Request::new(String::new())).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "content-type"), "application/json");
    assert_eq!(header(&denied, "retry-after"), "60");
    assert_eq!(header(&denied, "ratelimit"), "\"api\";r=0;t=60");
    assert_eq!(
        body(denied).await,
        Bytes::from_static(b"{\"retry_ms\":60000}")
    );
    assert!(
        RateLimitLayer::builder(Global, Limiter::new(gcra(Quota::per_minute(1).unwrap())))
            .policy_name("caf\u{e9}")
            .build()
            .is_err_and(|error| matches!(error, BuildError::PolicyName { .. }))
    );
}

#[tokio::test(start_paused = true)]
async fn grpc_requests_get_resource_exhausted_with_retry_metadata() {
    let limiter = Limiter::with_clock(gcra(Quota::per_minute(4).unwrap()), ManualClock::new());
    let mut service = RateLimitLayer::new(Global, limiter).layer(ok_service());
    let grpc = || {
        Request::post("/pkg.Service/Method")
            .header("content-type", "application/grpc+proto")
            .body(String::new())
            .unwrap()
    };
    for _ in 0..4 {
        assert_eq!(header(&send(&mut service, grpc()).await, "grpc-status"), "");
    }
    let denied = send(&mut service, grpc()).await;
    assert_eq!(denied.status(), StatusCode::OK);
    assert_eq!(header(&denied, "content-type"), "application/grpc");
    assert_eq!(header(&denied, "grpc-status"), "8");
    assert_eq!(
        header(&denied, "grpc-message"),
        "too many requests: retry after 15 s"
    );
    assert_eq!(header(&denied, "retry-after"), "15");
    assert_eq!(header(&denied, "grpc-retry-pushback-ms"), "15000");
    assert!(body(denied).await.is_empty());
    // A missing key on gRPC is INVALID_ARGUMENT, not an HTTP 400.
    let keyed = KeyedLimiter::<String>::new(gcra(Quota::per_minute(4).unwrap()));
    let mut service =
        RateLimitLayer::new(HeaderKey::new(HeaderName::from_static("x-api-key")), keyed)
            .layer(ok_service());
    let response = send(&mut service, grpc()).await;
    assert_eq!(
        (response.status(), header(&response, "grpc-status")),
        (StatusCode::OK, "3".to_owned())
    );
}

#[tokio::test(start_paused = true)]
async fn waiting_admits_within_the_budget_and_rejects_beyond_it() {
    // The limiter reads tokio's paused clock, so sleeping moves both.
    let limiter = Limiter::with_clock(gcra(Quota::per_second(1).unwrap()), TokioClock::new());
    let layer = RateLimitLayer::builder(Global, limiter.clone())
        .max_delay(Duration::from_millis(1_500))
        .build()
        .unwrap();
    let mut service = layer.layer(ok_service());
    let start = tokio::time::Instant::now();
    assert_eq!(
        send(&mut service, Request::new(String::new()))
            .await
            .status(),
        StatusCode::OK
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    // Denied for 1 s, which fits in 1.5 s: sleeps exactly that long.
    assert_eq!(
        send(&mut service, Request::new(String::new()))
            .await
            .status(),
        StatusCode::OK
    );
    assert_eq!(start.elapsed(), Duration::from_secs(1));

    // Two waiters for one permit each second: the second one waits 2 s in
    // all, beyond its 1.5 s budget, and is rejected when it knows.
    let mut first = service.clone();
    let mut second = service.clone();
    let (a, b) = tokio::join!(send(&mut first, Request::new(String::new())), async {
        tokio::task::yield_now().await;
        send(&mut second, Request::new(String::new())).await
    });
    assert_eq!(a.status(), StatusCode::OK);
    assert_eq!(b.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&b, "retry-after"), "1");
    assert_eq!(start.elapsed(), Duration::from_secs(2));

    // A wait longer than the whole budget is rejected at once.
    let short = RateLimitLayer::builder(Global, limiter)
        .max_delay(Duration::from_millis(500))
        .build()
        .unwrap();
    let mut service = short.layer(ok_service());
    let before = tokio::time::Instant::now();
    let denied = send(&mut service, Request::new(String::new())).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(before.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_million_unique_keys_stay_under_the_cap_and_a_throttled_key_stays_throttled() {
    const CAP: usize = 10_000;
    let clock = ManualClock::new();
    let limiter: KeyedLimiter<u64> = KeyedLimiter::builder(gcra(Quota::per_hour(1).unwrap()))
        .clock(clock.clone())
        .max_keys(CAP)
        .sweep_every(None)
        .build();
    let key = KeyFn::new(|parts: &http::request::Parts| {
        parts
            .extensions
            .get::<u64>()
            .copied()
            .ok_or_else(|| KeyError::missing("u64 extension"))
    });
    let layer = RateLimitLayer::new(key, limiter.clone());
    let mut service = layer.layer(ok_service());
    let request = |key: u64| {
        Request::get("/")
            .extension(key)
            .body(String::new())
            .unwrap()
    };
    assert_eq!(
        send(&mut service, request(0)).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        send(&mut service, request(0)).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let mut admitted = 0u64;
    for key in 1..=1_000_000u64 {
        let response = send(&mut service, request(key)).await;
        admitted += u64::from(response.status() == StatusCode::OK);
        if key % 100_000 == 0 {
            assert!(limiter.len() <= CAP, "{} keys live", limiter.len());
            let throttled = send(&mut service, request(0)).await;
            assert_eq!(
                throttled.status(),
                StatusCode::TOO_MANY_REQUESTS,
                "after {key} keys"
            );
        }
    }
    assert_eq!(limiter.len(), CAP);
    // CAP - 1 keys got a state of their own; the rest shared the overflow
    // state, which admitted one.
    assert_eq!(admitted, CAP as u64);
    assert!(limiter.stats().overflowed >= 1_000_000 - CAP as u64);
}

#[tokio::test(start_paused = true)]
async fn the_service_works_as_an_axum_layer_without_buffer() {
    use axum::Router;
    use axum::routing::get;
    let clock = ManualClock::new();
    let limiter = per_ip(Quota::per_minute(1).unwrap(), &clock);
    let router: Router = Router::new()
        .route("/a", get(|| async { "a" }))
        .route("/b/{id}", get(|| async { "b" }))
        .layer(RateLimitLayer::new(
            tollgate_tower::MethodRoute,
            KeyedLimiter::new(gcra(Quota::per_minute(1).unwrap())),
        ))
        .layer(RateLimitLayer::new(PeerIp::new(), limiter));
    let request = |peer: &str, path: &str| {
        from_peer(peer)
            .uri(path)
            .body(axum::body::Body::empty())
            .unwrap()
    };
    let status = |response: Response<axum::body::Body>| response.status();
    assert_eq!(
        status(
            router
                .clone()
                .oneshot(request("192.0.2.1", "/a"))
                .await
                .unwrap()
        ),
        StatusCode::OK
    );
    assert_eq!(
        status(
            router
                .clone()
                .oneshot(request("192.0.2.1", "/a"))
                .await
                .unwrap()
        ),
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another address, another route template: its own buckets.
    assert_eq!(
        status(
            router
                .clone()
                .oneshot(request("192.0.2.2", "/b/1"))
                .await
                .unwrap()
        ),
        StatusCode::OK
    );
    // Same template, another id: the route bucket is spent.
    assert_eq!(
        status(
            router
                .clone()
                .oneshot(request("192.0.2.3", "/b/2"))
                .await
                .unwrap()
        ),
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// A remote-like backend: answers after a (paused-clock) round trip, or
/// fails.
struct Remote {
    limiter: KeyedLimiter<IpAddr>,
    down: Arc<AtomicBool>,
}

impl tollgate_tower::Backend<IpAddr> for Remote {
    fn decide(&self, key: &IpAddr, cost: u64) -> tollgate_tower::Decided {
        let limiter = self.limiter.clone();
        // SeqCst: a test flag.
        let down = self.down.load(Ordering::SeqCst);
        let key = *key;
        tollgate_tower::Decided::Later(Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(3)).await;
            if down {
                return Err(tollgate_tower::BackendError::Unavailable(
                    "connection refused".into(),
                ));
            }
            limiter
                .check_n(&key, cost)
                .map_err(tollgate_tower::BackendError::Cost)
        }))
    }
}

#[tokio::test(start_paused = true)]
async fn an_async_backend_decides_later_and_its_failure_is_503() {
    let clock = ManualClock::new();
    let down = Arc::new(AtomicBool::new(false));
    let remote = Remote {
        limiter: per_ip(Quota::per_minute(1).unwrap(), &clock),
        down: Arc::clone(&down),
    };
    let gated = Gated {
        open: Arc::new(AtomicBool::new(true)),
        calls: Arc::new(AtomicUsize::new(0)),
    };
    let layer = RateLimitLayer::builder(PeerIp::new(), remote)
        .headers_on_success(true)
        .build()
        .unwrap();
    let mut service = layer.layer(gated.clone());
    let request = || from_peer("192.0.2.1").body(String::new()).unwrap();
    let start = tokio::time::Instant::now();
    let admitted = send(&mut service, request()).await;
    assert_eq!(admitted.status(), StatusCode::OK);
    assert_eq!(header(&admitted, "ratelimit"), "\"default\";r=0");
    assert_eq!(start.elapsed(), Duration::from_millis(3));
    let denied = send(&mut service, request()).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "retry-after"), "60");
    assert_eq!(gated.calls.load(Ordering::SeqCst), 1);

    down.store(true, Ordering::SeqCst);
    let failed = send(&mut service, request()).await;
    assert_eq!(failed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(header(&failed, "retry-after").is_empty());
    let grpc = from_peer("192.0.2.1")
        .header("content-type", "application/grpc")
        .body(String::new())
        .unwrap();
    let failed = send(&mut service, grpc).await;
    assert_eq!(header(&failed, "grpc-status"), "14");
    assert_eq!(gated.calls.load(Ordering::SeqCst), 1);
}

/// A backend that denies without naming a wait.
struct DeniesWithoutWait;

impl tollgate_tower::Backend<()> for DeniesWithoutWait {
    fn decide(&self, _: &(), _: u64) -> tollgate_tower::Decided {
        tollgate_tower::Decided::Now(Ok(Decision::from_parts(
            false,
            1,
            0,
            Duration::ZERO,
            Duration::ZERO,
        )))
    }
}

#[tokio::test(start_paused = true)]
async fn a_denial_without_a_wait_does_not_spin_the_wait_mode() {
    let layer = RateLimitLayer::builder(Global, DeniesWithoutWait)
        .max_delay(Duration::from_millis(10))
        .build()
        .unwrap();
    let mut service = layer.layer(ok_service());
    let start = tokio::time::Instant::now();
    let denied = send(&mut service, Request::new(String::new())).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "retry-after"), "1");
    assert_eq!(start.elapsed(), Duration::from_millis(10));
}

#[tokio::test(start_paused = true)]
async fn a_shaper_backend_releases_requests_in_order_and_refuses_past_max_delay() {
    // 10 per second, one at a time; nobody queues for more than 250 ms.
    let shaper = tollgate::Shaper::builder(Quota::per_second(10).unwrap().with_burst(1).unwrap())
        .max_delay(Duration::from_millis(250))
        .clock(tollgate::TokioClock::new())
        .build()
        .unwrap();
    let layer = RateLimitLayer::builder(Global, shaper.clone())
        .headers_on_success(true)
        .build()
        .unwrap();
    let service = layer.layer(ok_service());
    let start = tokio::time::Instant::now();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..3u64 {
        let mut service = service.clone();
        let order = Arc::clone(&order);
        tasks.push(tokio::spawn(async move {
            let response = send(&mut service, Request::get("/").body(String::new()).unwrap()).await;
            order.lock().unwrap().push((i, start.elapsed()));
            response.status()
        }));
        // Arrive in order.
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
    }
    // The fourth would wait 300 ms: refused at once, and told when waiting
    // would be within 250 ms again (50 ms, rounded up to a second).
    let mut fourth = service.clone();
    let refused = send(&mut fourth, Request::get("/").body(String::new()).unwrap()).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "retry-after"), "1");
    assert_eq!(start.elapsed(), Duration::ZERO);
    for task in tasks {
        assert_eq!(task.await.unwrap(), StatusCode::OK);
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order,
        [
            (0, Duration::ZERO),
            (1, Duration::from_millis(100)),
            (2, Duration::from_millis(200))
        ]
    );
    assert_eq!(shaper.waiters(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_request_dropped_while_shaped_gives_its_slot_back() {
    let shaper = tollgate::Shaper::builder(Quota::per_second(10).unwrap().with_burst(1).unwrap())
        .max_delay(Duration::from_secs(1))
        .clock(tollgate::TokioClock::new())
        .build()
        .unwrap();
    let service = RateLimitLayer::builder(Global, shaper.clone())
        .build()
        .unwrap()
        .layer(ok_service());
    let start = tokio::time::Instant::now();
    let mut first = service.clone();
    send(&mut first, Request::get("/").body(String::new()).unwrap()).await;
    // The second waits for 100 ms; its client goes away after 40.
    let mut second = service.clone();
    let gone = tokio::time::timeout(
        Duration::from_millis(40),
        send(&mut second, Request::get("/").body(String::new()).unwrap()),
    )
    .await;
    assert!(gone.is_err());
    assert_eq!(shaper.waiters(), 0);
    // The third takes the slot the second gave back: 100 ms, not 200.
    let mut third = service.clone();
    let response = send(&mut third, Request::get("/").body(String::new()).unwrap()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(start.elapsed(), Duration::from_millis(100));
}

// ---------------------------------------------------------------------------
// Reserve, then settle
// ---------------------------------------------------------------------------

/// A service answering every request with `size` bytes in chunks of 1 KiB,
/// and a `Spent` of `spent` if not 0.
fn sized_service(
    size: usize,
    spent: u64,
) -> impl Service<
    Request<String>,
    Response = Response<http_body_util::StreamBody<ChunkStream>>,
    Error = Infallible,
    Future: Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |_: Request<String>| async move {
        let chunks: Vec<_> = (0..size.div_ceil(1024))
            .map(|i| {
                let len = 1024.min(size - i * 1024);
                Ok::<_, Infallible>(http_body::Frame::data(Bytes::from(vec![b'x'; len])))
            })
            .collect();
        let mut response = Response::new(http_body_util::StreamBody::new(
            futures_util::stream::iter(chunks),
        ));
        if spent > 0 {
            response.extensions_mut().insert(settle::Spent(spent));
        }
        Ok::<_, Infallible>(response)
    })
}

type ChunkStream =
    futures_util::stream::Iter<std::vec::IntoIter<Result<http_body::Frame<Bytes>, Infallible>>>;

/// A per-client layer that settles one permit per KiB sent: 100 KiB per
/// second, bursts of 20 KiB (one permit every 10 ms).
fn settled_per_kib(
    clock: &ManualClock,
) -> (
    KeyedLimiter<IpAddr>,
    RateLimitLayer<PeerIp, KeyedLimiter<IpAddr>>,
) {
    let limiter = per_ip(
        Quota::per_second(100).unwrap().with_burst(20).unwrap(),
        clock,
    );
    let layer = RateLimitLayer::builder(PeerIp::new(), limiter.clone())
        .settle(settle::by_body_bytes(NonZeroU64::new(1024).unwrap()))
        .build()
        .unwrap();
    (limiter, layer)
}

/// A request from client 192.0.2.1 through `service`.
async fn from_client<S, B>(service: &mut S) -> Response<B>
where
    S: Service<Request<String>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    send(service, from_peer("192.0.2.1").body(String::new()).unwrap()).await
}

#[tokio::test(start_paused = true)]
async fn settle_charges_the_bytes_sent_above_the_reservation() {
    let clock = ManualClock::new();
    let (limiter, layer) = settled_per_kib(&clock);
    let mut service = layer.layer(sized_service(10 * 1024, 0));
    let peer = ip("192.0.2.1");

    let response = from_client(&mut service).await;
    assert_eq!(response.status(), StatusCode::OK);
    // Admitted on the reservation: 1 of 20 taken so far.
    assert_eq!(limiter.peek(&peer).remaining(), 18);
    assert_eq!(body(response).await.len(), 10 * 1024);
    // Settled at the end of the body: 10 KiB in all, 9 more than reserved.
    assert_eq!(limiter.peek(&peer).remaining(), 9);

    // The second response empties the bucket.
    let second = from_client(&mut service).await;
    body(second).await;
    assert_eq!(limiter.peek(&peer).retry_after(), Duration::from_millis(10));
    // 10 ms later one permit is back: the third request is admitted on it,
    // and its 10 KiB push the bucket 9 permits into debt (a charge is never
    // refused) ...
    clock.advance(Duration::from_millis(10));
    let third = from_client(&mut service).await;
    assert_eq!(third.status(), StatusCode::OK);
    body(third).await;
    // ... which the client waits out at the quota's rate: 10 × 10 ms.
    let denied = from_client(&mut service).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        limiter.peek(&peer).retry_after(),
        Duration::from_millis(100)
    );
}

#[tokio::test(start_paused = true)]
async fn a_body_dropped_unfinished_pays_for_what_was_sent_and_a_rejection_for_nothing() {
    let clock = ManualClock::new();
    let (limiter, layer) = settled_per_kib(&clock);
    let mut service = layer.layer(sized_service(10 * 1024, 0));
    let peer = ip("192.0.2.1");

    let response = from_client(&mut service).await;
    let mut body_stream = response.into_body();
    // Three chunks of ten read, then the client goes away.
    for _ in 0..3 {
        let frame = http_body_util::BodyExt::frame(&mut body_stream).await;
        assert!(frame.is_some());
    }
    assert_eq!(
        limiter.peek(&peer).remaining(),
        18,
        "not settled before the end"
    );
    drop(body_stream);
    assert_eq!(
        limiter.peek(&peer).remaining(),
        16,
        "3 KiB sent: 2 above the reservation"
    );

    // A response never read at all (dropped with its headers) costs its
    // reservation only: no byte was sent.
    let unread = from_client(&mut service).await;
    drop(unread);
    assert_eq!(limiter.peek(&peer).remaining(), 15);

    // A rejection is never settled.
    let empty = per_ip(Quota::per_second(1).unwrap(), &clock);
    let layer = RateLimitLayer::builder(PeerIp::new(), empty.clone())
        .settle(|_: &http::response::Parts, _: u64| panic!("a rejection was settled"))
        .build()
        .unwrap();
    let mut service = layer.layer(sized_service(0, 0));
    assert!(empty.check(&peer).is_allowed());
    let rejected = from_client(&mut service).await;
    assert_eq!(rejected.status(), StatusCode::TOO_MANY_REQUESTS);
    body(rejected).await;
}

#[tokio::test(start_paused = true)]
async fn settle_charges_what_the_handler_reports_spent() {
    let clock = ManualClock::new();
    // 1,000 tokens per minute per client.
    let limiter = per_ip(Quota::per_minute(1_000).unwrap(), &clock);
    let layer = RateLimitLayer::builder(PeerIp::new(), limiter.clone())
        .cost(|_: &http::request::Parts| 10)
        .settle(settle::spent())
        .build()
        .unwrap();
    let peer = ip("192.0.2.9");
    // The handler generated 250 tokens: 240 above the 10 reserved.
    let mut service = layer.clone().layer(sized_service(0, 250));
    let response = send(
        &mut service,
        from_peer("192.0.2.9").body(String::new()).unwrap(),
    )
    .await;
    assert_eq!(limiter.peek(&peer).remaining(), 989);
    body(response).await;
    assert_eq!(limiter.peek(&peer).remaining(), 749);
    // One that reports less than it reserved is not refunded.
    let mut cheap = layer.layer(sized_service(0, 3));
    let response = send(
        &mut cheap,
        from_peer("192.0.2.9").body(String::new()).unwrap(),
    )
    .await;
    body(response).await;
    assert_eq!(limiter.peek(&peer).remaining(), 739);
}

/// An `AllOf` backend: the headers carry one policy, the limit that bound
/// the decision (the core's `Decision` describes only that one), so `q`
/// moves from the per-second limit to the per-day one as the day runs out.
#[tokio::test(start_paused = true)]
async fn all_of_headers_describe_the_limit_that_decided() {
    let clock = ManualClock::new();
    let limits = AllOf::new(vec![
        gcra(Quota::per_second(10).unwrap()),
        gcra(Quota::per_day(12).unwrap()),
    ])
    .unwrap();
    let limiter: KeyedLimiter<IpAddr, AllOf<Gcra>> = KeyedLimiter::builder(limits)
        .clock(clock.clone())
        .sweep_every(None)
        .build();
    let mut service = RateLimitLayer::builder(PeerIp::new(), limiter)
        .headers_on_success(true)
        .build()
        .unwrap()
        .layer(ok_service());
    let mut seen = Vec::new();
    for second in 0..2 {
        for _ in 0..11 {
            let request = from_peer("192.0.2.9").body(String::new()).unwrap();
            let response = send(&mut service, request).await;
            let current = header(&response, "ratelimit");
            let current = current.split(";t=").next().unwrap_or_default().to_owned();
            seen.push((
                second,
                response.status().as_u16(),
                header(&response, "ratelimit-policy"),
                current,
            ));
        }
        clock.advance(Duration::from_secs(1));
    }
    seen.dedup_by(|b, a| (a.1, &a.2) == (b.1, &b.2) && a.1 == 429);
    let q10 = "\"default\";q=10".to_owned();
    let q12 = "\"default\";q=12".to_owned();
    let r = |n: u32| format!("\"default\";r={n}");
    let mut expected: Vec<_> = (0..10).map(|i| (0, 200, q10.clone(), r(9 - i))).collect();
    expected.extend([
        // The second is spent; the day still has 2.
        (0, 429, q10.clone(), r(0)),
        // A second later: the day binds.
        (1, 200, q12.clone(), r(1)),
        (1, 200, q12.clone(), r(0)),
        (1, 429, q12.clone(), r(0)),
    ]);
    assert_eq!(seen, expected);
}

/// Client A spends its permit and asks again; B asks right after A's
/// second request: when each is answered.
async fn two_clients<S, B>(mut service: S) -> [(StatusCode, Duration); 2]
where
    S: Service<Request<String>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
{
    let request = |peer: &str| from_peer(peer).body(String::new()).unwrap();
    let start = tokio::time::Instant::now();
    let first = send(&mut service, request("192.0.2.1")).await;
    assert_eq!(first.status(), StatusCode::OK);
    let (mut a, mut b) = (service.clone(), service.clone());
    let (a, b) = tokio::join!(
        async {
            let response = send(&mut a, request("192.0.2.1")).await;
            (response.status(), start.elapsed())
        },
        async {
            tokio::task::yield_now().await;
            let response = send(&mut b, request("192.0.2.2")).await;
            (response.status(), start.elapsed())
        }
    );
    [a, b]
}

/// What the module docs say of the two ways to wait: `max_delay` on a keyed
/// backend waits per key (another client is not held up), a `Shaper` is one
/// queue whatever the key (another client waits its turn).
#[tokio::test(start_paused = true)]
async fn wait_mode_is_per_key_and_a_shaper_is_one_queue_for_all_keys() {
    let keyed: KeyedLimiter<IpAddr> = KeyedLimiter::builder(gcra(Quota::per_second(1).unwrap()))
        .clock(tollgate::TokioClock::new())
        .sweep_every(None)
        .build();
    let shaper = tollgate::Shaper::builder(Quota::per_second(1).unwrap().with_burst(1).unwrap())
        .max_delay(Duration::from_millis(2_500))
        .clock(tollgate::TokioClock::new())
        .build()
        .unwrap();
    let waiting = RateLimitLayer::builder(PeerIp::new(), keyed)
        .max_delay(Duration::from_millis(1_500))
        .build()
        .unwrap()
        .layer(ok_service());
    let shaped = RateLimitLayer::new(PeerIp::new(), shaper).layer(ok_service());
    let elapsed = [two_clients(waiting).await, two_clients(shaped).await];
    let ok = StatusCode::OK;
    assert_eq!(
        elapsed,
        [
            // Keyed wait mode: A waits for its own key, B passes at once.
            [(ok, Duration::from_secs(1)), (ok, Duration::ZERO)],
            // Shaper: B queues behind A although it is another client.
            [(ok, Duration::from_secs(1)), (ok, Duration::from_secs(2))],
        ]
    );
}
