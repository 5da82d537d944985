//! The charge call (`charge.rs`): a budget looked at by the auth call and
//! charged after the response, and every hostile cost refused unread.

use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use http::{Method, Request, StatusCode};
use tower::ServiceExt;

use crate::backend::MemoryBackend;
use crate::config::{Config, ServerSettings};
use crate::metrics::Metrics;
use crate::rules::RuleSet;
use crate::service::{RequestLimits, Service};

/// 1,000 tokens an hour per `x-user-id`, and a gate of 100 requests a
/// minute per client beside it.
const BUDGET: &str = r#"
domain: llm
forward_auth:
  trusted_proxies: [127.0.0.1]
  rate_limits:
    - actions: [{request_headers: {header_name: x-user-id, descriptor_key: user}}]
    - actions: [{remote_address: {}}]
descriptors:
  - key: user
    budget: {unit: tokens}
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 100}
"#;

fn router(yaml: &str) -> axum::Router {
    let config = Config::from_yaml(Path::new("t.yaml"), yaml).expect("valid");
    let service = Service::new(
        RuleSet::new(&config),
        Arc::new(MemoryBackend::new(tollgate::ManualClock::new())),
        Arc::new(Metrics::new()),
        RequestLimits::of(&ServerSettings::default()),
        8,
    )
    .expect("service");
    crate::http::router::api_routes(
        Arc::new(service),
        None,
        Arc::new(std::sync::atomic::AtomicBool::new(true)),
        1024,
    )
}

async fn call(
    router: &axum::Router,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: Body,
) -> (StatusCode, String) {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .body(body)
        .expect("request");
    for (name, value) in [
        ("x-forwarded-method", "POST"),
        ("x-forwarded-uri", "/v1/chat/completions"),
        ("x-forwarded-for", "198.51.100.7"),
    ]
    .iter()
    .chain(headers)
    {
        request.headers_mut().append(
            http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
            http::HeaderValue::from_str(value).expect("value"),
        );
    }
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(std::net::SocketAddr::new(
            [127, 0, 0, 1].into(),
            40000,
        )));
    let response = router.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

async fn auth(router: &axum::Router, user: &str) -> StatusCode {
    let headers = [("x-user-id", user)];
    call(
        router,
        Method::GET,
        "/v1/forward-auth/llm",
        &headers,
        Body::empty(),
    )
    .await
    .0
}

async fn charge(router: &axum::Router, user: &str, cost: &str) -> (StatusCode, String) {
    let headers = [("x-user-id", user), ("x-tollgate-cost", cost)];
    call(
        router,
        Method::POST,
        "/v1/forward-auth/llm/charge",
        &headers,
        Body::empty(),
    )
    .await
}

#[tokio::test]
async fn the_auth_call_looks_and_the_charge_call_records_over_the_limit() {
    let router = router(BUDGET);
    assert_eq!(auth(&router, "alice").await, StatusCode::OK);
    let (status, body) = charge(&router, "alice", "600").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(answer["over_limit"], false);
    assert_eq!(answer["charged"][0]["rule"], "llm.user");
    assert_eq!(answer["charged"][0]["unit"], "tokens");
    assert_eq!(answer["charged"][0]["cost"], 600);
    assert_eq!(answer["charged"][0]["remaining"], 400);
    // Only the budget was charged: the gate's one request so far.
    assert_eq!(auth(&router, "alice").await, StatusCode::OK, "400 left");
    let (status, body) = charge(&router, "alice", "700").await;
    assert_eq!(status, StatusCode::OK, "a charge is never refused: {body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(answer["over_limit"], true);
    assert_eq!(answer["charged"][0]["fitted"], false);
    assert_eq!(
        auth(&router, "alice").await,
        StatusCode::TOO_MANY_REQUESTS,
        "overspent: the next request is refused"
    );
    assert_eq!(auth(&router, "bob").await, StatusCode::OK);
}

#[tokio::test]
async fn a_bad_cost_is_refused_and_charges_nothing() {
    let router = router(BUDGET);
    for cost in [
        "0",
        "-5",
        "+5",
        " 5",
        "5 ",
        "1.5",
        "1e3",
        "0x10",
        "",
        "18446744073709551616",
        "99999999999999999999999999",
    ] {
        let (status, body) = charge(&router, "carol", cost).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "cost '{cost}': {body}");
        assert!(body.contains("x-tollgate-cost"), "{body}");
    }
    // Missing, and twice.
    let user = [("x-user-id", "carol")];
    let uri = "/v1/forward-auth/llm/charge";
    let (status, _) = call(&router, Method::POST, uri, &user, Body::empty()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let twice = [
        ("x-user-id", "carol"),
        ("x-tollgate-cost", "5"),
        ("x-tollgate-cost", "5"),
    ];
    let (status, _) = call(&router, Method::POST, uri, &twice, Body::empty()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // A body, whatever its size, is refused unread.
    let with_cost = [("x-user-id", "carol"), ("x-tollgate-cost", "5")];
    let huge = Body::from(vec![b'x'; 4 << 20]);
    let (status, body) = call(&router, Method::POST, uri, &with_cost, huge).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // Another method.
    let (status, _) = call(&router, Method::GET, uri, &with_cost, Body::empty()).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    // Nothing was charged by any of them: the whole budget remains.
    let (status, body) = charge(&router, "carol", "1000").await;
    assert_eq!(status, StatusCode::OK);
    let answer: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(answer["charged"][0]["fitted"], true, "{body}");
    assert_eq!(answer["charged"][0]["remaining"], 0);
    // At exactly the limit a look still passes (envoyproxy/ratelimit's rule).
    assert_eq!(auth(&router, "carol").await, StatusCode::OK);
}

#[tokio::test]
async fn the_largest_cost_is_clamped_and_locks_the_key_for_a_bounded_time() {
    let router = router(BUDGET);
    let (status, body) = charge(&router, "dave", "18446744073709551615").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        answer["charged"][0]["cost"],
        1000 * crate::config::budget::MAX_CHARGE_PERIODS,
        "{body}"
    );
    assert_eq!(auth(&router, "dave").await, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_domain_without_a_budget_refuses_the_charge() {
    let gate_only = BUDGET.replace("    budget: {unit: tokens}\n", "");
    let router = router(&gate_only);
    let (status, body) = charge(&router, "erin", "5").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("no budget rule"), "{body}");
}
