//! A server on 127.0.0.1 (ports chosen by the OS), a manual clock, and the
//! clients: tonic's generated gRPC client and reqwest.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate::ManualClock;
use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::reload::Reloader;
use tollgate_server::{ServeError, Server};

/// Every network wait is bounded by this.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Awaits `future`, failing the test if it takes longer than [`TIMEOUT`].
pub async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(TIMEOUT, future)
        .await
        .expect("timed out")
}

pub struct TestServer {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub clock: ManualClock,
    pub path: PathBuf,
    pub reloader: Arc<Reloader>,
    _dir: tempfile::TempDir,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServeError>>>,
}

/// The server section every test server starts with: loopback, OS ports,
/// no polling unless `extra` says so.
const SERVER: &str = "server:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\n";

/// Starts a server on `rules` (a domain file), with `extra` lines added to
/// its `server:` section (each indented by two spaces).
pub async fn start_with(extra: &str, rules: &str) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rules.yaml");
    let mut text = SERVER.to_owned();
    if !extra.contains("reload_interval_ms") {
        text.push_str("  reload_interval_ms: 0\n");
    }
    text.push_str(extra);
    text.push_str(rules);
    std::fs::write(&path, text).expect("write config");
    let clock = ManualClock::new();
    let bound = Server::from_config_file(&path)
        .expect("valid config")
        .with_clock(clock.clone())
        .bind()
        .await
        .expect("bind");
    let (tx, rx) = oneshot::channel::<()>();
    let grpc = bound.grpc_addr();
    let http = bound.http_addr();
    let reloader = bound.reloader();
    let task = tokio::spawn(bound.run(async move {
        let _ = rx.await;
    }));
    TestServer {
        grpc,
        http,
        clock,
        path,
        reloader,
        _dir: dir,
        shutdown: Some(tx),
        task: Some(task),
    }
}

pub async fn start(rules: &str) -> TestServer {
    start_with("", rules).await
}

impl TestServer {
    pub async fn grpc_client(&self) -> RateLimitServiceClient<tonic::transport::Channel> {
        within(RateLimitServiceClient::connect(format!(
            "http://{}",
            self.grpc
        )))
        .await
        .expect("grpc connect")
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http)
    }

    /// Replaces the file atomically (write, then rename), as a deploy would.
    pub fn write_config(&self, extra: &str, rules: &str) {
        let mut text = SERVER.to_owned();
        text.push_str(extra);
        text.push_str(rules);
        let temp = self.path.with_extension("tmp");
        std::fs::write(&temp, text).expect("write");
        std::fs::rename(&temp, &self.path).expect("rename");
    }

    /// Shuts down gracefully and waits for the server to return.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            within(task)
                .await
                .expect("server task")
                .expect("server stopped cleanly");
        }
    }
}

pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .expect("client")
}

/// A gRPC descriptor of `(key, value)` entries.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

/// A gRPC request for `domain`.
pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

/// The rules most tests share.
pub const RULES: &str = "
domain: rl
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
  - key: path
    value: /login
    rate_limit: {unit: second, requests_per_unit: 1, name: login}
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 3, algorithm: fixed_window}
  - key: internal
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: multi
    rate_limits:
      - {unit: second, requests_per_unit: 2, algorithm: sliding_log}
      - {unit: minute, requests_per_unit: 3, algorithm: sliding_log}
  - key: odd
    rate_limit: {period: 10s, requests_per_unit: 5, burst: 5}
  - key: prefix
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
";

/// A metric's value in a `/metrics` text, 0 when absent.
pub fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            let rest = line.strip_prefix(name_and_labels)?;
            rest.strip_prefix(' ')?.trim().parse().ok()
        })
        .unwrap_or(0.0)
}

/// A real `redis-server` on a free loopback port (no persistence), killed
/// on drop; copied from `tollgate-redis`'s test support.
pub struct RedisServer {
    pub port: u16,
    child: Option<std::process::Child>,
    dir: tempfile::TempDir,
    cluster: bool,
}

fn redis_cli(port: u16, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl RedisServer {
    /// A fresh server on a free port, answering PING.
    pub fn start() -> RedisServer {
        RedisServer::start_as(false)
    }

    /// A fresh server on a free port, in cluster mode if `cluster`.
    fn start_as(cluster: bool) -> RedisServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let mut server = RedisServer {
            port,
            child: None,
            dir: tempfile::tempdir().expect("tempdir"),
            cluster,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let mut command = std::process::Command::new("redis-server");
        command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", self.dir.path().to_str().expect("utf-8 temp dir")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if self.cluster {
            command
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", "2000"]);
        }
        let child = command
            .spawn()
            .expect("redis-server is installed (see .ci/deps)");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while redis_cli(self.port, &["PING"]).as_deref() != Some("PONG") {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server on {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `redis-cli` against this server.
    pub fn cli(&self, args: &[&str]) -> String {
        redis_cli(self.port, args).unwrap_or_default()
    }

    /// Every key matching `pattern`.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let out = self.cli(&["--scan", "--pattern", pattern]);
        out.lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// Sends `signal` (`-STOP`, `-CONT`) through the shell's `kill`.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let status = std::process::Command::new("sh")
            .args(["-c", &format!("kill {signal} {pid}")])
            .status()
            .expect("sh");
        assert!(status.success());
    }

    /// Kills the process (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port (empty: no persistence).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// A `backend:` section on this server with `extra` lines (each
    /// indented by two spaces).
    pub fn backend(&self, extra: &str) -> String {
        format!("backend:\n  redis: {}\n{extra}", self.url())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            // A stopped process must be resumed to die cleanly.
            self.signal("-CONT");
        }
        self.kill();
    }
}

/// A 3-master Redis Cluster, no replicas (as `tollgate-redis`'s tests make).
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_as(true)).collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = std::process::Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("redis-cli");
        assert!(status.success(), "redis-cli --cluster create failed");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        for node in &nodes {
            while !node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") {
                assert!(
                    std::time::Instant::now() < deadline,
                    "cluster did not become ok"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        RedisCluster { nodes }
    }

    /// A `backend:` section on this cluster.
    pub fn backend(&self, extra: &str) -> String {
        let urls: Vec<String> = self.nodes.iter().map(RedisServer::url).collect();
        format!("backend:\n  cluster: [{}]\n{extra}", urls.join(", "))
    }
}
