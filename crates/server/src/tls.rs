//! TLS (rustls) on either listener, optional: `server.grpc_tls` and
//! `server.http_tls` in the file, each `{cert: PEM path, key: PEM path}`.
//! Plain by default.
//!
//! # Decisions
//!
//! - **rustls with *ring*** everywhere: no OpenSSL to link, and the one
//!   provider tonic's `tls-ring` feature already brings in.
//! - **gRPC: tonic's own TLS** (`ServerTlsConfig`), which handshakes each
//!   connection in its own task (bounded by [`HANDSHAKE_TIMEOUT`] too) and
//!   advertises `h2` by ALPN, over the same listener stream as the plain
//!   server.
//! - **HTTP: `tokio-rustls` behind axum's `Listener` trait** rather than
//!   `axum-server` or a hand-written hyper loop: [`TlsListener`] accepts TCP
//!   connections in a task, handshakes each in a task of its own (bounded by
//!   [`HANDSHAKE_TIMEOUT`], so a client that connects and says nothing holds
//!   no slot of the accept loop), and hands finished TLS streams to
//!   `axum::serve`. The HTTP server is thus the same `axum::serve` with the
//!   same graceful shutdown, plain or TLS, and no second HTTP stack or
//!   crate is pulled in. ALPN offers `h2` and `http/1.1`.
//! - **Checked when the file is read**: both files are read, the chain and
//!   key parsed, and a rustls server configuration built from them, so that
//!   a missing file, a file with no certificate, or a key that does not fit
//!   the configuration is a configuration error with the file's line.
//! - The bearer token and every other check apply unchanged over TLS: TLS
//!   only wraps the byte stream.
//! - Certificates are read at start; rotating them needs a restart (a
//!   reload warns that the `server` section changed).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::server::TlsStream;

use crate::listen::{Acceptor, IdleTimeout};
use crate::yaml::checked_mapping;

/// An accepted TCP connection, closed when idle ([`crate::listen`]).
type Connection = IdleTimeout<tokio::net::TcpStream>;

/// How long a client has to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshaken connections waiting for `axum::serve` to take them.
const READY_QUEUE: usize = 64;

/// A certificate chain and its key, read and checked.
pub struct Identity {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("certs", &self.certs.len())
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// Reads and checks the files of `settings`.
    ///
    /// # Errors
    ///
    /// A message naming the field and the path: a file that cannot be read,
    /// holds no certificate or no private key, or a pair rustls refuses.
    pub fn load(settings: &TlsSettings) -> Result<Identity, String> {
        let read = |field: &str, path: &std::path::Path| {
            std::fs::read(path)
                .map_err(|error| format!("{field}: cannot read '{}': {error}", path.display()))
        };
        let cert_pem = read("cert", &settings.cert)?;
        let key_pem = read("key", &settings.key)?;
        let certs = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| {
                format!(
                    "cert: '{}' is not a PEM certificate chain: {error}",
                    settings.cert.display()
                )
            })?;
        if certs.is_empty() {
            return Err(format!(
                "cert: '{}' holds no PEM certificate",
                settings.cert.display()
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|error| {
            format!(
                "key: '{}' holds no PEM private key: {error}",
                settings.key.display()
            )
        })?;
        let identity = Identity {
            cert_pem,
            key_pem,
            certs,
            key,
        };
        identity.rustls_config()?;
        Ok(identity)
    }

    /// A rustls server configuration offering `h2` and `http/1.1`.
    fn rustls_config(&self) -> Result<rustls::ServerConfig, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| format!("tls: {error}"))?
            .with_no_client_auth()
            .with_single_cert(self.certs.clone(), self.key.clone_key())
            .map_err(|error| format!("key: does not fit the certificate: {error}"))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }

    /// tonic's configuration for the gRPC listener.
    pub fn tonic_config(&self) -> tonic::transport::ServerTlsConfig {
        // The same handshake bound as HTTP: a client trickling its
        // ClientHello holds a handshake task for at most this long.
        tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(
                &self.cert_pem,
                &self.key_pem,
            ))
            .timeout(HANDSHAKE_TIMEOUT)
    }

    /// An acceptor for the HTTP listener.
    ///
    /// # Errors
    ///
    /// As [`Identity::load`] (the files were checked then; this cannot fail
    /// unless rustls changed its mind).
    pub fn acceptor(&self) -> Result<TlsAcceptor, String> {
        Ok(TlsAcceptor::from(Arc::new(self.rustls_config()?)))
    }
}

/// A TCP listener whose connections come out TLS-handshaken, for
/// `axum::serve` (see the [module docs](self)).
#[derive(Debug)]
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<Connection>, SocketAddr)>,
    local: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Starts accepting on `listener` (within a tokio runtime).
    pub fn new(mut listener: Acceptor, acceptor: TlsAcceptor, local: SocketAddr) -> TlsListener {
        let (tx, ready) = mpsc::channel(READY_QUEUE);
        let accepting = tokio::spawn(async move {
            loop {
                // Accept errors are waited out by the listener itself.
                let (tcp, peer) = listener.accept().await;
                if tx.is_closed() {
                    return;
                }
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            // The server stopped: drop the connection.
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(error)) => tracing::debug!(%peer, %error, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        TlsListener {
            ready,
            local,
            accepting,
        }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        // Stop accepting (and release the port) with the server.
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<Connection>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accept task only ends when aborted by our own drop, so this
            // is not reached; wait forever rather than spin.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// A listener's certificate and key, checked when the file is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// The certificate chain, PEM, leaf first.
    pub cert: PathBuf,
    /// The private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsYaml {
    cert: PathBuf,
    key: PathBuf,
}

impl<'de> Deserialize<'de> for TlsSettings {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_mapping::<D, TlsYaml, TlsSettings>(d)
    }
}

impl TryFrom<TlsYaml> for TlsSettings {
    type Error = String;

    fn try_from(yaml: TlsYaml) -> Result<TlsSettings, String> {
        let settings = TlsSettings {
            cert: yaml.cert,
            key: yaml.key,
        };
        Identity::load(&settings)?;
        Ok(settings)
    }
}
