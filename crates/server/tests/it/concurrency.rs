//! Concurrency rules end to end: `concurrency:` in the file,
//! leases over HTTP (`/v1/acquire`, `/v1/release`), and Envoy's RLS
//! answering OVER_LIMIT when no slot is free. Time is the server's manual
//! clock: a lease expires when the test moves it, never by waiting.

use std::time::Duration;

use serde_json::{Value, json};
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus,
};

use crate::support::*;

type RlsClient = tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<tonic::transport::Channel>;

const RULES: &str = "
domain: api
descriptors:
  - key: tenant
    concurrency: {limit: 2, lease_ttl: 10s}
  - key: report
    rate_limit: {unit: minute, requests_per_unit: 100}
    concurrency: 1
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
";

async fn post(server: &TestServer, path: &str, body: Value) -> (u16, Option<String>, Value) {
    let response = within(http_client().post(server.url(path)).json(&body).send())
        .await
        .expect("http");
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().expect("ascii").to_owned());
    (status, retry_after, response.json().await.expect("json"))
}

async fn rls(client: &mut RlsClient, key: &str, value: &str) -> Code {
    within(client.should_rate_limit(request("api", vec![descriptor(&[(key, value)])])))
        .await
        .expect("grpc")
        .into_inner()
        .overall_code()
}

fn tenant(name: &str) -> Value {
    json!({"domain": "api", "entries": [{"key": "tenant", "value": name}]})
}

#[tokio::test]
async fn leases_hold_slots_until_released_and_a_dead_holder_frees_them_at_the_ttl() {
    let server = start(RULES).await;
    let (status, _, first) = post(&server, "/v1/acquire", tenant("a")).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["ttl_ms"], 10_000);
    assert_eq!(first["limit"], 2);
    assert_eq!(first["in_flight"], 1);
    assert_eq!(first["rule"], "api.tenant");
    let (status, _, second) = post(&server, "/v1/acquire", tenant("a")).await;
    assert_eq!(status, 200);
    assert_eq!(second["in_flight"], 2);

    // Full: 429, and Retry-After until the first lease expires.
    server.clock.advance(Duration::from_millis(2_500));
    let (status, retry_after, refused) = post(&server, "/v1/acquire", tenant("a")).await;
    assert_eq!(status, 429, "{refused}");
    assert_eq!(retry_after.as_deref(), Some("8"));
    assert_eq!(refused["retry_after_ms"], 7_500);
    assert_eq!(refused["in_flight"], 2);
    // Another tenant has its own slots.
    let (status, _, _) = post(&server, "/v1/acquire", tenant("b")).await;
    assert_eq!(status, 200);

    // Release frees the slot at once; a second release is a clear 404.
    let lease = json!({"lease": first["lease"]});
    let (status, _, released) = post(&server, "/v1/release", lease.clone()).await;
    assert_eq!((status, &released["released"]), (200, &json!(true)));
    let (status, _, again) = post(&server, "/v1/release", lease).await;
    assert_eq!(status, 404);
    assert!(
        again["error"].as_str().unwrap().contains("not held"),
        "{again}"
    );
    let (status, _, third) = post(&server, "/v1/acquire", tenant("a")).await;
    assert_eq!(status, 200);

    // The holders of `second` and `third` die without releasing: their
    // slots come back when their leases expire, not before.
    server.clock.advance(Duration::from_millis(7_499));
    let (status, _, _) = post(&server, "/v1/acquire", tenant("a")).await;
    assert_eq!(status, 429, "`second` holds its slot until 10 s");
    server.clock.advance(Duration::from_millis(1));
    let (status, _, fourth) = post(&server, "/v1/acquire", tenant("a")).await;
    assert_eq!(status, 200, "{fourth}");
    assert_eq!(fourth["in_flight"], 2, "`third` still holds one");
    // An expired lease is not held any more.
    let (status, _, _) = post(&server, "/v1/release", json!({"lease": second["lease"]})).await;
    assert_eq!(status, 404);
    server.clock.advance(Duration::from_secs(20));
    let (status, _, _) = post(&server, "/v1/release", json!({"lease": third["lease"]})).await;
    assert_eq!(status, 404);
    server.stop().await;
}

#[tokio::test]
async fn acquire_refuses_what_it_cannot_grant_with_clear_answers() {
    let server = start(RULES).await;
    // A descriptor with no concurrency rule (a rate limit only, or none).
    for entries in [
        json!([{"key": "user", "value": "u"}]),
        json!([{"key": "nobody", "value": "x"}]),
    ] {
        let (status, _, body) = post(
            &server,
            "/v1/acquire",
            json!({"domain": "api", "entries": entries}),
        )
        .await;
        assert_eq!(status, 404, "{body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("no concurrency rule")
        );
    }
    // A cost above the limit can never be granted: 429, no Retry-After.
    let mut body = tenant("a");
    body["cost"] = json!(3);
    let (status, retry_after, refused) = post(&server, "/v1/acquire", body).await;
    assert_eq!((status, retry_after), (429, None), "{refused}");
    assert_eq!(refused["retry_after_ms"], Value::Null);
    // Bad bodies are 400, an unknown lease 404.
    for bad in [
        json!({"domain": "api"}),
        json!({"domain": "api", "entries": []}),
        json!({"domain": "api", "entries": [{"key": "tenant"}], "cost": 0}),
        json!({"domain": "api", "entries": [{"key": "tenant"}], "extra": 1}),
    ] {
        let (status, _, body) = post(&server, "/v1/acquire", bad.clone()).await;
        assert_eq!(status, 400, "{bad} → {body}");
    }
    let (status, _, _) = post(&server, "/v1/release", json!({})).await;
    assert_eq!(status, 400);
    for forged in ["", "m0123", "r.61.62.x.1", "o"] {
        let (status, _, _) = post(&server, "/v1/release", json!({"lease": forged})).await;
        assert_eq!(status, 404, "{forged}");
    }
    server.stop().await;
}

#[tokio::test]
async fn the_rls_answers_over_limit_when_no_slot_is_free_until_the_ttl_passes() {
    let server = start(RULES).await;
    let mut client = server.grpc_client().await;
    // `report` has one slot and a 30 s TTL (the default): Envoy never
    // releases, so the slot is taken until the lease expires.
    assert_eq!(rls(&mut client, "report", "r1").await, Code::Ok);
    assert_eq!(rls(&mut client, "report", "r1").await, Code::OverLimit);
    // The same slots as the HTTP API's.
    let (status, _, _) = post(
        &server,
        "/v1/acquire",
        json!({"domain": "api", "entries": [{"key": "report", "value": "r1"}]}),
    )
    .await;
    assert_eq!(status, 429);
    server.clock.advance(Duration::from_secs(30));
    assert_eq!(rls(&mut client, "report", "r1").await, Code::Ok);
    // A concurrency-only rule over RLS, and the HTTP check API too.
    for _ in 0..2 {
        assert_eq!(rls(&mut client, "tenant", "t").await, Code::Ok);
    }
    let (status, _, body) = post(
        &server,
        "/v1/check",
        json!({"domain": "api", "descriptors": [{"entries": [{"key": "tenant", "value": "t"}]}]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["overall_code"], "OVER_LIMIT", "{body}");
    assert!(
        body["statuses"][0]["refused"]
            .as_str()
            .unwrap()
            .contains("concurrency limit reached"),
        "{body}"
    );
    // A dry run takes no slot.
    let (_, _, body) = post(
        &server,
        "/v1/check",
        json!({"domain": "api", "descriptors": [{"entries": [{"key": "tenant", "value": "u"}]}], "dry_run": true}),
    )
    .await;
    assert_eq!(body["overall_code"], "OK");
    let (status, _, _) = post(&server, "/v1/acquire", tenant("u")).await;
    assert_eq!(status, 200);
    server.stop().await;
}

/// The RLS answer for one descriptor of `key` = `value`.
async fn rls_status(client: &mut RlsClient, key: &str, value: &str) -> DescriptorStatus {
    within(client.should_rate_limit(request("api", vec![descriptor(&[(key, value)])])))
        .await
        .expect("grpc")
        .into_inner()
        .statuses
        .remove(0)
}

/// Regression: an allowed call on a concurrency-only rule answered
/// `limit_remaining` 4294967295 and no `current_limit` (Envoy shows it as
/// unlimited); it reports the slots left and the concurrency limit, over
/// the RLS and `/v1/check`. Failed before the fix.
#[tokio::test]
async fn a_concurrency_only_rule_reports_its_slots_left_and_its_limit() {
    let server = start(RULES).await;
    let mut client = server.grpc_client().await;
    let first = rls_status(&mut client, "tenant", "s").await;
    assert_eq!(first.code, Code::Ok as i32);
    assert_eq!(first.limit_remaining, 1, "{first:?}");
    let limit = first.current_limit.as_ref().expect("current_limit");
    assert_eq!(limit.requests_per_unit, 2);
    assert_eq!(limit.unit, 0, "no unit: the slots are not a rate");
    assert_eq!(
        first.duration_until_reset.map(|d| d.seconds),
        Some(10),
        "free again after at most the lease TTL"
    );
    let (status, _, body) = post(
        &server,
        "/v1/check",
        json!({"domain": "api", "descriptors": [{"entries": [{"key": "tenant", "value": "s"}]}]}),
    )
    .await;
    assert_eq!(status, 200);
    let answer = &body["statuses"][0];
    assert_eq!(answer["remaining"], 0, "{body}");
    assert_eq!(answer["unlimited"], false, "{body}");
    assert_eq!(answer["limit"]["algorithm"], "concurrency", "{body}");
    assert_eq!(answer["limit"]["capacity"], 2, "{body}");
    server.stop().await;
}

/// On Redis the leases run on Redis's own clock (`TIME`), not the test's:
/// a short TTL, whose expiry is awaited by polling (bounded by
/// [`TIMEOUT`]), never asserted against a duration.
const REDIS_RULES: &str = "
domain: api
descriptors:
  - key: tenant
    concurrency: {limit: 2, lease_ttl: 30s}
  - key: job
    concurrency: {limit: 1, lease_ttl: 3s}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_two_servers_share_the_slots_and_either_releases_a_lease() {
    let redis = tollgate_testkit::RedisServer::start();
    let rules = format!("{}{REDIS_RULES}", redis.backend(crate::support::PATIENT));
    let a = start_with("", &rules).await;
    let b = start_with("", &rules).await;

    let (status, _, first) = post(&a, "/v1/acquire", tenant("x")).await;
    assert_eq!(status, 200, "{first}");
    assert!(
        first["lease"].as_str().unwrap().starts_with("r."),
        "{first}"
    );
    assert_eq!(post(&b, "/v1/acquire", tenant("x")).await.0, 200);
    // The RLS reports the slots Redis counts.
    let mut client = a.grpc_client().await;
    let slot = rls_status(&mut client, "tenant", "y").await;
    assert_eq!(slot.limit_remaining, 1, "{slot:?}");
    assert_eq!(slot.current_limit.map(|l| l.requests_per_unit), Some(2));
    let (status, retry_after, full) = post(&a, "/v1/acquire", tenant("x")).await;
    assert_eq!(status, 429, "{full}");
    assert!(retry_after.is_some());
    assert_eq!(full["in_flight"], 2);
    // A lease taken on `a` is released through `b`; twice is a 404.
    let lease = json!({"lease": first["lease"]});
    assert_eq!(post(&b, "/v1/release", lease.clone()).await.0, 200);
    assert_eq!(post(&a, "/v1/release", lease).await.0, 404);
    assert_eq!(post(&a, "/v1/acquire", tenant("x")).await.0, 200);
    // Forged ids are unknown, never an error.
    for forged in ["r.zz", "r.6170692e74656e616e74.7a.nope.1", "r...."] {
        assert_eq!(
            post(&a, "/v1/release", json!({"lease": forged})).await.0,
            404
        );
    }

    // A holder that dies: its slot comes back when the lease expires.
    let job = json!({"domain": "api", "entries": [{"key": "job", "value": "j"}]});
    let (status, _, dead) = post(&a, "/v1/acquire", job.clone()).await;
    assert_eq!(status, 200, "{dead}");
    assert_eq!(dead["ttl_ms"], 3_000);
    let (status, _, _) = post(&b, "/v1/acquire", job.clone()).await;
    assert_eq!(status, 429, "the slot is held (for the lease's 3 s)");
    within(async {
        while post(&b, "/v1/acquire", job.clone()).await.0 != 200 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    let (status, _, _) = post(&a, "/v1/release", json!({"lease": dead["lease"]})).await;
    assert_eq!(status, 404, "an expired lease is not held");
    a.stop().await;
    b.stop().await;
}
