//! The RateLimit fields against draft-ietf-httpapi-ratelimit-headers-11 (the
//! latest revision), stacked layers, and the builder's ergonomics: what a
//! user following the docs writes.

use crate::support;

use std::convert::Infallible;
use std::net::IpAddr;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use support::{from_peer, header, ok_service, send};
use tollgate::{AllOf, Decision, Gcra, KeyedLimiter, Limiter, ManualClock, Quota};
use tollgate_tower::{BuildError, Global, KeyFn, PeerIp, RateLimitLayer, Rejection};
use tower::Layer;

fn gcra(quota: Quota) -> Gcra {
    Gcra::new(quota).unwrap()
}

fn per_ip<A: tollgate::Algorithm>(algorithm: A, clock: &ManualClock) -> KeyedLimiter<IpAddr, A> {
    KeyedLimiter::builder(algorithm)
        .clock(clock.clone())
        .sweep_every(None)
        .build()
}

/// Every field line of `name`, in order.
fn all<B>(response: &Response<B>, name: &str) -> Vec<String> {
    response
        .headers()
        .get_all(name)
        .iter()
        .map(|value| value.to_str().unwrap().to_owned())
        .collect()
}

/// The `t` of the item named `policy` in a `RateLimit` field line, if any.
fn t_of(items: &[String], policy: &str) -> Option<u64> {
    let item = items
        .iter()
        .find(|item| item.starts_with(&format!("\"{policy}\";")))?;
    item.split(';')
        .find_map(|parameter| parameter.strip_prefix("t="))
        .map(|t| t.parse().unwrap())
}

/// Regression: stacked layers replaced each other's
/// `RateLimit` fields, so a 429 from the inner layer reached the client as
/// the outer layer's `"outer";r=98`, and the policy that denied was gone.
#[tokio::test(start_paused = true)]
async fn stacked_layers_append_their_items_and_the_denying_policy_survives() {
    let clock = ManualClock::new();
    // Outer: 100 per minute per client. Inner: 2 per minute for everyone.
    let outer = RateLimitLayer::builder(
        PeerIp::new(),
        per_ip(gcra(Quota::per_minute(100).unwrap()), &clock),
    )
    .policy_name("per-client")
    .headers_on_success(true)
    .build()
    .unwrap();
    let inner = RateLimitLayer::builder(
        Global,
        Limiter::with_clock(gcra(Quota::per_minute(2).unwrap()), clock.clone()),
    )
    .policy_name("global")
    .headers_on_success(true)
    .build()
    .unwrap();
    let mut service = outer.layer(inner.layer(ok_service()));
    let request = || from_peer("192.0.2.1").body(String::new()).unwrap();
    for _ in 0..2 {
        let admitted = send(&mut service, request()).await;
        assert_eq!(admitted.status(), StatusCode::OK);
        assert_eq!(all(&admitted, "ratelimit").len(), 2, "{admitted:?}");
    }
    let denied = send(&mut service, request()).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let current = all(&denied, "ratelimit");
    let policies = all(&denied, "ratelimit-policy");
    // The inner layer's item first (it wrote first), then the outer's.
    assert_eq!(
        current,
        ["\"global\";r=0;t=30", "\"per-client\";r=97"],
        "{denied:?}"
    );
    assert_eq!(policies, ["\"global\";q=2", "\"per-client\";q=100"]);
    assert_eq!(header(&denied, "retry-after"), "30");
}

/// Regression: on a 429, `t` carried the time until the
/// quota was full again, later than `Retry-After` (1 s against 2 s; 72 s
/// against 86,385 s on a daily limit), while draft -11 §4.1.2 makes `t` the
/// effective window (the time within which the client can use no more than
/// `r`) and §6 says `Retry-After` must not point earlier than its end.
#[tokio::test(start_paused = true)]
async fn t_is_the_effective_window_and_never_after_retry_after() {
    let clock = ManualClock::new();
    // 1,200 per day: one permit every 72 s, all of them at once allowed.
    let daily = per_ip(gcra(Quota::per_day(1_200).unwrap()), &clock);
    let twin = daily.clone();
    let mut service = RateLimitLayer::builder(PeerIp::new(), daily)
        .headers_on_success(true)
        .build()
        .unwrap()
        .layer(ok_service());
    let request = || from_peer("192.0.2.1").body(String::new()).unwrap();
    let peer: IpAddr = "192.0.2.1".parse().unwrap();
    assert!(twin.check_n(&peer, 1_199).unwrap().is_allowed());
    let last = send(&mut service, request()).await;
    assert_eq!(last.status(), StatusCode::OK);
    // An admission says nothing it does not know: no `t`.
    assert_eq!(header(&last, "ratelimit"), "\"default\";r=0");
    let mut denials = 0;
    // Up to 72 s in all, in nanoseconds: denied until the last.
    for advance in [0, 1, 35_000_000_000, 36_999_999_998, 1] {
        clock.advance(Duration::from_nanos(advance));
        let response = send(&mut service, request()).await;
        if response.status() == StatusCode::OK {
            break;
        }
        denials += 1;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let retry: u64 = header(&response, "retry-after").parse().unwrap();
        let t = t_of(&all(&response, "ratelimit"), "default").expect("t on a 429");
        assert!(t <= retry, "t={t} after Retry-After={retry}");
        assert!(t <= 72, "t={t}: the next permit is at most 72 s away");
        assert!(t >= 1, "t={t}: nothing is available before it");
    }
    assert_eq!(denials, 4);
    // AllOf of 10 per second and 100 per day: after the second's 10, `t` is
    // the second's wait, not the day's 8,640 s to full.
    let limits = AllOf::new(vec![
        gcra(Quota::per_second(10).unwrap()),
        gcra(Quota::per_day(100).unwrap()),
    ])
    .unwrap();
    let mut service =
        RateLimitLayer::new(PeerIp::new(), per_ip(limits, &clock)).layer(ok_service());
    for _ in 0..10 {
        assert_eq!(send(&mut service, request()).await.status(), StatusCode::OK);
    }
    let denied = send(&mut service, request()).await;
    assert_eq!(header(&denied, "retry-after"), "1");
    assert_eq!(header(&denied, "ratelimit"), "\"default\";r=0;t=1");
}

/// Regression: `policy_window(Duration::ZERO)` was sent
/// as `w=0`, which the draft forbids (§3.1.3), and 10/s with a burst of 20
/// and a 1 s window advertised `q=20;w=1`, twice the rate a client can keep.
#[tokio::test(start_paused = true)]
async fn the_advertised_policy_is_a_quota_a_client_can_use() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(10).unwrap().with_burst(20).unwrap();
    let mut service = RateLimitLayer::builder(PeerIp::new(), per_ip(gcra(quota), &clock))
        .policy_quota(quota)
        .headers_on_success(true)
        .build()
        .unwrap()
        .layer(ok_service());
    let response = send(
        &mut service,
        from_peer("192.0.2.1").body(String::new()).unwrap(),
    )
    .await;
    assert_eq!(
        header(&response, "ratelimit-policy"),
        "\"default\";q=10;w=1"
    );
    // A client paced at q per w is never denied: 10 per second for a minute.
    for _ in 0..600 {
        clock.advance(Duration::from_millis(100));
        let paced = send(
            &mut service,
            from_peer("192.0.2.2").body(String::new()).unwrap(),
        )
        .await;
        assert_eq!(paced.status(), StatusCode::OK);
    }

    // A window the draft cannot carry is refused when the layer is built.
    for (quota, period) in [
        (
            Quota::new(5, Duration::from_millis(500)).unwrap(),
            Duration::from_millis(500),
        ),
        (
            Quota::new(5, Duration::from_millis(1_500)).unwrap(),
            Duration::from_millis(1_500),
        ),
        (
            Quota::new(5, Duration::from_nanos(1)).unwrap(),
            Duration::from_nanos(1),
        ),
    ] {
        let refused = RateLimitLayer::builder(Global, Limiter::new(gcra(quota)))
            .policy_quota(quota)
            .build()
            .unwrap_err();
        assert_eq!(refused, BuildError::PolicyWindow { period });
        assert!(refused.to_string().contains("whole number of seconds"));
    }
    // A zero window cannot even be written: a quota refuses a zero period.
    assert!(Quota::new(5, Duration::ZERO).is_err());
    // A name the fields cannot carry, too, at build, not mid-chain.
    let refused =
        RateLimitLayer::builder(Global, Limiter::new(gcra(Quota::per_second(1).unwrap())))
            .policy_name("caf\u{e9}")
            .headers_on_success(true)
            .build()
            .unwrap_err();
    assert_eq!(
        refused,
        BuildError::PolicyName {
            name: "caf\u{e9}".into()
        }
    );
}

/// Regression: what a user writes from the docs alone. A rejection
/// hook returning a plain `Response<&str>` (no `http_body_util`, no
/// `bytes`), the decision in the handler's request, methods exempted, and a
/// key of two parts.
#[tokio::test(start_paused = true)]
async fn a_user_needs_no_body_crate_and_the_handler_sees_its_decision() {
    let clock = ManualClock::new();
    let limiter = Limiter::with_clock(gcra(Quota::per_minute(2).unwrap()), clock.clone());
    let inner = tower::service_fn(|request: Request<String>| async move {
        let decision = request.extensions().get::<Decision>().copied();
        let text = decision.map_or("none".to_owned(), |d| d.remaining().to_string());
        Ok::<_, Infallible>(Response::new(text))
    });
    let mut service = RateLimitLayer::builder(Global, limiter)
        .skip_methods([Method::OPTIONS])
        .on_rejection(|rejection: &Rejection| {
            let mut response = Response::new("slow down\n");
            *response.status_mut() = rejection.status();
            response
        })
        .build()
        .unwrap()
        .layer(inner);
    let get = || Request::get("/").body(String::new()).unwrap();
    let options = || {
        Request::builder()
            .method(Method::OPTIONS)
            .uri("/")
            .body(String::new())
            .unwrap()
    };
    // Preflights are not charged, and carry no decision.
    for _ in 0..5 {
        let preflight = send(&mut service, options()).await;
        assert_eq!(preflight.status(), StatusCode::OK);
        assert_eq!(support::body(preflight).await, "none");
    }
    // The handler sees what is left after its own request.
    assert_eq!(support::body(send(&mut service, get()).await).await, "1");
    assert_eq!(support::body(send(&mut service, get()).await).await, "0");
    let denied = send(&mut service, get()).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "retry-after"), "30");
    assert_eq!(header(&denied, "ratelimit"), "\"default\";r=0;t=30");
    assert_eq!(support::body(denied).await, "slow down\n");
    // HEAD is charged like any method not listed.
    let head = Request::head("/").body(String::new()).unwrap();
    assert_eq!(
        send(&mut service, head).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );

    // A key of two parts (route and client): each pair its own bucket.
    let route = KeyFn::new(|parts: &http::request::Parts| {
        Ok::<_, tollgate_tower::KeyError>(parts.uri.path().to_owned())
    });
    let keyed: KeyedLimiter<(String, IpAddr)> =
        KeyedLimiter::builder(gcra(Quota::per_minute(1).unwrap()))
            .clock(clock.clone())
            .sweep_every(None)
            .build();
    let mut service = RateLimitLayer::new((route, PeerIp::new()), keyed).layer(ok_service());
    let to = |path: &str, peer: &str| {
        let mut request = from_peer(peer).body(String::new()).unwrap();
        *request.uri_mut() = path.parse().unwrap();
        request
    };
    let mut statuses = Vec::new();
    for (path, peer) in [
        ("/a", "192.0.2.1"),
        ("/a", "192.0.2.1"),
        ("/b", "192.0.2.1"),
        ("/a", "192.0.2.2"),
    ] {
        statuses.push(send(&mut service, to(path, peer)).await.status().as_u16());
    }
    assert_eq!(statuses, [200, 429, 200, 200]);
}

/// Regression: `policy_quota` could advertise a quota the layer does
/// not enforce (a client pacing itself to it is refused). `build` checks it
/// against the backend's quotas, burst aside; failed before the fix (the
/// layer was built).
#[test]
fn an_advertised_quota_the_backend_does_not_enforce_is_refused() {
    let ten = Quota::per_second(10).unwrap().with_burst(20).unwrap();
    let twenty = Quota::per_second(20).unwrap();
    let hourly = Quota::new(100, Duration::from_secs(3_600)).unwrap();
    let clock = ManualClock::new();

    // Keyed, plain limiter: advertising 20/s over a 10/s limit is refused.
    let refused = RateLimitLayer::builder(PeerIp::new(), per_ip(gcra(ten), &clock))
        .policy_quota(twenty)
        .build()
        .unwrap_err();
    assert_eq!(
        refused,
        BuildError::PolicyQuota {
            advertised: (20, Duration::from_secs(1)),
            enforced: vec![(10, Duration::from_secs(1))],
        }
    );
    assert!(refused.to_string().contains("not one the backend enforces"));
    // The quota it runs, burst aside, is accepted.
    let burst_aside = Quota::per_second(10).unwrap();
    assert!(
        RateLimitLayer::builder(PeerIp::new(), per_ip(gcra(ten), &clock))
            .policy_quota(burst_aside)
            .build()
            .is_ok()
    );
    // Several limits: any one of them.
    let both = AllOf::new(vec![gcra(ten), gcra(hourly)]).unwrap();
    assert!(
        RateLimitLayer::builder(Global, Limiter::new(both.clone()))
            .policy_quota(hourly)
            .build()
            .is_ok()
    );
    assert!(matches!(
        RateLimitLayer::builder(Global, Limiter::new(both))
            .policy_quota(twenty)
            .build(),
        Err(BuildError::PolicyQuota { .. })
    ));
    // A shaper, too.
    let shaper = tollgate::Shaper::new(ten).unwrap();
    assert!(matches!(
        RateLimitLayer::builder(Global, shaper)
            .policy_quota(twenty)
            .build(),
        Err(BuildError::PolicyQuota { .. })
    ));
}
