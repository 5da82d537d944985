//! The second front door: envoyproxy/ratelimit's environment variables and
//! config directory, read into the same checked [`Config`] the YAML file
//! gives. The server never learns which door its rules came through.
//!
//! `tollgate serve` with no `--config` runs from here when the
//! environment sets any of envoyproxy/ratelimit's variables
//! ([`is_lyft_environment`]: any name of [`VARIABLES`] but the generic
//! `HOST`, `PORT`, `LOG_LEVEL` and `LOG_FORMAT`). The table of
//! [`VARIABLES`] says, for every variable of envoyproxy/ratelimit's
//! `settings.go`, whether it is read here, accepted without effect,
//! refused, or read by another part of the server.
//!
//! # Layout
//!
//! [`values`](Env): the lookup (injectable: tests pass a map) and Go's
//! syntax; [`variables`]: the table; `runtime`: the config directory
//! ([`RuntimeDir`]); `redis`: the Redis variables as the YAML door's
//! `backend:` section.
//!
//! # Guarantees
//!
//! - A variable tollgate does not support, set to a value that would
//!   change a decision, is refused at start with its name
//!   ([`EnvError`]: `BACKEND_TYPE: memcache is not supported …`); none is
//!   read and then ignored where it would change what is limited (client
//!   certificates, `GRPC_CLIENT_TLS_*`, are refused: tollgate does not
//!   verify them).
//! - The rules are read as the YAML door reads them (every check, every
//!   extension key), except that a quota naming no `algorithm` is
//!   envoyproxy/ratelimit's fixed window (aligned to its unit from the UNIX
//!   epoch, answering the same `duration_until_reset`), and a file holds
//!   rules only.
//!
//! # Defaults (envoyproxy/ratelimit's, so that its Deployment keeps working)
//!
//! - Listeners on `0.0.0.0`: HTTP 8080, gRPC 8081, debug 6070 (the YAML
//!   door's loopback default is for a file someone writes).
//! - `BACKEND_TYPE=redis`, at `REDIS_*` (a Unix socket at
//!   `/var/run/nutcracker/ratelimit.sock` by default); `memory` is tollgate's
//!   own value; `memcache` is refused.
//! - `GRPC_MAX_CONNECTION_AGE`: 24 h (`0`: off); `LOG_LEVEL`: `WARN`
//!   (`RUST_LOG` wins; the HTTP/2, gRPC and TLS libraries stay at `info`,
//!   [`QUIET_LIBRARIES`]).
//! - `SHADOW_MODE`, `QUOTA_MODE`, `RESPONSE_DYNAMIC_METADATA`,
//!   `GRPC_SERVER_USE_TLS`: off; `TOLLGATE_COMPACT_KEYS` (tollgate's own):
//!   none ([`crate::config::compact_keys`]; refused under Redis).
//! - `CONFIG_TYPE`: `FILE`; `GRPC_XDS_SOTW` is read by the xDS module
//!   ([`ConfigType`]).
//!
//! Each variable's decision in full: `crates/server/docs/replacing-envoyproxy-ratelimit.md`,
//! "Inside the server".

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use super::{
    AdminSettings, BackendSettings, Config, ConfigError, ResponseHeaderNames, ServerSettings,
};
use crate::config::backend::{KeyLayout, LyftLayout};
use crate::config::telemetry::TelemetrySettings;
use crate::config::xds::XdsSettings;
use crate::tls::TlsSettings;

mod redis;
mod runtime;
mod values;
pub mod variables;

pub use runtime::{RuntimeDir, Snapshot};
pub use values::Env;
pub use variables::{Handling, VARIABLES, Variable, is_lyft_environment, without_effect};

/// A variable refused at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvError {
    variable: String,
    message: String,
}

impl EnvError {
    pub(crate) fn new(variable: &str, message: impl Into<String>) -> EnvError {
        EnvError {
            variable: variable.to_owned(),
            message: message.into(),
        }
    }

    /// The variable.
    pub fn variable(&self) -> &str {
        &self.variable
    }
}

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.variable, self.message)
    }
}

impl std::error::Error for EnvError {}

/// Where the rules come from (`CONFIG_TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    /// `FILE`: the config directory.
    File,
    /// `GRPC_XDS_SOTW`: an xDS control plane.
    GrpcXdsSotw,
}

/// How the logs are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// A `tracing` filter (`warn`, `debug`, …) from `LOG_LEVEL`.
    pub filter: String,
    /// `LOG_FORMAT=json`.
    pub json: bool,
}

/// envoyproxy/ratelimit's environment, read and checked (the rules not
/// loaded yet: [`LyftSettings::load`]).
#[derive(Debug, Clone)]
pub struct LyftSettings {
    /// The server, backend and admin settings; no domains yet.
    pub config: Config,
    /// The config directory.
    pub runtime: RuntimeDir,
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG`.
    pub force_start: bool,
    /// `CONFIG_TYPE`.
    pub config_type: ConfigType,
    /// `LOG_LEVEL`, `LOG_FORMAT`.
    pub log: LogSettings,
    /// The stats sinks, traces and near-limit ratio
    /// ([`crate::config::telemetry`]).
    pub telemetry: TelemetrySettings,
    /// The control plane, with `CONFIG_TYPE=GRPC_XDS_SOTW`
    /// ([`crate::config::xds`]).
    pub xds: Option<XdsSettings>,
    /// One line per variable set without effect, logged once at start
    /// ([`variables::without_effect`]).
    pub notices: Vec<String>,
}

impl LyftSettings {
    /// Reads `env`.
    ///
    /// # Errors
    ///
    /// The first variable refused, named.
    pub fn read(env: &Env) -> Result<LyftSettings, EnvError> {
        refuse_unsupported(env)?;
        let backend = match env
            .string("BACKEND_TYPE", "redis")
            .to_ascii_lowercase()
            .as_str()
        {
            "redis" => redis::backend(env)?,
            "memory" => BackendSettings::Memory,
            "memcache" => {
                return Err(EnvError::new(
                    "BACKEND_TYPE",
                    "memcache is not supported: tollgate keeps its counts in Redis (BACKEND_TYPE=redis, the default) or in memory (BACKEND_TYPE=memory)",
                ));
            }
            other => {
                return Err(EnvError::new(
                    "BACKEND_TYPE",
                    format!("'{other}' is not a backend (redis, or tollgate's memory)"),
                ));
            }
        };
        let config_type = match env
            .string("CONFIG_TYPE", "FILE")
            .to_ascii_uppercase()
            .as_str()
        {
            "FILE" => ConfigType::File,
            "GRPC_XDS_SOTW" => ConfigType::GrpcXdsSotw,
            other => {
                return Err(EnvError::new(
                    "CONFIG_TYPE",
                    format!("'{other}' is not a config type (FILE or GRPC_XDS_SOTW)"),
                ));
            }
        };
        let mut backend = backend;
        let lookup = |name: &str| env.get(name).map(str::to_owned);
        if let BackendSettings::Redis(redis) = &mut backend {
            // envoyproxy/ratelimit's own keys, so that a rollout shares one
            // count with its pods ([`crate::config::backend::LyftLayout`]).
            let layout = LyftLayout::from_env(&lookup, redis.tls.as_ref())
                .map_err(|error| EnvError::new(error.variable, error.message))?;
            redis.key_layout = KeyLayout::Lyft(Box::new(layout));
        }
        let telemetry = TelemetrySettings::from_lookup(lookup).map_err(|error| {
            EnvError::new(
                error.variable,
                format!("'{}': {}", error.value, error.reason),
            )
        })?;
        let xds = XdsSettings::when_selected(lookup)
            .map_err(|error| EnvError::new(error.variable(), error.message()))?;
        let server = server_settings(env)?;
        if server.compact_keys.is_some() && matches!(backend, BackendSettings::Redis(_)) {
            return Err(EnvError::new(
                "TOLLGATE_COMPACT_KEYS",
                "sizes the in-memory backend's compact tables (BACKEND_TYPE=memory), and the counts are on Redis",
            ));
        }
        let runtime = runtime_dir(env, matches!(backend, BackendSettings::Redis(_)))?;
        Ok(LyftSettings {
            config: Config {
                server,
                backend,
                admin: AdminSettings::default(),
                domains: Vec::new(),
            },
            runtime,
            force_start: env.bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false)?,
            config_type,
            log: log_settings(env)?,
            telemetry,
            xds,
            notices: variables::without_effect(env),
        })
    }

    /// Every line logged at start about variables set without effect:
    /// [`notices`](LyftSettings::notices), then the Redis settings'.
    pub fn all_notices(&self) -> Vec<String> {
        let mut all = self.notices.clone();
        if let BackendSettings::Redis(redis) = &self.config.backend {
            all.extend(redis.notices.iter().cloned());
        }
        all
    }

    /// The configuration with the config directory's rules, and the
    /// snapshot they were read from (the reloader's first).
    ///
    /// # Errors
    ///
    /// The directory cannot be read or its rules are refused; with
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG` the error is logged and the
    /// server starts with no rules instead.
    pub fn load(&self) -> Result<(Config, Snapshot), ConfigError> {
        let mut config = self.config.clone();
        let loaded = self
            .runtime
            .snapshot()
            .and_then(|snapshot| Ok((self.runtime.load(&snapshot)?, snapshot)));
        match loaded {
            Ok((domains, snapshot)) => {
                config.domains = domains;
                Ok((config, snapshot))
            }
            Err(error) if self.force_start => {
                tracing::error!(%error, "no initial configuration: starting without rules (FORCE_START_WITHOUT_INITIAL_CONFIG)");
                Ok((config, Snapshot::new()))
            }
            Err(error) => Err(error),
        }
    }
}

/// Variables whose every value, or whose values that matter, tollgate
/// refuses (see the module docs).
fn refuse_unsupported(env: &Env) -> Result<(), EnvError> {
    for variable in VARIABLES {
        if let Handling::Refused(why) = variable.handling {
            let refused = match variable.name {
                "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION" => false, // checked with Redis
                _ => env.is_set(variable.name),
            };
            if refused {
                let value = env.get(variable.name).unwrap_or_default();
                return Err(EnvError::new(
                    variable.name,
                    format!("'{value}' is not supported ({why})"),
                ));
            }
        }
    }
    Ok(())
}

fn address(env: &Env, host: &str, port: &str, default_port: u16) -> Result<SocketAddr, EnvError> {
    let name = env.string(host, "0.0.0.0");
    let number: u16 = env.number(port, default_port)?;
    (name.as_str(), number)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| EnvError::new(host, format!("cannot resolve '{name}'")))
}

fn server_settings(env: &Env) -> Result<ServerSettings, EnvError> {
    let mut server = ServerSettings {
        http_listen: address(env, "HOST", "PORT", 8080)?,
        grpc_listen: address(env, "GRPC_HOST", "GRPC_PORT", 8081)?,
        debug_listen: Some(address(env, "DEBUG_HOST", "DEBUG_PORT", 6070)?),
        healthy_only_with_rules: env.bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)?,
        response_headers: env.bool("LIMIT_RESPONSE_HEADERS_ENABLED", false)?,
        response_dynamic_metadata: env.bool("RESPONSE_DYNAMIC_METADATA", false)?,
        response_header_names: ResponseHeaderNames {
            limit: env.string("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
            remaining: env.string("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
            reset: env.string("LIMIT_RESET_HEADER", "RateLimit-Reset"),
        },
        ..ServerSettings::default()
    };
    let names = &server.response_header_names;
    for (variable, name) in [
        ("LIMIT_LIMIT_HEADER", &names.limit),
        ("LIMIT_REMAINING_HEADER", &names.remaining),
        ("LIMIT_RESET_HEADER", &names.reset),
    ] {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(EnvError::new(
                variable,
                format!("'{name}' is not a header name"),
            ));
        }
    }
    // tollgate's own (`crate::config::compact_keys`).
    if let Some(keys) = env.get("TOLLGATE_COMPACT_KEYS") {
        server.compact_keys = Some(
            keys.parse()
                .map_err(|why| EnvError::new("TOLLGATE_COMPACT_KEYS", why))?,
        );
    }
    let age = env.duration("GRPC_MAX_CONNECTION_AGE", Duration::from_secs(24 * 3600))?;
    server.grpc_max_connection_age = (!age.is_zero()).then_some(age);
    let _grace = env.duration("GRPC_MAX_CONNECTION_AGE_GRACE", Duration::from_secs(3600))?;
    if env.bool("GRPC_SERVER_USE_TLS", false)? {
        let file = |name: &str| {
            env.get(name).map(PathBuf::from).ok_or_else(|| {
                EnvError::new(
                    name,
                    "missing: GRPC_SERVER_USE_TLS=true needs a certificate and a key",
                )
            })
        };
        let settings = TlsSettings {
            cert: file("GRPC_SERVER_TLS_CERT")?,
            key: file("GRPC_SERVER_TLS_KEY")?,
        };
        crate::tls::Identity::load(&settings)
            .map_err(|error| EnvError::new("GRPC_SERVER_TLS_CERT", error))?;
        server.grpc_tls = Some(settings);
    }
    Ok(server)
}

fn runtime_dir(env: &Env, redis: bool) -> Result<RuntimeDir, EnvError> {
    let mut dir = PathBuf::from(env.string("RUNTIME_ROOT", "/srv/runtime_data/current"));
    if let Some(sub) = env.get("RUNTIME_SUBDIRECTORY") {
        dir.push(sub);
    }
    dir.push(env.string("RUNTIME_APPDIRECTORY", "config"));
    // Checked only (a NoOp of the table): the files read are the same.
    let _watch_root = env.bool("RUNTIME_WATCH_ROOT", true)?;
    Ok(RuntimeDir {
        dir,
        ignore_dot_files: env.bool("RUNTIME_IGNOREDOTFILES", false)?,
        merge_domains: env.bool("MERGE_DOMAIN_CONFIG", false)?,
        shadow_mode: env.bool("SHADOW_MODE", false)?,
        quota_mode: env.bool("QUOTA_MODE", false)?,
        redis,
    })
}

/// The libraries kept at `info` under `LOG_LEVEL=debug` or `trace`.
pub const QUIET_LIBRARIES: &str = "h2=info,hyper=info,hyper_util=info,tonic=info,tower=info,rustls=info,tokio_rustls=info,opentelemetry=info,opentelemetry_sdk=info,reqwest=info";

fn log_settings(env: &Env) -> Result<LogSettings, EnvError> {
    let level = env.string("LOG_LEVEL", "WARN").to_ascii_lowercase();
    let filter = match level.as_str() {
        // Lyft's debug shows its own decisions; the HTTP/2 and gRPC
        // libraries' frame logs would drown them.
        "trace" | "debug" => format!("{level},{QUIET_LIBRARIES}"),
        "info" | "error" => level,
        "warn" | "warning" => "warn".to_owned(),
        "panic" | "fatal" => "error".to_owned(),
        other => {
            return Err(EnvError::new(
                "LOG_LEVEL",
                format!("'{other}' is not a level (trace, debug, info, warn, error, fatal, panic)"),
            ));
        }
    };
    let json = match env
        .string("LOG_FORMAT", "text")
        .to_ascii_lowercase()
        .as_str()
    {
        "text" => false,
        "json" => true,
        other => {
            return Err(EnvError::new(
                "LOG_FORMAT",
                format!("'{other}' is not a format (text or json)"),
            ));
        }
    };
    Ok(LogSettings { filter, json })
}

#[cfg(test)]
mod tests;
