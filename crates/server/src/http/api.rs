//! tollgate's own HTTP API: the JSON decision (`POST /v1/check`), the rules
//! in force (`GET /v1/rules`), the probes (`/healthz`, `/readyz`),
//! `/metrics` and the status page's numbers (`/status.json`), and the
//! bearer token in front of them. Routed by [`super::router::api_routes`].
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/check` | the full decision for a domain and descriptors |
//! | `GET /v1/rules` | the rules in force |
//! | `GET /healthz` | 200 while the process serves |
//! | `GET /readyz` | 200 while it takes traffic, 503 once shutting down (and, with the backend's `health_check: true`, while Redis does not answer) |
//! | `GET /metrics` | Prometheus text 0.0.4, or OpenMetrics 1.0.0 when `Accept` asks for it ([`crate::metrics::text`]) |
//! | `GET /status.json` | the status page's numbers ([`crate::status`]) |
//!
//! `POST /v1/check` takes
//! `{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "alice"}], "cost": 2}], "cost": 1, "dry_run": false}`
//! (`cost`, per request and per descriptor, defaults to 1; `dry_run: true`
//! looks without taking; a descriptor's `"limit": {"requests_per_unit": 10,
//! "unit": "minute"}` is Envoy's limit override, see [`crate::service`])
//! and answers 200 with `overall_code` (`OK` or
//! `OVER_LIMIT`) and one status per descriptor: the decision is the body,
//! not the HTTP status, so that 4xx always means a bad request.
//!
//! # Decisions
//!
//! - A cost of 0 is refused (400): "look without taking" is said with
//!   `dry_run`, so that a client computing a cost of 0 by mistake learns.
//! - Budgets (`budget:` rules, [`crate::config::budget`]) need no route of
//!   their own: `dry_run: true` looks (refused once overspent), and a
//!   `cost` is a charge (recorded whether or not it fits; `allowed: false`
//!   when it went over), so an application checks before a request and
//!   charges the tokens after it on `/v1/check`.
//! - A descriptor that cannot be decided as sent (an oversize key or
//!   value, a cost above its rule's capacity, a limit of 0) is
//!   `OVER_LIMIT` with a `refused` reason, the other descriptors decided:
//!   see [`crate::service`]. Only a body that is not a request is 400.
//! - Every bad input is 400 with `{"error": "..."}` (also a JSON type error,
//!   where axum's `Json` would say 422), a body above `max_request_bytes`
//!   413, a missing or wrong token 401, overload 503 at once, a backend
//!   failure 503. Never a 500.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Bytes;
use axum::extract::{FromRef, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::config::{QuotaConfig, Unit};
use crate::metrics::{Api, Refusal};
use crate::service::{CheckError, CheckRequest, Descriptor, LimitOverride, Service, Status};

/// The API's state: the service, the bearer token (`None`: none asked)
/// and the flag `/readyz` reads.
#[derive(Clone)]
pub(super) struct ApiState {
    pub(super) service: Arc<Service>,
    pub(super) token: Option<Arc<str>>,
    pub(super) ready: Arc<AtomicBool>,
}

/// The doors that need only the service (leases, forward-auth) take it
/// from the API's state.
impl FromRef<ApiState> for Arc<Service> {
    fn from_ref(state: &ApiState) -> Arc<Service> {
        Arc::clone(&state.service)
    }
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

/// The bearer token, when the server has one: 401 with
/// `WWW-Authenticate: Bearer` otherwise, counted as unauthenticated.
pub(super) async fn require_token(
    State(state): State<ApiState>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(token) = &state.token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        if !given.is_some_and(|given| crate::auth::token_matches(given, token)) {
            state
                .service
                .metrics()
                .refused(Api::Http, Refusal::Unauthenticated);
            let mut response = error(StatusCode::UNAUTHORIZED, "a valid bearer token is required");
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return response;
        }
    }
    next.run(request).await
}

/// `/healthz`: 200 while the process serves.
pub(super) async fn healthz() -> &'static str {
    "ok\n"
}

/// `/readyz`: 503 once draining, or while the backend's health check fails.
pub(super) async fn readyz(State(state): State<ApiState>) -> Response {
    // Relaxed: a flag read on its own; no other memory depends on it.
    if !state.ready.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    match state.service.backend().health().health_check() {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

pub(super) async fn metrics(State(state): State<ApiState>, request_headers: HeaderMap) -> Response {
    crate::metrics::text::respond(state.service.metrics(), &request_headers)
}

pub(super) async fn status_json(State(state): State<ApiState>) -> Response {
    let service = &state.service;
    let snapshot =
        service
            .status()
            .snapshot(&service.rules(), service.metrics(), &**service.backend());
    let mut response = axum::Json(snapshot).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckBody {
    domain: String,
    descriptors: Vec<DescriptorBody>,
    #[serde(default)]
    cost: Option<u64>,
    #[serde(default)]
    dry_run: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DescriptorBody {
    entries: Vec<EntryBody>,
    #[serde(default)]
    cost: Option<u64>,
    #[serde(default)]
    limit: Option<LimitBody>,
}

/// `{"requests_per_unit": 10, "unit": "minute"}`: Envoy's limit override.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitBody {
    requests_per_unit: u64,
    unit: String,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct EntryBody {
    key: String,
    #[serde(default)]
    value: String,
}

impl CheckBody {
    fn into_request(self) -> Result<CheckRequest, String> {
        let zero = "cost: must be at least 1 (to look without taking, send \"dry_run\": true)";
        if self.cost == Some(0) {
            return Err(zero.into());
        }
        let mut descriptors = Vec::with_capacity(self.descriptors.len());
        for (i, d) in self.descriptors.into_iter().enumerate() {
            if d.cost == Some(0) {
                return Err(format!("descriptors[{i}].{zero}"));
            }
            let limit = match d.limit {
                None => None,
                Some(limit) => Some(LimitOverride {
                    requests_per_unit: limit.requests_per_unit,
                    unit: Some(Unit::parse(&limit.unit).ok_or_else(|| {
                        format!(
                            "descriptors[{i}].limit.unit: invalid rate limit unit '{}' (second, minute, hour, day, week, month, year)",
                            limit.unit
                        )
                    })?),
                }),
            };
            descriptors.push(Descriptor {
                entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
                cost: if self.dry_run { Some(0) } else { d.cost },
                limit,
            });
        }
        Ok(CheckRequest {
            domain: self.domain,
            descriptors,
            cost: if self.dry_run {
                0
            } else {
                self.cost.unwrap_or(1)
            },
        })
    }
}

#[derive(Serialize)]
struct CheckAnswer {
    overall_code: &'static str,
    statuses: Vec<StatusAnswer>,
}

#[derive(Serialize)]
struct StatusAnswer {
    code: &'static str,
    /// The matched rule's path, `null` when no rule matched.
    rule: Option<String>,
    name: Option<String>,
    unlimited: bool,
    shadow_mode: bool,
    /// Whether the bucket admitted the cost (in shadow mode it may not
    /// have, while `code` is `OK`).
    allowed: bool,
    limit: Option<LimitAnswer>,
    remaining: Option<u64>,
    /// `null` when the request could never be admitted.
    retry_after_ms: Option<u64>,
    reset_after_ms: Option<u64>,
    /// Why the descriptor could not be decided as sent (it is then
    /// `OVER_LIMIT`, nothing counted); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    refused: Option<String>,
}

#[derive(Serialize)]
struct LimitAnswer {
    algorithm: &'static str,
    requests_per_unit: u64,
    period_ms: u64,
    capacity: u64,
}

/// The algorithm shown for a limit with no limiter behind it (a rule that
/// admits nothing, a refused `limit` override): envoyproxy/ratelimit's.
const BLOCKED_ALGORITHM: &str = "fixed_window";

/// The algorithm shown for a rule of concurrency slots alone (its
/// `period_ms` is the lease TTL).
const CONCURRENCY_ALGORITHM: &str = "concurrency";

/// Milliseconds, rounded up (waiting that long is enough); `None` for never.
fn millis(duration: std::time::Duration) -> Option<u64> {
    if duration.as_nanos() >= u128::from(u64::MAX) {
        return None;
    }
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).ok()
}

fn limit_answer(algorithm: &'static str, capacity: u64, quota: &QuotaConfig) -> LimitAnswer {
    LimitAnswer {
        algorithm,
        requests_per_unit: quota.requests_per_unit,
        period_ms: u64::try_from(quota.period.as_millis()).unwrap_or(u64::MAX),
        capacity,
    }
}

fn status_answer(status: &Status) -> StatusAnswer {
    let code = if status.is_over_limit() {
        "OVER_LIMIT"
    } else {
        "OK"
    };
    match status {
        Status::NoRule => StatusAnswer {
            code,
            rule: None,
            name: None,
            unlimited: false,
            shadow_mode: false,
            allowed: true,
            limit: None,
            remaining: None,
            retry_after_ms: None,
            reset_after_ms: None,
            refused: None,
        },
        Status::Unlimited { rule } => StatusAnswer {
            code,
            rule: Some(rule.id.to_string()),
            name: rule.name.clone(),
            unlimited: true,
            shadow_mode: rule.shadow_mode,
            allowed: true,
            limit: None,
            remaining: None,
            retry_after_ms: None,
            reset_after_ms: None,
            refused: None,
        },
        Status::Decided {
            rule,
            decision,
            quota,
        } => StatusAnswer {
            code,
            rule: Some(rule.id.to_string()),
            name: rule.name.clone(),
            unlimited: false,
            shadow_mode: rule.shadow_mode,
            allowed: decision.is_allowed(),
            limit: match &rule.limits {
                Some(limits) => Some(limit_answer(
                    limits.algorithm.kind().name(),
                    decision.limit(),
                    quota,
                )),
                // A rule of concurrency slots alone: its slot decision.
                None => rule
                    .concurrency
                    .map(|_| limit_answer(CONCURRENCY_ALGORITHM, decision.limit(), quota)),
            },
            remaining: Some(decision.remaining()),
            retry_after_ms: millis(decision.retry_after()),
            reset_after_ms: millis(decision.reset_after()),
            refused: None,
        },
        Status::Refused {
            rule,
            quota,
            reason,
        } => StatusAnswer {
            code,
            rule: rule.as_ref().map(|rule| rule.id.to_string()),
            name: rule.as_ref().and_then(|rule| rule.name.clone()),
            unlimited: false,
            shadow_mode: rule.as_ref().is_some_and(|rule| rule.shadow_mode),
            allowed: false,
            limit: quota.as_ref().map(|quota| {
                let (algorithm, capacity) = rule
                    .as_ref()
                    .and_then(|rule| rule.limits.as_ref())
                    .map_or((BLOCKED_ALGORITHM, quota.requests_per_unit), |limits| {
                        (limits.algorithm.kind().name(), limits.algorithm.capacity())
                    });
                limit_answer(algorithm, capacity, quota)
            }),
            remaining: Some(0),
            retry_after_ms: None,
            reset_after_ms: None,
            refused: Some(reason.clone()),
        },
    }
}

/// `POST /v1/check` (module docs).
pub(super) async fn check(State(state): State<ApiState>, body: Bytes) -> Response {
    let Some(_slot) = state.service.admit(Api::Http) else {
        let mut response = error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many requests in flight; retry later",
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    };
    let request = match serde_json::from_slice::<CheckBody>(&body)
        .map_err(|error| error.to_string())
        .and_then(CheckBody::into_request)
    {
        Ok(request) => request,
        Err(message) => {
            state.service.metrics().refused(Api::Http, Refusal::Invalid);
            return error(StatusCode::BAD_REQUEST, message);
        }
    };
    match state.service.check(Api::Http, &request).await {
        Ok(outcome) => axum::Json(CheckAnswer {
            overall_code: if outcome.is_over_limit() {
                "OVER_LIMIT"
            } else {
                "OK"
            },
            statuses: outcome.statuses.iter().map(status_answer).collect(),
        })
        .into_response(),
        Err(CheckError::Invalid(message)) => error(StatusCode::BAD_REQUEST, message),
        Err(CheckError::Backend(failure)) => {
            // Debug: the backend logs its store's failures itself,
            // rate-limited (never a line per request).
            tracing::debug!(error = %failure, "http: backend failed");
            error(StatusCode::SERVICE_UNAVAILABLE, failure.to_string())
        }
    }
}

#[derive(Serialize)]
struct RuleAnswer {
    rule: String,
    domain: String,
    path: Vec<EntryAnswer>,
    name: Option<String>,
    shadow_mode: bool,
    unlimited: bool,
    limits: Vec<LimitAnswer>,
}

#[derive(Serialize)]
struct EntryAnswer {
    key: String,
    /// `null`: any value, one bucket per value.
    value: Option<String>,
}

/// `GET /v1/rules`: the rules in force.
pub(super) async fn rules(State(state): State<ApiState>) -> Response {
    let set = state.service.rules();
    let rules: Vec<RuleAnswer> = set
        .rules()
        .iter()
        .map(|rule| RuleAnswer {
            rule: rule.id.to_string(),
            domain: rule.domain.clone(),
            path: rule
                .path
                .iter()
                .map(|(key, value)| EntryAnswer {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            name: rule.name.clone(),
            shadow_mode: rule.shadow_mode,
            unlimited: rule.limits.is_none() && rule.blocked.is_none(),
            limits: match (&rule.limits, &rule.blocked) {
                // A rule that admits nothing: its limit of 0 (not "no limit",
                // which would read as unlimited).
                (None, Some(quota)) => vec![limit_answer(BLOCKED_ALGORITHM, 0, quota)],
                (limits, _) => limits.as_ref().map_or_else(Vec::new, |limits| {
                    // Each limit's own algorithm (a rule may mix them).
                    let kinds = limits.algorithm.kinds();
                    limits
                        .quotas
                        .iter()
                        .zip(kinds)
                        .map(|(quota, kind)| {
                            let capacity = match kind {
                                crate::config::AlgorithmKind::Gcra => {
                                    quota.burst.unwrap_or(quota.requests_per_unit)
                                }
                                _ => quota.requests_per_unit,
                            };
                            limit_answer(kind.name(), capacity, quota)
                        })
                        .collect()
                }),
            },
        })
        .collect();
    axum::Json(serde_json::json!({ "rules": rules })).into_response()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use axum::body::Body;
    use http::{Request, StatusCode};
    use tower::ServiceExt;

    use crate::backend::MemoryBackend;
    use crate::config::{Config, ServerSettings};
    use crate::metrics::Metrics;
    use crate::rules::RuleSet;
    use crate::service::{RequestLimits, Service};

    async fn readyz(ready: &Arc<AtomicBool>) -> StatusCode {
        let config = Config::from_yaml("rules.yaml".as_ref(), "domain: d\n").expect("valid");
        let service = Service::new(
            RuleSet::new(&config),
            Arc::new(MemoryBackend::new(tollgate::ClockSource::default())),
            Arc::new(Metrics::new()),
            RequestLimits::of(&ServerSettings::default()),
            8,
        )
        .expect("service");
        let router =
            crate::http::router::api_routes(Arc::new(service), None, Arc::clone(ready), 1024);
        let request = Request::get("/readyz")
            .body(Body::empty())
            .expect("request");
        router.oneshot(request).await.expect("infallible").status()
    }

    /// `/readyz` follows the flag the server clears when it starts
    /// draining ([`crate::server::BoundServer::run`]).
    #[tokio::test]
    async fn readyz_answers_503_while_draining() {
        let ready = Arc::new(AtomicBool::new(true));
        assert_eq!(readyz(&ready).await, StatusCode::OK);
        ready.store(false, Ordering::Relaxed);
        assert_eq!(readyz(&ready).await, StatusCode::SERVICE_UNAVAILABLE);
    }
}
