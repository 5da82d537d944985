//! Calendar windows and limits of different algorithms in one rule
//!: a GCRA per second **and** a window per UTC calendar month,
//! end to end over HTTP and gRPC on the real server, in memory on a manual
//! clock (UNIX time from 1970-01-01, a Thursday) and on a real
//! `redis-server` (on Redis' own clock).

#[allow(dead_code)]
use crate::support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use support::{
    BackendSection, RedisServer, TestServer, descriptor, http_client, request, start_with, within,
};
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;

const RULES: &str = "
domain: rl
descriptors:
  - key: user
    rate_limits:
      - {unit: second, requests_per_unit: 2}
      - {calendar: month, requests_per_unit: 5}
  - key: lyft
    rate_limit: {unit: month, requests_per_unit: 1, algorithm: fixed_window}
  - key: daily
    rate_limit: {calendar: day, requests_per_unit: 1}
";

const DAY: Duration = Duration::from_secs(86_400);

async fn check(server: &TestServer, key: &str, value: &str) -> Value {
    within(
        http_client()
            .post(server.url("/v1/check"))
            .json(&json!({"domain": "rl", "descriptors": [{"entries": [{"key": key, "value": value}]}]}))
            .send(),
    )
    .await
    .expect("check")
    .json()
    .await
    .expect("json")
}

async fn grpc(server: &TestServer, key: &str, value: &str) -> Code {
    let mut client = server.grpc_client().await;
    within(client.should_rate_limit(request("rl", vec![descriptor(&[(key, value)])])))
        .await
        .expect("grpc")
        .into_inner()
        .overall_code()
}

fn ok(answer: &Value) -> bool {
    answer["overall_code"] == "OK"
}

#[tokio::test]
async fn a_gcra_per_second_and_a_calendar_month_in_memory() {
    let server = start_with("", RULES).await;
    let clock = &server.clock;

    // The second's limit binds first: 2, then denied, on both APIs.
    assert!(ok(&check(&server, "user", "alice").await));
    assert_eq!(grpc(&server, "user", "alice").await, Code::Ok);
    assert_eq!(grpc(&server, "user", "alice").await, Code::OverLimit);
    clock.advance(Duration::from_secs(1));
    assert!(ok(&check(&server, "user", "alice").await));
    assert_eq!(grpc(&server, "user", "alice").await, Code::Ok);
    clock.advance(Duration::from_secs(1));
    assert!(ok(&check(&server, "user", "alice").await));
    // 5 taken this month: the month's limit binds, until February 1st
    // 00:00 UTC (31 days from the epoch), whatever the second allows.
    clock.advance(Duration::from_secs(1));
    let denied = check(&server, "user", "alice").await;
    assert!(!ok(&denied), "{denied}");
    let status = &denied["statuses"][0];
    assert_eq!(status["limit"]["requests_per_unit"], 5, "{denied}");
    assert_eq!(
        status["retry_after_ms"],
        (31 * DAY - Duration::from_secs(3)).as_millis() as u64,
        "{denied}"
    );
    assert_eq!(grpc(&server, "user", "alice").await, Code::OverLimit);
    clock.advance(31 * DAY - Duration::from_secs(4));
    assert_eq!(grpc(&server, "user", "alice").await, Code::OverLimit);
    clock.advance(Duration::from_secs(1)); // February 1st 00:00:00
    assert_eq!(grpc(&server, "user", "alice").await, Code::Ok);

    // Lyft's `unit: month` keeps its meaning: 30 days from the epoch, not
    // the calendar (the window turns on January 31st, not February 1st).
    let lyft_server = start_with("", RULES).await;
    let clock = &lyft_server.clock;
    assert!(ok(&check(&lyft_server, "lyft", "bob").await));
    assert!(!ok(&check(&lyft_server, "lyft", "bob").await));
    clock.advance(30 * DAY);
    assert!(ok(&check(&lyft_server, "lyft", "bob").await));

    // A calendar day: one per UTC day, the day turning at midnight.
    clock.advance(DAY - Duration::from_secs(1)); // day 30, 23:59:59
    assert!(ok(&check(&lyft_server, "daily", "carol").await));
    assert!(!ok(&check(&lyft_server, "daily", "carol").await));
    clock.advance(Duration::from_secs(1));
    assert!(ok(&check(&lyft_server, "daily", "carol").await));

    // The rules as listed: each limit with its own algorithm.
    let rules: Value = within(http_client().get(server.url("/v1/rules")).send())
        .await
        .expect("rules")
        .json()
        .await
        .expect("json");
    let user = rules["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|rule| rule["rule"] == "rl.user")
        .expect("rl.user")
        .clone();
    assert_eq!(user["limits"].as_array().map(Vec::len), Some(2), "{user}");
    assert_eq!(user["limits"][0]["algorithm"], "gcra", "{user}");
    assert_eq!(user["limits"][1]["algorithm"], "calendar", "{user}");
    assert_eq!(user["limits"][1]["requests_per_unit"], 5, "{user}");
    server.stop().await;
    lyft_server.stop().await;
}

/// The time from now to the next 1st of a month, 00:00 UTC.
fn to_next_month() -> Duration {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    let days = now.as_secs() / 86_400;
    // H. Hinnant's civil_from_days, for the current year and month.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let length = match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    let next = (days as i64 - (day - 1) + length) as u64 * 86_400;
    Duration::from_secs(next) - now
}

#[tokio::test]
async fn a_gcra_per_second_and_a_calendar_month_on_redis() {
    let redis = RedisServer::start();
    let backend = redis.backend("  failure_policy: fail_closed\n  deadline: 5s\n");
    let rules = RULES.replace("requests_per_unit: 2}", "requests_per_unit: 100}");
    let server = start_with("", &format!("{backend}{rules}")).await;
    for i in 0..5 {
        if i % 2 == 0 {
            assert!(ok(&check(&server, "user", "alice").await), "#{i}");
        } else {
            assert_eq!(grpc(&server, "user", "alice").await, Code::Ok, "#{i}");
        }
    }
    let before = to_next_month();
    let denied = check(&server, "user", "alice").await;
    let after = to_next_month();
    assert!(!ok(&denied), "{denied}");
    assert_eq!(grpc(&server, "user", "alice").await, Code::OverLimit);
    // Denied until the 1st of next month, 00:00 UTC, on Redis' clock
    // (the same machine's): between the two readings, to the second.
    let retry = Duration::from_millis(
        denied["statuses"][0]["retry_after_ms"]
            .as_u64()
            .expect("retry"),
    );
    assert!(
        retry <= before + Duration::from_secs(1) && retry + Duration::from_secs(1) >= after,
        "{retry:?} not in [{after:?}, {before:?}]"
    );
    // One key per limit in Redis, the calendar window's among them.
    let keys = redis.keys("tollgate{rl.user|*");
    assert_eq!(keys.len(), 2, "{keys:?}");
    // Another key has its own month.
    assert!(ok(&check(&server, "user", "bob").await));
    server.stop().await;
}

/// What the file cannot hold is refused at its line, never accepted and
/// ignored.
#[test]
fn calendar_refusals_name_the_line() {
    for (limit, want) in [
        ("{calendar: fortnight, requests_per_unit: 1}", "calendar"),
        ("{calendar: second, requests_per_unit: 1}", "calendar"),
        ("{calendar: year, requests_per_unit: 1}", "calendar"),
        (
            "{calendar: month, unit: month, requests_per_unit: 1}",
            "unit",
        ),
        (
            "{calendar: month, period: 30d, requests_per_unit: 1}",
            "period",
        ),
        ("{calendar: day, burst: 3, requests_per_unit: 1}", "burst"),
        (
            "{calendar: day, algorithm: gcra, requests_per_unit: 1}",
            "algorithm",
        ),
        (
            "{algorithm: calendar, unit: day, requests_per_unit: 1}",
            "calendar",
        ),
        ("{calendar: day}", "requests_per_unit"),
    ] {
        let file = format!(
            "domain: rl\ndescriptors:\n  - key: a\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n  - key: b\n    rate_limits:\n      - {limit}\n"
        );
        let error =
            tollgate_server::Config::from_yaml("rules.yaml".as_ref(), &file).expect_err(limit);
        // The descriptor's line, and the path to the field.
        assert_eq!(error.line(), Some(5), "{limit}: {error}");
        assert!(
            error.message().contains("rate_limits[0]"),
            "{limit}: {error}"
        );
        assert!(error.message().contains(want), "{limit}: {error}");
    }
    // Accepted: the same algorithm stated, and a calendar rate_limit.
    for limit in [
        "{calendar: week, algorithm: calendar, requests_per_unit: 1}",
        "{calendar: MONTH, requests_per_unit: 1}",
    ] {
        let file = format!("domain: rl\ndescriptors:\n  - key: b\n    rate_limit: {limit}\n");
        tollgate_server::Config::from_yaml("rules.yaml".as_ref(), &file).expect(limit);
    }
}
