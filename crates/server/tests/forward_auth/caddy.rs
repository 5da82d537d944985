//! caddy in front of the upstream, asking tollgate (`tests/proxies`).

use std::sync::OnceLock;

use reqwest::StatusCode;

use crate::checks;
use crate::support::{Proxy, caddy, shared};

fn proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| caddy(shared().tollgate, shared().upstream))
}

#[tokio::test]
async fn caddy_passes_three_then_answers_429_with_retry_after() {
    checks::passes_three_then_429(&proxy().url(""), [127, 0, 0, 10]).await;
}

#[tokio::test]
async fn caddy_keys_ignore_a_forged_x_forwarded_for() {
    checks::forged_forwarded_for_is_ignored(&proxy().url(""), [127, 0, 0, 11]).await;
}

#[tokio::test]
async fn caddy_keys_clients_behind_a_trusted_hop() {
    checks::clients_behind_a_trusted_hop_have_their_own_keys(
        &proxy().url(""),
        "203.0.113.1",
        "203.0.113.2",
    )
    .await;
}

#[tokio::test]
async fn caddy_applies_path_and_method_rules() {
    checks::path_and_method_rules(&proxy().url(""), [127, 0, 0, 12]).await;
}

#[tokio::test]
async fn caddy_shadow_mode_passes_and_counts() {
    checks::shadow_mode_passes_and_counts(&proxy().url(""), [127, 0, 0, 13], "caddy").await;
}

/// Caddy copies a refusal whole (429, Retry-After, RateLimit) and, on a
/// pass, `copy_headers` puts the RateLimit items in the upstream's request.
#[tokio::test]
async fn caddy_copies_ratelimit_headers_to_the_upstream_and_refusals() {
    let client = crate::support::client([127, 0, 0, 14]);
    let pass = client
        .get(proxy().url("/limited"))
        .send()
        .await
        .expect("pass");
    assert_eq!(pass.status(), StatusCode::OK);
    assert_eq!(
        pass.headers()["x-upstream-saw-ratelimit"],
        "\"caddy.header_match_limited.remote_address\";r=2"
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

/// Caddy answers 502 when it cannot reach tollgate: refused.
#[tokio::test]
async fn caddy_answers_502_when_tollgate_is_down() {
    let down = crate::support::caddy(shared().down, shared().upstream);
    let status = checks::status_when_tollgate_is_down(&down.url(""), [127, 0, 0, 15]).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
}
