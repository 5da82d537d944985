//! OTLP traces (`TRACING_ENABLED=true`, see
//! [`crate::config::telemetry`]): a span per decision, as
//! envoyproxy/ratelimit's `ShouldRateLimit Execution` span, exported in
//! batches over OTLP/HTTP (protobuf) or OTLP/gRPC.
//!
//! Each span is named `ShouldRateLimit Execution`, kind server, covers the
//! decision from the decoded request to the answer, and carries `domain`
//! (as envoyproxy/ratelimit's), `api` (`grpc` or `http`), `descriptors`
//! (how many) and `overall_code` (`OK` or `OVER_LIMIT`); a request refused
//! as invalid or that the backend could not decide has an error status.
//! The resource names `service.name` (`TRACING_SERVICE_NAME`),
//! `service.namespace` and `service.instance.id` (random when not given);
//! spans are sampled parent-based at `TRACING_SAMPLING_RATE`, as
//! envoyproxy/ratelimit's.
//!
//! # Decisions
//!
//! - The exporter is `opentelemetry-otlp`, batched by the SDK's processor
//!   on the server's tokio runtime (its thread-based batcher cannot drive
//!   the async HTTP and gRPC clients).
//! - A decision's span has no parent: tollgate does not read the caller's
//!   `traceparent` / B3 headers yet (envoyproxy/ratelimit does, through
//!   `otelgrpc`), so its spans start their own traces.
//! - Export failures are the SDK's to log; they never delay or change a
//!   decision. At shutdown the spans still queued are sent (bounded by the
//!   SDK's export timeout).

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _, TracerProvider as _};
use opentelemetry_otlp::{ExporterBuildError, Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};

use crate::config::telemetry::{OtlpProtocol, TracingSettings};
use crate::metrics::Api;

/// The span name, envoyproxy/ratelimit's.
pub const SPAN_NAME: &str = "ShouldRateLimit Execution";

/// The tracer of the decisions.
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl std::fmt::Debug for Traces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traces").finish_non_exhaustive()
    }
}

/// How a decision ended, for its span.
#[derive(Debug, Clone, Copy)]
pub enum Ended {
    /// Answered: `over_limit` if any descriptor was.
    Decided {
        /// The overall code is `OVER_LIMIT`.
        over_limit: bool,
    },
    /// Refused as invalid.
    Invalid,
    /// The backend could not decide.
    BackendError,
}

impl Traces {
    /// Starts the exporter. Must run inside the server's tokio runtime.
    ///
    /// # Errors
    ///
    /// The exporter cannot be built (a bad endpoint).
    pub fn start(settings: &TracingSettings) -> Result<Traces, ExporterBuildError> {
        let exporter = match settings.protocol {
            OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(settings.endpoint.clone())
                .build(),
            OtlpProtocol::Http => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(settings.endpoint.clone())
                .build(),
        }?;
        let processor =
            BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
        let instance = if settings.service_instance_id.is_empty() {
            random_id()
        } else {
            settings.service_instance_id.clone()
        };
        let mut attributes = vec![
            KeyValue::new("service.name", settings.service_name.clone()),
            KeyValue::new("service.instance.id", instance),
        ];
        if !settings.service_namespace.is_empty() {
            attributes.push(KeyValue::new(
                "service.namespace",
                settings.service_namespace.clone(),
            ));
        }
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                settings.sampling_rate,
            ))))
            .with_resource(
                Resource::builder_empty()
                    .with_attributes(attributes)
                    .build(),
            )
            .build();
        let tracer = provider.tracer("tollgate");
        Ok(Traces { provider, tracer })
    }

    /// Records the span of one decision that took `elapsed` until now.
    pub fn decision(
        &self,
        api: Api,
        domain: &str,
        descriptors: usize,
        elapsed: Duration,
        ended: Ended,
    ) {
        let end = SystemTime::now();
        let start = end.checked_sub(elapsed).unwrap_or(end);
        let mut attributes = vec![
            KeyValue::new("domain", domain.to_owned()),
            KeyValue::new(
                "api",
                match api {
                    Api::Grpc => "grpc",
                    Api::Http => "http",
                },
            ),
            KeyValue::new(
                "descriptors",
                i64::try_from(descriptors).unwrap_or(i64::MAX),
            ),
        ];
        if let Ended::Decided { over_limit } = ended {
            attributes.push(KeyValue::new(
                "overall_code",
                if over_limit { "OVER_LIMIT" } else { "OK" },
            ));
        }
        let mut span = self
            .tracer
            .span_builder(SPAN_NAME)
            .with_kind(SpanKind::Server)
            .with_start_time(start)
            .with_attributes(attributes)
            .start(&self.tracer);
        match ended {
            Ended::Decided { .. } => {}
            Ended::Invalid => span.set_status(Status::error("invalid request")),
            Ended::BackendError => span.set_status(Status::error("the backend could not decide")),
        }
        span.end_with_timestamp(end);
    }

    /// Sends the spans still queued and stops the exporter.
    pub async fn shutdown(&self) {
        let provider = self.provider.clone();
        // The SDK's shutdown blocks until its batch task (on this runtime)
        // has exported: off the runtime's workers.
        let result = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(error)) = result {
            tracing::warn!(%error, "traces: shutdown");
        }
    }
}

/// A random id formatted as a UUID, for `service.instance.id` when none is
/// given (envoyproxy/ratelimit draws a UUID): the standard library's
/// randomly keyed hasher, twice.
fn random_id() -> String {
    let half = || {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        hasher.finish()
    };
    let id = (u128::from(half()) << 64) | u128::from(half());
    let hex = format!("{id:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}
