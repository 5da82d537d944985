//! The forward-auth endpoint: nginx `auth_request` (ingress-nginx
//! `auth-url`), Caddy `forward_auth`, Traefik `ForwardAuth`, HAProxy (a Lua
//! action) and Envoy's `ext_authz` in HTTP mode ask "may this request
//! pass?" here, and are answered by the same [`Service`] as `/v1/check` and
//! the RLS: same rules, counts, shadow mode, lists, penalties, metrics
//! (under `api="http"`) and status page.
//!
//! The reference (each parameter, header and answer, what each proxy
//! sends and does with the answer, the decisions and why) is the chapter
//! `docs/reverse-proxies.md`, "Inside the server", with each proxy's
//! recipe as the tests run it.
//!
//! # The model
//!
//! `ANY /v1/forward-auth/{domain}[;name=value...]` (routed by
//! [`super::router`], behind the API's bearer token): the domain's
//! `forward_auth:` section ([`crate::config::actions`]) turns the
//! forwarded request into descriptors with Envoy's route `rate_limits`
//! actions ([`actions`]), over the request read by [`forwarded`]; the
//! service decides them as one check of cost 1; [`answer`] turns the
//! outcome into the proxy's answer. The charge call
//! (`POST .../{domain}/charge`, [`charge`]) charges a budget after the
//! response.
//!
//! # Guarantees
//!
//! - **Never a pass by accident**: refused (`429`, or `403` with
//!   `deny_status=403`) with `Retry-After` and one `RateLimit` /
//!   `RateLimit-Policy` line each; a backend that cannot decide is `503`
//!   (or `403`), overload `503`; a configuration error (no `forward_auth:`
//!   404, a bad parameter or believed header 400) and a path that cannot
//!   be matched safely (400, or 403) are refusals too. On Redis the
//!   backend's failure policy decides ([`crate::redis_backend`]).
//! - **Only what the proxy wrote is believed**: the parameters live in the
//!   path, never the query (the client's, under Caddy); the client address
//!   is the one the trusted proxies vouch for (the tower layer's
//!   [`ClientIp`](tollgate_tower::ClientIp) walk); `:method`, `:path`,
//!   `:authority`, `:scheme` come from the one header each that
//!   `forwarded_headers:` names ([`crate::config::forwarded_request`]),
//!   the path in normal form ([`tollgate_tower::path`]).
//!
//! # Parameters (matrix parameters of the domain's segment, [`params`])
//!
//! - `deny_status=403`: refuse with 403 (nginx `auth_request`); by
//!   default 429, or the domain's `forward_auth: {deny_status: 403}`.
//! - `destination_cluster=NAME`, `source_cluster=NAME`: the values of
//!   Envoy's actions of those names; none by default.
//!
//! A request no action makes a descriptor of passes (as Envoy, which then
//! makes no call); a concurrency rule's lease ends only at its
//! `lease_ttl` ([`crate::concurrency`]); a budget is looked at here
//! (cost 0) and charged by [`charge`].

pub mod actions;
pub mod answer;
pub mod charge;
pub mod forwarded;
pub mod params;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::config::actions::ForwardAuthConfig;
use crate::metrics::{Api, Refusal};
use crate::request::Descriptor;
use crate::rules::RuleSet;
use crate::service::{CheckError, CheckRequest, Service};
use answer::DenyStatus;
use forwarded::Forwarded;
use params::Params;

/// Whether `descriptor` of `domain` falls under a budget rule.
fn is_budget(rules: &RuleSet, domain: &str, descriptor: &Descriptor) -> bool {
    let entries = descriptor
        .entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()));
    rules
        .find_bucket(domain, entries)
        .is_some_and(|(rule, _)| rule.budget.is_some())
}

fn bad(service: &Service, status: StatusCode, message: String) -> Response {
    service.metrics().refused(Api::Http, Refusal::Invalid);
    (status, message + "\n").into_response()
}

/// The request the proxy forwarded, read from the headers `config`
/// believes: the auth call and the charge call read it alike. A refusal
/// (no peer address, a believed header missing or repeated, a path that
/// cannot be normalised) is the answer to send.
fn read_forwarded<'a>(
    service: &Service,
    config: &ForwardAuthConfig,
    request: &'a Request,
    (source_cluster, destination_cluster): (Option<&'a str>, Option<&'a str>),
    deny: DenyStatus,
) -> Result<Forwarded<'a>, Box<Response>> {
    let Some(peer) = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip())
    else {
        // The server inserts it on every connection (crate::http::serve).
        return Err(Box::new(answer::unavailable(deny, "no peer address")));
    };
    Forwarded::new(
        config,
        peer,
        request.headers(),
        source_cluster,
        destination_cluster,
    )
    .map_err(|unreadable| Box::new(answer::unreadable(service, deny, &unreadable)))
}

/// `ANY /v1/forward-auth/{domain}[;name=value...]`: the auth call (module
/// docs).
pub(super) async fn check(State(service): State<Arc<Service>>, request: Request) -> Response {
    params::warn_of_query_parameters(request.uri().query());
    let params = match Params::from_path(request.uri().path()) {
        Ok(params) => params,
        Err(message) => {
            return bad(
                &service,
                StatusCode::BAD_REQUEST,
                format!("forward-auth: {message}"),
            );
        }
    };
    let domain = params.domain;
    let rules = service.rules();
    let Some(config) = rules.forward_auth(&domain) else {
        return bad(
            &service,
            StatusCode::NOT_FOUND,
            format!("forward-auth: domain '{domain}' has no forward_auth section"),
        );
    };
    // The URL's parameter, else the domain's default, else 429.
    let deny = params
        .deny_status
        .or_else(|| config.deny_status.and_then(DenyStatus::parse))
        .unwrap_or(DenyStatus::TooManyRequests);
    let Some(_slot) = service.admit(Api::Http) else {
        return answer::unavailable(deny, "too many requests in flight");
    };
    let forwarded = match read_forwarded(
        &service,
        config,
        &request,
        (
            params.source_cluster.as_deref(),
            params.destination_cluster.as_deref(),
        ),
        deny,
    ) {
        Ok(forwarded) => forwarded,
        Err(refused) => return *refused,
    };
    let mut descriptors = actions::descriptors(config, &forwarded);
    for descriptor in &mut descriptors {
        // A budget is looked at before the request and charged after it
        // ([`charge`]): refused here only once overspent.
        if is_budget(&rules, &domain, descriptor) {
            descriptor.cost = Some(0);
        }
    }
    if descriptors.is_empty() {
        return StatusCode::OK.into_response();
    }
    let check = CheckRequest {
        domain,
        descriptors,
        cost: 1,
    };
    match service.check(Api::Http, &check).await {
        Ok(outcome) => answer::answer(&outcome, deny),
        Err(CheckError::Invalid(message)) => {
            // Only the call's shape (too many descriptors for
            // max_descriptors): the configuration's doing.
            bad(
                &service,
                StatusCode::BAD_REQUEST,
                format!("forward-auth: {message}"),
            )
        }
        Err(CheckError::Backend(failure)) => {
            // Debug: the backend logs its store's failures itself,
            // rate-limited (never a line per request).
            tracing::debug!(error = %failure, "forward-auth: backend failed");
            answer::unavailable(deny, &failure.to_string())
        }
    }
}

#[cfg(test)]
mod charge_tests;
#[cfg(test)]
mod tests;
