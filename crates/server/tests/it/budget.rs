//! Token budgets over the RLS (real gRPC), in memory and on a real Redis:
//! Envoy AI Gateway's request / stream-done pair and envoyproxy/ratelimit's
//! `token-quota.sh` sequence, replayed call by call.

use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::support::*;

/// The descriptors Envoy Gateway sends for an AI Gateway `BackendTrafficPolicy`
/// rule selecting the `x-user-id` and `x-ai-eg-model` headers (Distinct),
/// with a budget of 1,000 total tokens an hour per user and model.
const AI_GATEWAY: &str = "
domain: ai-gateway
descriptors:
  - key: x-user-id
    descriptors:
      - key: x-ai-eg-model
        budget: {unit: tokens}
        rate_limit: {unit: hour, requests_per_unit: 1000}
";

/// envoyproxy/ratelimit's example configuration for its `/tokenquota`
/// route (examples/ratelimit/config/example.yaml), with `budget:` added to
/// the charged descriptor.
const TOKEN_QUOTA: &str = "
domain: rl
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: service
    value: service_2
    quota_mode: true
    budget: {unit: requests}
    rate_limit: {unit: minute, requests_per_unit: 2}
";

/// A descriptor with its own `hits_addend`, as Envoy sends a route's
/// `rate_limits[].hits_addend` (0 on the request path, the tokens on
/// stream done).
fn with_hits(entries: &[(&str, &str)], hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(hits),
        ..descriptor(entries)
    }
}

async fn call(server: &TestServer, domain: &str, descriptors: Vec<RateLimitDescriptor>) -> Code {
    let mut client = server.grpc_client().await;
    within(client.should_rate_limit(request(domain, descriptors)))
        .await
        .expect("grpc")
        .into_inner()
        .overall_code()
}

/// The request path: is the user's budget for the model spent?
async fn ai_request(server: &TestServer, user: &str) -> Code {
    let entries = [("x-user-id", user), ("x-ai-eg-model", "gpt-4o")];
    call(server, "ai-gateway", vec![with_hits(&entries, 0)]).await
}

/// Stream done: the total tokens the response used.
async fn ai_stream_done(server: &TestServer, user: &str, tokens: u64) -> Code {
    let entries = [("x-user-id", user), ("x-ai-eg-model", "gpt-4o")];
    call(server, "ai-gateway", vec![with_hits(&entries, tokens)]).await
}

/// The pair replayed: two responses spend 1,300 of 1,000 tokens; the
/// second, over the budget, is counted (answered OVER_LIMIT, which Envoy
/// ignores on stream done), so the next request is refused. Then a
/// charge far above the whole budget (u64::MAX tokens) is refused and
/// recorded, never an error and never dropped.
async fn ai_gateway_replay(server: &TestServer) {
    assert_eq!(ai_request(server, "alice").await, Code::Ok);
    assert_eq!(ai_stream_done(server, "alice", 600).await, Code::Ok);
    assert_eq!(ai_request(server, "alice").await, Code::Ok, "400 left");
    assert_eq!(
        ai_stream_done(server, "alice", 700).await,
        Code::OverLimit,
        "counted over the limit"
    );
    assert_eq!(
        ai_request(server, "alice").await,
        Code::OverLimit,
        "the budget is overspent: the next request is refused"
    );
    // Another user's budget is untouched.
    assert_eq!(ai_request(server, "bob").await, Code::Ok);
    assert_eq!(
        ai_stream_done(server, "bob", u64::MAX).await,
        Code::OverLimit
    );
    assert_eq!(ai_request(server, "bob").await, Code::OverLimit);
}

/// `token-quota.sh` through its `/tokenquota` route
/// (examples/envoy/proxy.yaml): the request path sends service_2 with
/// `hits_addend: 0`, stream done service_2 with 1. Lyft answers OK, OK,
/// OK, OVER_LIMIT: a budget spent exactly to its limit still admits a
/// look; the third charge goes over and is counted.
async fn token_quota_replay(server: &TestServer) -> Vec<Code> {
    let mut answers = Vec::new();
    for _ in 0..4 {
        let looked = call(
            server,
            "rl",
            vec![with_hits(&[("service", "service_2")], 0)],
        )
        .await;
        answers.push(looked);
        if looked == Code::Ok {
            // apply_on_stream_done: the charge's answer is not Envoy's concern.
            call(
                server,
                "rl",
                vec![with_hits(&[("service", "service_2")], 1)],
            )
            .await;
        }
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ai_gateway_request_and_stream_done_in_memory() {
    let server = start(AI_GATEWAY).await;
    ai_gateway_replay(&server).await;
    // The debt is repaid at the budget's rate: 300 tokens over plus one
    // token's worth (3.6 s each) and a look passes again.
    server
        .clock
        .advance(std::time::Duration::from_millis(300 * 3_600));
    assert_eq!(ai_request(&server, "alice").await, Code::Ok);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lyft_token_quota_sequence_in_memory() {
    let server = start(TOKEN_QUOTA).await;
    assert_eq!(
        token_quota_replay(&server).await,
        [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ai_gateway_request_and_stream_done_on_redis() {
    let redis = RedisServer::start();
    let server = start(&format!("{}{AI_GATEWAY}", redis.backend(PATIENT))).await;
    ai_gateway_replay(&server).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lyft_token_quota_sequence_on_redis() {
    let redis = RedisServer::start();
    let server = start(&format!("{}{TOKEN_QUOTA}", redis.backend(PATIENT))).await;
    assert_eq!(
        token_quota_replay(&server).await,
        [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]
    );
    server.stop().await;
}

/// Window budgets of 1,000 tokens a day (fixed window, sliding window of
/// 4 slots, calendar day): each carries a charge's excess as a debt, in
/// memory and on Redis.
const WINDOWS: &str = "
domain: windows
descriptors:
  - key: fixed
    budget: {unit: tokens}
    rate_limit: {unit: day, requests_per_unit: 1000, algorithm: fixed_window}
  - key: sliding
    budget: {unit: tokens}
    rate_limit: {unit: day, requests_per_unit: 1000, algorithm: sliding_window, slots: 4}
  - key: calendar
    budget: {unit: tokens}
    rate_limit: {calendar: day, requests_per_unit: 1000}
";

/// The request / stream-done pair on each window budget: 600 tokens fit,
/// a response of 2,500 goes over and is counted (3,100 of 1,000: a debt of
/// 2,100, two days and more of it), so the next look is refused, even
/// if a window ends during the test. Before windows carried their debt on
/// Redis, the count past the limit read as no state there: every look
/// passed, an unlimited budget.
async fn window_replay(server: &TestServer) {
    for key in ["fixed", "sliding", "calendar"] {
        let charge = |tokens| {
            call(
                server,
                "windows",
                vec![with_hits(&[(key, "alice")], tokens)],
            )
        };
        assert_eq!(charge(0).await, Code::Ok, "{key}: a look");
        assert_eq!(charge(600).await, Code::Ok, "{key}: 600 fit");
        assert_eq!(charge(0).await, Code::Ok, "{key}: 400 left");
        assert_eq!(charge(2_500).await, Code::OverLimit, "{key}: counted over");
        assert_eq!(charge(0).await, Code::OverLimit, "{key}: overspent");
        assert_eq!(charge(0).await, Code::OverLimit, "{key}: still overspent");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_budgets_carry_their_debt_in_memory() {
    let server = start(WINDOWS).await;
    window_replay(&server).await;
    // Repaid at 1,000 a day: 2,100 over takes until the third day's window.
    let day = std::time::Duration::from_secs(86_400);
    server.clock.advance(2 * day);
    for key in ["fixed", "sliding", "calendar"] {
        let look = call(&server, "windows", vec![with_hits(&[(key, "alice")], 0)]);
        assert_eq!(look.await, Code::OverLimit, "{key}: 100 still owed");
    }
    server.clock.advance(day + day / 4);
    for key in ["fixed", "sliding", "calendar"] {
        let look = call(&server, "windows", vec![with_hits(&[(key, "alice")], 0)]);
        assert_eq!(look.await, Code::Ok, "{key}: repaid");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_budgets_carry_their_debt_on_redis() {
    let redis = RedisServer::start();
    let server = start(&format!("{}{WINDOWS}", redis.backend(PATIENT))).await;
    window_replay(&server).await;
    server.stop().await;
}

/// Without `budget:` the same rule is a gate: the charge that does not fit
/// is refused and never written, so every look passes (the behaviour a
/// budget exists to fix, kept for gates).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_is_not_charged_what_does_not_fit() {
    let server = start(&TOKEN_QUOTA.replace("    budget: {unit: requests}\n", "")).await;
    assert_eq!(
        token_quota_replay(&server).await,
        [Code::Ok, Code::Ok, Code::Ok, Code::Ok]
    );
    server.stop().await;
}

/// Kuadrant Limitador's calls on the same gRPC port: `CheckRateLimit`
/// looks (counts nothing), `Report` counts: a budget's report is a charge,
/// recorded over the limit, so the next check is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limitador_check_and_report() {
    use tollgate_server::grpc::proto::kuadrant::service::ratelimit::v1::rate_limit_service_client::RateLimitServiceClient as Kuadrant;

    let server = start(AI_GATEWAY).await;
    let client = within(Kuadrant::connect(format!("http://{}", server.grpc)))
        .await
        .expect("connect");
    let alice = [("x-user-id", "alice"), ("x-ai-eg-model", "gpt-4o")];
    let ask = |report: bool, hits: u32| {
        let mut message = request("ai-gateway", vec![descriptor(&alice)]);
        message.hits_addend = hits;
        let mut client = client.clone();
        async move {
            let answer = if report {
                within(client.report(message)).await
            } else {
                within(client.check_rate_limit(message)).await
            };
            answer.expect("grpc").into_inner().overall_code()
        }
    };
    for _ in 0..3 {
        assert_eq!(ask(false, 5000).await, Code::Ok, "a check counts nothing");
    }
    assert_eq!(ask(true, 600).await, Code::Ok);
    assert_eq!(ask(false, 0).await, Code::Ok);
    assert_eq!(
        ask(true, 700).await,
        Code::OverLimit,
        "counted over the limit"
    );
    assert_eq!(ask(false, 0).await, Code::OverLimit);
    drop(client);
    server.stop().await;
}

/// The HTTP API's side: `dry_run` looks, a `cost` charges (recorded over
/// the limit); `/metrics` and `/status.json` show the budget in its unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_check_charges_and_metrics_show_the_budget() {
    let server = start(AI_GATEWAY).await;
    let check = |cost: Option<u64>| {
        let mut descriptor = serde_json::json!({"entries": [
            {"key": "x-user-id", "value": "carol"},
            {"key": "x-ai-eg-model", "value": "gpt-4o"},
        ]});
        let mut body = serde_json::json!({"domain": "ai-gateway", "dry_run": cost.is_none()});
        if let Some(cost) = cost {
            descriptor["cost"] = cost.into();
        }
        body["descriptors"] = serde_json::json!([descriptor]);
        let url = server.url("/v1/check");
        async move {
            let response = within(http_client().post(url).json(&body).send())
                .await
                .expect("http");
            assert_eq!(response.status(), 200);
            response.json::<serde_json::Value>().await.expect("json")
        }
    };
    assert_eq!(check(None).await["overall_code"], "OK");
    let over = check(Some(1500)).await;
    assert_eq!(over["overall_code"], "OVER_LIMIT", "{over}");
    assert_eq!(check(None).await["overall_code"], "OVER_LIMIT", "charged");

    let rule = "ai-gateway.x-user-id.x-ai-eg-model";
    let metrics = server.metrics().await;
    let labels = format!("{{rule=\"{rule}\",unit=\"tokens\"}}");
    assert_eq!(
        metric(&metrics, &format!("tollgate_budget_spent_total{labels}")),
        1500.0
    );
    assert_eq!(
        metric(
            &metrics,
            &format!("tollgate_budget_overdrawn_total{labels}")
        ),
        1500.0
    );
    assert_eq!(
        metric(
            &metrics,
            &format!("tollgate_budget_refused_looks_total{labels}")
        ),
        1.0
    );
    let status: serde_json::Value = within(http_client().get(server.url("/status.json")).send())
        .await
        .expect("status")
        .json()
        .await
        .expect("json");
    let row = status["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|r| r["rule"] == rule)
        .expect("the budget's row");
    assert_eq!(row["budget"]["unit"], "tokens");
    assert_eq!(row["budget"]["spent"], 1500);
    assert!(
        row["limit"]
            .as_str()
            .expect("limit")
            .contains("a budget of tokens")
    );
    server.stop().await;
}
