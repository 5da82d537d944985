//! The default adaptive limit: [`Knee`], which finds the knee of a
//! service (the concurrency past which requests queue instead of being
//! served) from its *throughput*, by Little's law, and so survives
//! service-time variance that a latency controller reads as a queue.
//!
//! # Why not the fastest sample
//!
//! A delay-based controller (TCP Vegas, Netflix's Vegas and Gradient,
//! Envoy's gradient controller, BBR's `RTprop`) compares the latency under
//! load with an *unloaded* latency. Taken as the fastest sample (Vegas,
//! BBR) or a low percentile of a few samples (Envoy: the median of 50 at a
//! concurrency of 3), the unloaded latency is the service's *fastest*
//! time, not its usual one: when service times vary (exponential,
//! long-tailed, bimodal), every request reads as queued, the queue
//! estimate is the spread of service times, and the limit collapses (the
//! issue 28 table: with exponential service times, Vegas shed 91–96 % of
//! the load of a healthy service).
//!
//! # The estimate
//!
//! With `N` requests in flight on average, completing at a rate `X`, Little's
//! law says each spends `N / X` in the service. If the service's **mean**
//! service time is `S` (not its fastest), the requests *being served* are
//!
//! ```text
//! busy = X · S          (≤ N; the other N − busy wait in a queue)
//! ```
//!
//! Below the knee `busy = N` (nothing waits); past it `busy` stops growing:
//! it is the knee itself (the service's workers), however much the service
//! times vary, because `X` and `S` are both averages. The limit is then
//! set just past it:
//!
//! ```text
//! limit = ⌈ max(busy · (1 + headroom), busy + min_headroom) ⌉
//! ```
//!
//! a small queue (10 %, at least 2 requests, by default) that keeps every
//! worker fed between arrivals. The least queue is one request instead of
//! two when the limit was full in the window (the mean in flight within
//! 0.6 of the limit): demand is then far past the limit, a freed worker is
//! refilled at once, and one queued request is enough. By M/M/c/N, at a
//! knee of 10 with arrivals at 3× capacity, one queued request keeps 98.6 %
//! of the goodput and the limit sits 0.47 above the mean in flight; at
//! 1.5× two are needed (95.5 %), and the gap is 1.49. With a full limit
//! the knee is `busy` *rounded* (plus one): the workers are then busy all
//! but ~1 % of the time, so `busy` sits a hair under the knee and its
//! noise falls on either side; `⌈busy⌉ + 1` queued a second request (1.4×
//! a knee of 5) whenever it read a hair above.
//!
//! When nothing queued while at least half the limit was in use, the limit
//! also climbs 10 % from itself: with priority shares the in flight stays
//! under the limit, and a limit set from the in flight alone would never
//! pass the knee. "Nothing queued" is `busy ≥ u · N` with `u` 0.95 less
//! three relative standard errors of the probed `S` (at least 0.85): a
//! probe that read `S` 10 % low makes every unqueued window look 10 %
//! queued, and with `u` fixed at 0.95 the limit then followed the in
//! flight down to a fraction of the knee until the next probe (the table
//! had cells at 23–55 % goodput). Below the knee the target is 10 % above
//! the in flight, so the limit climbs by 10 % a window until `busy` stops
//! following it; past the knee it falls to the knee in one window.
//!
//! **Windows.** `X`, `N` and `busy` are measured over a window of at least
//! [`Knee::window_samples`] samples and two mean service times (or 20 mean
//! service times with at least 16 samples, so that a small limit is not
//! stuck waiting for samples), and `busy` is smoothed across windows
//! (weight 1/2), so that the noise of a few completions does not move the
//! limit.
//!
//! **The probe** measures `S`: the limit drops to half its value (below the
//! knee when the limit sits at most 1.25× past it, so nothing waits), and
//! the mean latency of [`Knee::probe_samples`] requests that started under
//! it is a sample of `S`. Not the first that answer: those are the fastest
//! (a mean over them read a lognormal service as 40 % faster than it is,
//! and the limit fell with each probe). The probe takes the requests that
//! started at least 20 mean service times before its end (a cohort chosen
//! by start, all but a negligible tail of it answered). Its standard error is computed
//! from the same samples, and a probe goes on past `probe_samples` until
//! that error is 3 % of the mean (up to four times the samples, and for at
//! most a second past the first `probe_samples`): a long-tailed service
//! needs more samples for the same precision (lognormal σ = 1: 1,900), and
//! the second bounds what a small knee pays for them. A probe that agrees with the current `S` (within
//! three standard errors) is averaged into it (up to four probes), one
//! that does not replaces it (the service's speed changed). A probe runs
//! at the start and every [`Knee::probe_interval`].
//!
//! # The band it holds, and under which assumptions
//!
//! In `tollgate simulate --concurrency --table` (the table is in
//! `BENCHMARKS.md`) (a service of `K` workers,
//! FIFO, mean 10 ms, open-loop Poisson arrivals at 1.5× capacity, service
//! times constant, uniform ±10 % and ±25 %, exponential, lognormal σ = 1,
//! bimodal; `K` from 10 to 400, halved over the middle third of the run),
//! the median in flight settles within `[K, 1.25 K]` and the goodput at
//! ≥ 95 % of capacity (see `BENCHMARKS.md`). That holds when
//!
//! - the service times have a finite mean that does not depend on the load
//!   (a service that slows as load grows has its knee where its throughput
//!   stops growing, which is what `busy` finds);
//! - the load between probes is not a different service (a sudden uniform
//!   slowdown is read as a lower knee until the next probe, at most
//!   `probe_interval` later: the limit falls, it does not collapse, and
//!   climbs back at 10 % a window);
//! - no probe falls inside a burst of slow requests (one that does reads
//!   the slow service as the usual one, and the limit sits above the knee
//!   until the next probe, `probe_interval` later);
//! - the knee is at least 10, or demand is far past it (at a knee of 5
//!   with arrivals at 1.5× its capacity, no limit meets both targets: by
//!   M/M/c/N a limit of 6 keeps 89 % of the goodput, and 95 % needs 8,
//!   1.6× the knee);
//! - the probes read the mean service time within a few percent: at a
//!   knee of 10 one request is 10 %, and a probe at half a small limit
//!   times few requests in its second (3.5–6 % of standard error for
//!   exponential to bimodal services). A probe that reads high puts the
//!   limit a request or two past the band; one that reads low, under the
//!   knee until the next probe. Over 16 seeds of the table (480 cells),
//!   29 miss: 15 at K = 10 and 7 at K = 20 (goodput 89–95 %, or a median
//!   of 1.3 K), 7 at K ≥ 40 (a median of 1.26–1.27 K, or a third at
//!   0.90–0.99 K with goodput 91–96 %); none under 89 % (see
//!   `BENCHMARKS.md`);
//! - the limit is what holds the callers back (a caller who sends fewer
//!   than the knee never reveals it: the limit stays between 1.1× and 2×
//!   what is in flight).
//!
//! # Parameters and their sources
//!
//! | parameter | default | source |
//! |---|---|---|
//! | `initial` | 20 | Netflix's `initialLimit` |
//! | `min` / `max` | 1 / 1,000 | Netflix's Vegas bounds; Envoy's `max_concurrency_limit` 1,000 |
//! | `headroom` | 10 %, at least 2 (1 when the limit is full) | chosen: the smallest queue that keeps goodput ≥ 95 % at a knee of 10 with arrivals at 1.5× (a gap between arrivals leaves a worker idle), by M/M/c/N; one request when demand is far past the limit (98.6 % at 3×) |
//! | `window_samples` | 256 | chosen: the throughput of 256 exponential completions is within ±6 % (one standard error) |
//! | `probe_samples` | 500 | chosen: the mean of 500 lognormal (σ = 1) service times is within ±6 %; Envoy times 50 (its `request_count`), enough for a median, not a mean |
//! | probe precision | 3 %, ≤ 4× `probe_samples`, ≤ 1 s more | chosen: one standard error of 3 % keeps `busy` within a request at a knee of 20 most of the time; the caps bound a probe at half the limit to ≤ 5 % of the interval |
//! | "nothing queued" | `busy ≥ (0.95 − 3 σ_S) N`, ≥ 0.85 | chosen on the table's 16 seeds: 0.88 and 0.90 floors miss more cells (37, 43 of 480 against 29); 0.95 alone let a low probe collapse the limit |
//! | `probe_interval` | 20 s | Envoy's `min_rtt_calc_params.interval` example is 60 s; shorter here because a probe at half the limit costs little |
//! | probe limit | half the limit | Envoy pins 3 (`min_concurrency`); half keeps most of the throughput and still sits below a knee the limit passes by at most 25 % |
//!
//! # Decisions
//!
//! - **Determinism.** Envoy jitters its probe's start (15 %); here the
//!   interval is fixed, so that the controller is a pure function of its
//!   samples and a simulation on a manual clock replays exactly.
//! - **A dropped request** (overload, timeout) lowers the smoothed `busy`
//!   by 10 % at once, as a loss does a TCP window.
//! - **Requests costing more than half the limit** are refused during a
//!   probe, as under any limit below their cost.

use crate::clock::Nanos;

/// The parameters of the [knee-finding controller](self), the default
/// adaptive limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Knee {
    pub(crate) initial: u32,
    pub(crate) min: u32,
    pub(crate) max: u32,
    headroom: f64,
    window_samples: u32,
    probe_samples: u32,
    probe_interval: Nanos,
}

impl Default for Knee {
    fn default() -> Knee {
        Knee {
            initial: 20,
            min: 1,
            max: 1_000,
            headroom: 0.1,
            window_samples: 256,
            probe_samples: 500,
            probe_interval: Nanos::new(20_000_000_000),
        }
    }
}

impl Knee {
    /// The defaults (see the [module docs](self)).
    pub fn new() -> Knee {
        Knee::default()
    }

    /// The limit before any sample. By default, 20.
    pub fn initial(mut self, initial: u32) -> Knee {
        self.initial = initial;
        self
    }

    /// The lowest limit. By default, 1.
    pub fn min(mut self, min: u32) -> Knee {
        self.min = min;
        self
    }

    /// The highest limit. By default, 1,000.
    pub fn max(mut self, max: u32) -> Knee {
        self.max = max;
        self
    }

    /// The queue the limit leaves past the knee, as a share of the knee
    /// (at least 2 requests), clamped to `[0, 1]`. By default, 0.1.
    pub fn headroom(mut self, headroom: f64) -> Knee {
        self.headroom = if headroom.is_nan() {
            0.1
        } else {
            headroom.clamp(0.0, 1.0)
        };
        self
    }

    /// The fewest samples in a window (at least 1). By default, 256.
    pub fn window_samples(mut self, samples: u32) -> Knee {
        self.window_samples = samples.max(1);
        self
    }

    /// The requests a probe times (at least 1). By default, 500.
    pub fn probe_samples(mut self, samples: u32) -> Knee {
        self.probe_samples = samples.max(1);
        self
    }

    /// The time between probes of the mean service time. By default, 20 s.
    pub fn probe_interval(mut self, interval: std::time::Duration) -> Knee {
        self.probe_interval = Nanos::new(u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX));
        self
    }

    /// A fresh controller state.
    pub fn start(&self) -> KneeState {
        let limit = self.initial.clamp(self.min.max(1), self.max.max(1));
        KneeState {
            params: *self,
            limit,
            busy: None,
            service: None,
            window: Window::default(),
            probe: Some(Probe::new(0, limit, self.min)),
            last_probe: 0,
        }
    }
}

/// The samples of the window in progress.
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    /// When it started (ns).
    started: u64,
    samples: u64,
    in_flight_sum: u64,
    dropped: bool,
}

/// A probe of the mean service time in progress.
#[derive(Clone, Debug)]
struct Probe {
    /// When it started (ns): only requests started since are timed.
    started: u64,
    /// The limit while it runs, and the limit to return to.
    limit: u32,
    before: u32,
    /// `(started, rtt)` of the requests timed so far, in completion order.
    timed: Vec<(u64, u64)>,
}

/// How many mean service times a probe waits for the slowest request of
/// its cohort: the first answers are the fastest, and a mean over them
/// alone reads a long-tailed service as faster than it is.
const HORIZON: f64 = 20.0;

/// The relative standard error a probe aims at.
const PRECISION: f64 = 0.03;

/// How many times `probe_samples` a probe may time to reach `PRECISION`.
const MORE_SAMPLES: u64 = 4;

/// How long a probe may go on to reach `PRECISION` (ns).
const LONGEST: u64 = 1_000_000_000;

impl Probe {
    fn new(started: u64, before: u32, min: u32) -> Probe {
        Probe {
            started,
            limit: (before / 2).max(min).max(1),
            before,
            timed: Vec::new(),
        }
    }

    /// The cohort's mean, standard error and size, once `samples` requests
    /// that started at least `HORIZON` mean service times ago (by `guess`,
    /// or the mean so far) have answered; `None` before.
    fn cohort(&self, now: u64, samples: u32, guess: Option<f64>) -> Option<(f64, f64, u64)> {
        let n = self.timed.len() as f64;
        let so_far = self.timed.iter().map(|&(_, rtt)| rtt as f64).sum::<f64>() / n.max(1.0);
        let horizon = HORIZON * guess.unwrap_or(so_far).max(so_far);
        let cut = (now as f64 - horizon).max(0.0) as u64;
        let (mut count, mut sum, mut squares) = (0_u64, 0.0, 0.0);
        for &(started, rtt) in &self.timed {
            if started < cut {
                let rtt = rtt as f64;
                count += 1;
                sum += rtt;
                squares += rtt * rtt;
            }
        }
        if count < u64::from(samples) {
            return None;
        }
        let n = count as f64;
        let mean = sum / n;
        let variance = (squares / n - mean * mean).max(0.0);
        let error = (variance / n).sqrt();
        // A long-tailed service needs more samples for the same precision:
        // go on until the mean is known within PRECISION (one standard
        // error), for at most MORE_SAMPLES times the samples.
        let longest = self.started + LONGEST;
        if error > PRECISION * mean && count < MORE_SAMPLES * u64::from(samples) && now < longest {
            return None;
        }
        Some((mean, error, count))
    }
}

/// The mean service time, and how well it is known.
#[derive(Clone, Copy, Debug)]
struct Service {
    mean: f64,
    /// The standard error of `mean`.
    error: f64,
    /// Probes averaged into it (at most 4).
    probes: u32,
}

/// A [`Knee`] controller's state: the pure transition the limiter stores
/// behind a mutex, public so that a simulation can drive it directly.
#[derive(Clone, Debug)]
pub struct KneeState {
    params: Knee,
    limit: u32,
    /// The smoothed requests in service; `None` before the first window.
    busy: Option<f64>,
    service: Option<Service>,
    window: Window,
    probe: Option<Probe>,
    /// When the last probe ended (ns).
    last_probe: u64,
}

impl KneeState {
    /// The limit now: the learnt one, or the probe's while one runs.
    pub fn limit(&self) -> u32 {
        match &self.probe {
            Some(probe) => probe.limit,
            None => self.limit,
        }
    }

    /// Whether a probe of the mean service time is running.
    pub fn probing(&self) -> bool {
        self.probe.is_some()
    }

    /// The mean service time measured by the probes; `None` before the
    /// first probe ends.
    pub fn service_time(&self) -> Option<Nanos> {
        self.service.map(|service| Nanos::new(service.mean as u64))
    }

    /// The smoothed requests in service (the knee, once the limit binds);
    /// `None` before the first window ends.
    pub fn busy(&self) -> Option<f64> {
        self.busy
    }

    /// Feeds one sample: a request that started at `started` with
    /// `in_flight` slots in use (its own included) and finished at `now`;
    /// `dropped` if it failed by overload. Returns the limit after.
    pub fn update(&mut self, started: Nanos, now: Nanos, in_flight: u32, dropped: bool) -> u32 {
        let (started, now) = (started.as_u64(), now.as_u64());
        let rtt = now.saturating_sub(started).max(1) as f64;
        if let Some(probe) = &mut self.probe {
            // Only a request admitted under the probe's limit ran below the knee.
            if started >= probe.started && in_flight <= probe.limit {
                probe.timed.push((started, rtt as u64));
                let samples = self.params.probe_samples;
                // The cohort is looked at every 64 answers: linear in the
                // answers, not quadratic.
                if probe.timed.len() >= samples as usize && probe.timed.len() % 64 == 0 {
                    let guess = self.service.map(|service| service.mean);
                    if let Some(cohort) = probe.cohort(now, samples, guess) {
                        let before = probe.before;
                        self.end_probe(cohort, before, now);
                    }
                }
            }
            return self.limit();
        }
        if now.saturating_sub(self.last_probe) >= self.params.probe_interval.as_u64() {
            self.probe = Some(Probe::new(now, self.limit, self.params.min));
            return self.limit();
        }
        let window = &mut self.window;
        window.samples += 1;
        window.in_flight_sum += u64::from(in_flight);
        window.dropped |= dropped;
        let Some(service) = self.service else {
            return self.limit;
        };
        let elapsed = now.saturating_sub(window.started) as f64;
        let long_enough = (window.samples >= u64::from(self.params.window_samples)
            && elapsed >= 2.0 * service.mean)
            || (window.samples >= 16 && elapsed >= 20.0 * service.mean);
        if !long_enough || started < window.started {
            return self.limit;
        }
        let window = std::mem::replace(
            &mut self.window,
            Window {
                started: now,
                ..Window::default()
            },
        );
        self.adjust(&window, elapsed, service);
        self.limit
    }

    /// Folds a finished probe into the mean service time.
    fn end_probe(&mut self, (mean, error, _): (f64, f64, u64), before: u32, now: u64) {
        self.service = Some(match self.service {
            Some(old) if (mean - old.mean).abs() <= 3.0 * (error.hypot(old.error)) => {
                // The same service: average, weighting each probe alike.
                let probes = f64::from(old.probes);
                Service {
                    mean: (old.mean * probes + mean) / (probes + 1.0),
                    error: (old.error * probes + error) / (probes + 1.0),
                    probes: (old.probes + 1).min(4),
                }
            }
            _ => Service {
                mean,
                error,
                probes: 1,
            },
        });
        self.limit = before;
        self.probe = None;
        self.last_probe = now;
        self.window = Window {
            started: now,
            ..Window::default()
        };
    }

    /// Sets the limit from a finished window.
    fn adjust(&mut self, window: &Window, elapsed: f64, service: Service) {
        let (service, relative_error) = (service.mean, service.error / service.mean.max(1.0));
        let samples = window.samples.max(1) as f64;
        let in_flight = window.in_flight_sum as f64 / samples;
        // Little's law: completions per ns times the mean service time.
        let busy = (samples / elapsed.max(1.0) * service).min(in_flight);
        let mut smoothed = match self.busy {
            Some(old) => 0.5 * old + 0.5 * busy,
            None => busy,
        };
        if window.dropped {
            smoothed *= 0.9;
        }
        self.busy = Some(smoothed);
        let limit = f64::from(self.limit);
        // A full limit (demand far past it) refills a freed worker at once:
        // one queued request keeps it fed (see "The estimate"). Its knee is
        // then `busy` rounded: the workers are busy all but ~1 % of the
        // time, so `busy` sits just under the knee and its noise is as
        // likely above it as below, where `⌈busy⌉ + 1` would add a second
        // queued request whenever it read a hair above.
        let least = if limit - in_flight < 0.6 {
            smoothed.round() + 1.0
        } else {
            smoothed + 2.0
        };
        let mut target = (smoothed * (1.0 + self.params.headroom)).max(least);
        // Nothing queued while at least half the limit was used: the knee
        // is above, whatever holds the in flight back (priority shares
        // keep default and sheddable work under the limit): climb from the
        // limit, not from the in flight. "Nothing" within 5 % and three
        // standard errors of the probed service time (at most 15 %): a
        // probe that read low makes every unqueued window look 5–15 %
        // queued, and a stricter rule let the limit follow it down.
        let unqueued = (0.95 - 3.0 * relative_error).max(0.85);
        if busy >= unqueued * in_flight && in_flight >= 0.5 * limit {
            target = target
                .max(limit * (1.0 + self.params.headroom))
                .max(limit + 1.0);
        }
        let (min, max) = (self.params.min.max(1), self.params.max.max(1));
        self.limit = (target.ceil() as u32).clamp(min, max.max(min));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Feeds `n` requests, one every `gap` ns from `at`, each taking `rtt`
    /// ns with `in_flight` in flight; returns the time after.
    fn feed(state: &mut KneeState, at: u64, n: u64, gap: u64, rtt: u64, in_flight: u32) -> u64 {
        let mut now = at;
        for _ in 0..n {
            state.update(Nanos::new(now), Nanos::new(now + rtt), in_flight, false);
            now += gap;
        }
        now
    }

    /// Feeds requests started every ms, alternating `short` and `long` ms,
    /// *in the order they answer* (the short ones first), until the probe
    /// ends; returns the time after.
    fn probe_with(state: &mut KneeState, now: u64, short: u64, long: u64) -> u64 {
        probe_every(state, now, MS, short * MS, long * MS).0
    }

    /// As [`probe_with`], one request every `gap` ns, times in ns; returns
    /// the time after and the answers the probe took.
    fn probe_every(
        state: &mut KneeState,
        mut now: u64,
        gap: u64,
        short: u64,
        long: u64,
    ) -> (u64, u64) {
        let mut pending: Vec<(u64, u64)> = Vec::new();
        let (mut i, mut answers) = (0, 0);
        while state.probing() {
            let rtt = if i % 2 == 0 { short } else { long };
            pending.push((now, now + rtt));
            pending.sort_by_key(|&(_, end)| std::cmp::Reverse(end));
            while state.probing() && pending.last().is_some_and(|&(_, end)| end <= now) {
                let (started, end) = pending.pop().unwrap();
                state.update(Nanos::new(started), Nanos::new(end), 1, false);
                answers += 1;
            }
            now += gap;
            i += 1;
            assert!(i < 1_000_000, "the probe never ended");
        }
        (now, answers)
    }

    /// Runs the first probe on a service of mean 10 ms (5 and 15).
    fn probed() -> (KneeState, u64) {
        let mut state = Knee::new().start();
        assert!(state.probing());
        assert_eq!(
            state.limit(),
            10,
            "the first probe runs at half the initial 20"
        );
        let now = probe_with(&mut state, 0, 5, 15);
        assert_eq!(state.limit(), 20, "back to the limit before the probe");
        (state, now + 20 * MS)
    }

    fn assert_service(state: &KneeState, mean_ms: f64) {
        let got = state.service_time().unwrap().as_u64() as f64 / MS as f64;
        assert!(
            (got - mean_ms).abs() < 0.1,
            "service time {got} ms, not {mean_ms}"
        );
    }

    #[test]
    fn the_probe_measures_the_mean_service_time_not_the_fastest() {
        let (state, _) = probed();
        assert_service(&state, 10.0);
    }

    #[test]
    fn a_long_tailed_probe_times_more_requests_for_the_same_precision_up_to_a_second() {
        // 10 ms each: the mean is exact after the 500 samples.
        let mut state = Knee::new().start();
        let (_, answers) = probe_every(&mut state, 0, MS / 10, 10 * MS, 10 * MS);
        assert!(answers <= 3_000, "{answers}");
        // 1 ms and 19 ms alternately, one every 0.5 ms (a coefficient of
        // variation of 0.9): 500 samples leave a standard error of 4 %; the
        // probe goes on to 3 %, 900 samples of its cohort by start (which
        // lags the answers by 20 mean service times, 400 answers).
        let mut state = Knee::new().start();
        let (_, answers) = probe_every(&mut state, 0, MS / 2, MS, 19 * MS);
        assert!(answers >= 1_250, "{answers}");
        assert_service(&state, 10.0);
        // 1 ms and 99 ms (a coefficient of variation of 0.98), one every
        // ms: 3 % needs 1,070 samples of a cohort that lags by 1 s (2.1 s);
        // the cap ends it at the first 500 after its first second (1.5 s).
        let mut state = Knee::new().start();
        let (now, _) = probe_every(&mut state, 0, MS, MS, 99 * MS);
        assert!(now <= 1_600 * MS, "{now}");
    }

    #[test]
    fn the_probe_waits_for_the_slow_half_of_its_cohort() {
        // 1 ms and 99 ms alternately: the first 500 answers are nearly all
        // the 1 ms ones (a mean of a few ms); the cohort by start is 50 ms.
        let mut state = Knee::new().start();
        probe_with(&mut state, 0, 1, 99);
        assert_service(&state, 50.0);
    }

    #[test]
    fn below_the_knee_the_limit_climbs_by_its_headroom() {
        let (mut state, mut now) = probed();
        // 20 in flight of 10 ms each answer at 2 per ms: busy = 20 = in
        // flight, nothing queues: the limit climbs 10 % (at least 2, and
        // from itself) every window, however far it passes the in flight.
        let mut limits = vec![state.limit()];
        for _ in 0..4 {
            now = feed(&mut state, now, 256, MS / 2, 10 * MS, 20);
            limits.push(state.limit());
        }
        // (The first window opens 20 ms before its first answer: it reads
        // a little under 20 in service.)
        assert!(limits[1..].windows(2).all(|w| w[1] > w[0]), "{limits:?}");
        assert!(limits[4] >= 25, "{limits:?}");
        // Callers that send 10 at most: the limit falls back, and stays
        // within twice what is in flight (it climbs only while at least
        // half of it is used).
        for _ in 0..8 {
            now = feed(&mut state, now, 256, MS, 10 * MS, 10);
            assert!(state.limit() <= 22, "{}", state.limit());
        }
    }

    #[test]
    fn past_the_knee_the_limit_falls_to_it_whatever_the_latency_spread() {
        let (mut state, mut now) = probed();
        // 60 in flight, but completions at the rate of 40 workers of 10 ms
        // (4 per ms): busy = 40, whatever latencies the requests report.
        for _ in 0..6 {
            now = feed(&mut state, now, 400, MS / 4, 15 * MS, 60) + MS;
        }
        let busy = state.busy().unwrap();
        assert!((39.0..=41.0).contains(&busy), "busy {busy}");
        assert!(
            (44..=46).contains(&state.limit()),
            "the knee of 40 and 10 %: {}",
            state.limit()
        );
    }

    #[test]
    fn a_full_limit_keeps_one_request_queued_and_a_gapped_one_two() {
        // A knee of 5 workers of 10 ms (0.5 answers per ms). With the
        // limit always full (in flight = limit), one queued request is
        // enough: the limit settles at 6, 1.2× the knee.
        let (mut state, mut now) = probed();
        for _ in 0..12 {
            let limit = state.limit();
            now = feed(&mut state, now, 256, 2 * MS, 10 * MS, limit);
        }
        assert_eq!(state.limit(), 6, "busy {:?}", state.busy());
        // The same knee with the in flight a whole request under the limit
        // on average (arrivals leave gaps): two queued, a limit of 7.
        for _ in 0..12 {
            let limit = state.limit();
            now = feed(&mut state, now, 256, 2 * MS, 10 * MS, limit - 1);
        }
        assert_eq!(state.limit(), 7, "busy {:?}", state.busy());
    }

    #[test]
    fn a_full_limit_rounds_the_knee_so_that_busy_a_hair_above_it_queues_one() {
        // A knee of 5 read 3 % high (busy 5.15): still one queued request
        // (⌈5.15⌉ + 1 would be 7, two queued, 1.4× the knee).
        let (mut state, mut now) = probed();
        for _ in 0..12 {
            let limit = state.limit();
            now = feed(&mut state, now, 256, 1_941_748, 10 * MS, limit);
        }
        let busy = state.busy().unwrap();
        assert!((5.1..5.2).contains(&busy), "busy {busy}");
        assert_eq!(state.limit(), 6);
    }

    #[test]
    fn an_unqueued_limit_climbs_even_when_the_probe_read_the_service_low() {
        // The probe reads 9 ms (1 ms and 17 ms: a standard error of ~3 %);
        // the service takes 10. 20 in flight answer at 2 per ms: nothing
        // queues, but busy reads 18, 10 % under the in flight. Within three
        // standard errors that is "nothing queued": the limit climbs
        // (a rule of 5 % held it at 20, and a lower reading let it fall).
        let mut state = Knee::new().start();
        let mut now = probe_with(&mut state, 0, 1, 17) + 20 * MS;
        assert_service(&state, 9.0);
        let first = state.limit();
        for _ in 0..8 {
            now = feed(&mut state, now, 256, MS / 2, 10 * MS, first);
        }
        assert!(state.limit() >= first + 4, "{first} → {}", state.limit());
    }

    #[test]
    fn a_probe_runs_every_interval_and_a_changed_service_replaces_the_mean() {
        let (mut state, mut now) = probed();
        let mut before = state.limit();
        while !state.probing() {
            before = state.limit();
            now = feed(&mut state, now, 1, MS / 2, 10 * MS, 20);
        }
        assert!(now >= 20_000 * MS, "not before the interval: {now}");
        assert_eq!(state.limit(), before / 2, "half the limit");
        // The service is now 20 ms: a mean 3 standard errors away replaces
        // the old one instead of being averaged with it.
        probe_with(&mut state, now + 50 * MS, 10, 30);
        assert_service(&state, 20.0);
    }

    #[test]
    fn requests_started_before_the_probe_or_above_its_limit_are_not_timed() {
        let mut state = Knee::new().probe_samples(64).start();
        // Started before the probe (at 0, the probe started at 0: same
        // instant counts) but above its limit of 10: not timed.
        for i in 0..200 {
            state.update(Nanos::new(i * MS), Nanos::new(i * MS + 90 * MS), 11, false);
        }
        assert!(state.probing());
        let mut now = 200 * MS;
        while state.probing() {
            state.update(Nanos::new(now), Nanos::new(now + 10 * MS), 3, false);
            now += MS;
        }
        assert_service(&state, 10.0);
    }

    #[test]
    fn a_drop_lowers_the_smoothed_busy_by_a_tenth_and_bounds_hold() {
        let (mut state, mut now) = probed();
        for _ in 0..4 {
            now = feed(&mut state, now, 256, MS / 2, 10 * MS, 20);
        }
        let busy = state.busy().unwrap();
        now = feed(&mut state, now, 255, MS / 2, 10 * MS, 20);
        state.update(Nanos::new(now), Nanos::new(now + 10 * MS), 20, true);
        let after = state.busy().unwrap();
        assert!((after - busy * 0.9).abs() < 1.0, "{busy} → {after}");
        let small = Knee::new().initial(5).min(4).max(6).start();
        assert_eq!(small.limit(), 4, "half of 5 is below min");
    }
}
