//! [`SystemClock`]: UNIX time as a [`Clock`], for calendar windows.
//!
//! Its nanoseconds are counted from 1970-01-01 00:00 UTC, which is what
//! [`CalendarWindow`](crate::algorithm::calendar::CalendarWindow) reads
//! (see there why one clock trait, and not a second wall-clock one). Every
//! other algorithm needs only differences of readings, so a limiter mixing
//! a per-second GCRA and a per-month window ([`AllOf`](crate::AllOf) of
//! [`AnyAlgorithm`](crate::algorithm::any::AnyAlgorithm)) runs on it too.
//!
//! The wall clock can be set back (NTP steps, an operator): the algorithms
//! are safe against a clock going back (no permit is re-credited: see
//! [`clock`](crate::clock)), at the price of longer waits until it catches
//! up. A reading before 1970 counts as the epoch. It costs a
//! `clock_gettime(CLOCK_REALTIME)` per reading (tens of nanoseconds without
//! the vDSO, about 20 with it): use it for limiters that need the calendar.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::clock::{Clock, ClockSource, Nanos};

/// The system's wall clock: nanoseconds since the UNIX epoch. See the
/// [module docs](self).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl SystemClock {
    /// The system's wall clock.
    pub const fn new() -> SystemClock {
        SystemClock
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Nanos {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Nanos::new(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
    }

    fn instant_at(&self, at: Nanos) -> Option<Instant> {
        // The wall clock can move under us: the best guess is the distance
        // from now, measured once.
        let now = self.now();
        Instant::now().checked_add(at.saturating_duration_since(now))
    }
}

impl From<SystemClock> for ClockSource {
    fn from(clock: SystemClock) -> ClockSource {
        ClockSource::custom(clock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_unix_time() {
        let now = SystemClock::new().now().as_u64();
        // After 2024-01-01, before 2200-01-01.
        assert!(now > 1_704_067_200_000_000_000 && now < 7_258_118_400_000_000_000);
    }
}
