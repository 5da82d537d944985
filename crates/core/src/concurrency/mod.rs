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
//!   default, from throughput and the probed mean service time) or
//!   [`Vegas`] (from latency). The band it holds, and the service-time
//!   assumptions it holds under, are stated once, in [`knee`].
//!
//! # Guarantee
//!
//! **At no instant do the live permits of a limit (of a key) hold more
//! slots than its limit.** Every acquisition is one compare-and-swap on a
//! word that holds both the slots in use and the limit, and it raises the
//! count only if the result stays within the limit read in that same word;
//! a permit gives its slots back in its `Drop`, which runs exactly once,
//! on unwinding too. Decisions are linearizable: each takes effect at its
//! compare-and-swap. When the limit is lowered (by
//! [`ConcurrencyLimiter::set_limit`] or the adaptive controller), permits
//! already held are not revoked; no slot is granted until the count is
//! back under the new limit. Proven by the loom models in
//! `tests/loom_concurrency.rs` (acquire/release, the queue's hand-off and
//! cancellation), a hammer of many threads checked by an independent
//! in-flight counter, and a property test against a reference model
//! (`tests/concurrency_limit*.rs`).
//!
//! # Priorities
//!
//! A request of priority `p` is admitted only while the slots in use, its
//! own included, stay within `p`'s threshold: the whole limit for
//! [`Priority::Critical`], 90 % for [`Priority::Default`], 50 % for
//! [`Priority::Sheddable`] by default; see [`Shares`] for the exact rule
//! and its rounding (below a limit of 10, nothing is reserved for critical
//! work). So sheddable work is refused first as the limit nears, and the
//! last slots are kept for critical work.
//!
//! # Waiting
//!
//! [`ConcurrencyLimiter::try_acquire`] answers at once.
//! [`ConcurrencyLimiter::enqueue`] returns a [`Ticket`] (runtime-agnostic),
//! and `acquire().await` (feature `tokio`) waits on it for at most
//! `max_delay`. The queue is FIFO within a priority; a released slot goes to
//! the highest-priority waiter first, and a newcomer never overtakes a
//! queued waiter of its own or a higher priority (no barging), though it
//! may overtake lower ones. A head that does not fit blocks those behind
//! it and every lower priority (no starvation of large requests). At most
//! `max_waiters` wait per limit (per key); beyond, refused at once.
//!
//! # Decisions where the contract is silent
//!
//! - A refusal is an `Err(`[`Denied`]`)` (like tokio's `try_acquire`), not a
//!   decision value: the success case must carry the permit. It says why,
//!   and the limit, the slots in use and what remains for the priority.
//! - A cost above the limit, or above the share of its priority, is
//!   refused with [`Reason::Cost`], at once, even by `enqueue` and
//!   `acquire`: it could never be granted, and queued it would block every
//!   waiter behind it.
//! - `max_delay` defaults to 1 s and `max_waiters` to 1,024: a bounded
//!   wait, not tower's unbounded one.
//! - Keyed limits drop idle keys and refuse new keys when full of busy
//!   ones; see [`keyed`].
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
