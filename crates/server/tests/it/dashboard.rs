//! The Grafana dashboard (`dashboards/tollgate.json`) against a running
//! server: every metric a panel's PromQL names is one this server's
//! `/metrics` serves, so that a renamed metric cannot leave a panel empty.
//! (`.ci/release` checks that each query parses, with `promtool`.)

use std::collections::BTreeSet;

use serde_json::Value;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::support::*;

/// One rule to take near its limit and over it, one in shadow mode, on
/// Redis (the test adds a refused request), so that every family the
/// dashboard reads has counted.
const RULES: &str = "
domain: dash
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 4}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
";

/// The metric names of the dashboard's queries: every `tollgate_…` and
/// `ratelimit_…` identifier of every panel's targets.
fn dashboard_metrics() -> BTreeSet<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dashboards/tollgate.json"
    );
    let text = std::fs::read_to_string(path).expect("dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("dashboard JSON");
    let name = regex::Regex::new(r"\b(?:tollgate|ratelimit)_[a-zA-Z0-9_:]*").expect("regex");
    let mut names = BTreeSet::new();
    let mut exprs = 0;
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("expr");
            exprs += 1;
            names.extend(name.find_iter(expr).map(|m| m.as_str().to_owned()));
        }
    }
    assert!(exprs >= 10, "only {exprs} queries in {path}");
    names
}

/// The sample names a scrape can hold: those it holds, and the samples of
/// every family it declares (a counter's `_total`, a histogram's
/// `_bucket`, `_sum` and `_count`), counted or not yet.
fn served(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            let mut words = declared.split_whitespace();
            let (Some(family), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            names.insert(family.to_owned());
            match kind {
                "counter" => {
                    names.insert(format!("{family}_total"));
                }
                "histogram" => {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{family}{suffix}"));
                    }
                }
                _ => {}
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_owned());
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_metric_is_served() {
    let redis = RedisServer::start();
    let rules = format!("{}{RULES}", redis.backend(PATIENT));
    let server = start_with("", &rules).await;
    let mut client = server.grpc_client().await;
    let mut codes = Vec::new();
    for (key, value) in [("user", "ada"); 5].into_iter().chain([("shadow", "x"); 2]) {
        let answer =
            within(client.should_rate_limit(request("dash", vec![descriptor(&[(key, value)])])))
                .await
                .expect("grpc")
                .into_inner();
        codes.push(answer.overall_code());
    }
    // Four admitted (the fourth near the limit), the fifth over it; the
    // shadow rule's denial answered OK.
    assert_eq!(
        codes,
        [
            Code::Ok,
            Code::Ok,
            Code::Ok,
            Code::Ok,
            Code::OverLimit,
            Code::Ok,
            Code::Ok
        ]
    );
    // A request refused before any decision (its family is shown once it
    // has counted).
    let refused = within(
        http_client()
            .post(server.url("/v1/check"))
            .header("content-type", "application/json")
            .body("{")
            .send(),
    )
    .await
    .expect("http");
    assert_eq!(refused.status(), 400);
    let text = server.metrics().await;
    let served = served(&text);
    let missing: Vec<_> = dashboard_metrics()
        .into_iter()
        .filter(|name| !served.contains(name))
        .collect();
    assert!(missing.is_empty(), "not served: {missing:?}\n{text}");
    server.stop().await;
}
