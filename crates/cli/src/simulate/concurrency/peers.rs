//! Models of the peers' adaptive controllers, run in the same simulation
//! as the library's: each is a function of the same samples (a request's
//! start, its end, the slots in flight when it started, whether it was
//! dropped) to a limit, written from the peers' published algorithms and
//! defaults (read, not copied):
//!
//! - [`NetflixVegas`]: Netflix concurrency-limits `VegasLimit` (initial 20,
//!   `alpha = 3·log10(limit)`, `beta = 6·log10(limit)`, `threshold =
//!   log10(limit)`, smoothing 1.0, probe every `30 · limit` samples, which
//!   resets `rtt_noload` to the current sample). An update per sample.
//! - [`Gradient2`]: Netflix `Gradient2Limit` (initial 20, smoothing 0.2,
//!   queue size 4, `rttTolerance` 1.5, long window 600 samples with a
//!   warm-up of 10, the long average decayed by 5 % while it is more than
//!   twice the short one; no change while fewer than half the limit are in
//!   flight). An update per sample.
//! - [`EnvoyGradient`]: Envoy's adaptive-concurrency gradient controller
//!   (`concurrency_update_interval` 100 ms, `sample_aggregate_percentile`
//!   p50, minRTT as the p50 of `request_count` 50 requests at
//!   `min_concurrency` 3 every `interval` 60 s (the docs' example) and when
//!   the limit sat at its minimum for 5 windows, `buffer` 25 %,
//!   `gradient = clamp((minRTT + buffer) / sampleRTT, 0.5, 2)`, `limit =
//!   gradient · limit + √(gradient · limit)`, `max_concurrency_limit`
//!   1,000).
//! - [`Bbr`]: TCP BBR's estimates applied to concurrency (Cardwell et al.,
//!   *BBR: Congestion-Based Congestion Control*, 2016): `BtlBw` the most
//!   completions per second over the last 10 rounds, `RTprop` the fastest
//!   latency over 10 s (ProbeRTT: 4 in flight for 200 ms once it is 10 s
//!   old), `limit = cwnd_gain 2 · BtlBw · RTprop`, at least 4.
//!
//! Every model runs with the bounds 1 to 1,000 (Gradient2's own defaults,
//! 20 to 200, would decide the table at a knee of 10 and 400 by
//! themselves), and without the peers' random jitter (the simulation is
//! deterministic).

use tollgate::Nanos;
use tollgate::concurrency::{KneeState, VegasState};

/// An adaptive controller as the simulation drives it.
pub trait Control {
    /// The limit now.
    fn limit(&self) -> u32;
    /// Feeds one finished request (times in ns).
    fn update(&mut self, started: u64, now: u64, in_flight: u32, dropped: bool);
}

impl Control for KneeState {
    fn limit(&self) -> u32 {
        KneeState::limit(self)
    }
    fn update(&mut self, started: u64, now: u64, in_flight: u32, dropped: bool) {
        KneeState::update(
            self,
            Nanos::new(started),
            Nanos::new(now),
            in_flight,
            dropped,
        );
    }
}

impl Control for VegasState {
    fn limit(&self) -> u32 {
        VegasState::limit(self)
    }
    fn update(&mut self, started: u64, now: u64, in_flight: u32, dropped: bool) {
        VegasState::update(
            self,
            Nanos::new(started),
            Nanos::new(now),
            in_flight,
            dropped,
        );
    }
}

const MAX: f64 = 1_000.0;

fn log10(x: f64) -> f64 {
    x.log10().floor().max(1.0)
}

/// Netflix's `VegasLimit`, updated on every sample.
#[derive(Debug)]
pub struct NetflixVegas {
    limit: f64,
    rtt_noload: u64,
    probe_count: u64,
}

impl NetflixVegas {
    pub fn new() -> NetflixVegas {
        NetflixVegas {
            limit: 20.0,
            rtt_noload: 0,
            probe_count: 0,
        }
    }
}

impl Control for NetflixVegas {
    fn limit(&self) -> u32 {
        self.limit as u32
    }

    fn update(&mut self, started: u64, now: u64, in_flight: u32, dropped: bool) {
        let rtt = now.saturating_sub(started).max(1);
        self.probe_count += 1;
        if self.probe_count as f64 >= 30.0 * self.limit {
            self.probe_count = 0;
            self.rtt_noload = rtt;
            return;
        }
        if self.rtt_noload == 0 || rtt < self.rtt_noload {
            self.rtt_noload = rtt;
            return;
        }
        let l = log10(self.limit);
        let new = if dropped {
            self.limit - l
        } else if f64::from(in_flight) * 2.0 < self.limit {
            return;
        } else {
            let queue = (self.limit * (1.0 - self.rtt_noload as f64 / rtt as f64)).ceil();
            if queue <= l {
                self.limit + 6.0 * l
            } else if queue < 3.0 * l {
                self.limit + l
            } else if queue > 6.0 * l {
                self.limit - l
            } else {
                return;
            }
        };
        self.limit = new.clamp(1.0, MAX);
    }
}

/// Netflix's `Gradient2Limit`, updated on every sample.
#[derive(Debug)]
pub struct Gradient2 {
    limit: f64,
    long_rtt: f64,
    long_count: u32,
}

impl Gradient2 {
    pub fn new() -> Gradient2 {
        Gradient2 {
            limit: 20.0,
            long_rtt: 0.0,
            long_count: 0,
        }
    }
}

impl Control for Gradient2 {
    fn limit(&self) -> u32 {
        self.limit as u32
    }

    fn update(&mut self, started: u64, now: u64, in_flight: u32, _dropped: bool) {
        let short = now.saturating_sub(started).max(1) as f64;
        // ExpAvgMeasurement(600, warm-up 10): a plain mean while warming up.
        if self.long_count < 10 {
            self.long_count += 1;
            self.long_rtt += (short - self.long_rtt) / f64::from(self.long_count);
        } else {
            let factor = 2.0 / 601.0;
            self.long_rtt = self.long_rtt * (1.0 - factor) + short * factor;
        }
        if self.long_rtt / short > 2.0 {
            self.long_rtt *= 0.95;
        }
        if f64::from(in_flight) < self.limit / 2.0 {
            return;
        }
        let gradient = (1.5 * self.long_rtt / short).clamp(0.5, 1.0);
        let new = self.limit * gradient + 4.0;
        let new = self.limit * 0.8 + new * 0.2;
        self.limit = new.clamp(1.0, MAX);
    }
}

/// Envoy's gradient controller.
#[derive(Debug)]
pub struct EnvoyGradient {
    limit: f64,
    min_rtt: f64,
    /// Latencies of the window (or of the minRTT probe) in progress.
    samples: Vec<u64>,
    window_start: u64,
    /// Some(start) while measuring minRTT at 3.
    probe: Option<u64>,
    last_probe: u64,
    at_min: u32,
}

impl EnvoyGradient {
    pub fn new() -> EnvoyGradient {
        EnvoyGradient {
            limit: 3.0,
            min_rtt: 0.0,
            samples: Vec::new(),
            window_start: 0,
            probe: Some(0),
            last_probe: 0,
            at_min: 0,
        }
    }

    fn p50(samples: &mut [u64]) -> f64 {
        samples.sort_unstable();
        samples[samples.len() / 2] as f64
    }
}

impl Control for EnvoyGradient {
    fn limit(&self) -> u32 {
        if self.probe.is_some() {
            3
        } else {
            self.limit as u32
        }
    }

    fn update(&mut self, started: u64, now: u64, _in_flight: u32, _dropped: bool) {
        let rtt = now.saturating_sub(started).max(1);
        if let Some(probe) = self.probe {
            if started >= probe {
                self.samples.push(rtt);
                if self.samples.len() >= 50 {
                    self.min_rtt = EnvoyGradient::p50(&mut self.samples);
                    self.samples.clear();
                    self.probe = None;
                    self.last_probe = now;
                    self.window_start = now;
                }
            }
            return;
        }
        self.samples.push(rtt);
        if now.saturating_sub(self.window_start) < 100_000_000 {
            return;
        }
        let sample_rtt = EnvoyGradient::p50(&mut self.samples);
        self.samples.clear();
        self.window_start = now;
        let gradient = (self.min_rtt * 1.25 / sample_rtt).clamp(0.5, 2.0);
        let limit = gradient * self.limit;
        self.limit = (limit + limit.sqrt()).clamp(3.0, MAX);
        self.at_min = if self.limit as u32 <= 3 {
            self.at_min + 1
        } else {
            0
        };
        if now.saturating_sub(self.last_probe) >= 60_000_000_000 || self.at_min >= 5 {
            self.at_min = 0;
            self.probe = Some(now);
        }
    }
}

/// TCP BBR's model, in requests.
#[derive(Debug)]
pub struct Bbr {
    limit: f64,
    /// Completions per ns of the last 10 rounds.
    rates: Vec<f64>,
    round_start: u64,
    round_samples: u64,
    rt_prop: u64,
    rt_prop_at: u64,
    /// Some(end) while in ProbeRTT.
    probe_rtt: Option<u64>,
}

impl Bbr {
    pub fn new() -> Bbr {
        Bbr {
            limit: 20.0,
            rates: Vec::new(),
            round_start: 0,
            round_samples: 0,
            rt_prop: u64::MAX,
            rt_prop_at: 0,
            probe_rtt: None,
        }
    }
}

impl Control for Bbr {
    fn limit(&self) -> u32 {
        if self.probe_rtt.is_some() {
            4
        } else {
            self.limit as u32
        }
    }

    fn update(&mut self, started: u64, now: u64, _in_flight: u32, _dropped: bool) {
        let rtt = now.saturating_sub(started).max(1);
        if rtt <= self.rt_prop {
            self.rt_prop = rtt;
            self.rt_prop_at = now;
        }
        if let Some(end) = self.probe_rtt {
            if now >= end {
                self.probe_rtt = None;
                self.rt_prop_at = now;
            }
            return;
        }
        if now.saturating_sub(self.rt_prop_at) > 10_000_000_000 {
            // ProbeRTT: the minimum is stale; measure it again at 4.
            self.rt_prop = rtt;
            self.probe_rtt = Some(now + 200_000_000);
            return;
        }
        self.round_samples += 1;
        if started < self.round_start {
            return;
        }
        let elapsed = now.saturating_sub(self.round_start).max(1);
        self.rates.push(self.round_samples as f64 / elapsed as f64);
        if self.rates.len() > 10 {
            self.rates.remove(0);
        }
        self.round_start = now;
        self.round_samples = 0;
        let btl_bw = self.rates.iter().copied().fold(0.0, f64::max);
        self.limit = (2.0 * btl_bw * self.rt_prop as f64).clamp(4.0, MAX);
    }
}
