//! envoyproxy/ratelimit's README examples, replayed as data: each file
//! loads (or is refused at a named line, where this server gives the key
//! no meaning) and answers as that README says (issue 15).

use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::support::*;

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
                            "ratelimit_service_rate_limit_{name}_total{{domain=\"weekly\",key1=\"user\",key2=\"\"}}"
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
                metric(&text, "ratelimit_service_config_load_success_total"),
                1.0,
                "{text}"
            );
        }
        server.stop().await;
    }
}

/// The README keys this server gives no meaning are refused at their line,
/// with why; never accepted and ignored.
#[test]
fn unsupported_keys_are_refused_at_their_line() {
    for (file, line, needle) in [
        (
            // Lyft's Example 7.
            "domain: example7\ndescriptors:\n  - key: key_1\n    value: value_1\n    descriptors:\n      - key: user\n        value: bkthomps\n        rate_limit:\n          replaces:\n            - name: specific_limit\n          requests_per_unit: 10\n          unit: second\n",
            // The descriptor's line, with the field's path in the message.
            6,
            "rate_limit.replaces: not supported",
        ),
        (
            // Lyft's Example 8.
            "domain: example8\ndescriptors:\n  - key: key1\n    detailed_metric: true\n    rate_limit:\n      unit: minute\n      requests_per_unit: 10\n",
            3,
            "detailed_metric: not supported",
        ),
        (
            "domain: example10\ndescriptors:\n  - key: route\n    value_to_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 10}\n",
            3,
            "value_to_metric: not supported",
        ),
        (
            "domain: example11\ndescriptors:\n  - key: files\n    value: files/*\n    share_threshold: true\n    rate_limit: {unit: minute, requests_per_unit: 10}\n",
            3,
            "share_threshold: not supported",
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
