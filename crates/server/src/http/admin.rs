//! The admin API: inspect a key, reset, refund, penalize, deny and allow
//! lists, and change a rule's limit while the server runs (routed by
//! [`super::router`]).
//!
//! Off by default; `admin: {enabled: true}` in the file turns it on, and
//! only with a bearer token (a file enabling it without one is refused,
//! see [`crate::config`]). Every route checks `Authorization: Bearer`, as
//! the rest of the API does, and answers JSON; errors are
//! `{"error": "..."}` with 400 (bad input), 401 (token), 404 (no rule
//! matches), 409 (the rule counts nothing: unlimited or blocked), 501 (the
//! backend cannot apply this control), 503 (the backend failed: nothing
//! is known to be done). Never "done" when it was not.
//!
//! | route | body | does |
//! |---|---|---|
//! | `GET /v1/admin/keys/{domain}?descriptor=k=v,k=v` | | the key's rule, limits and state now (`remaining`, `reset_after_ms`, `retry_after_ms`), looked at without taking |
//! | `POST /v1/admin/reset` | `{"domain", "descriptor": [{"key","value"}]}` | the key back to full |
//! | `POST /v1/admin/refund` | … `"permits": n` | gives back `n` permits, never above full |
//! | `POST /v1/admin/penalize` | … `"duration_ms": n` | denies the key for `n` ms |
//! | `POST /v1/admin/lists/{deny,allow}` | `{"domain", "descriptor"}` | puts the key on the list |
//! | `DELETE /v1/admin/lists/{deny,allow}` | `{"domain", "descriptor"}` | takes the key off either list |
//! | `PUT /v1/admin/limits` | `{"rule": "rl.user", "limits": [{"requests_per_unit": 5, "unit": "minute", "algorithm": "fixed_window"}]}` | the rule's limits, now |
//!
//! Which backend applies what: the in-memory backend applies every
//! control through the core's keyed controls (`KeyedLimiter::reset`,
//! `refund`, `penalize`, `deny`, `allow`, `unlist`: their guarantees are
//! the core's); the Redis backend applies them through `tollgate-redis`'s
//! controls (`RedisLimiter::reset`, ...: one atomic script call each, a
//! Redis fault answered 503). A changed limit carries each key's state on
//! both backends (see [`crate::redis_backend`] for Redis' rules, and how
//! the deny and allow lists follow a change). A backend without controls answers 501
//! ([`Backend::control`](crate::backend::Backend::control) is the hook).
//!
//! A key is named as a request names it: a domain and one descriptor's
//! entries, matched as [`crate::rules`] matches a request (so the key is
//! the bucket the next request with these entries is decided in). In the
//! query form a value cannot hold a `,` (use the POST bodies' JSON).
//!
//! # Run-time limits (decision)
//!
//! `PUT /v1/admin/limits` changes the rule in force, not the file: the
//! change lives until the next reload, which puts the file's rules back
//! (the file stays the source of truth; write the file to keep a
//! change). The limits are validated as the file's `rate_limits:` are
//! (each its own algorithm, `calendar:` windows included), and the buckets
//! carry their state as a reload does ([`crate::backend`]: permits taken
//! stay taken under the new quota, `Carry::Keep`, in memory and on Redis;
//! a new algorithm is bridged, in memory as on Redis, and keeps the rule's
//! lists and penalties). Changes and reloads are applied one at a
//! time, each to the rules in force ([`Service::change_rules`]), so
//! neither undoes the other.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::backend::{BackendError, Control, ControlError, Hit};
use crate::config::{Limits, QuotaYaml};
use crate::rules::Rule;
use crate::service::Service;

/// The admin API's state: the service and the admin token.
#[derive(Clone)]
pub(super) struct AdminState {
    pub(super) service: Arc<Service>,
    pub(super) token: Arc<str>,
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": message.into() }))).into_response()
}

/// A refusal: the status and the message of `{"error": ...}`.
#[derive(Debug)]
struct Refused(StatusCode, String);

impl Refused {
    fn new(status: StatusCode, message: impl Into<String>) -> Refused {
        Refused(status, message.into())
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        error(self.0, self.1)
    }
}

/// The admin token on every route: 401 with `WWW-Authenticate: Bearer`
/// otherwise.
pub(super) async fn require_token(
    State(state): State<AdminState>,
    request: Request,
    next: Next,
) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    if !given.is_some_and(|given| crate::auth::token_matches(given, &state.token)) {
        let mut response = error(StatusCode::UNAUTHORIZED, "a valid bearer token is required");
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    }
    next.run(request).await
}

/// A key as a request names it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyBody {
    domain: String,
    descriptor: Vec<EntryBody>,
    #[serde(default)]
    permits: Option<u64>,
    #[serde(default)]
    duration_ms: Option<u64>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct EntryBody {
    key: String,
    #[serde(default)]
    value: String,
}

/// The bucket `entries` name under `domain`'s rules: the rule (with
/// limits) and the bucket key, or the answer to give.
fn resolve(
    service: &Service,
    domain: &str,
    entries: &[(String, String)],
) -> Result<(Arc<Rule>, String), Refused> {
    if domain.is_empty() {
        return Err(Refused::new(
            StatusCode::BAD_REQUEST,
            "domain: must not be empty",
        ));
    }
    if entries.is_empty() {
        return Err(Refused::new(
            StatusCode::BAD_REQUEST,
            "descriptor: needs at least one entry",
        ));
    }
    if let Some(i) = entries.iter().position(|(key, _)| key.is_empty()) {
        return Err(Refused::new(
            StatusCode::BAD_REQUEST,
            format!("descriptor[{i}].key: must not be empty"),
        ));
    }
    let rules = service.rules();
    let Some((rule, key)) = rules.find_bucket(
        domain,
        entries.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    ) else {
        return Err(Refused::new(
            StatusCode::NOT_FOUND,
            format!("no rule of domain '{domain}' matches this descriptor"),
        ));
    };
    Ok((Arc::clone(rule), key))
}

fn limited(rule: &Rule) -> Result<(), Refused> {
    if rule.limits.is_none() {
        return Err(Refused::new(
            StatusCode::CONFLICT,
            format!(
                "rule {} counts nothing ({}): no state to change",
                rule.id,
                crate::status::describe(rule)
            ),
        ));
    }
    Ok(())
}

#[derive(Serialize)]
struct KeyAnswer {
    domain: String,
    descriptor: Vec<EntryBody>,
    rule: String,
    name: Option<String>,
    shadow_mode: bool,
    limit: String,
    /// `null` for a rule that counts nothing.
    state: Option<StateAnswer>,
}

#[derive(Serialize)]
struct StateAnswer {
    /// Whether a request of one permit would be admitted now.
    allowed: bool,
    /// The binding limit's capacity.
    limit: u64,
    remaining: u64,
    /// `null`: never.
    retry_after_ms: Option<u64>,
    /// `null`: never.
    reset_after_ms: Option<u64>,
}

/// Milliseconds, rounded up; `None` for never.
fn millis(duration: Duration) -> Option<u64> {
    if duration.as_nanos() >= u128::from(u64::MAX) {
        return None;
    }
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).ok()
}

/// The key's answer: its rule and its state now, looked at (cost 0).
async fn key_answer(
    service: &Service,
    domain: String,
    entries: Vec<(String, String)>,
    rule: &Rule,
    key: &str,
) -> Result<KeyAnswer, Refused> {
    let state = match rule.limits {
        None => None,
        Some(_) => {
            let hits = [Hit { rule, key, cost: 0 }];
            let decisions = service.backend().decide(&hits).await.map_err(|failure| {
                Refused::new(StatusCode::SERVICE_UNAVAILABLE, failure.to_string())
            })?;
            let Some(decision) = decisions.first() else {
                return Err(Refused::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "backend: no decision",
                ));
            };
            Some(StateAnswer {
                allowed: decision.remaining() > 0,
                limit: decision.limit(),
                remaining: decision.remaining(),
                retry_after_ms: millis(decision.retry_after()),
                reset_after_ms: millis(decision.reset_after()),
            })
        }
    };
    Ok(KeyAnswer {
        domain,
        descriptor: entries
            .into_iter()
            .map(|(key, value)| EntryBody { key, value })
            .collect(),
        rule: rule.id.to_string(),
        name: rule.name.clone(),
        shadow_mode: rule.shadow_mode,
        limit: crate::status::describe(rule),
        state,
    })
}

/// `?descriptor=k=v,k=v`.
#[derive(Deserialize)]
pub(super) struct InspectQuery {
    descriptor: String,
}

/// `k=v,k=v` → entries (a value may hold `=`, not `,`).
fn parse_descriptor(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split(',')
        .enumerate()
        .map(|(i, entry)| {
            entry
                .split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| format!("descriptor: entry {i} '{entry}' is not key=value"))
        })
        .collect()
}

pub(super) async fn inspect(
    State(state): State<AdminState>,
    Path(domain): Path<String>,
    query: Result<Query<InspectQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return error(
            StatusCode::BAD_REQUEST,
            "descriptor: missing (?descriptor=key=value,key=value)",
        );
    };
    let entries = match parse_descriptor(&query.descriptor) {
        Ok(entries) => entries,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let (rule, key) = match resolve(&state.service, &domain, &entries) {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    match key_answer(&state.service, domain, entries, &rule, &key).await {
        Ok(answer) => axum::Json(answer).into_response(),
        Err(refused) => refused.into_response(),
    }
}

fn key_body(body: &Bytes) -> Result<KeyBody, Refused> {
    serde_json::from_slice::<KeyBody>(body)
        .map_err(|failure| Refused::new(StatusCode::BAD_REQUEST, failure.to_string()))
}

/// Applies `control` to the key of `body`, then answers the key's state.
async fn apply(state: &AdminState, body: KeyBody, control: Control) -> Response {
    let entries: Vec<(String, String)> = body
        .descriptor
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect();
    let (rule, key) = match resolve(&state.service, &body.domain, &entries) {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    if let Err(refused) = limited(&rule) {
        return refused.into_response();
    }
    match state.service.backend().control(&rule, &key, control).await {
        Ok(()) => {}
        Err(ControlError::Unsupported(what)) => {
            return error(
                StatusCode::NOT_IMPLEMENTED,
                format!("{what}: not supported by this backend"),
            );
        }
        Err(ControlError::ListFull(message)) => return error(StatusCode::CONFLICT, message),
        Err(ControlError::Backend(failure)) => {
            tracing::warn!(error = %failure, control = control.name(), "admin: backend failed");
            return error(StatusCode::SERVICE_UNAVAILABLE, failure.to_string());
        }
    }
    tracing::info!(control = ?control, rule = %rule.id, "admin: applied");
    match key_answer(&state.service, body.domain, entries, &rule, &key).await {
        Ok(answer) => axum::Json(json!({ "done": control.name(), "key": answer })).into_response(),
        Err(refused) => refused.into_response(),
    }
}

pub(super) async fn reset(State(state): State<AdminState>, body: Bytes) -> Response {
    match key_body(&body) {
        Ok(body) => apply(&state, body, Control::Reset).await,
        Err(refused) => refused.into_response(),
    }
}

pub(super) async fn refund(State(state): State<AdminState>, body: Bytes) -> Response {
    let body = match key_body(&body) {
        Ok(body) => body,
        Err(refused) => return refused.into_response(),
    };
    match body.permits {
        Some(0) | None => error(
            StatusCode::BAD_REQUEST,
            "permits: the number of permits to give back, at least 1",
        ),
        Some(n) => apply(&state, body, Control::Refund(n)).await,
    }
}

pub(super) async fn penalize(State(state): State<AdminState>, body: Bytes) -> Response {
    let body = match key_body(&body) {
        Ok(body) => body,
        Err(refused) => return refused.into_response(),
    };
    match body.duration_ms {
        Some(0) | None => error(
            StatusCode::BAD_REQUEST,
            "duration_ms: how long to deny the key, at least 1",
        ),
        Some(ms) => apply(&state, body, Control::Penalize(Duration::from_millis(ms))).await,
    }
}

fn list_control(list: &str, add: bool) -> Result<Control, Refused> {
    match (list, add) {
        ("deny", true) => Ok(Control::Deny),
        ("allow", true) => Ok(Control::Allow),
        ("deny" | "allow", false) => Ok(Control::Unlist),
        _ => Err(Refused::new(
            StatusCode::NOT_FOUND,
            format!("no list '{list}' (deny, allow)"),
        )),
    }
}

pub(super) async fn list_add(
    State(state): State<AdminState>,
    Path(list): Path<String>,
    body: Bytes,
) -> Response {
    list_change(&state, &list, true, &body).await
}

pub(super) async fn list_remove(
    State(state): State<AdminState>,
    Path(list): Path<String>,
    body: Bytes,
) -> Response {
    list_change(&state, &list, false, &body).await
}

async fn list_change(state: &AdminState, list: &str, add: bool, body: &Bytes) -> Response {
    let control = match list_control(list, add) {
        Ok(control) => control,
        Err(refused) => return refused.into_response(),
    };
    match key_body(body) {
        Ok(body) => apply(state, body, control).await,
        Err(refused) => refused.into_response(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsBody {
    rule: String,
    limits: Vec<QuotaYaml>,
}

/// The limits of a `PUT /v1/admin/limits` body, validated as the file's.
fn new_limits(body: &LimitsBody) -> Result<Limits, String> {
    if body.limits.is_empty() {
        return Err("limits: needs at least one limit".into());
    }
    let mut kinds = Vec::with_capacity(body.limits.len());
    let mut quotas = Vec::with_capacity(body.limits.len());
    for (i, limit) in body.limits.iter().enumerate() {
        let (kind, quota) = limit
            .validate()
            .map_err(|message| format!("limits[{i}].{message}"))?;
        kinds.push(kind);
        quotas.push(quota);
    }
    Limits::each(&kinds, quotas).map_err(|failure| format!("limits: {failure}"))
}

pub(super) async fn limits(State(state): State<AdminState>, body: Bytes) -> Response {
    let body = match serde_json::from_slice::<LimitsBody>(&body) {
        Ok(body) => body,
        Err(failure) => return error(StatusCode::BAD_REQUEST, failure.to_string()),
    };
    let limits = match new_limits(&body) {
        Ok(limits) => limits,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    if !state
        .service
        .rules()
        .rules()
        .iter()
        .any(|rule| *rule.id == *body.rule)
    {
        return error(
            StatusCode::NOT_FOUND,
            format!("no rule '{}' (see GET /v1/rules)", body.rule),
        );
    }
    let changed = state.service.change_rules(|rules| {
        rules
            .with_limits(&body.rule, limits)
            .ok_or_else(|| BackendError::new(format!("rule {} is gone (a reload)", body.rule)))
    });
    if let Err(failure) = changed {
        return error(StatusCode::BAD_REQUEST, failure.to_string());
    }
    let rules = state.service.rules();
    let Some(rule) = rules.rules().iter().find(|rule| *rule.id == *body.rule) else {
        return error(StatusCode::CONFLICT, "the rule was removed by a reload");
    };
    tracing::info!(rule = %rule.id, limit = %crate::status::describe(rule), "admin: limits changed until the next reload");
    axum::Json(json!({
        "rule": rule.id.to_string(),
        "limit": crate::status::describe(rule),
        "until": "the next reload",
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_parse_as_key_value_pairs() {
        assert_eq!(
            parse_descriptor("user=alice,path=/a=b"),
            Ok(vec![
                ("user".to_owned(), "alice".to_owned()),
                ("path".to_owned(), "/a=b".to_owned())
            ])
        );
        assert_eq!(
            parse_descriptor("user="),
            Ok(vec![("user".to_owned(), String::new())])
        );
        assert!(parse_descriptor("user").is_err());
        assert!(parse_descriptor("user=a,,").is_err());
    }
}
