//! A changed limit on the Redis backend carries each key's state (
//! "live limits on every backend"): a reload or an admin `PUT` that only
//! changes a number never hands out a fresh quota, and a deny-listed key
//! stays denied. Against a real `redis-server` started by the test.
//!
//! Redis decides on its own clock (`TIME`), so the limits here are a day
//! long and nothing refills while the test runs (a fixed window is
//! aligned on UTC midnight: a run across it would see the window turn).

#[allow(dead_code)]
use crate::support;

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use support::{
    BackendSection, RedisServer, TestServer, check_json, http_client, start_with, within,
};

const TOKEN: &str = "sesame";
const ADMIN: &str = "  bearer_token: sesame\nadmin:\n  enabled: true\n";
/// Fail closed with a long deadline: a slow machine never turns a Redis
/// decision into a policy one here, and a fault can only deny.
const BACKEND: &str = "  failure_policy: fail_closed\n  deadline: 5s\n";

/// The rules with `n` per unit for every limit.
fn rules(gcra: u64, window: u64, sliding: u64) -> String {
    format!(
        "
domain: rl
descriptors:
  - key: user
    rate_limit: {{unit: day, requests_per_unit: {gcra}}}
  - key: team
    rate_limit: {{unit: day, requests_per_unit: {window}, algorithm: fixed_window}}
  - key: org
    rate_limit: {{unit: day, requests_per_unit: {sliding}, algorithm: sliding_window}}
  - key: pair
    rate_limits:
      - {{unit: day, requests_per_unit: {gcra}}}
      - {{period: 2d, requests_per_unit: {window}}}
"
    )
}

/// One `/v1/check` of `key=value`: whether it was admitted, and the
/// remaining it reports.
async fn take(server: &TestServer, key: &str, value: &str) -> (bool, u64) {
    let body =
        json!({"domain": "rl", "descriptors": [{"entries": [{"key": key, "value": value}]}]});
    let answer = check_json(server, Some(TOKEN), &body).await;
    (
        answer["overall_code"] == "OK",
        answer["statuses"][0]["remaining"]
            .as_u64()
            .expect("remaining"),
    )
}

async fn admin(
    server: &TestServer,
    method: Method,
    path: &str,
    body: Value,
) -> (StatusCode, Value) {
    let response = within(
        http_client()
            .request(method, server.url(path))
            .bearer_auth(TOKEN)
            .json(&body)
            .send(),
    )
    .await
    .expect("admin");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Takes `n` permits of `key=value`, each admitted.
async fn take_n(server: &TestServer, key: &str, value: &str, n: u64) {
    for i in 0..n {
        let (admitted, remaining) = take(server, key, value).await;
        assert!(admitted, "{key}={value} #{i}: remaining {remaining}");
    }
}

/// The bug: a reload that raised 5 to 8 gave every key a fresh 8. Now the
/// 4 permits taken stay taken, as in memory (`Carry::Keep`), for GCRA, a
/// fixed window and a rule with two limits.
#[tokio::test]
async fn a_reload_on_redis_carries_the_permits_taken() {
    let redis = RedisServer::start();
    let backend = redis.backend(BACKEND);
    let server = start_with(ADMIN, &format!("{backend}{}", rules(5, 5, 5))).await;
    for key in ["user", "team", "pair"] {
        take_n(&server, key, "alice", 4).await;
    }

    server.write_config(ADMIN, &format!("{backend}{}", rules(8, 8, 8)));
    server.reloader.reload().expect("reload");
    for key in ["user", "team", "pair"] {
        // 8 - 4 taken before - this one.
        assert_eq!(
            take(&server, key, "alice").await,
            (true, 3),
            "{key}: the permits taken before the reload stay taken"
        );
        take_n(&server, key, "alice", 3).await;
        assert!(!take(&server, key, "alice").await.0, "{key}: spent");
        // A key untouched before the change starts full under the new limit.
        assert_eq!(take(&server, key, "bob").await, (true, 7), "{key}");
    }

    // Lowered below what was taken: spent, never a fresh quota.
    take_n(&server, "user", "carol", 3).await;
    server.write_config(ADMIN, &format!("{backend}{}", rules(2, 2, 2)));
    server.reloader.reload().expect("reload");
    assert!(
        !take(&server, "user", "carol").await.0,
        "3 taken of a new 2"
    );
    assert!(!take(&server, "user", "alice").await.0);
    server.stop().await;
}

/// The same through the admin API's `PUT /v1/admin/limits`.
#[tokio::test]
async fn an_admin_limit_change_on_redis_carries_the_permits_taken() {
    let redis = RedisServer::start();
    let backend = redis.backend(BACKEND);
    let server = start_with(ADMIN, &format!("{backend}{}", rules(5, 5, 5))).await;
    take_n(&server, "user", "alice", 4).await;
    take_n(&server, "team", "alice", 4).await;

    for (rule, limit) in [
        ("rl.user", json!({"requests_per_unit": 8, "unit": "day"})),
        (
            "rl.team",
            json!({"requests_per_unit": 8, "unit": "day", "algorithm": "fixed_window"}),
        ),
    ] {
        let (status, answer) = admin(
            &server,
            Method::PUT,
            "/v1/admin/limits",
            json!({"rule": rule, "limits": [limit]}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
    }
    for key in ["user", "team"] {
        assert_eq!(take(&server, key, "alice").await, (true, 3), "{key}");
    }
    server.stop().await;
}

/// A changed sliding window on Redis carries its count (`Carry::Keep`, as
/// in memory): the 5 taken stay taken under the new 8, never a fresh quota.
#[tokio::test]
async fn a_changed_sliding_window_on_redis_never_hands_out_a_fresh_quota() {
    let redis = RedisServer::start();
    let backend = redis.backend(BACKEND);
    let server = start_with(ADMIN, &format!("{backend}{}", rules(5, 5, 5))).await;
    take_n(&server, "org", "alice", 5).await;
    assert!(!take(&server, "org", "alice").await.0);

    server.write_config(ADMIN, &format!("{backend}{}", rules(5, 5, 8)));
    server.reloader.reload().expect("reload");
    take_n(&server, "org", "alice", 3).await;
    assert!(
        !take(&server, "org", "alice").await.0,
        "5 taken under the old limit stay taken: 8 in all"
    );
    take_n(&server, "org", "bob", 8).await;
    assert!(!take(&server, "org", "bob").await.0, "a fresh key: 8");
    server.stop().await;
}

/// A deny-listed key stays denied when its rule's limits change, on a
/// reload and on an admin change, even when no request meets it while the
/// old keys could be carried (and the allow list likewise stays).
#[tokio::test]
async fn a_deny_listed_key_stays_denied_across_a_limit_change_on_redis() {
    let redis = RedisServer::start();
    let backend = redis.backend(BACKEND);
    let short = |n: u64| {
        format!(
            "{backend}
domain: rl
descriptors:
  - key: user
    rate_limit: {{period: 100ms, requests_per_unit: {n}}}
  - key: team
    rate_limit: {{period: 100ms, requests_per_unit: {n}, algorithm: sliding_window}}
"
        )
    };
    let server = start_with(ADMIN, &short(1)).await;
    for key in ["user", "team"] {
        let body = json!({"domain": "rl", "descriptor": [{"key": key, "value": "mallory"}]});
        let (status, answer) = admin(&server, Method::POST, "/v1/admin/lists/deny", body).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let body = json!({"domain": "rl", "descriptor": [{"key": key, "value": "vip"}]});
        let (status, answer) = admin(&server, Method::POST, "/v1/admin/lists/allow", body).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert!(!take(&server, key, "mallory").await.0);
    }

    server.write_config(ADMIN, &short(2));
    server.reloader.reload().expect("reload");
    // Past the old limits' horizon (100 ms plus the TTL slack): no lazy
    // carry can move the marker any more.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (status, answer) = admin(
        &server,
        Method::PUT,
        "/v1/admin/limits",
        json!({"rule": "rl.user", "limits": [{"requests_per_unit": 3, "period": "100ms"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    for key in ["user", "team"] {
        for _ in 0..5 {
            assert!(
                !take(&server, key, "mallory").await.0,
                "{key}: mallory stays denied"
            );
            assert!(
                take(&server, key, "vip").await.0,
                "{key}: vip stays allowed"
            );
        }
        // Unlisting still works on the new limits.
        let body = json!({"domain": "rl", "descriptor": [{"key": key, "value": "mallory"}]});
        let (status, _) = admin(&server, Method::DELETE, "/v1/admin/lists/deny", body).await;
        assert_eq!(status, StatusCode::OK);
        assert!(take(&server, key, "mallory").await.0, "{key}: unlisted");
    }
    server.stop().await;
}

/// A changed calendar window on Redis carries its count (`Carry::Keep`,
/// as in memory): what was taken this month stays taken under the new
/// number, never a fresh month.
#[tokio::test]
async fn a_changed_calendar_window_on_redis_never_hands_out_a_fresh_quota() {
    let redis = RedisServer::start();
    let backend = redis.backend(BACKEND);
    let monthly = |n: u64| {
        format!(
            "{backend}
domain: rl
descriptors:
  - key: user
    rate_limits:
      - {{unit: second, requests_per_unit: 100}}
      - {{calendar: month, requests_per_unit: {n}}}
"
        )
    };
    let server = start_with(ADMIN, &monthly(3)).await;
    take_n(&server, "user", "alice", 3).await;
    server.write_config(ADMIN, &monthly(5));
    server.reloader.reload().expect("reload");
    assert!(take(&server, "user", "alice").await.0, "4th of 5");
    assert!(take(&server, "user", "alice").await.0, "5th of 5");
    assert!(
        !take(&server, "user", "alice").await.0,
        "3 taken this month under the old 3 stay taken: 5 in all"
    );
    for n in 1..=5 {
        assert!(
            take(&server, "user", "bob").await.0,
            "a fresh key: {n} of 5"
        );
    }
    server.stop().await;
}

/// A bridge ends: once the previous limits' longest period (plus the
/// slack) has passed, the sweep replaces the bridge by a limiter of the
/// new limits alone, and the raised limit is in force.
#[tokio::test]
async fn a_bridge_ends_after_one_old_period() {
    let redis = RedisServer::start();
    let backend = redis.backend(BACKEND);
    // A change of algorithm is bridged (a limit of one algorithm is
    // carried): a sliding window becomes a fixed window.
    let rules = |n: u64| {
        let algorithm = if n == 1 {
            "sliding_window"
        } else {
            "fixed_window"
        };
        format!(
            "{backend}
domain: rl
descriptors:
  - key: org
    rate_limit: {{period: 100ms, requests_per_unit: {n}, algorithm: {algorithm}}}
"
        )
    };
    let config =
        tollgate_server::Config::from_yaml("rules.yaml".as_ref(), &rules(1)).expect("valid");
    let tollgate_server::config::BackendSettings::Redis(settings) = &config.backend else {
        panic!("a Redis backend");
    };
    let redis_backend = Arc::new(
        tollgate_server::RedisBackend::connect(settings)
            .await
            .expect("connect"),
    );
    let server = support::start_on(
        Some(Arc::clone(&redis_backend) as Arc<dyn tollgate_server::Backend>),
        ADMIN,
        &rules(1),
    )
    .await;
    let limits = || {
        redis_backend
            .limiter("rl.org")
            .expect("installed")
            .limits()
            .len()
    };
    assert_eq!(limits(), 1);
    server.write_config(ADMIN, &rules(5));
    server.reloader.reload().expect("reload");
    assert_eq!(limits(), 2, "the bridge holds the old limit and the new");
    tollgate_server::Backend::sweep(&*redis_backend);
    assert_eq!(limits(), 2, "not before the old period and the slack");
    // 100 ms + 1 s of slack, and some margin: a wait, not a bound asserted.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    tollgate_server::Backend::sweep(&*redis_backend);
    assert_eq!(limits(), 1, "the new limit alone");
    // (Admitted under the new 5: no count is asserted on a 100 ms window
    // that real time moves.)
    take_n(&server, "org", "alice", 5).await;
    server.stop().await;
}

/// In memory too: a deny-listed key stays denied (and an allow-listed one
/// allowed) when its rule's limits change, by a reload that keeps the
/// algorithm, one that changes it, and an admin change.
#[tokio::test]
async fn a_deny_listed_key_stays_denied_across_a_limit_change_in_memory() {
    let rules = |n: u64, algorithm: &str| {
        format!(
            "
domain: rl
descriptors:
  - key: user
    rate_limit: {{unit: minute, requests_per_unit: {n}, algorithm: {algorithm}}}
"
        )
    };
    let server = start_with(ADMIN, &rules(1, "gcra")).await;
    for (list, value) in [("deny", "mallory"), ("allow", "vip")] {
        let body = json!({"domain": "rl", "descriptor": [{"key": "user", "value": value}]});
        let path = format!("/v1/admin/lists/{list}");
        let (status, answer) = admin(&server, Method::POST, &path, body).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
    }
    let listed = |step: &'static str| {
        let server = &server;
        async move {
            for _ in 0..3 {
                assert!(
                    !take(server, "user", "mallory").await.0,
                    "{step}: mallory denied"
                );
                assert!(take(server, "user", "vip").await.0, "{step}: vip allowed");
            }
        }
    };
    listed("listed").await;
    for (step, n, algorithm) in [
        ("same algorithm", 2, "gcra"),
        ("new algorithm", 2, "fixed_window"),
        ("back again", 3, "sliding_window"),
    ] {
        server.write_config(ADMIN, &rules(n, algorithm));
        server.reloader.reload().expect("reload");
        listed(step).await;
    }
    let (status, answer) = admin(
        &server,
        Method::PUT,
        "/v1/admin/limits",
        json!({"rule": "rl.user", "limits": [{"requests_per_unit": 4, "unit": "minute", "algorithm": "gcra"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    listed("admin change").await;
    server.stop().await;
}

/// In memory, a change of a rule's algorithm never hands out a fresh
/// quota: the old limiter stays beside the new one (a bridge) until its
/// states are fresh, as the Redis backend's bridge does. Before, the
/// buckets started afresh: a spent key got the new limit's whole quota.
#[tokio::test]
async fn a_changed_algorithm_in_memory_never_hands_out_a_fresh_quota() {
    // On the test server's manual clock: time moves only when told.
    let rules = |algorithm: &str, n: u64| {
        format!(
            "
domain: rl
descriptors:
  - key: user
    rate_limit: {{period: 3s, requests_per_unit: {n}, algorithm: {algorithm}}}
"
        )
    };
    let server = start_with(ADMIN, &rules("gcra", 3)).await;
    for _ in 0..3 {
        assert!(take(&server, "user", "alice").await.0);
    }
    assert!(!take(&server, "user", "alice").await.0);

    // Raised, and a new algorithm: what alice took still counts.
    server.write_config(ADMIN, &rules("fixed_window", 10));
    server.reloader.reload().expect("reload");
    assert!(
        !take(&server, "user", "alice").await.0,
        "a spent key has no fresh quota after a change of algorithm"
    );
    // A key the old limits never saw has the new ones at once.
    for _ in 0..10 {
        assert!(take(&server, "user", "bob").await.0, "bob, new limits");
    }
    assert!(!take(&server, "user", "bob").await.0);

    // Lowered, and another algorithm: both old limiters still count.
    server.write_config(ADMIN, &rules("sliding_window", 2));
    server.reloader.reload().expect("reload");
    assert!(
        !take(&server, "user", "bob").await.0,
        "bob: the fixed window's count holds"
    );
    assert!(
        !take(&server, "user", "alice").await.0,
        "alice: the GCRA's state holds"
    );

    // One old period later every old state is fresh: the new limits alone.
    server.clock.advance(Duration::from_millis(3_100));
    for key in ["alice", "bob"] {
        for _ in 0..2 {
            assert!(take(&server, "user", key).await.0, "{key}: new limits");
        }
        assert!(!take(&server, "user", key).await.0, "{key}: 2 per 3 s");
    }
    server.stop().await;
}
