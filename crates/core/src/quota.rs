//! How many permits, over what period, with what burst.
//!
//! A [`Quota`] is `limit` permits per `period`, plus a `burst`: the most
//! permits that may be taken at once. Rate and burst are independent (unlike
//! Guava's `RateLimiter`, where the burst is one second's worth): a quota of
//! 100 per second with a burst of 5 admits at most 5 back-to-back, then one
//! every 10 ms.
//!
//! # Burst sizes
//!
//! By default the burst equals the limit, so that `Quota::per_second(10)`
//! admits 10 at once and then refills at 10 per second, the behaviour every
//! window algorithm has by construction. Only the token bucket / GCRA reads
//! the burst; window algorithms admit `limit` per window.
//!
//! # Validation
//!
//! Every constructor checks its input and returns a [`QuotaError`] rather
//! than panicking or rounding: a zero limit, zero period or zero burst, a
//! period beyond 584 years (the range of a `u64` of nanoseconds). Each
//! algorithm then checks that it can represent the quota exactly enough (for
//! example, the GCRA refuses rates above 16 permits per nanosecond).

use std::fmt;
use std::time::Duration;

/// Limit per period, and burst.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
///
/// # fn main() -> Result<(), tollgate::QuotaError> {
/// let api = Quota::per_second(100)?.with_burst(5)?;
/// assert_eq!(api.limit(), 100);
/// assert_eq!(api.burst(), 5);
///
/// let yearly = Quota::new(1, Duration::from_secs(10 * 365 * 86_400))?;
/// assert_eq!(yearly.limit(), 1);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u64,
    period_ns: u64,
    burst: u64,
}

impl Quota {
    /// `limit` permits per `period`, with a burst of `limit`.
    ///
    /// # Errors
    ///
    /// [`QuotaError::ZeroLimit`], [`QuotaError::ZeroPeriod`], or
    /// [`QuotaError::PeriodTooLong`] for a period of 2^64 ns (584 years) or more.
    pub fn new(limit: u64, period: Duration) -> Result<Quota, QuotaError> {
        if limit == 0 {
            return Err(QuotaError::ZeroLimit);
        }
        if period.is_zero() {
            return Err(QuotaError::ZeroPeriod);
        }
        let period_ns = u64::try_from(period.as_nanos()).map_err(|_| QuotaError::PeriodTooLong)?;
        Ok(Quota {
            limit,
            period_ns,
            burst: limit,
        })
    }

    /// `limit` permits per second.
    ///
    /// # Errors
    ///
    /// [`QuotaError::ZeroLimit`].
    pub fn per_second(limit: u64) -> Result<Quota, QuotaError> {
        Quota::new(limit, Duration::from_secs(1))
    }

    /// `limit` permits per minute.
    ///
    /// # Errors
    ///
    /// [`QuotaError::ZeroLimit`].
    pub fn per_minute(limit: u64) -> Result<Quota, QuotaError> {
        Quota::new(limit, Duration::from_secs(60))
    }

    /// `limit` permits per hour.
    ///
    /// # Errors
    ///
    /// [`QuotaError::ZeroLimit`].
    pub fn per_hour(limit: u64) -> Result<Quota, QuotaError> {
        Quota::new(limit, Duration::from_secs(3_600))
    }

    /// `limit` permits per day (86,400 s).
    ///
    /// # Errors
    ///
    /// [`QuotaError::ZeroLimit`].
    pub fn per_day(limit: u64) -> Result<Quota, QuotaError> {
        Quota::new(limit, Duration::from_secs(86_400))
    }

    /// The same rate with a different burst.
    ///
    /// Only the token bucket / GCRA reads the burst (see
    /// [Burst sizes](self#burst-sizes)). By default, the burst equals the limit.
    ///
    /// # Errors
    ///
    /// [`QuotaError::ZeroBurst`].
    pub fn with_burst(self, burst: u64) -> Result<Quota, QuotaError> {
        if burst == 0 {
            return Err(QuotaError::ZeroBurst);
        }
        Ok(Quota { burst, ..self })
    }

    /// Permits per period.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The period.
    pub const fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    /// The period in nanoseconds.
    pub const fn period_nanos(&self) -> u64 {
        self.period_ns
    }

    /// The most permits that may be taken at once (token bucket / GCRA).
    pub const fn burst(&self) -> u64 {
        self.burst
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} per {:?} (burst {})",
            self.limit,
            self.period(),
            self.burst
        )
    }
}

/// Why a quota cannot be built, or cannot be run by an algorithm.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaError {
    /// The limit is 0: nothing could ever be admitted. To block everything,
    /// say so explicitly rather than through a quota.
    ZeroLimit,
    /// The period is 0.
    ZeroPeriod,
    /// The burst is 0.
    ZeroBurst,
    /// The period is 2^64 ns (584 years) or longer.
    PeriodTooLong,
    /// The rate is above what the algorithm can represent exactly.
    TooFast {
        /// The algorithm that refused.
        algorithm: &'static str,
        /// The highest rate it accepts, in permits per second.
        max_per_second: u64,
    },
    /// An intermediate value (such as burst × emission interval) does not fit
    /// in 64 bits.
    Overflow {
        /// The algorithm that refused.
        algorithm: &'static str,
        /// What overflowed.
        what: &'static str,
    },
    /// The algorithm would use more memory than it allows for one limiter.
    TooLarge {
        /// The algorithm that refused.
        algorithm: &'static str,
        /// The largest accepted value.
        max: u64,
        /// What is too large.
        what: &'static str,
    },
    /// An algorithm parameter other than the quota is invalid.
    InvalidParameter {
        /// The algorithm that refused.
        algorithm: &'static str,
        /// What is wrong.
        what: &'static str,
    },
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaError::ZeroLimit => f.write_str("the limit must be at least 1"),
            QuotaError::ZeroPeriod => f.write_str("the period must be longer than 0"),
            QuotaError::ZeroBurst => f.write_str("the burst must be at least 1"),
            QuotaError::PeriodTooLong => {
                f.write_str("the period must be shorter than 2^64 ns (584 years)")
            }
            QuotaError::TooFast {
                algorithm,
                max_per_second,
            } => write!(
                f,
                "{algorithm}: the rate is above the {max_per_second} per second it can represent"
            ),
            QuotaError::Overflow { algorithm, what } => {
                write!(f, "{algorithm}: {what} does not fit in 64 bits")
            }
            QuotaError::TooLarge {
                algorithm,
                max,
                what,
            } => write!(f, "{algorithm}: {what} must be at most {max}"),
            QuotaError::InvalidParameter { algorithm, what } => write!(f, "{algorithm}: {what}"),
        }
    }
}

impl std::error::Error for QuotaError {}
