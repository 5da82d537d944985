//! The server's `backend:` for production Redis: TLS with a
//! custom CA and a client certificate under an ACL user whose password is
//! read from a file, and a master found through Redis Sentinel, followed
//! across a failover. Real `redis-server` and `redis-sentinel` processes,
//! started here on free loopback ports.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_testkit::tls::{Pki, TlsRedis};

use crate::support::*;

const RULES: &str = "
domain: prod
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: many
    rate_limit: {unit: hour, requests_per_unit: 100000}
";

fn pki() -> Pki {
    Pki::generate("tollgate-server")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

/// A process killed (and waited for) on drop.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The server on Redis over TLS with a client certificate, as user
/// `alice` whose password comes from a file: decisions are Redis's (the
/// third call of a 2-per-minute rule is over), and a wrong password stops
/// the server at start rather than deciding by the policy.
#[tokio::test]
async fn the_server_decides_on_tls_redis_with_a_client_certificate_and_an_acl_user() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki();
    let redis = TlsRedis::start(dir.path(), &pki);
    let port = redis.port;
    let password = write(dir.path(), "password", "alice-secret\n");
    let backend = |password: &Path| {
        format!(
            "backend:\n  redis: redis://127.0.0.1:{port}\n  username: alice\n  password_file: {}\n  tls:\n    ca_file: {}\n    cert_file: {}\n    key_file: {}\n  module: never\n  failure_policy: fail_closed\n  deadline: 2s\n  response_timeout: 2s\n  connection_timeout: 2s\n",
            password.display(),
            write(dir.path(), "ca.crt", &pki.ca).display(),
            write(dir.path(), "client.crt", &pki.client_cert).display(),
            write(dir.path(), "client.key", &pki.client_key).display(),
        )
    };
    let server = start_with("", &format!("{}{RULES}", backend(&password))).await;
    let mut client = server.grpc_client().await;
    for expected in [Code::Ok, Code::Ok, Code::OverLimit] {
        let response =
            within(client.should_rate_limit(request("prod", vec![descriptor(&[("user", "u1")])])))
                .await
                .expect("answered")
                .into_inner();
        assert_eq!(response.overall_code(), expected);
    }
    let text = server.metrics().await;
    assert_eq!(
        metric(
            &text,
            "tollgate_redis_decisions_total{rule=\"prod.user\",source=\"redis\"}"
        ),
        3.0,
        "every decision by Redis: {text}"
    );
    server.stop().await;

    // A wrong password (from the file) is refused at start.
    let wrong = write(dir.path(), "wrong", "guess");
    let path = dir.path().join("wrong.yaml");
    std::fs::write(
        &path,
        format!(
            "server:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\n{}{RULES}",
            backend(&wrong)
        ),
    )
    .expect("write");
    let error = tollgate_server::Server::from_config_file(&path)
        .expect("a valid file")
        .bind()
        .await
        .expect_err("a wrong password must stop the server at start");
    let message = error.to_string();
    assert!(message.contains("cannot connect"), "{message}");
    assert!(!message.contains("guess"), "the password leaked: {message}");
}

/// A `redis-sentinel` watching `master_port` as `main`.
fn sentinel(dir: &Path, master_port: u16) -> (Process, u16) {
    // The port is checked to be this sentinel's own (see the testkit).
    let (port, child) = tollgate_testkit::spawn_on_free_port(
        "redis-sentinel",
        |port| {
            let conf = write(
                dir,
                &format!("sentinel-{port}.conf"),
                &format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\n\
                     sentinel monitor main 127.0.0.1 {master_port} 1\n\
                     sentinel down-after-milliseconds main 500\n\
                     sentinel failover-timeout main 2000\n",
                    dir.display()
                ),
            );
            let mut command = Command::new("redis-sentinel");
            command
                .arg(&conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            command
        },
        tollgate_testkit::redis_is_process,
    );
    (Process(child), port)
}

fn sentinel_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// One call on the `many` rule, answered within a bound of `deadline`.
async fn call(
    client: &mut RateLimitServiceClient<tonic::transport::Channel>,
    deadline: Duration,
) -> Code {
    let started = Instant::now();
    let code =
        within(client.should_rate_limit(request("prod", vec![descriptor(&[("many", "k")])])))
            .await
            .expect("answered")
            .into_inner()
            .overall_code();
    // The deadline bounds every decision (loosely: the machine is shared).
    assert!(
        started.elapsed() < deadline * 40,
        "took {:?}",
        started.elapsed()
    );
    code
}

/// The server finds the master through Sentinel; the master is killed
/// mid-run: decisions go to the failure policy (fail closed: OVER_LIMIT),
/// each answered within a bound of the deadline, then to the promoted
/// replica (OK again), within 15 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_follows_a_sentinel_failover() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut master = RedisServer::start();
    let replica = RedisServer::start();
    assert_eq!(
        replica.cli(&["REPLICAOF", "127.0.0.1", &master.port.to_string()]),
        "OK"
    );
    wait_for("the replica did not sync", Duration::from_secs(10), || {
        replica
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")
    });
    let (_sentinel, sentinel_port) = sentinel(dir.path(), master.port);
    wait_for(
        "the sentinel did not see the replica",
        Duration::from_secs(15),
        || {
            sentinel_cli(sentinel_port, &["SENTINEL", "REPLICAS", "main"])
                .contains(&replica.port.to_string())
        },
    );
    let deadline = Duration::from_millis(50);
    let backend = format!(
        "backend:\n  sentinel:\n    sentinels: [redis://127.0.0.1:{sentinel_port}]\n    master: main\n  module: never\n  failure_policy: fail_closed\n  deadline: 50ms\n  response_timeout: 100ms\n  connection_timeout: 100ms\n  retries: 1\n"
    );
    let server = start_with("", &format!("{backend}{RULES}")).await;
    let mut client = server.grpc_client().await;
    for _ in 0..5 {
        assert_eq!(call(&mut client, deadline).await, Code::Ok);
    }
    master.kill();
    let started = Instant::now();
    let (mut by_policy, mut back) = (0, false);
    while started.elapsed() < Duration::from_secs(15) {
        match call(&mut client, deadline).await {
            Code::OverLimit => by_policy += 1,
            _ if by_policy > 0 => {
                back = true;
                break;
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(by_policy > 0, "no decision went to the failure policy");
    assert!(back, "no decision on the new master within 15 s");
    assert!(replica.cli(&["ROLE"]).starts_with("master"));
    let text = server.metrics().await;
    assert!(
        metric(
            &text,
            "tollgate_redis_policy_decisions_total{rule=\"prod.many\",result=\"denied\"}"
        ) > 0.0,
        "{text}"
    );
    server.stop().await;
}
