//! Decisions per second per rule over the last minutes, from the rule
//! counters that feed `/metrics`.
//!
//! Each [`Series::sample`] reads every rule's cumulative totals and keeps
//! the difference from the previous sample: one point per sample, the
//! last [`POINTS`] kept. The totals are the Prometheus counters
//! themselves ([`crate::metrics::RuleCounters::totals`]), so the page and
//! `/metrics` cannot disagree: a point is exactly the counters' increase
//! between two samples. A rule seen for the first time starts from its
//! current totals (its first point is the next sample's increase), and a
//! rule gone from the rules is forgotten.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;

/// The points kept per rule: five minutes of one-second samples.
pub const POINTS: usize = 300;

/// Permits counted under one rule, as `/metrics` counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Admitted: `tollgate_rule_within_limit`.
    pub allowed: u64,
    /// Denied and answered `OVER_LIMIT`: `tollgate_rule_over_limit`
    /// minus `tollgate_rule_shadow_mode`.
    pub denied: u64,
    /// Denied but answered OK (shadow mode): `tollgate_rule_shadow_mode`.
    pub shadow: u64,
}

impl Totals {
    /// What was added since `earlier` (a counter never goes down; if one
    /// did, the difference is 0, never a wrap).
    pub fn since(self, earlier: Totals) -> Totals {
        Totals {
            allowed: self.allowed.saturating_sub(earlier.allowed),
            denied: self.denied.saturating_sub(earlier.denied),
            shadow: self.shadow.saturating_sub(earlier.shadow),
        }
    }
}

#[derive(Debug, Default)]
struct RuleSeries {
    last: Totals,
    points: VecDeque<Totals>,
}

/// Every rule's recent points (see the [module docs](self)).
#[derive(Debug, Default)]
pub struct Series {
    rules: HashMap<Arc<str>, RuleSeries>,
}

impl Series {
    /// Records one sample: each rule's totals now.
    pub fn sample(&mut self, totals: impl IntoIterator<Item = (Arc<str>, Totals)>) {
        let mut seen = HashMap::with_capacity(self.rules.len());
        for (rule, now) in totals {
            let series = match self.rules.remove(&rule) {
                Some(mut series) => {
                    if series.points.len() == POINTS {
                        series.points.pop_front();
                    }
                    series.points.push_back(now.since(series.last));
                    series.last = now;
                    series
                }
                None => RuleSeries {
                    last: now,
                    points: VecDeque::new(),
                },
            };
            seen.insert(rule, series);
        }
        self.rules = seen;
    }

    /// The points of `rule`, oldest first.
    pub fn points(&self, rule: &str) -> Vec<Totals> {
        self.rules
            .get(rule)
            .map_or_else(Vec::new, |series| series.points.iter().copied().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(allowed: u64, denied: u64, shadow: u64) -> Totals {
        Totals {
            allowed,
            denied,
            shadow,
        }
    }

    #[test]
    fn points_are_the_increase_between_samples() {
        let rule: Arc<str> = "d.user".into();
        let mut series = Series::default();
        series.sample([(Arc::clone(&rule), totals(5, 1, 0))]);
        assert!(
            series.points("d.user").is_empty(),
            "the first sample is a start"
        );
        series.sample([(Arc::clone(&rule), totals(8, 1, 2))]);
        series.sample([(Arc::clone(&rule), totals(8, 4, 2))]);
        assert_eq!(series.points("d.user"), [totals(3, 0, 2), totals(0, 3, 0)]);
        // Gone from the rules: forgotten.
        series.sample([]);
        assert!(series.points("d.user").is_empty());
    }

    #[test]
    fn keeps_the_last_points_only() {
        let rule: Arc<str> = "r".into();
        let mut series = Series::default();
        for i in 0..=(POINTS as u64 + 10) {
            series.sample([(Arc::clone(&rule), totals(i * 2, 0, 0))]);
        }
        let points = series.points("r");
        assert_eq!(points.len(), POINTS);
        assert!(points.iter().all(|p| *p == totals(2, 0, 0)));
    }
}
