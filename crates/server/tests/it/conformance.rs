//! envoyproxy/ratelimit's semantics over gRPC, one row per behaviour.

use std::time::Duration;

use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus,
};

use crate::support::*;

fn codes(response: &RateLimitResponse) -> Vec<Code> {
    response
        .statuses
        .iter()
        .map(DescriptorStatus::code)
        .collect()
}

fn secs(status: &DescriptorStatus) -> f64 {
    status
        .duration_until_reset
        .map(|d| d.seconds as f64 + f64::from(d.nanos) / 1e9)
        .unwrap_or(-1.0)
}

#[tokio::test]
async fn envoy_conformance_table() {
    let server = start(RULES).await;
    let mut client = server.grpc_client().await;
    let mut ask = async |req| {
        within(client.should_rate_limit(req))
            .await
            .expect("grpc ok")
            .into_inner()
    };

    // A value-less entry: per-value buckets, fixed window of 2 per minute.
    let alice = || request("rl", vec![descriptor(&[("user", "alice")])]);
    let first = ask(alice()).await;
    assert_eq!(first.overall_code(), Code::Ok);
    let status = &first.statuses[0];
    assert_eq!(status.code(), Code::Ok);
    assert_eq!(status.limit_remaining, 1);
    let limit = status.current_limit.as_ref().expect("current limit");
    assert_eq!((limit.requests_per_unit, limit.unit()), (2, Unit::Minute));
    // An unnamed rule: an empty name, as envoyproxy/ratelimit answers.
    assert_eq!(limit.name, "");
    assert_eq!(secs(status), 60.0);
    assert_eq!(ask(alice()).await.statuses[0].limit_remaining, 0);
    let over = ask(alice()).await;
    assert_eq!(over.overall_code(), Code::OverLimit);
    assert_eq!(codes(&over), [Code::OverLimit]);
    assert_eq!(
        secs(&over.statuses[0]),
        60.0,
        "a denial waits for the window's end"
    );
    // Another value has its own bucket.
    assert_eq!(
        ask(request("rl", vec![descriptor(&[("user", "bob")])]))
            .await
            .overall_code(),
        Code::Ok
    );

    // One status per descriptor, in request order; unknown = OK, no limit;
    // unlimited = OK with u32::MAX remaining; OVER_LIMIT if any is over.
    let mixed = ask(request(
        "rl",
        vec![
            descriptor(&[("nobody", "x")]),
            descriptor(&[("user", "alice")]),
            descriptor(&[("internal", "job")]),
            descriptor(&[("user", "carol")]),
        ],
    ))
    .await;
    assert_eq!(mixed.overall_code(), Code::OverLimit);
    assert_eq!(
        codes(&mixed),
        [Code::Ok, Code::OverLimit, Code::Ok, Code::Ok]
    );
    assert_eq!(mixed.statuses[0].current_limit, None);
    assert_eq!(mixed.statuses[0].limit_remaining, 0);
    assert_eq!(mixed.statuses[2].current_limit, None);
    assert_eq!(mixed.statuses[2].limit_remaining, u32::MAX);
    assert_eq!(mixed.statuses[3].limit_remaining, 1);

    // Unknown domain; a descriptor longer than the tree; a node without a
    // limit: all OK with no limit.
    for req in [
        request("nope", vec![descriptor(&[("user", "alice")])]),
        request("rl", vec![descriptor(&[("user", "alice"), ("extra", "y")])]),
        request("rl", vec![descriptor(&[("path", "/other")])]),
    ] {
        let response = ask(req).await;
        assert_eq!(response.overall_code(), Code::Ok);
        assert_eq!(response.statuses[0].current_limit, None);
    }

    // Nested: the deepest matching node's limit; name from the file.
    let nested = ask(request(
        "rl",
        vec![descriptor(&[("path", "/login"), ("user", "dave")])],
    ))
    .await;
    let limit = nested.statuses[0].current_limit.as_ref().expect("limit");
    assert_eq!((limit.requests_per_unit, limit.unit()), (3, Unit::Hour));
    let login = ask(request("rl", vec![descriptor(&[("path", "/login")])])).await;
    assert_eq!(
        login.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.name.as_str()),
        Some("login")
    );

    // Wildcard value: prefix match, per-value buckets.
    let users = || request("rl", vec![descriptor(&[("prefix", "/api/users")])]);
    assert_eq!(ask(users()).await.overall_code(), Code::Ok);
    assert_eq!(ask(users()).await.overall_code(), Code::OverLimit);
    assert_eq!(
        ask(request("rl", vec![descriptor(&[("prefix", "/api/teams")])]))
            .await
            .overall_code(),
        Code::Ok
    );

    // hits_addend: 0 on the request counts as 1 (proto3 "unset"); 2 takes 2.
    let mut erin = request("rl", vec![descriptor(&[("user", "erin")])]);
    erin.hits_addend = 2;
    assert_eq!(ask(erin.clone()).await.statuses[0].limit_remaining, 0);
    // A descriptor's hits_addend of 0 only looks.
    let mut look = descriptor(&[("user", "frank")]);
    look.hits_addend = Some(0);
    for _ in 0..3 {
        let response = ask(request("rl", vec![look.clone()])).await;
        assert_eq!(response.overall_code(), Code::Ok);
        assert_eq!(response.statuses[0].limit_remaining, 2);
    }
    // A descriptor's hits_addend overrides the request's.
    let mut two = descriptor(&[("user", "gina")]);
    two.hits_addend = Some(2);
    let mut req = request("rl", vec![two, descriptor(&[("user", "hank")])]);
    req.hits_addend = 1;
    let response = ask(req).await;
    assert_eq!(
        response
            .statuses
            .iter()
            .map(|s| s.limit_remaining)
            .collect::<Vec<_>>(),
        [0, 1]
    );

    // Shadow mode: decided and counted, but answered OK.
    let shadow = || request("rl", vec![descriptor(&[("shadow", "s")])]);
    assert_eq!(ask(shadow()).await.statuses[0].limit_remaining, 0);
    let shadowed = ask(shadow()).await;
    assert_eq!(shadowed.overall_code(), Code::Ok);
    assert_eq!(codes(&shadowed), [Code::Ok]);

    // Several limits, all-or-nothing, each reported when it binds.
    let multi = || request("rl", vec![descriptor(&[("multi", "m")])]);
    assert_eq!(ask(multi()).await.overall_code(), Code::Ok);
    assert_eq!(ask(multi()).await.overall_code(), Code::Ok);
    let by_second = ask(multi()).await;
    assert_eq!(by_second.overall_code(), Code::OverLimit);
    assert_eq!(
        by_second.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.unit()),
        Some(Unit::Second)
    );
    server.clock.advance(Duration::from_secs(1));
    let third = ask(multi()).await;
    assert_eq!(third.overall_code(), Code::Ok);
    assert_eq!(
        third.statuses[0].current_limit.as_ref().map(|l| l.unit()),
        Some(Unit::Minute)
    );
    let by_minute = ask(multi()).await;
    assert_eq!(by_minute.overall_code(), Code::OverLimit);
    assert_eq!(
        by_minute.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.unit()),
        Some(Unit::Minute)
    );

    // A period that is no Envoy unit: UNKNOWN unit, GCRA numbers.
    let odd = ask(request("rl", vec![descriptor(&[("odd", "o")])])).await;
    let limit = odd.statuses[0].current_limit.as_ref().expect("limit");
    assert_eq!((limit.requests_per_unit, limit.unit()), (5, Unit::Unknown));
    assert_eq!(odd.statuses[0].limit_remaining, 4);
    assert_eq!(secs(&odd.statuses[0]), 2.0, "one permit refills in 10s / 5");

    // Time passes: the window is over.
    server.clock.advance(Duration::from_secs(60));
    assert_eq!(ask(alice()).await.statuses[0].limit_remaining, 1);

    // No response headers unless asked for.
    assert!(ask(alice()).await.response_headers_to_add.is_empty());

    // The shadowed denial was counted.
    let text = server.metrics().await;
    assert_eq!(
        metric(&text, "tollgate_rule_shadow_mode_total{rule=\"rl.shadow\"}"),
        1.0
    );
    assert_eq!(
        metric(&text, "tollgate_rule_over_limit_total{rule=\"rl.user\"}"),
        2.0
    );
    assert!(metric(&text, "tollgate_rule_within_limit_total{rule=\"rl.user\"}") >= 8.0);
    assert!(metric(&text, "tollgate_rule_near_limit_total{rule=\"rl.user\"}") >= 1.0);
    assert!(
        text.contains("tollgate_decision_duration_seconds_bucket{le="),
        "{text}"
    );
    server.stop().await;
}

#[tokio::test]
async fn response_headers_when_enabled() {
    let server = start_with("  response_headers: true\n", RULES).await;
    let mut client = server.grpc_client().await;
    let response = within(client.should_rate_limit(request(
        "rl",
        vec![descriptor(&[("odd", "o")]), descriptor(&[("user", "u")])],
    )))
    .await
    .expect("ok")
    .into_inner();
    let headers: Vec<(String, String)> = response
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    // The tightest descriptor: user (1 left of 2).
    assert_eq!(
        headers,
        [
            ("x-ratelimit-limit".to_owned(), "2".to_owned()),
            ("x-ratelimit-remaining".to_owned(), "1".to_owned()),
            ("x-ratelimit-reset".to_owned(), "60".to_owned()),
        ]
    );
    server.stop().await;
}

#[tokio::test]
async fn overload_is_shed_at_once() {
    let server = start_with("  max_concurrent_requests: 0\n", RULES).await;
    let mut client = server.grpc_client().await;
    let error = within(client.should_rate_limit(request("rl", vec![descriptor(&[("user", "a")])])))
        .await
        .expect_err("shed");
    assert_eq!(error.code(), tonic::Code::ResourceExhausted);
    let response = within(
        http_client()
            .post(server.url("/v1/check"))
            .body(r#"{"domain":"rl","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}"#)
            .send(),
    )
    .await
    .expect("http");
    assert_eq!(response.status(), 503);
    // Probes still answer.
    let health = within(http_client().get(server.url("/healthz")).send())
        .await
        .expect("healthz");
    assert_eq!(health.status(), 200);
    server.stop().await;
}
