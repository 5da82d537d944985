//! The algorithms, one file each, each a pure transition.
//!
//! | algorithm | guarantee | state per limiter | storage |
//! |---|---|---|---|
//! | [`Gcra`] (token bucket, leaky bucket as a meter) | any interval of length `t` admits ≤ `burst + rate·t` | 8 bytes | one word, compare-and-swap |
//! | [`FixedWindow`] | every aligned window `[kT, (k+1)T)` admits ≤ `limit` | 8 bytes | one word, compare-and-swap |
//! | [`SlidingLog`] | every window of length `T`, at any start, admits ≤ `limit` | ≤ 16 bytes per permit in the window | mutex + lock-free denials |
//! | [`SlidingWindow`] (time wheel, `n` slots) | slot-aligned windows of length `T` ≤ `limit`; any window of `T − T/n` ≤ `limit`; any window of `T` ≤ `2·limit` | `8·n + 16` bytes | mutex + lock-free denials |
//! | [`WarmUp`] (Guava's `SmoothWarmingUp`) | two admissions are at least the first's cost apart; a cold limiter starts at `rate / cold_factor` and ramps to `rate` over the warm-up period | 16 bytes | mutex + lock-free denials |
//! | [`CalendarWindow`](calendar::CalendarWindow) | every UTC minute / hour / day / week (Monday) / month (1st) admits ≤ `limit` | 8 bytes | one word, compare-and-swap |
//! | [`AnyAlgorithm`](any::AnyAlgorithm) | its variant's | its variant's | its variant's |
//! | [`AllOf`] (several limits) | each limit's own, all-or-nothing | the limits' cells and a mutex | lock-free denials, admissions under the mutex |
//!
//! Every transition is a function of (state, now, cost) and the algorithm's
//! parameters, with no clock and no I/O of its own: the
//! [`Limiter`](crate::Limiter) brings the time and the storage, and the Redis
//! backend runs the same arithmetic in a script. A transition that denies
//! never changes the state.

pub mod all_of;
pub mod any;
pub(crate) mod apply;
pub mod calendar;
pub mod fixed_window;
pub mod gcra;
pub mod sliding_log;
pub mod sliding_window;
pub mod warm_up;

use crate::clock::Nanos;
use crate::decision::Decision;
use crate::quota::Quota;

pub use all_of::AllOf;
pub use fixed_window::FixedWindow;
pub use gcra::Gcra;
pub use sliding_log::SlidingLog;
pub use sliding_window::SlidingWindow;
pub use warm_up::WarmUp;

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A rate-limiting algorithm with its parameters, able to run on a cell of
/// its own state.
///
/// Sealed: the set of algorithms is this crate's, so that every one of them
/// carries a proven guarantee, a reference model and a Redis twin.
pub trait Algorithm: sealed::Sealed + Clone + PartialEq + Send + Sync + 'static {
    /// Where one limiter's state lives: an `AtomicU64` for word-sized states,
    /// a [`Locked`](crate::store::Locked) state otherwise.
    type Cell: Send + Sync;

    /// The quota this algorithm runs.
    fn quota(&self) -> &Quota;

    /// Every quota this algorithm enforces: its [`quota`](Self::quota), or
    /// each limit's for [`AllOf`]. What a middleware checks
    /// an advertised quota against.
    fn quotas(&self) -> Vec<Quota> {
        vec![*self.quota()]
    }

    /// The most permits a single request may cost: the burst for a token
    /// bucket, the limit for window algorithms.
    fn capacity(&self) -> u64;

    /// A fresh state: full, as if never used.
    fn new_cell(&self) -> Self::Cell;

    /// Decides `cost` permits at `now` and, if admitted, records them, as one
    /// atomic step. A denial does not change the cell.
    fn check_cell(&self, cell: &Self::Cell, now: Nanos, cost: u64) -> Decision;

    /// [`check_cell`](Self::check_cell) for a caller that holds the cell
    /// exclusively (a keyed limiter, under its shard's lock): the same
    /// transition and the same decision, written with a plain store where
    /// the state is one word, since nothing can race it. The default is
    /// `check_cell` itself.
    #[inline(always)]
    fn check_cell_mut(&self, cell: &mut Self::Cell, now: Nanos, cost: u64) -> Decision {
        self.check_cell(cell, now, cost)
    }

    /// Decides `cost` permits at `now` without recording anything.
    fn peek_cell(&self, cell: &Self::Cell, now: Nanos, cost: u64) -> Decision;

    /// Records `cost` permits used at `now` whether or not they fit: a cost
    /// learnt after the fact (bytes sent, tokens generated). See
    /// [`Limiter::charge_n`](crate::Limiter::charge_n) for what each
    /// algorithm can owe.
    ///
    /// The window algorithms record what the window has room for, so a
    /// charge is the admission of `min(cost, room)`: the same transition as
    /// [`check_cell`](Self::check_cell), retried if a concurrent admission
    /// took some of the room first. [`Gcra`] overrides it to carry the debt.
    fn charge_cell(&self, cell: &Self::Cell, now: Nanos, cost: u64) {
        loop {
            let room = self.peek_cell(cell, now, 0);
            let take = cost.min(room.remaining());
            // Denied with cost 0: past the end of representable time, where
            // nothing is ever recorded.
            if room.is_denied() || take == 0 {
                return;
            }
            // A denial here means another request took some of the room
            // after the peek (or the window moved on): look again.
            if self.check_cell(cell, now, take).is_allowed() {
                return;
            }
        }
    }

    /// Whether the state in `cell` is indistinguishable from a fresh one at
    /// `now` and at every later instant (bucket full, window over, log
    /// expired): dropping it then changes no future decision.
    fn is_idle(&self, cell: &Self::Cell, now: Nanos) -> bool;

    /// Gives back `permits` taken from `cell`, as of `now`, never above
    /// full: the most recent admissions are undone as far as they still
    /// count (see each algorithm's `refund`). A refund on a full cell
    /// changes nothing, and a refund never lets more be admitted in any
    /// window than the quota allows counting the refunded permits as never
    /// taken.
    fn refund_cell(&self, cell: &Self::Cell, now: Nanos, permits: u64);

    /// Drops the state in `cell`: it is fresh (full) again.
    fn reset_cell(&self, cell: &Self::Cell);

    /// Moves the state out of `cell` into a new cell, atomically leaving
    /// `cell` *closed*: every later request of cost ≥ 1 on it is denied,
    /// "never" to retry. A limiter whose algorithm changes takes its state
    /// this way before carrying it over, so that a request still deciding
    /// on the old cell is refused rather than counted where nobody looks
    /// any more (fail closed, never open).
    fn take_cell(&self, cell: &Self::Cell) -> Self::Cell;

    /// A cell for this algorithm holding the state of `cell`, which was
    /// written under `previous`, carried over by `carry` at `now`.
    fn carry_cell(
        &self,
        previous: &Self,
        cell: &Self::Cell,
        now: Nanos,
        carry: Carry,
    ) -> Self::Cell;
}

/// What happens to a key's state when its quota changes while it is in use.
///
/// Whatever the rule, the new quota applies from the moment of the change;
/// only the permits already taken are at stake.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Carry {
    /// Permits already taken stay taken, counted in permits: a key that used
    /// 7 of 10 has 3 left under a new limit of 10, and 13 under 20. A key
    /// that used more than a new, lower limit allows has none left, and keeps
    /// what it took beyond it too: lowered from 20 to 10 after taking 20 it
    /// waits for 10 of them to free up under the new quota, and raised back
    /// to 20 at once it has still none left. This holds across any sequence
    /// of changes: a change never gives back a permit already taken. The
    /// GCRA carries its debt in permits (rounded up); the fixed window its
    /// count in the window current under the new period (exactly up to the
    /// width of its count field: see [`FixedWindow`]); the sliding log keeps
    /// every admission time still inside the new period; a wheel with the
    /// same geometry keeps its slots, one with another slot count or period
    /// moves what still counts into its newest slot, so it frees no earlier.
    /// The default.
    #[default]
    Keep,
    /// The key starts afresh under the new quota.
    Reset,
    /// The fraction taken stays taken: 7 of 10 becomes 14 of 20 (rounded up,
    /// never capped: a fraction above one, left by a charge or by an earlier
    /// `Keep`, stays above one). Where the state is not a single count
    /// (sliding log, sliding window) this is [`Carry::Keep`].
    Proportional,
}
