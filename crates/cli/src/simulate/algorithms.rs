//! Each algorithm run on a [`ManualClock`] over the arrivals, and the bound
//! its module docs state.
//!
//! The limiter is the library's own `Limiter` with the library's
//! algorithm: the simulation decides nothing itself, it sets the clock to
//! each arrival and asks `check()`.
//!
//! Warm-up is the cold-start scenario: the limiter starts cold at the first
//! arrival, so `--algorithm gcra,warm-up --pattern steady --rate R` (R at
//! or above the quota's rate) draws the admitted rate ramping from
//! `rate / cold_factor` to the rate over the warm-up period, beside GCRA's
//! burst then rate. Its bound is GCRA's (every permit costs at least one
//! stable interval: the burst plus `limit` in any period).

use std::time::Duration;

use tollgate::{
    Algorithm, FixedWindow, Gcra, Limiter, ManualClock, Nanos, Quota, SlidingLog, SlidingWindow,
    WarmUp,
};

use crate::cli::AlgorithmName;
use crate::messages::UsageError;

/// An algorithm with its parameters, ready to run.
#[derive(Clone, Debug)]
pub enum Built {
    /// Token bucket / GCRA.
    Gcra(Gcra),
    /// Fixed window.
    FixedWindow(FixedWindow),
    /// Sliding log.
    SlidingLog(SlidingLog),
    /// Sliding window counter with its slots.
    SlidingWindow(SlidingWindow),
    /// Warm-up (Guava's `SmoothWarmingUp`).
    WarmUp(WarmUp),
}

/// The warm-up algorithm's parameters: its period and cold factor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Warm {
    /// The warm-up period.
    pub period: Duration,
    /// The cold factor (at least 1).
    pub cold_factor: u32,
}

/// What an algorithm promises about windows of length `T` (the period).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// The most admissions in any window of `T`, at any start.
    pub any_window: u64,
    /// Whether `any_window` is promised over closed windows `[t, t + T]`
    /// (GCRA: the burst at `t` and the permit earned exactly at `t + T`)
    /// rather than the half-open `[t, t + T)` the simulation measures; over
    /// those the maximum can fall short of it by one.
    pub closed: bool,
    /// The most in an aligned window (fixed window: `[kT, (k+1)T)`; sliding
    /// window: `T` starting at a slot boundary), where the algorithm
    /// promises something tighter there.
    pub aligned_window: Option<u64>,
}

impl Built {
    /// Builds `name` for `quota` (`slots` for the sliding window, `warm`
    /// for warm-up).
    pub fn new(
        name: AlgorithmName,
        quota: Quota,
        slots: u32,
        warm: Warm,
    ) -> Result<Built, UsageError> {
        let refused = |error| UsageError::Quota {
            algorithm: key(name),
            error,
        };
        Ok(match name {
            AlgorithmName::Gcra => Built::Gcra(Gcra::new(quota).map_err(refused)?),
            AlgorithmName::FixedWindow => {
                Built::FixedWindow(FixedWindow::new(quota).map_err(refused)?)
            }
            AlgorithmName::SlidingLog => {
                Built::SlidingLog(SlidingLog::new(quota).map_err(refused)?)
            }
            AlgorithmName::SlidingWindow => {
                Built::SlidingWindow(SlidingWindow::new(quota, slots).map_err(refused)?)
            }
            AlgorithmName::WarmUp => Built::WarmUp(
                WarmUp::with_cold_factor(quota, warm.period, warm.cold_factor).map_err(refused)?,
            ),
        })
    }

    /// The stated bounds, from each algorithm's module docs:
    /// GCRA `burst + rate·T = burst + limit`; fixed window `2·limit` in an
    /// unaligned window, `limit` in an aligned one; sliding log `limit`;
    /// sliding window `2·limit` in general, `limit` on slot-aligned windows.
    pub fn bounds(&self, quota: &Quota) -> Bounds {
        let limit = quota.limit();
        match self {
            Built::Gcra(_) | Built::WarmUp(_) => Bounds {
                any_window: quota.burst().saturating_add(limit),
                closed: true,
                aligned_window: None,
            },
            Built::FixedWindow(_) | Built::SlidingWindow(_) => Bounds {
                any_window: limit.saturating_mul(2),
                closed: false,
                aligned_window: Some(limit),
            },
            Built::SlidingLog(_) => Bounds {
                any_window: limit,
                closed: false,
                aligned_window: None,
            },
        }
    }

    /// Slots per period of the aligned windows: 1 for the fixed window,
    /// `n` for the sliding window, none otherwise.
    pub fn aligned_slots(&self) -> Option<u32> {
        match self {
            Built::FixedWindow(_) => Some(1),
            Built::SlidingWindow(wheel) => Some(wheel.slots()),
            Built::Gcra(_) | Built::SlidingLog(_) | Built::WarmUp(_) => None,
        }
    }

    /// The admitted instants among `arrivals` (sorted, nanoseconds), each
    /// arrival asking for one permit at its instant.
    pub fn admissions(&self, arrivals: &[u64]) -> Vec<u64> {
        match self {
            Built::Gcra(algorithm) => admit(algorithm.clone(), arrivals),
            Built::FixedWindow(algorithm) => admit(algorithm.clone(), arrivals),
            Built::SlidingLog(algorithm) => admit(algorithm.clone(), arrivals),
            Built::SlidingWindow(algorithm) => admit(algorithm.clone(), arrivals),
            Built::WarmUp(algorithm) => admit(algorithm.clone(), arrivals),
        }
    }
}

fn admit<A: Algorithm>(algorithm: A, arrivals: &[u64]) -> Vec<u64> {
    let clock = ManualClock::new();
    let limiter = Limiter::with_clock(algorithm, clock.clone());
    arrivals
        .iter()
        .copied()
        .filter(|&at| {
            clock.set(Nanos::new(at));
            limiter.check().is_allowed()
        })
        .collect()
}

/// The name shown in tables and panels.
pub fn title(name: AlgorithmName, slots: u32) -> String {
    match name {
        AlgorithmName::Gcra => "token bucket (GCRA)".to_owned(),
        AlgorithmName::FixedWindow => "fixed window".to_owned(),
        AlgorithmName::SlidingLog => "sliding log".to_owned(),
        AlgorithmName::SlidingWindow => format!("sliding window ({slots} slots)"),
        AlgorithmName::WarmUp => "warm-up (from cold)".to_owned(),
    }
}

/// The name on the command line and in JSON.
pub fn key(name: AlgorithmName) -> &'static str {
    match name {
        AlgorithmName::Gcra => "gcra",
        AlgorithmName::FixedWindow => "fixed-window",
        AlgorithmName::SlidingLog => "sliding-log",
        AlgorithmName::SlidingWindow => "sliding-window",
        AlgorithmName::WarmUp => "warm-up",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WARM: Warm = Warm {
        period: Duration::from_secs(4),
        cold_factor: 3,
    };

    #[test]
    fn each_algorithm_decides_through_the_library() {
        let quota = Quota::per_second(2).unwrap();
        // Three at 0.9 s, three at 1.1 s.
        let arrivals = [
            900_000_000,
            900_000_000,
            900_000_000,
            1_100_000_000,
            1_100_000_000,
            1_100_000_000,
        ];
        let count = |name| {
            Built::new(name, quota, 2, WARM)
                .unwrap()
                .admissions(&arrivals)
                .len()
        };
        // The fixed window admits two on each side of the boundary at 1 s.
        assert_eq!(count(AlgorithmName::FixedWindow), 4);
        // The sliding log admits two in any second.
        assert_eq!(count(AlgorithmName::SlidingLog), 2);
        // GCRA: the burst of 2, then 0.2 s refills 0.4 permit: nothing more.
        assert_eq!(count(AlgorithmName::Gcra), 2);
        // Warm-up, cold: the first at once, the next after its cold cost
        // (1.375 s at 2 per second with a 4 s warm-up): one.
        assert_eq!(count(AlgorithmName::WarmUp), 1);
    }

    /// The cold-start scenario: steady arrivals at twice the rate from
    /// cold. GCRA admits its burst then the rate from the start; warm-up
    /// admits a third of the rate at first and the rate once warm (Guava's
    /// table: 1.375, 1.125, 0.875, 0.625 s apart, then 0.5 s).
    #[test]
    fn warm_up_ramps_from_cold_where_gcra_does_not() {
        let quota = Quota::per_second(2).unwrap();
        let arrivals: Vec<u64> = (0..40).map(|i| i * 250_000_000).collect();
        let run = |name| {
            Built::new(name, quota, 2, WARM)
                .unwrap()
                .admissions(&arrivals)
        };
        let (gcra, warm) = (run(AlgorithmName::Gcra), run(AlgorithmName::WarmUp));
        let in_first_2s =
            |admitted: &[u64]| admitted.iter().filter(|&&t| t < 2_000_000_000).count();
        assert_eq!(in_first_2s(&gcra), 5, "{gcra:?}");
        assert_eq!(in_first_2s(&warm), 2, "{warm:?}");
        // Each cost (1.375, 1.125, 0.875, 0.625 s, then 0.5 s) waited out to
        // the next arrival (every 0.25 s); warm, one every 0.5 s, as GCRA.
        let gaps: Vec<u64> = warm.windows(2).map(|w| w[1] - w[0]).collect();
        let ms = |v: &[u64]| v.iter().map(|g| g / 1_000_000).collect::<Vec<_>>();
        assert_eq!(ms(&gaps[..5]), [1_500, 1_250, 1_000, 750, 750]);
        assert!(gaps[5..].iter().all(|&g| g == 500_000_000), "{gaps:?}");
    }

    #[test]
    fn a_quota_an_algorithm_refuses_is_a_usage_error() {
        let quota = Quota::per_second(2).unwrap();
        assert!(matches!(
            Built::new(AlgorithmName::SlidingWindow, quota, 0, WARM),
            Err(UsageError::Quota {
                algorithm: "sliding-window",
                ..
            })
        ));
    }
}
