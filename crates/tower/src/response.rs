//! What a client is told: `429` with `Retry-After` and the IETF RateLimit
//! headers, or the gRPC status `RESOURCE_EXHAUSTED`.
//!
//! # Model
//!
//! - **HTTP**: a denial is `429` with `Retry-After` (the decision's
//!   `retry_after` in whole seconds, rounded up, at least 1: a client told
//!   `0` retries at once and is denied again) and the
//!   draft-ietf-httpapi-ratelimit-headers-11 fields, one item per layer:
//!   `RateLimit-Policy: "default";q=100;w=60` and `RateLimit: "default";r=0;t=30`.
//! - **gRPC** (`content-type: application/grpc*`): a trailers-only answer,
//!   `grpc-status: 8` (`RESOURCE_EXHAUSTED`) with `retry-after` (seconds) and
//!   `grpc-retry-pushback-ms` (milliseconds, rounded up) as metadata; other
//!   rejections map to `INVALID_ARGUMENT`, `INTERNAL` and `UNAVAILABLE`.
//! - **A custom response** ([`on_rejection`](crate::Builder::on_rejection))
//!   builds status, headers and body; the rate-limit headers are added where
//!   the hook did not set them (HTTP only).
//!
//! # Guarantees
//!
//! - `t` is never later than `Retry-After` (the draft's §6), and is sent only
//!   where a decision states it exactly (a denial with nothing left).
//! - Items are appended, never replaced, so stacked layers all reach the
//!   client; give them different [`policy_name`](crate::Builder::policy_name)s.
//! - `r` is the fewest requests left under any limit of an
//!   [`AllOf`](tollgate::AllOf) (the limit that decided), what a client pacing
//!   itself needs; `q`, `r` and `t` may switch from one limit to another
//!   between responses.
//! - `pk` is never sent: it would echo the client's key into logs and caches.
//!
//! # Parameters (on [`Builder`](crate::Builder))
//!
//! - [`policy_name`](crate::Builder::policy_name): `"default"`.
//! - [`policy_quota`](crate::Builder::policy_quota): none; without it `q` is
//!   the decision's `limit` and `w` is not sent (a decision does not carry its
//!   quota's period); with it, whole seconds, checked at build.
//! - [`headers_on_success`](crate::Builder::headers_on_success): off
//!   (formatting the headers costs a few tens of nanoseconds per request).
//!
//! Each parameter of the draft (`q`, `w`, `r`, `t`, `qu`, `pk`) in full, and
//! why one item per layer: `crates/tower/docs/responses.md`.

use std::fmt;
use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::Full;
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use tollgate::Decision;

use crate::backend::BackendError;
use crate::key::{KeyError, KeyErrorKind};

/// The `RateLimit-Policy` header.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// The `RateLimit` header.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// gRPC's retry pushback metadata, in milliseconds.
pub const GRPC_RETRY_PUSHBACK_MS: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// gRPC status codes used here.
const GRPC_INVALID_ARGUMENT: u16 = 3;
const GRPC_RESOURCE_EXHAUSTED: u16 = 8;
const GRPC_INTERNAL: u16 = 13;
const GRPC_UNAVAILABLE: u16 = 14;

/// The bytes gRPC's `grpc-message` percent-encodes: anything outside
/// printable ASCII, and `%` itself.
const GRPC_MESSAGE_ESCAPED: &AsciiSet = &CONTROLS.add(b'%');

/// Why a request was not passed on.
#[derive(Debug)]
#[non_exhaustive]
pub enum Rejection {
    /// The limiter denied it.
    Limited(Decision),
    /// It had no key (see [`KeyError`]).
    NoKey(KeyError),
    /// The backend could not decide.
    Backend(BackendError),
}

impl Rejection {
    /// The HTTP status of the default answer: `429` when limited, the key
    /// error's status, `413` for a cost above the quota, `503` for a backend
    /// failure.
    pub fn status(&self) -> StatusCode {
        match self {
            Rejection::Limited(_) => StatusCode::TOO_MANY_REQUESTS,
            Rejection::NoKey(error) => error.status(),
            Rejection::Backend(BackendError::Cost(_)) => StatusCode::PAYLOAD_TOO_LARGE,
            Rejection::Backend(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The denial, when the limiter denied.
    pub fn decision(&self) -> Option<&Decision> {
        match self {
            Rejection::Limited(decision) => Some(decision),
            _ => None,
        }
    }

    fn grpc_code(&self) -> u16 {
        match self {
            Rejection::Limited(_) | Rejection::Backend(BackendError::Cost(_)) => {
                GRPC_RESOURCE_EXHAUSTED
            }
            Rejection::NoKey(error) if error.kind() == KeyErrorKind::NoConnectionInfo => {
                GRPC_INTERNAL
            }
            Rejection::NoKey(_) => GRPC_INVALID_ARGUMENT,
            Rejection::Backend(_) => GRPC_UNAVAILABLE,
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Limited(decision) => write!(
                f,
                "too many requests: retry after {} s",
                retry_after_secs(decision)
            ),
            Rejection::NoKey(error) => error.fmt(f),
            Rejection::Backend(error) => error.fmt(f),
        }
    }
}

/// A custom answer to a rejection, its body already made [`Bytes`].
pub(crate) type RejectionFn = Box<dyn Fn(&Rejection) -> Response<Full<Bytes>> + Send + Sync>;

/// How the RateLimit headers name and describe the policy.
#[derive(Clone, Debug)]
pub(crate) struct HeaderPolicy {
    /// The policy name as a structured-field string, quotes included.
    pub(crate) name: String,
    /// The advertised quota, `(q, w)`: permits per window of whole seconds.
    pub(crate) quota: Option<(u64, u64)>,
}

impl HeaderPolicy {
    /// Appends this policy's items to `RateLimit-Policy` and `RateLimit` for
    /// `decision`: appended, never replacing, so that the items of stacked
    /// layers all reach the client.
    pub(crate) fn write(&self, decision: &Decision, headers: &mut HeaderMap) {
        let mut policy = String::with_capacity(self.name.len() + 24);
        match self.quota {
            Some((q, w)) => {
                let _ = write!(policy, "{};q={q};w={w}", self.name);
            }
            None => {
                let _ = write!(policy, "{};q={}", self.name, decision.limit());
            }
        }
        let mut current = String::with_capacity(self.name.len() + 24);
        let _ = write!(current, "{};r={}", self.name, decision.remaining());
        if let Some(t) = effective_window_secs(decision) {
            let _ = write!(current, ";t={t}");
        }
        // Both are ASCII by construction (the name was checked at build).
        if let Ok(value) = HeaderValue::try_from(policy) {
            headers.append(RATELIMIT_POLICY, value);
        }
        if let Ok(value) = HeaderValue::try_from(current) {
            headers.append(RATELIMIT, value);
        }
    }
}

/// Appends the `RateLimit-Policy` and `RateLimit` items of one policy
/// named `name` for `decision`, exactly as the layer writes its own (see
/// the module docs), for a server that answers on a proxy's behalf
/// (tollgate-server's forward-auth endpoint). `quota` is `(q, w)`: permits
/// per window of whole seconds, when known.
///
/// Returns `false`, writing nothing, when `name` holds a character outside
/// printable ASCII (it cannot be a structured-field string).
pub fn append_ratelimit_headers(
    name: &str,
    quota: Option<(u64, u64)>,
    decision: &Decision,
    headers: &mut HeaderMap,
) -> bool {
    let Some(name) = sf_string(name) else {
        return false;
    };
    HeaderPolicy { name, quota }.write(decision, headers);
    true
}

/// The `t` of a decision (draft -11 §4.1.2): the seconds within which the
/// client can use no more than `r`, when the decision says it exactly. A
/// denial with nothing left: no request fits before its `retry_after`
/// (whole seconds, rounded up, so never later than `Retry-After`). Otherwise
/// `None`: a decision does not say when its next permit frees up (a token
/// bucket refills continuously), and its time back to full would claim the
/// client can use no more than `r` for a time in which it can.
pub(crate) fn effective_window_secs(decision: &Decision) -> Option<u64> {
    (decision.is_denied() && decision.remaining() == 0)
        .then(|| whole_seconds(decision.retry_after()))
}

/// `name` as a structured-field string (RFC 9651 §3.3.3), or `None` if it
/// has a character outside printable ASCII.
pub(crate) fn sf_string(name: &str) -> Option<String> {
    let mut quoted = String::with_capacity(name.len() + 2);
    quoted.push('"');
    for c in name.chars() {
        if !(' '..='~').contains(&c) {
            return None;
        }
        if c == '"' || c == '\\' {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    Some(quoted)
}

/// Whole seconds, rounded up.
pub(crate) fn whole_seconds(duration: Duration) -> u64 {
    duration
        .as_secs()
        .saturating_add(u64::from(duration.subsec_nanos() > 0))
}

/// `Retry-After` for a denial: whole seconds rounded up, never 0.
pub fn retry_after_secs(decision: &Decision) -> u64 {
    whole_seconds(decision.retry_after()).max(1)
}

/// Whether the request is gRPC, by its content type.
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"))
}

/// The answer to `rejection`.
pub(crate) fn reject(
    rejection: &Rejection,
    grpc: bool,
    policy: &HeaderPolicy,
    hook: Option<&RejectionFn>,
) -> Response<Full<Bytes>> {
    if grpc {
        return grpc_response(rejection, policy);
    }
    let mut response = match hook {
        Some(hook) => hook(rejection),
        None => {
            let mut response = Response::new(Full::new(Bytes::from(format!("{rejection}\n"))));
            *response.status_mut() = rejection.status();
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            response
        }
    };
    if let Rejection::Limited(decision) = rejection {
        add_limit_headers(decision, policy, response.headers_mut());
    }
    response
}

/// `Retry-After` and the RateLimit headers, where not already set.
pub(crate) fn add_limit_headers(
    decision: &Decision,
    policy: &HeaderPolicy,
    headers: &mut HeaderMap,
) {
    if !headers.contains_key(RETRY_AFTER) {
        headers.insert(RETRY_AFTER, HeaderValue::from(retry_after_secs(decision)));
    }
    if !headers.contains_key(RATELIMIT_POLICY) && !headers.contains_key(RATELIMIT) {
        policy.write(decision, headers);
    }
}

fn grpc_response(rejection: &Rejection, policy: &HeaderPolicy) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, HeaderValue::from(rejection.grpc_code()));
    let message = rejection.to_string();
    let encoded = utf8_percent_encode(&message, GRPC_MESSAGE_ESCAPED).to_string();
    if let Ok(value) = HeaderValue::try_from(encoded) {
        headers.insert(GRPC_MESSAGE, value);
    }
    if let Rejection::Limited(decision) = rejection {
        add_limit_headers(decision, policy, headers);
        let pushback = decision.retry_after().as_nanos().div_ceil(1_000_000).max(1);
        headers.insert(
            GRPC_RETRY_PUSHBACK_MS,
            HeaderValue::from(u64::try_from(pushback).unwrap_or(u64::MAX)),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structured_field_strings_are_escaped_or_refused() {
        assert_eq!(sf_string("default").as_deref(), Some("\"default\""));
        assert_eq!(sf_string(r#"a"b\c"#).as_deref(), Some(r#""a\"b\\c""#));
        assert_eq!(sf_string("caf\u{e9}"), None);
        assert_eq!(sf_string("tab\there"), None);
    }

    #[test]
    fn seconds_round_up() {
        assert_eq!(whole_seconds(Duration::ZERO), 0);
        assert_eq!(whole_seconds(Duration::from_nanos(1)), 1);
        assert_eq!(whole_seconds(Duration::from_secs(2)), 2);
        assert_eq!(whole_seconds(Duration::from_millis(2_001)), 3);
        assert_eq!(whole_seconds(Duration::MAX), u64::MAX);
    }

    #[test]
    fn grpc_messages_are_percent_encoded() {
        let encoded = utf8_percent_encode("50% off\nnow \u{e9}", GRPC_MESSAGE_ESCAPED).to_string();
        assert_eq!(encoded, "50%25 off%0Anow %C3%A9");
    }
}
