//! What a limiter answers.
//!
//! A denial is a value, not an error: [`Decision`] says allowed or not and
//! carries everything a caller needs to answer its own client (`Retry-After`,
//! the `RateLimit-*` headers) without recomputing anything. `Result` is kept
//! for requests that can never succeed ([`CostError`]).

use std::fmt;
use std::time::Duration;

/// The answer to one request: allowed or not, and the numbers behind it.
///
/// # Examples
///
/// ```
/// use tollgate::{Gcra, Limiter, ManualClock, Quota};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = Limiter::with_clock(Gcra::new(Quota::per_second(2)?)?, ManualClock::new());
/// assert!(limiter.check().is_allowed());
/// assert!(limiter.check().is_allowed());
/// let denied = limiter.check();
/// assert!(!denied.is_allowed());
/// assert_eq!(denied.remaining(), 0);
/// assert_eq!(denied.retry_after().as_millis(), 500);
/// # Ok(())
/// # }
/// ```
#[must_use = "a Decision says whether the request may proceed"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    allowed: bool,
    limit: u64,
    remaining: u64,
    retry_after_ns: u64,
    reset_after_ns: u64,
}

impl Decision {
    /// An admission: `remaining` permits left, full again after `reset_after_ns`.
    pub(crate) const fn allow(limit: u64, remaining: u64, reset_after_ns: u64) -> Decision {
        Decision {
            allowed: true,
            limit,
            remaining,
            retry_after_ns: 0,
            reset_after_ns,
        }
    }

    /// A denial: the same request fits in `retry_after_ns` at the earliest.
    pub(crate) const fn deny(
        limit: u64,
        remaining: u64,
        retry_after_ns: u64,
        reset_after_ns: u64,
    ) -> Decision {
        Decision {
            allowed: false,
            limit,
            remaining,
            retry_after_ns,
            reset_after_ns,
        }
    }

    /// Builds a decision from its parts, for backends outside this crate
    /// (Redis scripts, remote servers) that compute the same numbers.
    pub const fn from_parts(
        allowed: bool,
        limit: u64,
        remaining: u64,
        retry_after: Duration,
        reset_after: Duration,
    ) -> Decision {
        Decision {
            allowed,
            limit,
            remaining,
            retry_after_ns: duration_to_nanos(retry_after),
            reset_after_ns: duration_to_nanos(reset_after),
        }
    }

    /// Whether the request was admitted (and its permits taken).
    pub const fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// Whether the request was refused (and nothing taken).
    pub const fn is_denied(&self) -> bool {
        !self.allowed
    }

    /// The most permits the limiter can hold: the burst for a token bucket,
    /// the limit per window for window algorithms.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// Permits that could be taken right now, after this decision.
    pub const fn remaining(&self) -> u64 {
        self.remaining
    }

    /// For a denial, how long until the same request would be admitted if
    /// nothing else happens, exact to the clock's resolution: at
    /// `now + retry_after` it is admitted, one nanosecond earlier it is not.
    /// Zero for an admission.
    ///
    /// `u64::MAX` nanoseconds (584 years) means "not before the end of the
    /// clock's range": the request would fit only after the last instant a
    /// [`Nanos`](crate::Nanos) can name.
    pub const fn retry_after(&self) -> Duration {
        Duration::from_nanos(self.retry_after_ns)
    }

    /// How long until the limiter is back to full (as if never used), if
    /// nothing else happens.
    pub const fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after_ns)
    }
}

const fn duration_to_nanos(duration: Duration) -> u64 {
    let nanos = duration.as_nanos();
    if nanos > u64::MAX as u128 {
        u64::MAX
    } else {
        nanos as u64
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.allowed {
            write!(f, "allowed, {}/{} remaining", self.remaining, self.limit)
        } else {
            write!(
                f,
                "denied, retry after {:?} ({}/{} remaining)",
                self.retry_after(),
                self.remaining,
                self.limit
            )
        }
    }
}

/// A request that no amount of waiting can admit: its cost is above the
/// limiter's capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CostError {
    cost: u64,
    capacity: u64,
}

impl CostError {
    pub(crate) const fn new(cost: u64, capacity: u64) -> CostError {
        CostError { cost, capacity }
    }

    /// The cost that was asked for.
    pub const fn cost(&self) -> u64 {
        self.cost
    }

    /// The most any single request can cost.
    pub const fn capacity(&self) -> u64 {
        self.capacity
    }
}

impl fmt::Display for CostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a request costing {} can never be admitted: the limiter holds at most {}",
            self.cost, self.capacity
        )
    }
}

impl std::error::Error for CostError {}
