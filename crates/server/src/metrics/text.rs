//! The two exposition formats `/metrics` serves, and how a scraper picks.
//!
//! - **Prometheus text 0.0.4** (`text/plain; version=0.0.4`), the default:
//!   what envoyproxy/ratelimit's Prometheus endpoint serves (its
//!   `promhttp.Handler()` never negotiates OpenMetrics).
//! - **OpenMetrics 1.0.0** (`application/openmetrics-text;
//!   version=1.0.0`), when the scraper's `Accept` asks for it at least as
//!   much as for `text/plain` (Prometheus' own default `Accept` does).
//!
//! A counter keeps one series name in both: tollgate's counters are named
//! `…_total` (`tollgate_rule_total_hits_total`), in 0.0.4 as the family's
//! name, in OpenMetrics as the sample's; envoyproxy/ratelimit's keep its
//! names exactly (`ratelimit_service_rate_limit_total_hits`): `counter` in
//! 0.0.4, as it serves them, and `unknown` in OpenMetrics, whose counters
//! must end in `_total` (Prometheus stores an OpenMetrics counter under
//! its `_total` sample name, which would break its dashboards).
//!
//! # Decisions
//!
//! `prometheus-client` (the registry tollgate's own metrics live in)
//! encodes OpenMetrics only. The 0.0.4 text is converted from that
//! output, line by line, rather than kept in a second registry type (the
//! `prometheus` crate) that every metric, the Redis backend's collector
//! and the concurrency collector would be written twice for: the two
//! formats differ, for the types tollgate uses (counter, gauge,
//! histogram), only in the counter family's name, `# UNIT`, `# EOF`,
//! `_created` samples and the escapes of `# HELP`, which the conversion
//! handles. envoyproxy/ratelimit's series are written by
//! [`encode_lyft`] directly in either format. Both outputs pass
//! `promtool check metrics` (the `metrics_formats` test).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::statsd_mapping::Series;

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text 0.0.4.
    Text,
    /// OpenMetrics 1.0.0.
    OpenMetrics,
}

impl Format {
    /// The format for a request's `Accept` header (see the module docs):
    /// OpenMetrics when an `application/openmetrics-text` range has a
    /// quality above 0 and at least that of every `text/plain` range;
    /// otherwise text 0.0.4 (also for no header, `*/*`, or a header that
    /// does not parse).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        let (mut openmetrics, mut text) = (0.0_f32, 0.0_f32);
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim();
            let mut quality = 1.0_f32;
            for param in parts {
                if let Some((name, value)) = param.split_once('=')
                    && name.trim().eq_ignore_ascii_case("q")
                {
                    quality = value.trim().parse().unwrap_or(0.0);
                }
            }
            if media.eq_ignore_ascii_case("application/openmetrics-text") {
                openmetrics = openmetrics.max(quality);
            } else if media.eq_ignore_ascii_case("text/plain") {
                text = text.max(quality);
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The answer to a scrape: `metrics` in the format `request_headers`'
/// `Accept` asks for, with its `Content-Type`.
pub fn respond(
    metrics: &super::Metrics,
    request_headers: &http::HeaderMap,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let accept = request_headers
        .get(http::header::ACCEPT)
        .and_then(|value| value.to_str().ok());
    let format = Format::negotiate(accept);
    (
        [(http::header::CONTENT_TYPE, format.content_type())],
        metrics.encode_as(format),
    )
        .into_response()
}

/// Appends `openmetrics` (prometheus-client's output, without `# EOF`
/// or with it) to `out` as Prometheus text 0.0.4.
pub fn openmetrics_to_text(openmetrics: &str, out: &mut String) {
    // `# HELP` comes before `# TYPE`: held until the type names the family.
    let mut help: Option<(&str, String)> = None;
    let mut counter: Option<&str> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            // OpenMetrics escapes `"` in help; 0.0.4 knows only `\\` and `\n`.
            help = Some((name, text.replace("\\\"", "\"")));
            counter = None;
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (family, kind) = match kind {
                "counter" => {
                    counter = Some(name);
                    (format!("{name}_total"), "counter")
                }
                "gauge" | "histogram" | "summary" => (name.to_owned(), kind),
                _ => (name.to_owned(), "untyped"),
            };
            if let Some((help_name, text)) = help.take()
                && help_name == name
            {
                let _ = writeln!(out, "# HELP {family} {text}");
            }
            let _ = writeln!(out, "# TYPE {family} {kind}");
        } else if line.starts_with('#') {
            // `# UNIT`, `# EOF`: not in 0.0.4.
        } else if counter.is_some_and(|name| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with("_created"))
        }) {
            // A counter's creation time: not in 0.0.4.
        } else if !line.is_empty() {
            out.push_str(line);
            out.push('\n');
        }
    }
}

/// Appends envoyproxy/ratelimit's series (those above 0: a stat shows
/// once it has counted, as its store flushes only non-zero counters) in
/// `format`, without `# EOF`.
pub fn encode_lyft(series: &[(Series, u64)], format: Format, out: &mut String) {
    // Per name, per label set, the value: two stats that map to one series
    // (a mapping may fold them) add up.
    let mut families: BTreeMap<&str, BTreeMap<&Labels, u64>> = BTreeMap::new();
    for (series, value) in series {
        if *value > 0 {
            let total = families
                .entry(&series.name)
                .or_default()
                .entry(&series.labels)
                .or_default();
            *total = total.saturating_add(*value);
        }
    }
    let kind = match format {
        Format::Text => "counter",
        Format::OpenMetrics => "unknown",
    };
    for (name, samples) in families {
        let _ = writeln!(
            out,
            "# HELP {name} Metric autogenerated by statsd_exporter."
        );
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            out.push_str(name);
            if !labels.is_empty() {
                out.push('{');
                for (i, (label, value)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{label}=\"{}\"", escape_label_value(value));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {value}");
        }
    }
}

/// A series' labels, by name.
type Labels = BTreeMap<String, String>;

/// A label value's escapes, the same in both formats.
pub(crate) fn escape_label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiates_as_documented() {
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Text);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Text);
        // Prometheus' default scrape Accept.
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
            )),
            Format::OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text; version=1.0.0")),
            Format::OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0.2, text/plain;q=0.9")),
            Format::Text
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0")),
            Format::Text
        );
    }

    #[test]
    fn converts_counters_and_drops_what_0_0_4_lacks() {
        let mut out = String::new();
        openmetrics_to_text(
            "# HELP a_hits Hits \\\"here\\\".\n# TYPE a_hits counter\na_hits_total{r=\"x\"} 3\na_hits_created 1.5\n# HELP a_up Up.\n# TYPE a_up gauge\n# UNIT a_up seconds\na_up 1\n# EOF\n",
            &mut out,
        );
        assert_eq!(
            out,
            "# HELP a_hits_total Hits \"here\".\n# TYPE a_hits_total counter\na_hits_total{r=\"x\"} 3\n# HELP a_up Up.\n# TYPE a_up gauge\na_up 1\n"
        );
    }
}
