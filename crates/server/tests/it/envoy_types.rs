//! The server driven by a client generated from Envoy's upstream protos
//! (the `envoy-types` crate), not from this crate's hand-written subset:
//! proof that the subset is wire-compatible with what Envoy sends and reads.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::google::protobuf::UInt64Value;

use crate::support::*;

fn entry(key: &str, value: &str) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.to_owned(),
            value: value.to_owned(),
        }],
        limit: None,
        hits_addend: None,
    }
}

fn costing(key: &str, value: &str, cost: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(UInt64Value { value: cost }),
        ..entry(key, value)
    }
}

fn envoy_request(hits_addend: u32, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "rl".to_owned(),
        descriptors,
        hits_addend,
    }
}

/// `(code, (requests_per_unit, unit, name), limit_remaining, seconds until reset)`.
type Summary = (Code, Option<(u32, Unit, String)>, u32, Option<i64>);

fn summary(status: &DescriptorStatus) -> Summary {
    (
        status.code(),
        status
            .current_limit
            .as_ref()
            .map(|l| (l.requests_per_unit, l.unit(), l.name.clone())),
        status.limit_remaining,
        status.duration_until_reset.map(|d| {
            assert_eq!(d.nanos, 0, "whole seconds on a still clock");
            d.seconds
        }),
    )
}

fn headers(response: &RateLimitResponse) -> Vec<(String, String)> {
    response
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}

#[tokio::test]
async fn upstream_envoy_client_talks_to_the_server() {
    let server = start_with("  response_headers: true\n", RULES).await;
    let mut client = within(RateLimitServiceClient::connect(format!(
        "http://{}",
        server.grpc
    )))
    .await
    .expect("connect");

    // Request-level hits_addend 2 for every descriptor, one descriptor
    // overriding it with 3; a descriptor with no rule; an unlimited one.
    let first = within(client.should_rate_limit(envoy_request(
        2,
        vec![
            entry("user", "erin"),
            costing("odd", "erin", 3),
            entry("nobody", "x"),
            entry("internal", "job"),
        ],
    )))
    .await
    .expect("grpc ok")
    .into_inner();
    assert_eq!(first.overall_code(), Code::Ok);
    let statuses: Vec<_> = first.statuses.iter().map(summary).collect();
    assert_eq!(
        statuses,
        [
            // 2 of 2 per minute taken: a fixed window resets at its end.
            (
                Code::Ok,
                Some((2, Unit::Minute, String::new())),
                0,
                Some(60)
            ),
            // GCRA, 5 per 10 s (no single unit: UNKNOWN), 3 taken: full
            // again after 3 × 2 s.
            (
                Code::Ok,
                Some((5, Unit::Unknown, String::new())),
                2,
                Some(6)
            ),
            (Code::Ok, None, 0, None),
            (Code::Ok, None, u32::MAX, None),
        ]
    );
    // The headers describe the descriptor with the fewest permits left.
    assert_eq!(
        headers(&first),
        [
            ("x-ratelimit-limit".to_owned(), "2".to_owned()),
            ("x-ratelimit-remaining".to_owned(), "0".to_owned()),
            ("x-ratelimit-reset".to_owned(), "60".to_owned()),
        ]
    );

    // hits_addend unset (0) counts 1: over the limit. A descriptor's
    // hits_addend of 0 only looks.
    let second = within(client.should_rate_limit(envoy_request(
        0,
        vec![entry("user", "erin"), costing("odd", "erin", 0)],
    )))
    .await
    .expect("grpc ok")
    .into_inner();
    assert_eq!(second.overall_code(), Code::OverLimit);
    let statuses: Vec<_> = second.statuses.iter().map(summary).collect();
    assert_eq!(
        statuses,
        [
            (
                Code::OverLimit,
                Some((2, Unit::Minute, String::new())),
                0,
                Some(60)
            ),
            (
                Code::Ok,
                Some((5, Unit::Unknown, String::new())),
                2,
                Some(6)
            ),
        ]
    );

    // A route's limit override decides the descriptor, in its own bucket.
    let mut overridden = costing("odd", "erin", 1);
    overridden.limit = Some(RateLimitOverride {
        requests_per_unit: 100,
        unit: RateLimitUnit::Second as i32,
    });
    let answer = within(client.should_rate_limit(envoy_request(0, vec![overridden])))
        .await
        .expect("override decided")
        .into_inner();
    assert_eq!(answer.overall_code(), Code::Ok);
    assert_eq!(answer.statuses[0].limit_remaining, 99);
    let look = within(client.should_rate_limit(envoy_request(0, vec![costing("odd", "erin", 0)])))
        .await
        .expect("grpc ok")
        .into_inner();
    assert_eq!(
        look.statuses[0].limit_remaining, 2,
        "the rule's bucket is not the override's"
    );

    server.stop().await;
}
