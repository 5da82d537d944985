//! Tower middleware for tollgate: layers on an axum, hyper or tonic service
//! that give per-client rate limits, concurrency limits and token budgets,
//! with correct `429`s, `Retry-After` and the IETF `RateLimit` headers.
//!
//! # The layers
//!
//! - [`RateLimitLayer`]: each request is keyed ([`KeyExtractor`]: peer or
//!   client address, API key, route, a closure) and decided by a backend
//!   ([`Backend`]: the core's [`tollgate::KeyedLimiter`],
//!   [`tollgate::Limiter`] or [`tollgate::Shaper`], or with the `redis`
//!   feature a `tollgate_redis::RedisLimiter`), at a [`cost`]; it rejects,
//!   waits ([`Builder::max_delay`]) or settles a cost learnt after the
//!   response ([`settle`]).
//! - [`concurrency::ConcurrencyLimitLayer`]: at most `limit` requests of a
//!   key in flight, each holding its slot for the life of its response.
//! - [`budget::TokenBudgetLayer`]: per-key token budgets for LLM traffic,
//!   checked before a request and charged the OpenAI-schema `usage` of its
//!   response after it, in memory or on Redis.
//!
//! # Guarantees
//!
//! - Decided in `call`, never in `poll_ready`: no permit taken for a call
//!   that never comes, and one client's limit never stalls another's
//!   connection.
//! - Never fails open by accident: a request without a key is refused
//!   (`400`, or `500` when the server attached no address), a cost that can
//!   never fit is `413`, a backend that cannot decide is `503` unless its
//!   own failure policy (Redis's) answered; every method is charged unless
//!   exempted by name.
//! - The headers are exact: `RateLimit-Policy` / `RateLimit` (draft 11) and
//!   `Retry-After` from the decision itself ([`response`]).
//!
//! # A first example
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
//! `examples/axum.rs` shows per-IP and per-API-key limits together,
//! `examples/llm_proxy.rs` an OpenAI-compatible proxy with token budgets.
//!
//! # Reference (in `docs/`)
//!
//! - [Concepts](guide::concepts): layer, key, backend, cost, rejection.
//! - [Readiness](guide::readiness): why the decision is taken in `call`.
//! - [Modes](guide::modes): reject, wait per key, wait in order, cost, settle; methods.
//! - [Routes](guide::routes): exempting a path, a limit per route.
//! - [Configuration](guide::configuration): the builder, responses, the handler's decision.
//! - [Budgets](guide::budgets): what a token budget charges and answers, its backends.

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
pub mod guide;
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
