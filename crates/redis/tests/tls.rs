//! TLS (rustls, a custom CA, client certificates) and ACL credentials
//! against a real `redis-server` listening only on its TLS port, with
//! certificates generated here by rcgen and a user `alice` that has a
//! password, the `default` user switched off.

use std::time::Duration;

use tollgate::{Gcra, Quota};
use tollgate_redis::{
    FailurePolicy, Options, Redis, RedisConfig, RedisLimiter, Secret, Source, TlsConfig,
};
use tollgate_testkit::tls::{Pki, TLS_USER, TlsRedis};

/// A CA, a server certificate for 127.0.0.1 and a client certificate, PEM.
/// The TLS `redis-server` and the directory of its files (removed on drop,
/// after the server: fields drop in order).
struct TlsServer {
    redis: TlsRedis,
    _dir: tempfile::TempDir,
}

fn pki() -> Pki {
    Pki::generate("tollgate-client")
}

impl TlsServer {
    fn start(pki: &Pki) -> TlsServer {
        let dir = tempfile::tempdir().unwrap();
        let redis = TlsRedis::start(dir.path(), pki);
        TlsServer { redis, _dir: dir }
    }

    fn config(&self, pki: &Pki) -> RedisConfig {
        let mut config = RedisConfig::single(format!("redis://127.0.0.1:{}", self.redis.port));
        config.username = Some(TLS_USER.0.into());
        config.password = Some(TLS_USER.1.into());
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
