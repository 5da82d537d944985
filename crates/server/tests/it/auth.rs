//! The bearer token, on both APIs.

use tonic::metadata::MetadataValue;

use crate::support::*;

const BODY: &str = r#"{"domain":"rl","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}"#;

#[tokio::test]
async fn missing_and_wrong_tokens_are_refused_on_both_apis() {
    let server = start_with("  bearer_token: s3cret-token\n", RULES).await;
    let http = http_client();

    for (name, header) in [
        ("missing", None),
        ("wrong", Some("Bearer s3cret-tokeN")),
        ("prefix", Some("Bearer s3cret")),
        ("not bearer", Some("Basic s3cret-token")),
    ] {
        for (method, path) in [
            ("POST", "/v1/check"),
            ("GET", "/v1/rules"),
            ("GET", "/metrics"),
        ] {
            let mut request = match method {
                "POST" => http.post(server.url(path)).body(BODY),
                _ => http.get(server.url(path)),
            };
            if let Some(header) = header {
                request = request.header("authorization", header);
            }
            let response = within(request.send()).await.expect("http");
            assert_eq!(response.status(), 401, "{name} {path}");
        }

        let mut client = server.grpc_client().await;
        let mut req = tonic::Request::new(request("rl", vec![descriptor(&[("user", "a")])]));
        if let Some(header) = header {
            req.metadata_mut().insert(
                "authorization",
                MetadataValue::try_from(header).expect("ascii"),
            );
        }
        let error = within(client.should_rate_limit(req)).await.expect_err(name);
        assert_eq!(error.code(), tonic::Code::Unauthenticated, "{name}");
    }

    // Nothing was counted while refused.
    let good = "Bearer s3cret-token";
    let response = within(
        http.post(server.url("/v1/check"))
            .header("authorization", good)
            .body(BODY)
            .send(),
    )
    .await
    .expect("http");
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.expect("json");
    assert_eq!(body["statuses"][0]["remaining"], 1);

    let mut client = server.grpc_client().await;
    let mut req = tonic::Request::new(request("rl", vec![descriptor(&[("user", "a")])]));
    req.metadata_mut().insert(
        "authorization",
        MetadataValue::try_from(good).expect("ascii"),
    );
    let response = within(client.should_rate_limit(req))
        .await
        .expect("authorized")
        .into_inner();
    assert_eq!(response.statuses[0].limit_remaining, 0);

    // Probes need no token.
    for path in ["/healthz", "/readyz"] {
        let response = within(http.get(server.url(path)).send()).await.expect(path);
        assert_eq!(response.status(), 200, "{path}");
    }
    server.stop().await;
}
