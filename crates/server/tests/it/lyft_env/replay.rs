//! envoyproxy/ratelimit's integration scripts replayed against a server
//! started from its `docker-compose.yml` environment with its
//! `examples/ratelimit/config` directory, as it ships (`quota_mode` and
//! `metadata` included): in memory and on Redis.

use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::lyft_env::support::*;

use crate::shared::lyft_examples;
use lyft_examples::{CONFIG_YAML, EXAMPLE_YAML, QUOTA_DESCRIPTORS, QUOTA_SCRIPT, SCRIPT, route};

/// The compose file mounts `./examples` at `/data`: the rules are
/// `/data/ratelimit/config/{config,example}.yaml`.
fn examples(root: &std::path::Path) {
    write(&config_dir(root).join("config.yaml"), CONFIG_YAML);
    write(&config_dir(root).join("example.yaml"), EXAMPLE_YAML);
}

/// Every script, call for call, through Envoy's gRPC API.
async fn replay(server: &LyftServer) {
    let mut client = server.grpc_client().await;
    let call = |descriptors: Vec<Vec<(&str, &str)>>| {
        let descriptors = descriptors
            .iter()
            .map(|entries| descriptor(entries))
            .collect();
        let mut client = client.clone();
        async move {
            within(client.should_rate_limit(request("rl", descriptors)))
                .await
                .expect("call")
                .into_inner()
        }
    };
    // simple-get.sh: the happy path.
    let ok = call(route(&[("foo", "test"), ("baz", "shady")])).await;
    assert_eq!(ok.overall_code(), Code::Ok, "{ok:?}");
    for (i, (headers, limited)) in SCRIPT.iter().enumerate() {
        let response = call(route(headers)).await;
        assert_eq!(
            response.overall_code() == Code::OverLimit,
            *limited,
            "call {i}: {headers:?}: {response:?}"
        );
    }
    // trigger-shadow-mode-key.sh: 3 a minute in shadow mode, 5 calls, all OK.
    for i in 0..5 {
        let response = call(route(&[("foo", "pelle"), ("baz", "shady")])).await;
        assert_eq!(response.overall_code(), Code::Ok, "call {i}: {response:?}");
    }
    // quota.sh.
    for (i, limited) in QUOTA_SCRIPT.iter().enumerate() {
        let descriptors = QUOTA_DESCRIPTORS.iter().map(|d| d.to_vec()).collect();
        let response = call(descriptors).await;
        assert_eq!(
            response.overall_code() == Code::OverLimit,
            *limited,
            "quota call {i}: {response:?}"
        );
    }
    // An unnamed rule answers an empty name, as envoyproxy/ratelimit does
    // (the rule's path used to leak into Envoy's headers).
    let unnamed = call(route(&[("foo", "someone"), ("baz", "not-so-shady")])).await;
    let limit = unnamed.statuses[0].current_limit.as_ref().expect("a limit");
    assert_eq!(limit.name, "");
    assert_eq!(limit.requests_per_unit, 3);
    // The other file of the directory is in force too.
    let mongo = within(client.should_rate_limit(request(
        "mongo_cps",
        vec![descriptor(&[("database", "users")])],
    )))
    .await
    .expect("call")
    .into_inner();
    assert_eq!(
        mongo.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit),
        Some(500)
    );
}

#[tokio::test]
async fn lyft_scripts_pass_in_memory_from_the_docker_compose_environment() {
    let server = start(Counts::Memory, &[], examples).await;
    replay(&server).await;
    // A fixed window aligned to the minute: the next minute starts afresh
    // (quota.sh's last step, after its `sleep 60`).
    server.clock.advance(std::time::Duration::from_secs(60));
    let mut client = server.grpc_client().await;
    let descriptors = QUOTA_DESCRIPTORS.iter().map(|d| descriptor(d)).collect();
    let response = within(client.should_rate_limit(request("rl", descriptors)))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(response.overall_code(), Code::Ok, "{response:?}");
    server.stop().await;
}

#[tokio::test]
async fn lyft_scripts_pass_on_redis_from_the_docker_compose_environment() {
    let redis = RedisServer::start();
    // The scripts count per minute on Redis' clock: start them early in a
    // minute, so that no window ends midway.
    let second = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
        % 60;
    if second >= 40 {
        tokio::time::sleep(std::time::Duration::from_secs(61 - second)).await;
    }
    let server = start(Counts::Redis(&redis), &[], examples).await;
    replay(&server).await;
    // The counts are Redis'.
    assert!(!redis.keys("*").is_empty());
    server.stop().await;
}
