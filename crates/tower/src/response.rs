//! What a client is told: `429` with `Retry-After` and the IETF RateLimit
//! headers, or the gRPC status `RESOURCE_EXHAUSTED`.
//!
//! # Decisions
//!
//! - **`Retry-After`** is the decision's `retry_after` in whole seconds,
//!   rounded up, and at least 1 on a denial: a client told `0` retries at
//!   once and is denied again.
//! - **`RateLimit-Policy` and `RateLimit`** follow
//!   draft-ietf-httpapi-ratelimit-headers-11 (23 May 2026, the latest
//!   revision): structured-field lists of one item per policy (§3, §4),
//!   `RateLimit-Policy: "default";q=100;w=60` and
//!   `RateLimit: "default";r=0;t=30`. Each parameter as -11 defines it:
//!   - `q` (§3.1.1), the quota: the
//!     [`policy_quota`](crate::Builder::policy_quota)'s limit when one is
//!     set, else the decision's `limit` (the most permits at once);
//!   - `w` (§3.1.3), the quota's window in whole seconds, never 0: sent only
//!     with a [`policy_quota`](crate::Builder::policy_quota), whose period
//!     must be whole seconds (checked at build), because a decision does not
//!     carry its quota's period. `q` and `w` together are then a quota a
//!     client can use: 10 per second with a burst of 20 is `q=10;w=1`;
//!   - `r` (§4.1.1), the available quota: the decision's `remaining`;
//!   - `t` (§4.1.2), the *effective window*: the seconds within which the
//!     client can use no more than `r`. Sent where a decision states it
//!     exactly: on a denial with nothing left, the decision's `retry_after`
//!     rounded up, so never later than `Retry-After` (§6: `Retry-After`
//!     must not point earlier than the end of the effective window). It is
//!     not the time until the quota is full again (a daily limit's `t` on a
//!     `429` is the wait for the next permit, not for the whole day), and it
//!     is left out (it is optional) on admissions and on denials of a
//!     request that cost more than remained: there no decision says when the
//!     next permit frees up (a token bucket refills continuously);
//!   - `qu` (§3.1.2) is not sent: the unit is the default, requests, or
//!     whatever the layer's [`cost`](crate::Builder::cost) counts;
//!   - `pk` (§3.1.4, §4.1.3) is never sent: it would echo the client's key
//!     (an API key) into logs and caches.
//! - **Appended, never replaced.** Each layer appends its item to the
//!   fields already in the response (a list may be split over several field
//!   lines, §3 and §4), so that stacked layers (an outer per-client limit, an
//!   inner global one) all reach the client, and the `429` of an inner layer
//!   keeps the item of the policy that denied it. Give stacked layers
//!   different [`policy_name`](crate::Builder::policy_name)s.
//! - **One policy item per layer, the limit that decided.** A backend
//!   answers with one [`Decision`], and for an [`AllOf`](tollgate::AllOf)
//!   the core's decision is that of the limit that bound: on a denial the
//!   denying limit with the longest wait, on an admission the limit with the
//!   fewest permits left. The other limits' counts are not in the decision,
//!   so `r` (and `t`, and `q` without a `policy_quota`) can switch from one
//!   limit to another between responses, as "10 per second AND 1,000 per
//!   day" runs low on its day. `r` is then always the fewest requests left
//!   under any of the limits, which is what a client pacing itself needs.
//! - They are sent on every denial and, if
//!   [`headers_on_success`](crate::Builder::headers_on_success), on every
//!   admission (off by default: formatting them costs a few tens of
//!   nanoseconds per request).
//! - **gRPC** requests (`content-type: application/grpc*`) get a
//!   trailers-only gRPC answer instead: HTTP `200`, `grpc-status: 8`
//!   (`RESOURCE_EXHAUSTED`), a percent-encoded `grpc-message`, and the
//!   retry information as metadata: `retry-after` (seconds) and
//!   `grpc-retry-pushback-ms` (milliseconds, rounded up, as gRPC's retry
//!   policy reads it). Other rejections map to `INVALID_ARGUMENT` (a
//!   client's missing key), `INTERNAL` (server misconfiguration) and
//!   `UNAVAILABLE` (backend down). The custom response hook does not apply
//!   to gRPC: a gRPC client reads only the status and metadata.
//! - **A custom response** ([`on_rejection`](crate::Builder::on_rejection))
//!   builds the status, headers and body; the rate-limit headers are then
//!   added where the hook did not set them.

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
