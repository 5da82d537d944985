//! Concurrency leases in the server's metrics: acquired, refused
//! by reason, released and expired per rule, in `/metrics` and in the
//! status page's JSON, from one set of counters, through the real server
//! (HTTP `/v1/acquire` / `/v1/release` and Envoy's RLS). Time is the
//! server's manual clock: a lease expires when the test moves it.

#[allow(dead_code)]
use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{
    BackendSection, RedisServer, TestServer, descriptor, http_client, metric, request, start_with,
    within,
};
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;

const RULES: &str = "
domain: api
descriptors:
  - key: tenant
    concurrency: {limit: 2, lease_ttl: 10s}
  - key: report
    concurrency: {limit: 1, lease_ttl: 10s}
";

async fn post(server: &TestServer, path: &str, body: Value) -> (u16, Value) {
    let response = within(http_client().post(server.url(path)).json(&body).send())
        .await
        .expect("http");
    let status = response.status().as_u16();
    (status, response.json().await.expect("json"))
}

fn acquire(name: &str, cost: u64) -> Value {
    json!({"domain": "api", "entries": [{"key": "tenant", "value": name}], "cost": cost})
}

/// The counts `/metrics` has for `rule`: acquired, refused full, cost,
/// unavailable, released, expired.
fn from_metrics(text: &str, rule: &str) -> [u64; 6] {
    let get = |name: &str, labels: &str| {
        metric(
            text,
            &format!("tollgate_concurrency_{name}_total{{rule=\"{rule}\"{labels}}}"),
        ) as u64
    };
    [
        get("acquired", ""),
        get("refused", ",reason=\"full\""),
        get("refused", ",reason=\"cost\""),
        get("refused", ",reason=\"unavailable\""),
        get("released", ""),
        get("expired", ""),
    ]
}

/// The same counts in `/status.json`.
async fn from_status(server: &TestServer, rule: &str) -> [u64; 6] {
    let status: Value = within(http_client().get(server.url("/status.json")).send())
        .await
        .expect("status")
        .json()
        .await
        .expect("json");
    let rule = status["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|r| r["rule"] == rule)
        .unwrap_or_else(|| panic!("{rule} in {status}"));
    let c = &rule["concurrency"];
    let n = |field: &str| {
        c[field]
            .as_u64()
            .unwrap_or_else(|| panic!("{field} in {c}"))
    };
    [
        n("acquired"),
        n("refused_full"),
        n("refused_cost"),
        n("refused_unavailable"),
        n("released"),
        n("expired"),
    ]
}

async fn counts(server: &TestServer, rule: &str) -> [u64; 6] {
    let metrics = from_metrics(&server.metrics().await, rule);
    let status = from_status(server, rule).await;
    assert_eq!(metrics, status, "one set of counters");
    metrics
}

#[tokio::test]
async fn leases_are_counted_in_metrics_and_the_status_page_in_memory() {
    let server = start_with("", RULES).await;
    assert_eq!(counts(&server, "api.tenant").await, [0; 6]);

    let (status, first) = post(&server, "/v1/acquire", acquire("a", 1)).await;
    assert_eq!(status, 200, "{first}");
    let (status, _) = post(&server, "/v1/acquire", acquire("a", 1)).await;
    assert_eq!(status, 200);
    let (status, _) = post(&server, "/v1/acquire", acquire("a", 1)).await;
    assert_eq!(status, 429, "full");
    let (status, _) = post(&server, "/v1/acquire", acquire("b", 3)).await;
    assert_ne!(status, 200, "a cost above the limit");
    // acquired 2, refused: full 1, cost 1.
    assert_eq!(counts(&server, "api.tenant").await, [2, 1, 1, 0, 0, 0]);

    // Released once (a second release of the same lease counts nothing).
    let lease = json!({"lease": first["lease"]});
    assert_eq!(post(&server, "/v1/release", lease.clone()).await.0, 200);
    assert_eq!(post(&server, "/v1/release", lease).await.0, 404);
    assert_eq!(counts(&server, "api.tenant").await, [2, 1, 1, 0, 1, 0]);

    // The other lease ends by its TTL: expired, seen by the next acquire.
    server.clock.advance(Duration::from_secs(10));
    assert_eq!(post(&server, "/v1/acquire", acquire("c", 1)).await.0, 200);
    assert_eq!(counts(&server, "api.tenant").await, [3, 1, 1, 0, 1, 1]);

    // Envoy's RLS takes slots too (one per request, ended by the TTL), and
    // its refusals are counted under the same rule.
    let mut client = server.grpc_client().await;
    for want in [Code::Ok, Code::OverLimit] {
        let answer =
            within(client.should_rate_limit(request("api", vec![descriptor(&[("report", "r")])])))
                .await
                .expect("grpc")
                .into_inner();
        assert_eq!(answer.overall_code(), want);
    }
    assert_eq!(counts(&server, "api.report").await, [1, 1, 0, 0, 0, 0]);
    server.stop().await;
}

#[tokio::test]
async fn leases_are_counted_in_metrics_and_the_status_page_on_redis() {
    let redis = RedisServer::start();
    let backend = redis.backend("  failure_policy: fail_closed\n  deadline: 5s\n");
    let server = start_with("", &format!("{backend}{RULES}")).await;
    let (status, first) = post(&server, "/v1/acquire", acquire("a", 1)).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(post(&server, "/v1/acquire", acquire("a", 1)).await.0, 200);
    assert_eq!(post(&server, "/v1/acquire", acquire("a", 1)).await.0, 429);
    assert_eq!(
        post(&server, "/v1/release", json!({"lease": first["lease"]}))
            .await
            .0,
        200
    );
    assert_eq!(counts(&server, "api.tenant").await, [2, 1, 0, 0, 1, 0]);
    server.stop().await;
}
