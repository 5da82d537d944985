//! A probe of the mean service time, and what it measures: the limit it
//! runs at (half the limit, or the margin below the knee), the cohort it
//! times, its mean and standard error, the margin under which a request
//! is a free probe, and the mean service time the [controller](super)
//! learns from probes and batches of free probes.

/// A probe of the mean service time in progress.
#[derive(Clone, Debug)]
pub(super) struct Probe {
    /// When it started (ns): only requests started since are timed.
    pub(super) started: u64,
    /// The limit while it runs, and the limit to return to.
    pub(super) limit: u32,
    pub(super) before: u32,
    /// `(started, rtt)` of the requests timed so far, in completion order.
    pub(super) timed: Vec<(u64, u64)>,
    /// How many of them took the last free slot of its limit.
    pub(super) full: usize,
}

/// How many mean service times a probe waits for the slowest request of
/// its cohort: the first answers are the fastest, and a mean over them
/// alone reads a long-tailed service as faster than it is.
const HORIZON: f64 = 20.0;

/// The relative standard error a probe aims at.
pub(super) const PRECISION: f64 = 0.03;

/// The fewest answers a probe ends on, when they already give its mean
/// within [`PRECISION`]: a quarter of `samples`. A long-tailed service
/// does not pass with so few (lognormal σ = 1 needs 1,900 answers, bimodal
/// 90/10 2,200), and 125 answers hold a bimodal 90/10 service's slow tenth
/// all but 2 in 10⁶ times (0.9¹²⁵).
pub(super) fn fewest_samples(samples: u32) -> u64 {
    (u64::from(samples) / 4).max(1)
}

/// How many times `probe_samples` a probe may time to reach `PRECISION`.
const MORE_SAMPLES: u64 = 4;

/// How long a probe may go on to reach `PRECISION` (ns).
const LONGEST: u64 = 1_000_000_000;

impl Probe {
    pub(super) fn new(started: u64, before: u32, min: u32) -> Probe {
        Probe {
            started,
            limit: halved(before, min),
            before,
            timed: Vec::new(),
            full: 0,
        }
    }

    /// The cohort's mean, standard error and size, once `samples` requests
    /// that started at least `HORIZON` mean service times ago (by `guess`,
    /// or the mean so far) have answered, or a quarter of them whose mean
    /// is already known within `PRECISION`; `None` before.
    pub(super) fn cohort(
        &self,
        now: u64,
        samples: u32,
        guess: Option<f64>,
    ) -> Option<(f64, f64, u64)> {
        let n = self.timed.len() as f64;
        let so_far = self.timed.iter().map(|&(_, rtt)| rtt as f64).sum::<f64>() / n.max(1.0);
        let horizon = HORIZON * guess.unwrap_or(so_far).max(so_far);
        let cut = (now as f64 - horizon).max(0.0) as u64;
        let mut cohort = Moments::default();
        for &(started, rtt) in &self.timed {
            if started < cut {
                cohort.add(rtt as f64);
            }
        }
        let count = cohort.count;
        if count < fewest_samples(samples) {
            return None;
        }
        let (mean, error) = cohort.mean_error();
        let precise = error <= PRECISION * mean;
        // A service of little spread is known within PRECISION long before
        // `samples` answers (constant or ±25 %: a few dozen), and a probe
        // at half a small limit is slow: at a knee of 5 and 30 ms, 500
        // answers took 4 s, and a probe and its confirmation 8.
        if count < u64::from(samples) && !precise {
            return None;
        }
        // A long-tailed service needs more samples for the same precision:
        // go on until the mean is known within PRECISION (one standard
        // error), for at most MORE_SAMPLES times the samples.
        let longest = self.started + LONGEST;
        if !precise && count < MORE_SAMPLES * u64::from(samples) && now < longest {
            return None;
        }
        Some((mean, error, count))
    }
}

/// The most in flight (its own included) at which a request finds a free
/// worker, with `busy` read up to 11 % over the knee: `busy` less a
/// request and less 10 %.
pub(super) fn served_at_once(busy: f64) -> f64 {
    (busy.floor() - 1.0).min((0.9 * busy).floor())
}

/// The limit of a probe at the margin: `busy` less 5 %, rounded down (at a
/// knee of 10, 9; of 40, 38). Nearer the knee than the free probes'
/// margin: a probe there that ran past the knee reads the service slow,
/// disagrees with the mean, and is confirmed at half, where a free probe
/// would have no such check. Runs of 45–90 s missed 91 cells of 960 with
/// the free probes' margin (8 at a knee of 10), 79 with this one.
pub(super) fn probe_margin(busy: f64) -> f64 {
    busy.floor().min((0.95 * busy).floor())
}

/// Half the limit `before`, at least `min`: a probe's limit.
pub(super) fn halved(before: u32, min: u32) -> u32 {
    (before / 2).max(min).max(1)
}

/// The count, sum and sum of squares of service times.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Moments {
    pub(super) count: u64,
    sum: f64,
    squares: f64,
}

impl Moments {
    pub(super) fn add(&mut self, rtt: f64) {
        self.count += 1;
        self.sum += rtt;
        self.squares += rtt * rtt;
    }

    /// The mean and its standard error.
    pub(super) fn mean_error(&self) -> (f64, f64) {
        let n = (self.count as f64).max(1.0);
        let mean = self.sum / n;
        let variance = (self.squares / n - mean * mean).max(0.0);
        (mean, (variance / n).sqrt())
    }
}

/// The mean service time, and how well it is known.
#[derive(Clone, Copy, Debug)]
pub(super) struct Service {
    pub(super) mean: f64,
    /// The standard error of `mean`.
    pub(super) error: f64,
    /// Probes (and batches of unqueued requests) averaged into it (at
    /// most 4).
    pub(super) probes: u32,
}

impl Service {
    /// Whether a new measure is of the same service: within three
    /// standard errors of both.
    pub(super) fn agrees(&self, mean: f64, error: f64) -> bool {
        (mean - self.mean).abs() <= 3.0 * error.hypot(self.error)
    }

    /// A new measure of the same service averaged in, each of the last
    /// four weighing alike.
    pub(super) fn averaged(&self, mean: f64, error: f64) -> Service {
        let probes = f64::from(self.probes);
        Service {
            mean: (self.mean * probes + mean) / (probes + 1.0),
            error: (self.error * probes + error) / (probes + 1.0),
            probes: (self.probes + 1).min(4),
        }
    }
}
