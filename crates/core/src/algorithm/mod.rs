//! The algorithms, one file each, each a pure transition.
//!
//! | algorithm | guarantee | state per limiter | storage |
//! |---|---|---|---|
//! | [`Gcra`] (token bucket, leaky bucket as a meter) | any interval of length `t` admits ≤ `burst + rate·t` | 8 bytes | one word, compare-and-swap |
//! | [`FixedWindow`] | every aligned window `[kT, (k+1)T)` admits ≤ `limit` | 8 bytes | one word, compare-and-swap |
//! | [`SlidingLog`] | every window of length `T`, at any start, admits ≤ `limit` | ≤ 16 bytes per permit in the window | mutex + lock-free denials |
//! | [`SlidingWindow`] (time wheel, `n` slots) | slot-aligned windows of length `T` ≤ `limit`; any window of `T − T/n` ≤ `limit`; any window of `T` ≤ `2·limit` | `8·n + 16` bytes | mutex + lock-free denials |
//!
//! Every transition is a function of (state, now, cost) and the algorithm's
//! parameters, with no clock and no I/O of its own: the
//! [`Limiter`](crate::Limiter) brings the time and the storage, and the Redis
//! backend runs the same arithmetic in a script. A transition that denies
//! never changes the state.

pub mod fixed_window;
pub mod gcra;
pub mod sliding_log;
pub mod sliding_window;

use crate::clock::Nanos;
use crate::decision::Decision;
use crate::quota::Quota;
use crate::store::DenyHint;

pub use fixed_window::FixedWindow;
pub use gcra::Gcra;
pub use sliding_log::SlidingLog;
pub use sliding_window::SlidingWindow;

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A rate-limiting algorithm with its parameters, able to run on a cell of
/// its own state.
///
/// Sealed: the set of algorithms is this crate's, so that every one of them
/// carries a proven guarantee, a reference model and a Redis twin.
pub trait Algorithm: sealed::Sealed + Send + Sync + 'static {
    /// Where one limiter's state lives: an `AtomicU64` for word-sized states,
    /// a [`Locked`](crate::store::Locked) state otherwise.
    type Cell: Send + Sync;

    /// The quota this algorithm runs.
    fn quota(&self) -> &Quota;

    /// The most permits a single request may cost: the burst for a token
    /// bucket, the limit for window algorithms.
    fn capacity(&self) -> u64;

    /// A fresh state: full, as if never used.
    fn new_cell(&self) -> Self::Cell;

    /// Decides `cost` permits at `now` and, if admitted, records them, as one
    /// atomic step. A denial does not change the cell.
    fn check_cell(&self, cell: &Self::Cell, now: Nanos, cost: u64) -> Decision;

    /// Decides `cost` permits at `now` without recording anything.
    fn peek_cell(&self, cell: &Self::Cell, now: Nanos, cost: u64) -> Decision;
}

/// A transition over a state too large for one word: decided from a shared
/// view, applied under the lock.
pub(crate) trait LockedTransition {
    type State;
    fn decide(&self, state: &Self::State, now: Nanos, cost: u64) -> Decision;
    fn admit(&self, state: &mut Self::State, now: Nanos, cost: u64);
    fn hint(&self, state: &Self::State) -> DenyHint;
    /// The limit reported in decisions.
    fn limit(&self) -> u64;
}
