//! A run's figures, as a table for people and JSON for machines.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use serde::Serialize;

use super::Config;
use super::pacer::Outcome;
use super::stats::WINDOW;
use crate::messages;

/// Percentiles of a distribution, in milliseconds.
#[derive(Debug, Serialize)]
pub struct Percentiles {
    p50: f64,
    p90: f64,
    p99: f64,
    p99_9: f64,
    p99_99: f64,
    max: f64,
    mean: f64,
}

impl Percentiles {
    /// `None` for an empty distribution: "no data", never zeros.
    fn of(histogram: &Histogram<u64>) -> Option<Percentiles> {
        if histogram.is_empty() {
            return None;
        }
        let ms = |nanos: u64| nanos as f64 / 1e6;
        Some(Percentiles {
            p50: ms(histogram.value_at_quantile(0.5)),
            p90: ms(histogram.value_at_quantile(0.9)),
            p99: ms(histogram.value_at_quantile(0.99)),
            p99_9: ms(histogram.value_at_quantile(0.999)),
            p99_99: ms(histogram.value_at_quantile(0.9999)),
            max: ms(histogram.max()),
            mean: histogram.mean() / 1e6,
        })
    }
}

/// Send-lag, in microseconds.
#[derive(Debug, Serialize)]
pub struct Lag {
    p50: f64,
    p99: f64,
    max: f64,
}

/// How far the sends per window were from the schedule's.
#[derive(Debug, Serialize)]
pub struct WindowError {
    /// Whole windows compared.
    windows: usize,
    /// Mean of |sent − due| / due over the windows.
    mean_abs: f64,
    /// Largest |sent − due| / due.
    max_abs: f64,
}

/// Everything reported about a run.
#[derive(Debug, Serialize)]
pub struct Summary {
    url: String,
    method: String,
    protocol: &'static str,
    target_rate: u64,
    scheduled: u64,
    due: u64,
    sent: u64,
    dropped: u64,
    answered: u64,
    failed: u64,
    unfinished: u64,
    interrupted: bool,
    /// The schedule's span: from the start to the intended time of the
    /// first request not due, in seconds.
    schedule_s: f64,
    /// Requests sent before the schedule's end, per second of it.
    achieved_rate: f64,
    /// achieved / target − 1.
    rate_error: f64,
    /// Requests sent after the schedule's end (not in the rate).
    sent_after_schedule: u64,
    /// Requests answered with a status below 400.
    succeeded: u64,
    /// Requests given up after `--timeout` (in `failed` and in the
    /// percentiles at the timeout).
    timed_out: u64,
    window_ms: u64,
    window_rate_error: WindowError,
    latency_ms: Option<Percentiles>,
    service_time_ms: Option<Percentiles>,
    send_lag_us: Option<Lag>,
    status_codes: BTreeMap<u16, u64>,
    errors: BTreeMap<&'static str, u64>,
    connections_opened: u64,
    connections_peak: usize,
    #[serde(skip)]
    max_connections: usize,
    #[serde(skip)]
    timeout: std::time::Duration,
}

impl Summary {
    /// The figures of `outcome`.
    pub fn new(config: &Config, outcome: &Outcome) -> Summary {
        let recorder = &outcome.recorder;
        let rate = config.schedule.rate();
        let schedule_end = recorder
            .schedule_end
            .min(config.schedule.offset(outcome.due));
        let on_schedule = recorder.sent - recorder.sent_after_end;
        let achieved_rate = if schedule_end.is_zero() {
            0.0
        } else {
            on_schedule as f64 / schedule_end.as_secs_f64()
        };
        let lag_us = |quantile: f64| recorder.send_lag.value_at_quantile(quantile) as f64 / 1e3;
        Summary {
            url: config.target.url.clone(),
            method: config.target.request().method().to_string(),
            protocol: if config.target.http2 {
                "HTTP/2 (h2c)"
            } else {
                "HTTP/1.1"
            },
            target_rate: rate,
            scheduled: outcome.scheduled,
            due: outcome.due,
            sent: recorder.sent,
            dropped: recorder.dropped,
            answered: recorder.answered_count(),
            failed: recorder.error_count(),
            unfinished: outcome.unfinished,
            interrupted: outcome.interrupted,
            schedule_s: schedule_end.as_secs_f64(),
            achieved_rate,
            rate_error: achieved_rate / rate as f64 - 1.0,
            sent_after_schedule: recorder.sent_after_end,
            succeeded: recorder.succeeded(),
            timed_out: recorder.timeouts,
            window_ms: WINDOW.as_millis() as u64,
            window_rate_error: window_error(config, outcome),
            latency_ms: Percentiles::of(&recorder.latency),
            service_time_ms: Percentiles::of(&recorder.service),
            send_lag_us: (!recorder.send_lag.is_empty()).then(|| Lag {
                p50: lag_us(0.5),
                p99: lag_us(0.99),
                max: recorder.send_lag.max() as f64 / 1e3,
            }),
            status_codes: recorder.statuses.clone(),
            errors: recorder.errors.clone(),
            connections_opened: recorder.connections_opened,
            connections_peak: outcome.peak_connections,
            max_connections: config.max_connections,
            timeout: config.timeout,
        }
    }

    /// As pretty JSON.
    pub fn json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }

    /// As a table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} {} over {}, {}/s: {} requests scheduled, {} due",
            self.method, self.url, self.protocol, self.target_rate, self.scheduled, self.due
        );
        let _ = writeln!(
            out,
            "sent {} ({} after the schedule's end), dropped {}, answered {} ({} below 400), failed {} ({} timed out), unfinished {}",
            self.sent,
            self.sent_after_schedule,
            self.dropped,
            self.answered,
            self.succeeded,
            self.failed,
            self.timed_out,
            self.unfinished
        );
        let _ = writeln!(
            out,
            "achieved rate {:.2}/s ({:+.4} %) over the {:.3} s schedule; per {} ms window: mean |error| {:.3} %, max |error| {:.3} % over {} windows",
            self.achieved_rate,
            self.rate_error * 100.0,
            self.schedule_s,
            self.window_ms,
            self.window_rate_error.mean_abs * 100.0,
            self.window_rate_error.max_abs * 100.0,
            self.window_rate_error.windows
        );
        match &self.send_lag_us {
            Some(lag) => {
                let _ = writeln!(
                    out,
                    "send lag: p50 {:.1} us, p99 {:.1} us, max {:.1} us",
                    lag.p50, lag.p99, lag.max
                );
            }
            None => {
                let _ = writeln!(out, "send lag: {}", messages::NO_DATA);
            }
        }
        let _ = writeln!(
            out,
            "{:<34} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "(ms)", "p50", "p90", "p99", "p99.9", "p99.99", "max"
        );
        for (name, p) in [
            ("latency (from intended send)", &self.latency_ms),
            ("service time (from actual send)", &self.service_time_ms),
        ] {
            match p {
                Some(p) => {
                    let _ = writeln!(
                        out,
                        "{name:<34} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                        p.p50, p.p90, p.p99, p.p99_9, p.p99_99, p.max
                    );
                }
                None => {
                    let _ = writeln!(out, "{name:<34} {:>9}", messages::NO_DATA);
                }
            }
        }
        let codes: Vec<String> = self
            .status_codes
            .iter()
            .map(|(code, count)| format!("{code}: {count}"))
            .collect();
        let _ = writeln!(
            out,
            "status codes: {}",
            if codes.is_empty() {
                "none".to_owned()
            } else {
                codes.join(", ")
            }
        );
        let errors: Vec<String> = self
            .errors
            .iter()
            .map(|(kind, count)| format!("{kind}: {count}"))
            .collect();
        let _ = writeln!(
            out,
            "errors: {}",
            if errors.is_empty() {
                "none".to_owned()
            } else {
                errors.join(", ")
            }
        );
        let _ = writeln!(
            out,
            "connections: {} opened, at most {} at once",
            self.connections_opened, self.connections_peak
        );
        out
    }

    /// What went wrong, for stderr.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.interrupted {
            warnings.push(messages::INTERRUPTED.to_owned());
        }
        if self.dropped > 0 {
            warnings.push(messages::dropped(self.dropped, self.max_connections as u64));
        }
        if self.unfinished > 0 {
            warnings.push(messages::unfinished(self.unfinished));
        }
        if self.timed_out > 0 {
            warnings.push(messages::timeouts_counted(self.timed_out, self.timeout));
        }
        let without_answer = self.failed - self.timed_out;
        if without_answer > 0 {
            warnings.push(messages::failures_left_out(without_answer));
        }
        if self.sent_after_schedule > 0 {
            warnings.push(messages::sent_after_schedule(self.sent_after_schedule));
        }
        warnings
    }
}

/// Sends per whole window against the schedule's due count.
fn window_error(config: &Config, outcome: &Outcome) -> WindowError {
    let schedule = config.schedule;
    // Windows that end before the next request would have been due.
    let end = schedule.offset(outcome.due);
    let whole = (end.as_nanos() / WINDOW.as_nanos()) as usize;
    let sends = &outcome.recorder.sends_per_window;
    let mut errors = Vec::with_capacity(whole);
    for window in 0..whole {
        let from = WINDOW * window as u32;
        let due = schedule.due_before(from + WINDOW) - schedule.due_before(from);
        if due == 0 {
            continue;
        }
        let sent = sends.get(window).copied().unwrap_or(0);
        errors.push((sent as f64 - due as f64).abs() / due as f64);
    }
    let windows = errors.len();
    WindowError {
        windows,
        mean_abs: if windows == 0 {
            0.0
        } else {
            errors.iter().sum::<f64>() / windows as f64
        },
        max_abs: errors.iter().copied().fold(0.0, f64::max),
    }
}

/// Where the service-time distribution is written beside `path`:
/// `run.hgrm` → `run.service.hgrm`.
pub fn service_hgrm_path(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match path.extension() {
        Some(extension) => format!("{stem}.service.{}", extension.to_string_lossy()),
        None => format!("{stem}.service"),
    };
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_file_sits_beside_the_latency_file() {
        assert_eq!(
            service_hgrm_path(Path::new("/tmp/run.hgrm")),
            Path::new("/tmp/run.service.hgrm")
        );
        assert_eq!(
            service_hgrm_path(Path::new("out")),
            Path::new("out.service")
        );
    }
}
