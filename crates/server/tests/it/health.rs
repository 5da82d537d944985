//! `grpc.health.v1` on the gRPC listener (Regression: Kubernetes and Envoy
//! health checks use it).

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::support::*;

#[tokio::test]
async fn grpc_health_serves_without_a_token() {
    let server = start_with("  bearer_token: secret\n", RULES).await;
    let channel = within(
        tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
            .expect("endpoint")
            .connect(),
    )
    .await
    .expect("connect");
    let mut health = HealthClient::new(channel);
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let answer = within(health.check(HealthCheckRequest {
            service: service.to_owned(),
        }))
        .await
        .expect("health answered")
        .into_inner();
        assert_eq!(answer.status(), ServingStatus::Serving, "{service:?}");
    }
    let error = within(health.check(HealthCheckRequest {
        service: "no.such.Service".to_owned(),
    }))
    .await
    .expect_err("unknown service");
    assert_eq!(error.code(), tonic::Code::NotFound);
    server.stop().await;
}
