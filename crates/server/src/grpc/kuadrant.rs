//! Kuadrant Limitador's service, `kuadrant.service.ratelimit.v1.
//! RateLimitService`, on the same gRPC server as Envoy's: `CheckRateLimit`
//! and `Report`, each taking and answering Envoy's messages, decided by the
//! same [`Service`](crate::service::Service) (rules, counts, metrics).
//!
//! # Mapping (decisions)
//!
//! - **`CheckRateLimit`** counts nothing: every descriptor is a look (cost
//!   0). A budget is refused once overspent; a gate is refused while a
//!   list, a penalty or a debt refuses it. (Limitador asks whether one more
//!   hit would fit; tollgate's look is envoyproxy/ratelimit's hit of 0, so
//!   a budget spent exactly to its limit still passes here: see
//!   [`crate::config::budget`].)
//! - **`Report`** counts the request's hits (`hits_addend`, 0 meaning 1 as
//!   in Limitador; a descriptor's own `hits_addend` wins, as over Envoy's
//!   call): on a budget rule a charge, recorded whether or not it fits; on
//!   a gate the hits are taken if they fit (a gate is never charged past
//!   its limit).
//! - Everything else (validation, tokens, framing, answers) is the Envoy
//!   service's ([`super`]).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use super::proto::kuadrant::service::ratelimit::v1::rate_limit_service_server::{
    RateLimitService as KuadrantRateLimitService, RateLimitServiceServer,
};
use super::{RlsService, framing, token_check};

/// The tonic server of Limitador's service over `service`, with the same
/// token and framing checks as the Envoy service's ([`super::server`]).
pub fn server(
    service: RlsService,
    token: Option<Arc<str>>,
    max_bytes: usize,
) -> tonic::service::interceptor::InterceptedService<
    framing::Framed<RateLimitServiceServer<RlsService>>,
    impl tonic::service::Interceptor + Clone,
> {
    let shared = Arc::clone(&service.service);
    let check_token = token_check(token, Arc::clone(&shared));
    tonic::service::interceptor::InterceptedService::new(
        framing::Framed::new(
            RateLimitServiceServer::new(service)
                .max_decoding_message_size(max_bytes)
                .max_encoding_message_size(usize::MAX),
            max_bytes,
            shared,
        ),
        check_token,
    )
}

#[tonic::async_trait]
impl KuadrantRateLimitService for RlsService {
    async fn check_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.answer_as(request, |check| {
            for descriptor in &mut check.descriptors {
                descriptor.cost = Some(0);
            }
        })
        .await
    }

    async fn report(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        // The request's hits_addend already counts 0 as 1 (`super`).
        self.answer_as(request, |_| {}).await
    }
}
