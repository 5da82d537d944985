//! Controls: reset, refund, penalty, and deny / allow lists.
//!
//! The same controls, with the same meaning, on [`Limiter`](crate::Limiter) (without a key),
//! [`KeyedLimiter`](crate::KeyedLimiter) (per key), the Redis limiter and the
//! server's admin API.
//!
//! # Guarantees
//!
//! - **`reset`**: the state is dropped (full again, as if never used). It
//!   cancels a penalty; it does not touch the lists. Idempotent.
//! - **`refund(n)`**: `n` permits given back, never above full (a refund on
//!   a full or absent state changes nothing). Each algorithm undoes its most
//!   recent admissions as far as they still count: GCRA
//!   `tat = max(now, tat − n·T)`; fixed window: the current window's count
//!   − n, floored at 0; sliding window: the newest slot first, then older
//!   ones; sliding log: the `n` newest times dropped. **A refund never lets
//!   more be admitted in any window than the quota allows counting the
//!   refunded permits as never taken** (property-tested against the
//!   reference models in `tests/it/control_properties.rs`).
//! - **`penalize(d)`**: a penalty box. Every request is denied for `d` from
//!   now (`remaining` 0, `retry_after` the time left, `reset_after` the
//!   time left plus the time to full), counting nothing. Setting it drops
//!   the state, so that the key is full when it ends. Penalties only
//!   extend: one ending before the current one changes nothing (not even
//!   the state). `d = 0` is a no-op; a `d` past the clock's end denies until
//!   "never" (`u64::MAX` ns).
//! - **`deny` / `allow` / `unlist`**: lists checked before any limit and any
//!   penalty. A denied key is refused with `remaining` 0 and `retry_after`
//!   and `reset_after` "never", counting nothing; an allowed key is
//!   admitted without counting, with `remaining` and `reset_after` as
//!   [`peek_n`](crate::Limiter::peek_n) of the same cost would report them (0 left
//!   if the cost would not fit). `unlist` removes either. A key is on at
//!   most one list: `deny` after `allow` moves it.
//! - Charges (`charge_n`) are not recorded while a list or a penalty decides
//!   the key: an allowed key counts nothing, a penalized one has its state
//!   dropped already.
//! - Each control returns the state after it: what a request of cost 0
//!   would be told now ([`peek_n`](crate::Limiter::peek_n)`(0)`, or the list's or
//!   penalty's denial), so `remaining` is the permits available.
//!
//! # Cost on the check path
//!
//! Unused, the controls cost one `Relaxed` load of two words that nothing
//! writes (beside the limiter's read-only fields, not its state) and a
//! predictable branch. While a list or a penalty is set, decisions take a
//! separate, out-of-line path. An expired penalty is cleared by the first
//! decision that sees it.
//!
//! # Concurrency
//!
//! Each control takes effect at one instant. A decision racing a control
//! is decided either before it or after it, with one exception on the safe
//! side: an admission that read "no penalty" just before a penalty was set
//! may be recorded into the state the penalty just dropped, which is then
//! one admission short of full when the penalty ends. Never more is
//! admitted than without the control.

use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::clock::{Nanos, saturating_nanos};
use crate::decision::Decision;
use crate::observe::{List, Outcome};
use crate::sync::{AtomicU64, Ordering};

/// The default cap on keys with a list or a penalty, per keyed limiter.
pub const DEFAULT_MAX_CONTROLLED: usize = 1 << 16;

/// A control that could not be applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControlError {
    /// The lists and penalty boxes hold their maximum of keys (ended
    /// penalties were dropped first): unlist some, or raise
    /// [`max_controlled`](crate::KeyedBuilder::max_controlled).
    Full {
        /// The cap.
        max: usize,
    },
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::Full { max } => write!(
                f,
                "the deny/allow lists and penalty boxes already hold their maximum of {max} keys"
            ),
        }
    }
}

impl std::error::Error for ControlError {}

/// Not listed.
const UNLISTED: u64 = 0;
/// On the allow list.
const ALLOWED: u64 = 1;
/// On the deny list.
const DENIED: u64 = 2;

/// The lists and the penalty of one state (a [`Limiter`]'s, or one key's).
#[derive(Debug, Default)]
pub(crate) struct DirectControls {
    /// [`UNLISTED`], [`ALLOWED`] or [`DENIED`].
    listed: AtomicU64,
    /// The end of the penalty in clock nanoseconds (`u64::MAX`: never);
    /// 0: no penalty.
    penalty_until: AtomicU64,
    /// 1 once the algorithm changed (`Limiter::set_algorithm`): decisions
    /// then read the current one under a lock.
    replaced: AtomicU64,
}

impl DirectControls {
    pub(crate) fn new() -> DirectControls {
        DirectControls::default()
    }

    /// Whether a list or a penalty may decide: the check path's one test.
    #[inline(always)]
    pub(crate) fn any(&self) -> bool {
        // Relaxed: each word is a whole control and publishes no other
        // memory; a decision racing a control's change may see either value,
        // which places it before or after the change (see the module docs).
        (self.listed.load(Ordering::Relaxed)
            | self.penalty_until.load(Ordering::Relaxed)
            | self.replaced.load(Ordering::Relaxed))
            != 0
    }

    /// Whether the algorithm changed since the limiter was built.
    #[inline]
    pub(crate) fn is_replaced(&self) -> bool {
        // Relaxed: set under the limiter's write lock, and read before
        // taking its read lock (see `Limiter::set_algorithm`).
        self.replaced.load(Ordering::Relaxed) != 0
    }

    /// Records that the algorithm changed; never undone.
    pub(crate) fn mark_replaced(&self) {
        // Relaxed: see `is_replaced`.
        self.replaced.store(1, Ordering::Relaxed);
    }

    /// A charge under the lists and the penalty: recorded only when the
    /// limit decides (see the module docs); then what a request of one
    /// permit would be told, and the permits recorded.
    pub(crate) fn charge<A: Algorithm>(
        &self,
        algorithm: &A,
        cell: &A::Cell,
        now: Nanos,
        cost: u64,
    ) -> (Decision, u64) {
        // Relaxed: see `any`.
        let listed = self.listed.load(Ordering::Relaxed) != UNLISTED;
        let mut recorded = 0;
        if !listed && self.penalty(algorithm, cell, now).is_none() {
            recorded = algorithm.charge_cell(cell, now, cost);
        }
        (self.decide(algorithm, cell, now, 1, false).1, recorded)
    }

    /// Decides a request of `cost` at `now` under the lists and the penalty,
    /// then the algorithm; records only when `record` and the algorithm
    /// decides. The outcome is the real one (not yet turned into a shadow).
    pub(crate) fn decide<A: Algorithm>(
        &self,
        algorithm: &A,
        cell: &A::Cell,
        now: Nanos,
        cost: u64,
        record: bool,
    ) -> (Outcome, Decision) {
        // Relaxed: see `any`.
        match self.listed.load(Ordering::Relaxed) {
            DENIED => {
                let limit = algorithm.peek_cell(cell, now, 0).limit();
                return (
                    Outcome::Listed(List::Deny),
                    Decision::deny(limit, 0, u64::MAX, u64::MAX),
                );
            }
            ALLOWED => {
                return (
                    Outcome::Listed(List::Allow),
                    allowed(algorithm, cell, now, cost),
                );
            }
            _ => {}
        }
        if let Some(denial) = self.penalty(algorithm, cell, now) {
            return (Outcome::Penalized, denial);
        }
        let decision = if record {
            algorithm.check_cell(cell, now, cost)
        } else {
            algorithm.peek_cell(cell, now, cost)
        };
        (Outcome::of(&decision, false), decision)
    }

    /// The penalty's denial at `now`, if one is running; clears one that
    /// ended.
    fn penalty<A: Algorithm>(&self, algorithm: &A, cell: &A::Cell, now: Nanos) -> Option<Decision> {
        // Relaxed: see `any`.
        let until = self.penalty_until.load(Ordering::Relaxed);
        if until == 0 {
            return None;
        }
        let now = now.as_u64();
        if now >= until {
            // Ended: back to the fast path, unless a new penalty replaced it
            // meanwhile (then the exchange fails and the next decision sees
            // that one). Relaxed, as above.
            let _ =
                self.penalty_until
                    .compare_exchange(until, 0, Ordering::Relaxed, Ordering::Relaxed);
            return None;
        }
        let full = algorithm.peek_cell(cell, Nanos::new(now), 0);
        let (left, reset) = if until == u64::MAX {
            (u64::MAX, u64::MAX)
        } else {
            let left = until - now;
            (
                left,
                left.saturating_add(saturating_nanos(full.reset_after())),
            )
        };
        Some(Decision::deny(full.limit(), 0, left, reset))
    }

    /// Sets a penalty of `duration` from `now`, dropping the state, unless a
    /// penalty ending later is running. Returns whether it was set.
    pub(crate) fn penalize<A: Algorithm>(
        &self,
        algorithm: &A,
        cell: &A::Cell,
        now: Nanos,
        duration: Duration,
    ) -> bool {
        if duration.is_zero() {
            return false;
        }
        let until = now
            .as_u64()
            .saturating_add(saturating_nanos(duration))
            .max(1);
        // Relaxed: see `any`. `fetch_max` makes "only extend" one step.
        let previous = self.penalty_until.fetch_max(until, Ordering::Relaxed);
        if previous >= until {
            return false;
        }
        algorithm.reset_cell(cell);
        true
    }

    /// Drops the state and cancels the penalty.
    pub(crate) fn reset<A: Algorithm>(&self, algorithm: &A, cell: &A::Cell) {
        // Relaxed: see `any`.
        self.penalty_until.store(0, Ordering::Relaxed);
        algorithm.reset_cell(cell);
    }

    /// Puts the state on `list`, or takes it off both (`None`); returns the
    /// list it was on.
    pub(crate) fn set_list(&self, list: Option<List>) -> Option<List> {
        let value = match list {
            None => UNLISTED,
            Some(List::Allow) => ALLOWED,
            Some(List::Deny) => DENIED,
        };
        // Relaxed: see `any`.
        match self.listed.swap(value, Ordering::Relaxed) {
            ALLOWED => Some(List::Allow),
            DENIED => Some(List::Deny),
            _ => None,
        }
    }

    /// The list the state is on, if any.
    pub(crate) fn list(&self) -> Option<List> {
        // Relaxed: see `any`.
        match self.listed.load(Ordering::Relaxed) {
            ALLOWED => Some(List::Allow),
            DENIED => Some(List::Deny),
            _ => None,
        }
    }

    /// Whether neither list nor penalty is set (an ended penalty counts as
    /// none at `now`).
    #[allow(dead_code)]
    pub(crate) fn is_clear(&self, now: Nanos) -> bool {
        // Relaxed: see `any`.
        let until = self.penalty_until.load(Ordering::Relaxed);
        self.list().is_none() && (until == 0 || now.as_u64() >= until)
    }
}

/// An allow-listed request: admitted, counting nothing, reporting what a
/// peek of the same cost reports (nothing left if it would not fit).
fn allowed<A: Algorithm>(algorithm: &A, cell: &A::Cell, now: Nanos, cost: u64) -> Decision {
    let peek = algorithm.peek_cell(cell, now, cost);
    let remaining = if peek.is_allowed() {
        peek.remaining()
    } else {
        0
    };
    Decision::allow(
        peek.limit(),
        remaining,
        saturating_nanos(peek.reset_after()),
    )
}
