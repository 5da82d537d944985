//! Calendar windows on Redis: a fixed window aligned to wall-clock UTC
//! units, decided on the server's `TIME` (Unix time, which survives a
//! restart of Redis or of the client).
//!
//! # Boundaries (the workspace's contract for issue 20)
//!
//! - `Minute`, `Hour`, `Day`: Unix time divided by 60 s, 3,600 s, 86,400 s
//!   (UTC has no leap seconds in Unix time: a day is 86,400 s).
//! - `Week`: starts Monday 00:00 UTC (Unix day 4, 1970-01-05, is a Monday).
//! - `Month`: starts the 1st 00:00 UTC, of whatever length (28 to 31 days):
//!   the script converts the day number to a civil date (H. Hinnant's
//!   `civil_from_days`, integer arithmetic, exact below 2^53).
//!
//! A window starts at its calendar boundary, not at the first request: a
//! monthly quota resets at 00:00 UTC on the 1st for every key at once.
//!
//! # Decisions where the contract is silent
//!
//! - The state is the fixed window's `"<window index> <count>"` (the index
//!   counts minutes, hours, days, weeks or months since the epoch), with the
//!   same TTL invariant (the time to the window's end plus the slack).
//! - `reset_after` and `retry_after` of a spent key are the time to the
//!   next boundary; `remaining` as for a fixed window.
//! - Always the general script (`decide.lua`), never the lean scripts nor
//!   the native module, which do not know calendars: a limiter with a
//!   calendar limit decides on the script even where the module is loaded.
//! - Test mode ([`manual_time`](crate::RedisLimiterBuilder::manual_time))
//!   reads the manual clock as Unix time in nanoseconds: exact only below
//!   2^53 ns (the first 104 days of 1970), which the tests keep to.
//! - The local fallback of [`FailurePolicy::Local`](crate::FailurePolicy)
//!   has no wall clock: it uses a fixed window of the unit's longest length
//!   (31 days for a month), aligned on its own clock.
//! - A quota change ([`carry`](crate::carry)) does not carry a calendar
//!   window's count.

use std::time::Duration;

use tollgate::{Quota, QuotaError};

/// The calendar unit a window is aligned to (UTC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CalendarUnit {
    /// Every minute, at second 0.
    Minute,
    /// Every hour, at minute 0.
    Hour,
    /// Every day at 00:00 UTC.
    Day,
    /// Every Monday at 00:00 UTC.
    Week,
    /// The 1st of every month at 00:00 UTC.
    Month,
}

impl CalendarUnit {
    /// The script's code (1 to 5).
    pub(crate) fn code(self) -> u8 {
        match self {
            CalendarUnit::Minute => 1,
            CalendarUnit::Hour => 2,
            CalendarUnit::Day => 3,
            CalendarUnit::Week => 4,
            CalendarUnit::Month => 5,
        }
    }

    /// The longest a window of this unit lasts.
    pub fn longest(self) -> Duration {
        const DAY: u64 = 86_400;
        Duration::from_secs(match self {
            CalendarUnit::Minute => 60,
            CalendarUnit::Hour => 3_600,
            CalendarUnit::Day => DAY,
            CalendarUnit::Week => 7 * DAY,
            CalendarUnit::Month => 31 * DAY,
        })
    }
}

/// `limit` permits per calendar `unit`, windows aligned to UTC boundaries.
///
/// ```
/// use tollgate_redis::{CalendarUnit, CalendarWindow};
/// let monthly = CalendarWindow::new(10_000, CalendarUnit::Month).unwrap();
/// assert_eq!(monthly.limit(), 10_000);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CalendarWindow {
    unit: CalendarUnit,
    /// `limit` per the unit's longest length (for the local fallback).
    quota: Quota,
}

impl CalendarWindow {
    /// `limit` permits per `unit`.
    ///
    /// # Errors
    ///
    /// [`QuotaError`] for a limit of 0.
    pub fn new(limit: u64, unit: CalendarUnit) -> Result<CalendarWindow, QuotaError> {
        Ok(CalendarWindow {
            unit,
            quota: Quota::new(limit, unit.longest())?,
        })
    }

    /// Permits per window.
    pub fn limit(&self) -> u64 {
        self.quota.limit()
    }

    /// The unit.
    pub fn unit(&self) -> CalendarUnit {
        self.unit
    }

    /// The limit over the unit's longest length.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }
}
