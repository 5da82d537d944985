//! What a run records: three HdrHistograms and the counts.
//!
//! - **latency**: from the request's *intended* send time to the end of
//!   its response body, the figure that is corrected for coordinated
//!   omission (as wrk2): a server that stalls delays every request due
//!   during the stall, sent or not yet;
//! - **service time**: from the actual send to the end of the body, the
//!   figure a closed-loop tool reports;
//! - **send-lag**: actual − intended send time, how well the schedule was
//!   held.
//!
//! All in nanoseconds, 3 significant digits, up to one hour; a value above
//! is recorded as the hour (never lost).
//!
//! A request that times out is in both distributions too, at the moment it
//! was given up (its send plus `--timeout`): a lower bound of its latency,
//! where leaving it out would make the percentiles look better the worse
//! the server is. Other failures (a refused connect, a reset) have no
//! latency to record: they are counted by kind, and the report says they
//! are not in the percentiles. Sends are also counted per 100 ms
//! window from the start, to report how steady the rate was within the run.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Width of the windows the rate is checked over.
pub const WINDOW: Duration = Duration::from_millis(100);
const HIGHEST_NANOS: u64 = 3_600_000_000_000;

/// Why a request failed, for the error counts.
pub type ErrorKind = &'static str;

/// The record of one run.
#[derive(Debug)]
pub struct Recorder {
    start: Instant,
    /// From the intended send time (corrected).
    pub latency: Histogram<u64>,
    /// From the actual send (uncorrected).
    pub service: Histogram<u64>,
    /// Actual − intended send time.
    pub send_lag: Histogram<u64>,
    /// Requests written to a connection.
    pub sent: u64,
    /// Requests due while no connection could take them in time.
    pub dropped: u64,
    /// Responses received in full, by status code.
    pub statuses: BTreeMap<u16, u64>,
    /// Requests that failed, by kind.
    pub errors: BTreeMap<ErrorKind, u64>,
    /// Sends per [`WINDOW`] from the start.
    pub sends_per_window: Vec<u64>,
    /// Offset of the last send from the start.
    pub last_send: Duration,
    /// Connections opened, in all.
    pub connections_opened: u64,
    /// Requests timed out (also in `errors` and in the distributions).
    pub timeouts: u64,
    /// Offset of the schedule's end from the start: `schedule.offset(n)` for
    /// the `n` requests due. By default, never.
    pub schedule_end: Duration,
    /// Requests sent at or after `schedule_end` (they waited for a
    /// connection): not counted in the rate over the schedule.
    pub sent_after_end: u64,
}

impl Recorder {
    /// An empty record for a run starting at `start`.
    pub fn new(start: Instant) -> Recorder {
        let histogram =
            || Histogram::new_with_bounds(1, HIGHEST_NANOS, 3).expect("constant, valid bounds");
        Recorder {
            start,
            latency: histogram(),
            service: histogram(),
            send_lag: histogram(),
            sent: 0,
            dropped: 0,
            statuses: BTreeMap::new(),
            errors: BTreeMap::new(),
            sends_per_window: Vec::new(),
            last_send: Duration::ZERO,
            connections_opened: 0,
            timeouts: 0,
            schedule_end: Duration::MAX,
            sent_after_end: 0,
        }
    }

    /// A request due at `intended` was written at `sent`.
    pub fn sent(&mut self, intended: Instant, sent: Instant) {
        self.sent += 1;
        self.send_lag
            .saturating_record(nanos(sent.saturating_duration_since(intended)));
        let offset = sent.saturating_duration_since(self.start);
        self.last_send = self.last_send.max(offset);
        if offset >= self.schedule_end {
            self.sent_after_end += 1;
        }
        let window = (offset.as_nanos() / WINDOW.as_nanos()) as usize;
        if self.sends_per_window.len() <= window {
            self.sends_per_window.resize(window + 1, 0);
        }
        self.sends_per_window[window] += 1;
    }

    /// Its response, `status`, ended at `done`.
    pub fn answered(&mut self, intended: Instant, sent: Instant, done: Instant, status: u16) {
        self.latency
            .saturating_record(nanos(done.saturating_duration_since(intended)));
        self.service
            .saturating_record(nanos(done.saturating_duration_since(sent)));
        *self.statuses.entry(status).or_insert(0) += 1;
    }

    /// A request sent at `sent` was given up unanswered at `given_up`: an
    /// error, and in the distributions at that moment (a lower bound).
    pub fn timed_out(&mut self, intended: Instant, sent: Instant, given_up: Instant) {
        self.timeouts += 1;
        self.failed("timeout");
        self.latency
            .saturating_record(nanos(given_up.saturating_duration_since(intended)));
        self.service
            .saturating_record(nanos(given_up.saturating_duration_since(sent)));
    }

    /// Responses with a status below 400: what counts as success.
    pub fn succeeded(&self) -> u64 {
        self.statuses.range(..400).map(|(_, count)| count).sum()
    }

    /// A request failed.
    pub fn failed(&mut self, kind: ErrorKind) {
        *self.errors.entry(kind).or_insert(0) += 1;
    }

    /// A request was not sent: no connection could take it in time.
    pub fn dropped(&mut self) {
        self.dropped += 1;
    }

    /// Responses received, whatever their status.
    pub fn answered_count(&self) -> u64 {
        self.statuses.values().sum()
    }

    /// Failed requests.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// `histogram` in HdrHistogram's percentile-distribution text format
/// (`.hgrm`, as `outputPercentileDistribution` writes it), values in
/// milliseconds, 5 ticks per half distance.
pub fn hgrm(histogram: &Histogram<u64>) -> String {
    const NANOS_PER_MS: f64 = 1e6;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0;
    for step in histogram.iter_quantiles(5) {
        total += step.count_since_last_iteration();
        let value = histogram.highest_equivalent(step.value_iterated_to()) as f64 / NANOS_PER_MS;
        let quantile = step.quantile_iterated_to();
        if quantile < 1.0 {
            let _ = writeln!(
                out,
                "{value:12.3} {quantile:2.12} {total:10} {:14.2}",
                1.0 / (1.0 - quantile)
            );
        } else {
            let _ = writeln!(out, "{value:12.3} {quantile:2.12} {total:10}");
        }
    }
    let _ = writeln!(
        out,
        "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]",
        histogram.mean() / NANOS_PER_MS,
        histogram.stdev() / NANOS_PER_MS
    );
    let _ = writeln!(
        out,
        "#[Max     = {:12.3}, Total count    = {:12}]",
        histogram.max() as f64 / NANOS_PER_MS,
        histogram.len()
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        histogram.buckets(),
        histogram.distinct_values()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_is_from_the_intended_time_and_service_from_the_send() {
        let start = Instant::now();
        let mut recorder = Recorder::new(start);
        let intended = start + Duration::from_millis(10);
        let sent = intended + Duration::from_millis(40);
        recorder.sent(intended, sent);
        recorder.answered(intended, sent, sent + Duration::from_millis(1), 200);
        let ms = |value: u64| (value as f64 / 1e6).round() as u64;
        assert_eq!(ms(recorder.latency.max()), 41);
        assert_eq!(ms(recorder.service.max()), 1);
        assert_eq!(ms(recorder.send_lag.max()), 40);
        assert_eq!(recorder.sends_per_window, vec![1]);
        assert_eq!(recorder.statuses.get(&200), Some(&1));
    }

    /// Regression: timed-out requests were left out of the percentiles
    /// (10 % timeouts showed a p99 of 460 ms where the truth was ≥ 950 ms).
    #[test]
    fn a_timeout_counts_in_the_percentiles_at_the_timeout() {
        let start = Instant::now();
        let mut recorder = Recorder::new(start);
        for i in 0..100 {
            let at = start + Duration::from_millis(i);
            recorder.sent(at, at);
            if i % 10 == 0 {
                recorder.timed_out(at, at, at + Duration::from_secs(1));
            } else {
                recorder.answered(at, at, at + Duration::from_millis(5), 200);
            }
        }
        let p99 = recorder.latency.value_at_quantile(0.99) as f64 / 1e6;
        assert!((p99 - 1_000.0).abs() < 1.0, "p99 {p99} ms");
        assert_eq!(recorder.timeouts, 10);
        assert_eq!(recorder.errors.get("timeout"), Some(&10));
        assert_eq!(recorder.succeeded(), 90);
    }

    #[test]
    fn sends_at_or_after_the_schedule_end_are_counted_apart() {
        let start = Instant::now();
        let mut recorder = Recorder::new(start);
        recorder.schedule_end = Duration::from_secs(1);
        for ms in [0, 999, 1_000, 2_000] {
            let at = start + Duration::from_millis(ms);
            recorder.sent(at, at);
        }
        assert_eq!(recorder.sent, 4);
        assert_eq!(recorder.sent_after_end, 2);
    }

    #[test]
    fn sends_are_counted_per_window() {
        let start = Instant::now();
        let mut recorder = Recorder::new(start);
        for ms in [0, 50, 99, 100, 350] {
            let at = start + Duration::from_millis(ms);
            recorder.sent(at, at);
        }
        assert_eq!(recorder.sends_per_window, vec![3, 1, 0, 1]);
        assert_eq!(recorder.last_send, Duration::from_millis(350));
    }

    #[test]
    fn hgrm_lists_cumulative_counts_up_to_the_whole() {
        let mut histogram = Histogram::<u64>::new_with_bounds(1, HIGHEST_NANOS, 3).unwrap();
        for ms in 1..=100 {
            histogram.record(ms * 1_000_000).unwrap();
        }
        let text = hgrm(&histogram);
        let rows: Vec<Vec<&str>> = text
            .lines()
            .filter(|line| {
                !line.is_empty()
                    && !line.starts_with('#')
                    && !line.trim_start().starts_with("Value")
            })
            .map(|line| line.split_whitespace().collect())
            .collect();
        let last = rows.last().unwrap();
        assert_eq!(last[1].parse::<f64>().unwrap(), 1.0);
        assert_eq!(last[2], "100");
        assert!((last[0].parse::<f64>().unwrap() - 100.0).abs() < 0.1);
        assert!(text.contains("Total count    =          100"));
    }
}
