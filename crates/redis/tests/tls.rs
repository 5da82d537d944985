//! TLS (rustls, a custom CA, client certificates) and ACL credentials
//! against a real `redis-server` listening only on its TLS port, with
//! certificates generated here by rcgen and a user `alice` that has a
//! password, the `default` user switched off.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
};
use tollgate::{Gcra, Quota};
use tollgate_redis::{
    FailurePolicy, Options, Redis, RedisConfig, RedisLimiter, Secret, Source, TlsConfig,
};
use tollgate_testkit::{redis_is_process_with, spawn_on_free_port};

/// A CA, a server certificate for 127.0.0.1 and a client certificate, PEM.
struct Pki {
    ca: String,
    server_cert: String,
    server_key: String,
    client_cert: String,
    client_key: String,
}

fn pki() -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Distinct names: a leaf named like its issuer looks self-signed.
    ca_params.distinguished_name = DistinguishedName::new();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "tollgate test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf = |names: Vec<String>| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names.clone()).unwrap();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, &names[0]);
        let cert = params.signed_by(&key, &ca).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf(vec!["127.0.0.1".into(), "localhost".into()]);
    let (client_cert, client_key) = leaf(vec!["tollgate-client".into()]);
    Pki {
        ca: ca.pem(),
        server_cert,
        server_key,
        client_cert,
        client_key,
    }
}

/// `redis-server` on a TLS port only, killed (and its files removed) on drop.
struct TlsServer {
    port: u16,
    child: Child,
    dir: PathBuf,
}

impl TlsServer {
    fn start(pki: &Pki) -> TlsServer {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tollgate-tls-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, pem: &str| {
            let path = dir.join(name);
            std::fs::write(&path, pem).unwrap();
            path
        };
        let (cert, key, ca) = (
            file("server.crt", &pki.server_cert),
            file("server.key", &pki.server_key),
            file("ca.crt", &pki.ca),
        );
        let (client_cert, client_key) = (
            file("client.crt", &pki.client_cert),
            file("client.key", &pki.client_key),
        );
        // The port is checked to be this server's own (see the testkit),
        // over TLS as alice.
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
                        "alice",
                        "on",
                        ">alice-secret",
                        "~*",
                        "&*",
                        "+@all",
                    ])
                    .args(["--user", "default", "off"])
                    .args(["--save", "", "--appendonly", "no"])
                    .arg("--dir")
                    .arg(&dir)
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
                    "alice".as_ref(),
                    "--pass".as_ref(),
                    "alice-secret".as_ref(),
                ];
                redis_is_process_with(port, pid, &options)
            },
        );
        TlsServer { port, child, dir }
    }

    fn config(&self, pki: &Pki) -> RedisConfig {
        let mut config = RedisConfig::single(format!("redis://127.0.0.1:{}", self.port));
        config.username = Some("alice".into());
        config.password = Some("alice-secret".into());
        let mut tls = TlsConfig::default();
        tls.ca_pem = Some(pki.ca.clone().into_bytes());
        tls.client_cert_pem = Some(pki.client_cert.clone().into_bytes());
        tls.client_key_pem = Some(Secret::from(pki.client_key.clone()));
        config.tls = Some(tls);
        config.options = Options {
            response_timeout: Duration::from_secs(1),
            connection_timeout: Duration::from_secs(1),
            retries: 0,
        };
        config
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn tls_with_a_custom_ca_a_client_certificate_and_an_acl_user_decides_on_redis() {
    let pki = pki();
    let server = TlsServer::start(&pki);
    let config = server.config(&pki);
    assert!(
        !format!("{config:?}").contains("alice-secret"),
        "Debug printed the password"
    );
    let redis = Redis::open(&config).await.expect("TLS + ACL connect");
    let limiter = RedisLimiter::builder(redis, "tls")
        .limit(Gcra::new(Quota::per_minute(2).unwrap()).unwrap())
        .failure_policy(FailurePolicy::FailOpen)
        .deadline(Duration::from_secs(1))
        .build()
        .unwrap();
    for expected in [true, true, false] {
        let outcome = limiter.check_outcome("k", 1).await.unwrap();
        assert_eq!(outcome.source, Source::Redis, "not decided on Redis");
        assert_eq!(outcome.decision.is_allowed(), expected);
    }
}

#[tokio::test]
async fn a_wrong_password_a_missing_client_certificate_or_an_unknown_ca_are_refused() {
    let pki = pki();
    let server = TlsServer::start(&pki);

    let mut wrong_password = server.config(&pki);
    wrong_password.password = Some("guess".into());
    assert!(Redis::open(&wrong_password).await.is_err());

    let mut no_client_cert = server.config(&pki);
    if let Some(tls) = &mut no_client_cert.tls {
        tls.client_cert_pem = None;
        tls.client_key_pem = None;
    }
    assert!(Redis::open(&no_client_cert).await.is_err());

    let mut other_ca = server.config(&pki);
    if let Some(tls) = &mut other_ca.tls {
        tls.ca_pem = Some(pki_other_ca().into_bytes());
    }
    assert!(Redis::open(&other_ca).await.is_err());

    let mut plain = server.config(&pki);
    plain.tls = None;
    assert!(Redis::open(&plain).await.is_err());

    let mut cert_without_key = server.config(&pki);
    if let Some(tls) = &mut cert_without_key.tls {
        tls.client_key_pem = None;
    }
    let error = Redis::open(&cert_without_key).await.unwrap_err();
    assert!(error.to_string().contains("key"), "{error}");

    // The same server, with everything right, still answers.
    assert!(Redis::open(&server.config(&pki)).await.is_ok());
}

fn pki_other_ca() -> String {
    pki().ca
}
