//! The configuration file: envoyproxy/ratelimit's YAML, extended.
//!
//! A file is either one domain exactly as envoyproxy/ratelimit reads it
//! (`domain:` and `descriptors:` at the top), or a list of them under
//! `domains:`, with optional `server:` and `backend:` sections either way:
//!
//! ```yaml
//! domain: api
//! descriptors:
//!   - key: remote_address            # no value: one bucket per address
//!     rate_limit: {unit: second, requests_per_unit: 10}
//!   - key: path
//!     value: /login
//!     rate_limits:                   # several limits, all-or-nothing
//!       - {unit: minute, requests_per_unit: 5, algorithm: sliding_log}
//!       - {unit: day, requests_per_unit: 100, algorithm: sliding_log}
//!   - key: tenant
//!     concurrency: 10                # at most 10 in flight per tenant
//! ```
//!
//! # Layout
//!
//! [`Config::from_yaml`] reads the raw YAML structs, each validated inside its
//! own mapping so that errors keep their line (a descriptor's limits by
//! `limits`, `backend:` by `backend`, TLS identities by [`crate::tls`]), into
//! the checked rules of [`checked`] (domains, descriptor trees, limits with
//! the core's algorithm built), from which [`crate::rules`] and the backends
//! are built.
//!
//! # Guarantees
//!
//! - Every envoyproxy/ratelimit key keeps its meaning, so no file of its
//!   changes meaning here; tollgate's extensions (algorithms, `period`,
//!   `calendar`, `warmup`, [`budget`], [`concurrency`], `forward_auth`
//!   ([`actions`]), `backend`, TLS) are keys it does not have.
//! - Unknown keys are errors, and every error names the file, the line and
//!   the field (`descriptors[1].rate_limit.unit`); files a key names (TLS,
//!   secrets) are read and checked then, not at the first connection.
//! - A file naming no domain (blank, only comments, only `server:` /
//!   `backend:`, `domains: []`) is refused: a truncated file would turn every
//!   limit off.
//! - `server:` and `backend:` are read at start only; a reload takes the rules
//!   and warns if either changed.
//!
//! # Defaults
//!
//! - `algorithm`: `gcra`; `sliding_window` `slots`: 10; GCRA `burst`: the limit.
//! - `warmup` `cold_factor`: 3 (the core's `DEFAULT_COLD_FACTOR`, Guava's value).
//! - `month`: 30 days, `year`: 365 days (envoyproxy/ratelimit's); `week`: 7 days.
//! - `grpc_listen` / `http_listen`: `127.0.0.1:8081` / `127.0.0.1:8080`
//!   (loopback until told otherwise).
//! - No `backend:`: the counts are in memory ([`RedisSettings`] for Redis).
//!
//! Every key's decision in full (`replaces`, `share_threshold`, `quota_mode`,
//! calendar windows, warm-up, `requests_per_unit: 0`, TLS, `backend:`):
//! `crates/server/docs/configuration.md`, "Inside the server".

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub mod actions;
mod admin;
mod backend;
pub mod budget;
pub mod checked;
pub mod compact_keys;
pub mod concurrency;
pub mod forwarded_request;
pub mod go_syntax;
mod limits;
pub mod lyft_env;
pub mod statsd_mapping;
pub mod telemetry;
pub mod xds;

pub use crate::tls::TlsSettings;
use crate::yaml::{CheckedSeed, checked_mapping};
use admin::AdminSection;
pub use admin::AdminSettings;
use backend::BackendSection;
pub use backend::{
    BackendSettings, KeyLayout, LYFT_LAYOUT_VARIABLES, LyftEnvError, LyftLayout, PerSecondRedis,
    RedisSettings, RedisTarget, RedisTls, SentinelSettings, StartupRetry, redact_url,
};
pub use checked::{
    AlgorithmKind, BuiltAlgorithm, DescriptorConfig, DomainConfig, LimitConfig, Limits,
    QuotaConfig, Unit, Warmup,
};
pub use concurrency::{ConcurrencyConfig, DEFAULT_LEASE_TTL};
#[cfg(test)]
use limits::DEFAULT_SLOTS;
use limits::{LimitYaml, limit_of};
pub(crate) use limits::{QuotaYaml, parse_period};

/// Why a configuration file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    file: PathBuf,
    line: Option<usize>,
    column: Option<usize>,
    message: String,
}

impl ConfigError {
    /// The file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The line (from 1), when the error has a place in the file.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// What is wrong, starting with the field's path.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The backend refused the file's rules (the backend's error, shown).
    pub(crate) fn rules(file: &Path, error: &dyn fmt::Display) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            line: None,
            column: None,
            message: error.to_string(),
        }
    }

    pub(crate) fn io(file: &Path, error: &std::io::Error) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            line: None,
            column: None,
            message: format!("cannot read the file: {error}"),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let (Some(line), Some(column)) = (self.line, self.column) {
            write!(f, ":{line}:{column}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// A parsed, validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Listeners, limits and auth: read at start.
    pub server: ServerSettings,
    /// Where the counts live: read at start.
    pub backend: BackendSettings,
    /// The admin API ([`crate::http::admin`]): read at start.
    pub admin: AdminSettings,
    /// The rules, one tree per domain.
    pub domains: Vec<DomainConfig>,
}

impl Config {
    /// Reads and validates `path`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file, the line and the field.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::io(path, &error))?;
        Config::from_yaml(path, &text)
    }

    /// Validates `text`, read from `path` (named in errors).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file, the line and the field.
    pub fn from_yaml(path: &Path, text: &str) -> Result<Config, ConfigError> {
        Config::parse(path, text, None)
    }

    /// Validates one file of envoyproxy/ratelimit's config directory (read
    /// through [`lyft_env`]): rules only (`server:`, `backend:` and
    /// `admin:` come from the environment), a quota naming no algorithm
    /// is a fixed window (envoyproxy/ratelimit's), and `redis` says whether
    /// the environment put the counts on Redis.
    pub(crate) fn domains_from_lyft_yaml(
        path: &Path,
        text: &str,
        redis: bool,
    ) -> Result<Vec<DomainConfig>, ConfigError> {
        let _fixed = limits::DefaultAlgorithm::set(AlgorithmKind::FixedWindow);
        let config = Config::parse(path, text, Some(redis))?;
        let sections = [
            ("server", config.server != ServerSettings::default()),
            ("backend", config.backend != BackendSettings::default()),
            ("admin", config.admin != AdminSettings::default()),
        ];
        if let Some((section, _)) = sections.iter().find(|(_, given)| *given) {
            return Err(ConfigError {
                file: path.to_owned(),
                line: None,
                column: None,
                message: format!(
                    "{section}: a file of the config directory holds rules only; the server is configured by envoyproxy/ratelimit's environment variables"
                ),
            });
        }
        Ok(config.domains)
    }

    /// Reads `text`; `redis` (when given) says whether the rules run on
    /// Redis, else the file's `backend:` says.
    fn parse(path: &Path, text: &str, redis: Option<bool>) -> Result<Config, ConfigError> {
        if is_blank(text) {
            return Err(ConfigError {
                file: path.to_owned(),
                line: None,
                column: None,
                message:
                    "the file is empty (no domain): refused, a file must name the domain it limits"
                        .into(),
            });
        }
        // A first look at `backend:` alone, so that a rule Redis cannot run
        // is refused at its own line during the full read. If the section
        // is bad, the full read reports it.
        let redis = redis.unwrap_or_else(|| {
            serde_yaml_ng::from_str::<BackendOnly>(text)
                .is_ok_and(|only| matches!(only.backend.0, BackendSettings::Redis(_)))
        });
        let _redis = RedisRules::set(redis);
        let file: FileYaml = serde_yaml_ng::from_str(text).map_err(|error| {
            let location = error.location();
            ConfigError {
                file: path.to_owned(),
                line: location.as_ref().map(|l| l.line()),
                column: location.as_ref().map(|l| l.column()),
                message: crate::yaml::shorten_quoted(&strip_location(&error.to_string())),
            }
        })?;
        file.into_config().map_err(|message| ConfigError {
            file: path.to_owned(),
            line: None,
            column: None,
            message,
        })
    }
}

/// Whether `text` holds no YAML content at all: nothing but blank lines,
/// comments and document markers (a file truncated, or not yet written).
fn is_blank(text: &str) -> bool {
    text.lines().all(|line| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#') || line == "---" || line == "..."
    })
}

/// The `backend:` section alone (every other key ignored).
#[derive(Deserialize)]
struct BackendOnly {
    #[serde(default)]
    backend: BackendSection,
}

thread_local! {
    /// Whether the file being read puts its rules on Redis: serde gives a
    /// descriptor no context, and the check belongs at the descriptor's
    /// line. Set by [`Config::from_yaml`] for the duration of one read.
    static REDIS_RULES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Sets [`REDIS_RULES`] until dropped (restoring the previous value).
struct RedisRules(bool);

impl RedisRules {
    fn set(redis: bool) -> RedisRules {
        RedisRules(REDIS_RULES.with(|flag| flag.replace(redis)))
    }
}

impl Drop for RedisRules {
    fn drop(&mut self) {
        REDIS_RULES.with(|flag| flag.set(self.0));
    }
}

/// serde_yaml_ng appends " at line L column C"; we print the place first.
fn strip_location(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

/// Listeners, request limits and auth.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSettings {
    /// Where the Envoy RLS gRPC API listens. By default, `127.0.0.1:8081`.
    pub grpc_listen: SocketAddr,
    /// Where the HTTP JSON API listens. By default, `127.0.0.1:8080`.
    pub http_listen: SocketAddr,
    /// A bearer token required on both APIs (except `/healthz`, `/readyz`).
    /// By default, none.
    pub bearer_token: Option<String>,
    /// A file holding the bearer token (trailing whitespace trimmed), so
    /// that the token need not be in the configuration. By default, none.
    pub bearer_token_file: Option<PathBuf>,
    /// The largest request body or gRPC message. By default, 2 MiB.
    pub max_request_bytes: usize,
    /// The most descriptors in one request. By default, 64.
    pub max_descriptors: usize,
    /// The most entries in one descriptor. By default, 32.
    pub max_entries: usize,
    /// The longest descriptor key, value or domain, in bytes. By default, 1,024.
    pub max_key_bytes: usize,
    /// Requests decided at once over both APIs; more are refused at once
    /// with 503 / `RESOURCE_EXHAUSTED`. By default, 1,024.
    pub max_concurrent_requests: usize,
    /// Add `x-ratelimit-limit`, `-remaining` and `-reset` to gRPC responses
    /// (`response_headers_to_add`). By default, off.
    pub response_headers: bool,
    /// Send envoyproxy/ratelimit's dynamic metadata in RLS answers
    /// (`{domain, descriptors, hitsAddend, metadata}`, see [`crate::grpc`];
    /// its `RESPONSE_DYNAMIC_METADATA`). By default, off.
    pub response_dynamic_metadata: bool,
    /// How often the file is read for changes, in milliseconds; 0 turns
    /// hot reload off. By default, 1,000.
    pub reload_interval_ms: u64,
    /// A connection that sends nothing for this long, in milliseconds, is
    /// closed (a silent client, headers that never end, an idle keep-alive
    /// connection, a peer gone); gRPC peers are pinged every half of it,
    /// so a live one is never cut (see [`crate::listen`]). By default,
    /// 30,000.
    pub idle_timeout_ms: u64,
    /// The capacity of each compact table of the in-memory backend, which
    /// turns them on for the rules that qualify (see [`compact_keys`]). By
    /// default, none (off).
    pub compact_keys: Option<compact_keys::CompactKeys>,
    /// TLS on the gRPC listener. By default, none (plain HTTP/2).
    pub grpc_tls: Option<TlsSettings>,
    /// TLS on the HTTP listener. By default, none (plain HTTP).
    pub http_tls: Option<TlsSettings>,
    /// The debug listener (`/rlconfig`, `/stats`): envoyproxy/ratelimit's
    /// `DEBUG_HOST`/`DEBUG_PORT` (set by [`lyft_env`] only). By default,
    /// none.
    #[serde(skip)]
    pub debug_listen: Option<SocketAddr>,
    /// The names of the `response_headers` (envoyproxy/ratelimit's
    /// `LIMIT_*_HEADER`, set by [`lyft_env`] only). By default,
    /// `x-ratelimit-limit`, `-remaining` and `-reset`.
    #[serde(skip)]
    pub response_header_names: ResponseHeaderNames,
    /// `GET /healthcheck` fails while no rule is loaded
    /// (envoyproxy/ratelimit's `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`,
    /// set by [`lyft_env`] only). By default, off.
    #[serde(skip)]
    pub healthy_only_with_rules: bool,
    /// A gRPC connection older than this is sent a GOAWAY
    /// (envoyproxy/ratelimit's `GRPC_MAX_CONNECTION_AGE`, set by
    /// [`lyft_env`] only). By default, none.
    #[serde(skip)]
    pub grpc_max_connection_age: Option<std::time::Duration>,
}

/// The names of the three rate-limit headers of an RLS answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHeaderNames {
    /// The limit. By default, `x-ratelimit-limit`.
    pub limit: String,
    /// What remains. By default, `x-ratelimit-remaining`.
    pub remaining: String,
    /// Seconds until the reset. By default, `x-ratelimit-reset`.
    pub reset: String,
}

impl Default for ResponseHeaderNames {
    fn default() -> ResponseHeaderNames {
        ResponseHeaderNames {
            limit: "x-ratelimit-limit".into(),
            remaining: "x-ratelimit-remaining".into(),
            reset: "x-ratelimit-reset".into(),
        }
    }
}

impl Default for ServerSettings {
    fn default() -> ServerSettings {
        ServerSettings {
            grpc_listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            http_listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            bearer_token: None,
            bearer_token_file: None,
            max_request_bytes: 2 << 20,
            max_descriptors: 64,
            max_entries: 32,
            max_key_bytes: 1024,
            max_concurrent_requests: 1024,
            response_headers: false,
            response_dynamic_metadata: false,
            reload_interval_ms: 1000,
            idle_timeout_ms: 30_000,
            compact_keys: None,
            grpc_tls: None,
            http_tls: None,
            debug_listen: None,
            response_header_names: ResponseHeaderNames::default(),
            healthy_only_with_rules: false,
            grpc_max_connection_age: None,
        }
    }
}

// ---- the file as written ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileYaml {
    #[serde(default)]
    server: ServerSection,
    #[serde(default)]
    backend: BackendSection,
    #[serde(default)]
    admin: AdminSection,
    #[serde(default, deserialize_with = "unique_domains")]
    domains: Option<Vec<DomainYaml>>,
    #[serde(default, deserialize_with = "non_empty_domain")]
    domain: Option<String>,
    #[serde(default, deserialize_with = "some_unique_descriptors")]
    descriptors: Option<Vec<DescriptorYaml>>,
    /// The one domain's forward-auth actions ([`actions`]).
    #[serde(default)]
    forward_auth: Option<actions::ForwardAuthSection>,
}

/// The `server:` section, its tokens checked within the mapping (so that
/// an error has the section's line).
#[derive(Default)]
struct ServerSection(ServerSettings);

impl<'de> Deserialize<'de> for ServerSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_mapping::<D, ServerSettings, ServerSection>(d)
    }
}

impl TryFrom<ServerSettings> for ServerSection {
    type Error = String;

    fn try_from(settings: ServerSettings) -> Result<ServerSection, String> {
        if settings.bearer_token.is_some() && settings.bearer_token_file.is_some() {
            return Err(
                "bearer_token: give either bearer_token or bearer_token_file, not both".into(),
            );
        }
        if settings.bearer_token.as_deref() == Some("") {
            return Err("bearer_token: must not be empty".into());
        }
        if settings.idle_timeout_ms == 0 {
            return Err("idle_timeout_ms: must be at least 1".into());
        }
        Ok(ServerSection(settings))
    }
}

/// A sequence of mappings, each read as `Y` and then turned into a `T` by
/// `check` (given the elements before) *within* its mapping: an error
/// raised there has the element's line and path (`descriptors[1]`), not
/// the sequence's.
fn seq_checked<'de, D, Y, T, F>(d: D, check: F) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    Y: Deserialize<'de>,
    F: Fn(&[T], Y) -> Result<T, String>,
{
    struct Seq<F, Y, T>(F, std::marker::PhantomData<(Y, T)>);
    impl<'de, F, Y, T> serde::de::Visitor<'de> for Seq<F, Y, T>
    where
        Y: Deserialize<'de>,
        F: Fn(&[T], Y) -> Result<T, String>,
    {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::new();
            loop {
                let before = &out;
                let seed = CheckedSeed(|yaml: Y| (self.0)(before, yaml), std::marker::PhantomData);
                match seq.next_element_seed(seed)? {
                    Some(item) => out.push(item),
                    None => return Ok(out),
                }
            }
        }
    }
    d.deserialize_seq(Seq(check, std::marker::PhantomData))
}

/// `domain:`, not empty (refused within the scalar: the error has its line).
fn non_empty_domain<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    struct NonEmpty;
    impl serde::de::Visitor<'_> for NonEmpty {
        type Value = String;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a domain name")
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            if v.is_empty() {
                Err(E::custom("config file cannot have empty domain"))
            } else {
                Ok(v.to_owned())
            }
        }
    }
    d.deserialize_str(NonEmpty).map(Some)
}

/// `domains:`, each name non-empty and given once.
fn unique_domains<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<DomainYaml>>, D::Error> {
    seq_checked(d, |before: &[DomainYaml], domain: DomainYaml| {
        if domain.domain.is_empty() {
            return Err("domain: config file cannot have empty domain".to_owned());
        }
        if before.iter().any(|d| d.domain == domain.domain) {
            return Err(format!("domain: duplicate domain '{}'", domain.domain));
        }
        Ok(domain)
    })
    .map(Some)
}

/// A `descriptors:` list, each `(key, value)` given once; under a Redis
/// backend, no `sliding_log`.
fn unique_descriptors<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<DescriptorYaml>, D::Error> {
    seq_checked(d, |before: &[DescriptorYaml], raw: RawDescriptor| {
        // Built first: `descriptor()` owns the rule that an empty value is
        // no value, which the duplicate check compares by.
        let descriptor = DescriptorYaml::try_from(raw)?;
        let (key, value) = (&descriptor.0.key, descriptor.0.value.as_deref());
        if before
            .iter()
            .any(|d| d.0.key == *key && d.0.value.as_deref() == value)
        {
            return Err(match value {
                Some(value) => format!("duplicate descriptor key '{key}' value '{value}'"),
                None => format!("duplicate descriptor key '{key}' without a value"),
            });
        }
        if REDIS_RULES.with(std::cell::Cell::get) {
            refuse_sliding_log(&descriptor.0)?;
        }
        Ok(descriptor)
    })
}

fn some_unique_descriptors<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<DescriptorYaml>>, D::Error> {
    unique_descriptors(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DomainYaml {
    domain: String,
    #[serde(default, deserialize_with = "unique_descriptors")]
    descriptors: Vec<DescriptorYaml>,
    /// How a forwarded request becomes descriptors ([`actions`]).
    #[serde(default)]
    forward_auth: Option<actions::ForwardAuthSection>,
}

/// A descriptor, validated (read through [`unique_descriptors`]).
struct DescriptorYaml(DescriptorConfig);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDescriptor {
    key: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    rate_limit: Option<LimitYaml>,
    #[serde(default)]
    rate_limits: Option<Vec<QuotaYaml>>,
    #[serde(default)]
    shadow_mode: bool,
    /// envoyproxy/ratelimit's `quota_mode`.
    #[serde(default)]
    quota_mode: bool,
    /// envoyproxy/ratelimit's `metadata` (any mapping).
    #[serde(default)]
    metadata: Option<serde_yaml_ng::Mapping>,
    #[serde(default)]
    detailed_metric: bool,
    #[serde(default)]
    value_to_metric: bool,
    #[serde(default)]
    share_threshold: bool,
    /// At most N in flight per bucket (see [`concurrency`]).
    #[serde(default)]
    concurrency: Option<concurrency::ConcurrencyYaml>,
    /// The limits are a budget, charged what was spent (see [`budget`]).
    #[serde(default)]
    budget: Option<budget::BudgetYaml>,
    #[serde(default, deserialize_with = "unique_descriptors")]
    descriptors: Vec<DescriptorYaml>,
}

impl TryFrom<RawDescriptor> for DescriptorYaml {
    type Error = String;

    fn try_from(raw: RawDescriptor) -> Result<DescriptorYaml, String> {
        let key = raw.key.clone();
        descriptor(raw).map_err(|error| format!("descriptor '{key}': {error}"))
    }
}

fn descriptor(raw: RawDescriptor) -> Result<DescriptorYaml, String> {
    {
        if raw.key.is_empty() {
            return Err("key: descriptor has empty key".into());
        }
        // envoyproxy/ratelimit keys whose meaning this server does not
        // give: refused, never accepted and ignored (`false` is the
        // default meaning, and is accepted).
        let value = raw.value.filter(|v| !v.is_empty());
        if raw.share_threshold && !value.as_deref().is_some_and(|v| v.contains('*')) {
            return Err(
                "share_threshold: only a value holding a wildcard '*' can share its threshold"
                    .into(),
            );
        }
        let mut replaces = Vec::new();
        let limit = match (raw.rate_limit, raw.rate_limits) {
            (Some(_), Some(_)) => {
                return Err("give either rate_limit or rate_limits, not both".into());
            }
            (None, None) => None,
            (Some(limit), None) => {
                replaces = limit.replaces()?;
                limit_of(limit.split()?)?
            }
            (None, Some(list)) => {
                if list.is_empty() {
                    return Err("rate_limits: needs at least one limit".into());
                }
                let mut kinds = Vec::with_capacity(list.len());
                let mut quotas = Vec::with_capacity(list.len());
                for (i, item) in list.iter().enumerate() {
                    let (kind, quota) = item
                        .validate()
                        .map_err(|error| format!("rate_limits[{i}].{error}"))?;
                    kinds.push(kind);
                    quotas.push(quota);
                }
                let limits = Limits::each(&kinds, quotas)
                    .map_err(|error| format!("rate_limits: {error}"))?;
                Some(LimitConfig::Limited { name: None, limits })
            }
        };
        let concurrency = raw
            .concurrency
            .map(concurrency::ConcurrencyYaml::validate)
            .transpose()?;
        let budget = match raw.budget {
            None => None,
            Some(budget) => Some(budget_of(budget, limit.as_ref())?),
        };
        // Duplicates were refused as they were read (`unique_descriptors`).
        let descriptors: Vec<DescriptorConfig> = raw.descriptors.into_iter().map(|d| d.0).collect();
        Ok(DescriptorYaml(DescriptorConfig {
            key: raw.key,
            value,
            limit,
            concurrency,
            budget,
            shadow_mode: raw.shadow_mode,
            quota_mode: raw.quota_mode,
            metadata: raw.metadata.map(serde_yaml_ng::Value::Mapping),
            replaces,
            share_threshold: raw.share_threshold,
            detailed_metric: raw.detailed_metric,
            value_to_metric: raw.value_to_metric,
            descriptors,
        }))
    }
}

/// A descriptor's `budget:`, checked against its limits (see [`budget`]:
/// a limit to charge, run by an algorithm whose debt both backends carry).
fn budget_of(
    budget: budget::BudgetYaml,
    limit: Option<&LimitConfig>,
) -> Result<budget::BudgetConfig, String> {
    let budget = budget.validate()?;
    match limit {
        Some(LimitConfig::Limited { limits, .. }) => {
            if let Some(kind) = limits
                .algorithm
                .kinds()
                .into_iter()
                .find(|&kind| !budget::carries_debt(kind))
            {
                return Err(format!(
                    "budget: a budget runs on gcra (the default), fixed_window, sliding_window, sliding_log or calendar, not {}: {}",
                    kind.name(),
                    budget::why_not(kind)
                ));
            }
            Ok(budget)
        }
        Some(LimitConfig::Unlimited { .. }) => {
            Err("budget: an unlimited rule has nothing to charge".into())
        }
        Some(LimitConfig::Blocked { .. }) => {
            Err("budget: a rule of requests_per_unit: 0 has nothing to charge".into())
        }
        None => Err("budget: needs a rate_limit or rate_limits to charge".into()),
    }
}

/// Redis runs no sliding log (see `tollgate-redis`'s `limit` module).
/// Nested descriptors are checked as they are read.
fn refuse_sliding_log(d: &DescriptorConfig) -> Result<(), String> {
    match &d.limit {
        Some(LimitConfig::Limited { limits, .. })
            if limits
                .algorithm
                .kinds()
                .contains(&AlgorithmKind::SlidingLog) =>
        {
            Err(format!(
                "descriptor '{}': runs sliding_log, which the Redis backend does not offer (use sliding_window, exact to its slots)",
                d.key
            ))
        }
        _ => Ok(()),
    }
}

impl FileYaml {
    fn into_config(self) -> Result<Config, String> {
        let mut domains = Vec::new();
        match (self.domain, self.domains) {
            (Some(_), Some(_)) => {
                return Err("give either domain (one domain) or domains (a list), not both".into());
            }
            (Some(domain), None) => domains.push(DomainYaml {
                domain,
                descriptors: self.descriptors.unwrap_or_default(),
                forward_auth: self.forward_auth,
            }),
            (None, Some(list)) => {
                if self.descriptors.is_some() {
                    return Err("descriptors: belong inside each entry of domains".into());
                }
                if self.forward_auth.is_some() {
                    return Err("forward_auth: belongs inside each entry of domains".into());
                }
                domains = list;
            }
            (None, None) => {
                if self.descriptors.is_some() {
                    return Err("domain: config file cannot have empty domain".into());
                }
                return Err(
                    "domain: missing: a file must name the domain it limits (domain: NAME, or a list under domains:)"
                        .into(),
                );
            }
        }
        if domains.is_empty() {
            return Err("domains: needs at least one domain".into());
        }
        // Empty and duplicate domains, duplicate descriptors, sliding_log
        // under Redis and token conflicts were refused as they were read,
        // at their own lines.
        let domains = domains
            .into_iter()
            .map(|d| DomainConfig {
                domain: d.domain,
                descriptors: d.descriptors.into_iter().map(|d| d.0).collect(),
                forward_auth: d.forward_auth.map(|f| std::sync::Arc::new(f.0)),
            })
            .collect();
        let server = self.server.0;
        if self.admin.0.enabled
            && server.bearer_token.is_none()
            && server.bearer_token_file.is_none()
        {
            return Err(admin::NEEDS_TOKEN.into());
        }
        if server.compact_keys.is_some() && matches!(self.backend.0, BackendSettings::Redis(_)) {
            return Err(compact_keys::NOT_ON_REDIS.into());
        }
        Ok(Config {
            server,
            backend: self.backend.0,
            admin: self.admin.0,
            domains,
        })
    }
}

#[cfg(test)]
mod tests;
