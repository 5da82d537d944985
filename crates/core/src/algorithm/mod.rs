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
//! With charges, each guarantee holds for admissions and charges together
//! up to the debt still owed: see [below](#charges-debt-and-its-cap).
//!
//! Every transition is a function of (state, now, cost) and the algorithm's
//! parameters, with no clock and no I/O of its own: the
//! [`Limiter`](crate::Limiter) brings the time and the storage, and the Redis
//! backend runs the same arithmetic in a script. A transition that denies
//! never changes the state.
//!
//! # Charges, debt and its cap
//!
//! A *charge* ([`Algorithm::charge_cell`], [`Limiter::charge`](crate::Limiter::charge))
//! records a cost already incurred, admitted or not: it is never refused,
//! and what does not fit is a **debt**. Later checks are refused until the
//! debt is repaid **at the quota's rate** (`limit` per period), per
//! algorithm:
//!
//! | algorithm | where the debt lives, how it is repaid |
//! |---|---|
//! | [`Gcra`] | the TAT runs past `now + burst·T`; repaid one permit per `T` |
//! | [`FixedWindow`], [`CalendarWindow`](calendar::CalendarWindow) | the count runs past the limit `L`; a window that ends with `L + D` starts the next with `D`, the one after with `D − L`, … (floored at 0) |
//! | [`SlidingLog`] | what exceeds the log's room is appended as runs of at most `L` stamped one period apart (`t + T`, `t + 2T`, …): each later period holds `L` of it |
//! | [`SlidingWindow`] | a debt beside the slots fills each slot's room as older slots leave the window: each later period counts `L` of it (with one slot, exactly the fixed window's rule) |
//! | [`WarmUp`] | the next free instant runs past now, as a reservation would; repaid at the stable rate |
//! | [`AllOf`] | each limit by its own rule and cap |
//!
//! **The cap**: a state never owes more than [`DEBT_PERIODS`] periods of its
//! quota beyond full: `DEBT_PERIODS · limit` permits past the limit (for
//! GCRA, past the burst; for the warm-up, a next free instant at most
//! `DEBT_PERIODS` periods past now), wherever the debt came from. A charge
//! that would go beyond records up to the
//! cap and reports the rest as forgiven ([`Charge::forgiven`](crate::Charge::forgiven));
//! the state stays at the cap, so every later request is still refused
//! until the capped debt is repaid. One absurd charge (`u64::MAX`) thus
//! shuts a key for at most `DEBT_PERIODS + 1` periods, never for ever, and
//! never panics. Where a state's field is narrower (a fixed window whose
//! limit leaves fewer than 5 spare bits in its count field, a calendar
//! window's 32-bit count, the end of a GCRA's ticks), the cap is the field.
//!
//! A [carry](Carry) to a lowered quota keeps its debt by the same rule:
//! what a key took beyond the new quota is kept up to the new quota's cap,
//! the rest given back (a limit lowered more than `DEBT_PERIODS + 1`-fold
//! with the old one spent: the key waits out at most `DEBT_PERIODS + 1`
//! new periods, as after the largest charge). The Redis scripts keep the
//! same cap, so both backends answer alike after any carry.
//!
//! **Guarantee with charges**: over any `m` consecutive windows of the
//! algorithm's own guarantee (for GCRA, any interval of length `t`),
//! `admitted + charged ≤ bound(m) + D`, `D` the debt still owed at the end
//! (≤ the cap); the proof: `crates/core/docs/charges.md`.

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

/// How many periods of its quota a state may owe beyond full: the debt cap
/// (see [Charges, debt and its cap](self#charges-debt-and-its-cap)).
pub const DEBT_PERIODS: u64 = 16;

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
    /// learnt after the fact (bytes sent, tokens generated). Never refused:
    /// what does not fit becomes a debt that later requests wait out at the
    /// quota's rate, up to the [debt cap](self#charges-debt-and-its-cap).
    /// Returns the permits recorded: `cost`, or less when the cap was
    /// reached (the rest is forgiven); 0 for a cost of 0, which records
    /// nothing, and on a closed state.
    fn charge_cell(&self, cell: &Self::Cell, now: Nanos, cost: u64) -> u64;

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
    /// of changes: a change never gives back a permit already taken, but
    /// what passes the new quota's debt cap, as for a charge (see
    /// [the cap](self#charges-debt-and-its-cap): a key lowered from 1,000 to
    /// 10 after taking 500 keeps 170, `(DEBT_PERIODS + 1) · 10`). The
    /// GCRA carries its debt in permits (rounded up); the fixed window its
    /// count in the window current under the new period (a count above a
    /// lowered limit then carries into the following windows as a charge's
    /// debt does); the sliding log keeps
    /// every admission time still inside the new period (the newest, past
    /// the cap); a wheel with the
    /// same geometry keeps its slots, one with another slot count or period
    /// moves what still counts into its newest slot, so it frees no earlier.
    /// The default.
    #[default]
    Keep,
    /// The key starts afresh under the new quota.
    Reset,
    /// The fraction taken stays taken: 7 of 10 becomes 14 of 20 (rounded up,
    /// not capped at one: a fraction above one, left by a charge or by an
    /// earlier `Keep`, stays above one, up to the debt cap). Where the state is not a single count
    /// (sliding log, sliding window) this is [`Carry::Keep`].
    Proportional,
}
