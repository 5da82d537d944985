//! What the proxy is told: pass (`200`), refuse (`429`, or `403` in the
//! nginx mode) with `Retry-After`, and the IETF `RateLimit` /
//! `RateLimit-Policy` headers in the tower layer's format
//! ([`tollgate_tower::response`]).

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tollgate_tower::response::{append_ratelimit_headers, retry_after_secs};

use crate::request::{Outcome, Status};

/// The status a refusal is answered with (the URL's `deny_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyStatus {
    /// `429 Too Many Requests`: Caddy, Traefik, HAProxy, Envoy's
    /// `ext_authz` copy it to the client. The default.
    TooManyRequests,
    /// `403 Forbidden`: nginx's `auth_request` takes only 2xx, 401 and 403;
    /// its `error_page 403` recipe turns it into the client's 429.
    Forbidden,
}

impl DenyStatus {
    /// `429` or `403`, from the URL's `deny_status`.
    pub fn parse(code: u16) -> Option<DenyStatus> {
        match code {
            429 => Some(DenyStatus::TooManyRequests),
            403 => Some(DenyStatus::Forbidden),
            _ => None,
        }
    }

    fn status(self) -> StatusCode {
        match self {
            DenyStatus::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            DenyStatus::Forbidden => StatusCode::FORBIDDEN,
        }
    }
}

/// The answer to `outcome`: pass unless a descriptor is over its limit.
pub fn answer(outcome: &Outcome, deny: DenyStatus) -> Response {
    let mut headers = HeaderMap::new();
    let mut retry_after: Option<u64> = None;
    for status in &outcome.statuses {
        if let Status::Decided {
            rule,
            decision,
            quota,
        } = status
        {
            // Shadow mode changes nothing a client sees.
            if rule.shadow_mode {
                continue;
            }
            append_ratelimit_headers(&rule.id, policy_quota(quota), decision, &mut headers);
            if status.is_over_limit() {
                retry_after = retry_after.max(Some(retry_after_secs(decision)));
            }
        }
    }
    if !outcome.is_over_limit() {
        return (StatusCode::OK, headers).into_response();
    }
    let body = match retry_after {
        Some(seconds) => {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            format!("too many requests: retry after {seconds} s\n")
        }
        // Only descriptors that can never pass (a rule admitting nothing,
        // a cost above its capacity): no time helps.
        None => "too many requests\n".to_owned(),
    };
    refusal(deny, headers, body)
}

/// The answer when the backend could not decide at all (a Redis backend
/// never gets here: its failure policy decides, see
/// [`crate::redis_backend`]): a refusal, never a pass, with `Retry-After: 1`.
/// `503` by default, which Caddy, Traefik and HAProxy's script copy to the
/// client; `403` in the nginx mode, where a 5xx would be nginx's own 500.
pub fn unavailable(deny: DenyStatus, message: &str) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    let status = match deny {
        DenyStatus::TooManyRequests => StatusCode::SERVICE_UNAVAILABLE,
        DenyStatus::Forbidden => StatusCode::FORBIDDEN,
    };
    (
        status,
        headers,
        format!("rate limiter unavailable: {message}\n"),
    )
        .into_response()
}

fn refusal(deny: DenyStatus, mut headers: HeaderMap, body: String) -> Response {
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    (deny.status(), headers, Body::from(body)).into_response()
}

/// `(q, w)` of `RateLimit-Policy`: the quota's limit per window, when the
/// window is whole seconds.
fn policy_quota(quota: &crate::config::QuotaConfig) -> Option<(u64, u64)> {
    let period = quota.period;
    (period.subsec_nanos() == 0 && period.as_secs() > 0)
        .then_some((quota.requests_per_unit, period.as_secs()))
}
