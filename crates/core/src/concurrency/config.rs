//! The plain values a concurrency limiter is configured with and answers
//! with: [`Priority`], [`Shares`], [`Denied`] and its [`Reason`], and the
//! configuration error [`ConfigError`]. No behaviour beyond arithmetic on
//! them, so that every other module of [`concurrency`](super) can use them.

use std::fmt;

/// The largest limit a concurrency limiter holds: its state packs the limit
/// in 31 bits of one word.
pub const MAX_LIMIT: u32 = (1 << 31) - 1;

/// How much a request matters when slots run short.
///
/// Each priority may hold slots only up to its [share](Shares) of the limit:
/// sheddable work is refused first, critical work last. Ordered
/// `Sheddable < Default < Critical`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Work that may be refused first (prefetches, batch jobs, retries).
    Sheddable,
    /// Ordinary work.
    #[default]
    Default,
    /// Work that must get through while anything does (health checks,
    /// payments, the control plane). May use the whole limit.
    Critical,
}

impl Priority {
    /// Every priority, highest first: the order in which waiters are served.
    pub const HIGHEST_FIRST: [Priority; 3] =
        [Priority::Critical, Priority::Default, Priority::Sheddable];

    /// An index 0 (critical) to 2 (sheddable).
    pub(crate) const fn lane(self) -> usize {
        match self {
            Priority::Critical => 0,
            Priority::Default => 1,
            Priority::Sheddable => 2,
        }
    }
}

/// The share of the limit each priority may hold, in per cent.
///
/// # The rule
///
/// A request of priority `p` and cost `c` is admitted only if
/// `in_flight + c ≤ threshold(p)`, where `in_flight` counts the slots held
/// by every priority and
///
/// ```text
/// threshold(Critical)  = limit
/// threshold(Default)   = ⌈limit · default / 100⌉
/// threshold(Sheddable) = ⌈limit · sheddable / 100⌉
/// ```
///
/// So, at any instant, the last `limit − threshold(Default)` slots can only
/// be taken by critical requests, and the last `limit − threshold(Sheddable)`
/// only by default or critical ones. The threshold is rounded up, so the
/// reserve it leaves (`limit − threshold`) is rounded down to whole slots:
/// with the default shares, **below a limit of 10 nothing is reserved for
/// critical work** (`ConcurrencyLimiter::new(n)` admits `n` requests of the
/// default priority whenever `n < 10`; a limit of 10 reserves one slot, of
/// 20 two), and below a limit of 2 nothing is reserved from sheddable work.
///
/// A request whose cost alone passes its threshold (`cost >
/// threshold(p)`) can never be admitted: it is refused at once with
/// [`Reason::Cost`], by `enqueue` and `acquire` too, never queued.
///
/// By default, sheddable work may use up to 50 % of the limit and default
/// work up to 90 % (Stripe's "reserve capacity for critical requests").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shares {
    sheddable: u8,
    default: u8,
}

impl Default for Shares {
    fn default() -> Shares {
        Shares {
            sheddable: 50,
            default: 90,
        }
    }
}

impl Shares {
    /// Shares of `sheddable` and `default` per cent; critical always has 100.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Shares`] unless `1 ≤ sheddable ≤ default ≤ 100`.
    pub fn new(sheddable: u8, default: u8) -> Result<Shares, ConfigError> {
        if sheddable == 0 || sheddable > default || default > 100 {
            return Err(ConfigError::Shares { sheddable, default });
        }
        Ok(Shares { sheddable, default })
    }

    /// No reservation: every priority may use the whole limit.
    pub const fn none() -> Shares {
        Shares {
            sheddable: 100,
            default: 100,
        }
    }

    /// The per cent of the limit `priority` may hold.
    pub const fn percent(&self, priority: Priority) -> u8 {
        match priority {
            Priority::Critical => 100,
            Priority::Default => self.default,
            Priority::Sheddable => self.sheddable,
        }
    }

    /// How many slots `priority` may see in use, its own included, with
    /// `limit` slots in all (see the rule above).
    #[inline]
    pub const fn threshold(&self, limit: u32, priority: Priority) -> u32 {
        let percent = self.percent(priority) as u64;
        if percent == 100 || limit == 0 {
            return limit;
        }
        (limit as u64 * percent).div_ceil(100) as u32
    }
}

/// Why a request got no slots. Nothing was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// The slots this priority may use are taken.
    Full,
    /// Slots might fit, but waiters of the same or a higher priority are
    /// queued ahead: no barging.
    Queued,
    /// The cost is above the limit, or above the share of the limit the
    /// request's priority may hold: it cannot fit now, whatever is
    /// released, so it is refused at once, never queued.
    Cost,
    /// A keyed limiter holds its cap of keys, all with slots in use.
    TooManyKeys,
    /// The waiting queue holds its cap of waiters.
    QueueFull,
    /// The caller waited `max_delay` without getting its slots.
    TimedOut,
}

/// A refusal, with what a caller needs to answer it: the limit, the slots in
/// use and what remains for the request's priority, at the instant of the
/// decision.
#[must_use = "a refusal says why the request may not proceed"]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Denied {
    pub(crate) reason: Reason,
    pub(crate) limit: u32,
    pub(crate) in_flight: u32,
    pub(crate) remaining: u32,
}

impl Denied {
    /// Why.
    pub const fn reason(&self) -> Reason {
        self.reason
    }

    /// The limit in force (the whole limit, not the priority's share).
    pub const fn limit(&self) -> u32 {
        self.limit
    }

    /// Slots in use, by every priority.
    pub const fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Slots the request's priority could still take (below its cost, or
    /// it would have been admitted, unless waiters were ahead of it).
    pub const fn remaining(&self) -> u32 {
        self.remaining
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.reason {
            Reason::Full => "no slot free for this priority",
            Reason::Queued => "waiters are queued ahead",
            Reason::Cost => "the cost is above the limit or its priority's share",
            Reason::TooManyKeys => "too many keys with slots in use",
            Reason::QueueFull => "the waiting queue is full",
            Reason::TimedOut => "waited max_delay without a slot",
            #[allow(unreachable_patterns)]
            _ => "refused",
        };
        write!(
            f,
            "concurrency limit: {why} ({} of {} in flight, {} remaining)",
            self.in_flight, self.limit, self.remaining
        )
    }
}

impl std::error::Error for Denied {}

/// A concurrency limiter that cannot be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The limit is 0 or above [`MAX_LIMIT`].
    Limit(u64),
    /// The shares are not `1 ≤ sheddable ≤ default ≤ 100`.
    Shares {
        /// The sheddable share asked for.
        sheddable: u8,
        /// The default share asked for.
        default: u8,
    },
    /// The adaptive limit's bounds are not `1 ≤ min ≤ initial ≤ max ≤ MAX_LIMIT`.
    AdaptiveBounds {
        /// Lowest limit.
        min: u32,
        /// Starting limit.
        initial: u32,
        /// Highest limit.
        max: u32,
    },
    /// A keyed limiter's `max_keys` is 0.
    MaxKeys,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Limit(limit) => {
                write!(
                    f,
                    "a concurrency limit must be 1 to {MAX_LIMIT}, not {limit}"
                )
            }
            ConfigError::Shares { sheddable, default } => write!(
                f,
                "priority shares must be 1 <= sheddable <= default <= 100 per cent, not {sheddable} and {default}"
            ),
            ConfigError::AdaptiveBounds { min, initial, max } => write!(
                f,
                "an adaptive limit needs 1 <= min <= initial <= max <= {MAX_LIMIT}, not {min}, {initial}, {max}"
            ),
            ConfigError::MaxKeys => f.write_str("max_keys must be at least 1"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Checks a limit from user input.
pub(crate) fn checked_limit(limit: u64) -> Result<u32, ConfigError> {
    match u32::try_from(limit) {
        Ok(limit) if (1..=MAX_LIMIT).contains(&limit) => Ok(limit),
        _ => Err(ConfigError::Limit(limit)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_follow_the_rule() {
        let shares = Shares::default();
        assert_eq!(shares.threshold(10, Priority::Critical), 10);
        assert_eq!(shares.threshold(10, Priority::Default), 9);
        assert_eq!(shares.threshold(10, Priority::Sheddable), 5);
        assert_eq!(shares.threshold(1, Priority::Sheddable), 1);
        assert_eq!(shares.threshold(3, Priority::Sheddable), 2);
        assert_eq!(shares.threshold(3, Priority::Default), 3);
        assert_eq!(shares.threshold(20, Priority::Default), 18);
        assert_eq!(
            shares.threshold(MAX_LIMIT, Priority::Default),
            1_932_735_283
        );
    }

    #[test]
    fn bad_shares_and_limits_are_refused() {
        assert!(Shares::new(0, 50).is_err());
        assert!(Shares::new(60, 50).is_err());
        assert!(Shares::new(50, 101).is_err());
        assert!(Shares::new(50, 50).is_ok());
        assert_eq!(checked_limit(0), Err(ConfigError::Limit(0)));
        assert_eq!(checked_limit(1 << 31), Err(ConfigError::Limit(1 << 31)));
        assert_eq!(checked_limit(5), Ok(5));
    }
}
