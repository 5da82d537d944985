//! The admin API (`/v1/admin/`) end to end over HTTP against the real
//! server, in memory and on a real redis-server.

#[allow(dead_code)]
use crate::support;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use support::{
    BackendSection, RedisServer, TestServer, check_json, http_client, start_with, within,
};

const TOKEN: &str = "sesame";
const ADMIN: &str = "  bearer_token: sesame\nadmin:\n  enabled: true\n";

const RULES: &str = "
domain: rl
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: fixed_window}
  - key: internal
    rate_limit: {unlimited: true}
";

async fn call(
    server: &TestServer,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = http_client()
        .request(method, server.url(path))
        .bearer_auth(TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = within(request.send()).await.expect("admin call");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// One `/v1/check` for `user`; whether it was admitted.
async fn take(server: &TestServer, user: &str) -> bool {
    let body =
        json!({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": user}]}]});
    check_json(server, Some(TOKEN), &body).await["overall_code"] == "OK"
}

async fn inspect(server: &TestServer, user: &str) -> (StatusCode, Value) {
    call(
        server,
        Method::GET,
        &format!("/v1/admin/keys/rl?descriptor=user={user}"),
        None,
    )
    .await
}

/// Every endpoint on one server started on `file` (the rules and any
/// `backend:`): inspect, run-time limits, and the refusals (token, unknown
/// key, unlimited rule, bad input). A changed limit keeps the permits
/// taken on both backends.
async fn admin_api(server: &TestServer, file: &str) {
    // Without the token: 401, whatever the route.
    let response = within(
        http_client()
            .get(server.url("/v1/admin/keys/rl?descriptor=user=a"))
            .send(),
    )
    .await
    .expect("call");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    // Inspect looks without taking.
    assert!(take(server, "alice").await);
    for _ in 0..3 {
        let (status, key) = inspect(server, "alice").await;
        assert_eq!(status, StatusCode::OK, "{key}");
        assert_eq!(key["rule"], "rl.user");
        assert_eq!(key["limit"], "3/minute fixed_window");
        assert_eq!(key["state"]["remaining"], 2, "{key}");
        assert_eq!(key["state"]["limit"], 3);
        assert_eq!(key["state"]["allowed"], true);
    }
    let (status, fresh) = inspect(server, "nobody").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(fresh["state"]["remaining"], 3);

    // Unknown domain or descriptor: 404; unlimited rule: no state.
    let (status, _) = call(
        server,
        Method::GET,
        "/v1/admin/keys/other?descriptor=user=a",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(
        server,
        Method::GET,
        "/v1/admin/keys/rl?descriptor=nope=a",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, internal) = call(
        server,
        Method::GET,
        "/v1/admin/keys/rl?descriptor=internal=x",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(internal["limit"], "unlimited");
    assert_eq!(internal["state"], Value::Null);
    let (status, _) = call(
        server,
        Method::GET,
        "/v1/admin/keys/rl?descriptor=user",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = call(server, Method::GET, "/v1/admin/keys/rl", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // A run-time limit: permits taken stay taken (alice took 1 of 3, has
    // 4 of 5), until the next reload.
    let (status, changed) = call(
        server,
        Method::PUT,
        "/v1/admin/limits",
        Some(json!({"rule": "rl.user", "limits": [{"requests_per_unit": 5, "unit": "minute", "algorithm": "fixed_window"}]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["limit"], "5/minute fixed_window");
    let (_, key) = inspect(server, "alice").await;
    assert_eq!(key["limit"], "5/minute fixed_window");
    assert_eq!(key["state"]["limit"], 5);
    let remaining = 4;
    assert_eq!(key["state"]["remaining"], remaining, "{key}");
    for _ in 0..remaining {
        assert!(take(server, "alice").await);
    }
    assert!(!take(server, "alice").await, "the new limit holds");
    let rules: Value = within(
        http_client()
            .get(server.url("/v1/rules"))
            .bearer_auth(TOKEN)
            .send(),
    )
    .await
    .expect("rules")
    .json()
    .await
    .expect("json");
    assert_eq!(rules["rules"][0]["limits"][0]["requests_per_unit"], 5);

    // Bad limits: refused, the rule unchanged.
    for (body, want) in [
        (
            json!({"rule": "rl.nope", "limits": [{"requests_per_unit": 1, "unit": "second"}]}),
            StatusCode::NOT_FOUND,
        ),
        (
            json!({"rule": "rl.user", "limits": []}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"rule": "rl.user", "limits": [{"requests_per_unit": 0, "unit": "second"}]}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"rule": "rl.user", "limits": [{"requests_per_unit": 1, "unit": "fortnight"}]}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"rule": "rl.user", "limits": [{"requests_per_unit": 1, "unit": "second"}, {"requests_per_unit": 9, "calendar": "fortnight"}]}),
            StatusCode::BAD_REQUEST,
        ),
        (json!({"rule": "rl.user"}), StatusCode::BAD_REQUEST),
    ] {
        let (status, answer) =
            call(server, Method::PUT, "/v1/admin/limits", Some(body.clone())).await;
        assert_eq!(status, want, "{body} → {answer}");
        assert!(answer["error"].is_string(), "{answer}");
    }
    let (_, key) = inspect(server, "alice").await;
    assert_eq!(key["limit"], "5/minute fixed_window");

    // A reload of the same file keeps the change (nothing to load); a
    // reload of a changed file puts the file's rules back.
    server.reloader.reload().expect("reload");
    let (_, key) = inspect(server, "alice").await;
    assert_eq!(key["limit"], "5/minute fixed_window");
    server.write_config(ADMIN, &format!("{file}# edited\n"));
    server.reloader.reload().expect("reload");
    let (_, key) = inspect(server, "alice").await;
    assert_eq!(key["limit"], "3/minute fixed_window");
}

async fn post(server: &TestServer, path: &str, user: &str, extra: Value) -> (StatusCode, Value) {
    let mut body = json!({"domain": "rl", "descriptor": [{"key": "user", "value": user}]});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    call(server, Method::POST, path, Some(body)).await
}

/// One `/v1/check` for `user` under a `limit` override of `per_hour` an
/// hour (Envoy's dynamic limit); whether it was admitted.
async fn take_overridden(server: &TestServer, user: &str, per_hour: u64) -> bool {
    let body = json!({"domain": "rl", "descriptors": [{
        "entries": [{"key": "user", "value": user}],
        "limit": {"requests_per_unit": per_hour, "unit": "hour"},
    }]});
    check_json(server, Some(TOKEN), &body).await["overall_code"] == "OK"
}

/// A `limit` override replaces the file rule's limits but not its deny
/// list or its penalties (a deny-listed key got through under any
/// override before), and an allow list does not lift the override's limit.
async fn overrides_answer_to_the_lists(server: &TestServer) {
    // Unlisted: the override's limit, not the file rule's 3 a minute.
    for _ in 0..5 {
        assert!(take_overridden(server, "olive", 100).await, "olive");
    }
    let (status, done) = post(server, "/v1/admin/lists/deny", "mallet", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert!(
        !take_overridden(server, "mallet", 100).await,
        "a deny-listed key stays denied under an override"
    );
    let (status, done) = post(
        server,
        "/v1/admin/penalize",
        "penny",
        json!({"duration_ms": 60_000}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert!(
        !take_overridden(server, "penny", 100).await,
        "a penalized key stays denied under an override"
    );
    post(server, "/v1/admin/lists/allow", "ally", json!({})).await;
    assert!(take_overridden(server, "ally", 1).await);
    assert!(
        !take_overridden(server, "ally", 1).await,
        "an allow list does not lift the override's limit"
    );
    // Unlisted and forgiven: the override's limit alone again.
    let body = json!({"domain": "rl", "descriptor": [{"key": "user", "value": "mallet"}]});
    let (status, _) = call(server, Method::DELETE, "/v1/admin/lists/deny", Some(body)).await;
    assert_eq!(status, StatusCode::OK);
    post(server, "/v1/admin/reset", "penny", json!({})).await;
    assert!(take_overridden(server, "mallet", 100).await, "unlisted");
    assert!(take_overridden(server, "penny", 100).await, "forgiven");
}

/// Reset, refund, penalty and the lists, each checked by the requests
/// that follow it.
async fn controls(server: &TestServer) {
    // Reset: a spent key is full again.
    for _ in 0..3 {
        assert!(take(server, "carol").await);
    }
    assert!(!take(server, "carol").await);
    let (status, done) = post(server, "/v1/admin/reset", "carol", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["done"], "reset");
    assert_eq!(done["key"]["state"]["remaining"], 3, "{done}");
    assert!(take(server, "carol").await);

    // Refund: gives back, never above full.
    assert!(take(server, "carol").await);
    let (status, done) = post(server, "/v1/admin/refund", "carol", json!({"permits": 1})).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["key"]["state"]["remaining"], 2, "{done}");
    let (_, done) = post(server, "/v1/admin/refund", "carol", json!({"permits": 10})).await;
    assert_eq!(
        done["key"]["state"]["remaining"], 3,
        "never above full: {done}"
    );

    // Penalty: denied for its time, counting nothing; a reset ends it.
    let (status, done) = post(
        server,
        "/v1/admin/penalize",
        "dave",
        json!({"duration_ms": 60_000}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    let state = &done["key"]["state"];
    assert_eq!(state["remaining"], 0, "{done}");
    let retry = state["retry_after_ms"].as_u64().expect("a retry time");
    assert!((50_000..=60_000).contains(&retry), "{done}");
    assert!(!take(server, "dave").await);
    post(server, "/v1/admin/reset", "dave", json!({})).await;
    assert!(take(server, "dave").await);

    // Deny list: denied "never" to retry; unlisted, the key is back.
    let (status, done) = post(server, "/v1/admin/lists/deny", "erin", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(
        done["key"]["state"]["retry_after_ms"],
        Value::Null,
        "{done}"
    );
    assert!(!take(server, "erin").await);
    let (status, _) = call(
        server,
        Method::DELETE,
        "/v1/admin/lists/deny",
        Some(json!({"domain": "rl", "descriptor": [{"key": "user", "value": "erin"}]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(take(server, "erin").await);

    // Allow list: admitted beyond the limit, counting nothing.
    post(server, "/v1/admin/lists/allow", "fay", json!({})).await;
    for _ in 0..5 {
        assert!(take(server, "fay").await, "fay is allowed");
    }
    call(
        server,
        Method::DELETE,
        "/v1/admin/lists/allow",
        Some(json!({"domain": "rl", "descriptor": [{"key": "user", "value": "fay"}]})),
    )
    .await;
    for _ in 0..3 {
        assert!(take(server, "fay").await);
    }
    assert!(!take(server, "fay").await, "fay is limited again");

    // Refusals.
    for (path, user, extra, want) in [
        (
            "/v1/admin/refund",
            "carol",
            json!({}),
            StatusCode::BAD_REQUEST,
        ),
        (
            "/v1/admin/refund",
            "carol",
            json!({"permits": 0}),
            StatusCode::BAD_REQUEST,
        ),
        (
            "/v1/admin/penalize",
            "carol",
            json!({}),
            StatusCode::BAD_REQUEST,
        ),
        (
            "/v1/admin/lists/gray",
            "carol",
            json!({}),
            StatusCode::NOT_FOUND,
        ),
        (
            "/v1/admin/reset",
            "carol",
            json!({"extra": 1}),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (status, answer) = post(server, path, user, extra).await;
        assert_eq!(status, want, "{path}: {answer}");
        assert!(answer["error"].is_string());
    }
    let (status, _) = call(
        server,
        Method::POST,
        "/v1/admin/reset",
        Some(json!({"domain": "rl", "descriptor": [{"key": "internal", "value": "x"}]})),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "an unlimited rule has no state"
    );
    let (status, _) = call(
        server,
        Method::POST,
        "/v1/admin/reset",
        Some(json!({"domain": "rl", "descriptor": [{"key": "nope", "value": "x"}]})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn admin_api_in_memory() {
    let server = start_with(ADMIN, RULES).await;
    controls(&server).await;
    overrides_answer_to_the_lists(&server).await;
    admin_api(&server, RULES).await;
    server.stop().await;
}

#[tokio::test]
async fn admin_api_on_redis() {
    let redis = RedisServer::start();
    let file = format!("{}{RULES}", redis.backend(support::PATIENT));
    let server = start_with(ADMIN, &file).await;
    controls(&server).await;
    overrides_answer_to_the_lists(&server).await;
    admin_api(&server, &file).await;
    server.stop().await;
}

/// Off by default: no route under `/v1/admin/`, with or without a token.
#[tokio::test]
async fn admin_api_is_off_by_default() {
    let server = start_with("  bearer_token: sesame\n", RULES).await;
    let (status, _) = inspect(&server, "alice").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    server.stop().await;
}

/// A file enabling the admin API without a token is refused at load.
#[test]
fn admin_api_without_a_token_is_refused() {
    let error = tollgate_server::Config::from_yaml(
        "rules.yaml".as_ref(),
        &format!("admin:\n  enabled: true\n{RULES}"),
    )
    .expect_err("refused");
    assert!(error.message().contains("bearer token"), "{error}");
    let ok = tollgate_server::Config::from_yaml(
        "rules.yaml".as_ref(),
        &format!("server:\n  bearer_token: t\nadmin:\n  enabled: true\n{RULES}"),
    )
    .expect("valid");
    assert!(ok.admin.enabled);
    let unknown = tollgate_server::Config::from_yaml(
        "rules.yaml".as_ref(),
        &format!("server:\n  bearer_token: t\nadmin:\n  enable: true\n{RULES}"),
    );
    assert!(unknown.is_err(), "unknown keys are refused");
}
