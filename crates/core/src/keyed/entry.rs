//! One key's entry, and how a request runs on it.

use std::sync::Arc;

use super::tier::{Resolved, Tier};
use crate::algorithm::Algorithm;
use crate::clock::Nanos;
use crate::decision::{CostError, Decision};

/// What a request does to a key's state.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Decide without recording.
    Peek,
    /// Decide, and record if admitted.
    Check,
    /// Record whether or not it fits, then peek one permit.
    Charge,
}

/// What a request method returns: a [`Decision`] for the methods whose cost
/// always fits a fresh state (a cost of 1, a charge), a `Result` for those
/// that take any cost.
pub(super) trait Answer {
    fn decided(decision: Decision) -> Self;
    fn refused(error: CostError) -> Self;
}

impl Answer for Decision {
    #[inline(always)]
    fn decided(decision: Decision) -> Decision {
        decision
    }

    fn refused(error: CostError) -> Decision {
        // Every algorithm's capacity is at least 1, and a charge is never
        // refused: only `check_n` and `peek_n` can get here, and they answer
        // in a `Result`.
        unreachable!("keyed: refused a cost that always fits: {error}")
    }
}

impl Answer for Result<Decision, CostError> {
    #[inline(always)]
    fn decided(decision: Decision) -> Self {
        Ok(decision)
    }

    fn refused(error: CostError) -> Self {
        Err(error)
    }
}
/// One key's state and the algorithm it runs under: 8 bytes beside the
/// cell, so that a `u64` key with a one-word state is 24 bytes in the map.
pub(super) struct Entry<A: Algorithm> {
    pub(super) algorithm: Arc<Resolved<A>>,
    pub(super) cell: A::Cell,
}

impl<A: Algorithm> Entry<A> {
    #[inline]
    pub(super) fn within_capacity(&self, cost: u64) -> Result<(), CostError> {
        let capacity = self.algorithm.capacity();
        if cost > capacity {
            return Err(CostError::new(cost, capacity));
        }
        Ok(())
    }

    // Inlined so that `mode`, a constant at every call site, selects its arm
    // at compile time and the decision is built in the caller's frame.
    #[inline(always)]
    pub(super) fn run<R: Answer>(&self, now: Nanos, cost: u64, mode: Mode) -> R {
        if mode != Mode::Charge {
            if let Err(error) = self.within_capacity(cost) {
                return R::refused(error);
            }
        }
        R::decided(match mode {
            Mode::Check => self.algorithm.check_cell(&self.cell, now, cost),
            Mode::Peek => self.algorithm.peek_cell(&self.cell, now, cost),
            Mode::Charge => {
                self.algorithm.charge_cell(&self.cell, now, cost);
                self.algorithm.peek_cell(&self.cell, now, 1)
            }
        })
    }

    /// Moves to `tier`'s algorithm, carrying the state if it differs.
    pub(super) fn adopt(&mut self, tier: &Tier<A>, now: Nanos) {
        // By value: every change re-resolves every key, and one whose quota
        // is equal (a copy under a new generation, or from the override
        // function) keeps its state.
        if !Arc::ptr_eq(&tier.algorithm, &self.algorithm) {
            if tier.algorithm.algorithm != self.algorithm.algorithm {
                self.cell = tier.algorithm.carry_cell(
                    &self.algorithm.algorithm,
                    &self.cell,
                    now,
                    tier.carry,
                );
            }
            self.algorithm = Arc::clone(&tier.algorithm);
        }
    }
}
