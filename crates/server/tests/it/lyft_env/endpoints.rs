//! envoyproxy/ratelimit's endpoints and behaviour variables: `POST /json`,
//! `GET /healthcheck` (with `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED` and
//! `FORCE_START_WITHOUT_INITIAL_CONFIG`), the debug listener's `/rlconfig`
//! and `/stats`, `LIMIT_RESPONSE_HEADERS_ENABLED` with its header names,
//! and `SHADOW_MODE`.

use serde_json::{Value, json};
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::lyft_env::support::*;

const RULES: &str = "
domain: rl
descriptors:
  - key: foo
    descriptors:
      - key: baz
        value: not-so-shady
        rate_limit:
          unit: minute
          requests_per_unit: 3
";

fn rules(root: &std::path::Path) {
    write(&config_dir(root).join("rl.yaml"), RULES);
}

async fn json_call(server: &LyftServer, body: &str) -> (u16, String) {
    let response = within(
        http_client()
            .post(format!("http://{}/json", server.http))
            .body(body.to_owned())
            .send(),
    )
    .await
    .expect("/json");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

async fn get(url: String) -> (u16, String) {
    let response = within(http_client().get(url).send()).await.expect("get");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

#[tokio::test]
async fn json_answers_lyfts_shape_and_healthcheck_and_the_debug_listener_answer() {
    let server = start(Counts::Memory, &[], rules).await;
    let body = r#"{"domain": "rl", "descriptors": [{"entries": [{"key": "foo", "value": "pelle"}, {"key": "baz", "value": "not-so-shady"}]}]}"#;
    for remaining in [2, 1, 0] {
        let (status, text) = json_call(&server, body).await;
        assert_eq!(status, 200, "{text}");
        let answer: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(answer["overallCode"], "OK", "{answer}");
        assert_eq!(
            answer["statuses"][0]["currentLimit"],
            json!({"requestsPerUnit": 3, "unit": "MINUTE"}),
            "{answer}"
        );
        // protobuf's JSON printer leaves a 0 out.
        let left = answer["statuses"][0].get("limitRemaining").cloned();
        assert_eq!(left, (remaining > 0).then(|| json!(remaining)), "{answer}");
        assert_eq!(
            answer["statuses"][0]["durationUntilReset"], "60s",
            "{answer}"
        );
    }
    let (status, text) = json_call(&server, body).await;
    assert_eq!(status, 429, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(answer["overallCode"], "OVER_LIMIT");
    assert_eq!(answer["statuses"][0]["code"], "OVER_LIMIT");
    // Not a request: 400, as there.
    assert_eq!(json_call(&server, "{\"domain\": 1}").await.0, 400);
    assert_eq!(json_call(&server, "not json").await.0, 400);
    assert_eq!(json_call(&server, "{\"domain\": \"rl\"}").await.0, 400);

    assert_eq!(
        get(format!("http://{}/healthcheck", server.http)).await,
        (200, "OK".into())
    );
    let (status, dump) = get(format!("http://{}/rlconfig", server.debug)).await;
    assert_eq!(status, 200);
    assert!(
        dump.contains("rl.foo.baz_not-so-shady: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: false"),
        "{dump}"
    );
    let (status, stats) = get(format!("http://{}/stats", server.debug)).await;
    assert_eq!(status, 200);
    assert!(
        stats.lines().any(
            |line| line.starts_with("ratelimit_service_rate_limit_over_limit")
                && line.ends_with(": 1")
        ),
        "{stats}"
    );
    let (_, index) = get(format!("http://{}/", server.debug)).await;
    assert!(
        index.contains("/rlconfig") && index.contains("/stats"),
        "{index}"
    );
    server.stop().await;
}

#[tokio::test]
async fn response_headers_take_lyfts_names_and_shadow_mode_answers_ok() {
    let server = start(
        Counts::Memory,
        &[
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("LIMIT_REMAINING_HEADER", "X-Left"),
            ("SHADOW_MODE", "true"),
        ],
        rules,
    )
    .await;
    let mut client = server.grpc_client().await;
    let call = request(
        "rl",
        vec![descriptor(&[("foo", "x"), ("baz", "not-so-shady")])],
    );
    for left in (0..3).rev() {
        let response = within(client.should_rate_limit(call.clone()))
            .await
            .expect("call")
            .into_inner();
        let headers: Vec<(String, String)> = response
            .response_headers_to_add
            .iter()
            .map(|h| (h.key.clone(), h.value.clone()))
            .collect();
        assert_eq!(
            headers,
            [
                ("RateLimit-Limit".to_owned(), "3".to_owned()),
                ("X-Left".to_owned(), left.to_string()),
                ("RateLimit-Reset".to_owned(), "60".to_owned()),
            ]
        );
    }
    // Over the limit, in shadow mode: counted, answered OK.
    let response = within(client.should_rate_limit(call))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(response.overall_code(), Code::Ok, "{response:?}");
    server.stop().await;
}

#[tokio::test]
async fn healthcheck_waits_for_a_first_config_when_forced_to_start_without_one() {
    let server = start(
        Counts::Memory,
        &[
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
            ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
        ],
        |_| {},
    )
    .await;
    let health = format!("http://{}/healthcheck", server.http);
    assert_eq!(get(health.clone()).await.0, 500);
    rules(&server.root);
    assert!(server.reloader.poll().is_ok());
    assert!(server.reloader.poll().is_ok());
    assert_eq!(get(health).await, (200, "OK".into()));
    server.stop().await;
}

/// A `limit` override is decided in a domain the configuration names, and
/// answers no limit in one it does not, as envoyproxy/ratelimit's
/// `GetLimit` looks the domain up first (it decided the override before
/// this was fixed).
#[tokio::test]
async fn a_limit_override_in_an_unknown_domain_has_no_limit_as_in_lyft() {
    use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
    use tollgate_server::grpc::proto::envoy::r#type::v3::RateLimitUnit;
    let server = start(Counts::Memory, &[], rules).await;
    let mut client = server.grpc_client().await;
    let overridden = |domain: &str| {
        let mut d = descriptor(&[("anything", "x")]);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 1,
            unit: RateLimitUnit::Minute as i32,
        });
        request(domain, vec![d])
    };
    let mut codes = Vec::new();
    for domain in ["rl", "rl", "unknown", "unknown"] {
        let response = within(client.should_rate_limit(overridden(domain)))
            .await
            .expect("call")
            .into_inner();
        codes.push((
            response.overall_code(),
            response.statuses[0].current_limit.is_some(),
        ));
    }
    assert_eq!(
        codes,
        [
            (Code::Ok, true),
            (Code::OverLimit, true),
            (Code::Ok, false),
            (Code::Ok, false)
        ]
    );
    server.stop().await;
}
