//! Tower middleware for tollgate: one layer on an axum, hyper or tonic
//! service gives per-client limits, correct `429`s, `Retry-After` and the
//! IETF `RateLimit` headers.
//!
//! # Glossary
//!
//! - **[`RateLimitLayer`]** / **[`RateLimitService`]**: the tower layer and
//!   the service it wraps around any `Service<http::Request<B>>`. Clones
//!   share one configuration and one backend through an [`Arc`](std::sync::Arc):
//!   an axum router can clone it per connection without a `Buffer`.
//! - **key** ([`KeyExtractor`]): which bucket a request counts in: [`Global`],
//!   [`PeerIp`], [`ClientIp`] (behind trusted proxies), [`HeaderKey`] (an API
//!   key), `MethodRoute` (method and axum's matched route, with the `axum`
//!   feature), [`KeyFn`] (a closure), and [`Or`] to fall back from one to
//!   another. A key made from the request's path should be made from
//!   [`path::normalize`]'s form, so that `/x/../api` and `/%61pi` count as
//!   `/api` (the server's forward-auth matches paths the same way).
//! - **backend** ([`Backend`]): who decides "this key, this cost":
//!   a [`tollgate::KeyedLimiter`] (per-key quotas with `override_key` /
//!   `override_with`, several limits with [`tollgate::AllOf`]) or a
//!   [`tollgate::Limiter`] (one bucket), a [`tollgate::Shaper`] (FIFO
//!   waiting up to its `max_delay`), or, with the `redis` feature,
//!   `tollgate_redis::RedisLimiter` (its failure policy applied).
//! - **cost**: permits a request takes; 1, or a function of its parts
//!   ([`cost`]).
//! - **token budgets** ([`budget`]): for LLM traffic, a layer that checks
//!   per-key token budgets before a request and charges the OpenAI-schema
//!   `usage` of its response (streamed or not) after it.
//! - **[`Rejection`]**: why a request was answered here: limited (`429`),
//!   no key (`400`/`500`), cost above the quota (`413`), backend down (`503`).
//!
//! # Examples
//!
//! ```
//! use std::net::SocketAddr;
//! use axum::{Router, routing::get};
//! use tollgate::{Gcra, KeyedLimiter, Quota};
//! use tollgate_tower::{PeerIp, RateLimitLayer};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // 10 per second per client address, bursts of 20.
//! let per_ip = KeyedLimiter::new(Gcra::new(Quota::per_second(10)?.with_burst(20)?)?);
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(PeerIp::new(), per_ip));
//! // Serve with the peer address attached to each request:
//! let _service = app.into_make_service_with_connect_info::<SocketAddr>();
//! # Ok(())
//! # }
//! ```
//!
//! `examples/axum.rs` shows per-IP and per-API-key limits together.
//!
//! # Readiness
//!
//! `poll_ready` passes the inner service's readiness through and does
//! nothing else; the rate-limit decision is taken in `call`, once there is
//! a request and a key. That avoids the two classic traps of deciding in
//! `poll_ready` (tower's own `RateLimit`): a permit taken for a call that
//! never comes (a service polled ready and then dropped, or used by
//! another request), and a limit reached for one client making the whole
//! service not ready, which stalls every other client's connection instead
//! of answering `429`. A request decided at once (local limiters) calls
//! the inner service directly from `call`. A request that must wait (an
//! async backend, or [`max_delay`](Builder::max_delay)) takes the inner
//! service that was made ready with it and leaves a clone in its place, so
//! the readiness it was promised is the one it uses.
//!
//! # Modes
//!
//! - **Reject** (the default): a denial is answered at once.
//! - **Wait per key, not in order** ([`Builder::max_delay`], on any
//!   backend, typically a [`tollgate::KeyedLimiter`]): a denied request
//!   sleeps for its decision's `retry_after` and asks again, until admitted
//!   or until the next wait no longer fits in what is left of `max_delay`
//!   (then `429`). Each key waits on its own: a waiting client never holds
//!   up another. Within one key there is no queue: every waiter retries on
//!   its own timer, a request that arrives as a permit frees up takes it
//!   before a waiter that slept for it, and a waiter can be starved until
//!   its budget runs out. Each retry is a new decision (a timer and a
//!   check), and a waiter holds its connection and a task meanwhile. Use it
//!   to absorb a client's short bursts (a budget of a few `retry_after`s)
//!   where order does not matter.
//! - **Wait in order, for everyone at once** (a [`tollgate::Shaper`]
//!   backend, the layer's `max_delay` unset): one FIFO queue for all
//!   requests, **whatever their key** (the key is ignored), released at
//!   the shaper's rate; a request that would wait longer than the shaper's
//!   `max_delay`, or finds the queue full, is answered `429` at once, and
//!   one that is dropped while waiting gives its slot back. Order is exact,
//!   but there is no per-client fairness: one client's burst delays every
//!   other client behind it. Use it to pace traffic into something with
//!   one global rate (a downstream API, a database). For per-client limits
//!   in front of a global FIFO pace, stack two layers: a keyed one that
//!   rejects (or waits per key) outside, the shaper inside. A per-key FIFO
//!   shaper is not provided.
//! - **Cost** ([`Builder::cost`]): route weights, body size.
//! - **Reserve, then settle** ([`Builder::settle`], [`settle`]): admitted
//!   on the least a request costs, charged the rest once the response has
//!   been sent (bytes sent, tokens generated).
//!
//! # Responses
//!
//! See [`response`] for the exact headers (`Retry-After`, and
//! `RateLimit-Policy` / `RateLimit` per draft-ietf-httpapi-ratelimit-headers-11,
//! the latest revision, appended so that stacked layers all reach the
//! client) and the gRPC answer (`RESOURCE_EXHAUSTED` with `retry-after` and
//! `grpc-retry-pushback-ms` metadata).
//!
//! # Methods
//!
//! Every method is charged by default, `OPTIONS` and `HEAD` included: a
//! limit that some requests skip unasked is a limit that fails open (a
//! `HEAD` runs the same handler as a `GET` in axum and hyper). Exempt by
//! name with [`Builder::skip_methods`], typically `[Method::OPTIONS]` for
//! CORS preflights answered by a CORS layer: an exempt request is passed on
//! uncharged and without RateLimit headers, and any method not listed
//! (`PROPFIND`, one made up) is still charged.
//!
//! # Exempting a path, and a limit per route
//!
//! A layer limits every request of the routes it wraps: a path is exempt by
//! being outside it, and routes get different limits from different layers.
//! With axum, [`Router::layer`](https://docs.rs/axum/latest/axum/struct.Router.html#method.layer)
//! wraps the routes added before it, and `merge` joins routers, so a health
//! check added after the layer, or merged from a router without one, is
//! never charged (nor refused when the limit is reached):
//!
//! ```
//! use std::net::{IpAddr, SocketAddr};
//! use axum::{Router, routing::{get, post}};
//! use tollgate::{Gcra, KeyedLimiter, Quota};
//! use tollgate_tower::{PeerIp, RateLimitLayer};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Searches are costly: 2 per second per client; the rest 50.
//! let search: KeyedLimiter<IpAddr, Gcra> = KeyedLimiter::new(Gcra::new(Quota::per_second(2)?)?);
//! let rest: KeyedLimiter<IpAddr, Gcra> = KeyedLimiter::new(Gcra::new(Quota::per_second(50)?)?);
//! let searches = Router::new()
//!     .route("/search", post(|| async { "found" }))
//!     .layer(RateLimitLayer::new(PeerIp::new(), search));
//! let app: Router = Router::new()
//!     .route("/items", get(|| async { "items" }))
//!     .route("/orders", get(|| async { "orders" }))
//!     .layer(RateLimitLayer::new(PeerIp::new(), rest))
//!     // Added after the layer: not limited.
//!     .route("/health", get(|| async { "ok" }))
//!     .merge(searches);
//! let _service = app.into_make_service_with_connect_info::<SocketAddr>();
//! # Ok(())
//! # }
//! ```
//!
//! One layer can also give each route its own quota: key by route
//! (`MethodRoute`, with the `axum` feature, or a [`KeyFn`] of the path) and
//! give the keyed limiter an override per route
//! ([`KeyedBuilder::override_with`](tollgate::KeyedBuilder::override_with)):
//!
//! ```
//! use tollgate::{Gcra, KeyedLimiter, Quota};
//! use tollgate_tower::{KeyFn, RateLimitLayer};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let uploads = Gcra::new(Quota::per_second(1)?)?;
//! // Keyed by path: /upload gets 1 per second, every other path 100.
//! let limiter: KeyedLimiter<String, Gcra> =
//!     KeyedLimiter::builder(Gcra::new(Quota::per_second(100)?)?)
//!         .override_with(move |path: &String| (path == "/upload").then(|| uploads.clone()))
//!         .build();
//! let by_path = KeyFn::new(|parts: &http::request::Parts| Ok(parts.uri.path().to_owned()));
//! let layer = RateLimitLayer::new(by_path, limiter);
//! # let _ = layer;
//! # Ok(())
//! # }
//! ```
//!
//! # The handler sees its decision
//!
//! An admitted request carries its [`tollgate::Decision`] in its extensions
//! (with stacked layers, the innermost layer's): an axum handler reads it
//! with `Extension<Decision>`, to show a client what it has left or to
//! degrade gracefully when it runs low.
//!
//! # Configuration
//!
//! Every [`Builder`] setter is infallible; [`Builder::build`] checks the
//! whole configuration and returns a [`BuildError`]. This example limits
//! each client on each endpoint (a pair of keys), advertises the quota
//! clients can pace themselves to, exempts CORS preflights, answers `429`s
//! in JSON, and shows the handler its decision:
//!
//! ```
//! use std::net::SocketAddr;
//! use axum::http::{Method, Response, header};
//! use axum::{Extension, Router, routing::get};
//! use tollgate::{Decision, Gcra, KeyedLimiter, Quota};
//! use tollgate_tower::{MethodRoute, PeerIp, RateLimitLayer, Rejection};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let quota = Quota::per_second(10)?.with_burst(20)?;
//! // One bucket per (endpoint, client address).
//! let limiter = KeyedLimiter::new(Gcra::new(quota)?);
//! let layer = RateLimitLayer::builder((MethodRoute, PeerIp::new()), limiter)
//!     .policy_name("per-endpoint")
//!     // `q=10;w=1`: the burst of 20 is not a rate a client can keep.
//!     .policy_quota(quota)
//!     .skip_methods([Method::OPTIONS])
//!     .headers_on_success(true)
//!     .on_rejection(|rejection: &Rejection| {
//!         let mut response = Response::new(format!("{{\"error\":\"{rejection}\"}}\n"));
//!         *response.status_mut() = rejection.status();
//!         response.headers_mut().insert(
//!             header::CONTENT_TYPE,
//!             header::HeaderValue::from_static("application/json"),
//!         );
//!         response
//!     })
//!     .build()?;
//! let app: Router = Router::new()
//!     .route(
//!         "/items",
//!         get(|Extension(decision): Extension<Decision>| async move {
//!             format!("{} requests left\n", decision.remaining())
//!         }),
//!     )
//!     .layer(layer);
//! let _service = app.into_make_service_with_connect_info::<SocketAddr>();
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
// docs.rs (`--cfg docsrs`, nightly): each feature-gated item is marked
// with the feature that enables it.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
pub mod budget;
pub mod concurrency;
mod config;
pub mod cost;
mod error;
mod future;
pub mod ip;
pub mod key;
mod layer;
pub mod observe;
pub mod path;
#[cfg(feature = "redis")]
mod redis;
pub mod response;
mod service;
pub mod settle;

pub use backend::{Backend, BackendError, BoxError, Charge, Decided, DecisionFuture};
pub use error::BuildError;
pub use future::{ResponseBody, ResponseFuture};
pub use ip::{
    ClientIp, ConnectionAddr, DefaultConnectionAddr, PeerIp, PrefixError, ProxyHeader, Unvouched,
};
pub use key::{Global, HeaderKey, KeyError, KeyErrorKind, KeyExtractor, KeyFn, Or, OrKey};
#[cfg(feature = "axum")]
pub use key::{MethodRoute, RouteKey};
pub use layer::{Builder, OnMissingKey, RateLimitLayer};
#[cfg(feature = "redis")]
pub use redis::RedisKey;
pub use response::Rejection;
pub use service::RateLimitService;
