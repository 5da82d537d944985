//! `grpc.health.v1.Health` on the gRPC listener (no token needed, as
//! `/healthz`), answered from the server's [`Health`]:
//!
//! | service asked | answer |
//! |---|---|
//! | `""` (the server) | `SERVING` until shutdown, as gRPC's own health server |
//! | `ratelimit` (envoyproxy/ratelimit's name), `envoy.service.ratelimit.v3.RateLimitService` | `SERVING` while [`Health::check`] passes (what `/healthcheck` answers), else `NOT_SERVING` |
//! | anything else | `NOT_FOUND` |
//!
//! `Watch` sends the status at once, then each change, read every
//! [`WATCH_EVERY`]; for an unknown service it sends `SERVICE_UNKNOWN`, as
//! the protocol asks.

use std::pin::Pin;
use std::time::Duration;

use futures_util::Stream;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health as HealthApi, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::health::Health;

/// envoyproxy/ratelimit's registered health service name.
pub const LYFT_SERVICE: &str = "ratelimit";

/// The rate limit service's gRPC name, as health checks ask for it.
pub const RLS_SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// How often `Watch` reads the health.
pub const WATCH_EVERY: Duration = Duration::from_millis(500);

/// The health service over `health`.
pub fn server(health: Health) -> HealthServer<HealthService> {
    HealthServer::new(HealthService { health })
}

/// `grpc.health.v1.Health` (see the module docs).
#[derive(Debug, Clone)]
pub struct HealthService {
    health: Health,
}

impl HealthService {
    /// The status of `service`, `None` if unknown.
    fn status(&self, service: &str) -> Option<ServingStatus> {
        let up = match service {
            "" => self.health.serving(),
            LYFT_SERVICE | RLS_SERVICE => self.health.check().is_ok(),
            _ => return None,
        };
        Some(if up {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        })
    }
}

fn response(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status as i32,
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl HealthApi for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = request.into_inner().service;
        match self.status(&service) {
            Some(status) => Ok(Response::new(response(status))),
            None => Err(Status::not_found(format!("unknown service {service:?}"))),
        }
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<WatchStream>, Status> {
        let service = request.into_inner().service;
        let this = self.clone();
        let stream = futures_util::stream::unfold(
            (this, service, None::<ServingStatus>),
            |(this, service, last)| async move {
                loop {
                    let now = this
                        .status(&service)
                        .unwrap_or(ServingStatus::ServiceUnknown);
                    if last != Some(now) {
                        return Some((Ok(response(now)), (this, service, Some(now))));
                    }
                    tokio::time::sleep(WATCH_EVERY).await;
                }
            },
        );
        Ok(Response::new(Box::pin(stream)))
    }
}
