//! envoyproxy/ratelimit's own HTTP endpoints, served beside tollgate's:
//! `POST /json` and `GET /healthcheck` on the HTTP listener, the debug
//! listener's `/rlconfig`, `/stats` and `/`, and the Prometheus listener's
//! one path (`PROMETHEUS_PATH`, `/metrics` by default: Prometheus text
//! 0.0.4 whatever `Accept` says). Routed by [`super::router`].
//!
//! # Mapping (decisions)
//!
//! - `POST /json` takes a `RateLimitRequest` in protobuf's JSON mapping
//!   (field names in `lowerCamelCase` or as in the `.proto`, 64-bit and
//!   32-bit numbers as numbers or strings, enums by name), decides it
//!   through the gRPC service itself ([`RlsService`], so that the answer
//!   is the RLS answer, headers included), and answers the
//!   `RateLimitResponse` in the same mapping, default values left out as
//!   protobuf's JSON printer does: `200` when OK, `429` when over the
//!   limit, `400` for a body that is not a request or that the service
//!   refuses, as envoyproxy/ratelimit answers. An unknown field is a `400`
//!   (protobuf's JSON reader refuses it too). A bearer token, when the
//!   server has one, is required as on `/v1/check`.
//! - `GET /healthcheck` answers `200 OK` while the server is healthy
//!   ([`crate::health`], the state gRPC's `ratelimit` health answers
//!   too), and `500` from the first moment of shutdown; with
//!   `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED` also while no rule is
//!   loaded (a server forced to start without its config).
//! - `/rlconfig` prints one line per rule as envoyproxy/ratelimit dumps
//!   its config (`domain.key_value: unit=MINUTE requests_per_unit=3,
//!   shadow_mode: false, quota_mode: false`; a rule of several quotas, an
//!   extension, prints each); `/stats` prints every counter and gauge of
//!   `/metrics` as `name{labels}: value`; `/` lists both.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::grpc::RlsService;
use crate::grpc::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use crate::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use crate::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use crate::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as ProtoUnit;
use crate::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService as _;
use crate::grpc::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use crate::health::Health;
use crate::service::Service;

/// The state of `/json` and `/healthcheck`: the RLS service `/json`
/// decides through, the bearer token (`None`: none asked), the health
/// `/healthcheck` answers.
#[derive(Clone)]
pub(super) struct LyftState {
    pub(super) rls: RlsService,
    pub(super) token: Option<Arc<str>>,
    pub(super) health: Health,
}

/// The debug listener's index, `/`.
pub(super) async fn debug_index() -> &'static str {
    "/rlconfig: print out the currently loaded configuration for debugging\n/stats: print out stats\n"
}

/// The Prometheus listener's one route (`PROMETHEUS_PATH`):
/// envoyproxy/ratelimit's endpoint, always Prometheus text 0.0.4.
pub(super) async fn prometheus(State(service): State<Arc<Service>>) -> Response {
    let format = crate::metrics::text::Format::Text;
    (
        [(header::CONTENT_TYPE, format.content_type())],
        service.metrics().encode_as(format),
    )
        .into_response()
}

/// `GET /healthcheck` (module docs).
pub(super) async fn healthcheck(State(state): State<LyftState>) -> Response {
    // The state gRPC's `ratelimit` health answers too (crate::health).
    if state.health.check().is_ok() {
        (StatusCode::OK, "OK").into_response()
    } else {
        StatusCode::INTERNAL_SERVER_ERROR.into_response()
    }
}

/// `POST /json` (module docs).
pub(super) async fn json_check(
    State(state): State<LyftState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(token) = &state.token {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        if !given.is_some_and(|given| crate::auth::token_matches(given, token)) {
            return (
                StatusCode::UNAUTHORIZED,
                "a valid bearer token is required\n",
            )
                .into_response();
        }
    }
    let request = match serde_json::from_slice::<Value>(&body)
        .map_err(|error| error.to_string())
        .and_then(|value| request_of(&value))
    {
        Ok(request) => request,
        Err(message) => {
            tracing::debug!(%message, "/json: bad request");
            return (StatusCode::BAD_REQUEST, format!("{message}\n")).into_response();
        }
    };
    let response = match state
        .rls
        .should_rate_limit(tonic::Request::new(request))
        .await
    {
        Ok(response) => response.into_inner(),
        Err(status) => {
            return (StatusCode::BAD_REQUEST, format!("{}\n", status.message())).into_response();
        }
    };
    let code = if response.overall_code == Code::OverLimit as i32 {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::OK
    };
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        response_json(&response).to_string(),
    )
        .into_response()
}

/// The field `camel` (or `snake`, its `.proto` name) of `object`.
fn field<'a>(object: &'a Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    object
        .get(camel)
        .or_else(|| object.get(snake))
        .filter(|value| !value.is_null())
}

fn object<'a>(
    value: &'a Value,
    what: &str,
    known: &[&str],
) -> Result<&'a Map<String, Value>, String> {
    let object = value
        .as_object()
        .ok_or_else(|| format!("{what}: expected an object"))?;
    if let Some(unknown) = object.keys().find(|key| !known.contains(&key.as_str())) {
        return Err(format!("{what}: unknown field '{unknown}'"));
    }
    Ok(object)
}

fn string(value: Option<&Value>, what: &str) -> Result<String, String> {
    match value {
        None => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(_) => Err(format!("{what}: expected a string")),
    }
}

fn uint<T: TryFrom<u64>>(value: Option<&Value>, what: &str) -> Result<Option<T>, String> {
    let number = match value {
        None => return Ok(None),
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(text)) => text.parse().ok(),
        Some(_) => None,
    };
    number
        .and_then(|n| T::try_from(n).ok())
        .map(Some)
        .ok_or_else(|| format!("{what}: expected an unsigned whole number"))
}

fn unit_of(value: Option<&Value>) -> Result<i32, String> {
    use crate::grpc::proto::envoy::r#type::v3::RateLimitUnit;
    match value {
        None => Ok(RateLimitUnit::Unknown as i32),
        Some(Value::String(name)) => RateLimitUnit::from_str_name(name)
            .map(|unit| unit as i32)
            .ok_or_else(|| format!("limit.unit: unknown unit '{name}'")),
        Some(Value::Number(n)) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| "limit.unit: not a unit".to_owned()),
        Some(_) => Err("limit.unit: not a unit".to_owned()),
    }
}

/// A `RateLimitRequest` from protobuf's JSON mapping.
fn request_of(value: &Value) -> Result<RateLimitRequest, String> {
    let top = object(
        value,
        "request",
        &["domain", "descriptors", "hitsAddend", "hits_addend"],
    )?;
    let mut descriptors = Vec::new();
    if let Some(list) = field(top, "descriptors", "descriptors") {
        let list = list.as_array().ok_or("descriptors: expected a list")?;
        for (i, d) in list.iter().enumerate() {
            let what = format!("descriptors[{i}]");
            let d = object(d, &what, &["entries", "limit", "hitsAddend", "hits_addend"])?;
            let mut entries = Vec::new();
            if let Some(list) = field(d, "entries", "entries") {
                let list = list
                    .as_array()
                    .ok_or_else(|| format!("{what}.entries: expected a list"))?;
                for (j, e) in list.iter().enumerate() {
                    let what = format!("{what}.entries[{j}]");
                    let e = object(e, &what, &["key", "value"])?;
                    entries.push(Entry {
                        key: string(e.get("key"), &format!("{what}.key"))?,
                        value: string(e.get("value"), &format!("{what}.value"))?,
                    });
                }
            }
            let limit = match field(d, "limit", "limit") {
                None => None,
                Some(limit) => {
                    let what = format!("{what}.limit");
                    let limit = object(
                        limit,
                        &what,
                        &["requestsPerUnit", "requests_per_unit", "unit"],
                    )?;
                    Some(RateLimitOverride {
                        requests_per_unit: uint(
                            field(limit, "requestsPerUnit", "requests_per_unit"),
                            &what,
                        )?
                        .unwrap_or(0),
                        unit: unit_of(limit.get("unit"))?,
                    })
                }
            };
            descriptors.push(RateLimitDescriptor {
                entries,
                limit,
                hits_addend: uint(field(d, "hitsAddend", "hits_addend"), &what)?,
            });
        }
    }
    Ok(RateLimitRequest {
        domain: string(top.get("domain"), "domain")?,
        descriptors,
        hits_addend: uint(field(top, "hitsAddend", "hits_addend"), "hitsAddend")?.unwrap_or(0),
    })
}

fn code_name(code: i32) -> &'static str {
    Code::try_from(code).map_or("UNKNOWN", |code| code.as_str_name())
}

/// A protobuf `Duration` in its JSON mapping: seconds with 0, 3, 6 or 9
/// decimals, then `s`.
fn duration_json(d: &prost_types::Duration) -> String {
    match d.nanos {
        0 => format!("{}s", d.seconds),
        n if n % 1_000_000 == 0 => format!("{}.{:03}s", d.seconds, n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}.{:06}s", d.seconds, n / 1_000),
        n => format!("{}.{n:09}s", d.seconds),
    }
}

/// A `RateLimitResponse` in protobuf's JSON mapping (default values left
/// out).
fn response_json(response: &RateLimitResponse) -> Value {
    let mut top = Map::new();
    if response.overall_code != 0 {
        top.insert(
            "overallCode".into(),
            json!(code_name(response.overall_code)),
        );
    }
    let statuses: Vec<Value> = response
        .statuses
        .iter()
        .map(|status| {
            let mut out = Map::new();
            if status.code != 0 {
                out.insert("code".into(), json!(code_name(status.code)));
            }
            if let Some(limit) = &status.current_limit {
                let mut l = Map::new();
                if !limit.name.is_empty() {
                    l.insert("name".into(), json!(limit.name));
                }
                if limit.requests_per_unit != 0 {
                    l.insert("requestsPerUnit".into(), json!(limit.requests_per_unit));
                }
                if limit.unit != 0 {
                    let unit =
                        ProtoUnit::try_from(limit.unit).map_or("UNKNOWN", |u| u.as_str_name());
                    l.insert("unit".into(), json!(unit));
                }
                out.insert("currentLimit".into(), Value::Object(l));
            }
            if status.limit_remaining != 0 {
                out.insert("limitRemaining".into(), json!(status.limit_remaining));
            }
            if let Some(d) = &status.duration_until_reset {
                out.insert("durationUntilReset".into(), json!(duration_json(d)));
            }
            Value::Object(out)
        })
        .collect();
    if !statuses.is_empty() {
        top.insert("statuses".into(), Value::Array(statuses));
    }
    let headers: Vec<Value> = response
        .response_headers_to_add
        .iter()
        .map(|h| json!({"key": h.key, "value": h.value}))
        .collect();
    if !headers.is_empty() {
        top.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    if let Some(metadata) = &response.dynamic_metadata {
        top.insert(
            "dynamicMetadata".into(),
            crate::grpc::dynamic_metadata::to_json(metadata),
        );
    }
    Value::Object(top)
}

/// The debug listener's `/rlconfig` (module docs).
pub(super) async fn rlconfig(State(service): State<Arc<Service>>) -> String {
    let rules = service.rules();
    let mut out = String::new();
    for rule in rules.rules() {
        let mut key = rule.domain.clone();
        for (k, v) in &rule.path {
            key.push('.');
            key.push_str(k);
            if let Some(v) = v {
                key.push('_');
                key.push_str(v);
            }
        }
        let quotas: Vec<_> = match (&rule.limits, &rule.blocked) {
            (Some(limits), _) => limits.quotas.clone(),
            (None, Some(blocked)) => vec![*blocked],
            (None, None) => Vec::new(),
        };
        if quotas.is_empty() {
            // An unlimited rule (or a concurrency rule alone).
            let _ = writeln!(
                out,
                "{key}: unit=UNKNOWN requests_per_unit=0, shadow_mode: {}, quota_mode: {}",
                rule.shadow_mode, rule.quota_mode
            );
        }
        for quota in quotas {
            let unit = quota.unit.map_or_else(
                || format!("{:?}", quota.period),
                |u| format!("{u:?}").to_ascii_uppercase(),
            );
            let _ = writeln!(
                out,
                "{key}: unit={unit} requests_per_unit={}, shadow_mode: {}, quota_mode: {}",
                quota.requests_per_unit, rule.shadow_mode, rule.quota_mode
            );
        }
    }
    out
}

/// The debug listener's `/stats` (module docs).
pub(super) async fn stats(State(service): State<Arc<Service>>) -> String {
    let text = service.metrics().encode();
    let mut out = String::new();
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        if let Some((name, value)) = line.rsplit_once(' ') {
            let _ = writeln!(out, "{name}: {value}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reads_either_field_spelling_and_refuses_unknown_fields() {
        let request = request_of(&json!({
            "domain": "rl",
            "hits_addend": "2",
            "descriptors": [
                {"entries": [{"key": "foo", "value": "bar"}], "hitsAddend": 3,
                 "limit": {"requestsPerUnit": 5, "unit": "MINUTE"}}
            ]
        }))
        .expect("valid");
        assert_eq!(request.domain, "rl");
        assert_eq!(request.hits_addend, 2);
        assert_eq!(request.descriptors[0].entries[0].value, "bar");
        assert_eq!(request.descriptors[0].hits_addend, Some(3));
        let limit = request.descriptors[0].limit.expect("limit");
        assert_eq!(limit.requests_per_unit, 5);
        assert_eq!(limit.unit, ProtoUnit::Minute as i32);
        let error = request_of(&json!({"domain": "rl", "descriptor": []})).expect_err("unknown");
        assert!(error.contains("descriptor"), "{error}");
        assert!(request_of(&json!({"domain": 3})).is_err());
    }

    #[test]
    fn durations_print_as_protobuf_json_prints_them() {
        let d = |seconds, nanos| prost_types::Duration { seconds, nanos };
        assert_eq!(duration_json(&d(43, 0)), "43s");
        assert_eq!(duration_json(&d(0, 500_000_000)), "0.500s");
        assert_eq!(duration_json(&d(1, 1_000)), "1.000001s");
        assert_eq!(duration_json(&d(1, 1)), "1.000000001s");
    }
}
