//! The adaptive limit: TCP Vegas applied to concurrency, as Netflix's
//! concurrency-limits does it (`com.netflix.concurrency.limits.limit.VegasLimit`,
//! <https://github.com/Netflix/concurrency-limits>).
//!
//! # The algorithm
//!
//! Every finished permit is a sample: its round-trip time `rtt` (from
//! acquire to drop, on the limiter's clock) and the slots in flight when it
//! started. The controller keeps `rtt_noload`, the smallest `rtt` seen, as
//! the latency of an unloaded service, and estimates the queue the service
//! holds as
//!
//! ```text
//! queue = ⌈limit · (1 − rtt_noload / rtt)⌉
//! ```
//!
//! (with `limit` requests in flight and latency `rtt`, a service that
//! serves `limit · rtt_noload / rtt` of them at its unloaded speed queues
//! the rest). With `l = max(1, ⌊log10 limit⌋)`, `alpha = 3·l`, `beta = 6·l`
//! and `threshold = l`, each sample moves the limit:
//!
//! | condition | new limit |
//! |---|---|
//! | the permit was marked dropped (overload, timeout) | `limit − l` |
//! | fewer than `limit / 2` were in flight at its start (the limit is not what holds the caller back) | unchanged |
//! | `queue ≤ threshold` | `limit + beta` |
//! | `queue < alpha` | `limit + l` |
//! | `queue > beta` | `limit − l` |
//! | otherwise | unchanged |
//!
//! then clamped to `[min, max]` and smoothed:
//! `limit ← (1 − smoothing)·limit + smoothing·new`. So the limit climbs
//! while latency stays at the unloaded level, and settles where the service
//! holds `alpha` to `beta` requests in its queue: just past the knee of the
//! latency curve. When the service slows (its knee moves down), `rtt`
//! rises, the estimated queue grows past `beta` and the limit backs off.
//!
//! A sample smaller than `rtt_noload` only lowers `rtt_noload`. Every
//! `probe_multiplier · limit` samples, `rtt_noload` is reset to the current
//! sample (the *probe*), so that a service that became uniformly slower is
//! re-measured instead of being read as a queue forever. Netflix multiplies
//! the probe interval by a random jitter in `[0.5, 1]`; here it is fixed at
//! 1 so that the controller is deterministic.
//!
//! # Parameters and defaults
//!
//! | parameter | default (Netflix's) |
//! |---|---|
//! | `initial` | 20 |
//! | `min` | 1 |
//! | `max` | 1,000 |
//! | `smoothing` | 1.0 (no smoothing) |
//! | `probe_multiplier` | 30 |
//!
//! # Cost
//!
//! A controller is a small mutex taken once per finished permit of an
//! adaptive limiter (never by a fixed one), after the permit's slots are
//! released.

use std::fmt;
use std::sync::Arc as StdArc;

use super::config::{ConfigError, MAX_LIMIT};
use crate::clock::{Clock, Nanos};
use crate::sync::{Mutex, lock};

/// The parameters of the Vegas controller; see the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Vegas {
    initial: u32,
    min: u32,
    max: u32,
    smoothing: f64,
    probe_multiplier: u32,
}

impl Default for Vegas {
    fn default() -> Vegas {
        Vegas {
            initial: 20,
            min: 1,
            max: 1_000,
            smoothing: 1.0,
            probe_multiplier: 30,
        }
    }
}

impl Vegas {
    /// Netflix's defaults (see the [module docs](self)).
    pub fn new() -> Vegas {
        Vegas::default()
    }

    /// The limit before any sample. By default, 20.
    pub fn initial(mut self, initial: u32) -> Vegas {
        self.initial = initial;
        self
    }

    /// The lowest limit. By default, 1.
    pub fn min(mut self, min: u32) -> Vegas {
        self.min = min;
        self
    }

    /// The highest limit. By default, 1,000.
    pub fn max(mut self, max: u32) -> Vegas {
        self.max = max;
        self
    }

    /// The weight of each new estimate, in `(0, 1]` (values outside are
    /// clamped into it). By default, 1.0: no smoothing.
    pub fn smoothing(mut self, smoothing: f64) -> Vegas {
        self.smoothing = if smoothing.is_nan() {
            1.0
        } else {
            smoothing.clamp(f64::MIN_POSITIVE, 1.0)
        };
        self
    }

    /// How many samples, in multiples of the limit, between resets of the
    /// unloaded latency (at least 1). By default, 30.
    pub fn probe_multiplier(mut self, probe_multiplier: u32) -> Vegas {
        self.probe_multiplier = probe_multiplier.max(1);
        self
    }

    /// The starting limit.
    pub fn initial_limit(&self) -> u32 {
        self.initial
    }

    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        let Vegas {
            initial, min, max, ..
        } = *self;
        if min == 0 || min > initial || initial > max || max > MAX_LIMIT {
            return Err(ConfigError::AdaptiveBounds { min, initial, max });
        }
        Ok(())
    }

    /// A fresh controller state.
    pub fn start(&self) -> VegasState {
        VegasState {
            params: *self,
            estimated: self.initial as f64,
            rtt_noload: 0,
            probe_count: 0,
        }
    }
}

/// A Vegas controller's state: the pure transition the limiter stores
/// behind a mutex, public so that a simulation can drive it directly.
#[derive(Clone, Debug)]
pub struct VegasState {
    params: Vegas,
    estimated: f64,
    /// The smallest rtt seen since the last probe (ns); 0 before any.
    rtt_noload: u64,
    probe_count: u64,
}

/// `max(1, ⌊log10 x⌋)`, Netflix's `Log10RootFunction`.
fn log10(x: f64) -> f64 {
    x.log10().floor().max(1.0)
}

impl VegasState {
    /// The limit now.
    pub fn limit(&self) -> u32 {
        self.estimated as u32
    }

    /// The unloaded latency the controller measures against.
    pub fn rtt_noload(&self) -> Nanos {
        Nanos::new(self.rtt_noload)
    }

    /// Feeds one sample: a request that started with `in_flight` slots in
    /// use (its own included) and took `rtt` ns; `dropped` if it failed by
    /// overload. Returns the limit after.
    pub fn update(&mut self, rtt: u64, in_flight: u32, dropped: bool) -> u32 {
        let rtt = rtt.max(1);
        self.probe_count += 1;
        let probe_every = self.params.probe_multiplier as u64 * self.limit().max(1) as u64;
        if self.probe_count > probe_every {
            self.probe_count = 0;
            self.rtt_noload = rtt;
            return self.limit();
        }
        if self.rtt_noload == 0 || rtt < self.rtt_noload {
            self.rtt_noload = rtt;
            return self.limit();
        }
        let estimated = self.estimated;
        let queue = (estimated * (1.0 - self.rtt_noload as f64 / rtt as f64)).ceil();
        let l = log10(estimated);
        let (alpha, beta, threshold) = (3.0 * l, 6.0 * l, l);
        let new = if dropped {
            estimated - l
        } else if (in_flight as f64) * 2.0 < estimated {
            return self.limit();
        } else if queue <= threshold {
            estimated + beta
        } else if queue < alpha {
            estimated + l
        } else if queue > beta {
            estimated - l
        } else {
            return self.limit();
        };
        let new = new.clamp(self.params.min as f64, self.params.max as f64);
        let smoothing = self.params.smoothing;
        self.estimated = (1.0 - smoothing) * estimated + smoothing * new;
        self.limit()
    }
}

/// A permit's sample in the making: when it started and the slots then in
/// flight (its own included).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    pub(crate) started: Nanos,
    pub(crate) in_flight: u32,
}

/// A limit's controller: the clock it measures with and the state.
pub(crate) struct Adaptive {
    clock: StdArc<dyn Clock>,
    state: Mutex<VegasState>,
}

impl fmt::Debug for Adaptive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Adaptive").finish_non_exhaustive()
    }
}

// A panic while the state's mutex is held leaves a valid state (each update
// is computed, then written), and the lock recovers from poisoning; the clock
// is only read. So a limiter stays usable across `catch_unwind`.
impl std::panic::UnwindSafe for Adaptive {}
impl std::panic::RefUnwindSafe for Adaptive {}

impl Adaptive {
    pub(crate) fn new(vegas: &Vegas, clock: StdArc<dyn Clock>) -> Adaptive {
        Adaptive {
            clock,
            state: Mutex::new(vegas.start()),
        }
    }

    pub(crate) fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// Feeds a finished sample; `Some(limit)` if the limit changed.
    pub(crate) fn on_sample(&self, sample: Sample, now: Nanos, dropped: bool) -> Option<u32> {
        let rtt = now.as_u64().saturating_sub(sample.started.as_u64());
        let mut state = lock(&self.state);
        let before = state.limit();
        let after = state.update(rtt, sample.in_flight, dropped);
        (after != before).then_some(after)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn no_queue_raises_fast_and_a_queue_lowers() {
        let mut state = Vegas::new().start();
        assert_eq!(
            state.update(10, 20, false),
            20,
            "the first sample sets rtt_noload"
        );
        // Same latency: no queue, +beta (6 at log10 20 → 1).
        assert_eq!(state.update(10, 20, false), 26);
        // Double latency: queue = 26·(1 − 1/2) = 13 > beta: −1.
        assert_eq!(state.update(20, 26, false), 25);
        // Few in flight: the limit is not the bottleneck, unchanged.
        assert_eq!(state.update(10, 3, false), 25);
        // A drop backs off whatever the latency.
        assert_eq!(state.update(10, 25, true), 24);
    }

    #[test]
    fn bounds_are_checked() {
        assert!(Vegas::new().check().is_ok());
        assert!(Vegas::new().min(0).check().is_err());
        assert!(Vegas::new().min(30).check().is_err());
        assert!(Vegas::new().max(10).check().is_err());
        let mut state = Vegas::new().initial(2).min(2).max(3).start();
        state.update(10, 2, false);
        assert_eq!(state.update(10, 2, false), 3, "clamped to max");
    }
}
