//! The adaptive limits: [`Controller`] picks one ([`Knee`], the default,
//! in [`knee`](super::knee); or [`Vegas`], below), and the machinery that
//! feeds a limit's finished permits to it.
//!
//! # Vegas
//!
//! TCP Vegas applied to concurrency, after Netflix's concurrency-limits
//! (`VegasLimit`), with TCP Vegas's one adjustment per round trip and slow
//! start, and Envoy's way of re-measuring the unloaded latency. Each
//! finished permit is a sample: its round trip `rtt` (acquire to drop, on
//! the limiter's clock) and the slots in flight when it started;
//! `rtt_noload` is the smallest `rtt` seen. Once per **round** (the samples
//! of requests started since the last adjustment) the service's queue is
//! read as
//!
//! ```text
//! queue = ⌈in_flight · (1 − rtt_noload / rtt)⌉
//! ```
//!
//! and, with `l = max(1, ⌊log10 limit⌋)`, `alpha = 3·l`, `beta = 6·l`
//! (Netflix's functions), the limit falls by `l` on a drop or a queue above
//! `beta`, rises by `l` under `alpha` (by `beta` in slow start), else stays;
//! then it is clamped to `[min, max]` and smoothed. Every
//! `probe_multiplier · limit` samples a **probe** drops the limit to
//! `probe_limit` to re-measure `rtt_noload`. No jitter: the controller is a
//! pure function of its samples.
//!
//! **What it holds.** The limit settles where the service queues `alpha`
//! to `beta` requests, just past the knee of its latency curve, when
//! service times barely vary; it reads any spread of service times as a
//! queue (with exponential ones it sheds most of a healthy service's
//! load), which is why [`Knee`] is the default.
//!
//! | parameter | default | from |
//! |---|---|---|
//! | [`initial`](Vegas::initial) | 20 | Netflix's |
//! | [`min`](Vegas::min) / [`max`](Vegas::max) | 1 / 1,000 | Netflix's |
//! | [`smoothing`](Vegas::smoothing) | 1.0: none | Netflix's |
//! | [`probe_multiplier`](Vegas::probe_multiplier) | 30 | Netflix's |
//! | [`probe_limit`](Vegas::probe_limit) | 3 | Envoy's `min_concurrency` |
//!
//! Each rule of a round in full, where it departs from Netflix's and
//! Envoy's controllers and why (with the simulation's figures):
//! `crates/core/docs/vegas.md`.
//!
//! # Cost
//!
//! A controller is a small mutex taken once per finished permit of an
//! adaptive limiter (never by a fixed one), after its slots are released.
//!
//! # Example
//!
//! ```
//! use tollgate::concurrency::{ConcurrencyLimiter, Vegas};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = ConcurrencyLimiter::builder(20)
//!     .adaptive(Vegas::new().probe_limit(5))
//!     .build()?;
//! assert_eq!(limiter.limit(), 20); // Vegas's `initial` until the first round
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::Arc as StdArc;

use super::config::{ConfigError, MAX_LIMIT};
use super::knee::{Knee, KneeState};
use crate::clock::{Clock, Nanos};
use crate::sync::{Mutex, lock};

/// The parameters of the Vegas controller; see the [module docs](self).
///
/// Vegas reads any spread of latency as a queue: it holds the knee only
/// when service times barely vary (constant, or within a few per cent);
/// with exponential or long-tailed service times it sheds most of a
/// healthy service's load. [`Knee`] is the default for that reason.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Vegas {
    initial: u32,
    min: u32,
    max: u32,
    smoothing: f64,
    probe_multiplier: u32,
    probe_limit: u32,
}

impl Default for Vegas {
    fn default() -> Vegas {
        Vegas {
            initial: 20,
            min: 1,
            max: 1_000,
            smoothing: 1.0,
            probe_multiplier: 30,
            probe_limit: 3,
        }
    }
}

impl Vegas {
    /// The defaults (see the [module docs](self)).
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

    /// How many samples, in multiples of the limit, between probes of the
    /// unloaded latency (at least 1). By default, 30.
    pub fn probe_multiplier(mut self, probe_multiplier: u32) -> Vegas {
        self.probe_multiplier = probe_multiplier.max(1);
        self
    }

    /// The limit while a probe measures the unloaded latency, and the
    /// number of requests it times (at least 1; the probe never raises the
    /// limit above its value before the probe). By default, 3.
    ///
    /// While a probe runs, a request costing more slots than this is
    /// refused with [`Reason::Cost`](super::Reason::Cost), as under any
    /// limit below its cost: a caller whose requests take several slots
    /// sets it to at least the largest cost.
    pub fn probe_limit(mut self, probe_limit: u32) -> Vegas {
        self.probe_limit = probe_limit.max(1);
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
            slow_start: true,
            round: Round::default(),
            probe: None,
        }
    }
}

/// The samples of the round in progress.
#[derive(Clone, Copy, Debug, Default)]
struct Round {
    /// When it started: samples of requests started before measured an
    /// older limit (ns).
    started: u64,
    samples: u64,
    rtt_sum: u128,
    in_flight_sum: u64,
    in_flight_max: u32,
    dropped: bool,
}

/// A probe of the unloaded latency in progress.
#[derive(Clone, Copy, Debug)]
struct Probe {
    /// When it started (ns): only requests started since are timed.
    started: u64,
    /// Requests timed so far, and the smallest latency among them.
    timed: u32,
    fastest: u64,
}

/// A Vegas controller's state: the pure transition the limiter stores
/// behind a mutex, public so that a simulation can drive it directly.
#[derive(Clone, Debug)]
pub struct VegasState {
    params: Vegas,
    estimated: f64,
    /// The smallest rtt seen since the last probe (ns); 0 before any.
    rtt_noload: u64,
    /// Samples since the last probe.
    probe_count: u64,
    slow_start: bool,
    round: Round,
    probe: Option<Probe>,
}

/// `max(1, ⌊log10 x⌋)`, Netflix's `Log10RootFunction`.
fn log10(x: f64) -> f64 {
    x.log10().floor().max(1.0)
}

impl VegasState {
    /// The limit now: the learnt one, or the probe's while one runs.
    pub fn limit(&self) -> u32 {
        let learnt = self.estimated as u32;
        match self.probe {
            Some(_) => self.params.probe_limit.min(learnt),
            None => learnt,
        }
    }

    /// The unloaded latency the controller measures against.
    pub fn rtt_noload(&self) -> Nanos {
        Nanos::new(self.rtt_noload)
    }

    /// Whether a probe of the unloaded latency is running.
    pub fn probing(&self) -> bool {
        self.probe.is_some()
    }

    /// Feeds one sample: a request that started at `started` with
    /// `in_flight` slots in use (its own included) and finished at `now`;
    /// `dropped` if it failed by overload. Returns the limit after.
    pub fn update(&mut self, started: Nanos, now: Nanos, in_flight: u32, dropped: bool) -> u32 {
        let (started, now) = (started.as_u64(), now.as_u64());
        let rtt = now.saturating_sub(started).max(1);
        if let Some(probe) = &mut self.probe {
            // Only a request admitted under the probe's limit ran unloaded.
            if started >= probe.started && in_flight <= self.params.probe_limit {
                probe.timed += 1;
                probe.fastest = probe.fastest.min(rtt);
                if probe.timed >= self.params.probe_limit {
                    self.rtt_noload = probe.fastest;
                    self.probe = None;
                    self.probe_count = 0;
                    self.round = Round {
                        started: now,
                        ..Round::default()
                    };
                }
            }
            return self.limit();
        }
        self.probe_count = self.probe_count.saturating_add(1);
        if self.rtt_noload == 0 || rtt < self.rtt_noload {
            self.rtt_noload = rtt;
        }
        let round = &mut self.round;
        // Saturating: a round that outlived 2^64 samples must not panic.
        round.samples = round.samples.saturating_add(1);
        round.rtt_sum = round.rtt_sum.saturating_add(u128::from(rtt));
        round.in_flight_sum = round.in_flight_sum.saturating_add(u64::from(in_flight));
        round.in_flight_max = round.in_flight_max.max(in_flight);
        round.dropped |= dropped;
        if started < round.started {
            // This request saw an older limit: the round goes on.
            return self.limit();
        }
        let round = std::mem::replace(
            &mut self.round,
            Round {
                started: now,
                ..Round::default()
            },
        );
        let probe_every = self.params.probe_multiplier as u64 * self.limit().max(1) as u64;
        if self.probe_count >= probe_every {
            self.probe = Some(Probe {
                started: now,
                timed: 0,
                fastest: u64::MAX,
            });
            return self.limit();
        }
        self.adjust(&round);
        self.limit()
    }

    /// Moves the learnt limit once, from a finished round.
    fn adjust(&mut self, round: &Round) {
        let samples = round.samples.max(1) as f64;
        let rtt = round.rtt_sum as f64 / samples;
        let in_flight = round.in_flight_sum as f64 / samples;
        let queue = (in_flight * (1.0 - self.rtt_noload as f64 / rtt)).ceil();
        let estimated = self.estimated;
        let l = log10(estimated);
        let (alpha, beta, threshold) = (3.0 * l, 6.0 * l, l);
        if queue > threshold {
            self.slow_start = false;
        }
        let new = if round.dropped || queue > beta {
            estimated - l
        } else if f64::from(round.in_flight_max) * 2.0 < estimated {
            return;
        } else if queue <= threshold && self.slow_start {
            estimated + beta
        } else if queue < alpha {
            estimated + l
        } else {
            return;
        };
        let new = new.clamp(self.params.min as f64, self.params.max as f64);
        let smoothing = self.params.smoothing;
        self.estimated = (1.0 - smoothing) * estimated + smoothing * new;
    }
}

/// Which adaptive controller a limit runs, and its parameters: the
/// argument of the builders' `adaptive`. [`Knee`] by default (the one that
/// holds the knee when service times vary, see
/// [`knee`](super::knee)); [`Vegas`] when named.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Controller {
    /// Throughput-based: Little's law against the probed mean service time.
    Knee(Knee),
    /// Delay-based: TCP Vegas once per round trip (this module).
    Vegas(Vegas),
}

impl Default for Controller {
    fn default() -> Controller {
        Controller::Knee(Knee::default())
    }
}

impl From<Vegas> for Controller {
    fn from(vegas: Vegas) -> Controller {
        Controller::Vegas(vegas)
    }
}

impl From<Knee> for Controller {
    fn from(knee: Knee) -> Controller {
        Controller::Knee(knee)
    }
}

impl Controller {
    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        match self {
            Controller::Vegas(vegas) => vegas.check(),
            Controller::Knee(knee) => {
                let Knee {
                    initial, min, max, ..
                } = *knee;
                if min == 0 || min > initial || initial > max || max > MAX_LIMIT {
                    return Err(ConfigError::AdaptiveBounds { min, initial, max });
                }
                Ok(())
            }
        }
    }

    /// The starting limit.
    pub fn initial_limit(&self) -> u32 {
        match self {
            Controller::Vegas(vegas) => vegas.initial_limit(),
            Controller::Knee(knee) => knee.start().limit(),
        }
    }
}

/// A running controller's state.
#[derive(Clone, Debug)]
enum State {
    Knee(KneeState),
    Vegas(VegasState),
}

impl State {
    fn limit(&self) -> u32 {
        match self {
            State::Knee(state) => state.limit(),
            State::Vegas(state) => state.limit(),
        }
    }

    fn update(&mut self, started: Nanos, now: Nanos, in_flight: u32, dropped: bool) -> u32 {
        match self {
            State::Knee(state) => state.update(started, now, in_flight, dropped),
            State::Vegas(state) => state.update(started, now, in_flight, dropped),
        }
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
    state: Mutex<State>,
}

impl fmt::Debug for Adaptive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Adaptive").finish_non_exhaustive()
    }
}

// No update panics (its sums saturate), a panic of the clock happens before
// the state's mutex is taken, and the lock recovers from poisoning; the clock
// is only read. So a limiter stays usable across `catch_unwind`.
impl std::panic::UnwindSafe for Adaptive {}
impl std::panic::RefUnwindSafe for Adaptive {}

impl Adaptive {
    pub(crate) fn new(controller: &Controller, clock: StdArc<dyn Clock>) -> Adaptive {
        let state = match controller {
            Controller::Knee(knee) => State::Knee(knee.start()),
            Controller::Vegas(vegas) => State::Vegas(vegas.start()),
        };
        Adaptive {
            clock,
            state: Mutex::new(state),
        }
    }

    pub(crate) fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// Feeds a finished sample; `Some(limit)` if the limit changed.
    pub(crate) fn on_sample(&self, sample: Sample, now: Nanos, dropped: bool) -> Option<u32> {
        let mut state = lock(&self.state);
        let before = state.limit();
        let after = state.update(sample.started, now, sample.in_flight, dropped);
        (after != before).then_some(after)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A sample of a request started at `started` ms that took `rtt` ms.
    fn feed(state: &mut VegasState, started: u64, rtt: u64, in_flight: u32) -> u32 {
        let ms = 1_000_000;
        state.update(
            Nanos::new(started * ms),
            Nanos::new((started + rtt) * ms),
            in_flight,
            false,
        )
    }

    #[test]
    fn a_round_moves_the_limit_once_however_many_samples_it_holds() {
        // Netflix's update moved the limit on every sample, each reporting
        // a limit set a round trip earlier: the limit overshot the knee.
        let mut state = Vegas::new().start();
        assert_eq!(
            feed(&mut state, 0, 10, 20),
            26,
            "no queue, slow start: +beta"
        );
        // The round started at 10 ms: requests started before it saw the
        // old limit and only join the round.
        for started in 1..10 {
            assert_eq!(feed(&mut state, started, 10, 20), 26);
        }
        // The first request started since closes the round: one step.
        assert_eq!(feed(&mut state, 10, 10, 26), 32);
    }

    #[test]
    fn slow_start_ends_at_the_first_queue_then_steps_are_one_log() {
        let mut state = Vegas::new().start();
        assert_eq!(feed(&mut state, 0, 10, 20), 26);
        // 26 in flight at 12 ms: queue ⌈26·(1 − 10/12)⌉ = 5, within
        // [alpha, beta]: unchanged, and slow start is over.
        assert_eq!(feed(&mut state, 10, 12, 26), 26);
        // No queue again, but slow start is over: +l, not +beta.
        assert_eq!(feed(&mut state, 22, 10, 26), 27);
    }

    #[test]
    fn a_queue_past_beta_lowers_and_a_drop_lowers() {
        let mut state = Vegas::new().start();
        assert_eq!(feed(&mut state, 0, 10, 20), 26);
        // Double latency with 26 in flight: queue 13 > beta: −1.
        assert_eq!(feed(&mut state, 10, 20, 26), 25);
        // Few in flight and no queue: the limit is not the bottleneck.
        assert_eq!(feed(&mut state, 30, 10, 3), 25);
        // A drop backs off whatever the latency.
        let ms = 1_000_000;
        let (started, now) = (Nanos::new(40 * ms), Nanos::new(50 * ms));
        assert_eq!(state.update(started, now, 25, true), 24);
    }

    #[test]
    fn the_probe_lowers_the_limit_and_measures_an_unloaded_rtt() {
        // Netflix's probe took the current sample as the unloaded latency;
        // under load that sample is loaded, and the limit ratcheted up.
        let mut state = Vegas::new().probe_multiplier(1).start();
        assert_eq!(feed(&mut state, 0, 10, 20), 26);
        assert_eq!(state.rtt_noload(), Nanos::new(10_000_000));
        let mut at = 10;
        // Loaded rounds: 26 in flight at 12 ms (queue 5: unchanged) until
        // 26 samples have passed since the start.
        while !state.probing() {
            for started in at..at + 11 {
                feed(&mut state, started, 12, 26);
            }
            at += 12;
            feed(&mut state, at, 12, 26);
        }
        assert_eq!(state.limit(), 3, "the probe runs at probe_limit");
        // The service is now uniformly slower (15 ms unloaded). Requests
        // started before the probe, or with more than 3 in flight, do not
        // count.
        assert_eq!(feed(&mut state, at - 1, 30, 26), 3);
        assert_eq!(feed(&mut state, at + 40, 15, 4), 3);
        assert_eq!(feed(&mut state, at + 50, 16, 1), 3);
        assert_eq!(feed(&mut state, at + 50, 15, 2), 3);
        assert!(state.probing());
        assert_eq!(feed(&mut state, at + 50, 17, 3), 26, "back to the limit");
        assert!(!state.probing());
        assert_eq!(
            state.rtt_noload(),
            Nanos::new(15_000_000),
            "the fastest unloaded request, not a loaded sample, and not the old minimum"
        );
    }

    #[test]
    fn the_probe_never_raises_a_limit_below_it() {
        let mut state = Vegas::new()
            .initial(2)
            .min(1)
            .max(2)
            .probe_multiplier(1)
            .start();
        feed(&mut state, 0, 10, 2);
        feed(&mut state, 10, 10, 2);
        feed(&mut state, 20, 10, 2);
        assert!(state.probing());
        assert_eq!(state.limit(), 2);
    }

    #[test]
    fn bounds_are_checked() {
        assert!(Vegas::new().check().is_ok());
        assert!(Vegas::new().min(0).check().is_err());
        assert!(Vegas::new().min(30).check().is_err());
        assert!(Vegas::new().max(10).check().is_err());
        let mut state = Vegas::new().initial(2).min(2).max(3).start();
        feed(&mut state, 0, 10, 2);
        assert_eq!(feed(&mut state, 10, 10, 2), 3, "clamped to max");
    }
}
