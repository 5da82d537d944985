//! The Redis backend through the layer, against a real `redis-server` started
//! on a free loopback port: per-client decisions in Redis with exact
//! headers, then the limiter's failure policy once Redis is gone; and a
//! token budget shared by two layers (two processes, each with its own
//! connection), its debt, its refunds and its failure policy.

use crate::support;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::StatusCode;
use http::{Request, Response};
use support::{NETWORK_TIMEOUT, body, from_peer, header, ok_service, send};
use tollgate::{Gcra, Quota, WarmUp};
use tollgate_redis::{FailurePolicy, Options, Redis, RedisLimiter};
use tollgate_testkit::RedisServer;
use tollgate_tower::budget::{Settled, TokenBudgetLayer};
use tollgate_tower::{BuildError, HeaderKey, PeerIp, RateLimitLayer};
use tower::Layer;

/// The limiter's deadline: the decisions before the kill must be Redis's,
/// so one that a healthy Redis meets on a loaded 2-core machine too (the
/// answer after the kill comes at once: the connection is refused).
const DEADLINE: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_decides_per_client_and_the_failure_policy_answers_when_it_is_gone() {
    let mut server = RedisServer::start();
    let redis = Redis::connect(&server.url(), &Options::default())
        .await
        .expect("connects");
    // Two per minute per client; Redis gone: deny.
    let limiter = RedisLimiter::builder(redis, "tower-test")
        .limit(Gcra::new(Quota::per_minute(2).unwrap()).unwrap())
        .failure_policy(FailurePolicy::FailClosed)
        .deadline(DEADLINE)
        .build()
        .expect("limiter");
    let mut service = RateLimitLayer::builder(PeerIp::new(), limiter.clone())
        .headers_on_success(true)
        .build()
        .unwrap()
        .layer(ok_service());
    let request = |peer: &str| from_peer(peer).body(String::new()).unwrap();

    let first = send(&mut service, request("192.0.2.1")).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(header(&first, "ratelimit"), "\"default\";r=1");
    assert_eq!(
        send(&mut service, request("192.0.2.1")).await.status(),
        StatusCode::OK
    );
    let denied = send(&mut service, request("192.0.2.1")).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = header(&denied, "retry-after").parse().expect("seconds");
    assert!((29..=30).contains(&retry), "retry-after {retry}");
    // Another client has its own bucket, in Redis.
    assert_eq!(
        send(&mut service, request("192.0.2.2")).await.status(),
        StatusCode::OK
    );

    // Redis gone: the limiter's policy (fail closed) answers within its
    // deadline, as a 429, not an outage.
    server.kill();
    let started = Instant::now();
    let closed = send(&mut service, request("192.0.2.3")).await;
    assert_eq!(closed.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(!header(&closed, "retry-after").is_empty());
    assert!(
        started.elapsed() < DEADLINE + Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

/// An OpenAI-compatible upstream whose completion used the tokens the
/// request's `x-tokens` names.
fn llm()
-> impl tower::Service<Request<String>, Response = Response<String>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    tower::service_fn(|request: Request<String>| async move {
        let tokens: u64 = request
            .headers()
            .get("x-tokens")
            .and_then(|value| value.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        let body = format!(
            r#"{{"object":"chat.completion","choices":[],"usage":{{"prompt_tokens":0,"completion_tokens":{tokens},"total_tokens":{tokens}}}}}"#
        );
        let mut response = Response::new(body);
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        Ok::<_, Infallible>(response)
    })
}

/// A request of `user` whose completion uses `tokens`, reserving
/// `estimate` first.
fn completion(user: &str, estimate: u64, tokens: u64) -> Request<String> {
    Request::post("/v1/chat/completions")
        .header("x-user", user)
        .header("x-estimate", estimate.to_string())
        .header("x-tokens", tokens.to_string())
        .body("{}".to_owned())
        .unwrap()
}

/// Waits until `n` responses of `log` have been settled (a settle on Redis
/// runs in a task of its own once the body is done).
async fn settled(log: &Mutex<Vec<Settled>>, n: usize) -> Vec<Settled> {
    let wait = async {
        loop {
            let settled = log.lock().unwrap().clone();
            if settled.len() >= n {
                return settled;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(NETWORK_TIMEOUT, wait)
        .await
        .expect("the response was never settled")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_layers_on_redis_share_one_token_budget_and_its_debt() {
    let mut server = RedisServer::start();
    // One process's limiter: its own connection, the shared budget of 1,000
    // tokens a minute per user; Redis gone: deny.
    let process = || async {
        let redis = Redis::connect(&server.url(), &Options::default())
            .await
            .expect("connects");
        RedisLimiter::builder(redis, "tower-budget")
            .limit(Gcra::new(Quota::per_minute(1_000).unwrap()).unwrap())
            .failure_policy(FailurePolicy::FailClosed)
            .deadline(DEADLINE)
            .build()
            .expect("limiter")
    };
    let log = Arc::new(Mutex::new(Vec::new()));
    let layer = |limiter: RedisLimiter| {
        let log = Arc::clone(&log);
        TokenBudgetLayer::builder(HeaderKey::new(http::HeaderName::from_static("x-user")))
            .budget("per-minute", limiter)
            .estimate(|parts| {
                parts
                    .headers
                    .get("x-estimate")
                    .and_then(|value| value.to_str().ok()?.parse().ok())
                    .unwrap_or(0)
            })
            .on_settled(move |settled| log.lock().unwrap().push(*settled))
            .build()
            .unwrap()
    };
    let first = process().await;
    let mut one = layer(first.clone()).layer(llm());
    let mut two = layer(process().await).layer(llm());

    // Through the first: admitted, then 1,500 tokens used: 500 past the
    // budget, recorded on Redis as a debt.
    let overdraft = send(&mut one, completion("ada", 0, 1_500)).await;
    assert_eq!(overdraft.status(), StatusCode::OK);
    assert_eq!(header(&overdraft, "x-ratelimit-remaining-tokens"), "1000");
    body(overdraft).await;
    let charged = settled(&log, 1).await[0];
    assert_eq!((charged.tokens, charged.unrecorded), (1_500, 0));
    // The next request through the second is refused until the debt (and
    // one token) is repaid at 1,000 a minute: 30.06 s.
    let refused = send(&mut two, completion("ada", 0, 10)).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "x-ratelimit-remaining-tokens"), "0");
    let retry_ms: u64 = header(&refused, "retry-after-ms").parse().unwrap();
    assert!((29_000..=30_060).contains(&retry_ms), "retry {retry_ms} ms");
    // Another user's budget is whole.
    let bob = send(&mut two, completion("bob", 0, 10)).await;
    assert_eq!(bob.status(), StatusCode::OK);
    body(bob).await;
    // Settles land in tasks of their own: one at a time, in order.
    assert_eq!(settled(&log, 2).await[1].tokens, 10);

    // Reserve, then settle, across the two: 100 reserved through the
    // second, 40 used: 60 given back on Redis, seen by the first's limiter.
    let reserved = send(&mut two, completion("cy", 100, 40)).await;
    assert_eq!(header(&reserved, "x-ratelimit-remaining-tokens"), "900");
    body(reserved).await;
    let back = settled(&log, 3).await[2];
    assert_eq!((back.tokens, back.reserved), (40, 100));
    let left = first.peek_n("cy", 0).await.unwrap().remaining();
    assert_eq!(left, 960);

    // A Redis limiter holding a warm-up cannot record a debt: refused when
    // the layer is built, never served as a budget a charge misses.
    let redis = Redis::connect(&server.url(), &Options::default())
        .await
        .expect("connects");
    let warm_up = WarmUp::new(Quota::per_minute(1_000).unwrap(), Duration::from_secs(60)).unwrap();
    let warming = RedisLimiter::builder(redis, "tower-warm-up")
        .limit(warm_up)
        .build()
        .expect("limiter");
    let unfit = TokenBudgetLayer::builder(HeaderKey::new(http::HeaderName::from_static("x-user")))
        .budget("per-minute", warming)
        .build();
    assert!(
        matches!(unfit, Err(BuildError::UnfitBudget { .. })),
        "{unfit:?}"
    );

    // A response admitted while Redis was up, whose body ends once Redis is
    // gone: its charge is not taken, and the settle says so (the policy
    // answers the key's next requests).
    let admitted = send(&mut one, completion("eve", 0, 700)).await;
    assert_eq!(admitted.status(), StatusCode::OK);

    // Redis gone: the limiter's policy (fail closed) refuses, within its
    // deadline; nothing is let through.
    server.kill();
    body(admitted).await;
    let lost = settled(&log, 4).await[3];
    assert_eq!((lost.tokens, lost.unrecorded), (700, 700));
    let started = Instant::now();
    let closed = send(&mut one, completion("dee", 0, 10)).await;
    assert_eq!(closed.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        started.elapsed() < DEADLINE + Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}
