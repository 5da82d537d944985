//! What the proxy is told: pass (`200`), refuse (`429`, or `403` in the
//! nginx mode) with `Retry-After`, and the IETF `RateLimit` /
//! `RateLimit-Policy` headers in the tower layer's format
//! ([`tollgate_tower::response`]).

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tollgate_tower::response::{append_ratelimit_headers, retry_after_secs};

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::forwarded::Unreadable;
use crate::metrics::{Api, Refusal};
use crate::request::{Outcome, Status};
use crate::service::Service;

/// The status a refusal is answered with (the URL's `;deny_status=`).
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
    /// `429` or `403`, from the URL's `;deny_status=`.
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
    fold(&mut headers, RATELIMIT);
    fold(&mut headers, RATELIMIT_POLICY);
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

const RATELIMIT: &str = "ratelimit";
const RATELIMIT_POLICY: &str = "ratelimit-policy";

/// Folds every `name` line into one, its items joined by `, ` (both are
/// structured-field lists, where that is the same value): nginx's
/// `$upstream_http_*` and HAProxy's Lua read only a header's first line,
/// so one line per limit would reach the client as its first limit alone.
fn fold(headers: &mut HeaderMap, name: &'static str) {
    if headers.get_all(name).iter().nth(1).is_none() {
        return;
    }
    let items: Vec<&[u8]> = headers
        .get_all(name)
        .iter()
        .map(HeaderValue::as_bytes)
        .collect();
    let folded = items.join(&b", "[..]);
    let folded = HeaderValue::from_bytes(&folded).expect("header values joined by ', '");
    headers.insert(name, folded);
}

/// The answer to a forwarded request that cannot be read
/// ([`Unreadable`]): the proxy's misconfiguration is a `400` whatever
/// `deny_status` (nginx shows it as its 500: an error the operator must
/// see); a client's path that cannot be matched safely is a `400`, or a
/// `403` in the nginx mode (refused as a limit is, without `Retry-After`).
/// Never a pass.
pub fn unreadable(service: &Service, deny: DenyStatus, unreadable: &Unreadable) -> Response {
    service.metrics().refused(Api::Http, Refusal::Invalid);
    let status = match deny {
        DenyStatus::Forbidden if !unreadable.is_configuration() => StatusCode::FORBIDDEN,
        _ => StatusCode::BAD_REQUEST,
    };
    if unreadable.is_configuration() {
        warn_of_misconfiguration(unreadable);
    }
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    (status, headers, format!("forward-auth: {unreadable}\n")).into_response()
}

/// At most one WARN line a minute for a misconfigured proxy: every call
/// fails the same way.
fn warn_of_misconfiguration(unreadable: &Unreadable) {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    let now = Instant::now();
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if last.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(60)) {
        *last = Some(now);
        tracing::warn!("forward-auth: {unreadable}");
    }
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
