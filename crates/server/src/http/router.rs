//! Every HTTP route of the server, assembled in this one file: each path
//! and method is registered here, beside the handler of the door that
//! answers it and the layers in front of it.
//!
//! Three routers, one per listener ([`crate::server`] binds them and
//! serves each with [`super::serve`]):
//!
//! - [`listener`]: the HTTP listener (`server.http_listen`): tollgate's
//!   API ([`api_routes`]), envoyproxy/ratelimit's `/json` and
//!   `/healthcheck`, and the admin API when it is on;
//! - [`debug`]: envoyproxy/ratelimit's debug listener (`DEBUG_HOST`,
//!   `DEBUG_PORT`: under Lyft's environment only, `0.0.0.0:6070` there);
//! - [`prometheus`]: envoyproxy/ratelimit's Prometheus listener
//!   (`USE_PROMETHEUS`, `PROMETHEUS_ADDR`, `PROMETHEUS_PATH`; off by
//!   default).
//!
//! # Layers
//!
//! - **The bearer token** (`server.bearer_token`, none by default) guards
//!   the API's routes but the probes and the status page's files;
//!   `/json` checks it itself (a plain-text 401); the admin API
//!   (`admin: {enabled: true}`, off by default) is served only with a
//!   token and checks it on every route.
//! - **The body limit** (`server.max_request_bytes`, 2 MiB by default)
//!   applies to every route of the HTTP listener: the API's, `/json` and
//!   the admin API's; a larger body is a 413 before it is decoded. Each
//!   router lays it itself, as a limit does not reach a router merged
//!   after it.
//! - The doors that need only the [`Service`] take it from the API's
//!   state, so that they share the layers above without a state of their
//!   own.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{any, get, post, put};

use super::admin::{self, AdminState};
use super::api::{self, ApiState};
use super::lyft::{self, LyftState};
use super::{concurrency, forward_auth};
use crate::grpc::RlsService;
use crate::health::Health;
use crate::service::Service;
use crate::status::page;

/// What the HTTP listener's doors are built from.
pub struct Doors {
    /// The decision every door shares.
    pub service: Arc<Service>,
    /// The API's bearer token (`server.bearer_token`); `None`, the default: no
    /// token asked.
    pub token: Option<Arc<str>>,
    /// Cleared when the server starts draining: `/readyz` then answers
    /// 503.
    pub ready: Arc<AtomicBool>,
    /// The body limit of every route (`server.max_request_bytes`, 2 MiB by
    /// default).
    pub max_request_bytes: usize,
    /// The RLS service `/json` decides through, so that its answer is the
    /// gRPC answer.
    pub rls: RlsService,
    /// The state `/healthcheck` answers from (gRPC's health answers too).
    pub health: Health,
    /// The admin API's token (the bearer token, when `admin.enabled`);
    /// `None`, the default: the admin API is off.
    pub admin_token: Option<Arc<str>>,
}

/// The HTTP listener's routes: [`api_routes`], envoyproxy/ratelimit's, and the
/// admin API's when it is on.
pub fn listener(doors: Doors) -> Router {
    let Doors {
        service,
        token,
        ready,
        max_request_bytes,
        rls,
        health,
        admin_token,
    } = doors;
    let router = api_routes(
        Arc::clone(&service),
        token.clone(),
        ready,
        max_request_bytes,
    )
    .merge(lyft_routes(rls, token, health, max_request_bytes));
    match admin_token {
        Some(admin_token) => router.merge(admin_routes(service, admin_token, max_request_bytes)),
        None => router,
    }
}

/// tollgate's own API ([`super::api`], [`super::concurrency`],
/// [`super::forward_auth`]), its probes and the status page; `ready`
/// turns `/readyz` to 503 when cleared.
pub fn api_routes(
    service: Arc<Service>,
    token: Option<Arc<str>>,
    ready: Arc<AtomicBool>,
    max_request_bytes: usize,
) -> Router {
    let state = ApiState {
        service,
        token,
        ready,
    };
    let guarded = Router::new()
        .route("/v1/check", post(api::check))
        .route("/v1/rules", get(api::rules))
        .route("/v1/acquire", post(concurrency::acquire))
        .route("/v1/release", post(concurrency::release))
        .route("/v1/forward-auth/{domain}", any(forward_auth::check))
        // Any method: the handler answers all but POST 405 with `Allow`.
        .route(
            "/v1/forward-auth/{domain}/charge",
            any(forward_auth::charge::charge),
        )
        .route("/metrics", get(api::metrics))
        .route("/status.json", get(api::status_json))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            api::require_token,
        ));
    Router::new()
        .route("/healthz", get(api::healthz))
        .route("/readyz", get(api::readyz))
        .route("/status", get(page::page))
        .route("/status/status.js", get(page::script))
        .route("/status/status.css", get(page::style))
        .merge(guarded)
        .layer(DefaultBodyLimit::max(max_request_bytes))
        .with_state(state)
}

/// envoyproxy/ratelimit's `POST /json` and `GET /healthcheck`
/// ([`super::lyft`]), bodies up to `max_request_bytes`.
fn lyft_routes(
    rls: RlsService,
    token: Option<Arc<str>>,
    health: Health,
    max_request_bytes: usize,
) -> Router {
    Router::new()
        .route("/json", post(lyft::json_check))
        .route("/healthcheck", get(lyft::healthcheck))
        .layer(DefaultBodyLimit::max(max_request_bytes))
        .with_state(LyftState { rls, token, health })
}

/// The admin API ([`super::admin`]), every route behind `token`.
fn admin_routes(service: Arc<Service>, token: Arc<str>, max_request_bytes: usize) -> Router {
    let state = AdminState { service, token };
    Router::new()
        .route("/v1/admin/keys/{domain}", get(admin::inspect))
        .route("/v1/admin/reset", post(admin::reset))
        .route("/v1/admin/refund", post(admin::refund))
        .route("/v1/admin/penalize", post(admin::penalize))
        .route(
            "/v1/admin/lists/{list}",
            post(admin::list_add).delete(admin::list_remove),
        )
        .route("/v1/admin/limits", put(admin::limits))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            admin::require_token,
        ))
        .layer(DefaultBodyLimit::max(max_request_bytes))
        .with_state(state)
}

/// envoyproxy/ratelimit's debug listener: `/`, `/rlconfig`, `/stats`
/// ([`super::lyft`]); no token, as envoyproxy/ratelimit's.
pub fn debug(service: Arc<Service>) -> Router {
    Router::new()
        .route("/", get(lyft::debug_index))
        .route("/rlconfig", get(lyft::rlconfig))
        .route("/stats", get(lyft::stats))
        .with_state(service)
}

/// envoyproxy/ratelimit's Prometheus listener: `path` (`PROMETHEUS_PATH`,
/// `/metrics` by default) alone, always Prometheus text 0.0.4.
pub fn prometheus(service: Arc<Service>, path: &str) -> Router {
    Router::new()
        .route(path, get(lyft::prometheus))
        .with_state(service)
}
