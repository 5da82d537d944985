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
//! # Decisions and backends
//!
//! What is charged when (no `usage`, a failed upstream, a stream cut), the
//! scanner that never buffers, the headers, every refusal, and the local
//! and Redis backends with their failure policy:
//! [the budget guide](crate::guide::budgets).

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
