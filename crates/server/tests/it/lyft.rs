//! envoyproxy/ratelimit's README examples, replayed as data: each file
//! loads (or is refused at a named line, where this server gives the key
//! no meaning) and answers as that README says.

use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::support::*;

use crate::shared::lyft_examples;
use lyft_examples::{EXAMPLE_YAML, QUOTA_DESCRIPTORS, QUOTA_SCRIPT, SCRIPT, route};

/// One call: a descriptor's entries, and the codes expected.
type Call = (&'static [(&'static str, &'static str)], &'static [Code]);

/// One example: the file, then `(descriptor entries, expected codes in
/// order)` for calls made one after another.
struct Example {
    name: &'static str,
    file: &'static str,
    calls: &'static [Call],
}

/// Lyft's Example 3 (matching order, and `requests_per_unit: 0` as a block
/// list), Example 9 (trailing, middle and multiple wildcards) and a
/// `unit: week` limit.
const EXAMPLES: &[Example] = &[
    Example {
        name: "example 3: per-IP limit and a blocked IP",
        file: "
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
",
        calls: &[
            (&[("remote_address", "50.0.0.1")], &[Code::Ok]),
            (&[("remote_address", "50.0.0.5")], &[Code::OverLimit]),
            (&[("remote_address", "50.0.0.5")], &[Code::OverLimit]),
        ],
    },
    Example {
        name: "example 9: trailing wildcard",
        file: "
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 1
",
        calls: &[
            (&[("key1", "value1")], &[Code::Ok]),
            (&[("key1", "value1")], &[Code::OverLimit]),
            // Its own bucket: thresholds are per value unless shared.
            (&[("key1", "valueXYZ")], &[Code::Ok]),
            (&[("key1", "other")], &[Code::Ok]),
            (&[("key1", "other")], &[Code::Ok]),
        ],
    },
    Example {
        name: "example 9b: middle wildcard",
        file: "
domain: example9
descriptors:
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 1
",
        calls: &[
            (&[("path", "/api/123/action")], &[Code::Ok]),
            (&[("path", "/api/123/action")], &[Code::OverLimit]),
            (&[("path", "/api/123/other")], &[Code::Ok]),
            (&[("path", "/api/123/other")], &[Code::Ok]),
        ],
    },
    Example {
        name: "example 9c: multiple wildcards",
        file: "
domain: example9
descriptors:
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 1
",
        calls: &[
            (&[("route", "/api/v1/resource/123/action")], &[Code::Ok]),
            (
                &[("route", "/api/v1/resource/123/action")],
                &[Code::OverLimit],
            ),
            (&[("route", "/api/v2/resource/456/other")], &[Code::Ok]),
            (&[("route", "/api/v2/resource/456/other")], &[Code::Ok]),
        ],
    },
    Example {
        name: "unit: week",
        file: "
domain: weekly
descriptors:
  - key: user
    rate_limit:
      unit: week
      requests_per_unit: 2
",
        calls: &[
            (&[("user", "a")], &[Code::Ok]),
            (&[("user", "a")], &[Code::Ok]),
            (&[("user", "a")], &[Code::OverLimit]),
        ],
    },
];

#[tokio::test]
async fn readme_examples_answer_as_documented() {
    for example in EXAMPLES {
        let domain = example
            .file
            .lines()
            .find_map(|line| line.strip_prefix("domain: "))
            .expect("a domain");
        let server = start(example.file).await;
        let mut client = server.grpc_client().await;
        for (i, (entries, expected)) in example.calls.iter().enumerate() {
            let response =
                within(client.should_rate_limit(request(domain, vec![descriptor(entries)])))
                    .await
                    .unwrap_or_else(|error| panic!("{}: call {i}: {error}", example.name))
                    .into_inner();
            let codes: Vec<Code> = response.statuses.iter().map(|s| s.code()).collect();
            assert_eq!(codes, *expected, "{}: call {i} {entries:?}", example.name);
        }
        if domain == "weekly" {
            // envoyproxy/ratelimit's metric names and labels, beside ours.
            let text = server.metrics().await;
            for (name, value) in [
                ("total_hits", 3.0),
                ("over_limit", 1.0),
                ("within_limit", 2.0),
            ] {
                assert_eq!(
                    metric(
                        &text,
                        &format!(
                            "ratelimit_service_rate_limit_{name}{{domain=\"weekly\",key1=\"user\"}}"
                        )
                    ),
                    value,
                    "{name}: {text}"
                );
            }
            assert_eq!(
                metric(
                    &text,
                    "tollgate_rule_total_hits_total{rule=\"weekly.user\"}"
                ),
                3.0
            );
            assert_eq!(
                metric(&text, "ratelimit_service_config_load_success"),
                1.0,
                "{text}"
            );
        }
        server.stop().await;
    }
}

/// Meanings this server does not give (a `share_threshold` on a value
/// without a wildcard, a `replaces` naming nothing or itself) are refused
/// at their line, with why, as envoyproxy/ratelimit refuses them.
#[test]
fn meaningless_keys_are_refused_at_their_line() {
    for (file, line, needle) in [
        (
            // envoyproxy/ratelimit refuses it too: nothing to share.
            "domain: d\ndescriptors:\n  - key: files\n    value: files/a\n    share_threshold: true\n    rate_limit: {unit: minute, requests_per_unit: 10}\n",
            3,
            "share_threshold: only a value holding a wildcard",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: mine\n      replaces: [{name: mine}]\n      unit: minute\n      requests_per_unit: 10\n",
            3,
            "rate_limit.replaces[0].name: 'mine' is this limit's own name",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      replaces: [{name: ''}]\n      unit: minute\n      requests_per_unit: 10\n",
            3,
            "rate_limit.replaces[0].name: should not be empty",
        ),
    ] {
        let error = tollgate_server::Config::from_yaml(std::path::Path::new("lyft.yaml"), file)
            .expect_err(needle);
        assert_eq!(error.line(), Some(line), "{needle}: {error}");
        assert!(error.message().contains(needle), "{error}");
    }
    // `false` is the default meaning: accepted.
    assert!(
        tollgate_server::Config::from_yaml(
            std::path::Path::new("lyft.yaml"),
            "domain: d\ndescriptors:\n  - key: k\n    detailed_metric: false\n    value_to_metric: false\n    rate_limit: {unit: minute, requests_per_unit: 10}\n",
        )
        .is_ok()
    );
}

/// Lyft's Example 7, as its README gives it.
const EXAMPLE_7: &str = "
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
";

/// `replaces` (Lyft's Example 7): with both descriptors in one request, the
/// replaced 5/s limit is not applied (OK, no limit, nothing counted) and
/// the 10/s one is; on its own, the named limit still applies, at 5/s, its
/// bucket untouched by the calls that replaced it.
#[tokio::test]
async fn example_7_replaces_a_named_limit_in_the_same_request() {
    let server = start(EXAMPLE_7).await;
    let mut client = server.grpc_client().await;
    let specific: &[(&str, &str)] = &[("key_1", "value_1"), ("user", "bkthomps")];
    let replacing: &[(&str, &str)] = &[("key_2", "value_2"), ("user", "bkthomps")];
    for i in 0..11 {
        let response = within(client.should_rate_limit(request(
            "example7",
            vec![descriptor(specific), descriptor(replacing)],
        )))
        .await
        .expect("call")
        .into_inner();
        let codes: Vec<Code> = response.statuses.iter().map(|s| s.code()).collect();
        let expected = if i < 10 {
            [Code::Ok, Code::Ok]
        } else {
            [Code::Ok, Code::OverLimit]
        };
        assert_eq!(codes, expected, "call {i}");
        // The replaced descriptor is answered with no limit.
        assert!(response.statuses[0].current_limit.is_none(), "call {i}");
        assert_eq!(
            response.statuses[1]
                .current_limit
                .as_ref()
                .map(|l| l.requests_per_unit),
            Some(10)
        );
    }
    // Alone, the named limit applies, its bucket still full.
    for i in 0..6 {
        let response =
            within(client.should_rate_limit(request("example7", vec![descriptor(specific)])))
                .await
                .expect("call")
                .into_inner();
        let expected = if i < 5 { Code::Ok } else { Code::OverLimit };
        assert_eq!(response.statuses[0].code(), expected, "alone, call {i}");
    }
    server.stop().await;
}

/// Lyft's Example 11.
const EXAMPLE_11: &str = "
domain: example11
descriptors:
  # With share_threshold: true, all files/* matches share the same threshold
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10

  # Without share_threshold, each files_no_share/* match has its own isolated threshold
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
";

/// `share_threshold` (Lyft's Example 11): 5 calls for `files/a.pdf` and 5
/// for `files/b.csv` exhaust the shared 10/hour, so `files/c.txt` is over
/// the limit; `files_no_share/*` values keep a bucket each.
#[tokio::test]
async fn example_11_share_threshold_shares_one_bucket() {
    let server = start(EXAMPLE_11).await;
    let mut client = server.grpc_client().await;
    for value in ["files/a.pdf", "files/b.csv"] {
        for i in 0..5 {
            assert_eq!(
                one(&mut client, "files", value).await,
                Code::Ok,
                "{value} call {i}"
            );
        }
    }
    assert_eq!(
        one(&mut client, "files", "files/c.txt").await,
        Code::OverLimit
    );
    assert_eq!(
        one(&mut client, "files", "files/a.pdf").await,
        Code::OverLimit
    );
    for i in 0..10 {
        assert_eq!(
            one(&mut client, "files_no_share", "files_no_share/a.pdf").await,
            Code::Ok,
            "call {i}"
        );
    }
    assert_eq!(
        one(&mut client, "files_no_share", "files_no_share/a.pdf").await,
        Code::OverLimit
    );
    assert_eq!(
        one(&mut client, "files_no_share", "files_no_share/b.csv").await,
        Code::Ok
    );
    server.stop().await;
}

/// One call of one `(key, value)` descriptor in `example11`: its code.
async fn one(
    client: &mut tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<tonic::transport::Channel>,
    key: &str,
    value: &str,
) -> Code {
    within(client.should_rate_limit(request("example11", vec![descriptor(&[(key, value)])])))
        .await
        .expect("call")
        .into_inner()
        .statuses[0]
        .code()
}

/// Lyft's Example 8.
const EXAMPLE_8: &str = "
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
";

/// envoyproxy/ratelimit's `total_hits` series (its default mapping: no
/// `key2` label for a two-part key).
fn lyft_hits(text: &str, domain: &str, key1: &str, key2: &str) -> f64 {
    let key2 = if key2.is_empty() {
        String::new()
    } else {
        format!(",key2=\"{key2}\"")
    };
    metric(
        text,
        &format!(
            "ratelimit_service_rate_limit_total_hits{{domain=\"{domain}\",key1=\"{key1}\"{key2}}}"
        ),
    )
}

/// `detailed_metric` (Lyft's Example 8): the value-less rule counts
/// envoyproxy/ratelimit's metrics under `key1_<value>` ("key1_unspecified_value"
/// rather than "key1"); the rule with a value keeps `key1_value1`;
/// tollgate's own metrics stay per rule. Limits work as usual.
#[tokio::test]
async fn example_8_detailed_metric_names_the_value() {
    let server = start(EXAMPLE_8).await;
    let mut client = server.grpc_client().await;
    for value in [
        "unspecified_value",
        "unspecified_value2",
        "unspecified_value",
        "value1",
    ] {
        let response = within(
            client.should_rate_limit(request("example8", vec![descriptor(&[("key1", value)])])),
        )
        .await
        .expect("call")
        .into_inner();
        assert_eq!(response.statuses[0].code(), Code::Ok, "{value}");
    }
    let text = server.metrics().await;
    assert_eq!(
        lyft_hits(&text, "example8", "key1_unspecified_value", ""),
        2.0,
        "{text}"
    );
    assert_eq!(
        lyft_hits(&text, "example8", "key1_unspecified_value2", ""),
        1.0,
        "{text}"
    );
    assert_eq!(
        lyft_hits(&text, "example8", "key1_value1", ""),
        1.0,
        "{text}"
    );
    assert_eq!(lyft_hits(&text, "example8", "key1", ""), 0.0, "{text}");
    assert_eq!(
        metric(
            &text,
            "tollgate_rule_total_hits_total{rule=\"example8.key1\"}"
        ),
        3.0
    );
    server.stop().await;
}

/// `value_to_metric` (Lyft's Example 10): the flagged entries' values name
/// the metric (`route_api`, `http_method_GET`); and the cardinality guard:
/// past `DETAILED_VALUES_PER_RULE` label sets per rule, later values are
/// counted under `key1="_other", key2="_other"`, so that a client sending
/// ever new values cannot grow memory without bound.
#[tokio::test]
async fn example_10_value_to_metric_with_a_bounded_cardinality() {
    let server = start(
        "
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
",
    )
    .await;
    let mut client = server.grpc_client().await;
    let cap = tollgate_server::metrics::DETAILED_VALUES_PER_RULE;
    let routes: Vec<String> = (0..cap + 2).map(|i| format!("r{i}")).collect();
    for route in std::iter::once("api").chain(routes.iter().map(String::as_str)) {
        let response = within(client.should_rate_limit(request(
            "example10",
            vec![descriptor(&[
                ("route", route),
                ("http_method", "GET"),
                ("subject_id", "123"),
            ])],
        )))
        .await
        .expect("call")
        .into_inner();
        assert_eq!(response.statuses[0].code(), Code::Ok, "{route}");
    }
    let text = server.metrics().await;
    assert_eq!(
        lyft_hits(&text, "example10", "route_api", "http_method_GET"),
        1.0,
        "{text}"
    );
    // "api" and the first cap - 1 routes have their own label set; the
    // last three are folded.
    assert_eq!(
        lyft_hits(
            &text,
            "example10",
            &format!("route_r{}", cap - 2),
            "http_method_GET"
        ),
        1.0
    );
    assert_eq!(
        lyft_hits(&text, "example10", "_other", "_other"),
        3.0,
        "{text}"
    );
    assert!(!text.contains(&format!("route_r{}", cap - 1)));
    server.stop().await;
}

/// envoyproxy/ratelimit's `integration-test/scripts/replaces.sh`,
/// `trigger-ratelimit.sh` and `value-included-in-stats-key-when-unspecified.sh`
/// against its `example.yaml`, call for call: `(headers, limited)`, where
/// limited means the overall answer is OVER_LIMIT (Envoy's 429).
/// envoyproxy/ratelimit's integration scripts ([`SCRIPT`]) against its
/// `example.yaml`, call for call.
#[tokio::test]
async fn lyft_integration_scripts_answer_as_they_expect() {
    let script = SCRIPT;
    let server = start(EXAMPLE_YAML.trim_start_matches("---\n")).await;
    let mut client = server.grpc_client().await;
    for (i, (headers, limited)) in script.iter().enumerate() {
        let descriptors = route(headers)
            .iter()
            .map(|entries| descriptor(entries))
            .collect();
        let response = within(client.should_rate_limit(request("rl", descriptors)))
            .await
            .expect("call")
            .into_inner();
        assert_eq!(
            response.overall_code() == Code::OverLimit,
            *limited,
            "call {i}: {headers:?}: {response:?}"
        );
    }
    // The detailed metric the last script reads.
    let text = server.metrics().await;
    assert_eq!(
        metric(
            &text,
            "ratelimit_service_rate_limit_over_limit{domain=\"rl\",key1=\"unspec_unspecified_value\"}"
        ),
        1.0,
        "{text}"
    );
    server.stop().await;
}

/// envoyproxy/ratelimit's newer `quota_mode` and `metadata` (in its
/// shipped `example.yaml`, refused before that change) are read with its
/// meaning: `integration-test/scripts/quota.sh` replayed against the file
/// as it ships ([`QUOTA_SCRIPT`]: over the limit only when every
/// quota-mode descriptor is).
#[tokio::test]
async fn quota_mode_answers_as_lyfts_quota_script_expects() {
    let server = start(EXAMPLE_YAML.trim_start_matches("---\n")).await;
    let mut client = server.grpc_client().await;
    for (i, limited) in QUOTA_SCRIPT.iter().enumerate() {
        let descriptors = QUOTA_DESCRIPTORS
            .iter()
            .map(|entries| descriptor(entries))
            .collect();
        let response = within(client.should_rate_limit(request("rl", descriptors)))
            .await
            .expect("call")
            .into_inner();
        assert_eq!(
            response.overall_code() == Code::OverLimit,
            *limited,
            "call {i}: {response:?}"
        );
    }
    server.stop().await;
    // `metadata` is a mapping, refused at its line otherwise.
    let error = tollgate_server::Config::from_yaml(
        std::path::Path::new("lyft.yaml"),
        "domain: d\ndescriptors:\n  - key: service\n    quota_mode: true\n    metadata: 3\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
    )
    .expect_err("metadata: 3");
    assert_eq!(error.line(), Some(5), "{error}");
}

/// Regression: a `requests_per_unit: 0` rule (Lyft's block
/// list) answered OVER_LIMIT but was counted nowhere (`over_limit` and
/// `total_hits` stayed 0, under both metric names), and `/v1/rules`
/// showed it with no limit at all. Its denials are now counted, and it
/// is listed as `0` per its unit.
#[tokio::test]
async fn a_blocked_rule_counts_its_denials_and_lists_its_zero_limit() {
    let server = start(
        "
domain: edge
descriptors:
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: shadowed
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 0
",
    )
    .await;
    let mut client = server.grpc_client().await;
    for _ in 0..2 {
        let mut call = request("edge", vec![descriptor(&[("remote_address", "50.0.0.5")])]);
        call.hits_addend = 3;
        let response = within(client.should_rate_limit(call))
            .await
            .expect("answered")
            .into_inner();
        assert_eq!(response.overall_code(), Code::OverLimit);
    }
    let response =
        within(client.should_rate_limit(request("edge", vec![descriptor(&[("shadowed", "x")])])))
            .await
            .expect("answered")
            .into_inner();
    assert_eq!(response.overall_code(), Code::Ok, "shadow mode answers OK");
    let text = server.metrics().await;
    for (name, rule, value) in [
        ("total_hits", "edge.remote_address_50.0.0.5", 6.0),
        ("over_limit", "edge.remote_address_50.0.0.5", 6.0),
        ("within_limit", "edge.remote_address_50.0.0.5", 0.0),
        ("total_hits", "edge.shadowed", 1.0),
        ("over_limit", "edge.shadowed", 1.0),
        ("shadow_mode", "edge.shadowed", 1.0),
    ] {
        assert_eq!(
            metric(
                &text,
                &format!("tollgate_rule_{name}_total{{rule=\"{rule}\"}}")
            ),
            value,
            "{name} of {rule}: {text}"
        );
    }
    assert_eq!(
        metric(
            &text,
            "ratelimit_service_rate_limit_over_limit{domain=\"edge\",key1=\"remote_address_50_0_0_5\"}"
        ),
        6.0,
        "{text}"
    );
    let rules: serde_json::Value = within(http_client().get(server.url("/v1/rules")).send())
        .await
        .expect("rules")
        .json()
        .await
        .expect("json");
    let blocked = &rules["rules"][0];
    assert_eq!(blocked["rule"], "edge.remote_address_50.0.0.5");
    assert_eq!(blocked["unlimited"], false);
    let limits = blocked["limits"].as_array().expect("a list");
    assert_eq!(limits.len(), 1, "{blocked}");
    assert_eq!(limits[0]["requests_per_unit"], 0);
    assert_eq!(limits[0]["capacity"], 0);
    assert_eq!(limits[0]["period_ms"], 1_000);
    server.stop().await;
}
