//! Clients from a [`RedisConfig`]: URLs, ACL credentials, TLS certificates
//! and sentinels turned into the redis crate's clients (see
//! [`config`](crate::config) for the decisions).

use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    ClientTlsConfig, ConnectionAddr, ErrorKind, IntoConnectionInfo, RedisError, RedisResult,
    TlsCertificates, TlsMode,
};

use crate::config::{RedisConfig, SentinelConfig, TlsConfig};

/// rustls needs a process-wide crypto provider: *ring*, unless the
/// application installed one already (then that one is used).
fn crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn certificates(tls: &TlsConfig) -> RedisResult<TlsCertificates> {
    let client_tls = match (&tls.client_cert_pem, &tls.client_key_pem) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: cert.clone(),
            client_key: key.0.clone(),
        }),
        (None, None) => None,
        _ => {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "tollgate: a client certificate needs its key, and a key its certificate",
            )));
        }
    };
    Ok(TlsCertificates {
        client_tls,
        root_cert: tls.ca_pem.clone(),
    })
}

/// `addr` over TLS when `tls` (host names verified).
fn secure(addr: &ConnectionAddr, tls: bool) -> ConnectionAddr {
    match addr {
        ConnectionAddr::Tcp(host, port) if tls => ConnectionAddr::TcpTls {
            host: host.clone(),
            port: *port,
            insecure: false,
            tls_params: None,
        },
        other => other.clone(),
    }
}

/// A client for one server at `url`, with the configuration's credentials
/// and TLS.
pub(crate) fn single(url: &str, config: &RedisConfig) -> RedisResult<redis::Client> {
    let info = url.into_connection_info()?;
    let mut settings = info.redis_settings().clone();
    if let Some(user) = &config.username {
        settings = settings.set_username(user);
    }
    if let Some(password) = &config.password {
        settings = settings.set_password(password.expose());
    }
    let addr = secure(info.addr(), config.tls.is_some());
    let info = info.set_addr(addr).set_redis_settings(settings);
    match &config.tls {
        Some(tls) => {
            crypto_provider();
            redis::Client::build_with_tls(info, certificates(tls)?)
        }
        None => {
            if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
                crypto_provider();
            }
            redis::Client::open(info)
        }
    }
}

/// A sentinel client asking for the master of `sentinel`.
pub(crate) fn sentinel(
    sentinel: &SentinelConfig,
    config: &RedisConfig,
) -> RedisResult<SentinelClient> {
    let tls = config.tls.is_some();
    let addrs = sentinel
        .sentinels
        .iter()
        .map(|url| Ok(secure(url.as_str().into_connection_info()?.addr(), tls)))
        .collect::<RedisResult<Vec<_>>>()?;
    let mut builder =
        SentinelClientBuilder::new(addrs, &sentinel.master, SentinelServerType::Master)?;
    if let Some(user) = &config.username {
        builder = builder.set_client_to_redis_username(user);
    }
    if let Some(password) = &config.password {
        builder = builder.set_client_to_redis_password(password.expose());
    }
    if let Some(user) = &sentinel.username {
        builder = builder.set_client_to_sentinel_username(user);
    }
    if let Some(password) = &sentinel.password {
        builder = builder.set_client_to_sentinel_password(password.expose());
    }
    if let Some(tls_config) = &config.tls {
        crypto_provider();
        let certs = certificates(tls_config)?;
        builder = builder
            .set_client_to_redis_tls_mode(TlsMode::Secure)
            .set_client_to_redis_certificates(certs.clone())
            .set_client_to_sentinel_tls_mode(TlsMode::Secure)
            .set_client_to_sentinel_certificates(certs);
    }
    builder.build()
}
