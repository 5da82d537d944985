//! The HTTP routes of concurrency rules: take a lease, give it back
//! (routed by [`super::router`]; the leases are [`crate::concurrency`]'s).
//!
//! | route | body | answers |
//! |---|---|---|
//! | `POST /v1/acquire` | `{"domain": "api", "entries": [{"key": "tenant", "value": "a"}], "cost": 1}` | 200 `{"lease", "ttl_ms", "limit", "in_flight", "rule"}`; 429 + `Retry-After` when no slot is free; 404 when no concurrency rule matches |
//! | `POST /v1/release` | `{"lease": "…"}` | 200 `{"released": true}`; 404 when the lease is not held |
//!
//! # Decisions
//!
//! - A lease holds `cost` (default 1) slots of the descriptor's bucket
//!   until released or until the rule's `lease_ttl` passes (`ttl_ms` in
//!   the answer), whichever comes first: a caller that dies frees its
//!   slots after at most the TTL. Callers whose work may outlive the TTL
//!   should configure a longer one.
//! - The descriptor is matched as `/v1/check` matches it, and must reach a
//!   rule with `concurrency:`; otherwise **404** naming the domain and the
//!   entries (a typo must not read as "no limit": a lease for nothing
//!   would be failing open). The rule's rate limit is not decided here
//!   (`/v1/check` does that).
//! - No slot free: **429** with `Retry-After` (whole seconds, rounded up:
//!   when the bucket's first lease expires, a bound) and `retry_after_ms`.
//!   A cost above the limit can never be granted: 429 with
//!   `retry_after_ms: null` and no `Retry-After`, as `/v1/check` answers a
//!   cost above capacity `OVER_LIMIT`. Shadow mode does not apply to
//!   leases (a lease is a resource the caller holds, not an answer).
//! - Release is **idempotent**: releasing a lease twice, an expired lease
//!   or an id that was never granted is **404** ("not held") and changes
//!   nothing.
//! - Bad bodies are 400 `{"error": …}`, the lease store unavailable 503
//!   with `Retry-After`, overload 503 at once; never a 500. The bearer
//!   token and the body limit apply as on every route.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::concurrency::{Denial, Released};
use crate::metrics::Api;
use crate::service::Service;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AcquireBody {
    domain: String,
    entries: Vec<EntryBody>,
    #[serde(default)]
    cost: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryBody {
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseBody {
    lease: String,
}

#[derive(Serialize)]
struct Lease {
    lease: String,
    ttl_ms: u64,
    limit: u32,
    /// Slots held in the bucket, this lease's included; `null` on Redis.
    in_flight: Option<u32>,
    rule: String,
}

#[derive(Serialize)]
struct Refused {
    error: String,
    limit: Option<u32>,
    in_flight: Option<u32>,
    /// `null` when the cost can never be granted.
    retry_after_ms: Option<u64>,
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    #[derive(Serialize)]
    struct Body {
        error: String,
    }
    (
        status,
        axum::Json(Body {
            error: message.into(),
        }),
    )
        .into_response()
}

/// Milliseconds, rounded up.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

fn with_retry_after(mut response: Response, after: Duration) -> Response {
    let seconds = duration_secs_ceil(after).max(1);
    if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

fn duration_secs_ceil(duration: Duration) -> u64 {
    let secs = duration.as_secs();
    if duration.subsec_nanos() > 0 {
        secs.saturating_add(1)
    } else {
        secs
    }
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, Box<Response>> {
    serde_json::from_slice(body)
        .map_err(|e| Box::new(error(StatusCode::BAD_REQUEST, e.to_string())))
}

/// `POST /v1/acquire` (module docs).
pub(super) async fn acquire(State(service): State<Arc<Service>>, body: Bytes) -> Response {
    let Some(_admitted) = service.admit(Api::Http) else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "overloaded");
    };
    let body: AcquireBody = match parse(&body) {
        Ok(body) => body,
        Err(response) => return *response,
    };
    let cost = body.cost.unwrap_or(1);
    if cost == 0 {
        return error(StatusCode::BAD_REQUEST, "cost: must be at least 1");
    }
    let limits = service.request_limits();
    if body.entries.is_empty() {
        return error(StatusCode::BAD_REQUEST, "entries: needs at least one entry");
    }
    if body.entries.len() > limits.max_entries {
        return error(
            StatusCode::BAD_REQUEST,
            format!("entries: more than {}", limits.max_entries),
        );
    }
    for (i, entry) in body.entries.iter().enumerate() {
        if entry.key.is_empty() {
            return error(StatusCode::BAD_REQUEST, format!("entries[{i}].key: empty"));
        }
        if entry.key.len() > limits.max_key_bytes || entry.value.len() > limits.max_key_bytes {
            return error(
                StatusCode::BAD_REQUEST,
                format!("entries[{i}]: longer than {} bytes", limits.max_key_bytes),
            );
        }
    }
    let rules = service.rules();
    let entries = body
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()));
    let found = rules
        .find_bucket(&body.domain, entries)
        .and_then(|(rule, bucket)| rule.concurrency.map(|config| (rule, bucket, config)));
    let Some((rule, bucket, config)) = found else {
        let entries: Vec<String> = body
            .entries
            .iter()
            .map(|e| format!("{}={}", e.key, e.value))
            .collect();
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "no concurrency rule matches domain '{}' entries [{}]",
                body.domain,
                entries.join(", ")
            ),
        );
    };
    let granted = match u32::try_from(cost) {
        Ok(cost) => service.leases().acquire(rule, config, &bucket, cost).await,
        Err(_) => Err(Denial::Cost {
            limit: config.limit,
        }),
    };
    match granted {
        Ok(granted) => axum::Json(Lease {
            lease: granted.lease,
            ttl_ms: millis(granted.ttl),
            limit: granted.limit,
            in_flight: granted.in_flight,
            rule: rule.id.to_string(),
        })
        .into_response(),
        Err(
            denial @ Denial::Full {
                limit,
                in_flight,
                retry_after,
            },
        ) => with_retry_after(
            (
                StatusCode::TOO_MANY_REQUESTS,
                axum::Json(Refused {
                    error: denial.to_string(),
                    limit: Some(limit),
                    in_flight: Some(in_flight),
                    retry_after_ms: Some(millis(retry_after)),
                }),
            )
                .into_response(),
            retry_after,
        ),
        Err(denial @ Denial::Cost { limit }) => (
            StatusCode::TOO_MANY_REQUESTS,
            axum::Json(Refused {
                error: format!("{denial}: it can never be granted"),
                limit: Some(limit),
                in_flight: None,
                retry_after_ms: None,
            }),
        )
            .into_response(),
        Err(denial @ Denial::Unavailable { retry_after }) => with_retry_after(
            error(StatusCode::SERVICE_UNAVAILABLE, denial.to_string()),
            retry_after,
        ),
    }
}

/// `POST /v1/release` (module docs).
pub(super) async fn release(State(service): State<Arc<Service>>, body: Bytes) -> Response {
    let Some(_admitted) = service.admit(Api::Http) else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "overloaded");
    };
    let body: ReleaseBody = match parse(&body) {
        Ok(body) => body,
        Err(response) => return *response,
    };
    match service.leases().release(&body.lease).await {
        Ok(Released::Freed) => {
            #[derive(Serialize)]
            struct Answer {
                released: bool,
            }
            axum::Json(Answer { released: true }).into_response()
        }
        Ok(Released::Unknown) => error(
            StatusCode::NOT_FOUND,
            "the lease is not held: unknown, already released or expired",
        ),
        Err(unavailable) => with_retry_after(
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the lease store is unavailable: the lease expires after its TTL",
            ),
            unavailable.retry_after,
        ),
    }
}
