//! A test PKI and a `redis-server` on a TLS port, shared by the Redis
//! client's and the server's TLS tests.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
};

use crate::{redis_is_process_with, spawn_on_free_port};

/// The ACL user of [`TlsRedis`] and its password.
pub const TLS_USER: (&str, &str) = ("alice", "alice-secret");

/// A CA, a server certificate for `127.0.0.1` / `localhost` and a client
/// certificate, PEM.
pub struct Pki {
    /// The CA's certificate.
    pub ca: String,
    /// The server's certificate and key.
    pub server_cert: String,
    /// The server's key.
    pub server_key: String,
    /// The client's certificate.
    pub client_cert: String,
    /// The client's key.
    pub client_key: String,
}

impl Pki {
    /// A fresh PKI: a CA and two leaves it signs, the client one named
    /// `client_name`.
    pub fn generate(client_name: &str) -> Pki {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Distinct names: a leaf named like its issuer looks self-signed.
        ca_params.distinguished_name = DistinguishedName::new();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "tollgate test CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
            .expect("CA");
        let leaf = |names: Vec<String>| {
            let key = KeyPair::generate().expect("leaf key");
            let mut params = CertificateParams::new(names.clone()).expect("leaf params");
            params.distinguished_name = DistinguishedName::new();
            params
                .distinguished_name
                .push(DnType::CommonName, &names[0]);
            let cert = params.signed_by(&key, &ca).expect("leaf");
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf(vec!["127.0.0.1".into(), "localhost".into()]);
        let (client_cert, client_key) = leaf(vec![client_name.into()]);
        Pki {
            ca: ca.pem(),
            server_cert,
            server_key,
            client_cert,
            client_key,
        }
    }
}

/// `redis-server` on a TLS port only, requiring client certificates, with
/// the user [`TLS_USER`] and the `default` user off; killed on drop. Its
/// files (certificates, keys) are written in the directory it is given.
pub struct TlsRedis {
    /// The TLS port, checked to be this server's own.
    pub port: u16,
    child: Child,
}

impl TlsRedis {
    /// Starts one with `pki`'s server certificate, its files in `dir`.
    pub fn start(dir: &Path, pki: &Pki) -> TlsRedis {
        let write = |name: &str, pem: &str| -> PathBuf {
            let path = dir.join(name);
            std::fs::write(&path, pem).expect("write a PEM file");
            path
        };
        let cert = write("redis-server.crt", &pki.server_cert);
        let key = write("redis-server.key", &pki.server_key);
        let ca = write("redis-ca.crt", &pki.ca);
        let client_cert = write("redis-probe.crt", &pki.client_cert);
        let client_key = write("redis-probe.key", &pki.client_key);
        let (user, password) = TLS_USER;
        // The port is checked to be this server's own, over TLS as the user.
        let (port, child) = spawn_on_free_port(
            "redis-server (TLS)",
            |port| {
                let mut command = Command::new("redis-server");
                command
                    .args(["--port", "0", "--bind", "127.0.0.1"])
                    .args(["--tls-port", &port.to_string()])
                    .arg("--tls-cert-file")
                    .arg(&cert)
                    .arg("--tls-key-file")
                    .arg(&key)
                    .arg("--tls-ca-cert-file")
                    .arg(&ca)
                    .args(["--tls-auth-clients", "yes"])
                    .args([
                        "--user",
                        user,
                        "on",
                        &format!(">{password}"),
                        "~*",
                        "&*",
                        "+@all",
                    ])
                    .args(["--user", "default", "off"])
                    .args(["--save", "", "--appendonly", "no"])
                    .arg("--dir")
                    .arg(dir)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                command
            },
            |port, pid| {
                let options: [&OsStr; 11] = [
                    "--tls".as_ref(),
                    "--cacert".as_ref(),
                    ca.as_ref(),
                    "--cert".as_ref(),
                    client_cert.as_ref(),
                    "--key".as_ref(),
                    client_key.as_ref(),
                    "--user".as_ref(),
                    user.as_ref(),
                    "--pass".as_ref(),
                    password.as_ref(),
                ];
                redis_is_process_with(port, pid, &options)
            },
        );
        TlsRedis { port, child }
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
