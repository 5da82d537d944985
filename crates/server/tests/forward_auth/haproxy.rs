//! haproxy in front of the upstream, asking tollgate (`tests/proxies`).

use std::sync::OnceLock;

use reqwest::StatusCode;

use crate::checks;
use crate::support::{Proxy, haproxy, shared};

fn proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| haproxy(shared().tollgate, shared().upstream))
}

#[tokio::test]
async fn haproxy_passes_three_then_answers_429_with_retry_after() {
    checks::passes_three_then_429(&proxy().url(""), [127, 0, 0, 10]).await;
}

#[tokio::test]
async fn haproxy_keys_ignore_a_forged_x_forwarded_for() {
    checks::forged_forwarded_for_is_ignored(&proxy().url(""), [127, 0, 0, 11]).await;
}

#[tokio::test]
async fn haproxy_keys_clients_behind_a_trusted_hop() {
    checks::clients_behind_a_trusted_hop_have_their_own_keys(
        &proxy().url(""),
        "203.0.113.1",
        "203.0.113.2",
    )
    .await;
}

#[tokio::test]
async fn haproxy_applies_path_and_method_rules() {
    checks::path_and_method_rules(&proxy().url(""), [127, 0, 0, 12]).await;
}

#[tokio::test]
async fn haproxy_shadow_mode_passes_and_counts() {
    checks::shadow_mode_passes_and_counts(&proxy().url(""), [127, 0, 0, 13], "haproxy").await;
}

/// The Lua action's variables put the RateLimit items on passes and
/// refusals.
#[tokio::test]
async fn haproxy_copies_ratelimit_headers_to_passes_and_refusals() {
    let client = crate::support::client([127, 0, 0, 14]);
    let pass = client
        .get(proxy().url("/limited"))
        .send()
        .await
        .expect("pass");
    assert_eq!(pass.status(), StatusCode::OK);
    assert_eq!(
        pass.headers()["ratelimit"],
        "\"haproxy.header_match_limited.remote_address\";r=2"
    );
    for _ in 0..2 {
        client
            .get(proxy().url("/limited"))
            .send()
            .await
            .expect("pass");
    }
    let refused = client
        .get(proxy().url("/limited"))
        .send()
        .await
        .expect("refused");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        refused.headers()["ratelimit"]
            .to_str()
            .expect("ascii")
            .contains(";r=0;t=")
    );
}

/// The Lua action fails closed when tollgate cannot be reached: 503 with
/// Retry-After.
#[tokio::test]
async fn haproxy_answers_503_when_tollgate_is_down() {
    let down = crate::support::haproxy(shared().down, shared().upstream);
    let status = checks::status_when_tollgate_is_down(&down.url(""), [127, 0, 0, 15]).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}
