//! The HTTP JSON API with a real client.

use serde_json::{Value, json};

use crate::support::*;

async fn post(server: &TestServer, body: Value) -> (u16, Value) {
    let response = within(
        http_client()
            .post(server.url("/v1/check"))
            .json(&body)
            .send(),
    )
    .await
    .expect("http");
    let status = response.status().as_u16();
    (status, response.json().await.expect("json"))
}

fn user(name: &str) -> Value {
    json!({"entries": [{"key": "user", "value": name}]})
}

#[tokio::test]
async fn check_rules_health_metrics() {
    let server = start(RULES).await;

    let (status, body) = post(
        &server,
        json!({"domain": "rl", "descriptors": [user("alice")]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["overall_code"], "OK");
    let first = &body["statuses"][0];
    assert_eq!(first["rule"], "rl.user");
    assert_eq!(first["allowed"], true);
    assert_eq!(first["remaining"], 1);
    assert_eq!(first["reset_after_ms"], 60_000);
    assert_eq!(first["limit"]["algorithm"], "fixed_window");
    assert_eq!(first["limit"]["requests_per_unit"], 2);
    assert_eq!(first["limit"]["period_ms"], 60_000);

    // dry_run looks without taking.
    for _ in 0..3 {
        let (_, body) = post(
            &server,
            json!({"domain": "rl", "descriptors": [user("alice")], "dry_run": true}),
        )
        .await;
        assert_eq!(body["statuses"][0]["remaining"], 1);
    }
    // A cost of 2 does not fit in the 1 left: denied, retry at the window's end.
    let (status, body) = post(
        &server,
        json!({"domain": "rl", "descriptors": [user("alice")], "cost": 2}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["overall_code"], "OVER_LIMIT");
    assert_eq!(body["statuses"][0]["allowed"], false);
    assert_eq!(body["statuses"][0]["retry_after_ms"], 60_000);

    // No rule, unlimited, shadow: in order.
    let (_, body) = post(
        &server,
        json!({"domain": "rl", "descriptors": [
            {"entries": [{"key": "nobody", "value": "x"}]},
            {"entries": [{"key": "internal", "value": "x"}]},
            {"entries": [{"key": "shadow", "value": "x"}], "cost": 1},
        ]}),
    )
    .await;
    assert_eq!(body["statuses"][0]["rule"], Value::Null);
    assert_eq!(body["statuses"][1]["unlimited"], true);
    assert_eq!(body["statuses"][2]["shadow_mode"], true);

    let rules: Value = within(http_client().get(server.url("/v1/rules")).send())
        .await
        .expect("rules")
        .json()
        .await
        .expect("json");
    let ids: Vec<&str> = rules["rules"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|rule| rule["rule"].as_str())
        .collect();
    assert_eq!(
        ids,
        [
            "rl.user",
            "rl.path_/login",
            "rl.path_/login.user",
            "rl.internal",
            "rl.shadow",
            "rl.multi",
            "rl.odd",
            "rl.prefix_/api/*"
        ]
    );
    let multi = &rules["rules"][5]["limits"];
    assert_eq!(multi.as_array().map(Vec::len), Some(2));
    assert_eq!(rules["rules"][0]["path"][0]["value"], Value::Null);

    for (path, code) in [("/healthz", 200), ("/readyz", 200), ("/nope", 404)] {
        let response = within(http_client().get(server.url(path)).send())
            .await
            .expect(path);
        assert_eq!(response.status().as_u16(), code, "{path}");
    }
    let text = server.metrics().await;
    assert_eq!(
        metric(&text, "tollgate_rule_total_hits_total{rule=\"rl.user\"}"),
        3.0
    );
    assert_eq!(
        metric(&text, "tollgate_rule_over_limit_total{rule=\"rl.user\"}"),
        2.0
    );
    assert_eq!(metric(&text, "tollgate_config_last_load_ok"), 1.0);

    // Graceful shutdown: run returns Ok, and both listeners are closed.
    let (grpc, http) = (server.grpc, server.http);
    server.stop().await;
    assert!(
        tokio::net::TcpStream::connect(grpc).await.is_err(),
        "grpc closed"
    );
    assert!(
        tokio::net::TcpStream::connect(http).await.is_err(),
        "http closed"
    );
}
