//! What every proxy must show its client, the same checks for each (the
//! rules are `tests/proxies/rules.yaml`, one domain per proxy).

use reqwest::StatusCode;

use crate::forward_auth::support::{TIMEOUT, client, shared};

/// `Retry-After` in seconds; panics when absent.
pub fn retry_after(response: &reqwest::Response) -> u64 {
    response
        .headers()
        .get("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After in {:?}", response.headers()))
        .to_str()
        .expect("ascii")
        .parse()
        .expect("whole seconds")
}

async fn get(client: &reqwest::Client, url: String, xff: Option<&str>) -> reqwest::Response {
    let mut request = client.get(url);
    if let Some(xff) = xff {
        request = request.header("x-forwarded-for", xff);
    }
    tokio::time::timeout(TIMEOUT, request.send())
        .await
        .expect("timed out")
        .expect("response")
}

/// `/limited` admits 3 a minute per client (GCRA: one every 20 s after
/// the burst): 3 pass to the upstream, the 4th is 429 with a Retry-After
/// of at most 20 s.
pub async fn passes_three_then_429(base: &str, source: [u8; 4]) {
    let client = client(source);
    for i in 0..3 {
        let response = get(&client, format!("{base}/limited/{i}"), None).await;
        assert_eq!(response.status(), StatusCode::OK, "request {i}");
        assert_eq!(response.text().await.expect("body"), "upstream\n");
    }
    let refused = get(&client, format!("{base}/limited/3"), None).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait = retry_after(&refused);
    assert!((1..=20).contains(&wait), "Retry-After: {wait}");
}

/// A client that writes its own X-Forwarded-For is still keyed by its
/// address: a new forged address per request does not buy a new bucket.
pub async fn forged_forwarded_for_is_ignored(base: &str, source: [u8; 4]) {
    let client = client(source);
    for i in 0..3 {
        let forged = format!("198.51.100.{i}");
        let response = get(&client, format!("{base}/limited"), Some(&forged)).await;
        assert_eq!(response.status(), StatusCode::OK, "request {i}");
    }
    let refused = get(&client, format!("{base}/limited"), Some("198.51.100.99")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// Behind a trusted load balancer (127.0.0.3, which appends the client it
/// saw), each client it vouches for has its own bucket.
pub async fn clients_behind_a_trusted_hop_have_their_own_keys(
    base: &str,
    first: &str,
    second: &str,
) {
    let balancer = client([127, 0, 0, 3]);
    for i in 0..3 {
        let response = get(&balancer, format!("{base}/limited"), Some(first)).await;
        assert_eq!(response.status(), StatusCode::OK, "request {i}");
    }
    let refused = get(&balancer, format!("{base}/limited"), Some(first)).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let other = get(&balancer, format!("{base}/limited"), Some(second)).await;
    assert_eq!(
        other.status(),
        StatusCode::OK,
        "another client behind the balancer"
    );
}

/// `POST /login` admits 1 a minute per client; `GET /login` is not limited.
pub async fn path_and_method_rules(base: &str, source: [u8; 4]) {
    let client = client(source);
    let post = || async {
        tokio::time::timeout(
            TIMEOUT,
            client.post(format!("{base}/login")).body("x").send(),
        )
        .await
        .expect("timed out")
        .expect("response")
    };
    assert_eq!(post().await.status(), StatusCode::OK);
    let refused = post().await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(retry_after(&refused) >= 1);
    for _ in 0..3 {
        let get = get(&client, format!("{base}/login"), None).await;
        assert_eq!(get.status(), StatusCode::OK, "GET /login is not limited");
    }
}

/// `/shadow` (1 a minute, shadow mode) lets every request through while
/// tollgate counts the ones over the limit.
pub async fn shadow_mode_passes_and_counts(base: &str, source: [u8; 4], domain: &str) {
    let client = client(source);
    for i in 0..4 {
        let response = get(&client, format!("{base}/shadow"), None).await;
        assert_eq!(response.status(), StatusCode::OK, "request {i}");
    }
    let metrics = get(
        &crate::forward_auth::support::client([127, 0, 0, 1]),
        format!("http://{}/metrics", shared().tollgate),
        None,
    )
    .await
    .text()
    .await
    .expect("metrics");
    let shadowed: f64 = metrics
        .lines()
        .filter(|line| line.contains("rule_shadow_mode") && !line.starts_with('#'))
        .filter(|line| line.contains(&format!("\"{domain}.")))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        shadowed >= 3.0,
        "{domain}: {shadowed} shadow-mode denials counted"
    );
}

/// What the client gets from `base` when tollgate is down.
pub async fn status_when_tollgate_is_down(base: &str, source: [u8; 4]) -> StatusCode {
    get(&client(source), format!("{base}/limited"), None)
        .await
        .status()
}
