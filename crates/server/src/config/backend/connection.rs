//! Where Redis is and how to reach it, as the `backend:` section says:
//! the target (`redis:`, `cluster:` or `sentinel:`), the ACL user and its
//! password, TLS, and the native module. Read into plain data here;
//! [`crate::redis_backend`] turns it into a `tollgate_redis::RedisConfig`.
//!
//! # Decisions
//!
//! - **Exactly one target**: `redis: URL`, `cluster: [URL, …]`, or
//!   `sentinel: {sentinels: [URL, …], master: NAME, username, password…}`
//!   (the master found through Redis Sentinel, followed across failovers).
//! - **Secrets need not sit in the file**: every password is given by one of
//!   `password` (in the file), `password_file` (a file holding it, as
//!   Kubernetes and Docker secrets are mounted; one trailing line ending is
//!   dropped) or `password_env` (an environment variable's name). Files and
//!   variables are read when the configuration is read (at start, and at
//!   each reload, which warns if the backend changed): a missing file or
//!   variable is an error naming the line, not a connection refused later.
//!   `password` overrides a password in the URL. Passwords never appear in
//!   `Debug` output or messages.
//! - **TLS** (`tls: {ca_file, cert_file, key_file}`, each optional;
//!   `tls: {}` trusts the system's roots) applies to every connection: the
//!   server, the cluster's nodes and the sentinels (`tollgate-redis`'s rule).
//!   A client certificate needs its key and the reverse. The files are read
//!   and parsed when the configuration is read, so that a wrong path or a
//!   file without a certificate is an error naming the line. A
//!   `rediss://` URL without a `tls:` section uses TLS with the system's
//!   roots.
//! - **Module**: `module: detect` (the default: the native module where
//!   every server has it, else the scripts), `never` or `require` (no
//!   start without it), as `tollgate_redis::ModuleUse`.

use std::fmt;
use std::path::{Path, PathBuf};

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use tollgate_redis::Secret;

use crate::yaml::checked_mapping;

/// Which Redis (`Debug` hides the URLs' credentials).
#[derive(Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server: `redis://host:port/db`.
    Single(String),
    /// A cluster, reached through any of these nodes.
    Cluster(Vec<String>),
    /// The master that Redis Sentinel names.
    Sentinel(SentinelSettings),
}

impl fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisTarget::Single(url) => f.debug_tuple("Single").field(&redact_url(url)).finish(),
            RedisTarget::Cluster(urls) => f
                .debug_tuple("Cluster")
                .field(&urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>())
                .finish(),
            RedisTarget::Sentinel(sentinel) => f.debug_tuple("Sentinel").field(sentinel).finish(),
        }
    }
}

/// `sentinel:`: the sentinels to ask, the master's name, and the
/// sentinels' own credentials (the data nodes' are the section's
/// `username` / `password`).
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelSettings {
    /// The sentinels' URLs (`redis://host:26379`), asked in order.
    pub sentinels: Vec<String>,
    /// The master's name (`sentinel monitor <name> …`).
    pub master: String,
    /// ACL user on the sentinels. By default, none.
    pub username: Option<String>,
    /// Password on the sentinels. By default, none.
    pub password: Option<Secret>,
}

impl fmt::Debug for SentinelSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelSettings")
            .field(
                "sentinels",
                &self
                    .sentinels
                    .iter()
                    .map(|u| redact_url(u))
                    .collect::<Vec<_>>(),
            )
            .field("master", &self.master)
            .field("username", &self.username)
            .field("password", &self.password)
            .finish()
    }
}

/// `tls:`: PEM read from the files named (`Debug` shows the paths only).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RedisTls {
    /// `ca_file`: the CAs that sign the servers' certificates; `None`: the
    /// system's roots.
    pub ca: Option<(PathBuf, Vec<u8>)>,
    /// `cert_file`: the client's certificate chain (mutual TLS).
    pub cert: Option<(PathBuf, Vec<u8>)>,
    /// `key_file`: the client certificate's private key.
    pub key: Option<(PathBuf, Secret)>,
}

impl fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca_file", &self.ca.as_ref().map(|(path, _)| path))
            .field("cert_file", &self.cert.as_ref().map(|(path, _)| path))
            .field("key_file", &self.key.as_ref().map(|(path, _)| path))
            .finish()
    }
}

impl RedisTls {
    /// `tollgate-redis`'s TLS settings.
    pub fn to_config(&self) -> tollgate_redis::TlsConfig {
        let mut config = tollgate_redis::TlsConfig::default();
        config.ca_pem = self.ca.as_ref().map(|(_, pem)| pem.clone());
        config.client_cert_pem = self.cert.as_ref().map(|(_, pem)| pem.clone());
        config.client_key_pem = self.key.as_ref().map(|(_, pem)| pem.clone());
        config
    }
}

/// A password, from one of the three keys (see the module docs).
#[derive(Default)]
pub(super) struct PasswordYaml {
    pub(super) password: Option<String>,
    pub(super) password_file: Option<PathBuf>,
    pub(super) password_env: Option<String>,
}

impl PasswordYaml {
    /// The password given, if any; `prefix` names the fields in errors.
    pub(super) fn read(self, prefix: &str) -> Result<Option<Secret>, String> {
        match (self.password, self.password_file, self.password_env) {
            (None, None, None) => Ok(None),
            (Some(password), None, None) => Ok(Some(Secret::from(password))),
            (None, Some(path), None) => {
                let mut bytes = std::fs::read(&path).map_err(|error| {
                    format!(
                        "{prefix}password_file: cannot read '{}': {error}",
                        path.display()
                    )
                })?;
                // One line ending, as `echo secret > file` leaves it.
                if bytes.ends_with(b"\n") {
                    bytes.pop();
                    if bytes.ends_with(b"\r") {
                        bytes.pop();
                    }
                }
                if bytes.is_empty() {
                    return Err(format!(
                        "{prefix}password_file: '{}' is empty",
                        path.display()
                    ));
                }
                Ok(Some(Secret(bytes)))
            }
            (None, None, Some(name)) => match std::env::var(&name) {
                Ok(value) if !value.is_empty() => Ok(Some(Secret::from(value))),
                Ok(_) => Err(format!(
                    "{prefix}password_env: the variable {name} is empty"
                )),
                Err(_) => Err(format!(
                    "{prefix}password_env: the variable {name} is not set (or not UTF-8)"
                )),
            },
            _ => Err(format!(
                "{prefix}password: give one of password, password_file or password_env"
            )),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SentinelYaml {
    #[serde(default)]
    sentinels: Vec<String>,
    #[serde(default)]
    master: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    password_file: Option<PathBuf>,
    #[serde(default)]
    password_env: Option<String>,
}

/// `sentinel:`, checked within its mapping (errors carry its line).
pub(super) struct SentinelSection(pub(super) SentinelSettings);

impl<'de> Deserialize<'de> for SentinelSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_mapping::<D, SentinelYaml, SentinelSection>(d)
    }
}

impl TryFrom<SentinelYaml> for SentinelSection {
    type Error = String;

    fn try_from(yaml: SentinelYaml) -> Result<SentinelSection, String> {
        if yaml.sentinels.is_empty() {
            return Err(
                "sentinel.sentinels: needs at least one sentinel URL (redis://host:26379)".into(),
            );
        }
        for (i, url) in yaml.sentinels.iter().enumerate() {
            check_url(&format!("sentinel.sentinels[{i}]"), url)?;
        }
        let master = match yaml.master {
            Some(master) if !master.is_empty() => master,
            _ => {
                return Err(
                    "sentinel.master: missing (the name the sentinels monitor the master under)"
                        .into(),
                );
            }
        };
        let password = PasswordYaml {
            password: yaml.password,
            password_file: yaml.password_file,
            password_env: yaml.password_env,
        }
        .read("sentinel.")?;
        Ok(SentinelSection(SentinelSettings {
            sentinels: yaml.sentinels,
            master,
            username: yaml.username,
            password,
        }))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsYaml {
    #[serde(default)]
    ca_file: Option<PathBuf>,
    #[serde(default)]
    cert_file: Option<PathBuf>,
    #[serde(default)]
    key_file: Option<PathBuf>,
}

/// `tls:`, read and checked within its mapping (errors carry its line).
pub(super) struct TlsSection(pub(super) RedisTls);

impl<'de> Deserialize<'de> for TlsSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_mapping::<D, TlsYaml, TlsSection>(d)
    }
}

fn read_file(field: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path)
        .map_err(|error| format!("tls.{field}: cannot read '{}': {error}", path.display()))
}

/// The certificates of a PEM file: at least one.
fn certificates(field: &str, path: &Path) -> Result<Vec<u8>, String> {
    let pem = read_file(field, path)?;
    let count = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| {
            format!(
                "tls.{field}: '{}' is not PEM certificates: {error}",
                path.display()
            )
        })?
        .len();
    if count == 0 {
        return Err(format!(
            "tls.{field}: '{}' holds no PEM certificate",
            path.display()
        ));
    }
    Ok(pem)
}

impl TryFrom<TlsYaml> for TlsSection {
    type Error = String;

    fn try_from(yaml: TlsYaml) -> Result<TlsSection, String> {
        if yaml.cert_file.is_some() != yaml.key_file.is_some() {
            return Err(
                "tls: a client certificate (cert_file) needs its key (key_file), and the reverse"
                    .into(),
            );
        }
        let ca = match yaml.ca_file {
            None => None,
            Some(path) => {
                let pem = certificates("ca_file", &path)?;
                Some((path, pem))
            }
        };
        let cert = match yaml.cert_file {
            None => None,
            Some(path) => {
                let pem = certificates("cert_file", &path)?;
                Some((path, pem))
            }
        };
        let key = match yaml.key_file {
            None => None,
            Some(path) => {
                let pem = read_file("key_file", &path)?;
                PrivateKeyDer::from_pem_slice(&pem).map_err(|error| {
                    format!(
                        "tls.key_file: '{}' holds no PEM private key: {error}",
                        path.display()
                    )
                })?;
                Some((path, Secret(pem)))
            }
        };
        Ok(TlsSection(RedisTls { ca, cert, key }))
    }
}

/// `module:`.
#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(super) enum ModuleYaml {
    Detect,
    Never,
    Require,
}

impl From<ModuleYaml> for tollgate_redis::ModuleUse {
    fn from(yaml: ModuleYaml) -> tollgate_redis::ModuleUse {
        match yaml {
            ModuleYaml::Detect => tollgate_redis::ModuleUse::Detect,
            ModuleYaml::Never => tollgate_redis::ModuleUse::Never,
            ModuleYaml::Require => tollgate_redis::ModuleUse::Require,
        }
    }
}

/// The one target of `redis`, `cluster` and `sentinel` given.
pub(super) fn target(
    redis: Option<String>,
    cluster: Option<Vec<String>>,
    sentinel: Option<SentinelSection>,
) -> Result<RedisTarget, String> {
    match (redis, cluster, sentinel) {
        (Some(url), None, None) => {
            check_url("redis", &url)?;
            Ok(RedisTarget::Single(url))
        }
        (None, Some(urls), None) => {
            if urls.is_empty() {
                return Err("cluster: needs at least one node URL".into());
            }
            for (i, url) in urls.iter().enumerate() {
                check_url(&format!("cluster[{i}]"), url)?;
            }
            Ok(RedisTarget::Cluster(urls))
        }
        (None, None, Some(SentinelSection(sentinel))) => Ok(RedisTarget::Sentinel(sentinel)),
        (None, None, None) => Err(
            "redis: missing (give redis: URL, cluster: [URL, ...] or sentinel: {sentinels: [URL, ...], master: NAME}; no backend section keeps the counts in memory)"
                .into(),
        ),
        _ => Err("give one of redis, cluster or sentinel, not several".into()),
    }
}

fn check_url(field: &str, url: &str) -> Result<(), String> {
    use redis::IntoConnectionInfo as _;
    url.into_connection_info()
        .map(drop)
        .map_err(|error| format!("{field}: invalid Redis URL '{}': {error}", redact_url(url)))
}

/// `url` without its credentials (`redis://user:secret@host` →
/// `redis://***@host`), for messages and logs.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let host_start = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..host_start].rfind('@') {
        Some(at) => format!("{}***{}", &url[..scheme_end], &rest[at..]),
        None => url.to_owned(),
    }
}
