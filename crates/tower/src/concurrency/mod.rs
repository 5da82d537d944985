//! A concurrency limit as a tower layer: at most `limit` requests of a key
//! in flight at once, each holding its slot **for the life of its
//! response**, body included.
//!
//! # Glossary
//!
//! - **[`ConcurrencyLimitLayer`]** / **[`ConcurrencyLimitService`]**: the
//!   layer and the service it wraps around any `Service<http::Request<B>>`
//!   whose response body yields [`Bytes`](bytes::Bytes) (axum, hyper,
//!   tonic). Clones share one configuration and one
//!   [`KeyedConcurrencyLimiter`] through an `Arc`.
//! - **key**: any [`KeyExtractor`](crate::KeyExtractor) of the rate-limit
//!   layer ([`Global`](crate::Global) for one limit for the whole service).
//! - **backend**: who holds the slots ([`ConcurrencyBackend`]): a
//!   [`KeyedConcurrencyLimiter`] in memory, or (feature `redis`) a
//!   `tollgate_redis::concurrency::RedisConcurrencyLimiter`, whose leases
//!   expire so that a node that dies frees its slots after the lease TTL.
//! - **priority**: a function of the request's parts
//!   ([`ConcurrencyBuilder::priority`]); [`Priority::Default`] otherwise.
//!
//! # When the slot is released
//!
//! The slot is taken in `call`, before the inner service runs, and is
//! released when the first of these happens: the response body ends
//! (its last frame, or an error), the response body is dropped (the client
//! went away, or the server finished with it), the inner service fails, or
//! the response future is dropped before it completes. A streamed response
//! therefore holds its slot until its last byte is produced.
//!
//! # Answers
//!
//! - **HTTP**: `503 Service Unavailable` by default (as nginx's
//!   `limit_conn` and Envoy's adaptive-concurrency filter answer), or
//!   `429 Too Many Requests` with `Retry-After`
//!   ([`ConcurrencyBuilder::too_many_requests`]): a concurrency limit has no
//!   exact time at which a slot frees, so the `Retry-After` is the
//!   configured hint, in whole seconds rounded up, at least 1.
//! - **gRPC** (`content-type: application/grpc*`): a trailers-only answer,
//!   HTTP `200` with `grpc-status: 8` (`RESOURCE_EXHAUSTED`), a
//!   `grpc-message`, and `retry-after` / `grpc-retry-pushback-ms` metadata
//!   when a retry hint is configured.
//! - A request without a key: `400` (gRPC `INVALID_ARGUMENT`), as the
//!   rate-limit layer's default.
//! - A cost above the limit cannot happen: each request takes one slot.
//!
//! # Stacking with the rate-limit layer
//!
//! The layer is generic over the inner response body, so it stacks with
//! [`RateLimitLayer`](crate::RateLimitLayer) in either order. Put the rate
//! limit outside: a request refused for its rate then never takes a slot.
//!
//! # Waiting
//!
//! By default a request that finds no slot is answered at once. With
//! [`ConcurrencyBuilder::wait`], it waits in the limiter's FIFO queue (by
//! priority) for at most the limiter's `max_delay`, then is answered as
//! above; a request whose connection drops while waiting leaves the queue.

pub mod backend;
mod body;
mod config;
mod layer;
mod response;
mod service;

pub use backend::{Acquire, AcquireFuture, ConcurrencyBackend, Refused};
pub use body::ConcurrencyBody;
pub use layer::{ConcurrencyBuilder, ConcurrencyLimitLayer, Refusal};
pub use service::{ConcurrencyFuture, ConcurrencyLimitService};
pub use tollgate::concurrency::{KeyedConcurrencyLimiter, Priority};
