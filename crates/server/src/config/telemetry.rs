//! Where the server's stats go: envoyproxy/ratelimit's stats variables,
//! read into a typed [`TelemetrySettings`].
//!
//! | variable | envoyproxy/ratelimit's default | here |
//! |---|---|---|
//! | `USE_STATSD` | `true` | StatsD lines over TCP, as its `gostats` TCP sink |
//! | `STATSD_HOST`, `STATSD_PORT` | `localhost`, `8125` | the StatsD (or DogStatsD) target |
//! | `EXTRA_TAGS` | none | `k1:v1,k2:v2`: tags on every stat (`.__k=v` in StatsD names, `|#k:v` in DogStatsD) |
//! | `STATS_FLUSH_INTERVAL` | `10s` | a Go duration: how often counters' deltas are sent |
//! | `USE_DOG_STATSD` | `false` | DogStatsD lines over UDP |
//! | `USE_DOG_STATSD_MOGRIFIERS` | none | refused when set: not supported |
//! | `DISABLE_STATS` | `false` | no sink at all |
//! | `USE_PROMETHEUS` | `false` | a Prometheus listener of its own |
//! | `PROMETHEUS_ADDR`, `PROMETHEUS_PATH` | `:9090`, `/metrics` | where it listens |
//! | `PROMETHEUS_MAPPER_YAML` | the built-in mapping | a statsd_exporter mapping file ([`super::statsd_mapping`]) |
//! | `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS` | `false` | `true`: the built-in mapping's `ratelimit_service_response_time_seconds` observes milliseconds (its scale 0.001 dropped, the name kept, as envoyproxy/ratelimit); no effect with `PROMETHEUS_MAPPER_YAML` |
//! | `NEAR_LIMIT_RATIO` | `0.8` | the `near_limit` threshold, a fraction of the limit |
//! | `TRACING_ENABLED` | `false` | OTLP traces: a span per decision ([`crate::traces`]) |
//! | `TRACING_EXPORTER_PROTOCOL` | `http` | `http` (protobuf, `…/v1/traces`) or `grpc` |
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | `http://localhost:4318` (`http`), `http://localhost:4317` (`grpc`) | the collector; `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is) wins |
//! | `TRACING_SERVICE_NAME`, `_NAMESPACE`, `_INSTANCE_ID` | `RateLimit`, none, a random id | the spans' resource |
//! | `TRACING_SAMPLING_RATE` | `1` | the share of root spans kept (parent-based) |
//!
//! As envoyproxy/ratelimit, at most one of `USE_STATSD`, `USE_DOG_STATSD`
//! and `USE_PROMETHEUS` may be true (so `USE_STATSD=false` goes with
//! either of the others), and `DISABLE_STATS=true` turns all off.
//!
//! # Decisions
//!
//! - A variable set to the empty string counts as unset (its default).
//! - A bad value is refused at start with the variable's name
//!   ([`TelemetryError`]), where envoyproxy/ratelimit panics or, for
//!   `PROMETHEUS_MAPPER_YAML`, silently keeps its default mapping.
//! - [`TelemetrySettings::default`] is tollgate's behaviour when it runs
//!   from its own YAML: no StatsD, no Prometheus listener (its `/metrics`
//!   is on the HTTP listener), the near-limit ratio 0.8.

use std::path::PathBuf;
use std::time::Duration;

use super::statsd_mapping::Mapping;

/// How StatsD lines travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsdFlavor {
    /// Plain StatsD over TCP (`gostats`' TCP sink): tags in the name.
    Statsd,
    /// DogStatsD over UDP (`datadog-go`): tags after `|#`.
    DogStatsd,
}

/// The StatsD sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsdSettings {
    /// `STATSD_HOST`.
    pub host: String,
    /// `STATSD_PORT`.
    pub port: u16,
    /// `USE_STATSD` or `USE_DOG_STATSD`.
    pub flavor: StatsdFlavor,
    /// `EXTRA_TAGS`, sorted by name, values with `.`, `:` and `|` made
    /// `_` (as `gostats`); tags with an empty name or value dropped.
    pub extra_tags: Vec<(String, String)>,
}

/// How OTLP spans travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/gRPC.
    Grpc,
    /// OTLP/HTTP, protobuf bodies.
    Http,
}

/// OTLP traces (`TRACING_ENABLED=true`).
#[derive(Debug, Clone, PartialEq)]
pub struct TracingSettings {
    /// `TRACING_EXPORTER_PROTOCOL`.
    pub protocol: OtlpProtocol,
    /// The URL spans are sent to: for HTTP the full URL (`…/v1/traces`),
    /// for gRPC the collector's address.
    pub endpoint: String,
    /// `TRACING_SERVICE_NAME`.
    pub service_name: String,
    /// `TRACING_SERVICE_NAMESPACE` (empty: none).
    pub service_namespace: String,
    /// `TRACING_SERVICE_INSTANCE_ID` (empty: a random id at start).
    pub service_instance_id: String,
    /// `TRACING_SAMPLING_RATE`, 0 to 1.
    pub sampling_rate: f64,
}

/// The Prometheus listener of its own.
#[derive(Debug, Clone)]
pub struct PrometheusSettings {
    /// `PROMETHEUS_ADDR`, with Go's `:port` (every interface) written
    /// `0.0.0.0:port`.
    pub addr: String,
    /// `PROMETHEUS_PATH`.
    pub path: String,
}

/// Where the stats go, and how `near_limit` is counted.
#[derive(Debug, Clone)]
pub struct TelemetrySettings {
    /// The StatsD sink, if any. By default, none.
    pub statsd: Option<StatsdSettings>,
    /// The Prometheus listener of its own, if any. By default, none.
    pub prometheus: Option<PrometheusSettings>,
    /// How StatsD and Prometheus name envoyproxy/ratelimit's stats. By
    /// default, envoyproxy/ratelimit's built-in mapping.
    pub mapping: Mapping,
    /// How often StatsD gets the counters' deltas. By default, 10 s.
    pub flush_interval: Duration,
    /// A decision counts as near the limit above `floor(limit × ratio)`
    /// permits in use. By default, 0.8.
    pub near_limit_ratio: f32,
    /// OTLP traces, if any. By default, none.
    pub tracing: Option<TracingSettings>,
}

impl Default for TelemetrySettings {
    fn default() -> TelemetrySettings {
        TelemetrySettings {
            statsd: None,
            prometheus: None,
            mapping: Mapping::default(),
            flush_interval: Duration::from_secs(10),
            near_limit_ratio: 0.8,
            tracing: None,
        }
    }
}

/// A telemetry variable with a value that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{variable}={value:?}: {reason}")]
pub struct TelemetryError {
    /// The variable.
    pub variable: &'static str,
    /// Its value.
    pub value: String,
    /// Why it cannot be used.
    pub reason: String,
}

impl TelemetrySettings {
    /// Reads envoyproxy/ratelimit's stats variables through `lookup` (the
    /// process environment in production: `|name| std::env::var(name).ok()`),
    /// with its defaults.
    ///
    /// # Errors
    ///
    /// [`TelemetryError`] naming the first variable with a bad value, a
    /// combination envoyproxy/ratelimit refuses, or a feature not
    /// supported (`USE_DOG_STATSD_MOGRIFIERS`).
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<TelemetrySettings, TelemetryError> {
        let get = |name: &str| lookup(name).filter(|value| !value.is_empty());
        let bool_var = |name: &'static str, default: bool| match get(name) {
            None => Ok(default),
            Some(value) => parse_go_bool(&value).ok_or_else(|| TelemetryError {
                variable: name,
                value,
                reason: "expected true or false".to_owned(),
            }),
        };
        let tracing = if bool_var("TRACING_ENABLED", false)? {
            Some(tracing_settings(&get)?)
        } else {
            None
        };
        if let Some(value) = get("USE_DOG_STATSD_MOGRIFIERS") {
            return Err(TelemetryError {
                variable: "USE_DOG_STATSD_MOGRIFIERS",
                value,
                reason: "DogStatsD mogrifiers are not supported by tollgate; unset it".to_owned(),
            });
        }
        let response_time_in_ms = bool_var("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", false)?;
        let disabled = bool_var("DISABLE_STATS", false)?;
        let use_statsd = bool_var("USE_STATSD", true)?;
        let use_dog = bool_var("USE_DOG_STATSD", false)?;
        let use_prometheus = bool_var("USE_PROMETHEUS", false)?;

        let flush_interval = match get("STATS_FLUSH_INTERVAL") {
            None => Duration::from_secs(10),
            Some(value) => match parse_go_duration(&value) {
                Some(interval) if !interval.is_zero() => interval,
                _ => {
                    return Err(TelemetryError {
                        variable: "STATS_FLUSH_INTERVAL",
                        value,
                        reason: "expected a positive Go duration such as 10s or 500ms".to_owned(),
                    });
                }
            },
        };
        let near_limit_ratio = match get("NEAR_LIMIT_RATIO") {
            None => 0.8,
            Some(value) => match value.trim().parse::<f32>() {
                Ok(ratio) if (0.0..=1.0).contains(&ratio) => ratio,
                _ => {
                    return Err(TelemetryError {
                        variable: "NEAR_LIMIT_RATIO",
                        value,
                        reason: "expected a number from 0 to 1".to_owned(),
                    });
                }
            },
        };
        let mapping = match get("PROMETHEUS_MAPPER_YAML") {
            // As envoyproxy/ratelimit, the flag edits its built-in mapping
            // only; a mapping file says its own scale.
            None => Mapping::lyft_default(response_time_in_ms),
            Some(path) => {
                let error = |reason: String| TelemetryError {
                    variable: "PROMETHEUS_MAPPER_YAML",
                    value: path.clone(),
                    reason,
                };
                let text = std::fs::read_to_string(PathBuf::from(&path))
                    .map_err(|e| error(format!("cannot read the file: {e}")))?;
                Mapping::from_yaml(&text).map_err(|e| error(e.to_string()))?
            }
        };
        let extra_tags =
            parse_tags(get("EXTRA_TAGS").as_deref().unwrap_or("")).map_err(|reason| {
                TelemetryError {
                    variable: "EXTRA_TAGS",
                    value: get("EXTRA_TAGS").unwrap_or_default(),
                    reason,
                }
            })?;
        let host = get("STATSD_HOST").unwrap_or_else(|| "localhost".to_owned());
        let port = match get("STATSD_PORT") {
            None => 8125,
            Some(value) => value.trim().parse::<u16>().map_err(|_| TelemetryError {
                variable: "STATSD_PORT",
                value,
                reason: "expected a port number".to_owned(),
            })?,
        };
        let prometheus_addr = get("PROMETHEUS_ADDR").unwrap_or_else(|| ":9090".to_owned());
        let prometheus_path = get("PROMETHEUS_PATH").unwrap_or_else(|| "/metrics".to_owned());
        if !prometheus_path.starts_with('/') {
            return Err(TelemetryError {
                variable: "PROMETHEUS_PATH",
                value: prometheus_path,
                reason: "expected a path starting with /".to_owned(),
            });
        }

        let mut settings = TelemetrySettings {
            tracing,
            mapping,
            flush_interval,
            near_limit_ratio,
            ..TelemetrySettings::default()
        };
        if disabled {
            return Ok(settings);
        }
        let chosen = [
            (use_dog, "USE_DOG_STATSD"),
            (use_statsd, "USE_STATSD"),
            (use_prometheus, "USE_PROMETHEUS"),
        ];
        if chosen.iter().filter(|(on, _)| *on).count() > 1 {
            let names: Vec<&str> = chosen.iter().filter(|c| c.0).map(|c| c.1).collect();
            return Err(TelemetryError {
                variable: if use_statsd {
                    "USE_STATSD"
                } else {
                    "USE_DOG_STATSD"
                },
                value: "true".to_owned(),
                reason: format!(
                    "only one stats sink at a time, but {} are true (USE_STATSD defaults to true: set USE_STATSD=false)",
                    names.join(" and ")
                ),
            });
        }
        if use_dog || use_statsd {
            settings.statsd = Some(StatsdSettings {
                host,
                port,
                flavor: if use_dog {
                    StatsdFlavor::DogStatsd
                } else {
                    StatsdFlavor::Statsd
                },
                extra_tags,
            });
        } else if use_prometheus {
            let addr = if prometheus_addr.starts_with(':') {
                format!("0.0.0.0{prometheus_addr}")
            } else {
                prometheus_addr.clone()
            };
            if addr
                .rsplit_once(':')
                .is_none_or(|(_, port)| port.parse::<u16>().is_err())
            {
                return Err(TelemetryError {
                    variable: "PROMETHEUS_ADDR",
                    value: prometheus_addr,
                    reason: "expected host:port or :port".to_owned(),
                });
            }
            settings.prometheus = Some(PrometheusSettings {
                addr,
                path: prometheus_path,
            });
        }
        Ok(settings)
    }
}

/// The `TRACING_*` and `OTEL_EXPORTER_OTLP_*` variables.
fn tracing_settings(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<TracingSettings, TelemetryError> {
    let protocol = match get("TRACING_EXPORTER_PROTOCOL") {
        None => OtlpProtocol::Http,
        Some(value) => match value.to_ascii_lowercase().as_str() {
            "http" => OtlpProtocol::Http,
            "grpc" => OtlpProtocol::Grpc,
            _ => {
                return Err(TelemetryError {
                    variable: "TRACING_EXPORTER_PROTOCOL",
                    value,
                    reason: "expected http or grpc".to_owned(),
                });
            }
        },
    };
    let (variable, endpoint) = match (get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), protocol) {
        (Some(endpoint), _) => ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint),
        (None, OtlpProtocol::Grpc) => (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            get("OTEL_EXPORTER_OTLP_ENDPOINT")
                .unwrap_or_else(|| "http://localhost:4317".to_owned()),
        ),
        (None, OtlpProtocol::Http) => {
            let base = get("OTEL_EXPORTER_OTLP_ENDPOINT")
                .unwrap_or_else(|| "http://localhost:4318".to_owned());
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("{}/v1/traces", base.trim_end_matches('/')),
            )
        }
    };
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err(TelemetryError {
            variable,
            value: endpoint,
            reason: "expected an http:// or https:// URL".to_owned(),
        });
    }
    let sampling_rate = match get("TRACING_SAMPLING_RATE") {
        None => 1.0,
        Some(value) => match value.trim().parse::<f64>() {
            Ok(rate) if rate.is_finite() => rate.clamp(0.0, 1.0),
            _ => {
                return Err(TelemetryError {
                    variable: "TRACING_SAMPLING_RATE",
                    value,
                    reason: "expected a number (0: none, 1: all)".to_owned(),
                });
            }
        },
    };
    Ok(TracingSettings {
        protocol,
        endpoint,
        service_name: get("TRACING_SERVICE_NAME").unwrap_or_else(|| "RateLimit".to_owned()),
        service_namespace: get("TRACING_SERVICE_NAMESPACE").unwrap_or_default(),
        service_instance_id: get("TRACING_SERVICE_INSTANCE_ID").unwrap_or_default(),
        sampling_rate,
    })
}

use crate::config::go_syntax::parse_bool as parse_go_bool;

/// Go's `time.ParseDuration` for non-negative durations (see
/// [`crate::config::go_syntax`]).
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    crate::config::go_syntax::parse_duration(text).ok()
}

/// `EXTRA_TAGS` (envconfig's map: `k1:v1,k2:v2`), as `gostats` keeps them.
fn parse_tags(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut tags = std::collections::BTreeMap::new();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    for pair in text.split(',') {
        let Some((name, value)) = pair.split_once(':') else {
            return Err(format!("{pair:?} is not name:value"));
        };
        if !name.is_empty() && !value.is_empty() {
            tags.insert(name.to_owned(), value.replace(['.', ':', '|'], "_"));
        }
    }
    Ok(tags.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<TelemetrySettings, TelemetryError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|&(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        TelemetrySettings::from_lookup(|name| vars.get(name).cloned())
    }

    #[test]
    fn envoyproxy_ratelimit_defaults_send_statsd_to_localhost() {
        let settings = from(&[]).expect("defaults");
        assert_eq!(
            settings.statsd,
            Some(StatsdSettings {
                host: "localhost".to_owned(),
                port: 8125,
                flavor: StatsdFlavor::Statsd,
                extra_tags: vec![],
            })
        );
        assert!(settings.prometheus.is_none());
        assert_eq!(settings.flush_interval, Duration::from_secs(10));
        assert_eq!(settings.near_limit_ratio, 0.8);
        // tollgate's own default (its YAML): no sink.
        assert!(TelemetrySettings::default().statsd.is_none());
    }

    #[test]
    fn reads_every_variable() {
        let settings = from(&[
            ("USE_STATSD", "false"),
            ("USE_DOG_STATSD", "true"),
            ("STATSD_HOST", "dd"),
            ("STATSD_PORT", "9125"),
            ("EXTRA_TAGS", "zone:eu.1,app:rl"),
            ("STATS_FLUSH_INTERVAL", "1m30s"),
            ("NEAR_LIMIT_RATIO", "0.5"),
        ])
        .expect("settings");
        assert_eq!(
            settings.statsd,
            Some(StatsdSettings {
                host: "dd".to_owned(),
                port: 9125,
                flavor: StatsdFlavor::DogStatsd,
                extra_tags: vec![
                    ("app".to_owned(), "rl".to_owned()),
                    ("zone".to_owned(), "eu_1".to_owned())
                ],
            })
        );
        assert_eq!(settings.flush_interval, Duration::from_secs(90));
        assert_eq!(settings.near_limit_ratio, 0.5);
        let settings = from(&[
            ("USE_STATSD", "false"),
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_ADDR", ":19090"),
            ("PROMETHEUS_PATH", "/m"),
        ])
        .expect("settings");
        let prometheus = settings.prometheus.expect("prometheus");
        assert_eq!(prometheus.addr, "0.0.0.0:19090");
        assert_eq!(prometheus.path, "/m");
        assert!(settings.statsd.is_none());
        assert!(
            from(&[("DISABLE_STATS", "true")])
                .expect("settings")
                .statsd
                .is_none()
        );
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (vars, variable) in [
            (&[("USE_STATSD", "yes")][..], "USE_STATSD"),
            (&[("STATSD_PORT", "70000")], "STATSD_PORT"),
            (&[("STATS_FLUSH_INTERVAL", "10")], "STATS_FLUSH_INTERVAL"),
            (&[("NEAR_LIMIT_RATIO", "1.5")], "NEAR_LIMIT_RATIO"),
            (&[("EXTRA_TAGS", "a=b")], "EXTRA_TAGS"),
            (&[("USE_PROMETHEUS", "true")], "USE_STATSD"),
            (
                &[
                    ("USE_STATSD", "false"),
                    ("USE_PROMETHEUS", "true"),
                    ("PROMETHEUS_ADDR", "x"),
                ],
                "PROMETHEUS_ADDR",
            ),
            (
                &[("PROMETHEUS_MAPPER_YAML", "/nonexistent/m.yaml")],
                "PROMETHEUS_MAPPER_YAML",
            ),
            (&[("TRACING_ENABLED", "yes")], "TRACING_ENABLED"),
            (
                &[
                    ("TRACING_ENABLED", "true"),
                    ("TRACING_EXPORTER_PROTOCOL", "udp"),
                ],
                "TRACING_EXPORTER_PROTOCOL",
            ),
            (
                &[("USE_DOG_STATSD_MOGRIFIERS", "A")],
                "USE_DOG_STATSD_MOGRIFIERS",
            ),
        ] {
            let error = from(vars).expect_err(variable);
            assert_eq!(error.variable, variable, "{error}");
            assert!(error.to_string().starts_with(variable), "{error}");
        }
    }

    #[test]
    fn tracing_variables() {
        let tracing = from(&[("TRACING_ENABLED", "true")])
            .expect("settings")
            .tracing
            .expect("tracing");
        assert_eq!(tracing.protocol, OtlpProtocol::Http);
        assert_eq!(tracing.endpoint, "http://localhost:4318/v1/traces");
        assert_eq!(tracing.service_name, "RateLimit");
        let tracing = from(&[
            ("TRACING_ENABLED", "true"),
            ("TRACING_EXPORTER_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
        ])
        .expect("settings")
        .tracing
        .expect("tracing");
        assert_eq!(tracing.protocol, OtlpProtocol::Grpc);
        assert_eq!(tracing.endpoint, "http://collector:4317");
        assert!(from(&[]).expect("settings").tracing.is_none());
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_go_duration("10"), None);
        assert_eq!(parse_go_duration("s"), None);
    }
}
