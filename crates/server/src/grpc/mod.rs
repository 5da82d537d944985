//! Envoy's rate limit service, v3, over gRPC.
//!
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, with
//! Envoy's exact package and message names: point Envoy's `ratelimit`
//! filter (`rate_limit_service.grpc_service`) at the gRPC address.
//!
//! # Mapping (decisions)
//!
//! - The request's `hits_addend` is the cost of every descriptor; 0 counts
//!   as 1, because proto3 cannot tell 0 from "not set" and Envoy leaves it
//!   unset (envoyproxy/ratelimit does the same). A descriptor's own
//!   `hits_addend` (a `UInt64Value`, so set is distinguishable) overrides
//!   it, and there 0 means "check only".
//! - `current_limit` is the binding quota: `requests_per_unit` (saturated
//!   to `u32`), its `unit` when the period is exactly one (`UNKNOWN` for a
//!   `period:` such as `10s`), and `name` (the rule's name, else `""` as envoyproxy/ratelimit answers).
//! - `limit_remaining` is 0 on every denial (`OVER_LIMIT`, or OK in
//!   shadow mode), as envoyproxy/ratelimit answers, even where a smaller
//!   request would still fit; it saturates to `u32::MAX`; an `unlimited` rule answers
//!   `u32::MAX` and no `current_limit`; no rule answers OK with neither.
//! - `duration_until_reset`: for an admission, the time until the bucket is
//!   full again; for a denial, the time until the same request would be
//!   admitted (a fixed window's end, the GCRA's next free permit).
//! - `response_headers: true` adds `x-ratelimit-limit`, `-remaining` and
//!   `-reset` for the decided descriptor with the fewest permits left.
//! - A descriptor's `limit` override (Envoy's dynamic limits) is decided
//!   as envoyproxy/ratelimit does, under the limit the request gives: see
//!   [`crate::service`].
//! - A descriptor that cannot be decided as sent (a key or value above
//!   `max_key_bytes`, a cost above its rule's capacity, a `limit` of 0) is
//!   answered `OVER_LIMIT` for that descriptor alone, never
//!   `INVALID_ARGUMENT` for the call, which Envoy's default
//!   `failure_mode_deny: false` would let through ([`crate::service`]).
//! - Bad input to the call itself (an empty domain, no descriptors, more
//!   than `max_descriptors`) is `INVALID_ARGUMENT`, overload `RESOURCE_EXHAUSTED`, a
//!   missing or wrong token `UNAUTHENTICATED` (metadata `authorization:
//!   Bearer <token>`; Envoy sends it from `grpc_service.initial_metadata`),
//!   a backend failure `UNAVAILABLE`. Bad input includes bad gRPC framing
//!   and a message above `max_request_bytes` (which tonic would answer
//!   `INTERNAL` and `OUT_OF_RANGE`): [`framing`] refuses them before tonic
//!   decodes, and undecodable protobuf is refused by [`codec`]. The token is
//!   checked before the framing. A `grpc-encoding` the server does not
//!   support is `UNIMPLEMENTED`, as gRPC's protocol requires.
//! - With dynamic metadata on, the answer carries envoyproxy/ratelimit's
//!   `dynamic_metadata` ([`dynamic_metadata`]).
//! - Every call reaching the handler is counted and timed as
//!   envoyproxy/ratelimit's interceptor does
//!   (`ratelimit_server.ShouldRateLimit.total_requests`, `.response_time`).
//! - `grpc.health.v1.Health` answers from the server's health
//!   ([`health`]).

pub mod codec;
pub mod dynamic_metadata;
pub mod framing;
pub mod health;
pub mod kuadrant;

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use crate::config::{ResponseHeaderNames, Unit};
use crate::metrics::{Api, Refusal};
use crate::service::{
    CheckError, CheckRequest, Descriptor, LimitOverride, Service, Status as DescriptorOutcome,
};

/// The generated protobuf types and gRPC stubs.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    /// `envoy.*` packages.
    pub mod envoy {
        /// `envoy.service`.
        pub mod service {
            /// `envoy.service.ratelimit`.
            pub mod ratelimit {
                /// `envoy.service.ratelimit.v3`: the service.
                pub mod v3 {
                    tonic::include_proto!("envoy.service.ratelimit.v3");
                }
            }
        }
        /// `envoy.extensions`.
        pub mod extensions {
            /// `envoy.extensions.common`.
            pub mod common {
                /// `envoy.extensions.common.ratelimit`.
                pub mod ratelimit {
                    /// `envoy.extensions.common.ratelimit.v3`: descriptors.
                    pub mod v3 {
                        tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                    }
                }
            }
        }
        /// `envoy.config`.
        pub mod config {
            /// `envoy.config.core`.
            pub mod core {
                /// `envoy.config.core.v3`: header values.
                pub mod v3 {
                    tonic::include_proto!("envoy.config.core.v3");
                }
            }
        }
        /// `envoy.type`.
        pub mod r#type {
            /// `envoy.type.v3`: units.
            pub mod v3 {
                tonic::include_proto!("envoy.r#type.v3");
            }
        }
    }
    /// `kuadrant.*` packages.
    pub mod kuadrant {
        /// `kuadrant.service`.
        pub mod service {
            /// `kuadrant.service.ratelimit`.
            pub mod ratelimit {
                /// `kuadrant.service.ratelimit.v1`: Limitador's service.
                pub mod v1 {
                    tonic::include_proto!("kuadrant.service.ratelimit.v1");
                }
            }
        }
    }
}

use proto::envoy::config::core::v3::HeaderValue;
use proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as ProtoUnit;
use proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use proto::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

/// The gRPC service over a shared [`Service`].
#[derive(Debug, Clone)]
pub struct RlsService {
    service: Arc<Service>,
    response_headers: bool,
    header_names: Arc<ResponseHeaderNames>,
    dynamic_metadata: bool,
}

impl RlsService {
    /// The service; `response_headers` adds the `x-ratelimit-*` headers.
    pub fn new(service: Arc<Service>, response_headers: bool) -> RlsService {
        RlsService {
            service,
            response_headers,
            header_names: Arc::default(),
            dynamic_metadata: false,
        }
    }

    /// Whether answers carry envoyproxy/ratelimit's dynamic metadata
    /// ([`dynamic_metadata`]). By default, off.
    #[must_use]
    pub fn with_dynamic_metadata(mut self, on: bool) -> RlsService {
        self.dynamic_metadata = on;
        self
    }

    /// The names of the `response_headers`. By default,
    /// `x-ratelimit-limit`, `-remaining` and `-reset`.
    pub fn with_header_names(mut self, names: ResponseHeaderNames) -> RlsService {
        self.header_names = Arc::new(names);
        self
    }
}

/// The tonic server for `service`, with `token` required if given (checked
/// first), then the framing checked ([`framing::Framed`]: one uncompressed
/// message of at most `max_bytes`).
pub fn server(
    service: RlsService,
    token: Option<Arc<str>>,
    max_bytes: usize,
) -> tonic::service::interceptor::InterceptedService<
    framing::Framed<RateLimitServiceServer<RlsService>>,
    impl tonic::service::Interceptor + Clone,
> {
    let framing_service = Arc::clone(&service.service);
    let check_token = token_check(token, Arc::clone(&service.service));
    tonic::service::interceptor::InterceptedService::new(
        framing::Framed::new(
            RateLimitServiceServer::new(service)
                // A backstop: the framing check refuses larger messages first.
                .max_decoding_message_size(max_bytes)
                .max_encoding_message_size(usize::MAX),
            max_bytes,
            framing_service,
        ),
        check_token,
    )
}

/// The interceptor that requires `token` (if any) as `authorization:
/// Bearer <token>`, counting a refusal in `service`'s metrics.
pub(crate) fn token_check(
    token: Option<Arc<str>>,
    metrics_service: Arc<Service>,
) -> impl tonic::service::Interceptor + Clone {
    move |request: Request<()>| {
        let Some(token) = &token else {
            return Ok(request);
        };
        let given = request
            .metadata()
            .get("authorization")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        if given.is_some_and(|given| crate::auth::token_matches(given, token)) {
            Ok(request)
        } else {
            metrics_service
                .metrics()
                .refused(Api::Grpc, Refusal::Unauthenticated);
            Err(Status::unauthenticated("a valid bearer token is required"))
        }
    }
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        // envoyproxy/ratelimit counts and times every call (its gRPC
        // interceptor), whatever the answer.
        self.service.metrics().should_rate_limit_call();
        let started = std::time::Instant::now();
        let answer = self.answer(request).await;
        self.service
            .metrics()
            .should_rate_limit_time(started.elapsed());
        answer
    }
}

impl RlsService {
    async fn answer(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.answer_as(request, |_| {}).await
    }

    /// [`answer`](Self::answer), with the decoded request changed by
    /// `adjust` first (Limitador's calls set the costs, [`kuadrant`]).
    pub(crate) async fn answer_as(
        &self,
        request: Request<RateLimitRequest>,
        adjust: impl FnOnce(&mut CheckRequest),
    ) -> Result<Response<RateLimitResponse>, Status> {
        let Some(_slot) = self.service.admit(Api::Grpc) else {
            return Err(Status::resource_exhausted(
                "too many requests in flight; retry later",
            ));
        };
        let request = request.into_inner();
        let asked = self.dynamic_metadata.then(|| {
            dynamic_metadata::Asked::new(&request.domain, &request.descriptors, request.hits_addend)
        });
        let mut check = CheckRequest {
            domain: request.domain,
            cost: u64::from(request.hits_addend.max(1)),
            descriptors: request
                .descriptors
                .into_iter()
                .map(|descriptor| Descriptor {
                    entries: descriptor
                        .entries
                        .into_iter()
                        .map(|entry| (entry.key, entry.value))
                        .collect(),
                    cost: descriptor.hits_addend,
                    limit: descriptor.limit.map(|limit| LimitOverride {
                        requests_per_unit: u64::from(limit.requests_per_unit),
                        unit: override_unit(limit.unit),
                    }),
                })
                .collect(),
        };
        adjust(&mut check);
        let outcome = match self.service.check(Api::Grpc, &check).await {
            Ok(outcome) => outcome,
            Err(CheckError::Invalid(message)) => {
                tracing::debug!(%message, "grpc: invalid request");
                return Err(Status::invalid_argument(message));
            }
            Err(CheckError::Backend(error)) => {
                // Debug: the backend logs its store's failures itself,
                // rate-limited (never a line per request).
                tracing::debug!(%error, "grpc: backend failed");
                return Err(Status::unavailable(error.to_string()));
            }
        };
        let statuses: Vec<DescriptorStatus> =
            outcome.statuses.iter().map(descriptor_status).collect();
        let response_headers_to_add = if self.response_headers {
            headers(&statuses, &self.header_names)
        } else {
            Vec::new()
        };
        // The rules of the descriptors not answered OVER_LIMIT.
        let dynamic_metadata = asked.map(|asked| {
            let passed = outcome
                .statuses
                .iter()
                .zip(&statuses)
                .filter(|(_, status)| status.code != Code::OverLimit as i32)
                .filter_map(|(outcome, _)| match outcome {
                    DescriptorOutcome::Decided { rule, .. }
                    | DescriptorOutcome::Refused {
                        rule: Some(rule), ..
                    } => rule.metadata.as_ref(),
                    _ => None,
                });
            asked.answer(passed)
        });
        Ok(Response::new(RateLimitResponse {
            overall_code: if outcome.is_over_limit() {
                Code::OverLimit
            } else {
                Code::Ok
            } as i32,
            statuses,
            response_headers_to_add,
            dynamic_metadata,
            ..RateLimitResponse::default()
        }))
    }
}

fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn proto_duration(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        // Below 10^9: fits.
        nanos: i32::try_from(duration.subsec_nanos()).unwrap_or(0),
    }
}

fn proto_unit(unit: Option<Unit>) -> ProtoUnit {
    match unit {
        None => ProtoUnit::Unknown,
        Some(Unit::Second) => ProtoUnit::Second,
        Some(Unit::Minute) => ProtoUnit::Minute,
        Some(Unit::Hour) => ProtoUnit::Hour,
        Some(Unit::Day) => ProtoUnit::Day,
        Some(Unit::Week) => ProtoUnit::Week,
        Some(Unit::Month) => ProtoUnit::Month,
        Some(Unit::Year) => ProtoUnit::Year,
    }
}

/// The unit of a `limit` override; `None` for `UNKNOWN` and values this
/// server does not know.
fn override_unit(unit: i32) -> Option<Unit> {
    use proto::envoy::r#type::v3::RateLimitUnit;
    match RateLimitUnit::try_from(unit).ok()? {
        RateLimitUnit::Unknown => None,
        RateLimitUnit::Second => Some(Unit::Second),
        RateLimitUnit::Minute => Some(Unit::Minute),
        RateLimitUnit::Hour => Some(Unit::Hour),
        RateLimitUnit::Day => Some(Unit::Day),
        RateLimitUnit::Week => Some(Unit::Week),
        RateLimitUnit::Month => Some(Unit::Month),
        RateLimitUnit::Year => Some(Unit::Year),
    }
}

fn descriptor_status(outcome: &DescriptorOutcome) -> DescriptorStatus {
    match outcome {
        DescriptorOutcome::NoRule => DescriptorStatus {
            code: Code::Ok as i32,
            ..DescriptorStatus::default()
        },
        DescriptorOutcome::Unlimited { .. } => DescriptorStatus {
            code: Code::Ok as i32,
            limit_remaining: u32::MAX,
            ..DescriptorStatus::default()
        },
        DescriptorOutcome::Refused { rule, quota, .. } => DescriptorStatus {
            code: if outcome.is_over_limit() {
                Code::OverLimit
            } else {
                Code::Ok
            } as i32,
            current_limit: quota.map(|quota| RateLimit {
                name: rule
                    .as_ref()
                    .map(|rule| rule.name.clone().unwrap_or_default())
                    .unwrap_or_default(),
                requests_per_unit: saturate(quota.requests_per_unit),
                unit: proto_unit(quota.unit) as i32,
            }),
            limit_remaining: 0,
            duration_until_reset: None,
        },
        DescriptorOutcome::Decided {
            rule,
            decision,
            quota,
        } => {
            let until = if decision.is_allowed() {
                decision.reset_after()
            } else {
                decision.retry_after()
            };
            DescriptorStatus {
                code: if outcome.is_over_limit() {
                    Code::OverLimit
                } else {
                    Code::Ok
                } as i32,
                current_limit: Some(RateLimit {
                    name: rule.name.clone().unwrap_or_default(),
                    requests_per_unit: saturate(quota.requests_per_unit),
                    unit: proto_unit(quota.unit) as i32,
                }),
                // 0 on every denial, as envoyproxy/ratelimit answers (Envoy
                // sends it as `x-ratelimit-remaining` on a 429), whatever
                // a smaller request could still take.
                limit_remaining: if decision.is_denied() {
                    0
                } else {
                    saturate(decision.remaining())
                },
                duration_until_reset: Some(proto_duration(until)),
            }
        }
    }
}

/// `x-ratelimit-*` for the limited descriptor with the fewest permits left.
fn headers(statuses: &[DescriptorStatus], names: &ResponseHeaderNames) -> Vec<HeaderValue> {
    let Some(tightest) = statuses
        .iter()
        .filter(|status| status.current_limit.is_some())
        .min_by_key(|status| status.limit_remaining)
    else {
        return Vec::new();
    };
    let limit = tightest
        .current_limit
        .as_ref()
        .map_or(0, |limit| limit.requests_per_unit);
    let reset = tightest.duration_until_reset.map_or(0, |d| {
        // Whole seconds, rounded up: waiting that long is enough.
        d.seconds.saturating_add(i64::from(d.nanos > 0))
    });
    [
        (&names.limit, limit.to_string()),
        (&names.remaining, tightest.limit_remaining.to_string()),
        (&names.reset, reset.to_string()),
    ]
    .into_iter()
    .map(|(key, value)| HeaderValue {
        key: key.clone(),
        value,
        raw_value: Vec::new(),
    })
    .collect()
}
