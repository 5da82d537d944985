//! Token budgets for LLM traffic: check the budget before a request, charge
//! what the response really cost after it, from the OpenAI-schema `usage`.
//!
//! A [`TokenBudgetLayer`] sits in front of an OpenAI-compatible endpoint
//! (a proxy, or a service that calls a model). Each request is keyed (a
//! user, an API key: any [`KeyExtractor`](crate::KeyExtractor)) and must
//! pass every budget of the layer (per minute and per day, say); its
//! response's body is passed on untouched while the layer looks for its
//! `usage` (`prompt_tokens`, `completion_tokens`, `total_tokens`), in the
//! JSON body or, for `stream: true`, in the final chunk of the event
//! stream; when the body ends, every budget is charged.
//!
//! ```
//! use tollgate::{Gcra, KeyedLimiter, Quota};
//! use tollgate_tower::HeaderKey;
//! use tollgate_tower::budget::{TokenBudgetLayer, Tokens};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let user = HeaderKey::new(http::HeaderName::from_static("x-user"));
//! let layer = TokenBudgetLayer::builder(user)
//!     .budget("per-minute", KeyedLimiter::new(Gcra::new(Quota::per_minute(10_000)?)?))
//!     .budget("per-day", KeyedLimiter::new(Gcra::new(Quota::per_day(200_000)?)?))
//!     .tokens(Tokens::Total)
//!     .build()?;
//! # let _ = layer;
//! # Ok(())
//! # }
//! ```
//!
//! `examples/llm_proxy.rs` is a whole proxy with per-user budgets.
//!
//! # Model
//!
//! - **Check, then charge** (the default, what Envoy AI Gateway does): a
//!   request is admitted while every budget has at least one token left,
//!   takes nothing, and is charged its whole cost when its response ends.
//! - **Reserve, then settle** ([`Builder::estimate`]): a request is admitted
//!   only if every budget has its estimate, which is taken at once; when the
//!   response ends, the difference is charged, or given back (never above
//!   full) when it cost less. A request refused by one budget gives its
//!   estimate back to those that had reserved it.
//! - **One operation each**: the reservation is the backend's
//!   (the core's `reserve_estimate`, a check of the estimate), and so is
//!   the settle (the core's `settle`: the excess charged or the difference
//!   refunded); check-then-charge is a reservation of 0 settled at the
//!   whole cost. See [`BudgetBackend`] and [`Reservation`].
//! - **A charge is never refused** (the tokens are spent): it can take a
//!   budget past its limit, and the excess is a debt in every algorithm
//!   (the core's rule, [`tollgate::Limiter::charge`]): a GCRA budget
//!   refuses every request until it is paid back at the quota's rate; a
//!   window budget that ends over its limit starts the next window with
//!   the excess.
//!
//! # Guarantee
//!
//! Per key and budget, the tokens charged over any interval stay within the
//! budget's own bound (GCRA: `burst + rate·t`) plus the overshoot of the
//! requests admitted before the budget ran out: in check-then-charge, the
//! whole cost of each request in flight when it did (so concurrent
//! requests that all passed their check are all charged, and a GCRA budget
//! carries that debt into later intervals); in reserve-then-settle, only
//! what each cost above its estimate. Every algorithm carries that debt:
//! a window that ends over its limit starts the next with the excess, and
//! one charge is capped at [`tollgate::algorithm::DEBT_PERIODS`] periods of
//! the quota (the rest is forgiven), as the core's `charge` states. On
//! Redis the bound is the same across every process sharing the budget
//! (each reservation and each settle is atomic over the key's limits),
//! with the debt capped as the core caps it.
//!
//! # Decisions
//!
//! - **What is charged**: the [`Tokens`] count of the `usage` (total by
//!   default), or a user [meter](Builder::meter) of what was seen. A
//!   successful response without a count is charged the [`NoUsage`]
//!   fallback, by default one token per 4 body bytes passed on (at least
//!   the estimate): a stream without `stream_options.include_usage` is not
//!   free. A response that is not `2xx` and has no count is charged its
//!   estimate only (an upstream that failed generated nothing); one whose
//!   inner service failed (no response) keeps its estimate.
//! - **A stream cut** (the client gone, the upstream broken) is charged
//!   what is known when the body is dropped: its usage if the final chunk
//!   was seen, else the [`NoUsage`] fallback on the bytes passed on so far
//!   (by default one token per started 4 bytes, at least the reservation):
//!   the bytes seen, not the estimate alone, since a long stream cut late
//!   has cost far more than it reserved, and not nothing, since its tokens
//!   were generated. The reservation is settled then, once; nothing stays
//!   held. A request dropped before its response head (the client gone
//!   while the upstream thinks) keeps its reservation, the core's rule for
//!   a reservation never settled: the estimate is what it is known to cost.
//! - **Never buffered**: each frame is passed on as it comes; a byte-level
//!   scanner follows the JSON and copies only the value of the top-level
//!   `usage` (at most 4 KiB), so a body of any size costs constant memory.
//!   A malformed, oversized, escaped (`"usag\u0065"`) or nested `usage` is
//!   not found, and the fallback is charged. Nothing panics on any input
//!   (property-tested on arbitrary bytes cut anywhere).
//! - **Read what the client reads**: a compressed body (`Content-Encoding`)
//!   cannot be scanned. Put the layer inside any compression layer, and
//!   have a proxy ask its upstream for `identity` (the example does);
//!   otherwise the fallback counts compressed bytes.
//! - **Headers**: OpenAI's `x-ratelimit-limit-tokens`,
//!   `x-ratelimit-remaining-tokens` and `x-ratelimit-reset-tokens` (`6m0s`)
//!   for the binding budget, and one draft-11 `RateLimit-Policy` /
//!   `RateLimit` item per budget, on every response by default; a refusal is
//!   `429` with `Retry-After`, `retry-after-ms` and an OpenAI-style JSON
//!   error (see [`headers`] for every format). They show each budget when
//!   the response head leaves, before this request's own charge, which is
//!   known only at the end of its body.
//! - **An estimate above a budget's capacity** can never be admitted:
//!   `413` with `"code":"request_too_large"`, nothing taken.
//! - **No key**: `400` (or `500` for a server that attached no connection
//!   address), as the rate-limit layer answers; never a shared bucket.
//! - **A store that cannot answer**: `503` with
//!   `"code":"budget_unavailable"`, nothing taken; a backend's own failure
//!   policy (Redis's) answers before that can happen.
//!
//! # Backends
//!
//! The core's [`KeyedLimiter`](tollgate::KeyedLimiter) (a budget per key)
//! and [`Limiter`](tollgate::Limiter) (one for every key) decide at once,
//! in `call`. With the `redis` feature, a
//! `tollgate_redis::RedisLimiter` keeps one budget per key
//! for every process: its reservation and its settle are one script call
//! each, and the layer awaits the admission before calling the inner
//! service (the ready service goes with the request; a clone takes its
//! place). Its settle runs in a task of its own once the body is done,
//! and [`Builder::on_settled`] is told when it has landed.
//!
//! # On Redis
//!
//! When Redis does not answer, the limiter's failure policy decides,
//! within its deadline: a look or a reservation is answered by it (fail
//! closed refuses; a local share decides on this process's share of the
//! quota; fail open admits, as configured, never by the layer's choice),
//! and a charge Redis did not take is reported in
//! [`Settled::unrecorded`]. A limiter holding a warm-up limit cannot
//! record a debt, and is refused by [`Builder::build`].

mod backend;
mod body;
mod config;
mod future;
pub mod headers;
mod layer;
mod meter;
#[cfg(feature = "redis")]
mod redis;
mod scan;
mod service;
#[cfg(test)]
mod tests;

use bytes::Bytes;
use http_body_util::{Either, Full};

pub use backend::{BudgetBackend, Pending, Reservation, Settlement};
pub use body::MeteredBody;
pub use future::BudgetFuture;
pub use layer::{Builder, TokenBudgetLayer};
pub use meter::{NoUsage, Seen, Settled, Tokens};
pub use scan::{MAX_USAGE_BYTES, Usage};
pub use service::TokenBudgetService;

/// The response body of a [`TokenBudgetService`]: the inner service's,
/// metered (on the left), or a refusal's (on the right).
pub type BudgetBody<B> = Either<MeteredBody<B>, Full<Bytes>>;
