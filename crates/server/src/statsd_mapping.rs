//! statsd_exporter's metric mapping: how envoyproxy/ratelimit turns its
//! StatsD stat names into Prometheus names and labels (`USE_PROMETHEUS`,
//! `PROMETHEUS_MAPPER_YAML`).
//!
//! envoyproxy/ratelimit embeds statsd_exporter and feeds it its stats;
//! its default mapping (`src/stats/prom/default_mapper.yaml`) names the
//! per-rule stats `ratelimit_service_rate_limit_<stat>` with labels
//! `domain`, `key1` (a two-part key) or `domain`, `key1`, `key2` (three
//! parts or more: the first two entries), `ratelimit_service_config_load_
//! {success,error}`, `ratelimit_service_should_rate_limit_error{err_type}`
//! and `ratelimit_service_total_requests{grpc_method}`. A stat no mapping
//! matches keeps its name, escaped (every character outside
//! `[a-zA-Z0-9_]` becomes `_`), as statsd_exporter does.
//!
//! [`Mapping::default`] is that default mapping, restated here as rules
//! (the same globs and regular expressions, in the same order).
//! [`Mapping::from_yaml`] reads a statsd_exporter mapping file.
//!
//! # Decisions
//!
//! - The subset of statsd_exporter's mapping language that names
//!   counters is supported: `mappings:` of `match`, `match_type` (`glob`,
//!   the default, or `regex`), `name`, `labels`, `action` (`map` or
//!   `drop`), `match_metric_type` (a mapping for `gauge` or `observer`
//!   matches nothing here: every stat is a counter), and `defaults:
//!   match_type`. Keys that only shape timers or gauges (`timer_type`,
//!   `observer_type`, `buckets`, `quantiles`, `histogram_options`,
//!   `summary_options`, `scale`, `ttl`, `help`) are accepted and have no
//!   effect on counters. Any other key (`honor_labels`, `glob_disable_
//!   ordering`…) is refused with its name: a mapping this module would
//!   apply differently than statsd_exporter is never applied silently.
//! - Globs are matched as statsd_exporter's: `*` is one dot-free segment
//!   (possibly empty), the whole name must match, globs are tried before
//!   regular expressions, each kind in file order. Regular expressions
//!   are unanchored, as statsd_exporter's; `$1`, `${1}` and `$name` in
//!   `name` and `labels` expand as Go's `Regexp.Expand` (the Rust `regex`
//!   crate's expansion has the same rules).

use std::collections::BTreeMap;

use regex::Regex;
use serde::Deserialize;

/// A Prometheus series: a name and its labels, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Series {
    /// The metric name.
    pub name: String,
    /// The labels, by name.
    pub labels: BTreeMap<String, String>,
}

/// A statsd_exporter mapping (see the module docs).
#[derive(Debug, Clone)]
pub struct Mapping {
    /// Glob rules first, then regular expression rules, each in file order.
    rules: Vec<Rule>,
}

#[derive(Debug, Clone)]
struct Rule {
    regex: Regex,
    name: String,
    labels: Vec<(String, String)>,
    drop: bool,
    /// `match_metric_type` other than `counter`: never matches a counter.
    counters: bool,
}

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
    // Shape timers and gauges only (see the module docs).
    #[serde(default, rename = "timer_type")]
    _timer_type: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "observer_type")]
    _observer_type: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "buckets")]
    _buckets: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "quantiles")]
    _quantiles: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "histogram_options")]
    _histogram_options: Option<serde_yaml_ng::Value>,
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
    // Shape timers and gauges only (see the module docs).
    #[serde(default, rename = "timer_type")]
    _timer_type: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "observer_type")]
    _observer_type: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "buckets")]
    _buckets: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "quantiles")]
    _quantiles: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "histogram_options")]
    _histogram_options: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "summary_options")]
    _summary_options: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "scale")]
    _scale: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "ttl")]
    _ttl: Option<serde_yaml_ng::Value>,
    #[serde(default, rename = "help")]
    _help: Option<serde_yaml_ng::Value>,
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
        let rules = DEFAULT_RULES
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
            })
            .collect();
        Mapping::ordered(rules, DEFAULT_RULES.iter().map(|rule| rule.1).collect())
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
    fn ordered(rules: Vec<Rule>, is_regex: Vec<bool>) -> Mapping {
        let (mut globs, mut regexes) = (Vec::new(), Vec::new());
        for (rule, is_regex) in rules.into_iter().zip(is_regex) {
            if is_regex {
                regexes.push(rule);
            } else {
                globs.push(rule);
            }
        }
        globs.extend(regexes);
        Mapping { rules: globs }
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
            let counters = match rule.match_metric_type.as_deref() {
                None | Some("") | Some("counter") => true,
                Some("gauge" | "observer") => false,
                Some(other) => {
                    return Err(at(format!(
                        "match_metric_type {other:?}: expected counter, gauge or observer"
                    )));
                }
            };
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
            });
            kinds.push(is_regex);
        }
        Ok(Mapping::ordered(rules, kinds))
    }

    /// The series of the counter `stat`, or `None` if a rule drops it.
    pub fn map(&self, stat: &str) -> Option<Series> {
        for rule in self.rules.iter().filter(|rule| rule.counters) {
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
            return Some(Series {
                name: escape_name(&expand(&rule.name)),
                labels: rule
                    .labels
                    .iter()
                    .map(|(name, value)| (name.clone(), expand(value)))
                    .collect(),
            });
        }
        Some(Series {
            name: escape_name(stat),
            labels: BTreeMap::new(),
        })
    }
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

    fn series(name: &str, labels: &[(&str, &str)]) -> Option<Series> {
        Some(Series {
            name: name.to_owned(),
            labels: labels
                .iter()
                .map(|&(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        })
    }

    #[test]
    fn the_default_mapping_names_as_envoyproxy_ratelimit() {
        let m = Mapping::default();
        assert_eq!(
            m.map("ratelimit.service.rate_limit.weekly.user.total_hits"),
            series(
                "ratelimit_service_rate_limit_total_hits",
                &[("domain", "weekly"), ("key1", "user")]
            )
        );
        assert_eq!(
            m.map("ratelimit.service.rate_limit.d.a_1.b.c_3.over_limit"),
            series(
                "ratelimit_service_rate_limit_over_limit",
                &[("domain", "d"), ("key1", "a_1"), ("key2", "b")]
            )
        );
        assert_eq!(
            m.map("ratelimit.service.config_load_success"),
            series("ratelimit_service_config_load_success", &[])
        );
        assert_eq!(
            m.map("ratelimit_server.ShouldRateLimit.total_requests"),
            series(
                "ratelimit_service_total_requests",
                &[("grpc_method", "ShouldRateLimit")]
            )
        );
        // Unmapped: the name, escaped.
        assert_eq!(
            m.map("ratelimit.service.global_shadow_mode"),
            series("ratelimit_service_global_shadow_mode", &[])
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
            m.map("ratelimit.service.rate_limit.a.b.total_hits"),
            series("hits", &[("d", "a"), ("k", "bx")])
        );
        assert_eq!(m.map("ratelimit.service.rate_limit.a.b.over_limit"), None);
        let error =
            Mapping::from_yaml("mappings:\n  - match: a.*\n    name: x\n    honor_labels: true\n")
                .expect_err("unknown key");
        assert!(error.to_string().contains("honor_labels"), "{error}");
        let error = Mapping::from_yaml("mappings:\n  - match: a.*\n").expect_err("no name");
        assert!(error.to_string().contains("name"), "{error}");
    }

    #[test]
    fn names_are_escaped_as_statsd_exporter() {
        assert_eq!(escape_name("1a.b-c"), "_1a_b_c");
    }
}
