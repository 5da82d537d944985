use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use tower::ServiceExt;

use super::actions::descriptors;
use super::forwarded::Forwarded;
use crate::backend::MemoryBackend;
use crate::config::actions::ForwardAuthConfig;
use crate::config::{Config, ServerSettings};
use crate::metrics::Metrics;
use crate::rules::RuleSet;
use crate::service::{RequestLimits, Service};

/// An Envoy route's `rate_limits`, as Envoy's docs write them.
const ENVOY_RATE_LIMITS: &str = r#"
domain: api
forward_auth:
  trusted_proxies: [10.0.0.0/8]
  rate_limits:
    - actions:
        - remote_address: {}
    - actions:
        - header_value_match:
            descriptor_value: login
            headers:
              - name: ":path"
                string_match: {prefix: /login}
              - name: ":method"
                exact_match: POST
        - masked_remote_address: {v4_prefix_mask_len: 24}
    - actions:
        - request_headers: {header_name: x-api-key, descriptor_key: api_key}
        - generic_key: {descriptor_value: keyed}
    - actions:
        - request_headers: {header_name: x-tenant, descriptor_key: tenant, skip_if_absent: true}
        - query_parameters: {query_parameter_name: plan, descriptor_key: plan}
      hits_addend: {number: 2}
    - actions:
        - destination_cluster: {}
    - actions:
        - header_value_match:
            descriptor_key: not_internal
            descriptor_value: "yes"
            expect_match: false
            headers:
              - name: x-internal
                present_match: true
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
"#;

fn config(yaml: &str) -> Config {
    Config::from_yaml(Path::new("t.yaml"), yaml).expect("valid")
}

fn forward_auth(config: &Config) -> Arc<ForwardAuthConfig> {
    config.domains[0]
        .forward_auth
        .clone()
        .expect("forward_auth")
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
            HeaderValue::from_str(value).expect("value"),
        );
    }
    map
}

/// A descriptor's entries.
type Entries = Vec<(String, String)>;

fn entries(
    config: &ForwardAuthConfig,
    peer: &str,
    pairs: &[(&str, &str)],
    cluster: Option<&str>,
) -> Vec<(Entries, Option<u64>)> {
    let map = headers(pairs);
    let peer: IpAddr = peer.parse().expect("ip");
    let forwarded = Forwarded::new(config, peer, &map, None, cluster);
    descriptors(config, &forwarded)
        .into_iter()
        .map(|d| (d.entries, d.cost))
        .collect()
}

fn pair(k: &str, v: &str) -> (String, String) {
    (k.to_owned(), v.to_owned())
}

#[test]
fn envoy_actions_build_descriptors_as_envoy_does() {
    let config = config(ENVOY_RATE_LIMITS);
    let fa = forward_auth(&config);
    let got = entries(
        &fa,
        "10.0.0.2",
        &[
            ("x-forwarded-for", "198.51.100.7"),
            ("x-forwarded-method", "POST"),
            ("x-forwarded-uri", "/login?plan=gold&x=1"),
            ("x-api-key", "k1"),
        ],
        Some("users"),
    );
    assert_eq!(
        got,
        vec![
            (vec![pair("remote_address", "198.51.100.7")], None),
            (
                vec![
                    pair("header_match", "login"),
                    pair("masked_remote_address", "198.51.100.0/24")
                ],
                None
            ),
            (
                vec![pair("api_key", "k1"), pair("generic_key", "keyed")],
                None
            ),
            // x-tenant absent with skip_if_absent: only its entry goes.
            (vec![pair("plan", "gold")], Some(2)),
            (vec![pair("destination_cluster", "users")], None),
            (vec![pair("not_internal", "yes")], None),
        ]
    );
}

#[test]
fn an_action_that_cannot_produce_drops_its_descriptor_only() {
    let config = config(ENVOY_RATE_LIMITS);
    let fa = forward_auth(&config);
    // GET /login: the header match fails; no x-api-key (no skip_if_absent);
    // no plan parameter; no cluster; x-internal present (expect_match: false).
    let got = entries(
        &fa,
        "10.0.0.2",
        &[
            ("x-forwarded-for", "198.51.100.7"),
            ("x-forwarded-method", "GET"),
            ("x-forwarded-uri", "/login"),
            ("x-internal", "1"),
        ],
        None,
    );
    assert_eq!(
        got,
        vec![(vec![pair("remote_address", "198.51.100.7")], None)]
    );
}

#[test]
fn a_client_cannot_forge_its_address_past_the_trusted_hop() {
    let config = config(ENVOY_RATE_LIMITS);
    let fa = forward_auth(&config);
    let first = |peer: &str, xff: &str| {
        entries(&fa, peer, &[("x-forwarded-for", xff)], None)[0].0[0]
            .1
            .clone()
    };
    // The proxy (trusted) appended the client's address after the forgery.
    assert_eq!(
        first("10.0.0.2", "203.0.113.9, 198.51.100.7"),
        "198.51.100.7"
    );
    // Two trusted hops: the entry left of them is the client.
    assert_eq!(first("10.0.0.2", "198.51.100.7, 10.1.2.3"), "198.51.100.7");
    // A caller that is no trusted proxy is itself the client.
    assert_eq!(first("192.0.2.1", "198.51.100.7"), "192.0.2.1");
}

#[test]
fn a_bad_section_is_refused_at_its_line() {
    let cases = [
        (
            "rate_limits:\n    - actions:\n        - remote_address: {}\n",
            "trusted_proxies: required",
        ),
        (
            "trusted_proxies: [10.0.0.0/8]\n  rate_limits:\n    - actions:\n        - metadata: {descriptor_key: x}\n",
            "metadata: a forwarded request carries no Envoy metadata",
        ),
        (
            "rate_limits:\n    - actions:\n        - header_value_match: {descriptor_value: v, headers: [{name: x, safe_regex_match: {regex: \"(\"}}]}\n",
            "is no regex",
        ),
        (
            "rate_limits:\n    - actions:\n        - generic_key: {descriptor_value: v}\n          remote_address: {}\n",
            "exactly one of",
        ),
        (
            "rate_limits:\n    - actions: [{generic_key: {descriptor_value: v}}]\n      limit: {dynamic_metadata: {}}\n",
            "limit: its override comes from Envoy's dynamic metadata",
        ),
    ];
    for (section, expected) in cases {
        let yaml = format!("domain: d\nforward_auth:\n  {section}");
        let error = Config::from_yaml(Path::new("t.yaml"), &yaml).expect_err(section);
        assert!(
            error.message().contains(expected),
            "{section}: {}",
            error.message()
        );
        assert!(error.line().is_some(), "{section}: no line in {error}");
    }
}

#[test]
fn regexes_match_whole_values_and_ranges_are_half_open() {
    let config = config(
        r#"
domain: d
forward_auth:
  rate_limits:
    - actions:
        - header_value_match:
            descriptor_value: v1
            headers: [{name: ":path", safe_regex_match: {regex: "/v1/.*"}}]
    - actions:
        - header_value_match:
            descriptor_value: big
            headers: [{name: content-length, range_match: {start: 1000, end: 2000}}]
"#,
    );
    let fa = forward_auth(&config);
    let keys = |pairs: &[(&str, &str)]| -> Vec<String> {
        entries(&fa, "127.0.0.1", pairs, None)
            .into_iter()
            .map(|(entries, _)| entries[0].1.clone())
            .collect()
    };
    assert_eq!(keys(&[("x-forwarded-uri", "/v1/users")]), ["v1"]);
    assert!(keys(&[("x-forwarded-uri", "/api/v1/users")]).is_empty());
    assert_eq!(keys(&[("content-length", "1999")]), ["big"]);
    assert!(keys(&[("content-length", "2000")]).is_empty());
}

async fn call(
    router: &axum::Router,
    uri: &str,
    peer: &str,
    pairs: &[(&str, &str)],
) -> http::Response<Body> {
    let mut request = Request::get(uri).body(Body::empty()).expect("request");
    *request.headers_mut() = headers(pairs);
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(std::net::SocketAddr::new(
            peer.parse().expect("ip"),
            40000,
        )));
    router.clone().oneshot(request).await.expect("infallible")
}

fn router(yaml: &str) -> axum::Router {
    let config = config(yaml);
    let service = Service::new(
        RuleSet::new(&config),
        Arc::new(MemoryBackend::new(tollgate::ClockSource::default())),
        Arc::new(Metrics::new()),
        RequestLimits::of(&ServerSettings::default()),
        8,
    )
    .expect("service");
    crate::http::router(
        Arc::new(service),
        None,
        Arc::new(std::sync::atomic::AtomicBool::new(true)),
        1024,
    )
}

const TWO_PER_MINUTE: &str = r#"
domain: d
forward_auth:
  trusted_proxies: [127.0.0.1]
  rate_limits:
    - actions: [{remote_address: {}}]
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
"#;

#[tokio::test]
async fn passes_then_refuses_with_retry_after_and_ratelimit_headers() {
    let router = router(TWO_PER_MINUTE);
    let client = [("x-forwarded-for", "198.51.100.7")];
    for remaining in ["1", "0"] {
        let response = call(&router, "/v1/forward-auth/d", "127.0.0.1", &client).await;
        assert_eq!(response.status(), StatusCode::OK);
        let ratelimit = response.headers()["ratelimit"].to_str().expect("ascii");
        assert_eq!(ratelimit, format!("\"d.remote_address\";r={remaining}"));
        assert_eq!(
            response.headers()["ratelimit-policy"],
            "\"d.remote_address\";q=2;w=60"
        );
    }
    let refused = call(&router, "/v1/forward-auth/d", "127.0.0.1", &client).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = refused.headers()["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!((29..=30).contains(&retry), "{retry}");
    // The nginx mode: the same refusal as 403; another client still passes.
    let forbidden = call(
        &router,
        "/v1/forward-auth/d?deny_status=403",
        "127.0.0.1",
        &client,
    )
    .await;
    assert_eq!(forbidden.status(), StatusCode::FORBIDDEN);
    assert!(forbidden.headers().contains_key("retry-after"));
    let other = call(
        &router,
        "/v1/forward-auth/d",
        "127.0.0.1",
        &[("x-forwarded-for", "198.51.100.8")],
    )
    .await;
    assert_eq!(other.status(), StatusCode::OK);
}

#[tokio::test]
async fn configuration_errors_are_refusals_never_passes() {
    let router = router(TWO_PER_MINUTE);
    let unknown = call(&router, "/v1/forward-auth/nope", "127.0.0.1", &[]).await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    let bad = call(
        &router,
        "/v1/forward-auth/d?deny_status=500",
        "127.0.0.1",
        &[],
    )
    .await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let typo = call(&router, "/v1/forward-auth/d?deny=403", "127.0.0.1", &[]).await;
    assert_eq!(typo.status(), StatusCode::BAD_REQUEST);
}

/// Each proxy names the method, host and path in its own headers.
#[test]
fn method_host_and_path_come_from_each_proxys_headers() {
    let config = config(
        r#"
domain: d
forward_auth:
  rate_limits:
    - actions:
        - request_headers: {header_name: ":method", descriptor_key: method}
        - request_headers: {header_name: ":authority", descriptor_key: host}
        - request_headers: {header_name: ":path", descriptor_key: path}
"#,
    );
    let fa = forward_auth(&config);
    let seen = |pairs: &[(&str, &str)]| entries(&fa, "127.0.0.1", pairs, None)[0].0.clone();
    let expected = vec![
        pair("method", "POST"),
        pair("host", "shop.example"),
        pair("path", "/cart?id=1"),
    ];
    // nginx (as the README's snippet sets them), Caddy, Traefik.
    assert_eq!(
        seen(&[
            ("x-forwarded-method", "POST"),
            ("x-forwarded-host", "shop.example"),
            ("x-forwarded-uri", "/cart?id=1"),
        ]),
        expected
    );
    // ingress-nginx.
    assert_eq!(
        seen(&[
            ("x-original-method", "POST"),
            ("x-original-url", "https://shop.example/cart?id=1"),
        ]),
        expected
    );
    // A prefix stripped before the URI was taken (Traefik's StripPrefix).
    assert_eq!(
        seen(&[
            ("x-forwarded-method", "POST"),
            ("x-forwarded-host", "shop.example"),
            ("x-forwarded-prefix", "/cart/"),
            ("x-forwarded-uri", "?id=1"),
        ]),
        expected
    );
}
