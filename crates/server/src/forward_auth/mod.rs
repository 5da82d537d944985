//! The forward-auth endpoint: nginx `auth_request` (ingress-nginx
//! `auth-url`), Caddy `forward_auth`, Traefik `ForwardAuth`, HAProxy (a Lua
//! action) and Envoy's `ext_authz` in HTTP mode ask "may this request
//! pass?" here, and are answered by the same [`Service`] as `/v1/check` and
//! the RLS: same rules, counts, shadow mode, lists, penalties, metrics and
//! status page.
//!
//! # The call
//!
//! `ANY /v1/forward-auth/{domain}` on the HTTP listener (behind the bearer
//! token when one is set, like every API route), with optional matrix
//! parameters in the same path segment
//! (`/v1/forward-auth/api;deny_status=403`), written in the proxy's
//! configuration, never by a client ([`params`]: the query string is never
//! read, since Caddy carries the client's query into the auth call):
//!
//! | parameter | meaning |
//! |---|---|
//! | `deny_status=403` | refuse with 403 instead of 429 (nginx `auth_request`); the domain's `forward_auth: {deny_status: 403}` sets a default where a proxy cannot write the parameter |
//! | `destination_cluster=NAME` | the value of Envoy's `destination_cluster` action |
//! | `source_cluster=NAME` | the value of Envoy's `source_cluster` action |
//!
//! The domain's `forward_auth:` section ([`crate::config::actions`]) turns
//! the forwarded request into descriptors with Envoy's route `rate_limits`
//! actions ([`actions`]), read from:
//!
//! - the client address: the connection's peer (the proxy) and the one
//!   address header the trusted proxies write, walked from the right by the
//!   tower layer's [`ClientIp`](tollgate_tower::ClientIp): an entry is
//!   believed only where every hop to its right is a trusted proxy, so a
//!   client's own `X-Forwarded-For` is never taken past the trusted hop;
//! - `:method`, `:path` (with the query), `:authority` (and `host`) and
//!   `:scheme` from the one header each that the domain's
//!   `forwarded_headers:` names ([`crate::config::forwarded_request`]):
//!   `X-Forwarded-Method`, `-Uri`, `-Host`, `-Proto` by default,
//!   ingress-nginx's `X-Original-Method` and `X-Original-URL` with
//!   `x_original`. No fallback to another header and no
//!   `X-Forwarded-Prefix` unless named: a proxy passes the client's other
//!   headers on, so any header the recipe does not set is the client's;
//! - `:path` in normal form ([`tollgate_tower::path`]: dot segments,
//!   unreserved percent-encodings, repeated slashes), so `/x/../api` and
//!   `/%61pi` match a rule on `/api` as the upstream serves them;
//! - any other header as the proxy passes it on (nginx, Caddy and Traefik
//!   pass the client's headers to the auth call).
//!
//! What each proxy sends: nginx `auth_request` what its `proxy_set_header`
//! lines say (the README's recipe sets the four and clears the others);
//! ingress-nginx `X-Original-URL`, `X-Original-Method`, `X-Forwarded-For`;
//! Caddy `forward_auth` and Traefik `ForwardAuth` `X-Forwarded-Method`,
//! `-Uri`, `-Host`, `-Proto`, `-For`; HAProxy what the Lua action sends
//! (the same five).
//!
//! # The answer
//!
//! - **Pass**: `200`, empty body, `RateLimit-Policy` / `RateLimit` items
//!   for every limited descriptor decided (not for shadow-mode rules).
//! - **Refuse**: `429` (or `403` with `deny_status=403`), `Retry-After`
//!   (whole seconds, rounded up, the longest of the descriptors over their
//!   limit), the same RateLimit items, a short text body.
//! - **The backend could not decide**: `503` with `Retry-After: 1`, or
//!   `403` with `deny_status=403`: a refusal, never a pass. On Redis this
//!   does not happen: the Redis backend's failure policy decides (fail open
//!   passes, fail closed refuses with 429 and the breaker's wait, local
//!   decides on this server's share), see [`crate::redis_backend`].
//! - Overloaded (`max_concurrent_requests`): `503`, `Retry-After: 1`.
//! - A domain without `forward_auth:`: `404`; a bad URL parameter, or a
//!   believed header missing or sent twice: `400`, whatever `deny_status`.
//!   All are configuration errors, which every proxy turns into a refusal;
//!   the headers' are logged at WARN (at most once a minute).
//! - A path that cannot be matched safely (ambiguous, a control character,
//!   a broken percent-encoding; or not normal under `path: refuse`):
//!   `400`, or `403` with `deny_status=403`. A refusal, never a pass.
//!
//! What each proxy does with them:
//!
//! | answer | nginx `auth_request` | Caddy `forward_auth` | Traefik `ForwardAuth` | HAProxy (the Lua action) |
//! |---|---|---|---|---|
//! | 2xx | proxies; `auth_request_set` + `add_header` copy the RateLimit headers to the response | proxies; `copy_headers` copies them to the upstream request | proxies; `authResponseHeaders` copies them to the upstream request | proxies; the script's variables add them to the response |
//! | 429 | 500 (an error to nginx): use `deny_status=403` | the client gets the 429 as sent (headers, body) | the client gets the 429 as sent | 429 with `Retry-After` |
//! | 403 | `error_page 403 = @ratelimited` answers 429 with `Retry-After` | the client gets 403 | the client gets 403 | 429 |
//! | 5xx, or tollgate down | 500 | the 503 as sent; 502 when down | the 503 as sent; 500 when down | 503 (the script fails closed) |
//!
//! # Decisions
//!
//! - **The domain and the parameters are in the path**
//!   (`/v1/forward-auth/api;deny_status=403`): every proxy sets a fixed auth
//!   URL per site or location, which it writes whole, while the query may
//!   be the client's.
//! - **`RateLimit` and `RateLimit-Policy` are one line each**, every limit's
//!   item folded into it: nginx's `$upstream_http_ratelimit` and HAProxy's
//!   Lua read only a header's first line.
//! - **Concurrency rules** take a lease that only its `lease_ttl` ends, as
//!   over the RLS ([`crate::concurrency`]): a forward-auth call is made
//!   before the proxied request and no proxy says when that request ended,
//!   so the limit is "at most N started within the last `lease_ttl`".
//! - **A trusted proxy that sends no readable client address** keys
//!   `remote_address` by that proxy's address (the tower layer's
//!   [`Unvouched::LastProxy`](tollgate_tower::Unvouched)): one shared
//!   bucket, which limits more, never less.
//! - **Counted under `api="http"`** in the metrics, as the HTTP API it is
//!   part of.
//! - **No descriptor** (every `rate_limits` entry dropped by its actions):
//!   pass, as Envoy, which then makes no call.
//! - **Budgets** (`budget:` rules): the auth call looks (cost 0, refused
//!   once the budget is overspent); the cost is charged after the response
//!   by `POST /v1/forward-auth/{domain}/charge` with `X-Tollgate-Cost`
//!   ([`charge`]), recorded whether or not it fits.

pub mod actions;
pub mod answer;
pub mod charge;
pub mod forwarded;
pub mod params;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::any;

use crate::config::actions::ForwardAuthConfig;
use crate::metrics::{Api, Refusal};
use crate::request::Descriptor;
use crate::rules::RuleSet;
use crate::service::{CheckError, CheckRequest, Service};
use answer::DenyStatus;
use forwarded::Forwarded;
use params::Params;

/// `ANY /v1/forward-auth/{domain}[;name=value...]`, and
/// `POST /v1/forward-auth/{domain}[;name=value...]/charge` ([`charge`]).
pub fn routes<S: Clone + Send + Sync + 'static>(service: Arc<Service>) -> Router<S> {
    let charging = Arc::clone(&service);
    Router::new()
        .route(
            "/v1/forward-auth/{domain}",
            any(move |request: Request| check(Arc::clone(&service), request)),
        )
        .route(
            "/v1/forward-auth/{domain}/charge",
            any(move |request: Request| charge::charge(Arc::clone(&charging), request)),
        )
}

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

async fn check(service: Arc<Service>, request: Request) -> Response {
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
