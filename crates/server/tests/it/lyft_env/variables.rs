//! No variable of envoyproxy/ratelimit is silently ignored: a walk over
//! every name of its `src/settings/settings.go` (the list in
//! `settings_go_variables.txt`, names only, taken from the file at its
//! repository's HEAD) sets each one, alone or with the few variables it
//! needs, and asks which it is:
//!
//! - **refused**: reading the environment fails, naming the variable;
//! - **logged**: a line logged once at start says it has no effect
//!   ([`LyftSettings::all_notices`]);
//! - **supported**: the settings read differ from those without it (or
//!   it makes an environment readable that is refused without it:
//!   `REDIS_SOCKET_TYPE=tcp` with `REDIS_URL=localhost:6379`).
//!
//! A variable that is none of these fails the walk.

use std::collections::BTreeMap;
use std::path::Path;

use tollgate_server::config::BackendSettings;
use tollgate_server::config::lyft_env::{Env, Handling, LyftSettings, VARIABLES};

const NAMES: &str = include_str!("settings_go_variables.txt");

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    Supported,
    Logged,
    Refused,
}

/// A value that differs from envoyproxy/ratelimit's default, and the
/// variables it needs to mean anything (`dir` holds files it may name).
fn trial(name: &str, default: &str, dir: &Path) -> (String, Vec<(&'static str, String)>) {
    let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let tls_files = || {
        vec![
            ("GRPC_SERVER_TLS_CERT", file("cert.pem")),
            ("GRPC_SERVER_TLS_KEY", file("key.pem")),
        ]
    };
    let value = match name {
        "HOST" | "DEBUG_HOST" | "GRPC_HOST" => "127.0.0.2".to_owned(),
        "PORT" | "DEBUG_PORT" | "GRPC_PORT" | "STATSD_PORT" => "9999".to_owned(),
        "GRPC_UDS" => "/tmp/rls.sock".to_owned(),
        "GRPC_SERVER_USE_TLS" => return ("true".to_owned(), tls_files()),
        "GRPC_SERVER_TLS_CERT" => file("cert.pem"),
        "GRPC_SERVER_TLS_KEY" => file("key.pem"),
        "GRPC_CLIENT_TLS_CACERT" => file("cert.pem"),
        "GRPC_CLIENT_TLS_SAN" => "client.example".to_owned(),
        "LOG_LEVEL" => "debug".to_owned(),
        "LOG_FORMAT" => "json".to_owned(),
        "CONFIG_TYPE" => "GRPC_XDS_SOTW".to_owned(),
        "CONFIG_GRPC_XDS_NODE_METADATA" => "k=v".to_owned(),
        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT" | "CONFIG_GRPC_XDS_SERVER_TLS_CACERT" => file("cert.pem"),
        "CONFIG_GRPC_XDS_CLIENT_TLS_KEY" => file("key.pem"),
        "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS" => "k:v".to_owned(),
        "USE_DOG_STATSD" | "USE_PROMETHEUS" => {
            return ("true".to_owned(), vec![("USE_STATSD", "false".to_owned())]);
        }
        "USE_DOG_STATSD_MOGRIFIERS" => "M".to_owned(),
        "STATSD_HOST" => "statsd.example".to_owned(),
        "EXTRA_TAGS" => "app:rl".to_owned(),
        "PROMETHEUS_ADDR" => ":9191".to_owned(),
        "PROMETHEUS_PATH" => "/m".to_owned(),
        "PROMETHEUS_MAPPER_YAML" => file("mapper.yaml"),
        "RUNTIME_ROOT" => "/srv/elsewhere".to_owned(),
        "RUNTIME_SUBDIRECTORY" => "sub".to_owned(),
        "RUNTIME_APPDIRECTORY" => "rules".to_owned(),
        "NEAR_LIMIT_RATIO" => "0.5".to_owned(),
        "CACHE_KEY_PREFIX" => "p_".to_owned(),
        "BACKEND_TYPE" => "memory".to_owned(),
        "LIMIT_LIMIT_HEADER" | "LIMIT_REMAINING_HEADER" | "LIMIT_RESET_HEADER" => "X-L".to_owned(),
        "REDIS_SOCKET_TYPE" => return ("tcp".to_owned(), tcp()),
        "REDIS_TYPE" => {
            let mut context = tcp();
            context.push(("REDIS_SOCKET_TYPE", "tcp".to_owned()));
            return ("cluster".to_owned(), context);
        }
        "REDIS_TLS" => {
            let mut context = tcp();
            context.push(("REDIS_SOCKET_TYPE", "tcp".to_owned()));
            return ("true".to_owned(), context);
        }
        "REDIS_PERSECOND_SOCKET_TYPE" => "tcp".to_owned(),
        "REDIS_PERSECOND_TYPE" => "sentinel".to_owned(),
        "CONFIG_GRPC_XDS_SERVER_URL" => "xds.example:18000".to_owned(),
        "REDIS_PIPELINE_WINDOW" | "REDIS_PERSECOND_PIPELINE_WINDOW" => "7ms".to_owned(),
        "REDIS_STARTUP_MAX_ELAPSED_TIME" => "7s".to_owned(),
        "REDIS_URL" => "/tmp/other.sock".to_owned(),
        "REDIS_PERSECOND_URL" => "/tmp/other-persecond.sock".to_owned(),
        "REDIS_AUTH"
        | "REDIS_PERSECOND_AUTH"
        | "REDIS_SENTINEL_AUTH"
        | "REDIS_PERSECOND_SENTINEL_AUTH" => "secret".to_owned(),
        "REDIS_TLS_CLIENT_CERT" | "REDIS_TLS_CACERT" => file("cert.pem"),
        "REDIS_TLS_CLIENT_KEY" => file("key.pem"),
        "REDIS_POOL_ON_EMPTY_BEHAVIOR" | "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR" => {
            "ERROR".to_owned()
        }
        "MEMCACHE_HOST_PORT" => "memcached:11211".to_owned(),
        "MEMCACHE_SRV" => "_memcache._tcp.example".to_owned(),
        "MEMCACHE_TLS_CLIENT_CERT" | "MEMCACHE_TLS_CACERT" => file("cert.pem"),
        "MEMCACHE_TLS_CLIENT_KEY" => file("key.pem"),
        "TRACING_SERVICE_NAME" | "TRACING_SERVICE_NAMESPACE" | "TRACING_SERVICE_INSTANCE_ID" => {
            "rls".to_owned()
        }
        "TRACING_EXPORTER_PROTOCOL" => "grpc".to_owned(),
        "TRACING_SAMPLING_RATE" => "0.5".to_owned(),
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR" => "0.3".to_owned(),
        _ => other_than(default),
    };
    (value, Vec::new())
}

/// A Redis reachable over TCP (`REDIS_URL` as a `host:port`).
fn tcp() -> Vec<(&'static str, String)> {
    vec![("REDIS_URL", "localhost:6379".to_owned())]
}

/// A value of the default's kind that differs from it.
fn other_than(default: &str) -> String {
    match default {
        "false" => "true".to_owned(),
        "true" => "false".to_owned(),
        "" => "7".to_owned(),
        d if d.ends_with('s') || d.ends_with('h') || d.ends_with('m') => "7s".to_owned(),
        d => match d.parse::<u64>() {
            Ok(n) => (n + 7).to_string(),
            Err(_) => format!("{d}x"),
        },
    }
}

fn env(vars: &[(&str, String)]) -> Env {
    vars.iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// The settings with the notices left out (they are compared apart).
fn shape(settings: &LyftSettings) -> String {
    let mut settings = settings.clone();
    settings.notices.clear();
    if let BackendSettings::Redis(redis) = &mut settings.config.backend {
        redis.notices.clear();
    }
    format!("{settings:?}")
}

fn classify(name: &str, dir: &Path) -> Result<Class, String> {
    let default = VARIABLES
        .iter()
        .find(|v| v.name == name)
        .map(|v| v.default)
        .ok_or_else(|| format!("{name}: not in tollgate's table"))?;
    let (value, context) = trial(name, default, dir);
    classify_in(name, &value, &context)
}

/// As [`classify`], `name=value` set over `context`.
fn classify_in(
    name: &str,
    value: &str,
    context: &[(&'static str, String)],
) -> Result<Class, String> {
    let baseline = LyftSettings::read(&env(context));
    let mut with = context.to_vec();
    with.push((name_static(name), value.to_owned()));
    match LyftSettings::read(&env(&with)) {
        Err(error) if error.variable() == name => {
            println!("refused: {error}");
            Ok(Class::Refused)
        }
        Err(error) => Err(format!(
            "{name}={value}: refused, naming another variable: {error}"
        )),
        Ok(settings) => {
            let said = settings
                .all_notices()
                .iter()
                .any(|line| line.starts_with(&format!("{name} is set")));
            if said {
                Ok(Class::Logged)
            } else if baseline
                .as_ref()
                .is_ok_and(|baseline| shape(&settings) != shape(baseline))
                || baseline.is_err()
            {
                Ok(Class::Supported)
            } else {
                Err(format!(
                    "{name}={value}: silently ignored (no effect on the settings, no line at start)"
                ))
            }
        }
    }
}

/// The variables that turn on the feature `name` belongs to (and what it
/// needs beside them), for a variable logged as without effect alone;
/// `None` for the others.
fn switched_on(name: &str, dir: &Path) -> Option<Vec<(&'static str, String)>> {
    let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let on = |pairs: &[(&'static str, &str)]| {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (*k, (*v).to_owned()))
                .collect::<Vec<_>>(),
        )
    };
    let redis_tls = [
        ("REDIS_TLS", "true"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "localhost:6379"),
    ];
    match name {
        "GRPC_SERVER_TLS_CERT" => Some(vec![
            ("GRPC_SERVER_USE_TLS", "true".to_owned()),
            ("GRPC_SERVER_TLS_KEY", file("key.pem")),
        ]),
        "GRPC_SERVER_TLS_KEY" => Some(vec![
            ("GRPC_SERVER_USE_TLS", "true".to_owned()),
            ("GRPC_SERVER_TLS_CERT", file("cert.pem")),
        ]),
        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT" => Some(vec![
            ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_owned()),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".to_owned()),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", file("key.pem")),
        ]),
        "CONFIG_GRPC_XDS_CLIENT_TLS_KEY" => Some(vec![
            ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_owned()),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".to_owned()),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", file("cert.pem")),
        ]),
        "CONFIG_GRPC_XDS_SERVER_TLS_CACERT" | "CONFIG_GRPC_XDS_SERVER_TLS_SAN" => on(&[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        ]),
        _ if name.starts_with("CONFIG_GRPC_XDS_") || name.starts_with("XDS_CLIENT_") => {
            on(&[("CONFIG_TYPE", "GRPC_XDS_SOTW")])
        }
        "PROMETHEUS_ADDR" | "PROMETHEUS_PATH" => {
            on(&[("USE_PROMETHEUS", "true"), ("USE_STATSD", "false")])
        }
        "LIMIT_LIMIT_HEADER" | "LIMIT_REMAINING_HEADER" | "LIMIT_RESET_HEADER" => {
            on(&[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")])
        }
        "REDIS_TLS_CACERT" => on(&redis_tls),
        "REDIS_TLS_CLIENT_CERT" => {
            let mut pairs = on(&redis_tls)?;
            pairs.push(("REDIS_TLS_CLIENT_KEY", file("key.pem")));
            Some(pairs)
        }
        "REDIS_TLS_CLIENT_KEY" => {
            let mut pairs = on(&redis_tls)?;
            pairs.push(("REDIS_TLS_CLIENT_CERT", file("cert.pem")));
            Some(pairs)
        }
        "REDIS_SENTINEL_AUTH" => on(&[
            ("REDIS_TYPE", "sentinel"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "mymaster,localhost:26379"),
        ]),
        "REDIS_PERSECOND_SENTINEL_AUTH" | "REDIS_PERSECOND_TYPE" => on(&[
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_TYPE", "sentinel"),
            ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
            ("REDIS_PERSECOND_URL", "mymaster,localhost:26379"),
        ])
        .map(|mut pairs| {
            // The type itself is tried against a single server.
            if name == "REDIS_PERSECOND_TYPE" {
                pairs.retain(|(k, _)| *k != "REDIS_PERSECOND_TYPE");
            }
            pairs
        }),
        "REDIS_PERSECOND_SOCKET_TYPE" | "REDIS_PERSECOND_TLS" => on(&[
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
            ("REDIS_PERSECOND_URL", "localhost:6380"),
        ])
        .map(|mut pairs| {
            if name == "REDIS_PERSECOND_SOCKET_TYPE" {
                pairs.retain(|(k, _)| *k != "REDIS_PERSECOND_SOCKET_TYPE");
            }
            pairs
        }),
        _ if name.starts_with("REDIS_PERSECOND_") => on(&[("REDIS_PERSECOND", "true")]),
        _ if name.starts_with("TRACING_") && name != "TRACING_ENABLED" => {
            on(&[("TRACING_ENABLED", "true")])
        }
        _ => None,
    }
}

/// `name` as the table's `&'static str`.
fn name_static(name: &str) -> &'static str {
    VARIABLES
        .iter()
        .find(|v| v.name == name)
        .map(|v| v.name)
        .unwrap_or("?")
}

fn files(dir: &Path) {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    std::fs::write(dir.join("cert.pem"), cert.pem()).expect("cert");
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).expect("key");
    std::fs::write(dir.join("mapper.yaml"), "mappings: []\n").expect("mapper");
}

#[test]
fn every_variable_of_settings_go_is_supported_refused_or_logged() {
    let names: Vec<&str> = NAMES.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(names.len(), 114, "settings.go's variables");
    let ours: Vec<&str> = VARIABLES.iter().map(|v| v.name).collect();
    assert_eq!(
        names, ours,
        "tollgate's table follows settings.go, in its order"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    files(dir.path());
    let mut totals: BTreeMap<Class, Vec<&str>> = BTreeMap::new();
    let mut silent = Vec::new();
    for name in &names {
        match classify(name, dir.path()) {
            Ok(class) => totals.entry(class).or_default().push(name),
            Err(why) => silent.push(why),
        }
    }
    let counts: Vec<(Class, usize)> = totals.iter().map(|(c, n)| (*c, n.len())).collect();
    println!("variable walk: {counts:?}");
    for (class, names) in &totals {
        println!("{class:?}: {}", names.join(" "));
    }
    assert!(silent.is_empty(), "{}", silent.join("\n"));
}

/// A variable logged as without effect alone takes effect (or is refused,
/// named) once its feature is on, unless it is one of the table's
/// accepted no-ops: the lines at start never hide a variable that is
/// simply not read.
#[test]
fn a_variable_logged_alone_takes_effect_when_its_feature_is_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    files(dir.path());
    let mut totals: BTreeMap<Class, Vec<&str>> = BTreeMap::new();
    let mut wrong = Vec::new();
    for variable in VARIABLES {
        let no_op = matches!(variable.handling, Handling::NoOp(_));
        let Some(context) = switched_on(variable.name, dir.path()) else {
            continue;
        };
        let (value, _) = trial(variable.name, variable.default, dir.path());
        let class = classify_in(variable.name, &value, &context);
        match (&class, no_op) {
            (Ok(Class::Logged), true) | (Ok(Class::Supported | Class::Refused), false) => {
                totals
                    .entry(*class.as_ref().unwrap_or(&Class::Logged))
                    .or_default()
                    .push(variable.name);
            }
            _ => wrong.push(format!("{} (no-op: {no_op}): {class:?}", variable.name)),
        }
    }
    let counts: Vec<(Class, usize)> = totals.iter().map(|(c, n)| (*c, n.len())).collect();
    println!("with their feature on: {counts:?}");
    for (class, names) in &totals {
        println!("{class:?}: {}", names.join(" "));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
