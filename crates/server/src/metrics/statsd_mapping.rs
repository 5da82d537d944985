//! envoyproxy/ratelimit's stats as Prometheus series: the statsd_exporter
//! mapping ([`crate::config::statsd_mapping`]) applied to one stat, its
//! name escaped as statsd_exporter escapes it ([`escape_name`]).
//!
//! A stat the mapping drops has no series; one no rule matches keeps its
//! name, escaped. The timer is always a histogram (see the mapping's
//! decisions).

use std::collections::BTreeMap;

use crate::config::statsd_mapping::{Mapping, StatKind};

/// A Prometheus series: a name and its labels, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Series {
    /// The metric name.
    pub name: String,
    /// The labels, by name.
    pub labels: BTreeMap<String, String>,
}

/// A timer's series and how its values are observed.
#[derive(Debug, Clone, PartialEq)]
pub struct TimerSeries {
    /// The histogram's name and labels.
    pub series: Series,
    /// What each value is multiplied by (`scale`, else 1).
    pub scale: f64,
    /// The buckets' upper bounds, ascending (`+Inf` implied).
    pub buckets: Vec<f64>,
}

/// The series of the counter `stat`, or `None` if `mapping` drops it.
pub fn counter_series(mapping: &Mapping, stat: &str) -> Option<Series> {
    let mapped = mapping.apply(stat, StatKind::Counter)?;
    Some(Series {
        name: escape_name(&mapped.name),
        labels: mapped.labels,
    })
}

/// The histogram of the timer `stat`, or `None` if `mapping` drops it.
pub fn timer_series(mapping: &Mapping, stat: &str) -> Option<TimerSeries> {
    let mapped = mapping.apply(stat, StatKind::Timer)?;
    Some(TimerSeries {
        series: Series {
            name: escape_name(&mapped.name),
            labels: mapped.labels,
        },
        scale: mapped.scale,
        buckets: mapped.buckets.to_vec(),
    })
}

/// statsd_exporter's `EscapeMetricName`: a leading digit gets a `_` before
/// it, and every character outside `[a-zA-Z0-9_]` becomes `_`.
pub fn escape_name(name: &str) -> String {
    let mut escaped = String::with_capacity(name.len() + 1);
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        escaped.push('_');
    }
    escaped.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::statsd_mapping::DEFAULT_BUCKETS;

    #[test]
    fn names_are_escaped_as_statsd_exporter() {
        assert_eq!(escape_name("1a.b-c"), "_1a_b_c");
    }

    #[test]
    fn series_are_the_mapping_with_names_escaped() {
        let m = Mapping::default();
        let series = counter_series(&m, "ratelimit.service.rate_limit.weekly.user.total_hits")
            .expect("mapped");
        assert_eq!(series.name, "ratelimit_service_rate_limit_total_hits");
        assert_eq!(series.labels["domain"], "weekly");
        // Unmapped: the name, escaped.
        assert_eq!(
            counter_series(&m, "ratelimit.service.global_shadow_mode"),
            Some(Series {
                name: "ratelimit_service_global_shadow_mode".to_owned(),
                labels: BTreeMap::new(),
            })
        );
        let stat = "ratelimit_server.ShouldRateLimit.response_time";
        let timer = timer_series(&m, stat).expect("mapped");
        assert_eq!(timer.series.name, "ratelimit_service_response_time_seconds");
        assert_eq!(
            (timer.scale, timer.buckets),
            (0.001, DEFAULT_BUCKETS.to_vec())
        );
        let bare = Mapping::from_yaml("mappings: []\n").expect("bare");
        let timer = timer_series(&bare, stat).expect("kept");
        assert_eq!(
            timer.series.name,
            "ratelimit_server_ShouldRateLimit_response_time"
        );
        let drop = Mapping::from_yaml(
            "mappings:\n  - match: ratelimit_server.*.response_time\n    action: drop\n",
        )
        .expect("drop");
        assert_eq!(timer_series(&drop, stat), None);
        // A rule without `match_metric_type` drops the stat as a counter too.
        assert_eq!(counter_series(&drop, stat), None);
    }
}
