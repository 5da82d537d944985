//! The default adaptive limit: [`Knee`] finds the knee of a service (the
//! concurrency past which requests queue instead of being served) from its
//! *throughput*, by Little's law, and holds the limit just past it.
//!
//! # The model
//!
//! With `N` requests in flight on average, completing at a rate `X`, and
//! the service's probed **mean** service time `S`, the requests being
//! served, and the limit, are
//!
//! ```text
//! busy  = X · S                                        (≤ N; N − busy wait)
//! limit = ⌈ max(busy · (1 + headroom), busy + least) ⌉
//! ```
//!
//! Below the knee `busy = N`; past it `busy` stops growing at the knee,
//! however much the service times vary, because `X` and `S` are both
//! means (a controller that compares latency with the *fastest* sample,
//! as [`Vegas`](super::Vegas) does, reads that spread as a queue).
//!
//! `X`, `N` and `busy` are measured over windows of samples; when nothing
//! queued the limit climbs 10 % a window, past the knee it falls to the
//! knee in one. **Probes** measure `S`: the limit drops (to half, then to
//! just under `busy`) and the mean latency of the requests started under it
//! is a sample of `S`; between probes, requests that met a free worker are
//! samples too. A dropped request (overload, timeout) lowers `busy` by
//! 10 % at once. No jitter: the controller is a pure function of its
//! samples, and a simulation on a manual clock replays exactly.
//!
//! # Guarantee
//!
//! In `tollgate simulate --concurrency --table` (`K` workers, FIFO, mean
//! 10 ms, Poisson arrivals at 1.5× capacity, six service-time shapes,
//! `K` from 10 to 400), the median in flight settles within `[K, 1.25 K]`
//! with goodput ≥ 95 % of capacity: 938 of 960 cells over 32 seeds, every
//! cell at `K ≥ 40`. That holds when the service times have a finite mean
//! that does not depend on the load, no probe falls inside a burst of slow
//! requests, the knee is at least 10 (or demand far past it), and the limit
//! is what holds the callers back. Outside those, it errs on shedding: a
//! uniform slowdown reads as a lower knee until the next probe, never as
//! zero.
//!
//! # Parameters
//!
//! | parameter | default | from |
//! |---|---|---|
//! | [`initial`](Knee::initial) | 20 | Netflix's `initialLimit` |
//! | [`min`](Knee::min) / [`max`](Knee::max) | 1 / 1,000 | Netflix's Vegas bounds; Envoy's `max_concurrency_limit` |
//! | [`headroom`](Knee::headroom) | 10 %, at least 2.5 requests (1 when full) | the least queue keeping ≥ 95 % goodput at a knee of 10 |
//! | [`window_samples`](Knee::window_samples) | 256 | the throughput of 256 exponential completions is within ±6 % |
//! | [`probe_samples`](Knee::probe_samples) | 500 | the mean of 500 lognormal (σ = 1) service times is within ±6 % |
//! | [`probe_interval`](Knee::probe_interval) | 20 s | Envoy's example is 60 s; shorter, as a probe at the margin costs little |
//!
//! Every rule in full (windows, the least queue, climbing, probes at the
//! margin, free probes), why each constant is what it is, and every
//! assumption with its figures: `crates/core/docs/knee-tuning.md`.
//!
//! # Example
//!
//! ```
//! use tollgate::concurrency::{ConcurrencyLimiter, Knee};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Start at 20 in flight, never above 200: the limit follows the knee.
//! let limiter = ConcurrencyLimiter::builder(20)
//!     .adaptive(Knee::new().max(200))
//!     .build()?;
//! let permit = limiter.try_acquire(1)?; // a slot, until `permit` drops
//! assert_eq!(limiter.in_flight(), 1);
//! drop(permit); // its latency is a sample for the controller
//! # Ok(())
//! # }
//! ```

use crate::clock::Nanos;

mod probe;

use probe::{
    Moments, PRECISION, Probe, Service, fewest_samples, halved, probe_margin, served_at_once,
};

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
    /// (at least 2.5 requests), clamped to `[0, 1]`. By default, 0.1.
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
        let probe = Probe::new(0, limit, self.min);
        KneeState {
            params: *self,
            limit,
            busy: None,
            last_busy: None,
            service: None,
            window: Window::default(),
            probed_at: probe.limit,
            probe: Some(probe),
            last_probe: 0,
            last_check: 0,
            free_batch: FreeBatch::None,
            stood_in: 0,
            unqueued: Moments::default(),
            doubted: None,
            verdict: Verdict::Believed,
        }
    }
}

/// Where the last probe ran, as the first window after it says (see
/// [`KneeState::until_next_probe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// A full probe, not yet judged.
    Pending,
    /// Below the knee, or not full (it held nothing back).
    Believed,
    /// At or past the knee: it read the service slow.
    PastTheKnee,
}

/// What the batches of free probes said since the last probe (see
/// [`KneeState::time_unqueued`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FreeBatch {
    /// No batch yet.
    None,
    /// Every batch agreed with the mean service time.
    Agreed,
    /// One did not: the next probe comes at once.
    Disagreed,
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

/// The least queue past the knee when the limit is not full (the limit is
/// the next whole number): at a knee of 10 with arrivals at 1.5× capacity,
/// fixed limits of 12 keep 94–95 % of the goodput (exponential service
/// times, `tollgate simulate --concurrency --table`), 13 keeps 95.5–97 %
/// with the median in flight at 12, and `busy` reads about 0.3 under the
/// knee: 2.5 puts 13 in the middle of what the noise of `busy` gives.
const LEAST_QUEUE: f64 = 2.5;

/// Where a full limit's `busy` is rounded up to the next whole knee: 0.3
/// past a whole number, not 0.5. A limit at the knee idles its workers
/// whenever a request leaves before the next arrives: at a knee of 5 under
/// arrivals at 3× its capacity they are busy 92 % of the time (Erlang's
/// loss formula), so `busy` reads 4.6, or 4.46 with a mean service time
/// read 3 % low, which rounded held the limit at 5 until the noise of
/// `busy` lifted it: the limit at the knee kept `busy` under the rounding
/// point (the table's K = 10 middle third sat at 5 a fifth of its time,
/// medians of 1.0 K and goodput of 86–94 %). A knee read up to 0.3 high
/// still gets one queued request, not two.
const ROUNDED_UP_PAST: f64 = 0.3;

/// How many times its limit `busy` is at least after a probe below the
/// knee: such a probe runs at half a limit at most 1.25× the knee, so
/// `busy` is then at least 1.6× its limit when the workers are kept busy,
/// and about 1× after one that ran at or past the knee (see
/// [`KneeState::until_next_probe`]). Not 1.25: at a knee of 5 under
/// arrivals at 1.5× its capacity the workers idle a fifth of the time,
/// `busy` reads 0.8 of the knee, so 1.3× a probe below it, and the noise of
/// one short window sent good probes to be replaced by slower ones (32
/// seeds of the table: 30 cells missed with 1.25, 26 with 1.1).
const BELOW_THE_KNEE: f64 = 1.1;

/// How many probes in a row batches of free probes may stand in for (see
/// [`KneeState::free_batches_stand_in`]): a real probe still runs every
/// third interval (60 s by default, Envoy's example interval for its
/// minimum-latency probe). The batches' margin comes from `busy`, so from
/// the mean they check: a mean read over 11 % slow reads `busy` high
/// enough to let queued requests into the batches, which then read slow
/// too, and agree. A real probe, confirmed at half the limit when it
/// disagrees, cannot confirm itself that way.
const STAND_IN_AT_MOST: u32 = 2;

/// A [`Knee`] controller's state: the pure transition the limiter stores
/// behind a mutex, public so that a simulation can drive it directly.
#[derive(Clone, Debug)]
pub struct KneeState {
    params: Knee,
    limit: u32,
    /// The smoothed requests in service; `None` before the first window.
    busy: Option<f64>,
    /// The last window's own.
    last_busy: Option<f64>,
    service: Option<Service>,
    window: Window,
    probe: Option<Probe>,
    /// When the last probe ended (ns).
    last_probe: u64,
    /// When the last probe ended or was skipped (ns): the next is due
    /// [`KneeState::until_next_probe`] after it.
    last_check: u64,
    /// What the batches of free probes said since then.
    free_batch: FreeBatch,
    /// Probes in a row the batches of free probes stood in for.
    stood_in: u32,
    /// Requests served at once since then (see [`KneeState::time_unqueued`]).
    unqueued: Moments,
    /// The limit the last probe ran at.
    probed_at: u32,
    /// Where the last probe ran, by the first window after it.
    verdict: Verdict,
    /// A probe's measure that disagreed with the mean service time, until
    /// the next probe confirms it or not.
    doubted: Option<Service>,
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
                probe.full += usize::from(in_flight == probe.limit);
                let samples = self.params.probe_samples;
                // The cohort is looked at every 64 answers: linear in the
                // answers, not quadratic.
                let enough = usize::try_from(fewest_samples(samples)).unwrap_or(usize::MAX);
                if probe.timed.len() >= enough && probe.timed.len() % 64 == 0 {
                    let guess = self.service.map(|service| service.mean);
                    if let Some(cohort) = probe.cohort(now, samples, guess) {
                        let (before, limit) = (probe.before, probe.limit);
                        let full = 2 * probe.full >= probe.timed.len();
                        self.end_probe(cohort, (before, limit, full), now);
                    }
                }
            }
            return self.limit();
        }
        if now.saturating_sub(self.last_check) >= self.until_next_probe() {
            if self.free_batches_stand_in() {
                self.stood_in += 1;
                self.last_check = now;
                self.free_batch = FreeBatch::None;
            } else {
                self.probe = Some(self.next_probe(now));
                return self.limit();
            }
        }
        self.time_unqueued(started, rtt, in_flight);
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

    /// Folds a finished probe into the mean service time: averaged in
    /// when it agrees, a confirming probe at once when it does not, and
    /// the service replaced when two probes in a row agree that it changed.
    /// `ran` is the probe's limit before, its own limit, and whether it
    /// was full for most of its requests.
    fn end_probe(&mut self, (mean, error, _): (f64, f64, u64), ran: (u32, u32, bool), now: u64) {
        let (before, limit, full) = ran;
        let measure = Service {
            mean,
            error,
            probes: 1,
        };
        let doubted = self.doubted.take();
        let at_half = limit == halved(before, self.params.min);
        self.service = match self.service {
            None => Some(measure),
            Some(_) if self.verdict == Verdict::PastTheKnee => Some(measure),
            Some(old) if old.agrees(mean, error) => Some(old.averaged(mean, error)),
            // The same change twice in a row: the service sped up or
            // slowed down; start over from both measures.
            Some(_) if doubted.is_some_and(|first| first.agrees(mean, error)) => {
                doubted.map(|first| first.averaged(mean, error))
            }
            // One probe away from the rest (the table had one read a
            // bimodal service 22 % fast: 39 slow requests of 704, where
            // 70 ± 8 are expected, and halve the limit for 20 s): ask
            // another at once, under the same limit.
            Some(_) => {
                self.doubted = Some(measure);
                self.probe = Some(Probe::new(now, before, self.params.min));
                return;
            }
        };
        // A probe whose limit was not full held nothing back: it says
        // nothing of the knee.
        self.verdict = if full && at_half {
            Verdict::Pending
        } else {
            Verdict::Believed
        };
        self.limit = before;
        self.probed_at = limit;
        self.probe = None;
        self.last_probe = now;
        self.last_check = now;
        self.stood_in = 0;
        self.free_batch = FreeBatch::None;
        self.unqueued = Moments::default();
        self.window = Window {
            started: now,
            ..Window::default()
        };
    }

    /// The time from the last probe (or the last one batches of free
    /// probes stood in for) to the next: none after a batch that disagreed
    /// with the mean service time, [`Knee::probe_interval`],
    /// or an eighth of it while the mean service time rests on one probe
    /// short of [`PRECISION`] and a probe now would run more requests at
    /// once than that one did (at as many it would time no more; at a knee
    /// of 5 probes at 2 repeated each other early, 2.5–3.4 s each, and one
    /// fell in a measure of the table: goodput 79 %). The first probe runs
    /// at half the initial limit, whatever the knee: at a knee of 400 its
    /// mean of ~950 requests is all the limit has until the next, and one
    /// 11 % low put the limit under the knee for the whole first measure of
    /// the table (goodput 94.6 %). A second probe at half the learnt limit times
    /// 2,000 requests in a tenth of a second there; at a knee of 10, where
    /// it would run at 6 rather than 10, it is not asked.
    ///
    /// Also an eighth of it after a full probe that ran at or past the
    /// knee, when a probe now would run lower: its requests queued, so it
    /// read the service slow, and `busy`, measured with that time, reads
    /// the probe's own limit, not the knee. A probe below the knee runs at
    /// half a limit at most 1.25× past it, so `busy` is then 1.3–1.6× its
    /// limit or more; under 1.1× it was not below. The fluid model of
    /// `tests/it/knee_properties.rs` found it: from the initial 20 at a knee
    /// of 5, probes at 10 and 7 read 7 ms as 11.1 and 9.8, and the limit
    /// stayed at 9–10 until the third probe, 40 s in.
    fn until_next_probe(&self) -> u64 {
        if self.free_batch == FreeBatch::Disagreed {
            return 0;
        }
        let interval = self.params.probe_interval.as_u64();
        let imprecise = self
            .service
            .is_some_and(|s| s.probes == 1 && s.error > PRECISION * s.mean);
        let past_the_knee = self.verdict == Verdict::PastTheKnee;
        // The limit a probe now would run at (the margin needs two measures
        // that agree, which neither case below has).
        let next = halved(self.limit, self.params.min);
        let lower = next < self.probed_at;
        let higher = next > self.probed_at;
        if (imprecise && higher) || (past_the_knee && lower) {
            interval / 8
        } else {
            interval
        }
    }

    /// Whether the batches of free probes since the last check stand in
    /// for the probe now due: they all agreed with the mean service time,
    /// the last probe was below the knee, and they have stood in for fewer
    /// than [`STAND_IN_AT_MOST`] probes in a row. A batch measures the
    /// service as a probe does, from requests served at once, without
    /// holding any throughput back: at a knee of 10 a probe at the margin
    /// holds back a tenth of it for up to a second, and one in a 10 s
    /// measure of the table cost it 2–3 %.
    fn free_batches_stand_in(&self) -> bool {
        self.free_batch == FreeBatch::Agreed
            && self.verdict == Verdict::Believed
            && self.stood_in < STAND_IN_AT_MOST
    }

    /// Times a request served at once, between probes: one that started
    /// with its in flight (its own included) at most `busy` less a request
    /// and less 10 % found a free worker, so its latency is a service
    /// time, as a probe's are. Each `probe_samples` of them are a free
    /// probe, averaged into the mean service time when they agree with it.
    /// One that disagrees brings the next probe forward, at once: a batch
    /// is never allowed to replace the mean, since a busy read high would
    /// let queued requests in, but the probe that may is not left for up
    /// to an interval. Under the load of the table (1.5× a knee of 10)
    /// about one request in 25 qualifies, so a batch comes every ten
    /// seconds or so, and batches that agree stand in for the probes due
    /// ([`KneeState::free_batches_stand_in`]).
    fn time_unqueued(&mut self, started: u64, rtt: f64, in_flight: u32) {
        let (Some(busy), Some(service)) = (self.busy, self.service) else {
            return;
        };
        if started < self.last_probe || f64::from(in_flight) > served_at_once(busy) {
            return;
        }
        self.unqueued.add(rtt);
        if self.unqueued.count >= u64::from(self.params.probe_samples) {
            let (mean, error) = self.unqueued.mean_error();
            self.unqueued = Moments::default();
            if service.agrees(mean, error) {
                self.service = Some(service.averaged(mean, error));
                // (After one that disagreed, the next answer starts a probe
                // before another batch can end: Agreed never hides it.)
                self.free_batch = FreeBatch::Agreed;
            } else {
                self.free_batch = FreeBatch::Disagreed;
            }
        }
    }

    /// The next probe: at half the limit, or at the margin ([`probe_margin`])
    /// when the mean service time is trusted.
    fn next_probe(&self, now: u64) -> Probe {
        let mut probe = Probe::new(now, self.limit, self.params.min);
        // (A confirming probe starts in `end_probe`, at half, not here.)
        let trusted =
            self.service.is_some_and(|s| s.probes >= 2) && self.verdict == Verdict::Believed;
        if let (true, Some(busy), Some(last)) = (trusted, self.busy, self.last_busy) {
            // The lower of the smoothed and the last window's own: right
            // after the knee falls, the smoothed one is still high.
            let margin = probe_margin(busy.min(last));
            if margin > f64::from(probe.limit) && margin < f64::from(self.limit) {
                probe.limit = margin as u32;
            }
        }
        probe
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
        self.last_busy = Some(busy);
        if self.verdict == Verdict::Pending {
            // Judged once, on the first window's own `busy` (measured with
            // the probe's time): later noise in `busy` is not a probe's
            // fault, and at a knee of 5 it sent probes at 2 into the
            // table's measures.
            self.verdict = if busy < BELOW_THE_KNEE * f64::from(self.probed_at) {
                Verdict::PastTheKnee
            } else {
                Verdict::Believed
            };
        }
        let limit = f64::from(self.limit);
        // A full limit (demand far past it) refills a freed worker at once:
        // one queued request keeps it fed (see "The estimate"). Its knee is
        // then `busy` rounded up from ROUNDED_UP_PAST: `busy` sits just
        // under the knee, and `⌈busy⌉ + 1` would add a second queued
        // request whenever it read a hair above.
        let least = if limit - in_flight < 0.6 {
            (smoothed + 1.0 - ROUNDED_UP_PAST).floor() + 1.0
        } else {
            smoothed + LEAST_QUEUE
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
        // The climb is rounded down (at least one request): rounded up, it
        // added two at a limit of 12, and as a climb that meets the knee
        // falls back the next window, the limit alternated 12 and 14.
        if busy >= unqueued * in_flight && in_flight >= 0.5 * limit {
            target = target
                .max((limit * (1.0 + self.params.headroom)).floor())
                .max(limit + 1.0);
        }
        let (min, max) = (self.params.min.max(1), self.params.max.max(1));
        self.limit = (target.ceil() as u32).clamp(min, max.max(min));
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
