//! The answers to a request refused a slot (see the [module docs](super)).

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::Full;

use super::config::Refusal;

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
const GRPC_RETRY_PUSHBACK_MS: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");
const GRPC_INVALID_ARGUMENT: &str = "3";
const GRPC_RESOURCE_EXHAUSTED: &str = "8";

/// Whether the request is gRPC (`content-type: application/grpc*`).
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"))
}

/// Whole seconds, rounded up, at least 1.
fn seconds(hint: Duration) -> u64 {
    hint.as_nanos().div_ceil(1_000_000_000).max(1) as u64
}

/// The answer to a request that found no slot.
pub(crate) fn refused(refusal: Refusal, grpc: bool) -> Response<Full<Bytes>> {
    let hint = match refusal {
        Refusal::ServiceUnavailable { retry_after } => retry_after,
        Refusal::TooManyRequests { retry_after } => Some(retry_after),
    };
    if grpc {
        let mut response = grpc_answer(GRPC_RESOURCE_EXHAUSTED, "concurrency limit reached");
        if let Some(hint) = hint {
            let headers = response.headers_mut();
            headers.insert(RETRY_AFTER, HeaderValue::from(seconds(hint)));
            let ms = hint.as_nanos().div_ceil(1_000_000).max(1) as u64;
            headers.insert(GRPC_RETRY_PUSHBACK_MS, HeaderValue::from(ms));
        }
        return response;
    }
    let status = match refusal {
        Refusal::ServiceUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        Refusal::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
    };
    let mut response = Response::new(Full::new(Bytes::from_static(
        b"too many requests in flight\n",
    )));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Some(hint) = hint {
        headers.insert(RETRY_AFTER, HeaderValue::from(seconds(hint)));
    }
    response
}

/// The answer to a request without a key.
pub(crate) fn no_key(grpc: bool) -> Response<Full<Bytes>> {
    if grpc {
        return grpc_answer(GRPC_INVALID_ARGUMENT, "no key for the concurrency limit");
    }
    let mut response = Response::new(Full::new(Bytes::from_static(
        b"the request carries no key for the concurrency limit\n",
    )));
    *response.status_mut() = StatusCode::BAD_REQUEST;
    response
}

/// A trailers-only gRPC answer: HTTP 200, the status in the headers.
fn grpc_answer(code: &'static str, message: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, HeaderValue::from_static(code));
    // The messages are ASCII without '%': no percent-encoding needed.
    headers.insert(GRPC_MESSAGE, HeaderValue::from_static(message));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_at_least_one() {
        assert_eq!(seconds(Duration::ZERO), 1);
        assert_eq!(seconds(Duration::from_millis(1_001)), 2);
        assert_eq!(seconds(Duration::from_secs(3)), 3);
    }

    #[test]
    fn refusals_map_to_status_and_headers() {
        let plain = refused(Refusal::ServiceUnavailable { retry_after: None }, false);
        assert_eq!(plain.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(plain.headers().get(RETRY_AFTER).is_none());
        let busy = refused(
            Refusal::TooManyRequests {
                retry_after: Duration::from_millis(1_500),
            },
            false,
        );
        assert_eq!(busy.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(busy.headers()[RETRY_AFTER], "2");
        let grpc = refused(
            Refusal::TooManyRequests {
                retry_after: Duration::from_millis(1_500),
            },
            true,
        );
        assert_eq!(grpc.status(), StatusCode::OK);
        assert_eq!(grpc.headers()[GRPC_STATUS], "8");
        assert_eq!(grpc.headers()[GRPC_RETRY_PUSHBACK_MS], "1500");
    }
}
