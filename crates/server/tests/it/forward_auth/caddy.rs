//! caddy in front of the upstream, asking tollgate (`tests/proxies`).

use std::sync::OnceLock;

use reqwest::StatusCode;

use crate::forward_auth::checks;
use crate::forward_auth::hostile::{self, Copies, Target};
use crate::forward_auth::support::{Proxy, caddy, shared};

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
    let client = crate::forward_auth::support::client([127, 0, 0, 14]);
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
    let down = crate::forward_auth::support::caddy(shared().down, shared().upstream);
    let status = checks::status_when_tollgate_is_down(&down.url(""), [127, 0, 0, 15]).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
}

fn target() -> Target {
    Target {
        name: "caddy",
        addr: proxy().addr,
    }
}

#[tokio::test]
async fn caddy_believes_no_forwarded_header_a_client_writes() {
    hostile::forwarded_headers_are_not_believed(target(), [127, 0, 0, 30]).await;
}

#[tokio::test]
async fn caddy_counts_path_spellings_against_the_rule_served() {
    hostile::path_spellings_count_against_the_rule_served(target(), [127, 0, 0, 31]).await;
}

#[tokio::test]
async fn caddy_leaves_query_strings_to_the_client() {
    hostile::query_strings_are_the_clients(target(), [127, 0, 0, 32]).await;
}

#[tokio::test]
async fn caddy_survives_many_headers() {
    hostile::many_headers(target(), [127, 0, 0, 33], [431, 431, 431]).await;
}

#[tokio::test]
async fn caddy_passes_a_large_body_once() {
    hostile::large_body(target(), [127, 0, 0, 34]).await;
}

#[tokio::test]
async fn caddy_counts_concurrent_clients_exactly() {
    hostile::concurrent_clients_are_counted_exactly(target()).await;
}

#[tokio::test]
async fn caddy_answers_504_within_its_timeout_when_tollgate_hangs() {
    let hung = crate::forward_auth::support::caddy(shared().hung, shared().upstream);
    let target = Target {
        name: "caddy",
        addr: hung.addr,
    };
    hostile::answers_in_time_when_tollgate_hangs(target, [127, 0, 0, 35], 504).await;
}

#[tokio::test]
async fn caddy_copies_every_ratelimit_item() {
    hostile::every_ratelimit_item_is_copied(target(), [127, 0, 0, 36], Copies::ToUpstream).await;
}

#[tokio::test]
async fn caddy_keys_by_api_key_across_clients() {
    hostile::keys_are_shared_across_clients(target(), [[127, 0, 0, 37], [127, 0, 0, 38]]).await;
}

#[tokio::test]
async fn caddy_sends_tollgate_only_its_own_view_of_the_request() {
    let recorder = crate::forward_auth::support::Recorder::start();
    let twin = crate::forward_auth::support::caddy(recorder.addr, shared().upstream);
    hostile::auth_call_carries_only_the_proxys_view(twin.addr, &recorder, "caddy", [127, 0, 0, 39])
        .await;
}
