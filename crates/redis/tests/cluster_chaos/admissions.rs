//! An independent count of admissions, kept by the caller, and the bounds
//! each algorithm promises, checked against it.
//!
//! Each admission is recorded with the wall-clock times just before the
//! call was sent and just after its answer came back. Redis reads the same
//! clock (`TIME`; the servers run on this machine), so the instant the
//! script decided lies within `[sent, received]`. The checkers count only
//! what that interval proves, so they never report an excess that did not
//! happen (they may miss one hidden by a call's latency):
//!
//! - fixed window `limit` per `period` (windows aligned on the Unix epoch,
//!   as the scripts align them): an admission counts in window `k` when
//!   both its times fall in it; every window must hold at most `limit`;
//! - GCRA with `burst` and `rate` per second: any `n` admissions sent at or
//!   after `a` and answered by `b` need `n ≤ burst + rate·(b − a)`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One admission seen by the caller.
#[derive(Clone, Copy, Debug)]
pub struct Admission {
    /// Microseconds since the epoch, just before the call.
    pub sent: u64,
    /// Microseconds since the epoch, just after the answer.
    pub received: u64,
}

/// Microseconds since the Unix epoch, now.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Admissions per key.
#[derive(Default, Debug)]
pub struct Admissions {
    by_key: BTreeMap<String, Vec<Admission>>,
}

impl Admissions {
    /// Records one admission of `key`.
    pub fn add(&mut self, key: &str, admission: Admission) {
        self.by_key
            .entry(key.to_owned())
            .or_default()
            .push(admission);
    }

    /// Every admission of `other` added to these.
    pub fn merge(&mut self, other: Admissions) {
        for (key, list) in other.by_key {
            self.by_key.entry(key).or_default().extend(list);
        }
    }

    /// Admissions of every key.
    pub fn total(&self) -> usize {
        self.by_key.values().map(Vec::len).sum()
    }

    /// Per key, the largest count beyond `limit` in one aligned window of
    /// `period` that the recorded times prove (0: within the bound).
    pub fn fixed_window_excess(&self, limit: u64, period: Duration) -> BTreeMap<String, u64> {
        let period = period.as_micros() as u64;
        self.by_key
            .iter()
            .map(|(key, list)| {
                let mut per_window: BTreeMap<u64, u64> = BTreeMap::new();
                for a in list {
                    let (first, last) = (a.sent / period, a.received / period);
                    if first == last {
                        *per_window.entry(first).or_default() += 1;
                    }
                }
                let most = per_window.values().copied().max().unwrap_or(0);
                (key.clone(), most.saturating_sub(limit))
            })
            .collect()
    }

    /// Per key, the largest count beyond `burst + rate·t` over any interval
    /// that the recorded times prove (0: within the bound).
    pub fn gcra_excess(&self, burst: u64, per_second: f64) -> BTreeMap<String, u64> {
        self.by_key
            .iter()
            .map(|(key, list)| {
                let mut sorted = list.clone();
                sorted.sort_by_key(|a| a.sent);
                let mut worst = 0u64;
                for i in 0..sorted.len() {
                    // Admissions i..=j were all sent at or after sorted[i]
                    // and answered by the latest of their answers.
                    let mut answered_by = 0;
                    for (n, a) in sorted[i..].iter().enumerate() {
                        answered_by = answered_by.max(a.received);
                        let span = (answered_by - sorted[i].sent) as f64 / 1e6;
                        let allowed = burst as f64 + per_second * span;
                        let count = (n + 1) as f64;
                        if count > allowed {
                            worst = worst.max((count - allowed.floor()) as u64);
                        }
                    }
                }
                (key.clone(), worst)
            })
            .collect()
    }
}

/// The largest value of a per-key excess (0 for none).
pub fn worst(excess: &BTreeMap<String, u64>) -> u64 {
    excess.values().copied().max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(sent: u64, received: u64) -> Admission {
        Admission { sent, received }
    }

    #[test]
    fn a_window_over_its_limit_is_found_and_a_straddling_call_is_not_counted() {
        let mut a = Admissions::default();
        for t in [10, 20, 30] {
            a.add("k", at(t, t + 5));
        }
        // Sent in window 0, answered in window 1: proves nothing.
        a.add("k", at(999_990, 1_000_010));
        assert_eq!(a.fixed_window_excess(2, Duration::from_secs(1))["k"], 1);
        assert_eq!(a.fixed_window_excess(3, Duration::from_secs(1))["k"], 0);
    }

    #[test]
    fn gcra_counts_over_the_provable_interval() {
        let mut a = Admissions::default();
        // 5 at once, then one per 100 ms: burst 5 at 10/s admits exactly this.
        for _ in 0..5 {
            a.add("k", at(0, 1));
        }
        for i in 1..=5 {
            a.add("k", at(i * 100_000, i * 100_000 + 1));
        }
        assert_eq!(worst(&a.gcra_excess(5, 10.0)), 0);
        // Two more at once at 500 ms: one too many for burst 5 at 10/s.
        a.add("k", at(500_000, 500_001));
        a.add("k", at(500_000, 500_001));
        assert_eq!(worst(&a.gcra_excess(5, 10.0)), 2);
        assert_eq!(worst(&a.gcra_excess(7, 10.0)), 0);
    }
}
