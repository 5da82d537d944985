use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use tower::ServiceExt;

use super::actions::descriptors;
use super::forwarded::{Forwarded, Unreadable};
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

/// `pairs`, with `GET /` in the default headers where they name neither.
fn with_defaults<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut all = pairs.to_vec();
    for (name, value) in [("x-forwarded-method", "GET"), ("x-forwarded-uri", "/")] {
        if !pairs.iter().any(|(n, _)| *n == name) {
            all.push((name, value));
        }
    }
    all
}

fn read(
    config: &ForwardAuthConfig,
    pairs: &[(&str, &str)],
) -> Result<Vec<(Entries, Option<u64>)>, Unreadable> {
    let map = headers(pairs);
    let forwarded = Forwarded::new(config, "127.0.0.1".parse().expect("ip"), &map, None, None)?;
    Ok(descriptors(config, &forwarded)
        .into_iter()
        .map(|d| (d.entries, d.cost))
        .collect())
}

fn entries(
    config: &ForwardAuthConfig,
    peer: &str,
    pairs: &[(&str, &str)],
    cluster: Option<&str>,
) -> Vec<(Entries, Option<u64>)> {
    let map = headers(&with_defaults(pairs));
    let peer: IpAddr = peer.parse().expect("ip");
    let forwarded = Forwarded::new(config, peer, &map, None, cluster).expect("readable");
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
    *request.headers_mut() = headers(&with_defaults(pairs));
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
    crate::http::router::api_routes(
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
        "/v1/forward-auth/d;deny_status=403",
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
    for path in [
        "/v1/forward-auth/d;deny_status=500",
        "/v1/forward-auth/d;deny=403",
        "/v1/forward-auth/d;deny_status",
    ] {
        let bad = call(&router, path, "127.0.0.1", &[]).await;
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST, "{path}");
    }
}

/// Regression: Caddy's `forward_auth` carries the client's query into the
/// auth call, which was read as the call's own parameters: `/health?probe=1`
/// was a 400 to the client, and `?deny_status=403` the client's to set.
#[tokio::test]
async fn the_auth_calls_query_is_never_read() {
    let router = router(TWO_PER_MINUTE);
    let client = [("x-forwarded-for", "198.51.100.7")];
    for (i, query) in [
        "?probe=1",
        "?deny_status=500",
        "?deny_status=403",
        "?%zz",
        "?a=1&a=2",
    ]
    .into_iter()
    .enumerate()
    {
        let other = format!("198.51.100.{}", 100 + i);
        let response = call(
            &router,
            &format!("/v1/forward-auth/d{query}"),
            "127.0.0.1",
            &[("x-forwarded-for", &other)],
        )
        .await;
        assert_eq!(response.status(), StatusCode::OK, "{query}");
    }
    for _ in 0..2 {
        call(&router, "/v1/forward-auth/d", "127.0.0.1", &client).await;
    }
    let refused = call(
        &router,
        "/v1/forward-auth/d?deny_status=403",
        "127.0.0.1",
        &client,
    )
    .await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// Regression: a client's own `X-Forwarded-Prefix` was put before the
/// path, and `X-Original-URI` believed where `X-Forwarded-Uri` was absent:
/// either moved a request off every path rule.
#[test]
fn a_client_cannot_steer_the_path_method_or_host() {
    let config = config(
        r#"
domain: d
forward_auth:
  rate_limits:
    - actions:
        - request_headers: {header_name: ":method", descriptor_key: method}
        - request_headers: {header_name: ":authority", descriptor_key: host, skip_if_absent: true}
        - request_headers: {header_name: ":path", descriptor_key: path}
"#,
    );
    let fa = forward_auth(&config);
    let proxy = [("x-forwarded-method", "GET"), ("x-forwarded-uri", "/api/x")];
    let expected = vec![(vec![pair("method", "GET"), pair("path", "/api/x")], None)];
    for forged in [
        ("x-forwarded-prefix", "/x"),
        ("x-original-uri", "/health"),
        ("x-original-url", "http://h/health"),
        ("x-original-method", "OPTIONS"),
        ("x-forwarded-scheme", "https"),
        ("forwarded", "host=evil;proto=https"),
    ] {
        let mut pairs = proxy.to_vec();
        pairs.push(forged);
        assert_eq!(read(&fa, &pairs), Ok(expected.clone()), "{forged:?}");
    }
    // A proxy that appends to the client's header instead of replacing it.
    for (name, value) in proxy {
        let mut pairs = proxy.to_vec();
        pairs.insert(0, (name, value));
        assert_eq!(
            read(&fa, &pairs),
            Err(Unreadable::Repeated(name.to_owned()))
        );
    }
    let mut twice = proxy.to_vec();
    twice.extend([("x-forwarded-host", "a"), ("x-forwarded-host", "b")]);
    assert_eq!(
        read(&fa, &twice),
        Err(Unreadable::Repeated("x-forwarded-host".into()))
    );
    // A proxy that does not send the believed headers at all.
    assert_eq!(
        read(&fa, &[("x-forwarded-method", "GET")]),
        Err(Unreadable::Missing("x-forwarded-uri".into()))
    );
    assert_eq!(
        read(&fa, &[("x-forwarded-uri", "/")]),
        Err(Unreadable::Missing("x-forwarded-method".into()))
    );
}

/// Regression: paths were matched as sent, so `/health/../api/x` and
/// `/health/%2e%2e/api/x` escaped a rule on `/api` that the upstream
/// applies to them.
#[test]
fn rules_match_the_normal_path() {
    let rules = |path_policy: &str| {
        config(&format!(
            r#"
domain: d
forward_auth:
  path: {path_policy}
  rate_limits:
    - actions:
        - header_value_match:
            descriptor_value: api
            headers: [{{name: ":path", string_match: {{prefix: /api}}}}]
"#
        ))
    };
    let normalize = rules("normalize");
    let fa = forward_auth(&normalize);
    let api = Ok(vec![(vec![pair("header_match", "api")], None)]);
    for uri in [
        "/api/x",
        "/health/../api/x",
        "/health/%2e%2e/api/x",
        "/health/%2E%2E/api/x?q=1",
        "//api/x",
        "/./api",
        "/%61pi/x",
        "http://host/api/x",
    ] {
        assert_eq!(
            read(
                &fa,
                &[("x-forwarded-method", "GET"), ("x-forwarded-uri", uri)]
            ),
            api,
            "{uri}"
        );
    }
    for uri in ["/health", "/api/../health", "/health?to=/api"] {
        assert_eq!(
            read(
                &fa,
                &[("x-forwarded-method", "GET"), ("x-forwarded-uri", uri)]
            ),
            Ok(vec![]),
            "{uri}"
        );
    }
    for uri in ["/x/..%2Fapi", "/x/..;/api", "/a%00", "/a%zz", "*"] {
        let got = read(
            &fa,
            &[("x-forwarded-method", "GET"), ("x-forwarded-uri", uri)],
        );
        assert!(matches!(got, Err(Unreadable::Path(_))), "{uri}: {got:?}");
    }
    let refuse = rules("refuse");
    let fa = forward_auth(&refuse);
    assert_eq!(
        read(
            &fa,
            &[
                ("x-forwarded-method", "GET"),
                ("x-forwarded-uri", "/api/x?q=1")
            ]
        ),
        api
    );
    assert_eq!(
        read(
            &fa,
            &[
                ("x-forwarded-method", "GET"),
                ("x-forwarded-uri", "/health/../api/x")
            ]
        ),
        Err(Unreadable::NotNormal)
    );
}

#[tokio::test]
async fn unreadable_requests_are_refused_never_passed() {
    let router = router(TWO_PER_MINUTE);
    let path = |uri: &'static str| [("x-forwarded-uri", uri)];
    let bad = call(
        &router,
        "/v1/forward-auth/d",
        "127.0.0.1",
        &path("/x/..%2Fy"),
    )
    .await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    // The nginx mode: a client's bad path is refused as a limit is.
    let nginx = call(
        &router,
        "/v1/forward-auth/d;deny_status=403",
        "127.0.0.1",
        &path("/x/..%2Fy"),
    )
    .await;
    assert_eq!(nginx.status(), StatusCode::FORBIDDEN);
    // A misconfigured proxy is a 400 in every mode (nginx shows its 500).
    let mut request = Request::get("/v1/forward-auth/d;deny_status=403")
        .body(Body::empty())
        .expect("request");
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(std::net::SocketAddr::new(
            "127.0.0.1".parse().expect("ip"),
            40000,
        )));
    let missing = router.clone().oneshot(request).await.expect("infallible");
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
}

/// Regression: nginx's `$upstream_http_ratelimit` and HAProxy's Lua copy a
/// header's first line only, so a 429 caused by the second descriptor
/// showed the first's `r=`.
#[tokio::test]
async fn every_ratelimit_item_is_in_one_line() {
    let router = router(
        r#"
domain: d
forward_auth:
  trusted_proxies: [127.0.0.1]
  rate_limits:
    - actions: [{remote_address: {}}]
    - actions: [{generic_key: {descriptor_value: all}}]
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: generic_key
    value: all
    rate_limit: {unit: minute, requests_per_unit: 1}
"#,
    );
    let client = [("x-forwarded-for", "198.51.100.7")];
    call(&router, "/v1/forward-auth/d", "127.0.0.1", &client).await;
    let refused = call(&router, "/v1/forward-auth/d", "127.0.0.1", &client).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    for name in ["ratelimit", "ratelimit-policy"] {
        let lines: Vec<_> = refused.headers().get_all(name).iter().collect();
        assert_eq!(lines.len(), 1, "{name}: {lines:?}");
    }
    assert_eq!(
        refused.headers()["ratelimit"],
        "\"d.remote_address\";r=3, \"d.generic_key_all\";r=0;t=60"
    );
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
    // nginx (as its recipe in docs/reverse-proxies.md sets them), Caddy,
    // Traefik.
    assert_eq!(
        seen(&[
            ("x-forwarded-method", "POST"),
            ("x-forwarded-host", "shop.example"),
            ("x-forwarded-uri", "/cart?id=1"),
        ]),
        expected
    );
    // ingress-nginx, with `request_headers: x_original`.
    let ingress = with_request_headers(&config, "x_original");
    assert_eq!(
        read(
            &ingress,
            &[
                ("x-original-method", "POST"),
                ("x-original-url", "https://shop.example/cart?id=1"),
            ]
        )
        .expect("readable")[0]
            .0,
        expected
    );
    // A prefix stripped before the URI was taken (Traefik's StripPrefix),
    // believed only where the mapping names its header.
    let stripped = with_request_headers(
        &config,
        "{method: x-forwarded-method, uri: x-forwarded-uri, host: x-forwarded-host, prefix: x-forwarded-prefix}",
    );
    assert_eq!(
        read(
            &stripped,
            &[
                ("x-forwarded-method", "POST"),
                ("x-forwarded-host", "shop.example"),
                ("x-forwarded-prefix", "/cart/"),
                ("x-forwarded-uri", "?id=1"),
            ]
        )
        .expect("readable")[0]
            .0,
        expected
    );
}

/// `config`'s first domain with `forwarded_headers: {value}`.
fn with_request_headers(config: &Config, value: &str) -> ForwardAuthConfig {
    let _ = config;
    let yaml = format!(
        "domain: d\nforward_auth:\n  forwarded_headers: {value}\n  rate_limits:\n    - actions:\n        - request_headers: {{header_name: \":method\", descriptor_key: method}}\n        - request_headers: {{header_name: \":authority\", descriptor_key: host}}\n        - request_headers: {{header_name: \":path\", descriptor_key: path}}\n"
    );
    (*forward_auth(&self::config(&yaml))).clone()
}

#[test]
fn request_headers_are_checked_at_load() {
    for (value, expected) in [
        ("x_forwarded_for", "is not one of x_forwarded, x_original"),
        ("{method: x-m}", "exactly one of uri"),
        ("{method: x-m, uri: x-u, url: x-l}", "exactly one of uri"),
        ("{method: \"bad name\", uri: x-u}", "is not a header name"),
        ("{method: x-m, url: x-u, prefix: x-p}", "only with uri"),
    ] {
        let yaml = format!(
            "domain: d\nforward_auth:\n  forwarded_headers: {value}\n  rate_limits:\n    - actions: [{{generic_key: {{descriptor_value: v}}}}]\n"
        );
        let error = Config::from_yaml(Path::new("t.yaml"), &yaml).expect_err(value);
        assert!(
            error.message().contains(expected),
            "{value}: {}",
            error.message()
        );
    }
    let yaml = "domain: d\nforward_auth:\n  path: lenient\n  rate_limits:\n    - actions: [{generic_key: {descriptor_value: v}}]\n";
    let error = Config::from_yaml(Path::new("t.yaml"), yaml).expect_err("path");
    assert!(
        error.message().contains("normalize, refuse"),
        "{}",
        error.message()
    );
}

/// ingress-nginx writes the auth URL into its configuration unquoted,
/// where a `;` would end the directive: the domain's `deny_status` is the
/// default, and the URL's parameter still wins.
#[tokio::test]
async fn the_domains_deny_status_is_the_default() {
    let router = router(&TWO_PER_MINUTE.replace(
        "  trusted_proxies: [127.0.0.1]\n",
        "  trusted_proxies: [127.0.0.1]\n  deny_status: 403\n",
    ));
    let client = [("x-forwarded-for", "198.51.100.7")];
    for _ in 0..2 {
        call(&router, "/v1/forward-auth/d", "127.0.0.1", &client).await;
    }
    let refused = call(&router, "/v1/forward-auth/d", "127.0.0.1", &client).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let overridden = call(
        &router,
        "/v1/forward-auth/d;deny_status=429",
        "127.0.0.1",
        &client,
    )
    .await;
    assert_eq!(overridden.status(), StatusCode::TOO_MANY_REQUESTS);
    let yaml = TWO_PER_MINUTE.replace(
        "  trusted_proxies: [127.0.0.1]\n",
        "  trusted_proxies: [127.0.0.1]\n  deny_status: 500\n",
    );
    let error = Config::from_yaml(Path::new("t.yaml"), &yaml).expect_err("500");
    assert!(
        error.message().contains("429 or 403"),
        "{}",
        error.message()
    );
}
