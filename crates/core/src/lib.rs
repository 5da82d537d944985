//! Exact rate limiting: every classic algorithm as a pure, lock-free-where-it-fits
//! state machine.
//!
//! # Glossary
//!
//! - **permit**: the unit a limiter counts; a request may cost several.
//! - **[`Quota`]**: `limit` permits per `period`, and a `burst`.
//! - **[`Decision`]**: allowed or not, with `limit`, `remaining`,
//!   `retry_after` and `reset_after`, enough for `Retry-After` and the
//!   `RateLimit-*` headers.
//! - **algorithm**: a pure transition (state, now, cost) → (decision, state),
//!   each with its proven guarantee: [`Gcra`] (token bucket, leaky bucket
//!   as a meter), [`FixedWindow`], [`SlidingLog`], [`SlidingWindow`] (time
//!   wheel), [`WarmUp`], calendar windows on UTC (on a [`SystemClock`]), and
//!   [`AllOf`] for several limits all-or-nothing; see [`algorithm`].
//! - **[`Limiter`]**: an algorithm, its state and a [`Clock`], shared by
//!   clones across threads; linearizable.
//! - **[`KeyedLimiter`]**: one state per key, per-key quotas that can change
//!   live, idle keys dropped by themselves, a hard cap on keys; see [`keyed`].
//! - **[`StripedLimiter`]**: one very hot GCRA limiter split over
//!   cache-padded words, for admissions from several cores at once; never
//!   over-admits, but is not linearizable.
//! - **live limits**, **charges**: [`Limiter::set_algorithm`] changes a quota
//!   while traffic flows, the state carried by a [`Carry`] rule;
//!   [`Limiter::charge_n`] records a cost learnt after the fact (*reserve,
//!   then settle*).
//! - **waiting**: [`Limiter::acquire`] blocks, `until_ready` awaits (feature
//!   `tokio`); see [`wait`]. [`Shaper`]: the leaky bucket as a FIFO queue.
//! - **operating**: a name and an [`observe::Observer`] per limiter, dry-run,
//!   and the controls of [`control`]: reset, refund, penalty, deny and allow
//!   lists.
//! - **[`Clock`]**: where time comes from; [`QuantaClock`] by default,
//!   [`ManualClock`] for tests; see [`clock`].
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Gcra, Limiter, ManualClock, Quota};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let clock = ManualClock::new();
//! let limiter = Limiter::with_clock(Gcra::new(Quota::per_second(10)?.with_burst(2)?)?, clock.clone());
//!
//! assert!(limiter.check().is_allowed());
//! assert!(limiter.check().is_allowed());
//! let denied = limiter.check();
//! assert!(denied.is_denied());
//! assert_eq!(denied.retry_after(), Duration::from_millis(100));
//!
//! clock.advance(denied.retry_after());
//! assert!(limiter.check().is_allowed());
//! # Ok(())
//! # }
//! ```
//!
//! # Which algorithm
//!
//! - [`Gcra`] by default: one word, no lock, smooth refill, burst and rate
//!   set independently.
//! - [`SlidingLog`] when "never more than N in any window of T" must hold
//!   exactly, and N is small (logins, password resets).
//! - [`SlidingWindow`] for the same with large N, at the precision of its
//!   slots.
//! - [`FixedWindow`] when the windows are the contract ("1,000 per calendar
//!   minute") and bursts at the edges are acceptable.

#![forbid(unsafe_code)]
// docs.rs (`--cfg docsrs`, nightly): each feature-gated item is marked
// with the feature that enables it.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod algorithm;
pub mod budget;
pub mod clock;
pub mod concurrency;
pub mod control;
pub mod decision;
pub mod keyed;
mod keymap;
mod limiter;
pub mod observe;
pub mod quota;
#[cfg(feature = "opentelemetry")]
pub mod sampler;
pub mod shaper;
mod shard_lock;
pub mod store;
pub mod striped;
mod sync;
pub mod wait;
mod wall_clock;

pub use algorithm::{
    Algorithm, AllOf, Carry, FixedWindow, Gcra, SlidingLog, SlidingWindow, WarmUp,
};
pub use budget::{Charge, KeyedReserved, Reserved};
#[cfg(feature = "tokio")]
pub use clock::TokioClock;
pub use clock::{CachedClock, Clock, ClockSource, ManualClock, MonotonicClock, Nanos, QuantaClock};
pub use decision::{CostError, Decision};
pub use keyed::{CompactString, DefaultKeyedLimiter, KeyedBuilder, KeyedLimiter, KeyedStats};
pub use limiter::{DefaultLimiter, Limiter, LimiterBuilder};
pub use quota::{Quota, QuotaError};
pub use shaper::{Refusal, Reservation, Shaper, ShaperBuilder};
pub use striped::StripedLimiter;
pub use wall_clock::SystemClock;

/// The README's tour, compiled and run as a doctest so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeTour;

/// The guide's examples (`docs/guide.md`, where the README's tour goes on),
/// compiled and run as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide.md")]
struct Guide;
