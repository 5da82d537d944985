//! envoyproxy/ratelimit's xDS variables: `CONFIG_TYPE` and the
//! `CONFIG_GRPC_XDS_*` / `XDS_CLIENT_*` family, read into [`XdsSettings`]
//! (what [`crate::xds`] needs to subscribe to a control plane).
//!
//! [`XdsSettings::from_lookup`] reads them through a lookup function (the
//! process environment in production, a map in tests), checks every value,
//! and names the variable of the first bad one ([`XdsSettingsError`]).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `CONFIG_TYPE` | `FILE` | `GRPC_XDS_SOTW`: rules from the control plane |
//! | `CONFIG_GRPC_XDS_SERVER_URL` | `localhost:18000` | the control plane |
//! | `CONFIG_GRPC_XDS_NODE_ID` | `default` | the node's id in requests |
//! | `CONFIG_GRPC_XDS_NODE_METADATA` | none | `k1=v1,k2=v2`: the node's metadata |
//! | `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL` | `3s` | the wait between two failed dials |
//! | `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS` | none | `k1:v1,k2:v2`: gRPC metadata on the stream |
//! | `CONFIG_GRPC_XDS_SERVER_USE_TLS` | `false` | TLS to the control plane |
//! | `CONFIG_GRPC_XDS_CLIENT_TLS_CERT` / `_KEY` | none | a client certificate (PEM files, both or neither) |
//! | `CONFIG_GRPC_XDS_SERVER_TLS_CACERT` | the system's roots | the CA the server's certificate is checked against |
//! | `CONFIG_GRPC_XDS_SERVER_TLS_SAN` | the URL's host | the name the server's certificate must hold |
//! | `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL` | `10s` | the first wait after a stream breaks |
//! | `XDS_CLIENT_BACKOFF_MAX_INTERVAL` | `60s` | the longest wait |
//! | `XDS_CLIENT_BACKOFF_RANDOM_FACTOR` | `0.5` | the factor each wait is multiplied by |
//! | `XDS_CLIENT_BACKOFF_JITTER` | `true` | a random wait between the initial and the computed one |
//! | `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES` | 4 MiB | the largest response accepted |
//! | `MERGE_DOMAIN_CONFIG` | `false` | resources naming one domain are merged |
//! | `FORCE_START_WITHOUT_INITIAL_CONFIG` | `false` | serve before the first snapshot |
//!
//! # Decisions
//!
//! - Every variable is read and checked whatever `CONFIG_TYPE` says, as
//!   envoyproxy/ratelimit (whose settings library refuses a bad duration in
//!   any mode); the TLS files are read only when TLS is on, as there.
//!   `CONFIG_TYPE` is exact (`FILE` or `GRPC_XDS_SOTW`); anything else is
//!   refused.
//! - Values as Go reads them: durations in Go's syntax (`10s`, `1m30s`,
//!   `500ms`, `1.5h`), booleans as `strconv.ParseBool` (`1`, `t`, `true`,
//!   `TRUE`, `True`, and their negatives). A variable set to the empty
//!   string has its default.
//! - `CONFIG_GRPC_XDS_SERVER_URL` is a gRPC target (`host:port`, or
//!   `dns:///host:port`), as Lyft dials it; an `http://` or `https://` URL
//!   is taken too. The scheme follows `CONFIG_GRPC_XDS_SERVER_USE_TLS`.
//! - `CONFIG_GRPC_XDS_NODE_METADATA`: entries without `=` are skipped (and
//!   logged), as Lyft skips them (its own comment shows `key1:val1`, which
//!   it drops): refusing them would stop a Deployment that Lyft runs.
//!   `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS` entries must be `key:value`
//!   (Lyft's settings library refuses others too) and valid gRPC metadata.
//! - The TLS files are read and checked at start (a PEM certificate, a PEM
//!   key), so that a wrong path is an error naming its variable, not a
//!   failure at the first dial. A certificate without its key (or the key
//!   without the certificate) is refused.
//! - `MERGE_DOMAIN_CONFIG` and `FORCE_START_WITHOUT_INITIAL_CONFIG` are not
//!   xDS variables, but they decide how a snapshot is read and when the
//!   server starts, so they are read here too (with the same meaning as in
//!   Lyft's file mode).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Where the rules come from (`CONFIG_TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    /// The configuration files (`FILE`, the default).
    File,
    /// An xDS control plane, state of the world over ADS (`GRPC_XDS_SOTW`).
    GrpcXdsSotw,
}

/// How to subscribe to a control plane's `RateLimitConfig` resources.
#[derive(Debug, Clone, PartialEq)]
pub struct XdsSettings {
    /// Where the rules come from (`CONFIG_TYPE`).
    pub config_type: ConfigType,
    /// The control plane's URL (`http://host:port`, or `https://` with TLS).
    /// By default, `http://localhost:18000`.
    pub server_url: String,
    /// The node's id. By default, `default`.
    pub node_id: String,
    /// The node's metadata (string values). By default, none.
    pub node_metadata: BTreeMap<String, String>,
    /// gRPC metadata sent on the stream. By default, none.
    pub headers: BTreeMap<String, String>,
    /// The wait between two dials that fail. By default, 3 s.
    pub connect_retry_interval: Duration,
    /// TLS to the control plane. By default, none (plain HTTP/2).
    pub tls: Option<XdsTls>,
    /// The waits after a stream breaks.
    pub backoff: Backoff,
    /// The largest response accepted, in bytes. By default, 4 MiB.
    pub max_message_bytes: usize,
    /// Resources naming one domain are merged (`MERGE_DOMAIN_CONFIG`); by
    /// default, such a snapshot is refused.
    pub merge_domains: bool,
    /// Serve before the first snapshot is applied
    /// (`FORCE_START_WITHOUT_INITIAL_CONFIG`). By default, the server waits.
    pub force_start: bool,
}

/// TLS to the control plane (the PEM contents, read at start).
#[derive(Clone, PartialEq, Eq)]
pub struct XdsTls {
    /// The CA the server's certificate is checked against; `None`: the
    /// system's roots.
    pub ca: Option<Vec<u8>>,
    /// A client certificate chain and its key, for mutual TLS.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The name the server's certificate must hold; `None`: the URL's host.
    pub server_name: Option<String>,
}

impl fmt::Debug for XdsTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.debug_struct("XdsTls")
            .field("ca", &self.ca.is_some())
            .field("identity", &self.identity.is_some())
            .field("server_name", &self.server_name)
            .finish()
    }
}

/// envoyproxy/ratelimit's reconnection back-off (`jpillora/backoff`: the
/// same formula, see [`Backoff::wait`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The first wait. By default, 10 s.
    pub initial: Duration,
    /// The longest wait. By default, 60 s.
    pub max: Duration,
    /// Each wait is the previous one times this (0 or less: 2). By
    /// default, 0.5 (which, as in envoyproxy/ratelimit, keeps every wait
    /// at `initial`: the computed wait never rises above it).
    pub factor: f64,
    /// A random wait between `initial` and the computed one. By default,
    /// on.
    pub jitter: bool,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(60),
            factor: 0.5,
            jitter: true,
        }
    }
}

impl Backoff {
    /// The wait before reconnection attempt `attempt` (from 0), `random` a
    /// number in `[0, 1)`: `initial · factor^attempt`, jittered down to
    /// between `initial` and that, within `[initial, max]`
    /// (`jpillora/backoff`'s `ForAttempt`, which envoyproxy/ratelimit uses).
    pub fn wait(&self, attempt: u32, random: f64) -> Duration {
        if self.initial >= self.max {
            return self.max;
        }
        let factor = if self.factor > 0.0 { self.factor } else { 2.0 };
        let min = self.initial.as_secs_f64();
        let mut wait = min * factor.powi(i32::try_from(attempt).unwrap_or(i32::MAX));
        if self.jitter {
            wait = random * (wait - min) + min;
        }
        if !wait.is_finite() || wait >= self.max.as_secs_f64() {
            return self.max;
        }
        Duration::from_secs_f64(wait.max(min)).clamp(self.initial, self.max)
    }
}

/// A variable that cannot be used: its name and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {message}")]
pub struct XdsSettingsError {
    variable: &'static str,
    message: String,
}

impl XdsSettingsError {
    fn new(variable: &'static str, message: impl Into<String>) -> XdsSettingsError {
        XdsSettingsError {
            variable,
            message: message.into(),
        }
    }

    /// The variable.
    pub fn variable(&self) -> &'static str {
        self.variable
    }

    /// What is wrong with it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The default `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES` (gRPC's).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 << 20;

impl XdsSettings {
    /// Lyft's defaults, pointed at `server_url` (`host:port` or a URL), for
    /// a server started without Lyft's environment.
    ///
    /// # Errors
    ///
    /// `server_url` is not a usable target
    /// (`CONFIG_GRPC_XDS_SERVER_URL` named).
    pub fn new(server_url: &str) -> Result<XdsSettings, XdsSettingsError> {
        Ok(XdsSettings {
            config_type: ConfigType::GrpcXdsSotw,
            server_url: server_url_of(server_url, false)?,
            node_id: "default".into(),
            node_metadata: BTreeMap::new(),
            headers: BTreeMap::new(),
            connect_retry_interval: Duration::from_secs(3),
            tls: None,
            backoff: Backoff::default(),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            merge_domains: false,
            force_start: false,
        })
    }

    /// Reads the variables through `lookup` (`None`: not set).
    ///
    /// # Errors
    ///
    /// The first variable whose value cannot be used, named.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<XdsSettings, XdsSettingsError> {
        let get = |name: &str| lookup(name).filter(|value| !value.is_empty());
        let config_type = match get("CONFIG_TYPE").as_deref() {
            None | Some("FILE") => ConfigType::File,
            Some("GRPC_XDS_SOTW") => ConfigType::GrpcXdsSotw,
            Some(other) => {
                return Err(XdsSettingsError::new(
                    "CONFIG_TYPE",
                    format!("'{other}' is not a config type (FILE or GRPC_XDS_SOTW)"),
                ));
            }
        };
        let use_tls = boolean(&get, "CONFIG_GRPC_XDS_SERVER_USE_TLS", false)?;
        let url = get("CONFIG_GRPC_XDS_SERVER_URL").unwrap_or_else(|| "localhost:18000".into());
        let backoff = Backoff {
            initial: duration(
                &get,
                "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
                Duration::from_secs(10),
            )?,
            max: duration(
                &get,
                "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
                Duration::from_secs(60),
            )?,
            factor: match get("XDS_CLIENT_BACKOFF_RANDOM_FACTOR") {
                None => 0.5,
                Some(text) => text
                    .parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .ok_or_else(|| {
                        XdsSettingsError::new(
                            "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
                            format!("'{text}' is not a number"),
                        )
                    })?,
            },
            jitter: boolean(&get, "XDS_CLIENT_BACKOFF_JITTER", true)?,
        };
        let max_message_bytes = match get("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES") {
            None => DEFAULT_MAX_MESSAGE_BYTES,
            Some(text) => match text.parse::<usize>() {
                // Lyft: 0 leaves gRPC's default.
                Ok(0) => DEFAULT_MAX_MESSAGE_BYTES,
                Ok(n) => n,
                Err(_) => {
                    return Err(XdsSettingsError::new(
                        "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
                        format!("'{text}' is not a size in bytes"),
                    ));
                }
            },
        };
        let tls = if use_tls { Some(tls(&get)?) } else { None };
        Ok(XdsSettings {
            config_type,
            server_url: server_url_of(&url, use_tls)?,
            node_id: get("CONFIG_GRPC_XDS_NODE_ID").unwrap_or_else(|| "default".into()),
            node_metadata: node_metadata(get("CONFIG_GRPC_XDS_NODE_METADATA").as_deref()),
            headers: headers(get("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS").as_deref())?,
            connect_retry_interval: duration(
                &get,
                "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
                Duration::from_secs(3),
            )?,
            tls,
            backoff,
            max_message_bytes,
            merge_domains: boolean(&get, "MERGE_DOMAIN_CONFIG", false)?,
            force_start: boolean(&get, "FORCE_START_WITHOUT_INITIAL_CONFIG", false)?,
        })
    }

    /// The settings when `CONFIG_TYPE` asks for xDS, `None` for files.
    ///
    /// # Errors
    ///
    /// As [`from_lookup`](Self::from_lookup).
    pub fn when_selected(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<XdsSettings>, XdsSettingsError> {
        let settings = XdsSettings::from_lookup(lookup)?;
        Ok((settings.config_type == ConfigType::GrpcXdsSotw).then_some(settings))
    }
}

fn server_url_of(target: &str, tls: bool) -> Result<String, XdsSettingsError> {
    const VARIABLE: &str = "CONFIG_GRPC_XDS_SERVER_URL";
    let scheme = if tls { "https" } else { "http" };
    let url = if let Some(rest) = target.strip_prefix("dns:///") {
        format!("{scheme}://{rest}")
    } else if target.starts_with("http://") || target.starts_with("https://") {
        target.to_owned()
    } else if target.contains("://") {
        return Err(XdsSettingsError::new(
            VARIABLE,
            format!("'{target}': only host:port, dns:///host:port or an http(s) URL"),
        ));
    } else {
        format!("{scheme}://{target}")
    };
    let uri: http::Uri = url
        .parse()
        .map_err(|error| XdsSettingsError::new(VARIABLE, format!("'{target}': {error}")))?;
    if uri.host().is_none_or(str::is_empty) || uri.port_u16().is_none() {
        return Err(XdsSettingsError::new(
            VARIABLE,
            format!("'{target}': needs a host and a port"),
        ));
    }
    Ok(url)
}

fn boolean(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: bool,
) -> Result<bool, XdsSettingsError> {
    match get(name).as_deref() {
        None => Ok(default),
        // Go's strconv.ParseBool.
        Some("1" | "t" | "T" | "TRUE" | "true" | "True") => Ok(true),
        Some("0" | "f" | "F" | "FALSE" | "false" | "False") => Ok(false),
        Some(other) => Err(XdsSettingsError::new(
            name,
            format!("'{other}' is not a boolean (true or false)"),
        )),
    }
}

fn duration(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: Duration,
) -> Result<Duration, XdsSettingsError> {
    match get(name) {
        None => Ok(default),
        Some(text) => go_duration(&text).map_err(|message| XdsSettingsError::new(name, message)),
    }
}

/// A duration in Go's `time.ParseDuration` syntax: `0`, or a sequence of
/// decimal numbers each with a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`,
/// `h`). Negative durations are refused. See [`crate::config::go_syntax`].
pub fn go_duration(text: &str) -> Result<Duration, String> {
    crate::config::go_syntax::parse_duration(text)
}

fn node_metadata(text: Option<&str>) -> BTreeMap<String, String> {
    let mut metadata = BTreeMap::new();
    for entry in text.unwrap_or_default().split(',') {
        match entry.split_once('=') {
            Some((key, value)) => {
                metadata.insert(key.to_owned(), value.to_owned());
            }
            None if entry.is_empty() => {}
            None => tracing::warn!(
                entry,
                "CONFIG_GRPC_XDS_NODE_METADATA: an entry without '=' is skipped (as envoyproxy/ratelimit does)"
            ),
        }
    }
    metadata
}

fn headers(text: Option<&str>) -> Result<BTreeMap<String, String>, XdsSettingsError> {
    const VARIABLE: &str = "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS";
    let mut headers = BTreeMap::new();
    let Some(text) = text else {
        return Ok(headers);
    };
    for entry in text.split(',') {
        let (key, value) = entry.split_once(':').ok_or_else(|| {
            XdsSettingsError::new(VARIABLE, format!("'{entry}' is not key:value"))
        })?;
        let key = key.to_ascii_lowercase();
        if tonic::metadata::AsciiMetadataKey::from_bytes(key.as_bytes()).is_err()
            || key.ends_with("-bin")
        {
            return Err(XdsSettingsError::new(
                VARIABLE,
                format!("'{key}' is not a header name"),
            ));
        }
        if tonic::metadata::AsciiMetadataValue::try_from(value).is_err() {
            return Err(XdsSettingsError::new(
                VARIABLE,
                format!("the value of '{key}' is not a header value"),
            ));
        }
        headers.insert(key, value.to_owned());
    }
    Ok(headers)
}

fn tls(get: &impl Fn(&str) -> Option<String>) -> Result<XdsTls, XdsSettingsError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    let read = |name: &'static str| -> Result<Option<Vec<u8>>, XdsSettingsError> {
        get(name)
            .map(|path| {
                std::fs::read(PathBuf::from(&path))
                    .map_err(|error| XdsSettingsError::new(name, format!("'{path}': {error}")))
            })
            .transpose()
    };
    let certificates = |name: &'static str, pem: &[u8]| {
        let parsed: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(pem).collect();
        match parsed {
            Ok(list) if !list.is_empty() => Ok(()),
            _ => Err(XdsSettingsError::new(name, "holds no PEM certificate")),
        }
    };
    let ca = read("CONFIG_GRPC_XDS_SERVER_TLS_CACERT")?;
    if let Some(pem) = &ca {
        certificates("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", pem)?;
    }
    let cert = read("CONFIG_GRPC_XDS_CLIENT_TLS_CERT")?;
    let key = read("CONFIG_GRPC_XDS_CLIENT_TLS_KEY")?;
    let identity = match (cert, key) {
        (None, None) => None,
        (Some(_), None) => {
            return Err(XdsSettingsError::new(
                "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
                "missing: CONFIG_GRPC_XDS_CLIENT_TLS_CERT needs its key",
            ));
        }
        (None, Some(_)) => {
            return Err(XdsSettingsError::new(
                "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
                "missing: CONFIG_GRPC_XDS_CLIENT_TLS_KEY needs its certificate",
            ));
        }
        (Some(cert), Some(key)) => {
            certificates("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", &cert)?;
            if PrivateKeyDer::from_pem_slice(&key).is_err() {
                return Err(XdsSettingsError::new(
                    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
                    "holds no PEM private key",
                ));
            }
            Some((cert, key))
        }
    };
    Ok(XdsTls {
        ca,
        identity,
        server_name: get("CONFIG_GRPC_XDS_SERVER_TLS_SAN"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.get(name).cloned()
    }

    #[test]
    fn defaults_are_lyfts() {
        let settings = XdsSettings::from_lookup(lookup(&[])).unwrap();
        assert_eq!(settings.config_type, ConfigType::File);
        assert_eq!(settings.server_url, "http://localhost:18000");
        assert_eq!(settings.node_id, "default");
        assert_eq!(settings.connect_retry_interval, Duration::from_secs(3));
        assert_eq!(settings.backoff, Backoff::default());
        assert_eq!(settings.max_message_bytes, DEFAULT_MAX_MESSAGE_BYTES);
        assert!(settings.tls.is_none());
        assert!(!settings.merge_domains && !settings.force_start);
        assert_eq!(XdsSettings::when_selected(lookup(&[])).unwrap(), None);
    }

    #[test]
    fn reads_every_variable() {
        let settings = XdsSettings::from_lookup(lookup(&[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", "dns:///xds.example:9000"),
            ("CONFIG_GRPC_XDS_NODE_ID", "rls-1"),
            ("CONFIG_GRPC_XDS_NODE_METADATA", "a=1,b=x=y,c:3"),
            (
                "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
                "X-Token:abc,team:rl",
            ),
            ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "1m30s"),
            ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "500ms"),
            ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "1.5h"),
            ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "2"),
            ("XDS_CLIENT_BACKOFF_JITTER", "F"),
            ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "1024"),
            ("MERGE_DOMAIN_CONFIG", "true"),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "1"),
        ]))
        .unwrap();
        assert_eq!(settings.config_type, ConfigType::GrpcXdsSotw);
        assert_eq!(settings.server_url, "http://xds.example:9000");
        assert_eq!(settings.node_id, "rls-1");
        let metadata: Vec<_> = settings.node_metadata.iter().collect();
        assert_eq!(
            metadata,
            [
                (&"a".to_owned(), &"1".to_owned()),
                (&"b".into(), &"x=y".into())
            ]
        );
        assert_eq!(settings.headers["x-token"], "abc");
        assert_eq!(settings.headers["team"], "rl");
        assert_eq!(settings.connect_retry_interval, Duration::from_secs(90));
        assert_eq!(
            settings.backoff,
            Backoff {
                initial: Duration::from_millis(500),
                max: Duration::from_secs(5400),
                factor: 2.0,
                jitter: false,
            }
        );
        assert_eq!(settings.max_message_bytes, 1024);
        assert!(settings.merge_domains && settings.force_start);
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        for (name, value) in [
            ("CONFIG_TYPE", "GRPC_XDS_DELTA"),
            ("CONFIG_GRPC_XDS_SERVER_URL", "localhost"),
            ("CONFIG_GRPC_XDS_SERVER_URL", "unix:///tmp/xds.sock"),
            ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3"),
            ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "-1s"),
            ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "1d"),
            ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "half"),
            ("XDS_CLIENT_BACKOFF_JITTER", "yes"),
            ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "-1"),
            ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "novalue"),
            ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "bad key:v"),
            ("MERGE_DOMAIN_CONFIG", "on"),
        ] {
            let error = XdsSettings::from_lookup(lookup(&[(name, value)])).unwrap_err();
            assert_eq!(error.variable(), name, "{name}={value}: {error}");
            assert!(error.to_string().starts_with(name), "{error}");
        }
    }

    #[test]
    fn tls_files_are_read_and_checked_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let error = XdsSettings::from_lookup(lookup(&[
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            (
                "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
                missing.to_str().unwrap(),
            ),
        ]))
        .unwrap_err();
        assert_eq!(error.variable(), "CONFIG_GRPC_XDS_SERVER_TLS_CACERT");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate").unwrap();
        let error = XdsSettings::from_lookup(lookup(&[
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", garbage.to_str().unwrap()),
        ]))
        .unwrap_err();
        assert_eq!(error.variable(), "CONFIG_GRPC_XDS_CLIENT_TLS_KEY");
        // Off: the files are not read.
        let settings = XdsSettings::from_lookup(lookup(&[(
            "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
            missing.to_str().unwrap(),
        )]))
        .unwrap();
        assert!(settings.tls.is_none());
        let settings = XdsSettings::from_lookup(lookup(&[
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_SERVER_URL", "xds:443"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds.internal"),
        ]))
        .unwrap();
        assert_eq!(settings.server_url, "https://xds:443");
        assert_eq!(
            settings.tls.unwrap().server_name.as_deref(),
            Some("xds.internal")
        );
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(go_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(go_duration("1h2m3s"), Ok(Duration::from_secs(3723)));
        assert_eq!(go_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(go_duration("250us"), Ok(Duration::from_micros(250)));
        for bad in ["", "s", "10", "1x", "-1s", "1.2.3s"] {
            assert!(go_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn backoff_is_jpillora_s() {
        let lyft = Backoff::default();
        // Lyft's factor 0.5 never rises above the initial wait.
        for attempt in 0..5 {
            assert_eq!(lyft.wait(attempt, 0.99), Duration::from_secs(10));
        }
        let doubling = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            factor: 2.0,
            jitter: false,
        };
        let waits: Vec<_> = (0..6).map(|a| doubling.wait(a, 0.0).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        let jittered = Backoff {
            jitter: true,
            ..doubling
        };
        assert_eq!(jittered.wait(2, 0.0), Duration::from_millis(100));
        assert_eq!(jittered.wait(2, 0.5), Duration::from_millis(250));
        let flat = Backoff {
            initial: Duration::from_secs(5),
            max: Duration::from_secs(5),
            ..doubling
        };
        assert_eq!(flat.wait(7, 0.3), Duration::from_secs(5));
    }
}
