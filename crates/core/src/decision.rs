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
#[derive(Clone, Copy)]
pub struct Decision {
    allowed: bool,
    /// Ticks per nanosecond of `retry_ticks` and `reset_ticks` (1 to 16).
    scale: u8,
    limit: u64,
    /// `remaining = headroom / unit`: kept apart so that the hot path of an
    /// algorithm counting in ticks (GCRA) divides only if the caller asks.
    headroom: u64,
    unit: u64,
    /// `u64::MAX` stands for "never" whatever the scale.
    retry_ticks: u64,
    reset_ticks: u64,
}

impl Decision {
    /// An admission: `remaining` permits left, full again after `reset_after_ns`.
    #[inline]
    pub(crate) const fn allow(limit: u64, remaining: u64, reset_after_ns: u64) -> Decision {
        Decision::in_ticks(true, limit, remaining, 1, 0, reset_after_ns, 1)
    }

    /// A denial: the same request fits in `retry_after_ns` at the earliest.
    #[inline]
    pub(crate) const fn deny(
        limit: u64,
        remaining: u64,
        retry_after_ns: u64,
        reset_after_ns: u64,
    ) -> Decision {
        Decision::in_ticks(
            false,
            limit,
            remaining,
            1,
            retry_after_ns,
            reset_after_ns,
            1,
        )
    }

    /// A decision counted in ticks of `1/scale` ns, with `headroom / unit`
    /// permits remaining.
    #[inline]
    pub(crate) const fn in_ticks(
        allowed: bool,
        limit: u64,
        headroom: u64,
        unit: u64,
        retry_ticks: u64,
        reset_ticks: u64,
        scale: u8,
    ) -> Decision {
        Decision {
            allowed,
            scale,
            limit,
            headroom,
            unit,
            retry_ticks,
            reset_ticks,
        }
    }

    /// The same decision with `reset_after` replaced by `reset_after_ns`
    /// (counted in nanoseconds; `u64::MAX` is "never").
    #[inline]
    pub(crate) const fn with_reset_after(self, reset_after_ns: u64) -> Decision {
        Decision::in_ticks(
            self.allowed,
            self.limit,
            self.remaining(),
            1,
            self.nanos(self.retry_ticks),
            reset_after_ns,
            1,
        )
    }

    /// The same decision as seen `by_ns` earlier than it was taken: its
    /// waits end at the same instants, so each one that is not zero grows by
    /// `by_ns` (saturating; "never" stays "never"). A wait of zero stays
    /// zero: nothing to wait for at the later instant is nothing to wait for
    /// now either (a state created fresh there).
    #[inline]
    pub(crate) fn seen_earlier_by(self, by_ns: u64) -> Decision {
        let by_ticks = by_ns.saturating_mul(self.scale as u64);
        let later = |ticks: u64| {
            if ticks == 0 || ticks == u64::MAX {
                ticks
            } else {
                ticks.saturating_add(by_ticks)
            }
        };
        Decision {
            retry_ticks: later(self.retry_ticks),
            reset_ticks: later(self.reset_ticks),
            ..self
        }
    }

    /// Ticks to whole nanoseconds, rounded up; "never" stays "never".
    #[inline]
    const fn nanos(&self, ticks: u64) -> u64 {
        if self.scale == 1 || ticks == u64::MAX {
            ticks
        } else {
            ticks.div_ceil(self.scale as u64)
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
        Decision::in_ticks(
            allowed,
            limit,
            remaining,
            1,
            duration_to_nanos(retry_after),
            duration_to_nanos(reset_after),
            1,
        )
    }

    /// Whether the request was admitted (and its permits taken).
    #[inline]
    pub const fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// Whether the request was refused (and nothing taken).
    #[inline]
    pub const fn is_denied(&self) -> bool {
        !self.allowed
    }

    /// The most permits the limiter can hold: the burst for a token bucket,
    /// the limit per window for window algorithms.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// Permits that could be taken right now, after this decision.
    #[inline]
    pub const fn remaining(&self) -> u64 {
        if self.unit == 1 {
            self.headroom
        } else {
            self.headroom / self.unit
        }
    }

    /// For a denial, how long until the same request would be admitted if
    /// nothing else happens, exact to the clock's resolution: at
    /// `now + retry_after` it is admitted, one nanosecond earlier it is not.
    /// Zero for an admission.
    ///
    /// `u64::MAX` nanoseconds (584 years) means "not before the end of the
    /// clock's range": the request would fit only after the last instant a
    /// [`Nanos`](crate::Nanos) can name.
    #[inline]
    pub const fn retry_after(&self) -> Duration {
        Duration::from_nanos(self.nanos(self.retry_ticks))
    }

    /// How long until the limiter is back to full (as if never used), if
    /// nothing else happens: after an admission, counting the permits it
    /// took. For several limits at once ([`AllOf`](crate::AllOf)), the
    /// longest of them: every limit is full again then, whichever bound
    /// this decision.
    ///
    /// `u64::MAX` nanoseconds means "never": the limiter would be full again
    /// only after the last instant a [`Nanos`](crate::Nanos) can name, or it
    /// is closed (past the end of the algorithm's representable time, where
    /// it denies everything and reports `remaining` 0).
    #[inline]
    pub const fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.nanos(self.reset_ticks))
    }
}

impl PartialEq for Decision {
    /// Equal when every observable value is: however each was counted.
    fn eq(&self, other: &Decision) -> bool {
        self.allowed == other.allowed
            && self.limit == other.limit
            && self.remaining() == other.remaining()
            && self.retry_after() == other.retry_after()
            && self.reset_after() == other.reset_after()
    }
}

impl Eq for Decision {}

impl std::hash::Hash for Decision {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (
            self.allowed,
            self.limit,
            self.remaining(),
            self.retry_after(),
            self.reset_after(),
        )
            .hash(state);
    }
}

impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decision")
            .field("allowed", &self.allowed)
            .field("limit", &self.limit)
            .field("remaining", &self.remaining())
            .field("retry_after", &self.retry_after())
            .field("reset_after", &self.reset_after())
            .finish()
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
            write!(f, "allowed, {}/{} remaining", self.remaining(), self.limit)
        } else {
            write!(
                f,
                "denied, retry after {:?} ({}/{} remaining)",
                self.retry_after(),
                self.remaining(),
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
    /// A cost of `cost` against a capacity of `capacity`, for backends outside
    /// this crate that refuse the same requests.
    pub const fn new(cost: u64, capacity: u64) -> CostError {
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
