//! Where and how to connect: plain data, with no connection of its own, so
//! that a server's `backend:` section or a user's own settings map onto it
//! field by field; [`Redis::open`](crate::Redis::open) builds the
//! connection.
//!
//! # Decisions
//!
//! - **One TLS setting for every connection** of a configuration: the
//!   servers, the cluster's nodes and the sentinels. Certificates are PEM
//!   bytes (read them with [`TlsConfig::from_files`]); without a CA the
//!   system's roots are trusted; a client certificate and key make it
//!   mutual TLS. Host names are verified; there is no switch to turn that
//!   off. The TLS stack is rustls (with *ring*): no OpenSSL.
//! - **ACL**: a username and a password for the servers (`AUTH user pass`;
//!   a password alone is the `default` user). Sentinels have their own
//!   ([`SentinelConfig`]), since their `requirepass` is usually not the
//!   data nodes'.
//! - **Sentinel**: the master is asked of the sentinels at connect time,
//!   and again each time a limiter's circuit breaker opens (the master died
//!   or was demoted: it answers with errors or not at all), so the limiter
//!   follows a failover without a restart; in between, decisions go to the
//!   limiter's failure policy. Only the master is used: a rate limiter must
//!   read what it writes.
//! - Secrets are never printed: `Debug` shows `"***"` for passwords and
//!   keys.

use std::fmt;
use std::io;
use std::path::Path;
use std::time::Duration;

use crate::module::ModuleUse;

/// Client timeouts and retries. Every setting has a default.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long the client waits for one reply. By default, 50 ms.
    pub response_timeout: Duration,
    /// How long the client waits to connect. By default, 50 ms.
    pub connection_timeout: Duration,
    /// Reconnection attempts after a broken connection (of the server, or
    /// of each cluster node; a cluster's redirections are followed by
    /// tollgate's router, see [`cluster`](crate::cluster)). By default, 2.
    pub retries: u32,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            response_timeout: Duration::from_millis(50),
            connection_timeout: Duration::from_millis(50),
            retries: 2,
        }
    }
}

/// Everything needed to connect to Redis.
///
/// # Examples
///
/// ```
/// use tollgate_redis::{RedisConfig, TlsConfig};
///
/// let mut config = RedisConfig::sentinel(["redis://10.0.0.1:26379"], "limits");
/// config.username = Some("tollgate".into());
/// config.password = Some("s3cret".into());
/// config.tls = Some(TlsConfig::default()); // the system's roots
/// assert!(!format!("{config:?}").contains("s3cret"));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RedisConfig {
    /// The server, the cluster or the sentinels.
    pub target: Target,
    /// ACL user. By default, none (the `default` user).
    pub username: Option<String>,
    /// Password (of `username`, or of the `default` user). By default, none.
    pub password: Option<Secret>,
    /// TLS for every connection. By default, none (plain TCP); a `rediss://`
    /// URL asks for TLS with the system's roots too.
    pub tls: Option<TlsConfig>,
    /// Whether to use the native module (see [`module`](crate::module)). By
    /// default, [`ModuleUse::Detect`].
    pub module: ModuleUse,
    /// Timeouts and retries. By default, [`Options::default`].
    pub options: Options,
}

impl RedisConfig {
    /// One server at `url` (`redis://host:port/db` or `rediss://…`).
    pub fn single(url: impl Into<String>) -> RedisConfig {
        RedisConfig::new(Target::Single(url.into()))
    }

    /// A cluster reached through any of `nodes` (URLs).
    pub fn cluster<S: Into<String>>(nodes: impl IntoIterator<Item = S>) -> RedisConfig {
        RedisConfig::new(Target::Cluster(nodes.into_iter().map(Into::into).collect()))
    }

    /// The master named `master` of the `sentinels` (URLs,
    /// `redis://host:26379`).
    pub fn sentinel<S: Into<String>>(
        sentinels: impl IntoIterator<Item = S>,
        master: impl Into<String>,
    ) -> RedisConfig {
        RedisConfig::new(Target::Sentinel(SentinelConfig {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            master: master.into(),
            username: None,
            password: None,
        }))
    }

    fn new(target: Target) -> RedisConfig {
        RedisConfig {
            target,
            username: None,
            password: None,
            tls: None,
            module: ModuleUse::default(),
            options: Options::default(),
        }
    }
}

/// What to connect to.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Target {
    /// One server (URL).
    Single(String),
    /// A cluster, through any of these nodes (URLs).
    Cluster(Vec<String>),
    /// A master found through Redis Sentinel.
    Sentinel(SentinelConfig),
}

/// Redis Sentinel: where the sentinels are and which master to ask for.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SentinelConfig {
    /// The sentinels' URLs (`redis://host:26379`); asked in order.
    pub sentinels: Vec<String>,
    /// The master's name (`sentinel monitor <name> …`).
    pub master: String,
    /// ACL user on the sentinels. By default, none.
    pub username: Option<String>,
    /// Password on the sentinels. By default, none.
    pub password: Option<Secret>,
}

/// TLS settings, certificates in PEM.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct TlsConfig {
    /// The CA certificates that sign the servers' certificates. By default,
    /// none: the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// The client's certificate chain, for mutual TLS. By default, none.
    pub client_cert_pem: Option<Vec<u8>>,
    /// The client certificate's private key. By default, none.
    pub client_key_pem: Option<Secret>,
}

impl TlsConfig {
    /// Reads the CA and the client's certificate and key from PEM files.
    ///
    /// # Errors
    ///
    /// A file cannot be read.
    pub fn from_files(
        ca: Option<&Path>,
        client_cert: Option<&Path>,
        client_key: Option<&Path>,
    ) -> io::Result<TlsConfig> {
        let read = |path: Option<&Path>| path.map(std::fs::read).transpose();
        Ok(TlsConfig {
            ca_pem: read(ca)?,
            client_cert_pem: read(client_cert)?,
            client_key_pem: read(client_key)?.map(Secret),
        })
    }
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("ca_pem", &self.ca_pem.as_ref().map(|_| "<pem>"))
            .field(
                "client_cert_pem",
                &self.client_cert_pem.as_ref().map(|_| "<pem>"),
            )
            .field("client_key_pem", &self.client_key_pem)
            .finish()
    }
}

/// A password or a private key: its `Debug` is `"***"`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub Vec<u8>);

impl Secret {
    /// The secret as text (lossy for bytes that are not UTF-8).
    pub fn expose(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Secret {
        Secret(s.as_bytes().to_vec())
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Secret {
        Secret(s.into_bytes())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}
