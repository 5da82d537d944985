//! [`AnyAlgorithm`]: one of the algorithms, chosen at run time, so that
//! [`AllOf`](crate::AllOf) can mix them ("10 per second as a GCRA **and**
//! 100,000 per calendar month") and a configuration can pick one.
//!
//! # Guarantee
//!
//! Each variant is its algorithm, with its guarantee, its state and its
//! transitions unchanged; the enum adds one branch per call. In an
//! `AllOf<AnyAlgorithm>` every limit keeps its own guarantee and the set is
//! all-or-nothing (see [`all_of`](super::all_of)).
//!
//! # Changing algorithm
//!
//! A change within a variant carries the state by that algorithm's own
//! [`Carry`] rule. A change from one variant to another carries **the
//! permits counted**: `capacity − remaining` of the old state at the moment
//! of the change is charged into a fresh state of the new algorithm (all of
//! it for [`Carry::Keep`], scaled to the new capacity and rounded up for
//! [`Carry::Proportional`], none for [`Carry::Reset`]): a change never
//! gives back a permit already taken, though the new algorithm spreads
//! them by its own rule (a GCRA's debt drains at its rate; a window's
//! count stays until its window ends).

use std::fmt;

use crate::algorithm::calendar::CalendarWindow;
use crate::algorithm::sliding_log::LogState;
use crate::algorithm::sliding_window::WheelState;
use crate::algorithm::warm_up::{WarmState, WarmUp};
use crate::algorithm::{Algorithm, Carry, FixedWindow, Gcra, SlidingLog, SlidingWindow, sealed};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::quota::Quota;
use crate::store::Locked;
use crate::sync::AtomicU64;

/// One of the algorithms: see the [module docs](self).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::any::AnyAlgorithm;
/// use tollgate::algorithm::calendar::{CalendarUnit, CalendarWindow};
/// use tollgate::{AllOf, Gcra, Limiter, ManualClock, Quota};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // 2 per second, and 3 per calendar month.
/// let limits = AllOf::new(vec![
///     AnyAlgorithm::from(Gcra::new(Quota::per_second(2)?)?),
///     AnyAlgorithm::from(CalendarWindow::new(CalendarUnit::Month, 3)?),
/// ])?;
/// let clock = ManualClock::new(); // UNIX time: 1970-01-01 00:00 UTC
/// let limiter = Limiter::with_clock(limits, clock.clone());
/// assert!(limiter.check_n(2)?.is_allowed());
/// assert!(limiter.check().is_denied()); // the second's limit
/// clock.advance(Duration::from_secs(1));
/// assert!(limiter.check().is_allowed());
/// clock.advance(Duration::from_secs(1));
/// let denied = limiter.check(); // the month's limit, until February
/// assert!(denied.is_denied());
/// assert_eq!(denied.retry_after(), Duration::from_secs(31 * 86_400 - 2));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AnyAlgorithm {
    /// [`Gcra`].
    Gcra(Gcra),
    /// [`FixedWindow`].
    FixedWindow(FixedWindow),
    /// [`SlidingLog`].
    SlidingLog(SlidingLog),
    /// [`SlidingWindow`].
    SlidingWindow(SlidingWindow),
    /// [`CalendarWindow`].
    Calendar(CalendarWindow),
    /// [`WarmUp`].
    WarmUp(WarmUp),
}

/// The state of an [`AnyAlgorithm`]: its variant's cell.
pub enum AnyCell {
    /// A one-word state (GCRA, fixed window, calendar window).
    Word(AtomicU64),
    /// A sliding log.
    Log(Locked<LogState>),
    /// A sliding window counter.
    Wheel(Locked<WheelState>),
    /// A warm-up limiter.
    Warm(Locked<WarmState>),
}

impl fmt::Debug for AnyCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnyCell::Word(word) => f.debug_tuple("Word").field(word).finish(),
            AnyCell::Log(log) => f.debug_tuple("Log").field(log).finish(),
            AnyCell::Wheel(_) => f.debug_tuple("Wheel").finish_non_exhaustive(),
            AnyCell::Warm(warm) => f.debug_tuple("Warm").field(warm).finish(),
        }
    }
}

impl fmt::Debug for AnyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnyAlgorithm::Gcra(a) => a.fmt(f),
            AnyAlgorithm::FixedWindow(a) => a.fmt(f),
            AnyAlgorithm::SlidingLog(a) => a.fmt(f),
            AnyAlgorithm::SlidingWindow(a) => a.fmt(f),
            AnyAlgorithm::Calendar(a) => a.fmt(f),
            AnyAlgorithm::WarmUp(a) => a.fmt(f),
        }
    }
}

macro_rules! from {
    ($($variant:ident($ty:ty)),*) => {$(
        impl From<$ty> for AnyAlgorithm {
            fn from(algorithm: $ty) -> AnyAlgorithm {
                AnyAlgorithm::$variant(algorithm)
            }
        }
    )*};
}

from!(
    Gcra(Gcra),
    FixedWindow(FixedWindow),
    SlidingLog(SlidingLog),
    SlidingWindow(SlidingWindow),
    Calendar(CalendarWindow),
    WarmUp(WarmUp)
);

/// Runs `$body` with `$a` bound to the variant's algorithm and `$c` to its
/// cell; `$mismatch` when the cell is not the variant's (a cell always
/// comes from its own algorithm, so only a bug gets there: it fails
/// closed).
macro_rules! dispatch {
    ($self:expr, $cell:expr, |$a:ident, $c:ident| $body:expr, $mismatch:expr) => {
        match ($self, $cell) {
            (AnyAlgorithm::Gcra($a), AnyCell::Word($c)) => $body,
            (AnyAlgorithm::FixedWindow($a), AnyCell::Word($c)) => $body,
            (AnyAlgorithm::Calendar($a), AnyCell::Word($c)) => $body,
            (AnyAlgorithm::SlidingLog($a), AnyCell::Log($c)) => $body,
            (AnyAlgorithm::SlidingWindow($a), AnyCell::Wheel($c)) => $body,
            (AnyAlgorithm::WarmUp($a), AnyCell::Warm($c)) => $body,
            _ => $mismatch,
        }
    };
}

impl AnyAlgorithm {
    /// The refusal a mismatched cell gets: closed.
    fn closed(&self) -> Decision {
        Decision::deny(self.capacity(), 0, u64::MAX, u64::MAX)
    }

    fn same_variant(&self, other: &AnyAlgorithm) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

impl sealed::Sealed for AnyAlgorithm {}

impl Algorithm for AnyAlgorithm {
    type Cell = AnyCell;

    fn quota(&self) -> &Quota {
        match self {
            AnyAlgorithm::Gcra(a) => a.quota(),
            AnyAlgorithm::FixedWindow(a) => a.quota(),
            AnyAlgorithm::SlidingLog(a) => a.quota(),
            AnyAlgorithm::SlidingWindow(a) => a.quota(),
            AnyAlgorithm::Calendar(a) => a.quota(),
            AnyAlgorithm::WarmUp(a) => a.quota(),
        }
    }

    fn capacity(&self) -> u64 {
        match self {
            AnyAlgorithm::Gcra(a) => a.capacity(),
            AnyAlgorithm::FixedWindow(a) => a.capacity(),
            AnyAlgorithm::SlidingLog(a) => a.capacity(),
            AnyAlgorithm::SlidingWindow(a) => a.capacity(),
            AnyAlgorithm::Calendar(a) => a.capacity(),
            AnyAlgorithm::WarmUp(a) => a.capacity(),
        }
    }

    fn new_cell(&self) -> AnyCell {
        match self {
            AnyAlgorithm::Gcra(a) => AnyCell::Word(a.new_cell()),
            AnyAlgorithm::FixedWindow(a) => AnyCell::Word(a.new_cell()),
            AnyAlgorithm::Calendar(a) => AnyCell::Word(a.new_cell()),
            AnyAlgorithm::SlidingLog(a) => AnyCell::Log(a.new_cell()),
            AnyAlgorithm::SlidingWindow(a) => AnyCell::Wheel(a.new_cell()),
            AnyAlgorithm::WarmUp(a) => AnyCell::Warm(a.new_cell()),
        }
    }

    fn check_cell(&self, cell: &AnyCell, now: Nanos, cost: u64) -> Decision {
        dispatch!(self, cell, |a, c| a.check_cell(c, now, cost), self.closed())
    }

    fn check_cell_mut(&self, cell: &mut AnyCell, now: Nanos, cost: u64) -> Decision {
        dispatch!(
            self,
            cell,
            |a, c| a.check_cell_mut(c, now, cost),
            self.closed()
        )
    }

    fn peek_cell(&self, cell: &AnyCell, now: Nanos, cost: u64) -> Decision {
        dispatch!(self, cell, |a, c| a.peek_cell(c, now, cost), self.closed())
    }

    fn charge_cell(&self, cell: &AnyCell, now: Nanos, cost: u64) -> u64 {
        dispatch!(self, cell, |a, c| a.charge_cell(c, now, cost), 0)
    }

    fn is_idle(&self, cell: &AnyCell, now: Nanos) -> bool {
        dispatch!(self, cell, |a, c| a.is_idle(c, now), false)
    }

    fn refund_cell(&self, cell: &AnyCell, now: Nanos, permits: u64) {
        dispatch!(self, cell, |a, c| a.refund_cell(c, now, permits), ())
    }

    fn reset_cell(&self, cell: &AnyCell) {
        dispatch!(self, cell, |a, c| a.reset_cell(c), ())
    }

    fn take_cell(&self, cell: &AnyCell) -> AnyCell {
        match (self, cell) {
            (AnyAlgorithm::Gcra(a), AnyCell::Word(c)) => AnyCell::Word(a.take_cell(c)),
            (AnyAlgorithm::FixedWindow(a), AnyCell::Word(c)) => AnyCell::Word(a.take_cell(c)),
            (AnyAlgorithm::Calendar(a), AnyCell::Word(c)) => AnyCell::Word(a.take_cell(c)),
            (AnyAlgorithm::SlidingLog(a), AnyCell::Log(c)) => AnyCell::Log(a.take_cell(c)),
            (AnyAlgorithm::SlidingWindow(a), AnyCell::Wheel(c)) => AnyCell::Wheel(a.take_cell(c)),
            (AnyAlgorithm::WarmUp(a), AnyCell::Warm(c)) => AnyCell::Warm(a.take_cell(c)),
            // Never: a cell comes from its own algorithm.
            _ => self.new_cell(),
        }
    }

    fn carry_cell(
        &self,
        previous: &AnyAlgorithm,
        cell: &AnyCell,
        now: Nanos,
        carry: Carry,
    ) -> AnyCell {
        if self.same_variant(previous) {
            let carried = match (self, previous, cell) {
                (AnyAlgorithm::Gcra(a), AnyAlgorithm::Gcra(p), AnyCell::Word(c)) => {
                    Some(AnyCell::Word(a.carry_cell(p, c, now, carry)))
                }
                (AnyAlgorithm::FixedWindow(a), AnyAlgorithm::FixedWindow(p), AnyCell::Word(c)) => {
                    Some(AnyCell::Word(a.carry_cell(p, c, now, carry)))
                }
                (AnyAlgorithm::Calendar(a), AnyAlgorithm::Calendar(p), AnyCell::Word(c)) => {
                    Some(AnyCell::Word(a.carry_cell(p, c, now, carry)))
                }
                (AnyAlgorithm::SlidingLog(a), AnyAlgorithm::SlidingLog(p), AnyCell::Log(c)) => {
                    Some(AnyCell::Log(a.carry_cell(p, c, now, carry)))
                }
                (
                    AnyAlgorithm::SlidingWindow(a),
                    AnyAlgorithm::SlidingWindow(p),
                    AnyCell::Wheel(c),
                ) => Some(AnyCell::Wheel(a.carry_cell(p, c, now, carry))),
                (AnyAlgorithm::WarmUp(a), AnyAlgorithm::WarmUp(p), AnyCell::Warm(c)) => {
                    Some(AnyCell::Warm(a.carry_cell(p, c, now, carry)))
                }
                _ => None,
            };
            if let Some(carried) = carried {
                return carried;
            }
        }
        // Across variants: the permits counted, charged into a fresh state.
        let counted = previous
            .capacity()
            .saturating_sub(previous.peek_cell(cell, now, 0).remaining());
        let charged = match carry {
            Carry::Reset => 0,
            Carry::Keep => counted,
            Carry::Proportional => u64::try_from(
                (u128::from(counted) * u128::from(self.capacity()))
                    .div_ceil(u128::from(previous.capacity().max(1))),
            )
            .unwrap_or(u64::MAX),
        };
        let fresh = self.new_cell();
        if charged > 0 {
            self.charge_cell(&fresh, now, charged);
        }
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::calendar::CalendarUnit;

    #[test]
    fn a_change_across_variants_keeps_the_permits_counted() {
        let window = AnyAlgorithm::from(FixedWindow::new(Quota::per_minute(10).unwrap()).unwrap());
        let cell = window.new_cell();
        assert!(window.check_cell(&cell, Nanos::new(0), 7).is_allowed());
        let calendar = AnyAlgorithm::from(CalendarWindow::new(CalendarUnit::Day, 10).unwrap());
        let carried = calendar.carry_cell(&window, &cell, Nanos::new(0), Carry::Keep);
        assert_eq!(
            calendar.peek_cell(&carried, Nanos::new(0), 0).remaining(),
            3
        );
        let halved = AnyAlgorithm::from(CalendarWindow::new(CalendarUnit::Day, 5).unwrap());
        let scaled = halved.carry_cell(&window, &cell, Nanos::new(0), Carry::Proportional);
        assert_eq!(halved.peek_cell(&scaled, Nanos::new(0), 0).remaining(), 1);
        let reset = halved.carry_cell(&window, &cell, Nanos::new(0), Carry::Reset);
        assert_eq!(halved.peek_cell(&reset, Nanos::new(0), 0).remaining(), 5);
    }

    /// Regression: a carry to a limit lowered more than `DEBT_PERIODS +
    /// 1`-fold kept every permit taken (1,000 of 1,000 per minute lowered to
    /// 10: a debt of 99 minutes), past the cap a charge keeps to; the Redis
    /// scripts kept the cap, so the backends disagreed. Now both keep
    /// `(DEBT_PERIODS + 1) · 10`: raised back at once, 830 are left, and the
    /// lowered key waits at most 17 of its minutes.
    #[test]
    fn a_carry_keeps_no_more_debt_than_the_cap() {
        use crate::algorithm::DEBT_PERIODS;
        use std::time::Duration;
        const MINUTE: Duration = Duration::from_secs(60);
        fn q(n: u64) -> Quota {
            Quota::new(n, MINUTE).unwrap().with_burst(n).unwrap()
        }
        let minute = MINUTE;
        type Make = fn(u64) -> AnyAlgorithm;
        let all: [(&str, Make); 6] = [
            ("gcra", |n| Gcra::new(q(n)).unwrap().into()),
            ("fixed", |n| FixedWindow::new(q(n)).unwrap().into()),
            ("calendar", |n| {
                CalendarWindow::new(CalendarUnit::Minute, n).unwrap().into()
            }),
            ("log", |n| SlidingLog::new(q(n)).unwrap().into()),
            ("wheel", |n| SlidingWindow::new(q(n), 6).unwrap().into()),
            ("warm-up", |n| WarmUp::new(q(n), MINUTE).unwrap().into()),
        ];
        let now = Nanos::new(7 * 60_000_000_000);
        let kept = (DEBT_PERIODS + 1) * 10;
        for (name, make) in all {
            let (big, small) = (make(1_000), make(10));
            for rule in [Carry::Keep, Carry::Proportional] {
                let cell = big.new_cell();
                assert!(big.check_cell(&cell, now, 1_000).is_allowed(), "{name}");
                let lowered = small.carry_cell(&big, &cell, now, rule);
                let d = small.peek_cell(&lowered, now, 0);
                let most = DEBT_PERIODS + 1;
                assert!(
                    d.reset_after() <= minute * most as u32,
                    "{name} {rule:?}: {d}"
                );
                if name == "warm-up" {
                    // What is owed is a time: at most DEBT_PERIODS minutes.
                    let d = small.peek_cell(&lowered, now, 1);
                    assert_eq!(d.retry_after(), minute * DEBT_PERIODS as u32, "{name}");
                    continue;
                }
                if rule == Carry::Proportional && name != "log" && name != "wheel" {
                    // 1,000 of 1,000 is the whole of 10 under the new limit.
                    continue;
                }
                let raised = big.carry_cell(&small, &lowered, now, Carry::Keep);
                let d = big.peek_cell(&raised, now, 0);
                assert_eq!(d.remaining(), 1_000 - kept, "{name} {rule:?}: {d}");
            }
        }
    }

    #[test]
    fn a_mismatched_cell_fails_closed() {
        let gcra = AnyAlgorithm::from(Gcra::new(Quota::per_second(1).unwrap()).unwrap());
        let log = AnyAlgorithm::from(SlidingLog::new(Quota::per_second(1).unwrap()).unwrap());
        let cell = log.new_cell();
        assert!(gcra.check_cell(&cell, Nanos::new(0), 1).is_denied());
    }
}
