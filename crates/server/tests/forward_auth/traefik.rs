//! Traefik's `ForwardAuth` protocol, spoken by a proxy written here from
//! Traefik's documentation (Traefik is not packaged in Debian, so the real
//! binary does not run in these tests):
//!
//! - the entry point's `forwardedHeaders.trustedIPs` (here 127.0.0.3):
//!   `X-Forwarded-*` from any other client are removed;
//! - the auth request is a `GET` to `address` with the client's headers and
//!   `X-Forwarded-Method`, `-Proto`, `-Host`, `-Uri` and `-For`
//!   (`trustForwardHeader: true`: the client address appended to what the
//!   trusted entry point kept);
//! - a 2xx answer forwards the request with `authResponseHeaders`
//!   (`RateLimit`, `RateLimit-Policy`) copied into it; any other answer is
//!   returned to the client as is (status, headers, body);
//! - an auth server that cannot be reached: 500.
//!
//! The configuration it stands for is the README's Traefik snippet.

use std::net::{IpAddr, SocketAddr};
use std::sync::OnceLock;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;

use crate::checks;
use crate::support::{on_background, shared};

const TRUSTED_IPS: [IpAddr; 1] = [IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 3))];
const AUTH_RESPONSE_HEADERS: [&str; 2] = ["ratelimit", "ratelimit-policy"];
const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

#[derive(Clone)]
struct Traefik {
    address: String,
    upstream: SocketAddr,
    http: reqwest::Client,
}

async fn forward_auth(
    State(traefik): State<Traefik>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let mut headers = parts.headers.clone();
    if !TRUSTED_IPS.contains(&peer.ip()) {
        let forwarded: Vec<HeaderName> = headers
            .keys()
            .filter(|name| name.as_str().starts_with("x-forwarded-"))
            .cloned()
            .collect();
        for name in forwarded {
            headers.remove(name);
        }
    }
    let mut auth = HeaderMap::new();
    for (name, value) in &headers {
        if !HOP_BY_HOP.contains(&name.as_str()) && name != "host" && name != "content-length" {
            auth.append(name, value.clone());
        }
    }
    let xff = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(prior) => format!("{prior}, {}", peer.ip()),
        None => peer.ip().to_string(),
    };
    let set = |auth: &mut HeaderMap, name: &'static str, value: &str| {
        auth.insert(name, HeaderValue::from_str(value).expect("header"));
    };
    set(&mut auth, "x-forwarded-for", &xff);
    set(&mut auth, "x-forwarded-method", parts.method.as_str());
    set(&mut auth, "x-forwarded-proto", "http");
    if let Some(host) = parts.headers.get("host").and_then(|v| v.to_str().ok()) {
        set(&mut auth, "x-forwarded-host", host);
    }
    let uri = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    set(&mut auth, "x-forwarded-uri", uri);
    let answer = match traefik
        .http
        .get(&traefik.address)
        .headers(auth)
        .send()
        .await
    {
        Ok(answer) => answer,
        Err(_) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    };
    if !answer.status().is_success() {
        let mut response = Response::builder().status(answer.status());
        for (name, value) in answer.headers() {
            if !HOP_BY_HOP.contains(&name.as_str()) {
                response = response.header(name, value);
            }
        }
        let body = answer.bytes().await.unwrap_or_default();
        return response.body(Body::from(body)).expect("response");
    }
    let mut forward = traefik.http.request(
        parts.method.clone(),
        format!("http://{}{uri}", traefik.upstream),
    );
    for name in AUTH_RESPONSE_HEADERS {
        if let Some(value) = answer.headers().get(name) {
            forward = forward.header(name, value);
        }
    }
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    match forward.body(body).send().await {
        Ok(upstream) => {
            let mut response = Response::builder().status(upstream.status());
            for (name, value) in upstream.headers() {
                if !HOP_BY_HOP.contains(&name.as_str()) {
                    response = response.header(name, value);
                }
            }
            let body = upstream.bytes().await.unwrap_or_default();
            response.body(Body::from(body)).expect("response")
        }
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}

/// A Traefik-protocol proxy asking the tollgate at `tollgate`.
fn start(tollgate: SocketAddr) -> SocketAddr {
    let traefik = Traefik {
        address: format!("http://{tollgate}/v1/forward-auth/traefik"),
        upstream: shared().upstream,
        http: reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client"),
    };
    on_background(async move {
        let app = Router::new()
            .fallback(any(forward_auth))
            .with_state(traefik)
            .into_make_service_with_connect_info::<SocketAddr>();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    })
}

fn proxy() -> String {
    static PROXY: OnceLock<SocketAddr> = OnceLock::new();
    format!("http://{}", PROXY.get_or_init(|| start(shared().tollgate)))
}

#[tokio::test]
async fn traefik_protocol_passes_three_then_answers_429_with_retry_after() {
    checks::passes_three_then_429(&proxy(), [127, 0, 0, 10]).await;
}

#[tokio::test]
async fn traefik_protocol_keys_ignore_a_forged_x_forwarded_for() {
    checks::forged_forwarded_for_is_ignored(&proxy(), [127, 0, 0, 11]).await;
}

#[tokio::test]
async fn traefik_protocol_keys_clients_behind_a_trusted_hop() {
    checks::clients_behind_a_trusted_hop_have_their_own_keys(
        &proxy(),
        "203.0.113.1",
        "203.0.113.2",
    )
    .await;
}

#[tokio::test]
async fn traefik_protocol_applies_path_and_method_rules() {
    checks::path_and_method_rules(&proxy(), [127, 0, 0, 12]).await;
}

#[tokio::test]
async fn traefik_protocol_shadow_mode_passes_and_counts() {
    checks::shadow_mode_passes_and_counts(&proxy(), [127, 0, 0, 13], "traefik").await;
}

/// `authResponseHeaders` put the RateLimit items in the upstream's
/// request; a refusal reaches the client whole.
#[tokio::test]
async fn traefik_protocol_copies_ratelimit_headers_to_the_upstream_and_refusals() {
    let client = crate::support::client([127, 0, 0, 14]);
    let url = format!("{}/limited", proxy());
    let pass = client.get(&url).send().await.expect("pass");
    assert_eq!(pass.status(), StatusCode::OK);
    assert_eq!(
        pass.headers()["x-upstream-saw-ratelimit"],
        "\"traefik.header_match_limited.remote_address\";r=2"
    );
    for _ in 0..2 {
        client.get(&url).send().await.expect("pass");
    }
    let refused = client.get(&url).send().await.expect("refused");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(checks::retry_after(&refused) >= 1);
}

/// Traefik answers 500 when the auth server cannot be reached.
#[tokio::test]
async fn traefik_protocol_answers_500_when_tollgate_is_down() {
    let down = format!("http://{}", start(shared().down));
    let status = checks::status_when_tollgate_is_down(&down, [127, 0, 0, 15]).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
}
