//! Hot reload: good and bad files, state across a change, and under traffic.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_server::reload::Reloaded;

use crate::support::*;

const V1: &str = "
domain: rl
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
";

const V2: &str = "
domain: rl
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: team
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
";

const BAD: &str = "
domain: rl
descriptors:
  - key: user
    rate_limit: {unit: fortnight, requests_per_unit: 5}
";

async fn check(server: &TestServer, key: &str, value: &str) -> Value {
    let body =
        json!({"domain": "rl", "descriptors": [{"entries": [{"key": key, "value": value}]}]});
    check_json(server, None, &body).await
}

#[tokio::test]
async fn good_and_bad_files_and_state_across_a_change() {
    let server = start(V1).await;
    for _ in 0..3 {
        check(&server, "user", "alice").await;
    }
    assert_eq!(
        check(&server, "user", "alice").await["statuses"][0]["remaining"],
        6
    );
    assert_eq!(server.reloader.reload(), Ok(Reloaded::Unchanged));

    // A new limit of 5: the 4 permits taken stay taken (Carry::Keep).
    server.write_config("  reload_interval_ms: 0\n", V2);
    assert_eq!(server.reloader.reload(), Ok(Reloaded::Applied { rules: 2 }));
    let alice = check(&server, "user", "alice").await;
    assert_eq!(alice["statuses"][0]["remaining"], 0);
    assert_eq!(alice["statuses"][0]["limit"]["requests_per_unit"], 5);
    assert_eq!(
        check(&server, "user", "alice").await["overall_code"],
        "OVER_LIMIT"
    );
    assert_eq!(
        check(&server, "team", "t").await["statuses"][0]["rule"],
        "rl.team"
    );

    // A bad file: the error names file, line and field; V2 keeps running.
    server.write_config("  reload_interval_ms: 0\n", BAD);
    let error = server.reloader.reload().expect_err("bad file");
    assert!(error.to_string().contains("rules.yaml:"), "{error}");
    assert!(error.line().is_some(), "{error}");
    assert!(error.message().contains("unit"), "{error}");
    assert_eq!(
        check(&server, "team", "t").await["overall_code"],
        "OVER_LIMIT"
    );
    let text = server.metrics().await;
    assert_eq!(metric(&text, "tollgate_config_last_load_ok"), 0.0);
    assert_eq!(
        metric(&text, "tollgate_config_loads_total{result=\"error\"}"),
        1.0
    );
    // Reported once, not at every poll.
    assert_eq!(server.reloader.reload(), Ok(Reloaded::Unchanged));

    // Fixed: back to good. An algorithm change is bridged: what alice took
    // still counts under the old limits until her old state is fresh (it
    // started the bucket afresh before the fix), then the new
    // limits alone decide.
    server.write_config(
        "  reload_interval_ms: 0\n",
        "
domain: rl
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_log}
",
    );
    assert_eq!(server.reloader.reload(), Ok(Reloaded::Applied { rules: 1 }));
    assert_eq!(
        check(&server, "user", "alice").await["overall_code"],
        "OVER_LIMIT"
    );
    server.clock.advance(Duration::from_secs(60));
    assert_eq!(
        check(&server, "user", "alice").await["statuses"][0]["remaining"],
        4
    );
    assert_eq!(
        check(&server, "team", "t").await["statuses"][0]["rule"],
        Value::Null
    );
    let text = server.metrics().await;
    assert_eq!(metric(&text, "tollgate_config_last_load_ok"), 1.0);
    server.stop().await;
}

#[tokio::test]
async fn reload_by_polling_under_traffic() {
    let server = start_with("  reload_interval_ms: 20\n", V1).await;
    let answered = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);

    let mut traffic = Vec::new();
    for worker in 0..2 {
        let (http_answered, http_failures, stop) =
            (answered.clone(), failures.clone(), stop_rx.clone());
        let url = server.url("/v1/check");
        traffic.push(tokio::spawn(async move {
            let client = http_client();
            let mut i = 0u64;
            while !*stop.borrow() {
                i += 1;
                let body = json!({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": format!("h{worker}-{}", i % 50)}]}]});
                match client.post(&url).json(&body).send().await {
                    Ok(response) if response.status() == 200 => {
                        http_answered.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        http_failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
        let (answered, failures, stop) = (answered.clone(), failures.clone(), stop_rx.clone());
        let mut client = server.grpc_client().await;
        traffic.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !*stop.borrow() {
                i += 1;
                let value = format!("g{worker}-{}", i % 50);
                let req = request("rl", vec![descriptor(&[("user", value.as_str())])]);
                match client.should_rate_limit(req).await {
                    Ok(response) if response.get_ref().overall_code() != Code::Unknown => {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }

    let wait_for = |what: &'static str, done: fn(&str, &Value) -> bool| {
        let server = &server;
        async move {
            within(async {
                loop {
                    let rules: Value = http_client()
                        .get(server.url("/v1/rules"))
                        .send()
                        .await
                        .expect("rules")
                        .json()
                        .await
                        .expect("json");
                    if done(&server.metrics().await, &rules) {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await;
            let _ = what;
        }
    };

    server.write_config("  reload_interval_ms: 20\n", V2);
    wait_for("the new rules", |_, rules| {
        rules["rules"].as_array().map(Vec::len) == Some(2)
    })
    .await;
    server.write_config("  reload_interval_ms: 20\n", BAD);
    wait_for("the bad file", |text, _| {
        metric(text, "tollgate_config_loads_total{result=\"error\"}") >= 1.0
    })
    .await;
    // Still V2.
    assert_eq!(
        check(&server, "team", "t").await["statuses"][0]["rule"],
        "rl.team"
    );
    server.write_config("  reload_interval_ms: 20\n", V1);
    wait_for("the fixed file", |text, rules| {
        metric(text, "tollgate_config_last_load_ok") == 1.0
            && rules["rules"].as_array().map(Vec::len) == Some(1)
    })
    .await;

    let _ = stop_tx.send(true);
    for task in traffic {
        within(task).await.expect("traffic task");
    }
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "every request answered"
    );
    assert!(answered.load(Ordering::Relaxed) > 0);
    server.stop().await;
}

/// The remaining permits of `user`/`value`, and the rule that decided it.
async fn remaining(server: &TestServer, value: &str) -> (Value, Value) {
    let answer = check(server, "user", value).await;
    (
        answer["statuses"][0]["remaining"].clone(),
        answer["statuses"][0]["rule"].clone(),
    )
}

/// Regression: truncating the file reloaded it as "no
/// rules" (every request OK, `/v1/rules` empty, `last_load_ok` still 1),
/// and when the file came back the counts restarted.
#[tokio::test]
async fn truncate_then_restore_keeps_the_rules_and_the_counts() {
    let server = start(V1).await;
    let original = std::fs::read(&server.path).expect("read");
    for _ in 0..4 {
        check(&server, "user", "alice").await;
    }
    assert_eq!(remaining(&server, "alice").await.0, 5);

    std::fs::write(&server.path, "").expect("truncate");
    let error = server.reloader.reload().expect_err("an empty file");
    assert!(error.message().contains("empty"), "{error}");
    let text = server.metrics().await;
    assert_eq!(metric(&text, "tollgate_config_last_load_ok"), 0.0);
    // Still limited, same counts.
    assert_eq!(
        remaining(&server, "alice").await,
        (json!(4), json!("rl.user"))
    );
    let rules: Value = within(http_client().get(server.url("/v1/rules")).send())
        .await
        .expect("rules")
        .json()
        .await
        .expect("json");
    assert_eq!(rules["rules"].as_array().map(Vec::len), Some(1));

    std::fs::write(&server.path, &original).expect("restore");
    server.reloader.reload().expect("the file is back");
    assert_eq!(
        metric(&server.metrics().await, "tollgate_config_last_load_ok"),
        1.0
    );
    // The counts went on: 3 left, not a fresh 9.
    assert_eq!(
        remaining(&server, "alice").await,
        (json!(3), json!("rl.user"))
    );
    server.stop().await;
}

/// Regression: files that name no domain loaded as "no
/// rules". Each is refused, the old rules stay, `last_load_ok` drops to 0.
#[tokio::test]
async fn files_without_a_domain_are_refused() {
    let server = start(V1).await;
    for text in [
        "",
        "\n\n   \n",
        "# only a comment\n",
        "server:\n  reload_interval_ms: 0\n",
        "domains: []\n",
        "---\n",
    ] {
        std::fs::write(&server.path, text).expect("write");
        let error = server.reloader.reload().expect_err(text);
        assert!(
            error.message().contains("empty") || error.message().contains("domain"),
            "{text:?}: {error}"
        );
        assert_eq!(
            metric(&server.metrics().await, "tollgate_config_last_load_ok"),
            0.0,
            "{text:?}"
        );
        assert_eq!(
            remaining(&server, "bob").await.1,
            json!("rl.user"),
            "{text:?}"
        );
    }
    server.stop().await;
}

/// Regression: a file rewritten in place, slowly (the
/// way `>` in a shell or a plain `write` does it: truncate, then the bytes
/// in chunks), was loaded half-written: a prefix that parses but lacks
/// the limits answered "no limit". The watcher loads only bytes that
/// stayed the same across two polls, so each state below is refused or
/// held; the new file goes live once it is still.
#[tokio::test]
async fn slow_rewrite_in_place_is_never_loaded_half_written() {
    use std::io::Write as _;

    let server = start(V1).await;
    for _ in 0..2 {
        check(&server, "user", "alice").await;
    }
    let head = "server:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\n  reload_interval_ms: 0\n\ndomain: rl\ndescriptors:\n";
    let new = format!(
        "{head}  - key: user\n    rate_limit: {{unit: minute, requests_per_unit: 10}}\n  - key: team\n    rate_limit: {{unit: minute, requests_per_unit: 1}}\n"
    );
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&server.path)
        .expect("open");
    let mut written = 0;
    // Every state the reader may see: empty, then each chunk boundary.
    for end in [
        0,
        20,
        head.len() - 12,
        head.len(),
        head.len() + 16,
        new.len(),
    ] {
        file.write_all(&new.as_bytes()[written..end])
            .expect("write");
        file.flush().expect("flush");
        written = end;
        let _ = server.reloader.poll();
        let (left, rule) = remaining(&server, "alice").await;
        assert_eq!(rule, json!("rl.user"), "after {end} bytes");
        assert!(left.as_u64().is_some(), "after {end} bytes: {left}");
    }
    drop(file);
    // Still for one poll: now it loads, counts kept (10 - 2 - 6 probes - 1).
    assert_eq!(server.reloader.poll(), Ok(Reloaded::Applied { rules: 2 }));
    assert_eq!(
        remaining(&server, "alice").await,
        (json!(1), json!("rl.user"))
    );
    assert_eq!(
        check(&server, "team", "t").await["statuses"][0]["rule"],
        "rl.team"
    );
    assert_eq!(server.reloader.poll(), Ok(Reloaded::Unchanged));
    server.stop().await;
}

/// A rule removed by a reload and restored by the next resumes its counts
/// ("when the file comes back the counts restart").
#[tokio::test]
async fn a_rule_removed_then_restored_resumes_its_counts() {
    let server = start(V1).await;
    for _ in 0..4 {
        check(&server, "user", "alice").await;
    }
    server.write_config(
        "  reload_interval_ms: 0\n",
        "domain: rl\ndescriptors:\n  - key: team\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
    );
    assert_eq!(server.reloader.reload(), Ok(Reloaded::Applied { rules: 1 }));
    assert_eq!(remaining(&server, "alice").await.1, Value::Null);
    server.write_config("  reload_interval_ms: 0\n", V1);
    assert_eq!(server.reloader.reload(), Ok(Reloaded::Applied { rules: 1 }));
    assert_eq!(
        remaining(&server, "alice").await,
        (json!(5), json!("rl.user"))
    );
    server.stop().await;
}
