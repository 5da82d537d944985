//! The limits a [`RedisLimiter`](crate::RedisLimiter) runs, as script
//! parameters, and their decisions read back.
//!
//! The parameters come from the core's own algorithm values (the GCRA's
//! scale, emission interval and capacity in ticks; the windows' limit, period
//! and slots), so that the script does the core's arithmetic with the core's
//! rounding. Sliding log is not offered: its state is one entry per permit,
//! which on Redis would be a sorted set of up to `limit` members per key; the
//! sliding window counter gives the same guarantee to the precision of its
//! slots at a fixed cost.
//!
//! # Exactness (Lua numbers are doubles)
//!
//! Every value the script forms must be an integer below 2^53. Checks at
//! build time refuse, with [`ConfigError::Inexact`], a limit that
//! could form a larger one:
//!
//! - GCRA keeps its TAT *modulo* `M ≤ 9·10^15` ticks (see
//!   [`script`](crate::script)), so `now · scale` is never formed; the debt
//!   plus one request is at most `2 · burst · T` ticks, which must stay below
//!   2^53 (a burst of one day at 16 ticks per ns is 2^50.3: fine). The TTL
//!   slack must be at most one day.
//! - The windows work in clock units (server mode: microseconds since the Unix
//!   epoch, 2^50.6 today; test mode: the nanoseconds passed in). Their period
//!   must be a whole number of units, below 2^52, and `period · slots` below
//!   2^53.
//! - Warm-up counts in exact naturals past 2^53 (`bignum.lua`), but takes
//!   its parameters and answers its durations as plain numbers: `l` and
//!   `t` (the rate `l / t` per ns in lowest terms) and the warm-up period in
//!   ns must be below 2^53, and so must the longest duration it reports, the
//!   cold cost of a burst plus the warm-up period (104 days).

use std::fmt;
use std::time::Duration;

use tollgate::{Algorithm, Decision, FixedWindow, Gcra, SlidingWindow, WarmUp};

/// The largest integer a double holds exactly, plus one.
const EXACT: u128 = 1 << 53;
/// The GCRA state is the TAT modulo `M ≤ GCRA_MODULUS` ticks (see
/// [`script`](crate::script)).
const GCRA_MODULUS: u64 = 9_000_000_000_000_000;

/// One limit of a [`RedisLimiter`](crate::RedisLimiter): a core algorithm.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// Token bucket / GCRA (the default).
    Gcra(Gcra),
    /// Fixed window, aligned on the clock's origin (the Unix epoch on Redis).
    FixedWindow(FixedWindow),
    /// Sliding window counter (time wheel).
    SlidingWindow(SlidingWindow),
    /// Fixed window aligned to UTC calendar units (see
    /// [`calendar`](crate::calendar)).
    Calendar(crate::calendar::CalendarWindow),
    /// Warm-up (Guava's `SmoothWarmingUp`; see [`warm_up`](crate::warm_up),
    /// "In the general script").
    WarmUp(WarmUp),
}

impl From<WarmUp> for Limit {
    fn from(w: WarmUp) -> Limit {
        Limit::WarmUp(w)
    }
}

impl From<crate::calendar::CalendarWindow> for Limit {
    fn from(w: crate::calendar::CalendarWindow) -> Limit {
        Limit::Calendar(w)
    }
}

impl From<Gcra> for Limit {
    fn from(g: Gcra) -> Limit {
        Limit::Gcra(g)
    }
}

impl From<FixedWindow> for Limit {
    fn from(w: FixedWindow) -> Limit {
        Limit::FixedWindow(w)
    }
}

impl From<SlidingWindow> for Limit {
    fn from(w: SlidingWindow) -> Limit {
        Limit::SlidingWindow(w)
    }
}

/// A limiter that cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// No limit was given.
    NoLimits,
    /// A limit would need numbers the script cannot hold exactly.
    Inexact {
        /// Which limit (its descriptor).
        limit: String,
        /// What is too large or not whole.
        what: &'static str,
    },
    /// The prefix or the name cannot make keys.
    Name(crate::key::NameError),
    /// A failure-policy or lease setting is out of range.
    Invalid(&'static str),
    /// The local fallback quota cannot be built.
    Quota(tollgate::QuotaError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::NoLimits => f.write_str("a Redis limiter needs at least one limit"),
            ConfigError::Inexact { limit, what } => {
                write!(
                    f,
                    "limit {limit}: {what} (the script must stay exact below 2^53)"
                )
            }
            ConfigError::Name(e) => e.fmt(f),
            ConfigError::Invalid(what) => f.write_str(what),
            ConfigError::Quota(e) => write!(f, "local fallback: {e}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Nanoseconds per clock unit of the script: 1 in test mode, 1,000 on the
/// server's clock (microseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unit(pub(crate) u64);

impl Limit {
    /// Permits the limit holds: the burst for GCRA, the limit for windows.
    pub fn capacity(&self) -> u64 {
        match self {
            Limit::Gcra(g) => g.capacity(),
            Limit::FixedWindow(w) => w.capacity(),
            Limit::SlidingWindow(w) => w.capacity(),
            Limit::Calendar(w) => w.capacity(),
            Limit::WarmUp(w) => w.capacity(),
        }
    }

    /// The quota.
    pub fn quota(&self) -> &tollgate::Quota {
        match self {
            Limit::Gcra(g) => g.quota(),
            Limit::FixedWindow(w) => w.quota(),
            Limit::SlidingWindow(w) => w.quota(),
            Limit::Calendar(w) => w.quota(),
            Limit::WarmUp(w) => w.quota(),
        }
    }

    /// How long a key of this limit can hold state that still counts
    /// after its last admission: the period; a GCRA's time to refill its
    /// burst if longer; a warm-up's cold cost of a burst plus its warm-up
    /// period if longer (the time to be as cold as a fresh key).
    pub fn horizon(&self) -> Duration {
        let period = self.quota().period();
        match self {
            Limit::Gcra(g) => {
                period.max(Duration::from_nanos(g.capacity_ticks().div_ceil(g.scale())))
            }
            Limit::WarmUp(w) => {
                let c = w.constants();
                let cold = (u128::from(c.burst) * u128::from(w.cold_factor()) * u128::from(c.t))
                    .div_ceil(u128::from(c.l));
                let cold = Duration::from_nanos(u64::try_from(cold).unwrap_or(u64::MAX));
                period.max(cold.saturating_add(w.warmup()))
            }
            _ => period,
        }
    }

    /// This limit and its exact parameters, as people read them (in error
    /// messages): `g:10/1000000000/5`.
    pub(crate) fn descriptor(&self) -> String {
        let q = self.quota();
        match self {
            Limit::Gcra(_) => format!("g:{}/{}/{}", q.limit(), q.period_nanos(), q.burst()),
            Limit::FixedWindow(_) => format!("f:{}/{}", q.limit(), q.period_nanos()),
            Limit::SlidingWindow(w) => {
                format!("s:{}/{}/{}", q.limit(), q.period_nanos(), w.slots())
            }
            Limit::Calendar(w) => {
                format!("c:{}/{}", q.limit(), crate::calendar::code(w.unit()))
            }
            Limit::WarmUp(w) => format!(
                "w:{}/{}/{}/{}/{}",
                q.limit(),
                q.period_nanos(),
                q.burst(),
                w.warmup().as_nanos(),
                w.cold_factor()
            ),
        }
    }

    /// The part of the Redis key naming this limit: 36 bits of the SHA-256
    /// of its [`descriptor`](Self::descriptor) (which names the algorithm
    /// and the exact quota), as 6 characters of URL-safe base64
    /// (`Xq3-0b`). A quota change changes the tag, and the key starts afresh
    /// (see [`key`](crate::key)).
    pub(crate) fn tag(&self) -> String {
        use sha2::{Digest, Sha256};
        const BASE64URL: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let digest = Sha256::digest(self.descriptor().as_bytes());
        let mut first = [0; 8];
        first.copy_from_slice(&digest[..8]);
        let bits = u64::from_be_bytes(first);
        (0..6)
            .map(|i| char::from(BASE64URL[((bits >> (58 - 6 * i)) & 63) as usize]))
            .collect()
    }

    /// Refuses a limit the script could not run exactly in `unit`.
    pub(crate) fn check_exact(&self, unit: Unit) -> Result<(), ConfigError> {
        let inexact = |what| ConfigError::Inexact {
            limit: self.descriptor(),
            what,
        };
        let q = self.quota();
        if u128::from(q.limit()) >= EXACT || u128::from(q.burst()) >= EXACT {
            return Err(inexact("the limit or burst is 2^53 or more"));
        }
        match self {
            Limit::Gcra(g) => {
                if 2 * u128::from(g.capacity_ticks()) >= EXACT {
                    return Err(inexact("burst × emission interval is 2^52 ticks or more"));
                }
            }
            // Unix time in clock units stays below 2^53 (server: until 2255).
            Limit::Calendar(_) => {}
            Limit::WarmUp(w) => {
                let c = w.constants();
                let period = w.warmup().as_nanos();
                if u128::from(c.t) >= EXACT || period >= EXACT {
                    return Err(inexact(
                        "the warm-up period or the period per permit is 2^53 ns or more",
                    ));
                }
                // Every permit costs at most `cold_factor` stable intervals.
                let cold = (u128::from(c.burst) * u128::from(w.cold_factor()) * u128::from(c.t))
                    .div_ceil(u128::from(c.l));
                if cold + period >= EXACT {
                    return Err(inexact(
                        "the cold cost of a burst plus the warm-up period is 2^53 ns or more",
                    ));
                }
            }
            Limit::FixedWindow(_) | Limit::SlidingWindow(_) => {
                if q.period_nanos() % unit.0 != 0 {
                    return Err(inexact(
                        "the period is not a whole number of microseconds (server time)",
                    ));
                }
                // `now + period` and `period · slots` are formed.
                let period = u128::from(q.period_nanos() / unit.0);
                let slots = match self {
                    Limit::SlidingWindow(w) => u128::from(w.slots()),
                    _ => 1,
                };
                if period >= EXACT / 2 || period * slots >= EXACT {
                    return Err(inexact("the period × slots is 2^53 clock units or more"));
                }
            }
        }
        Ok(())
    }

    /// The five script arguments of this limit (algorithm and four numbers).
    pub(crate) fn args(&self, unit: Unit) -> [String; 5] {
        let q = self.quota();
        match self {
            Limit::Gcra(g) => [
                "g".into(),
                g.scale().to_string(),
                g.interval_ticks().to_string(),
                g.capacity_ticks().to_string(),
                // m: clock units, the most with m·unit·scale ≤ 9·10^15.
                (GCRA_MODULUS / (unit.0 * g.scale())).to_string(),
            ],
            Limit::FixedWindow(_) => [
                "f".into(),
                (q.period_nanos() / unit.0).to_string(),
                q.limit().to_string(),
                "0".into(),
                "0".into(),
            ],
            Limit::Calendar(w) => [
                "c".into(),
                crate::calendar::code(w.unit()).to_string(),
                q.limit().to_string(),
                "0".into(),
                "0".into(),
            ],
            Limit::SlidingWindow(w) => [
                "s".into(),
                (q.period_nanos() / unit.0).to_string(),
                w.slots().to_string(),
                q.limit().to_string(),
                "0".into(),
            ],
            Limit::WarmUp(w) => {
                let c = w.constants();
                [
                    format!("w{}", w.cold_factor()),
                    c.burst.to_string(),
                    c.l.to_string(),
                    c.t.to_string(),
                    w.warmup().as_nanos().to_string(),
                ]
            }
        }
    }

    /// The decision from the script's four numbers for this limit:
    /// allowed, headroom, retry and reset (ticks of 1/scale ns for GCRA, ns
    /// for windows; a retry or reset of -1 is "never").
    pub(crate) fn decision(&self, raw: [i64; 4]) -> Option<Decision> {
        let [allowed, headroom, retry, reset] = raw;
        let headroom = u64::try_from(headroom).ok()?;
        // -1 is "never" (a deny-listed key, a penalty past the clock's end:
        // see `controls`).
        let never = |v: i64| {
            if v == -1 {
                Some(u64::MAX)
            } else {
                u64::try_from(v).ok()
            }
        };
        let reset = never(reset)?;
        let retry = never(retry)?;
        let (limit, remaining, scale) = match self {
            Limit::Gcra(g) => (g.capacity(), headroom / g.interval_ticks(), g.scale()),
            Limit::FixedWindow(_)
            | Limit::SlidingWindow(_)
            | Limit::Calendar(_)
            | Limit::WarmUp(_) => (self.capacity(), headroom, 1),
        };
        let nanos = |ticks: u64| {
            if ticks == u64::MAX {
                Duration::from_nanos(u64::MAX)
            } else {
                Duration::from_nanos(ticks.div_ceil(scale))
            }
        };
        Some(Decision::from_parts(
            allowed == 1,
            limit,
            remaining,
            nanos(retry),
            nanos(reset),
        ))
    }
}

/// The decision of several limits taken together, as the core's `AllOf`
/// reports it: for a denial the denying limit with the longest
/// `retry_after`, for an admission the limit with the fewest remaining; and
/// `reset_after` the largest of every limit's (the time until the whole set
/// is back to full).
pub(crate) fn binding(decisions: impl IntoIterator<Item = Decision>) -> Option<Decision> {
    let mut denial: Option<Decision> = None;
    let mut tightest: Option<Decision> = None;
    let mut reset = Duration::ZERO;
    for decision in decisions {
        reset = reset.max(decision.reset_after());
        if decision.is_denied() {
            if denial.is_none_or(|d| decision.retry_after() > d.retry_after()) {
                denial = Some(decision);
            }
        } else if tightest.is_none_or(|d| decision.remaining() < d.remaining()) {
            tightest = Some(decision);
        }
    }
    let d = denial.or(tightest)?;
    Some(Decision::from_parts(
        d.is_allowed(),
        d.limit(),
        d.remaining(),
        d.retry_after(),
        reset,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::Quota;

    #[test]
    fn several_limits_report_the_binding_one_and_the_largest_reset() {
        let ms = Duration::from_millis;
        let a = Decision::from_parts(true, 10, 3, Duration::ZERO, ms(700));
        let b = Decision::from_parts(true, 100, 90, Duration::ZERO, ms(9_000));
        let both = binding([a, b]).unwrap();
        assert_eq!((both.limit(), both.remaining()), (10, 3));
        assert_eq!(both.reset_after(), ms(9_000));
        let denied = Decision::from_parts(false, 10, 0, ms(50), ms(100));
        let d = binding([b, denied]).unwrap();
        assert!(d.is_denied());
        assert_eq!(
            (d.limit(), d.retry_after(), d.reset_after()),
            (10, ms(50), ms(9_000))
        );
    }

    #[test]
    fn tags_are_short_and_follow_the_quota() {
        let q = |n, b| Quota::per_second(n).unwrap().with_burst(b).unwrap();
        let limits: Vec<Limit> = vec![
            Gcra::new(q(10, 5)).unwrap().into(),
            Gcra::new(q(10, 6)).unwrap().into(),
            Gcra::new(q(11, 5)).unwrap().into(),
            FixedWindow::new(q(10, 10)).unwrap().into(),
            SlidingWindow::new(q(10, 10), 4).unwrap().into(),
            SlidingWindow::new(q(10, 10), 5).unwrap().into(),
        ];
        let tags: Vec<String> = limits.iter().map(Limit::tag).collect();
        for (tag, limit) in tags.iter().zip(&limits) {
            assert_eq!(tag.len(), 6);
            assert!(
                tag.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            );
            assert_eq!(*tag, limit.clone().tag(), "stable");
        }
        let distinct: std::collections::HashSet<_> = tags.iter().collect();
        assert_eq!(distinct.len(), tags.len(), "{tags:?}");
    }

    #[test]
    fn windows_on_server_time_need_whole_microseconds() {
        let q = Quota::new(5, Duration::from_nanos(1_500)).unwrap();
        let w = Limit::from(FixedWindow::new(q).unwrap());
        assert!(w.check_exact(Unit(1)).is_ok());
        assert!(matches!(
            w.check_exact(Unit(1_000)),
            Err(ConfigError::Inexact { .. })
        ));
    }

    #[test]
    fn gcra_capacity_must_stay_below_2_pow_52_ticks() {
        // 7 per day, burst 7: scale 7, capacity 7 days in 1/7 ns.
        let q = Quota::per_day(7).unwrap();
        assert!(
            Limit::from(Gcra::new(q).unwrap())
                .check_exact(Unit(1_000))
                .is_ok()
        );
        let huge = Quota::new(1, Duration::from_secs(300 * 86_400)).unwrap();
        assert!(
            Limit::from(Gcra::new(huge).unwrap())
                .check_exact(Unit(1))
                .is_err()
        );
    }
}
