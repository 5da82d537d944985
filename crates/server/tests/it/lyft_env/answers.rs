//! The last of envoyproxy/ratelimit's answers, stats and probes, each from
//! outside: the stats of a `hits_addend` above the limit, the
//! `response_time` timer and `domain_not_found` (Prometheus scrape and a
//! StatsD listener), gRPC health under `ratelimit` following
//! `/healthcheck`, and `RESPONSE_DYNAMIC_METADATA`.

use prost_types::value::Kind;
use tokio::net::UdpSocket;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::lyft_env::support::*;

const RULES: &str = "
domain: rl
descriptors:
  - key: foo
    value: x
    rate_limit:
      unit: minute
      requests_per_unit: 3
    metadata:
      team: payments
      route: {tier: gold}
  - key: bar
    value: y
    rate_limit:
      unit: minute
      requests_per_unit: 1
    metadata:
      team: search
      route: {zone: eu}
";

fn rules(root: &std::path::Path) {
    write(&config_dir(root).join("rl.yaml"), RULES);
}

async fn scrape(server: &LyftServer) -> String {
    within(async {
        http_client()
            .get(format!("http://{}/metrics", server.http))
            .send()
            .await
            .expect("scrape")
            .text()
            .await
            .expect("body")
    })
    .await
}

/// The value of the sample `series` (name and labels, exactly) in `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn hits_above_the_limit_are_counted_as_envoyproxy_ratelimit_counts_them() {
    let redis = RedisServer::start();
    // In memory, and on Redis in Lyft's layout (where the 4 are written,
    // as its INCRBY writes them): the same stats.
    for counts in [Counts::Memory, Counts::Redis(&redis)] {
        let server = start(counts, &[], rules).await;
        let mut client = server.grpc_client().await;
        let mut call = request("rl", vec![descriptor(&[("foo", "x")])]);
        call.hits_addend = 4;
        let response = within(client.should_rate_limit(call))
            .await
            .expect("call")
            .into_inner();
        assert_eq!(response.overall_code(), Code::OverLimit, "{response:?}");
        let text = scrape(&server).await;
        // envoyproxy/ratelimit: 4 hits on 3/min count 4, 1 over, 1 near.
        for (stat, want) in [
            ("total_hits", 4.0),
            ("over_limit", 1.0),
            ("near_limit", 1.0),
        ] {
            let series =
                format!("ratelimit_service_rate_limit_{stat}{{domain=\"rl\",key1=\"foo_x\"}}");
            assert_eq!(sample(&text, &series), Some(want), "{series} in\n{text}");
        }
        assert_eq!(
            sample(
                &text,
                "ratelimit_service_rate_limit_within_limit{domain=\"rl\",key1=\"foo_x\"}"
            ),
            None,
            "nothing admitted:\n{text}"
        );
        server.stop().await;
    }
}

#[tokio::test]
async fn response_time_and_domain_not_found_reach_prometheus_and_statsd() {
    let statsd = UdpSocket::bind("127.0.0.1:0").await.expect("udp");
    let port = statsd.local_addr().expect("addr").port().to_string();
    let server = start(
        Counts::Memory,
        &[
            ("USE_STATSD", "false"),
            ("USE_DOG_STATSD", "true"),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", &port),
            ("STATS_FLUSH_INTERVAL", "100ms"),
        ],
        rules,
    )
    .await;
    let mut client = server.grpc_client().await;
    for domain in ["rl", "nowhere", "nowhere"] {
        within(client.should_rate_limit(request(domain, vec![descriptor(&[("foo", "x")])])))
            .await
            .expect("call");
    }
    let text = scrape(&server).await;
    assert!(
        text.contains("# TYPE ratelimit_service_response_time_seconds histogram"),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"}"
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"+Inf\"}"
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "ratelimit_service_rate_limit_nowhere_domain_not_found"
        ),
        Some(2.0),
        "{text}"
    );
    // StatsD: each call's time, and the counter, within a few flushes.
    let mut lines = Vec::new();
    let mut buf = vec![0; 65_536];
    within(async {
        while lines
            .iter()
            .filter(|l: &&String| l.starts_with("ratelimit_server.ShouldRateLimit.response_time:"))
            .count()
            < 3
            || !lines
                .iter()
                .any(|l| l == "ratelimit.service.rate_limit.nowhere.domain_not_found:2|c")
        {
            let n = statsd.recv(&mut buf).await.expect("recv");
            let datagram = String::from_utf8_lossy(&buf[..n]).into_owned();
            lines.extend(datagram.lines().map(str::to_owned));
        }
    })
    .await;
    for line in lines
        .iter()
        .filter(|l| l.starts_with("ratelimit_server.ShouldRateLimit.response_time:"))
    {
        let value = line
            .strip_prefix("ratelimit_server.ShouldRateLimit.response_time:")
            .and_then(|rest| rest.strip_suffix("|ms"))
            .expect("name:value|ms");
        assert!(value.parse::<u64>().is_ok(), "{line}");
    }
    server.stop().await;
}

async fn health_client(server: &LyftServer) -> HealthClient<tonic::transport::Channel> {
    let channel =
        tonic::transport::Channel::from_shared(format!("http://{}", server.grpc)).expect("uri");
    HealthClient::new(within(channel.connect()).await.expect("connect"))
}

async fn health(server: &LyftServer, service: &str) -> Result<ServingStatus, tonic::Code> {
    let mut client = health_client(server).await;
    within(client.check(HealthCheckRequest {
        service: service.to_owned(),
    }))
    .await
    .map(|response| response.into_inner().status())
    .map_err(|status| status.code())
}

async fn healthcheck(server: &LyftServer) -> u16 {
    within(
        http_client()
            .get(format!("http://{}/healthcheck", server.http))
            .send(),
    )
    .await
    .expect("healthcheck")
    .status()
    .as_u16()
}

#[tokio::test]
async fn grpc_health_answers_ratelimit_from_the_state_healthcheck_answers() {
    let server = start(
        Counts::Memory,
        &[
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
            ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
        ],
        |_| {},
    )
    .await;
    // No rule yet: unhealthy on both doors; the server itself serves.
    assert_eq!(healthcheck(&server).await, 500);
    assert_eq!(
        health(&server, "ratelimit").await,
        Ok(ServingStatus::NotServing)
    );
    assert_eq!(health(&server, "").await, Ok(ServingStatus::Serving));
    assert_eq!(health(&server, "nope").await, Err(tonic::Code::NotFound));
    // Rules arrive: healthy on both.
    rules(&server.root);
    server.reloader.reload().expect("reload");
    assert_eq!(healthcheck(&server).await, 200);
    for service in [
        "ratelimit",
        "envoy.service.ratelimit.v3.RateLimitService",
        "",
    ] {
        assert_eq!(
            health(&server, service).await,
            Ok(ServingStatus::Serving),
            "{service}"
        );
    }
    // Watch sends the status at once.
    let mut client = health_client(&server).await;
    let mut stream = within(client.watch(HealthCheckRequest {
        service: "ratelimit".to_owned(),
    }))
    .await
    .expect("watch")
    .into_inner();
    let first = within(stream.message())
        .await
        .expect("message")
        .expect("one");
    assert_eq!(first.status(), ServingStatus::Serving);
    drop(stream);
    server.stop().await;
}

fn field<'a>(s: &'a prost_types::Struct, key: &str) -> Option<&'a Kind> {
    s.fields.get(key)?.kind.as_ref()
}

#[tokio::test]
async fn response_dynamic_metadata_carries_lyfts_fields() {
    let server = start(
        Counts::Memory,
        &[("RESPONSE_DYNAMIC_METADATA", "true")],
        rules,
    )
    .await;
    let mut client = server.grpc_client().await;
    let call = request(
        "rl",
        vec![descriptor(&[("foo", "x")]), descriptor(&[("bar", "y")])],
    );
    // The first call passes both; the second leaves bar over its limit.
    let first = within(client.should_rate_limit(call.clone()))
        .await
        .expect("call")
        .into_inner();
    let metadata = first.dynamic_metadata.expect("dynamic metadata");
    assert_eq!(
        field(&metadata, "domain"),
        Some(&Kind::StringValue("rl".into()))
    );
    let Some(Kind::ListValue(descriptors)) = field(&metadata, "descriptors") else {
        panic!("descriptors: {metadata:?}")
    };
    let Some(Kind::StructValue(one)) = &descriptors.values[0].kind else {
        panic!("{descriptors:?}")
    };
    let Some(Kind::ListValue(entries)) = field(one, "entries") else {
        panic!("{one:?}")
    };
    assert_eq!(
        entries.values[0].kind,
        Some(Kind::StringValue("foo=x".into()))
    );
    assert_eq!(
        field(&metadata, "hitsAddend"),
        None,
        "hits_addend 0 is left out"
    );
    let Some(Kind::StructValue(merged)) = field(&metadata, "metadata") else {
        panic!("metadata: {metadata:?}")
    };
    // First wins; maps merge.
    assert_eq!(
        field(merged, "team"),
        Some(&Kind::StringValue("payments".into()))
    );
    let Some(Kind::StructValue(route)) = field(merged, "route") else {
        panic!("{merged:?}")
    };
    assert!(
        route.fields.contains_key("tier") && route.fields.contains_key("zone"),
        "{route:?}"
    );
    let second = within(client.should_rate_limit(call))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(second.overall_code(), Code::OverLimit);
    let metadata = second.dynamic_metadata.expect("dynamic metadata");
    let Some(Kind::StructValue(merged)) = field(&metadata, "metadata") else {
        panic!("metadata: {metadata:?}")
    };
    let Some(Kind::StructValue(route)) = field(merged, "route") else {
        panic!("{merged:?}")
    };
    assert!(
        !route.fields.contains_key("zone"),
        "bar is over its limit: {route:?}"
    );
    // POST /json carries it too, in protobuf's JSON mapping.
    let answer: serde_json::Value = within(async {
        http_client()
            .post(format!("http://{}/json", server.http))
            .body(r#"{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"x"}]}]}"#)
            .send()
            .await
            .expect("/json")
            .json()
            .await
            .expect("json")
    })
    .await;
    assert_eq!(
        answer["dynamicMetadata"]["descriptors"][0]["entries"][0], "foo=x",
        "{answer}"
    );
    assert_eq!(
        answer["dynamicMetadata"]["metadata"]["team"], "payments",
        "{answer}"
    );
    server.stop().await;
    // Off by default: no dynamic metadata.
    let server = start(Counts::Memory, &[], rules).await;
    let mut client = server.grpc_client().await;
    let answer = within(client.should_rate_limit(request("rl", vec![descriptor(&[("foo", "x")])])))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(answer.dynamic_metadata, None);
    server.stop().await;
}
