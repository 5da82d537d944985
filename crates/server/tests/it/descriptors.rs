//! Every descriptor decided on its own: a descriptor
//! that cannot be decided as sent is OVER_LIMIT, never an error for the
//! whole call (which Envoy's `failure_mode_deny: false` lets through), and
//! Envoy's `limit` overrides are decided under the limit they give.

use serde_json::{Value, json};
use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tollgate_server::grpc::proto::envoy::r#type::v3::RateLimitUnit;

use crate::support::*;

fn codes(response: &RateLimitResponse) -> (Code, Vec<Code>) {
    (
        response.overall_code(),
        response.statuses.iter().map(|s| s.code()).collect(),
    )
}

fn long_path() -> String {
    format!("/{}", "a".repeat(1_100))
}

fn with_limit(
    entries: &[(&str, &str)],
    requests_per_unit: u32,
    unit: RateLimitUnit,
) -> RateLimitDescriptor {
    let mut d = descriptor(entries);
    d.limit = Some(RateLimitOverride {
        requests_per_unit,
        unit: unit as i32,
    });
    d
}

/// Regression: an address already at its limit, sent
/// with a path of "/" + 1,100 × "a", made the whole call
/// `INVALID_ARGUMENT` (and Envoy let the request through).
#[tokio::test]
async fn an_oversize_value_beside_a_limited_address_is_over_limit() {
    let server = start(RULES).await;
    let mut client = server.grpc_client().await;
    for _ in 0..2 {
        within(client.should_rate_limit(request("rl", vec![descriptor(&[("user", "ip")])])))
            .await
            .expect("ok");
    }
    let path = long_path();
    let response = within(client.should_rate_limit(request(
        "rl",
        vec![
            descriptor(&[("user", "ip")]),
            descriptor(&[("path", path.as_str())]),
        ],
    )))
    .await
    .expect("decided, not refused")
    .into_inner();
    assert_eq!(
        codes(&response),
        (Code::OverLimit, vec![Code::OverLimit, Code::OverLimit])
    );

    // A fresh address with the same long path: the address is decided and
    // counted, the long descriptor alone is OVER_LIMIT.
    let response = within(client.should_rate_limit(request(
        "rl",
        vec![
            descriptor(&[("user", "fresh")]),
            descriptor(&[("path", path.as_str())]),
        ],
    )))
    .await
    .expect("decided")
    .into_inner();
    assert_eq!(
        codes(&response),
        (Code::OverLimit, vec![Code::Ok, Code::OverLimit])
    );
    assert_eq!(response.statuses[0].limit_remaining, 1);
    assert_eq!(response.statuses[1].limit_remaining, 0);

    // Every other shape a client controls, beside the limited address.
    let long_key = "k".repeat(1_025);
    let mut too_costly = descriptor(&[("odd", "x")]);
    too_costly.hits_addend = Some(6);
    let many: Vec<(&str, &str)> = vec![("user", "v"); 33];
    for (name, bad) in [
        ("long key", descriptor(&[(long_key.as_str(), "v")])),
        ("empty key", descriptor(&[("", "v")])),
        ("empty entries", descriptor(&[])),
        ("33 entries", descriptor(&many)),
        ("cost above the burst", too_costly),
        (
            "limit of 0",
            with_limit(&[("user", "x")], 0, RateLimitUnit::Second),
        ),
        (
            "limit in UNKNOWN units",
            with_limit(&[("user", "x")], 5, RateLimitUnit::Unknown),
        ),
    ] {
        let response = within(
            client.should_rate_limit(request("rl", vec![descriptor(&[("user", "ip")]), bad])),
        )
        .await
        .unwrap_or_else(|error| panic!("{name}: {error}"))
        .into_inner();
        assert_eq!(
            codes(&response),
            (Code::OverLimit, vec![Code::OverLimit, Code::OverLimit]),
            "{name}"
        );
    }
    // The bad descriptors counted nothing.
    let look = within(client.should_rate_limit(request(
        "rl",
        vec![{
            let mut d = descriptor(&[("odd", "x")]);
            d.hits_addend = Some(0);
            d
        }],
    )))
    .await
    .expect("ok")
    .into_inner();
    assert_eq!(look.statuses[0].limit_remaining, 5);
    let text = server.metrics().await;
    assert_eq!(
        metric(
            &text,
            "tollgate_requests_refused_total{api=\"grpc\",reason=\"invalid_descriptor\"}"
        ),
        9.0,
        "{text}"
    );
    server.stop().await;
}

/// A cost above a shadow rule's capacity is answered OK (shadow mode never
/// denies), and counts nothing.
#[tokio::test]
async fn a_shadow_rule_never_denies_even_an_impossible_cost() {
    let server = start(RULES).await;
    let mut client = server.grpc_client().await;
    let mut costly = descriptor(&[("shadow", "s")]);
    costly.hits_addend = Some(2);
    let response = within(client.should_rate_limit(request("rl", vec![costly])))
        .await
        .expect("ok")
        .into_inner();
    assert_eq!(codes(&response), (Code::Ok, vec![Code::Ok]));
    server.stop().await;
}

/// Envoy's `limit` override is decided under the limit it gives, with or
/// without a rule for its entries, in a bucket per list of values.
#[tokio::test]
async fn limit_overrides_are_decided_under_their_limit() {
    let server = start(RULES).await;
    let mut client = server.grpc_client().await;
    let ask = |value: &'static str| with_limit(&[("tenant", value)], 2, RateLimitUnit::Minute);
    let mut seen = Vec::new();
    for _ in 0..3 {
        let response = within(client.should_rate_limit(request("rl", vec![ask("a")])))
            .await
            .expect("ok")
            .into_inner();
        let status = &response.statuses[0];
        let limit = status.current_limit.as_ref().expect("a limit");
        assert_eq!((limit.requests_per_unit, limit.unit()), (2, Unit::Minute));
        seen.push((status.code(), status.limit_remaining));
    }
    assert_eq!(seen, [(Code::Ok, 1), (Code::Ok, 0), (Code::OverLimit, 0)]);
    // Another value: its own bucket.
    let response = within(client.should_rate_limit(request("rl", vec![ask("b")])))
        .await
        .expect("ok")
        .into_inner();
    assert_eq!(codes(&response), (Code::Ok, vec![Code::Ok]));

    // Over a rule of the file (user: 2 a minute), the override decides.
    let mut codes_seen = Vec::new();
    for _ in 0..4 {
        let response = within(client.should_rate_limit(request(
            "rl",
            vec![with_limit(&[("user", "carol")], 3, RateLimitUnit::Week)],
        )))
        .await
        .expect("ok")
        .into_inner();
        codes_seen.push(response.statuses[0].code());
        assert_eq!(
            response.statuses[0]
                .current_limit
                .as_ref()
                .map(|l| l.unit()),
            Some(Unit::Week)
        );
    }
    assert_eq!(codes_seen, [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]);
    server.stop().await;
}

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

/// The same on the HTTP JSON API.
#[tokio::test]
async fn http_decides_each_descriptor_on_its_own() {
    let server = start(RULES).await;
    let ip = json!({"entries": [{"key": "user", "value": "ip"}]});
    for _ in 0..2 {
        post(&server, json!({"domain": "rl", "descriptors": [ip]})).await;
    }
    let (status, body) = post(
        &server,
        json!({"domain": "rl", "descriptors": [ip, {"entries": [{"key": "path", "value": long_path()}]}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["overall_code"], "OVER_LIMIT");
    assert_eq!(body["statuses"][0]["code"], "OVER_LIMIT");
    assert_eq!(body["statuses"][1]["code"], "OVER_LIMIT");
    assert!(
        body["statuses"][1]["refused"]
            .as_str()
            .is_some_and(|r| r.contains("longer than 1024")),
        "{body}"
    );
    let (status, body) = post(
        &server,
        json!({"domain": "rl", "descriptors": [{"entries": [{"key": "odd", "value": "x"}], "cost": 6}]}),
    )
    .await;
    assert_eq!(
        (status, &body["overall_code"]),
        (200, &json!("OVER_LIMIT")),
        "{body}"
    );

    let ask = json!({"domain": "rl", "descriptors": [{"entries": [{"key": "tenant", "value": "t"}], "limit": {"requests_per_unit": 1, "unit": "hour"}}]});
    let (_, first) = post(&server, ask.clone()).await;
    let (_, second) = post(&server, ask).await;
    assert_eq!(first["statuses"][0]["code"], "OK", "{first}");
    assert_eq!(first["statuses"][0]["limit"]["period_ms"], 3_600_000);
    assert_eq!(second["statuses"][0]["code"], "OVER_LIMIT", "{second}");
    let (status, _) = post(
        &server,
        json!({"domain": "rl", "descriptors": [{"entries": [{"key": "tenant", "value": "t"}], "limit": {"requests_per_unit": 1, "unit": "fortnight"}}]}),
    )
    .await;
    assert_eq!(status, 400);
    server.stop().await;
}
