//! statsd_exporter's metric mapping as configuration: how
//! envoyproxy/ratelimit names its StatsD stats for Prometheus
//! (`PROMETHEUS_MAPPER_YAML`, read by [`super::telemetry`]).
//!
//! A [`Mapping`] is a checked list of rules; [`Mapping::apply`] says what
//! the first rule matching a stat makes of it (dropped, or a name, labels,
//! a scale and buckets). The metrics module applies it to the server's
//! own stats (`metrics::statsd_mapping`), escaping names for Prometheus.
//!
//! By default ([`Mapping::default`]) it is envoyproxy/ratelimit's mapping
//! (`src/stats/prom/default_mapper.yaml`, the same globs and regular
//! expressions in the same order): the per-rule stats become
//! `ratelimit_service_rate_limit_<stat>{domain,key1}` (a two-part key) or
//! `{domain,key1,key2}` (three parts or more: the first two entries), and
//! the timer `ratelimit_server.ShouldRateLimit.response_time`
//! (milliseconds) the histogram
//! `ratelimit_service_response_time_seconds{grpc_method}` with scale 0.001
//! (dropped by `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`, the name kept,
//! as envoyproxy/ratelimit does: [`Mapping::lyft_default`]). A stat no rule
//! matches keeps its name. Buckets default to Prometheus'
//! ([`DEFAULT_BUCKETS`]).
//!
//! # Decisions
//!
//! - The subset of statsd_exporter's mapping language that names
//!   counters and histogram timers is supported: `mappings:` of `match`,
//!   `match_type` (`glob`, the default, or `regex`), `name`, `labels`,
//!   `action` (`map` or `drop`), `match_metric_type` (`counter` matches
//!   the counters, `observer` the timer, none both; `gauge` matches
//!   nothing: there are no gauges), `scale`, `buckets` (also under
//!   `histogram_options`), and `defaults:` `match_type` and `buckets`.
//! - A timer is always a histogram (`timer_type`/`observer_type`
//!   `histogram` or unset), also when no rule maps it: statsd_exporter
//!   makes an untyped timer a summary, but envoyproxy/ratelimit's own
//!   mapping asks for a histogram, which its dashboards read, and
//!   summaries cannot be aggregated.
//! - `summary` is refused, as is any key not applied here
//!   (`honor_labels`, `glob_disable_ordering`…), with its name: a mapping
//!   applied differently than statsd_exporter would is never applied
//!   silently. `quantiles`, `summary_options`, `ttl` and `help` are
//!   accepted without effect (they shape summaries, expiry and help only).
//! - Globs match as statsd_exporter's: `*` is one dot-free segment
//!   (possibly empty), the whole name must match, globs are tried before
//!   regular expressions, each kind in file order. Regular expressions
//!   are unanchored, as statsd_exporter's; `$1`, `${1}` and `$name` in
//!   `name` and `labels` expand as Go's `Regexp.Expand` (the `regex`
//!   crate's expansion has the same rules).

use std::collections::BTreeMap;

use regex::Regex;
use serde::Deserialize;

/// Which rules a stat is matched against (`match_metric_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatKind {
    /// A counter: rules without `match_metric_type` or with `counter`.
    Counter,
    /// The timer: rules without `match_metric_type` or with `observer`.
    Timer,
}

/// What a mapping makes of one stat it keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapped<'a> {
    /// The rule's name, expanded (else the stat's), not yet escaped.
    pub name: String,
    /// The rule's labels, expanded, by name.
    pub labels: BTreeMap<String, String>,
    /// What each observed value is multiplied by (`scale`, else 1).
    pub scale: f64,
    /// A histogram's upper bounds, ascending (`+Inf` implied): the rule's,
    /// else the file's `defaults`, else [`DEFAULT_BUCKETS`].
    pub buckets: &'a [f64],
}

/// A statsd_exporter mapping (see the module docs).
#[derive(Debug, Clone)]
pub struct Mapping {
    /// Glob rules first, then regular expression rules, each in file order.
    rules: Vec<Rule>,
    /// `defaults: buckets`, else Prometheus' default buckets.
    buckets: Vec<f64>,
}

#[derive(Debug, Clone)]
struct Rule {
    regex: Regex,
    name: String,
    labels: Vec<(String, String)>,
    drop: bool,
    /// `match_metric_type` unset or `counter`.
    counters: bool,
    /// `match_metric_type` unset or `observer`.
    observers: bool,
    /// `scale`: each observed value is multiplied by it.
    scale: Option<f64>,
    /// `buckets`: the histogram's upper bounds.
    buckets: Option<Vec<f64>>,
}

/// Prometheus' default histogram buckets (`prometheus.DefBuckets`), which
/// statsd_exporter uses when a mapping names none.
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Why a mapping file cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MappingError(String);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    defaults: RawDefaults,
    #[serde(default)]
    mappings: Vec<RawRule>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    match_type: Option<String>,
    timer_type: Option<String>,
    observer_type: Option<String>,
    buckets: Option<Vec<f64>>,
    histogram_options: Option<RawHistogramOptions>,
    // Shape summaries, expiry and help only (see the module docs).
    #[serde(default, rename = "quantiles")]
    _quantiles: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "summary_options")]
    _summary_options: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "ttl")]
    _ttl: Option<serde_yaml_ng::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(rename = "match")]
    pattern: String,
    match_type: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    action: Option<String>,
    match_metric_type: Option<String>,
    timer_type: Option<String>,
    observer_type: Option<String>,
    buckets: Option<Vec<f64>>,
    histogram_options: Option<RawHistogramOptions>,
    scale: Option<f64>,
    // Shape summaries, expiry and help only (see the module docs).
    #[serde(default, rename = "quantiles")]
    _quantiles: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "summary_options")]
    _summary_options: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "ttl")]
    _ttl: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "help")]
    _help: Option<serde_yaml_ng::Value>,
}

/// `histogram_options`: only its classic `buckets` shape a histogram here.
#[derive(Deserialize, Default)]
struct RawHistogramOptions {
    buckets: Option<Vec<f64>>,
    // Native histograms' settings: tollgate exports classic buckets only.
    #[serde(flatten)]
    _native: BTreeMap<String, serde_yaml_ng::Value>,
}

/// A timer's type: a histogram (the only kind kept), or refused.
fn histogram_only(
    timer_type: Option<&str>,
    observer_type: Option<&str>,
) -> Result<(), MappingError> {
    for (key, kind) in [("timer_type", timer_type), ("observer_type", observer_type)] {
        match kind {
            None | Some("" | "histogram") => {}
            Some(other) => {
                return Err(MappingError(format!(
                    "{key} {other:?}: only histogram timers are supported"
                )));
            }
        }
    }
    Ok(())
}

/// Checked bucket bounds: finite and ascending.
fn checked_buckets(buckets: Option<Vec<f64>>) -> Result<Option<Vec<f64>>, MappingError> {
    if let Some(bounds) = &buckets
        && (bounds.is_empty()
            || bounds.iter().any(|b| !b.is_finite())
            || bounds.windows(2).any(|w| w[0] >= w[1]))
    {
        return Err(MappingError(format!(
            "buckets {bounds:?}: expected finite bounds in ascending order"
        )));
    }
    Ok(buckets)
}

/// One rule of the default mapping: `(match, is a regex, name, labels)`.
type DefaultRule = (
    &'static str,
    bool,
    &'static str,
    &'static [(&'static str, &'static str)],
);

/// envoyproxy/ratelimit's default mapping, rule by rule.
const DEFAULT_RULES: &[DefaultRule] = &[
    (
        "ratelimit.service.rate_limit.*.*.near_limit",
        false,
        "ratelimit_service_rate_limit_near_limit",
        &[("domain", "$1"), ("key1", "$2")],
    ),
    (
        "ratelimit.service.rate_limit.*.*.over_limit",
        false,
        "ratelimit_service_rate_limit_over_limit",
        &[("domain", "$1"), ("key1", "$2")],
    ),
    (
        "ratelimit.service.rate_limit.*.*.total_hits",
        false,
        "ratelimit_service_rate_limit_total_hits",
        &[("domain", "$1"), ("key1", "$2")],
    ),
    (
        "ratelimit.service.rate_limit.*.*.within_limit",
        false,
        "ratelimit_service_rate_limit_within_limit",
        &[("domain", "$1"), ("key1", "$2")],
    ),
    (
        "ratelimit.service.rate_limit.*.*.shadow_mode",
        false,
        "ratelimit_service_rate_limit_shadow_mode",
        &[("domain", "$1"), ("key1", "$2")],
    ),
    (
        r"ratelimit\.service\.rate_limit\.([^\.]*)\.([^\.]*)\.([^\.]*)(\..*)?\.near_limit",
        true,
        "ratelimit_service_rate_limit_near_limit",
        &[("domain", "$1"), ("key1", "$2"), ("key2", "$3")],
    ),
    (
        r"ratelimit\.service\.rate_limit\.([^\.]*)\.([^\.]*)\.([^\.]*)(\..*)?\.over_limit",
        true,
        "ratelimit_service_rate_limit_over_limit",
        &[("domain", "$1"), ("key1", "$2"), ("key2", "$3")],
    ),
    (
        r"ratelimit\.service\.rate_limit\.([^\.]*)\.([^\.]*)\.([^\.]*)(\..*)?\.total_hits",
        true,
        "ratelimit_service_rate_limit_total_hits",
        &[("domain", "$1"), ("key1", "$2"), ("key2", "$3")],
    ),
    (
        r"ratelimit\.service\.rate_limit\.([^\.]*)\.([^\.]*)\.([^\.]*)(\..*)?\.within_limit",
        true,
        "ratelimit_service_rate_limit_within_limit",
        &[("domain", "$1"), ("key1", "$2"), ("key2", "$3")],
    ),
    (
        r"ratelimit\.service\.rate_limit\.([^\.]*)\.([^\.]*)\.([^\.]*)(\..*)?\.shadow_mode",
        true,
        "ratelimit_service_rate_limit_shadow_mode",
        &[("domain", "$1"), ("key1", "$2"), ("key2", "$3")],
    ),
    (
        "ratelimit.service.call.should_rate_limit.*",
        false,
        "ratelimit_service_should_rate_limit_error",
        &[("err_type", "$1")],
    ),
    (
        "ratelimit_server.*.total_requests",
        false,
        "ratelimit_service_total_requests",
        &[("grpc_method", "$1")],
    ),
    (
        "ratelimit.service.config_load_success",
        false,
        "ratelimit_service_config_load_success",
        &[],
    ),
    (
        "ratelimit.service.config_load_error",
        false,
        "ratelimit_service_config_load_error",
        &[],
    ),
];

impl Default for Mapping {
    /// envoyproxy/ratelimit's default mapping.
    fn default() -> Mapping {
        Mapping::lyft_default(false)
    }
}

impl Mapping {
    /// envoyproxy/ratelimit's default mapping; `response_time_in_ms`
    /// (`PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`) drops the response
    /// time's `scale: 0.001`, as its `mapperConfig` does.
    pub fn lyft_default(response_time_in_ms: bool) -> Mapping {
        let mut rules: Vec<Rule> = DEFAULT_RULES
            .iter()
            .map(|&(pattern, is_regex, name, labels)| Rule {
                // Constant patterns: they compile (a unit test builds them).
                regex: if is_regex {
                    Regex::new(pattern)
                } else {
                    glob_regex(pattern)
                }
                .unwrap_or_else(|error| unreachable!("{pattern}: {error}")),
                name: name.to_owned(),
                labels: labels
                    .iter()
                    .map(|&(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
                drop: false,
                counters: true,
                observers: true,
                scale: None,
                buckets: None,
            })
            .collect();
        let mut kinds: Vec<bool> = DEFAULT_RULES.iter().map(|rule| rule.1).collect();
        // `ratelimit_server.*.response_time`: a histogram in seconds.
        rules.push(Rule {
            regex: glob_regex("ratelimit_server.*.response_time")
                .unwrap_or_else(|error| unreachable!("{error}")),
            name: "ratelimit_service_response_time_seconds".to_owned(),
            labels: vec![("grpc_method".to_owned(), "$1".to_owned())],
            drop: false,
            counters: true,
            observers: true,
            scale: (!response_time_in_ms).then_some(0.001),
            buckets: None,
        });
        kinds.push(false);
        Mapping::ordered(rules, kinds, DEFAULT_BUCKETS.to_vec())
    }
}

/// A glob as an anchored regular expression: `*` is `([^.]*)`.
fn glob_regex(glob: &str) -> Result<Regex, regex::Error> {
    let pattern = glob
        .split('*')
        .map(regex::escape)
        .collect::<Vec<_>>()
        .join("([^.]*)");
    Regex::new(&format!("^{pattern}$"))
}

impl Mapping {
    /// Globs before regular expressions, each kind in file order.
    fn ordered(rules: Vec<Rule>, is_regex: Vec<bool>, buckets: Vec<f64>) -> Mapping {
        let (mut globs, mut regexes) = (Vec::new(), Vec::new());
        for (rule, is_regex) in rules.into_iter().zip(is_regex) {
            if is_regex {
                regexes.push(rule);
            } else {
                globs.push(rule);
            }
        }
        globs.extend(regexes);
        Mapping {
            rules: globs,
            buckets,
        }
    }

    /// Reads a statsd_exporter mapping file's text.
    ///
    /// # Errors
    ///
    /// [`MappingError`] for a file that is not such a mapping, a key this
    /// module does not apply, a bad pattern, or a rule without a name.
    pub fn from_yaml(text: &str) -> Result<Mapping, MappingError> {
        let raw: RawFile =
            serde_yaml_ng::from_str(text).map_err(|error| MappingError(error.to_string()))?;
        let default_regex = match raw.defaults.match_type.as_deref() {
            None | Some("glob") | Some("") => false,
            Some("regex") => true,
            Some(other) => {
                return Err(MappingError(format!(
                    "defaults: match_type {other:?}: expected glob or regex"
                )));
            }
        };
        histogram_only(
            raw.defaults.timer_type.as_deref(),
            raw.defaults.observer_type.as_deref(),
        )
        .map_err(|e| MappingError(format!("defaults: {e}")))?;
        let buckets = checked_buckets(raw.defaults.buckets.or_else(|| {
            raw.defaults
                .histogram_options
                .and_then(|options| options.buckets)
        }))
        .map_err(|e| MappingError(format!("defaults: {e}")))?
        .unwrap_or_else(|| DEFAULT_BUCKETS.to_vec());
        let mut rules = Vec::with_capacity(raw.mappings.len());
        let mut kinds = Vec::with_capacity(raw.mappings.len());
        for (i, rule) in raw.mappings.into_iter().enumerate() {
            let at = |message: String| {
                MappingError(format!("mappings[{i}] ({}): {message}", rule.pattern))
            };
            let is_regex = match rule.match_type.as_deref() {
                None | Some("") => default_regex,
                Some("glob") => false,
                Some("regex") => true,
                Some(other) => {
                    return Err(at(format!("match_type {other:?}: expected glob or regex")));
                }
            };
            let drop = match rule.action.as_deref() {
                None | Some("") | Some("map") => false,
                Some("drop") => true,
                Some(other) => return Err(at(format!("action {other:?}: expected map or drop"))),
            };
            let (counters, observers) = match rule.match_metric_type.as_deref() {
                None | Some("") => (true, true),
                Some("counter") => (true, false),
                Some("observer") => (false, true),
                Some("gauge") => (false, false),
                Some(other) => {
                    return Err(at(format!(
                        "match_metric_type {other:?}: expected counter, gauge or observer"
                    )));
                }
            };
            histogram_only(rule.timer_type.as_deref(), rule.observer_type.as_deref())
                .map_err(|e| at(e.to_string()))?;
            let rule_buckets = checked_buckets(
                rule.buckets
                    .or_else(|| rule.histogram_options.and_then(|options| options.buckets)),
            )
            .map_err(|e| at(e.to_string()))?;
            if rule.scale.is_some_and(|scale| !scale.is_finite()) {
                return Err(at("scale: expected a finite number".to_owned()));
            }
            if rule.name.is_empty() && !drop {
                return Err(at("a mapping needs a name".to_owned()));
            }
            let regex = if is_regex {
                Regex::new(&rule.pattern)
            } else {
                glob_regex(&rule.pattern)
            }
            .map_err(|error| at(error.to_string()))?;
            rules.push(Rule {
                regex,
                name: rule.name,
                labels: rule.labels.into_iter().collect(),
                drop,
                counters,
                observers,
                scale: rule.scale,
                buckets: rule_buckets,
            });
            kinds.push(is_regex);
        }
        Ok(Mapping::ordered(rules, kinds, buckets))
    }

    /// What the first rule for a `kind` of stat matching `stat` makes of
    /// it: `None` if that rule drops it; its name, labels, scale and
    /// buckets if it maps it; the stat's own name, no labels, a scale of 1
    /// and the default buckets if no rule matches.
    pub fn apply(&self, stat: &str, kind: StatKind) -> Option<Mapped<'_>> {
        let of_kind = |rule: &&Rule| match kind {
            StatKind::Counter => rule.counters,
            StatKind::Timer => rule.observers,
        };
        for rule in self.rules.iter().filter(of_kind) {
            let Some(caps) = rule.regex.captures(stat) else {
                continue;
            };
            if rule.drop {
                return None;
            }
            let expand = |template: &str| {
                let mut out = String::new();
                caps.expand(template, &mut out);
                out
            };
            return Some(Mapped {
                name: expand(&rule.name),
                labels: rule
                    .labels
                    .iter()
                    .map(|(name, value)| (name.clone(), expand(value)))
                    .collect(),
                scale: rule.scale.unwrap_or(1.0),
                buckets: rule.buckets.as_deref().unwrap_or(&self.buckets),
            });
        }
        Some(Mapped {
            name: stat.to_owned(),
            labels: BTreeMap::new(),
            scale: 1.0,
            buckets: &self.buckets,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped<'a>(name: &str, labels: &[(&str, &str)], buckets: &'a [f64]) -> Option<Mapped<'a>> {
        Some(Mapped {
            name: name.to_owned(),
            labels: labels
                .iter()
                .map(|&(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            scale: 1.0,
            buckets,
        })
    }

    #[test]
    fn the_default_mapping_names_as_envoyproxy_ratelimit() {
        let m = Mapping::default();
        let counter = |stat| m.apply(stat, StatKind::Counter);
        let b = &DEFAULT_BUCKETS[..];
        assert_eq!(
            counter("ratelimit.service.rate_limit.weekly.user.total_hits"),
            mapped(
                "ratelimit_service_rate_limit_total_hits",
                &[("domain", "weekly"), ("key1", "user")],
                b
            )
        );
        assert_eq!(
            counter("ratelimit.service.rate_limit.d.a_1.b.c_3.over_limit"),
            mapped(
                "ratelimit_service_rate_limit_over_limit",
                &[("domain", "d"), ("key1", "a_1"), ("key2", "b")],
                b
            )
        );
        assert_eq!(
            counter("ratelimit.service.config_load_success"),
            mapped("ratelimit_service_config_load_success", &[], b)
        );
        assert_eq!(
            counter("ratelimit_server.ShouldRateLimit.total_requests"),
            mapped(
                "ratelimit_service_total_requests",
                &[("grpc_method", "ShouldRateLimit")],
                b
            )
        );
        // Unmapped: the stat's own name.
        assert_eq!(
            counter("ratelimit.service.global_shadow_mode"),
            mapped("ratelimit.service.global_shadow_mode", &[], b)
        );
    }

    #[test]
    fn a_mapping_file_maps_drops_and_refuses_what_it_cannot_apply() {
        let m = Mapping::from_yaml(
            r#"
mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "hits"
    timer_type: histogram
    labels: {d: "$1", k: "${2}x"}
  - match: "ratelimit\\.service\\.rate_limit\\..*\\.over_limit"
    match_type: regex
    action: drop
"#,
        )
        .expect("a mapping");
        assert_eq!(
            m.apply(
                "ratelimit.service.rate_limit.a.b.total_hits",
                StatKind::Counter
            ),
            mapped("hits", &[("d", "a"), ("k", "bx")], &DEFAULT_BUCKETS)
        );
        assert_eq!(
            m.apply(
                "ratelimit.service.rate_limit.a.b.over_limit",
                StatKind::Counter
            ),
            None
        );
        let error =
            Mapping::from_yaml("mappings:\n  - match: a.*\n    name: x\n    honor_labels: true\n")
                .expect_err("unknown key");
        assert!(error.to_string().contains("honor_labels"), "{error}");
        let error = Mapping::from_yaml("mappings:\n  - match: a.*\n").expect_err("no name");
        assert!(error.to_string().contains("name"), "{error}");
    }

    #[test]
    fn timers_map_to_histograms_with_scale_and_buckets() {
        let stat = "ratelimit_server.ShouldRateLimit.response_time";
        let default = Mapping::default();
        let lyft = default.apply(stat, StatKind::Timer).expect("mapped");
        assert_eq!(lyft.name, "ratelimit_service_response_time_seconds");
        assert_eq!(lyft.scale, 0.001);
        assert_eq!(lyft.buckets, DEFAULT_BUCKETS);
        assert_eq!(
            Mapping::lyft_default(true)
                .apply(stat, StatKind::Timer)
                .expect("mapped")
                .scale,
            1.0
        );
        let file = Mapping::from_yaml(
            r#"
defaults: {buckets: [1, 2]}
mappings:
  - match: "ratelimit_server.*.total_requests"
    name: "calls"
    match_metric_type: counter
  - match: "ratelimit_server.*.response_time"
    name: "rt_ms"
    match_metric_type: observer
    observer_type: histogram
    histogram_options: {buckets: [5, 50, 500]}
    labels: {method: "$1"}
"#,
        )
        .expect("a mapping");
        assert_eq!(
            file.apply(stat, StatKind::Timer),
            mapped(
                "rt_ms",
                &[("method", "ShouldRateLimit")],
                &[5.0, 50.0, 500.0]
            )
        );
        // A counter rule does not name the timer, nor an observer rule a counter.
        assert_eq!(
            file.apply(stat, StatKind::Counter),
            mapped(stat, &[], &[1.0, 2.0])
        );
        assert_eq!(
            file.apply("ratelimit_server.X.total_requests", StatKind::Timer),
            mapped("ratelimit_server.X.total_requests", &[], &[1.0, 2.0])
        );
        // Unmapped: the stat's name, the file's default buckets.
        let bare = Mapping::from_yaml("defaults: {buckets: [1, 2]}\nmappings: []\n").expect("bare");
        assert_eq!(
            bare.apply(stat, StatKind::Timer),
            mapped(stat, &[], &[1.0, 2.0])
        );
        // A dropped timer is not exported.
        let drop = Mapping::from_yaml(
            "mappings:\n  - match: ratelimit_server.*.response_time\n    action: drop\n",
        )
        .expect("drop");
        assert_eq!(drop.apply(stat, StatKind::Timer), None);
        // What this module would export differently is refused, named.
        for (yaml, named) in [
            (
                "mappings:\n  - match: a.*\n    name: x\n    timer_type: summary\n",
                "timer_type",
            ),
            (
                "defaults: {observer_type: summary}\nmappings: []\n",
                "observer_type",
            ),
            (
                "mappings:\n  - match: a.*\n    name: x\n    buckets: [2, 1]\n",
                "buckets",
            ),
        ] {
            let error = Mapping::from_yaml(yaml).expect_err(yaml);
            assert!(error.to_string().contains(named), "{error}");
        }
    }
}
