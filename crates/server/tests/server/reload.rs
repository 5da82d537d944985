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
    within(
        http_client()
            .post(server.url("/v1/check"))
            .json(&json!({"domain": "rl", "descriptors": [{"entries": [{"key": key, "value": value}]}]}))
            .send(),
    )
    .await
    .expect("http")
    .json()
    .await
    .expect("json")
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

    // Fixed: back to good; an algorithm change starts the bucket afresh.
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
