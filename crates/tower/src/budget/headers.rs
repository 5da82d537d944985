//! What an LLM client is told about its token budgets: OpenAI's
//! `x-ratelimit-*-tokens` headers, draft-11 `RateLimit-Policy` /
//! `RateLimit` items, and on a refusal `Retry-After`, `retry-after-ms` and
//! an OpenAI-style JSON error.
//!
//! # Formats
//!
//! - `x-ratelimit-limit-tokens`: the binding budget's limit (the most tokens
//!   at once: its burst), an integer.
//! - `x-ratelimit-remaining-tokens`: the tokens it has left, an integer.
//! - `x-ratelimit-reset-tokens`: the time until it is full again, in
//!   OpenAI's format, which is Go's `time.Duration` text: `6m0s`, `1s`,
//!   `120ms`, `0s`. Written at whole milliseconds below a second and whole
//!   seconds above (rounded up), so that Go's `time.ParseDuration` and the
//!   usual `(\d+)(h|m|s|ms)` readers both parse it.
//! - **The binding budget** of several: on an admission, the one with the
//!   fewest tokens left; on a refusal, the refusing one with the longest
//!   wait. The values can switch from one budget to another between
//!   responses (per minute, then per day as the day runs low); the
//!   remaining count is always the fewest tokens any budget has left.
//! - `RateLimit-Policy` / `RateLimit`: one item per budget, named by it, as
//!   the rate-limit layer writes its own ([`response`](crate::response)):
//!   `"per-minute";q=10000;w=60` and `"per-minute";r=9500`. `w` is sent
//!   when the budget runs one quota whose period is whole seconds.
//! - A refusal: `429`, `Retry-After` in whole seconds (at least 1),
//!   `retry-after-ms` (the OpenAI SDKs read it first), and the body
//!   `{"error":{"message":…,"type":"tokens","param":null,"code":"rate_limit_exceeded"}}`.
//!   A request whose estimate can never fit is `413` with
//!   `"code":"request_too_large"`; a request without a key `400` (or
//!   `500` when the server attached no connection address), type
//!   `invalid_request_error`.

use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::Full;
use tollgate::Decision;

use crate::response::{HeaderPolicy, retry_after_secs};

/// OpenAI's `x-ratelimit-limit-tokens`.
pub const X_RATELIMIT_LIMIT_TOKENS: HeaderName =
    HeaderName::from_static("x-ratelimit-limit-tokens");
/// OpenAI's `x-ratelimit-remaining-tokens`.
pub const X_RATELIMIT_REMAINING_TOKENS: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining-tokens");
/// OpenAI's `x-ratelimit-reset-tokens`.
pub const X_RATELIMIT_RESET_TOKENS: HeaderName =
    HeaderName::from_static("x-ratelimit-reset-tokens");
/// `retry-after-ms`, read by the OpenAI SDKs before `Retry-After`.
pub const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");

/// A duration in OpenAI's (Go's) format, rounded up: whole milliseconds
/// below a second (`120ms`), whole seconds from one second
/// (`1s`, `6m0s`, `1h0m5s`), `0s` for zero.
pub fn openai_duration(duration: Duration) -> String {
    if duration.is_zero() {
        return "0s".to_owned();
    }
    if duration < Duration::from_secs(1) {
        let millis = duration.as_nanos().div_ceil(1_000_000);
        return if millis >= 1_000 {
            "1s".to_owned()
        } else {
            format!("{millis}ms")
        };
    }
    let secs = crate::response::whole_seconds(duration);
    let (hours, minutes, seconds) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut text = String::with_capacity(12);
    if hours > 0 {
        let _ = write!(text, "{hours}h{minutes}m");
    } else if minutes > 0 {
        let _ = write!(text, "{minutes}m");
    }
    let _ = write!(text, "{seconds}s");
    text
}

/// One budget's state for the headers.
pub(crate) struct Item<'a> {
    pub(crate) policy: &'a HeaderPolicy,
    pub(crate) decision: Decision,
}

/// Writes the OpenAI headers of `binding` and every budget's RateLimit
/// items.
pub(crate) fn write(items: &[Item<'_>], binding: &Decision, headers: &mut HeaderMap) {
    headers.insert(X_RATELIMIT_LIMIT_TOKENS, HeaderValue::from(binding.limit()));
    headers.insert(
        X_RATELIMIT_REMAINING_TOKENS,
        HeaderValue::from(binding.remaining()),
    );
    if let Ok(value) = HeaderValue::try_from(openai_duration(binding.reset_after())) {
        headers.insert(X_RATELIMIT_RESET_TOKENS, value);
    }
    for item in items {
        item.policy.write(&item.decision, headers);
    }
}

/// The `429` for a refusal by the budget named `name`.
pub(crate) fn refused(name: &str, items: &[Item<'_>], binding: &Decision) -> Response<Full<Bytes>> {
    let wait = binding.retry_after();
    let message = format!(
        "Rate limit reached for tokens ({name}): limit {}, remaining {}. Please try again in {}.",
        binding.limit(),
        binding.remaining(),
        openai_duration(wait),
    );
    let mut response = error(
        StatusCode::TOO_MANY_REQUESTS,
        &message,
        "tokens",
        "rate_limit_exceeded",
    );
    let headers = response.headers_mut();
    headers.insert(RETRY_AFTER, HeaderValue::from(retry_after_secs(binding)));
    let millis = u64::try_from(wait.as_nanos().div_ceil(1_000_000))
        .unwrap_or(u64::MAX)
        .max(1);
    headers.insert(RETRY_AFTER_MS, HeaderValue::from(millis));
    write(items, binding, headers);
    response
}

/// An OpenAI-style error response.
pub(crate) fn error(
    status: StatusCode,
    message: &str,
    kind: &str,
    code: &str,
) -> Response<Full<Bytes>> {
    let body = serde_json::json!({
        "error": { "message": message, "type": kind, "param": null, "code": code }
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_openai_s_format() {
        assert_eq!(openai_duration(Duration::ZERO), "0s");
        assert_eq!(openai_duration(Duration::from_nanos(1)), "1ms");
        assert_eq!(openai_duration(Duration::from_millis(120)), "120ms");
        assert_eq!(openai_duration(Duration::from_micros(999_999)), "1s");
        assert_eq!(openai_duration(Duration::from_secs(1)), "1s");
        assert_eq!(openai_duration(Duration::from_millis(1_001)), "2s");
        assert_eq!(openai_duration(Duration::from_secs(360)), "6m0s");
        assert_eq!(openai_duration(Duration::from_secs(3_605)), "1h0m5s");
        assert_eq!(openai_duration(Duration::from_secs(86_400)), "24h0m0s");
        assert_eq!(openai_duration(Duration::MAX), "5124095576030431h0m15s");
    }
}
