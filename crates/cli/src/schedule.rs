//! The exact send schedule: request `i` is due `floor(i·10⁹ / rate)` ns
//! after the start.
//!
//! This is GCRA with a burst of 1, the pacing the load generator holds: the
//! emission interval is `10⁹ / rate` ns, kept as the exact fraction instead
//! of a rounded step, so that the error never accumulates (request
//! 10,000,000 at 3 per second is due at exactly 3,333,333.33… s, floored to
//! the nanosecond, not 10⁷ rounded steps later). Each instant is computed
//! from `i` alone, in `u128`, so nothing drifts and nothing overflows for any
//! `u64` index at any rate of 1 per second or more.
//!
//! It stands in for the core's FIFO shaper, which arrives later; once there,
//! the pacing can move onto it with this module as its reference.

use std::time::Duration;

const NANOS_PER_SECOND: u128 = 1_000_000_000;

/// Instants at a constant rate, from request 0 at offset zero.
///
/// # Examples
///
/// ```
/// use tollgate_cli::schedule::Schedule;
///
/// let schedule = Schedule::per_second(3).expect("a rate above zero");
/// assert_eq!(schedule.offset_nanos(1), 333_333_333);
/// assert_eq!(schedule.offset_nanos(3), 1_000_000_000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    rate_per_second: u64,
}

impl Schedule {
    /// `rate_per_second` requests per second; `None` for a rate of zero.
    pub fn per_second(rate_per_second: u64) -> Option<Schedule> {
        (rate_per_second > 0).then_some(Schedule { rate_per_second })
    }

    /// Requests per second.
    pub fn rate(&self) -> u64 {
        self.rate_per_second
    }

    /// Nanoseconds from the start to request `index`'s intended send time,
    /// saturating at `u64::MAX` (584 years).
    pub fn offset_nanos(&self, index: u64) -> u64 {
        let nanos = u128::from(index) * NANOS_PER_SECOND / u128::from(self.rate_per_second);
        u64::try_from(nanos).unwrap_or(u64::MAX)
    }

    /// [`offset_nanos`](Schedule::offset_nanos) as a duration.
    pub fn offset(&self, index: u64) -> Duration {
        Duration::from_nanos(self.offset_nanos(index))
    }

    /// How many requests are due strictly before `offset`: the `i` with
    /// `floor(i·10⁹ / rate) < offset`, that is `ceil(offset·rate / 10⁹)`.
    pub fn due_before(&self, offset: Duration) -> u64 {
        let scaled = offset.as_nanos() * u128::from(self.rate_per_second);
        u64::try_from(scaled.div_ceil(NANOS_PER_SECOND)).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_rate_is_refused() {
        assert_eq!(Schedule::per_second(0), None);
    }

    #[test]
    fn offsets_are_floored_exact_fractions() {
        let third = Schedule::per_second(3).unwrap();
        assert_eq!(third.offset_nanos(0), 0);
        assert_eq!(third.offset_nanos(1), 333_333_333);
        assert_eq!(third.offset_nanos(2), 666_666_666);
        assert_eq!(third.offset_nanos(3), 1_000_000_000);
        // No drift: far out, still the exact fraction, not 10⁷ rounded steps.
        assert_eq!(third.offset_nanos(10_000_000), 3_333_333_333_333_333);
    }

    #[test]
    fn spacing_never_differs_from_the_interval_by_a_nanosecond_or_more() {
        let schedule = Schedule::per_second(7_919).unwrap();
        let interval = 1_000_000_000.0 / 7_919.0;
        for i in 0..100_000 {
            let gap = (schedule.offset_nanos(i + 1) - schedule.offset_nanos(i)) as f64;
            assert!((gap - interval).abs() < 1.0, "gap {gap} at {i}");
        }
    }

    #[test]
    fn huge_indices_do_not_overflow() {
        let one = Schedule::per_second(1).unwrap();
        assert_eq!(one.offset_nanos(u64::MAX), u64::MAX);
        let fast = Schedule::per_second(u64::MAX).unwrap();
        assert_eq!(fast.offset_nanos(u64::MAX), 1_000_000_000);
    }

    #[test]
    fn due_before_counts_the_instants_before_an_offset() {
        let schedule = Schedule::per_second(200).unwrap();
        assert_eq!(schedule.due_before(Duration::ZERO), 0);
        assert_eq!(schedule.due_before(Duration::from_nanos(1)), 1);
        assert_eq!(schedule.due_before(Duration::from_secs(2)), 400);
        let third = Schedule::per_second(3).unwrap();
        // 0, 333_333_333, 666_666_666 are before 666_666_667; 1 s is not.
        assert_eq!(third.due_before(Duration::from_nanos(666_666_667)), 3);
        assert_eq!(third.due_before(Duration::from_nanos(666_666_666)), 2);
        for offset in [1, 5, 999, 333_333_334, 1_000_000_000, 1_000_000_001] {
            let due = third.due_before(Duration::from_nanos(offset));
            assert!(third.offset_nanos(due - 1) < offset);
            assert!(third.offset_nanos(due) >= offset);
        }
    }
}
