//! Concurrency limits: at most `limit` requests *in flight* at once, per
//! limiter or per key, beside the rate limits that bound how many *start*
//! per unit of time (nginx's `limit_conn` beside `limit_req`, Stripe's
//! concurrent-requests limiter beside its rate limiter).
//!
//! # Glossary
//!
//! - **slot**: the unit a concurrency limit counts; a request may take
//!   several (its *cost*).
//! - **[`Permit`]**: slots taken; dropping it gives them back.
//!   [`BorrowedPermit`] is the same, borrowing its limiter (as tokio's
//!   `SemaphorePermit` beside `OwnedSemaphorePermit`).
//! - **[`Ticket`]**: a place in the waiting queue, a future of a permit.
//! - **[`Priority`]** and **[`Shares`]**: critical, default and sheddable
//!   requests, each allowed a share of the limit.
//! - **[`Controller`]**: the optional adaptive limit: [`Knee`] (the
//!   default, from throughput and the probed mean service time; see
//!   [`knee`]) or [`Vegas`] (from latency).
//!
//! # Guarantee
//!
//! **At no instant do the live permits of a limit (of a key) hold more
//! slots than its limit.** An acquisition is one compare-and-swap on a word
//! holding both the slots in use and the limit; a permit's `Drop` gives its
//! slots back exactly once, on unwinding too. Decisions are linearizable.
//! A lowered limit revokes no permit; no slot is granted until the count is
//! back under it. Checked by loom models (`crates/loom/tests/it/loom_concurrency.rs`), a
//! many-thread hammer and a property test (`tests/concurrency_limit*.rs`).
//!
//! # Parameters and rules
//!
//! | parameter | default | from |
//! |---|---|---|
//! | priority shares ([`Shares`]) | critical 100 %, default 90 %, sheddable 50 % | sheddable work refused first, the last slots kept for critical work |
//! | `max_delay` | 1 s ([`DEFAULT_MAX_DELAY`]) | a bounded wait, not tower's unbounded one |
//! | `max_waiters` | 1,024 per limit ([`DEFAULT_MAX_WAITERS`]) | beyond, refused at once |
//!
//! [`ConcurrencyLimiter::try_acquire`] answers at once; `enqueue` returns a
//! [`Ticket`] and `acquire().await` (feature `tokio`) waits on it. The queue
//! is FIFO within a priority, highest priority first, with no barging and no
//! starvation of large requests. A refusal is an `Err(`[`Denied`]`)` that
//! says why; a cost above the limit or its priority's share is refused at
//! once ([`Reason::Cost`]), even by `acquire`. Keyed limits: see [`keyed`].
//! Each rule in full: `crates/core/docs/concurrency.md`.
//!
//! # Example
//!
//! ```
//! use tollgate::concurrency::{ConcurrencyLimiter, Priority};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = ConcurrencyLimiter::new(2)?; // at most 2 slots in use
//! let first = limiter.try_acquire(1)?;
//! let _second = limiter.try_acquire_as(1, Priority::Critical)?;
//! assert!(limiter.try_acquire(1).is_err()); // full: refused at once
//! drop(first); // its slot is back
//! assert!(limiter.try_acquire(1).is_ok());
//! # Ok(())
//! # }
//! ```

pub mod adaptive;
mod config;
pub mod keyed;
pub mod knee;
mod limiter;
mod permit;
mod settings;
mod slots;
#[cfg(feature = "tokio")]
mod wait;

pub use adaptive::{Controller, Vegas, VegasState};
pub use config::{ConfigError, Denied, MAX_LIMIT, Priority, Reason, Shares};
pub use keyed::{DEFAULT_MAX_KEYS, KeyedConcurrencyBuilder, KeyedConcurrencyLimiter};
pub use knee::{Knee, KneeState};
pub use limiter::{ConcurrencyBuilder, ConcurrencyLimiter};
pub use permit::{BorrowedPermit, Permit, Ticket};
pub use settings::{DEFAULT_MAX_DELAY, DEFAULT_MAX_WAITERS};
