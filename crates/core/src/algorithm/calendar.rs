//! Calendar windows: a fixed window aligned to UTC minutes, hours, days,
//! weeks (from Monday) or months (from the 1st).
//!
//! # Guarantee
//!
//! **Every calendar unit admits at most `limit` permits**, counted from its
//! first instant in UTC: a monthly quota of 10,000 resets at 00:00 UTC on
//! the 1st, not a month after the first request; a weekly one at 00:00 UTC
//! on Monday. Bursts at the edges are those of any fixed window (up to
//! `2·limit` across a boundary).
//!
//! # Time: the clock's nanoseconds are UNIX time
//!
//! A calendar needs wall-clock time, and a [`Clock`](crate::Clock) gives
//! nanoseconds since an origin of its own. Decision: the calendar window
//! reads `now` as **nanoseconds since 1970-01-01 00:00 UTC**, and runs on a
//! clock whose origin is the UNIX epoch: [`SystemClock`](crate::SystemClock)
//! (the system's wall clock), or a [`ManualClock`](crate::ManualClock) set
//! to a date (a manual clock starts at the epoch). Rather than a second
//! `WallClock` trait beside `Clock`, this keeps one time source per limiter
//! (so [`AllOf`](crate::AllOf) can mix a per-second GCRA and a per-month
//! window on one clock: a GCRA only needs the differences, which a wall
//! clock gives too) and makes the Redis twin the same function of Redis's
//! `TIME`, which survives restarts. On a clock with another origin the
//! windows are aligned to that origin instead: still at most `limit` per
//! window, but not on the calendar (say so in the limiter's docs if you do
//! it on purpose). A wall clock set back is a clock going back: the stored
//! window keeps deciding (no re-credit) until time passes its end again.
//!
//! # Calendar arithmetic
//!
//! UTC has no daylight saving; leap seconds are not counted (UNIX time), so
//! a day is always 86,400 s. Months and weeks use Howard Hinnant's
//! `days_from_civil` / `civil_from_days` (proleptic Gregorian, exact for
//! every day a `u64` of nanoseconds reaches, 1970 to 2554), tested on month
//! lengths and leap years (2000 yes, 2100 no, 2024 yes).
//!
//! # State: one `u64`
//!
//! The index of the unit since the epoch (minutes, …, months) in the high
//! 32 bits and the count in the low 32, updated by compare-and-swap like
//! [`FixedWindow`](crate::FixedWindow): a limit must fit in 32 bits. A
//! charge takes the count past the limit and the excess carries into the
//! following units as the fixed window's does (a unit that ends with
//! `limit + D` starts the next with `D`), up to the limit and
//! [`DEBT_PERIODS`] limits of debt, within the 32-bit count (the cap). The
//! quota's period is the unit's longest length (31 days for a month), for
//! callers that read it as a rate.

use std::fmt;
use std::time::Duration;

use crate::algorithm::{Algorithm, Carry, DEBT_PERIODS, apply, sealed};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::quota::{Quota, QuotaError};
use crate::store;
use crate::sync::AtomicU64;

const NAME: &str = "calendar window";
const MINUTE: u64 = 60_000_000_000;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;
const COUNT_BITS: u32 = 32;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// A calendar unit, in UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CalendarUnit {
    /// From second 0 of each minute.
    Minute,
    /// From minute 0 of each hour.
    Hour,
    /// From 00:00 UTC.
    Day,
    /// From Monday 00:00 UTC.
    Week,
    /// From the 1st, 00:00 UTC.
    Month,
}

impl CalendarUnit {
    /// The unit's longest length.
    pub const fn longest(self) -> Duration {
        let ns = match self {
            CalendarUnit::Minute => MINUTE,
            CalendarUnit::Hour => HOUR,
            CalendarUnit::Day => DAY,
            CalendarUnit::Week => 7 * DAY,
            CalendarUnit::Month => 31 * DAY,
        };
        Duration::from_nanos(ns)
    }

    /// The index of the unit containing `now` (UNIX ns), counted from the
    /// unit containing the epoch.
    pub fn index(self, now: u64) -> u64 {
        match self {
            CalendarUnit::Minute => now / MINUTE,
            CalendarUnit::Hour => now / HOUR,
            CalendarUnit::Day => now / DAY,
            // 1970-01-01 was a Thursday: its week began on Monday, 3 days
            // earlier.
            CalendarUnit::Week => (now / DAY + 3) / 7,
            CalendarUnit::Month => {
                let (year, month, _) = civil_from_days((now / DAY) as i64);
                ((year - 1970) * 12 + i64::from(month) - 1) as u64
            }
        }
    }

    /// The first instant (UNIX ns) of unit `index`, floored at the epoch;
    /// `None` past the last instant a `u64` names.
    pub fn start(self, index: u64) -> Option<u64> {
        let ns = match self {
            CalendarUnit::Minute => u128::from(index) * u128::from(MINUTE),
            CalendarUnit::Hour => u128::from(index) * u128::from(HOUR),
            CalendarUnit::Day => u128::from(index) * u128::from(DAY),
            CalendarUnit::Week => (u128::from(index) * 7).saturating_sub(3) * u128::from(DAY),
            CalendarUnit::Month => {
                let year = 1970 + i64::try_from(index / 12).ok()?;
                let month = (index % 12) as u32 + 1;
                let days = days_from_civil(year, month, 1);
                u128::try_from(days).ok()? * u128::from(DAY)
            }
        };
        u64::try_from(ns).ok()
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let month = i64::from(month);
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of a day since 1970-01-01 (Hinnant).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A fixed window on calendar units: see the [module docs](self).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::calendar::{CalendarUnit, CalendarWindow};
/// use tollgate::{Limiter, ManualClock};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // 2024-02-29 23:59:00 UTC, as UNIX time.
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_secs(1_709_251_140));
/// let monthly = Limiter::with_clock(CalendarWindow::new(CalendarUnit::Month, 1_000)?, clock.clone());
/// assert!(monthly.check_n(1_000)?.is_allowed());
/// let denied = monthly.check();
/// // Full again at 2024-03-01 00:00 UTC, one minute later.
/// assert_eq!(denied.retry_after(), Duration::from_secs(60));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct CalendarWindow {
    unit: CalendarUnit,
    quota: Quota,
}

impl CalendarWindow {
    /// At most `limit` permits per calendar `unit`.
    ///
    /// # Errors
    ///
    /// [`QuotaError`] for a limit of 0 or one that does not fit in 32 bits.
    pub fn new(unit: CalendarUnit, limit: u64) -> Result<CalendarWindow, QuotaError> {
        if limit > COUNT_MASK {
            return Err(QuotaError::Overflow {
                algorithm: NAME,
                what: "a limit above 2^32 − 1",
            });
        }
        let quota = Quota::new(limit, unit.longest())?;
        Ok(CalendarWindow { unit, quota })
    }

    /// The calendar unit.
    pub const fn unit(&self) -> CalendarUnit {
        self.unit
    }

    fn unpack(state: u64) -> (u64, u64) {
        (state >> COUNT_BITS, state & COUNT_MASK)
    }

    /// The word for `count` in unit `index`, or `None` when the index does
    /// not fit in 32 bits (never before 2554 for months, the year 10136 for
    /// minutes).
    fn pack(index: u64, count: u64) -> Option<u64> {
        (index <= COUNT_MASK).then_some((index << COUNT_BITS) | count.min(COUNT_MASK))
    }

    /// The transition: given the stored word, decide `cost` permits at
    /// `now` (UNIX ns); the word to store if it changes.
    #[inline(always)]
    pub fn transition(&self, state: u64, now: Nanos, cost: u64) -> (Decision, Option<u64>) {
        let limit = self.quota.limit();
        let now = now.as_u64();
        let index = self.unit.index(now);
        // An earlier reading is decided in the stored window (no re-credit).
        let (window, count) = self.current(state, index);
        let until_next = match window.checked_add(1).and_then(|next| self.unit.start(next)) {
            Some(end) => end.saturating_sub(now),
            None => u64::MAX,
        };
        if count <= limit && cost <= limit - count {
            let used = count + cost;
            let reset_after = if used > 0 { until_next } else { 0 };
            let decision = Decision::allow(limit, limit - used, reset_after);
            let next = if cost > 0 {
                match Self::pack(window, used) {
                    Some(next) => Some(next),
                    // Past the last representable unit: closed.
                    None => return (Decision::deny(limit, 0, u64::MAX, u64::MAX), None),
                }
            } else {
                None
            };
            (decision, next)
        } else {
            // The first unit whose carried count leaves room for `cost`.
            let retry_after = if cost > limit {
                u64::MAX
            } else {
                self.until_unit(window, now, count.saturating_add(cost) - limit)
            };
            let reset_after = if count > 0 {
                self.until_unit(window, now, count)
            } else {
                0
            };
            let decision =
                Decision::deny(limit, limit.saturating_sub(count), retry_after, reset_after);
            (decision, None)
        }
    }

    /// The unit and the count current at unit `index`: the stored ones for
    /// an earlier or the same reading (no re-credit), else `index` with
    /// what the stored count carries over (a unit that ends with `limit +
    /// D` starts the next with `D`, as the fixed window's).
    fn current(&self, state: u64, index: u64) -> (u64, u64) {
        let (stored, count) = Self::unpack(state);
        if state == 0 {
            (index, 0)
        } else if index > stored {
            let paid = (index - stored).saturating_mul(self.quota.limit());
            (index, count.saturating_sub(paid))
        } else {
            (stored, count)
        }
    }

    /// The wait from `now` until the unit in which a count of `over`
    /// beyond the limit (≥ 1, counted in unit `window`) has drained;
    /// "never" past the last unit a `u64` names.
    fn until_unit(&self, window: u64, now: u64, over: u64) -> u64 {
        let later = over.div_ceil(self.quota.limit());
        match window
            .checked_add(later)
            .and_then(|unit| self.unit.start(unit))
        {
            Some(start) => start.saturating_sub(now),
            None => u64::MAX,
        }
    }

    /// The most a count may reach by a charge: the limit and
    /// [`DEBT_PERIODS`] limits of debt, within the 32-bit count.
    fn debt_cap(&self) -> u64 {
        self.quota
            .limit()
            .saturating_mul(DEBT_PERIODS + 1)
            .min(COUNT_MASK)
    }

    /// The charge: `cost` permits recorded at `now` whether or not they
    /// fit, the count running past the limit up to the debt cap (as
    /// [`FixedWindow::charge`](crate::FixedWindow::charge)). The word to
    /// store (`None`: nothing to write) and the permits recorded.
    pub fn charge(&self, state: u64, now: Nanos, cost: u64) -> (Option<u64>, u64) {
        let (window, count) = self.current(state, self.unit.index(now.as_u64()));
        if cost == 0 {
            return (None, 0);
        }
        let next = count.saturating_add(cost).min(self.debt_cap()).max(count);
        match Self::pack(window, next) {
            Some(word) if next > count => (Some(word), next - count),
            // Nothing to add, or past the last unit (closed).
            _ => (None, 0),
        }
    }

    /// The refund: `permits` back from the count current at `now` (the
    /// stored unit's, or what it carries into the current one), floored
    /// at 0 (as [`FixedWindow::refund`](crate::FixedWindow::refund)).
    pub fn refund(&self, state: u64, now: Nanos, permits: u64) -> Option<u64> {
        let (window, count) = self.current(state, self.unit.index(now.as_u64()));
        if count == 0 || permits == 0 {
            return None;
        }
        Self::pack(window, count.saturating_sub(permits))
    }
}

impl fmt::Debug for CalendarWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CalendarWindow")
            .field("unit", &self.unit)
            .field("limit", &self.quota.limit())
            .finish()
    }
}

impl sealed::Sealed for CalendarWindow {}

impl Algorithm for CalendarWindow {
    type Cell = AtomicU64;

    fn quota(&self) -> &Quota {
        &self.quota
    }

    fn capacity(&self) -> u64 {
        self.quota.limit()
    }

    fn new_cell(&self) -> AtomicU64 {
        AtomicU64::new(0)
    }

    #[inline(always)]
    fn check_cell(&self, cell: &AtomicU64, now: Nanos, cost: u64) -> Decision {
        store::word_update!(cell, |state| self.transition(state, now, cost))
    }

    #[inline(always)]
    fn check_cell_mut(&self, cell: &mut AtomicU64, now: Nanos, cost: u64) -> Decision {
        store::word_update_mut!(cell, |state| self.transition(state, now, cost))
    }

    fn peek_cell(&self, cell: &AtomicU64, now: Nanos, cost: u64) -> Decision {
        self.transition(store::word_load(cell), now, cost).0
    }

    fn charge_cell(&self, cell: &AtomicU64, now: Nanos, cost: u64) -> u64 {
        apply::word_charge(cell, |state| self.charge(state, now, cost))
    }

    fn is_idle(&self, cell: &AtomicU64, now: Nanos) -> bool {
        let state = store::word_load(cell);
        self.current(state, self.unit.index(now.as_u64())).1 == 0
    }

    fn refund_cell(&self, cell: &AtomicU64, now: Nanos, permits: u64) {
        apply::word_try_apply(cell, |state| self.refund(state, now, permits));
    }

    fn reset_cell(&self, cell: &AtomicU64) {
        apply::word_store(cell, 0);
    }

    /// Closed: the last index with a full count (never current, never
    /// passed, since no clock reaches it... and a stored index above the
    /// current one keeps deciding).
    fn take_cell(&self, cell: &AtomicU64) -> AtomicU64 {
        apply::word_take(cell, u64::MAX)
    }

    /// The count of the unit current under the previous window moves to
    /// the unit current under this one (as the fixed window's), at most the
    /// debt cap.
    fn carry_cell(
        &self,
        previous: &CalendarWindow,
        cell: &AtomicU64,
        now: Nanos,
        carry: Carry,
    ) -> AtomicU64 {
        let state = store::word_load(cell);
        let (_, used) = previous.current(state, previous.unit.index(now.as_u64()));
        let used = match carry {
            Carry::Reset => 0,
            Carry::Keep => used,
            Carry::Proportional => (u128::from(used) * u128::from(self.quota.limit()))
                .div_ceil(u128::from(previous.quota.limit()))
                .min(u128::from(COUNT_MASK)) as u64,
        }
        .min(self.debt_cap());
        let index = self.unit.index(now.as_u64());
        let state = if used == 0 {
            0
        } else {
            Self::pack(index, used).unwrap_or(u64::MAX)
        };
        AtomicU64::new(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(year: i64, month: u32, day: u32) -> u64 {
        days_from_civil(year, month, day) as u64 * DAY
    }

    #[test]
    fn civil_round_trips_and_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        for days in (0..220_000).step_by(37) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn month_lengths_and_leap_years() {
        let length = |y, m| {
            let unit = CalendarUnit::Month;
            let index = unit.index(date(y, m, 1));
            (unit.start(index + 1).unwrap() - unit.start(index).unwrap()) / DAY
        };
        assert_eq!(length(2024, 2), 29);
        assert_eq!(length(2023, 2), 28);
        assert_eq!(length(2000, 2), 29);
        assert_eq!(length(2100, 2), 28);
        assert_eq!(length(2024, 4), 30);
        assert_eq!(length(2024, 12), 31);
        assert_eq!(length(1970, 1), 31);
    }

    #[test]
    fn weeks_start_on_monday() {
        let unit = CalendarUnit::Week;
        // 2024-01-01 was a Monday.
        let monday = date(2024, 1, 1);
        assert_eq!(unit.start(unit.index(monday)), Some(monday));
        assert_eq!(unit.index(monday - 1), unit.index(monday) - 1);
        assert_eq!(unit.index(monday + 7 * DAY - 1), unit.index(monday));
        // The week of the epoch began before it: floored at 0.
        assert_eq!(unit.start(0), Some(0));
        assert_eq!(unit.index(date(1970, 1, 5)), 1);
    }

    #[test]
    fn a_monthly_quota_resets_at_the_first_not_a_month_after_use() {
        let window = CalendarWindow::new(CalendarUnit::Month, 3).unwrap();
        let start = date(2023, 12, 31) + 23 * HOUR;
        let (d, state) = window.transition(0, Nanos::new(start), 3);
        assert!(d.is_allowed());
        assert_eq!(d.reset_after(), Duration::from_secs(3_600));
        let state = state.unwrap();
        let (denied, _) = window.transition(state, Nanos::new(start + 1), 1);
        assert_eq!(denied.retry_after().as_nanos(), u128::from(HOUR - 1));
        let (allowed, _) = window.transition(state, Nanos::new(date(2024, 1, 1)), 3);
        assert!(allowed.is_allowed());
        // A clock set back decides in the stored month.
        let (back, _) = window.transition(state, Nanos::new(start - DAY), 1);
        assert!(back.is_denied());
    }

    #[test]
    fn limits_must_fit_32_bits() {
        assert!(CalendarWindow::new(CalendarUnit::Day, 1 << 32).is_err());
        assert!(CalendarWindow::new(CalendarUnit::Day, 0).is_err());
        assert!(CalendarWindow::new(CalendarUnit::Day, (1 << 32) - 1).is_ok());
    }

    #[test]
    fn the_last_units_are_closed_not_open() {
        let window = CalendarWindow::new(CalendarUnit::Month, 2).unwrap();
        let (d, _) = window.transition(0, Nanos::new(u64::MAX), 1);
        assert!(d.is_allowed());
        assert_eq!(d.reset_after(), Duration::from_nanos(u64::MAX));
        let taken = AtomicU64::new(0);
        let _taken = window.take_cell(&taken);
        assert!(window.check_cell(&taken, Nanos::new(5), 1).is_denied());
    }
}
