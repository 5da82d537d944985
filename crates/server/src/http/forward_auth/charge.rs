//! The charge call: `POST /v1/forward-auth/{domain}/charge`, made after
//! the response (by the application, or a proxy's post-response hook) to
//! charge a budget what the request cost (the tokens an LLM used).
//!
//! # The call
//!
//! - The same forwarded headers as the auth call (the same `forward_auth:`
//!   actions turn them into the same descriptors), the same matrix
//!   parameters in the domain's segment, and the cost in one
//!   `X-Tollgate-Cost` header: decimal digits only, 1 to 2^64 − 1.
//! - Only the descriptors whose rule is a budget (`budget:`, see
//!   [`crate::config::budget`]) are charged; gates are not (the auth call
//!   already took their permit). The charge is recorded whether or not it
//!   fits, clamped at the budget's cap per charge.
//! - The auth call itself only *looks* at a budget (cost 0: refused once
//!   the budget is overspent), so that a budget is checked before the
//!   request and charged after it, as Envoy AI Gateway does over the RLS.
//!
//! # The answer
//!
//! - `200` with JSON: `{"over_limit": bool, "charged": [{"rule",
//!   "unit", "cost", "fitted", "remaining"}]}`, one item per budget
//!   charged (`fitted: false`: the charge went over and is owed). A charge
//!   is never refused: `over_limit` only says that the next auth call
//!   will be.
//! - `400`, nothing charged: no `X-Tollgate-Cost`, or two; a cost that is
//!   not decimal digits (a sign, spaces, a fraction), 0, or above 2^64 − 1;
//!   a body (the call carries none: refused unread, whatever its size); a
//!   bad parameter or believed header, as for the auth call; a domain with
//!   no budget rule.
//! - `404`: a domain without `forward_auth:`; `405`: another method;
//!   `503`: the backend could not record the charge, or overloaded.

use std::sync::Arc;

use axum::Json;
use axum::body::HttpBody as _;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::answer::DenyStatus;
use super::params::Params;
use super::{actions, bad};
use crate::config::budget::BudgetConfig;
use crate::metrics::Api;
use crate::request::{CheckRequest, Status};
use crate::service::{CheckError, Service};

/// The header holding the cost to charge.
pub const COST_HEADER: &str = "x-tollgate-cost";

/// The path's suffix after the domain segment.
pub(super) const SUFFIX: &str = "/charge";

/// The cost in `headers`, or why it cannot be read.
pub fn cost_of(headers: &HeaderMap) -> Result<u64, String> {
    let mut values = headers.get_all(COST_HEADER).iter();
    let Some(value) = values.next() else {
        return Err(format!("{COST_HEADER}: missing (the cost to charge)"));
    };
    if values.next().is_some() {
        return Err(format!("{COST_HEADER}: sent more than once"));
    }
    let text = value
        .to_str()
        .map_err(|_| format!("{COST_HEADER}: not ASCII"))?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{COST_HEADER}: '{text}' is not a whole number of decimal digits"
        ));
    }
    let cost: u64 = text
        .parse()
        .map_err(|_| format!("{COST_HEADER}: {text} is above 18446744073709551615"))?;
    if cost == 0 {
        return Err(format!(
            "{COST_HEADER}: 0 charges nothing (the auth call looks at the budget)"
        ));
    }
    Ok(cost)
}

/// Whether the request carries a body (which the charge refuses unread):
/// announced by its headers, or a stream not ended with them (HTTP/2 may
/// send a body with neither header).
fn has_body(request: &Request) -> bool {
    let headers = request.headers();
    let body = request.body();
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get_all(header::CONTENT_LENGTH)
            .iter()
            .any(|length| length.as_bytes() != b"0")
        || (!body.is_end_stream() && body.size_hint().exact() != Some(0))
}

#[derive(serde::Serialize)]
struct Charged {
    rule: String,
    unit: String,
    cost: u64,
    fitted: bool,
    remaining: u64,
}

#[derive(serde::Serialize)]
struct ChargeAnswer {
    over_limit: bool,
    charged: Vec<Charged>,
}

/// Answers one charge call (module docs).
pub(in crate::http) async fn charge(
    State(service): State<Arc<Service>>,
    request: Request,
) -> Response {
    let bad_request = |message: String| {
        bad(
            &service,
            StatusCode::BAD_REQUEST,
            format!("forward-auth charge: {message}"),
        )
    };
    if request.method() != Method::POST {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "POST")],
            "forward-auth charge: POST only\n",
        )
            .into_response();
    }
    let path = request.uri().path();
    let Some(auth_path) = path.strip_suffix(SUFFIX) else {
        return bad_request(format!("the path is /v1/forward-auth/{{domain}}{SUFFIX}"));
    };
    let params = match Params::from_path(auth_path) {
        Ok(params) => params,
        Err(message) => return bad_request(message),
    };
    let cost = match cost_of(request.headers()) {
        Ok(cost) => cost,
        Err(message) => return bad_request(message),
    };
    if has_body(&request) {
        return bad_request("the call carries no body".into());
    }
    let domain = params.domain;
    let rules = service.rules();
    let Some(config) = rules.forward_auth(&domain) else {
        return bad(
            &service,
            StatusCode::NOT_FOUND,
            format!("forward-auth charge: domain '{domain}' has no forward_auth section"),
        );
    };
    if !rules
        .rules()
        .iter()
        .any(|rule| rule.domain == domain && rule.budget.is_some())
    {
        return bad_request(format!("domain '{domain}' has no budget rule to charge"));
    }
    let Some(_slot) = service.admit(Api::Http) else {
        return super::answer::unavailable(
            DenyStatus::TooManyRequests,
            "too many requests in flight",
        );
    };
    let forwarded = match super::read_forwarded(
        &service,
        config,
        &request,
        (
            params.source_cluster.as_deref(),
            params.destination_cluster.as_deref(),
        ),
        DenyStatus::TooManyRequests,
    ) {
        Ok(forwarded) => forwarded,
        Err(refused) => return *refused,
    };
    // Budgets only: the auth call already took the gates' permits.
    let descriptors: Vec<_> = actions::descriptors(config, &forwarded)
        .into_iter()
        .filter(|d| super::is_budget(&rules, &domain, d))
        .map(|mut d| {
            d.cost = Some(cost);
            d
        })
        .collect();
    if descriptors.is_empty() {
        return Json(ChargeAnswer {
            over_limit: false,
            charged: Vec::new(),
        })
        .into_response();
    }
    let check = CheckRequest {
        domain,
        descriptors,
        cost,
    };
    match service.check(Api::Http, &check).await {
        Ok(outcome) => {
            let charged = outcome
                .statuses
                .iter()
                .filter_map(|status| match status {
                    Status::Decided { rule, decision, .. } => {
                        let budget = rule.budget.as_ref()?;
                        Some(Charged {
                            rule: rule.id.to_string(),
                            unit: budget.unit.clone(),
                            cost: BudgetConfig::chargeable(rule.capacity(), cost),
                            fitted: decision.is_allowed(),
                            remaining: decision.remaining(),
                        })
                    }
                    _ => None,
                })
                .collect();
            Json(ChargeAnswer {
                over_limit: outcome.is_over_limit(),
                charged,
            })
            .into_response()
        }
        Err(CheckError::Invalid(message)) => bad_request(message),
        Err(CheckError::Backend(failure)) => {
            tracing::debug!(error = %failure, "forward-auth charge: backend failed");
            super::answer::unavailable(DenyStatus::TooManyRequests, &failure.to_string())
        }
    }
}
