//! Several limits on one state, all-or-nothing: "10 per second AND 1,000 per
//! day".
//!
//! # Guarantee
//!
//! A request is admitted iff every limit admits it, and then it is taken from
//! every limit; a denial by any one takes from none. Each limit keeps its own
//! guarantee.
//!
//! # The decision
//!
//! `limit`, `remaining` and `retry_after` are those of the limit that bound:
//! for a denial, the denying limit with the longest `retry_after` (which is
//! then exact for the whole set, since each limit frees up on its own
//! schedule); for an admission, the limit with the fewest permits remaining.
//! `reset_after` is the whole set's: the longest of every limit's time back
//! to full ([`Decision::reset_after`]), so that 10 per second and 100 per day
//! report, after one request, the 864 s the day limit needs, not the second's
//! 100 ms. A `RateLimit-Reset` built from it never understates.
//!
//! # State and linearizability
//!
//! One cell per limit, plus a mutex that every admission takes. A request is
//! first decided on each cell without the lock: if any limit denies, that
//! denial stands (it is what the state showed at that load: linearized
//! there) and nothing is written. Otherwise, under the lock, every limit is
//! decided again and, only if all admit, each is charged. Since every write
//! to the cells happens under the lock, no charge is ever rolled back and no
//! other request can see half of one. Memory: the limits' cells, a mutex and
//! a boxed slice header.

use std::fmt;

use crate::algorithm::{Algorithm, Carry, sealed};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::quota::{Quota, QuotaError};
use crate::sync::{Mutex, lock};

/// Several limits of one algorithm, all-or-nothing: see the [module docs](self).
///
/// # Examples
///
/// ```
/// use tollgate::{AllOf, FixedWindow, Limiter, ManualClock, Quota};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limits = AllOf::new(vec![
///     FixedWindow::new(Quota::per_second(10)?)?,
///     FixedWindow::new(Quota::per_day(12)?)?,
/// ])?;
/// let clock = ManualClock::new();
/// let limiter = Limiter::with_clock(limits, clock.clone());
/// assert!(limiter.check_n(10)?.is_allowed());
/// clock.advance(std::time::Duration::from_secs(1));
/// // The second allows 10 again, but the day has only 2 left: none is taken.
/// let denied = limiter.check_n(3)?;
/// assert!(denied.is_denied());
/// assert_eq!(denied.limit(), 12);
/// assert!(limiter.check_n(2)?.is_allowed());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct AllOf<A> {
    limits: Box<[A]>,
}

/// The cells of an [`AllOf`]: one per limit, and the lock admissions take.
pub struct AllCell<C> {
    admit: Mutex<()>,
    cells: Box<[C]>,
}

impl<C> fmt::Debug for AllCell<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AllCell")
            .field("limits", &self.cells.len())
            .finish_non_exhaustive()
    }
}

impl<A: Algorithm> AllOf<A> {
    /// All of `limits`, at least one.
    ///
    /// # Errors
    ///
    /// [`QuotaError::InvalidParameter`] for an empty list.
    pub fn new(limits: Vec<A>) -> Result<AllOf<A>, QuotaError> {
        if limits.is_empty() {
            return Err(QuotaError::InvalidParameter {
                algorithm: "all of",
                what: "at least one limit is needed",
            });
        }
        Ok(AllOf {
            limits: limits.into_boxed_slice(),
        })
    }

    /// The limits, in the order given.
    pub fn limits(&self) -> &[A] {
        &self.limits
    }

    /// Decides every limit without recording; `Err` carries the binding
    /// denial. Either way `reset_after` is the set's (see the module docs).
    fn peek_all(
        &self,
        cell: &AllCell<A::Cell>,
        now: Nanos,
        cost: u64,
    ) -> Result<Decision, Decision> {
        let decisions = self
            .limits
            .iter()
            .zip(cell.cells.iter())
            .map(|(limit, cell)| limit.peek_cell(cell, now, cost));
        binding(decisions).map_err(|denial| denial.with_reset_after(self.full_in(cell, now)))
    }

    /// The time until every limit is full, with nothing taken: the longest
    /// of their `reset_after` for a peek of cost 0.
    fn full_in(&self, cell: &AllCell<A::Cell>, now: Nanos) -> u64 {
        self.limits
            .iter()
            .zip(cell.cells.iter())
            .map(|(limit, cell)| nanos(limit.peek_cell(cell, now, 0).reset_after()))
            .max()
            .unwrap_or(0)
    }
}

fn nanos(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The decision that binds: the denial with the longest wait, or else the
/// admission with the fewest permits left (the first on ties) with the
/// longest `reset_after` of all (each then counts the permits taken). A
/// denial's `reset_after` is left to the caller, since the admissions beside
/// it count permits that were not taken.
fn binding(decisions: impl Iterator<Item = Decision>) -> Result<Decision, Decision> {
    let mut denial: Option<Decision> = None;
    let mut tightest: Option<Decision> = None;
    let mut reset = 0;
    for decision in decisions {
        reset = reset.max(nanos(decision.reset_after()));
        if decision.is_denied() {
            if denial.is_none_or(|d| decision.retry_after() > d.retry_after()) {
                denial = Some(decision);
            }
        } else if tightest.is_none_or(|d| decision.remaining() < d.remaining()) {
            tightest = Some(decision);
        }
    }
    match (denial, tightest) {
        (Some(denial), _) => Err(denial),
        (None, Some(tightest)) => Ok(tightest.with_reset_after(reset)),
        (None, None) => unreachable!("all of: no limits"),
    }
}

impl<A: fmt::Debug> fmt::Debug for AllOf<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.limits.iter()).finish()
    }
}

impl<A> sealed::Sealed for AllOf<A> {}

impl<A: Algorithm> Algorithm for AllOf<A> {
    type Cell = AllCell<A::Cell>;

    /// The first limit's quota.
    fn quota(&self) -> &Quota {
        self.limits[0].quota()
    }

    /// Every limit's quotas, in the order given.
    fn quotas(&self) -> Vec<Quota> {
        self.limits.iter().flat_map(Algorithm::quotas).collect()
    }

    fn capacity(&self) -> u64 {
        self.limits
            .iter()
            .map(Algorithm::capacity)
            .min()
            .unwrap_or(0)
    }

    fn new_cell(&self) -> AllCell<A::Cell> {
        AllCell {
            admit: Mutex::new(()),
            cells: self.limits.iter().map(Algorithm::new_cell).collect(),
        }
    }

    fn check_cell(&self, cell: &AllCell<A::Cell>, now: Nanos, cost: u64) -> Decision {
        if let Err(denial) = self.peek_all(cell, now, cost) {
            return denial;
        }
        let _admitting = lock(&cell.admit);
        // Every write to the cells happens under this lock: what is decided
        // here is what each `check_cell` below decides again and records.
        if let Err(denial) = self.peek_all(cell, now, cost) {
            return denial;
        }
        let decisions = self
            .limits
            .iter()
            .zip(cell.cells.iter())
            .map(|(limit, cell)| limit.check_cell(cell, now, cost));
        match binding(decisions) {
            Ok(decision) => decision,
            Err(denial) => unreachable!("all of: a limit denied under the lock: {denial}"),
        }
    }

    fn peek_cell(&self, cell: &AllCell<A::Cell>, now: Nanos, cost: u64) -> Decision {
        self.peek_all(cell, now, cost)
            .unwrap_or_else(|denial| denial)
    }

    /// Charges every limit by its own rule and debt cap, under the
    /// admission lock so that no admission is decided between two of the
    /// charges. Reports the least any limit recorded (what the tightest cap
    /// let through).
    fn charge_cell(&self, cell: &AllCell<A::Cell>, now: Nanos, cost: u64) -> u64 {
        let _admitting = lock(&cell.admit);
        self.limits
            .iter()
            .zip(cell.cells.iter())
            .map(|(limit, cell)| limit.charge_cell(cell, now, cost))
            .min()
            .unwrap_or(0)
    }

    fn is_idle(&self, cell: &AllCell<A::Cell>, now: Nanos) -> bool {
        self.limits
            .iter()
            .zip(cell.cells.iter())
            .all(|(limit, cell)| limit.is_idle(cell, now))
    }

    /// Refunds every limit by its own rule, under the admission lock (as a
    /// charge): each limit's guarantee holds for it, so the set's does.
    fn refund_cell(&self, cell: &AllCell<A::Cell>, now: Nanos, permits: u64) {
        let _admitting = lock(&cell.admit);
        for (limit, cell) in self.limits.iter().zip(cell.cells.iter()) {
            limit.refund_cell(cell, now, permits);
        }
    }

    fn take_cell(&self, cell: &AllCell<A::Cell>) -> AllCell<A::Cell> {
        let _admitting = lock(&cell.admit);
        AllCell {
            admit: Mutex::new(()),
            cells: self
                .limits
                .iter()
                .zip(cell.cells.iter())
                .map(|(limit, cell)| limit.take_cell(cell))
                .collect(),
        }
    }

    fn reset_cell(&self, cell: &AllCell<A::Cell>) {
        let _admitting = lock(&cell.admit);
        for (limit, cell) in self.limits.iter().zip(cell.cells.iter()) {
            limit.reset_cell(cell);
        }
    }

    /// Carries limit `i` from the previous set's limit `i`; limits beyond the
    /// previous set's length start fresh.
    fn carry_cell(
        &self,
        previous: &AllOf<A>,
        cell: &AllCell<A::Cell>,
        now: Nanos,
        carry: Carry,
    ) -> AllCell<A::Cell> {
        let _admitting = lock(&cell.admit);
        let cells = self
            .limits
            .iter()
            .enumerate()
            .map(
                |(i, limit)| match (previous.limits.get(i), cell.cells.get(i)) {
                    (Some(before), Some(old)) => limit.carry_cell(before, old, now, carry),
                    _ => limit.new_cell(),
                },
            )
            .collect();
        AllCell {
            admit: Mutex::new(()),
            cells,
        }
    }
}
