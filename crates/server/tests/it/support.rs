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
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::reload::Reloader;
use tollgate_server::{ServeError, Server};

use crate::shared::grpc;
// Not every test module sends gRPC.
#[allow(unused_imports)]
pub use grpc::{descriptor, request};

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
    start_on(None, extra, rules).await
}

/// As [`start_with`], deciding with `backend` if given.
pub async fn start_on(
    backend: Option<Arc<dyn tollgate_server::Backend>>,
    extra: &str,
    rules: &str,
) -> TestServer {
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
    let mut server = Server::from_config_file(&path)
        .expect("valid config")
        .with_clock(clock.clone());
    if let Some(backend) = backend {
        server = server.with_backend(backend);
    }
    let bound = server.bind().await.expect("bind");
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

    /// The `/metrics` page, in Prometheus' text format.
    pub async fn metrics(&self) -> String {
        within(http_client().get(self.url("/metrics")).send())
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text")
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

/// One `POST /v1/check` of `body`, with the bearer `token` if any: the
/// answer's JSON.
pub async fn check_json(
    server: &TestServer,
    token: Option<&str>,
    body: &serde_json::Value,
) -> serde_json::Value {
    let mut request = http_client().post(server.url("/v1/check")).json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    within(request.send())
        .await
        .expect("check")
        .json()
        .await
        .expect("json")
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

pub use tollgate_testkit::{RedisCluster, RedisServer};

/// Extra `backend:` lines for tests of what Redis decides, not of the
/// deadline: one that no loaded 2-core CI machine reaches, so that no
/// decision goes to the failure policy by accident (the default deadline is
/// 5 ms, which a Redis round trip can pass while the other test binaries
/// compete for the cores).
pub const PATIENT: &str = "  deadline: 2s\n";

/// A `backend:` section of the server's configuration on a test Redis.
pub trait BackendSection {
    /// The section, with `extra` lines (each indented by two spaces).
    fn backend(&self, extra: &str) -> String;
}

impl BackendSection for RedisServer {
    fn backend(&self, extra: &str) -> String {
        format!("backend:\n  redis: {}\n{extra}", self.url())
    }
}

impl BackendSection for RedisCluster {
    fn backend(&self, extra: &str) -> String {
        format!("backend:\n  cluster: [{}]\n{extra}", self.urls().join(", "))
    }
}
