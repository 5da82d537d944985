//! Calendar windows on Redis: the core's [`CalendarWindow`] (a fixed window
//! aligned to wall-clock UTC units), decided on the server's `TIME` (Unix
//! time, which survives a restart of Redis or of the client), with the
//! core's boundaries (parity tested against the core's type).
//!
//! # Boundaries (the workspace's contract)
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
//! - A quota change ([`carry`](crate::carry)) carries a calendar window's
//!   count into the unit current under the new limit, as the core does.

pub use tollgate::algorithm::calendar::{CalendarUnit, CalendarWindow};

/// The script's code of `unit` (1 to 5; see [`script`](crate::script)).
pub(crate) fn code(unit: CalendarUnit) -> u8 {
    match unit {
        CalendarUnit::Minute => 1,
        CalendarUnit::Hour => 2,
        CalendarUnit::Day => 3,
        CalendarUnit::Week => 4,
        // The core's unit is non-exhaustive; a unit added there and not here
        // would be refused by the script (an error, never "allow").
        CalendarUnit::Month => 5,
        _ => 0,
    }
}
