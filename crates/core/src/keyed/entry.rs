//! One key's entry, and how a request runs on it.

use std::sync::Arc;

use super::tier::{Resolved, Tier};
use crate::algorithm::Algorithm;
use crate::budget::Charge;
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
    /// A charge of `asked` that recorded `recorded`, then `decision`.
    #[inline(always)]
    fn charged(decision: Decision, asked: u64, recorded: u64) -> Self
    where
        Self: Sized,
    {
        let _ = (asked, recorded);
        Self::decided(decision)
    }
    fn refused(error: CostError) -> Self;
    /// The answer as seen `by_ns` before the instant it was decided at (see
    /// [`Decision::seen_earlier_by`]).
    fn seen_earlier_by(self, by_ns: u64) -> Self;
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

    #[inline]
    fn seen_earlier_by(self, by_ns: u64) -> Decision {
        self.seen_earlier_by(by_ns)
    }
}

/// A charge's answer: what was recorded beside the decision. A path that
/// records nothing (a list, a penalty, a charge of 0) answers `decided`:
/// nothing asked is recorded.
impl Answer for Charge {
    #[inline(always)]
    fn decided(decision: Decision) -> Charge {
        Charge::new(decision, 0, 0)
    }

    #[inline(always)]
    fn charged(decision: Decision, asked: u64, recorded: u64) -> Charge {
        Charge::new(decision, asked, recorded)
    }

    fn refused(error: CostError) -> Charge {
        unreachable!("keyed: a charge is never refused: {error}")
    }

    #[inline]
    fn seen_earlier_by(self, by_ns: u64) -> Charge {
        self.map_decision(|decision| decision.seen_earlier_by(by_ns))
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

    #[inline]
    fn seen_earlier_by(self, by_ns: u64) -> Self {
        self.map(|decision| decision.seen_earlier_by(by_ns))
    }
}

/// A key whose algorithm is not its shard's default: its state and the
/// algorithm it runs under (24 bytes with a `u64` key and a one-word
/// state). Keys on the default are hot entries, the key and the cell alone
/// (see [`ShardTag`]).
pub(super) struct Entry<A: Algorithm> {
    pub(super) algorithm: Arc<Resolved<A>>,
    pub(super) cell: A::Cell,
}

/// What every hot entry of a shard runs: the default as the rules of
/// `generation` resolved it. The generation is copied beside the pointer so
/// that a known key's check reads it from its shard's own cache line (the
/// one its lock word is on).
pub(super) struct ShardTag<A> {
    pub(super) generation: u64,
    pub(super) algorithm: Arc<Resolved<A>>,
}

impl<A> ShardTag<A> {
    pub(super) fn new(algorithm: &Arc<Resolved<A>>) -> ShardTag<A> {
        ShardTag {
            generation: algorithm.generation,
            algorithm: Arc::clone(algorithm),
        }
    }
}

/// Refuses a cost above `algorithm`'s capacity.
#[inline]
pub(super) fn within_capacity<A: Algorithm>(algorithm: &A, cost: u64) -> Result<(), CostError> {
    let capacity = algorithm.capacity();
    if cost > capacity {
        return Err(CostError::new(cost, capacity));
    }
    Ok(())
}

/// Runs a request on `cell` under `algorithm`. The cell is held
/// exclusively (its shard is locked): a check writes it with
/// [`Algorithm::check_cell_mut`], without a read-modify-write.
///
/// Inlined so that `mode`, a constant at every call site, selects its arm
/// at compile time and the decision is built in the caller's frame.
#[inline(always)]
pub(super) fn run<A: Algorithm, R: Answer>(
    algorithm: &A,
    cell: &mut A::Cell,
    now: Nanos,
    cost: u64,
    mode: Mode,
) -> R {
    if mode != Mode::Charge {
        if let Err(error) = within_capacity(algorithm, cost) {
            return R::refused(error);
        }
    }
    match mode {
        Mode::Check => R::decided(algorithm.check_cell_mut(cell, now, cost)),
        Mode::Peek => R::decided(algorithm.peek_cell(cell, now, cost)),
        Mode::Charge => {
            let recorded = algorithm.charge_cell(cell, now, cost);
            R::charged(algorithm.peek_cell(cell, now, 1), cost, recorded)
        }
    }
}

impl<A: Algorithm> Entry<A> {
    #[inline]
    pub(super) fn within_capacity(&self, cost: u64) -> Result<(), CostError> {
        within_capacity(&self.algorithm.algorithm, cost)
    }

    #[inline(always)]
    pub(super) fn run<R: Answer>(&mut self, now: Nanos, cost: u64, mode: Mode) -> R {
        run(&self.algorithm.algorithm, &mut self.cell, now, cost, mode)
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
