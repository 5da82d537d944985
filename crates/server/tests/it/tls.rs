//! TLS on both listeners, with a self-signed certificate made by the test
//! (rcgen) and real clients trusting it: tonic over rustls, reqwest over
//! rustls. Plain clients fail against TLS ports; the token still applies.

use std::path::{Path, PathBuf};

use tollgate_server::Server;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::metadata::MetadataValue;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

use crate::support::*;

const TOKEN: &str = "tls-t0ken";
const BODY: &str = r#"{"domain":"rl","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}"#;

struct Pem {
    _dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
    cert_pem: String,
}

/// A self-signed certificate for `localhost`, written to PEM files.
fn self_signed() -> Pem {
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("rcgen");
    let dir = tempfile::tempdir().expect("tempdir");
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    let cert_pem = certified.cert.pem();
    std::fs::write(&cert, &cert_pem).expect("write cert");
    std::fs::write(&key, certified.signing_key.serialize_pem()).expect("write key");
    Pem {
        _dir: dir,
        cert,
        key,
        cert_pem,
    }
}

fn tls_lines(pem: &Pem) -> String {
    let entry = format!(
        "{{cert: '{}', key: '{}'}}",
        pem.cert.display(),
        pem.key.display()
    );
    format!("  bearer_token: {TOKEN}\n  grpc_tls: {entry}\n  http_tls: {entry}\n")
}

fn https_client(pem: &Pem, server: &TestServer) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(TIMEOUT)
        .use_rustls_tls()
        .add_root_certificate(
            reqwest::Certificate::from_pem(pem.cert_pem.as_bytes()).expect("certificate"),
        )
        .resolve("localhost", server.http)
        .build()
        .expect("client")
}

async fn grpc_tls_client(pem: &Pem, server: &TestServer) -> RateLimitServiceClient<Channel> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&pem.cert_pem))
        .domain_name("localhost");
    let endpoint = Channel::from_shared(format!("https://{}", server.grpc))
        .expect("uri")
        .tls_config(tls)
        .expect("tls config");
    RateLimitServiceClient::new(within(endpoint.connect()).await.expect("grpc tls connect"))
}

fn with_token<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        MetadataValue::try_from(format!("Bearer {token}")).expect("ascii"),
    );
    request
}

#[tokio::test]
async fn both_apis_over_tls_with_the_token() {
    let pem = self_signed();
    let server = start_with(&tls_lines(&pem), RULES).await;

    // HTTP over TLS: the token is required, then decisions as usual.
    let https = https_client(&pem, &server);
    let url = format!("https://localhost:{}/v1/check", server.http.port());
    let refused = within(https.post(&url).body(BODY).send())
        .await
        .expect("https");
    assert_eq!(refused.status(), 401);
    let response = within(
        https
            .post(&url)
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(BODY)
            .send(),
    )
    .await
    .expect("https");
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), reqwest::Version::HTTP_2, "h2 by ALPN");
    let body: serde_json::Value = response.json().await.expect("json");
    assert_eq!(body["statuses"][0]["remaining"], 1);
    let health = within(
        https
            .get(format!("https://localhost:{}/healthz", server.http.port()))
            .send(),
    )
    .await
    .expect("https");
    assert_eq!(health.status(), 200);

    // gRPC over TLS: the token is required, then the same bucket.
    let mut grpc = grpc_tls_client(&pem, &server).await;
    let message = request("rl", vec![descriptor(&[("user", "a")])]);
    let error = within(grpc.should_rate_limit(message.clone()))
        .await
        .expect_err("no token");
    assert_eq!(error.code(), tonic::Code::Unauthenticated);
    let answer = within(grpc.should_rate_limit(with_token(message.clone(), TOKEN)))
        .await
        .expect("grpc")
        .into_inner();
    assert_eq!(answer.overall_code(), Code::Ok);
    let answer = within(grpc.should_rate_limit(with_token(message, TOKEN)))
        .await
        .expect("grpc")
        .into_inner();
    assert_eq!(answer.overall_code(), Code::OverLimit, "2 a minute, shared");

    server.stop().await;
}

#[tokio::test]
async fn plain_and_untrusting_clients_fail_against_tls_ports() {
    let pem = self_signed();
    let server = start_with(&tls_lines(&pem), RULES).await;

    // Plain HTTP to the TLS port: no answer.
    let plain = within(
        http_client()
            .post(server.url("/v1/check"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(BODY)
            .send(),
    )
    .await;
    assert!(plain.is_err(), "{plain:?}");

    // Plain gRPC (h2c) to the TLS port: the connection or the call fails.
    let plain = async {
        let mut client = RateLimitServiceClient::connect(format!("http://{}", server.grpc))
            .await
            .map_err(|e| e.to_string())?;
        client
            .should_rate_limit(with_token(
                request("rl", vec![descriptor(&[("user", "b")])]),
                TOKEN,
            ))
            .await
            .map_err(|e| e.to_string())
    };
    assert!(within(plain).await.is_err());

    // HTTPS without trusting the certificate: refused by the client.
    let untrusting = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .use_rustls_tls()
        .resolve("localhost", server.http)
        .build()
        .expect("client");
    let result = within(
        untrusting
            .get(format!("https://localhost:{}/healthz", server.http.port()))
            .send(),
    )
    .await;
    assert!(result.is_err(), "{result:?}");

    // Nothing of the above was counted: the bucket is whole.
    let https = https_client(&pem, &server);
    let body: serde_json::Value = within(
        https
            .post(format!("https://localhost:{}/v1/check", server.http.port()))
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(r#"{"domain":"rl","descriptors":[{"entries":[{"key":"user","value":"b"}]}]}"#)
            .send(),
    )
    .await
    .expect("https")
    .json()
    .await
    .expect("json");
    assert_eq!(body["statuses"][0]["remaining"], 1);
    server.stop().await;
}

#[tokio::test]
async fn bad_certificate_settings_are_config_errors_with_their_line() {
    let pem = self_signed();
    let other = self_signed();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rules.yaml");
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello\n").expect("write");
    let missing = dir.path().join("missing.pem");
    let p = |path: &Path| path.display().to_string();

    for (tls, needle) in [
        (
            format!("{{cert: '{}', key: '{}'}}", p(&missing), p(&pem.key)),
            format!("cert: cannot read '{}'", p(&missing)),
        ),
        (
            format!("{{cert: '{}', key: '{}'}}", p(&pem.cert), p(&missing)),
            format!("key: cannot read '{}'", p(&missing)),
        ),
        (
            format!("{{cert: '{}', key: '{}'}}", p(&not_pem), p(&pem.key)),
            "holds no PEM certificate".to_owned(),
        ),
        (
            format!("{{cert: '{}', key: '{}'}}", p(&pem.cert), p(&not_pem)),
            "holds no PEM private key".to_owned(),
        ),
        (
            format!("{{cert: '{}', key: '{}'}}", p(&pem.cert), p(&other.key)),
            "key: does not fit the certificate".to_owned(),
        ),
        (
            format!("{{cert: '{}'}}", p(&pem.cert)),
            "missing field `key`".to_owned(),
        ),
    ] {
        for field in ["grpc_tls", "http_tls"] {
            std::fs::write(
                &path,
                format!("server:\n  reload_interval_ms: 0\n  {field}: {tls}\n{RULES}"),
            )
            .expect("write");
            let error = Server::from_config_file(&path).expect_err(&needle);
            let text = error.to_string();
            assert!(text.contains(&needle), "{needle}: {text}");
            assert!(text.contains(field), "{field}: {text}");
            assert_eq!(error.line(), Some(3), "{text}");
        }
    }
}
