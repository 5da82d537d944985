//! The bad input matrix: a bad call is a 4xx / INVALID_ARGUMENT, a bad
//! descriptor is OVER_LIMIT, never a 5xx, and no state
//! changed.

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use serde_json::{Value, json};
use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::support::*;

const MIB: usize = 1 << 20;

/// Bucket `user=victim`'s remaining permits, looked at without taking.
async fn remaining(server: &TestServer) -> Value {
    let body: Value = within(
        http_client()
            .post(server.url("/v1/check"))
            .json(&json!({"domain": "rl", "dry_run": true, "descriptors": [
                {"entries": [{"key": "user", "value": "victim"}]},
                {"entries": [{"key": "odd", "value": "victim"}]},
            ]}))
            .send(),
    )
    .await
    .expect("http")
    .json()
    .await
    .expect("json");
    json!([
        body["statuses"][0]["remaining"],
        body["statuses"][1]["remaining"]
    ])
}

fn victim(cost: &str) -> String {
    format!(
        r#"{{"domain":"rl","descriptors":[{{"entries":[{{"key":"user","value":"victim"}}]}},{{"entries":[{{"key":"odd","value":"victim"}}],"cost":{cost}}}]}}"#
    )
}

#[tokio::test]
async fn http_bad_input_matrix() {
    let server = start(RULES).await;
    let before = remaining(&server).await;
    assert_eq!(before, json!([2, 5]));
    let long_key = "k".repeat(MIB);
    let many: Vec<Value> = (0..10_000)
        .map(|i| json!({"entries": [{"key": "user", "value": format!("v{i}")}]}))
        .collect();
    // Descriptors that cannot be decided as sent: OVER_LIMIT, nothing counted.
    let alone = |cost: &str| {
        format!(
            r#"{{"domain":"rl","descriptors":[{{"entries":[{{"key":"odd","value":"victim"}}],"cost":{cost}}}]}}"#
        )
    };
    let over_limit: Vec<(&str, String)> = vec![
        ("burst + 1", alone("6")),
        ("2^32", alone("4294967296")),
        ("2^64 - 1", alone("18446744073709551615")),
        ("empty entries", r#"{"domain":"rl","descriptors":[{"entries":[]}]}"#.to_owned()),
        ("empty key", r#"{"domain":"rl","descriptors":[{"entries":[{"key":"","value":"v"}]}]}"#.to_owned()),
        ("1 MiB key", json!({"domain": "rl", "descriptors": [{"entries": [{"key": long_key, "value": "v"}]}]}).to_string()),
        ("1 MiB value", json!({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": long_key}]}]}).to_string()),
    ];
    for (name, body) in over_limit {
        let response = within(
            http_client()
                .post(server.url("/v1/check"))
                .header("content-type", "application/json")
                .body(body)
                .send(),
        )
        .await
        .expect(name);
        assert_eq!(response.status().as_u16(), 200, "{name}");
        let answer: Value = response.json().await.expect(name);
        assert_eq!(answer["overall_code"], "OVER_LIMIT", "{name}: {answer}");
        assert!(
            answer["statuses"][0]["refused"].is_string(),
            "{name}: {answer}"
        );
        assert_eq!(remaining(&server).await, before, "{name} changed the state");
    }
    let cases: Vec<(&str, String)> = vec![
        ("cost 0", victim("0")),
        ("2^64", victim("18446744073709551616")),
        ("negative", victim("-1")),
        ("fraction", victim("1.5")),
        ("non-numeric", victim("\"ten\"")),
        (
            "null domain",
            r#"{"domain":null,"descriptors":[]}"#.to_owned(),
        ),
        (
            "empty domain",
            r#"{"domain":"","descriptors":[{"entries":[{"key":"user","value":"victim"}]}]}"#
                .to_owned(),
        ),
        (
            "no descriptors",
            r#"{"domain":"rl","descriptors":[]}"#.to_owned(),
        ),
        (
            "unknown field",
            r#"{"domain":"rl","descriptors":[],"costs":1}"#.to_owned(),
        ),
        ("not json", "{domain: rl".to_owned()),
        ("not an object", "[1,2,3]".to_owned()),
        ("empty body", String::new()),
        (
            "10,000 descriptors",
            json!({"domain": "rl", "descriptors": many}).to_string(),
        ),
        (
            "3 MiB body",
            format!(r#"{{"domain":"{}","descriptors":[]}}"#, "d".repeat(3 * MIB)),
        ),
    ];
    for (name, body) in cases {
        let response = within(
            http_client()
                .post(server.url("/v1/check"))
                .header("content-type", "application/json")
                .body(body)
                .send(),
        )
        .await
        .expect(name);
        let status = response.status().as_u16();
        assert!((400..500).contains(&status), "{name}: {status}");
        if status == 400 {
            let error: Value = response.json().await.expect(name);
            assert!(
                error["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{name}"
            );
        }
        assert_eq!(remaining(&server).await, before, "{name} changed the state");
    }
    let text = server.metrics().await;
    assert_eq!(
        metric(&text, "tollgate_rule_total_hits_total{rule=\"rl.user\"}"),
        0.0
    );
    assert!(
        metric(
            &text,
            "tollgate_requests_refused_total{api=\"http\",reason=\"invalid\"}"
        ) >= 12.0,
        "{text}"
    );
    server.stop().await;
}

/// `server.max_request_bytes` bounds every HTTP door, envoyproxy/ratelimit's
/// `/json` too (it was merged after the limit was laid, so it kept axum's
/// fixed 2 MiB): a body just over the limit is a 413 before decoding and
/// counts nothing; one at the limit is decided.
#[tokio::test]
async fn the_body_limit_bounds_every_http_door_json_too() {
    const LIMIT: usize = 4096;
    let server = start_with(&format!("  max_request_bytes: {LIMIT}\n"), RULES).await;
    let before = remaining(&server).await;
    // A valid request, padded with JSON whitespace to `size` bytes.
    let sized = |size: usize| {
        let request =
            r#"{"domain":"rl","descriptors":[{"entries":[{"key":"user","value":"victim"}]}]}"#;
        format!("{request}{}", " ".repeat(size - request.len()))
    };
    let post = |path: &'static str, body: String| {
        let request = http_client()
            .post(server.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send();
        async move { within(request).await.expect(path).status().as_u16() }
    };
    for path in ["/json", "/v1/check"] {
        assert_eq!(post(path, sized(LIMIT + 1)).await, 413, "{path}");
        assert_eq!(remaining(&server).await, before, "{path}: counted");
    }
    assert_eq!(post("/json", sized(LIMIT)).await, 200);
    assert_ne!(
        remaining(&server).await,
        before,
        "/json at the limit: decided"
    );
    server.stop().await;
}

#[tokio::test]
async fn grpc_bad_input_matrix() {
    let server = start(RULES).await;
    let mut client = server.grpc_client().await;
    let before = remaining(&server).await;
    let good = descriptor(&[("user", "victim")]);
    let with_cost = |cost: u64| {
        let mut d = descriptor(&[("odd", "victim")]);
        d.hits_addend = Some(cost);
        d
    };
    let long = "k".repeat(MIB);
    let many: Vec<RateLimitDescriptor> = (0..10_000)
        .map(|i| descriptor(&[("user", &format!("v{i}"))]))
        .collect();
    // Descriptors that cannot be decided as sent: OVER_LIMIT, nothing counted.
    for (name, bad) in [
        ("burst + 1", with_cost(6)),
        ("2^32", with_cost(1 << 32)),
        ("2^64 - 1", with_cost(u64::MAX)),
        ("empty entries", descriptor(&[])),
        ("empty key", descriptor(&[("", "v")])),
        ("1 MiB key", descriptor(&[(long.as_str(), "v")])),
        ("1 MiB value", descriptor(&[("user", long.as_str())])),
    ] {
        let response = within(client.should_rate_limit(request("rl", vec![bad])))
            .await
            .unwrap_or_else(|error| panic!("{name}: {error}"))
            .into_inner();
        assert_eq!(response.overall_code(), Code::OverLimit, "{name}");
        assert_eq!(remaining(&server).await, before, "{name} changed the state");
    }
    let cases = vec![
        ("empty domain", request("", vec![good.clone()])),
        ("no descriptors", request("rl", vec![])),
        ("10,000 descriptors", request("rl", many)),
        ("1 MiB domain", request(&long, vec![good.clone()])),
    ];
    for (name, req) in cases {
        let error = within(client.should_rate_limit(req)).await.expect_err(name);
        assert_eq!(
            error.code(),
            tonic::Code::InvalidArgument,
            "{name}: {error}"
        );
        assert_eq!(remaining(&server).await, before, "{name} changed the state");
    }
    // Above max_request_bytes (2 MiB): refused before decoding, as bad
    // input (tonic alone answers OUT_OF_RANGE).
    let huge = "k".repeat(3 * MIB);
    let error = within(
        client.should_rate_limit(request("rl", vec![descriptor(&[("user", huge.as_str())])])),
    )
    .await
    .expect_err("too large");
    assert_eq!(error.code(), tonic::Code::InvalidArgument, "{error}");
    assert_eq!(
        remaining(&server).await,
        before,
        "too large changed the state"
    );

    // Malformed protobuf, sent raw over HTTP/2.
    for garbage in [
        &[0xff_u8; 16][..],
        &[0x0a, 0x05, b'a'][..],             // a string field cut short
        &[0x12, 0x80, 0x80, 0x80, 0x80][..], // an unterminated length
        &[0x08][..],                         // a lone tag
    ] {
        let status = raw_grpc(&server, garbage).await;
        assert_eq!(
            status.as_deref(),
            Some("3"),
            "{garbage:?}: INVALID_ARGUMENT"
        );
        assert_eq!(remaining(&server).await, before);
    }

    // Malformed gRPC framing, which tonic alone answers INTERNAL (or
    // OUT_OF_RANGE): each frame carries a request that would count.
    let valid = request("rl", vec![descriptor(&[("user", "victim")])]).encode_to_vec();
    let mut two = BytesMut::from(&frame(0, valid.len(), &valid)[..]);
    two.extend_from_slice(&frame(0, valid.len(), &valid));
    let framing = [
        (
            "compressed flag, no grpc-encoding",
            frame(1, valid.len(), &valid),
        ),
        ("flag 2", frame(2, valid.len(), &valid)),
        ("flag 128", frame(128, valid.len(), &valid)),
        ("flag 255", frame(255, valid.len(), &valid)),
        ("truncated message", frame(0, valid.len() + 10, &valid)),
        ("truncated prefix", Bytes::from_static(&[0, 0, 0])),
        ("empty body", Bytes::new()),
        ("length above the limit", frame(0, 3 * MIB, &valid)),
        ("two messages", two.freeze()),
    ];
    for (name, body) in framing {
        let status = raw_grpc_body(&server, body).await;
        assert_eq!(status.as_deref(), Some("3"), "{name}: INVALID_ARGUMENT");
        assert_eq!(remaining(&server).await, before, "{name} changed the state");
    }
    // The same valid frame with flag 0 is decided: the cases above were
    // refused for their framing alone.
    assert_eq!(
        raw_grpc_body(&server, frame(0, valid.len(), &valid))
            .await
            .as_deref(),
        Some("0")
    );
    assert_ne!(remaining(&server).await, before, "the valid frame counted");

    let text = server.metrics().await;
    assert_eq!(
        metric(&text, "tollgate_rule_total_hits_total{rule=\"rl.user\"}"),
        1.0,
        "only the valid frame counted"
    );
    assert!(
        metric(
            &text,
            "tollgate_requests_refused_total{api=\"grpc\",reason=\"invalid\"}"
        ) == 14.0
            && metric(
                &text,
                "tollgate_requests_refused_total{api=\"grpc\",reason=\"invalid_descriptor\"}"
            ) == 7.0,
        "{text}"
    );
    server.stop().await;
}

/// A gRPC frame: the flag byte, `length` (big-endian `u32`), then
/// `message` (whatever its real length).
fn frame(flag: u8, length: usize, message: &[u8]) -> Bytes {
    let mut body = BytesMut::new();
    body.put_u8(flag);
    body.put_u32(u32::try_from(length).expect("small"));
    body.put_slice(message);
    body.freeze()
}

/// Sends `message` as a gRPC frame and returns `grpc-status`.
async fn raw_grpc(server: &TestServer, message: &[u8]) -> Option<String> {
    raw_grpc_body(server, frame(0, message.len(), message)).await
}

/// Sends `body` as a gRPC request body and returns `grpc-status`.
async fn raw_grpc_body(server: &TestServer, body: Bytes) -> Option<String> {
    let stream = within(tokio::net::TcpStream::connect(server.grpc))
        .await
        .expect("connect");
    let (mut sender, connection) = within(hyper::client::conn::http2::handshake(
        TokioExecutor::new(),
        TokioIo::new(stream),
    ))
    .await
    .expect("handshake");
    tokio::spawn(connection);
    let request = http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            server.grpc
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(body))
        .expect("request");
    let response = within(sender.send_request(request))
        .await
        .expect("response");
    assert_eq!(response.status(), 200, "gRPC errors travel in grpc-status");
    if let Some(status) = response.headers().get("grpc-status") {
        return status.to_str().ok().map(str::to_owned);
    }
    let collected = within(response.into_body().collect()).await.expect("body");
    collected
        .trailers()
        .and_then(|t| t.get("grpc-status"))
        .and_then(|s| s.to_str().ok())
        .map(str::to_owned)
}
