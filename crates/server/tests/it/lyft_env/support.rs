//! A server started as envoyproxy/ratelimit's `docker-compose.yml` starts
//! it: its environment, its config directory (`/data` holding
//! `ratelimit/config/*.yaml`), here under a temporary directory and on
//! loopback ports the OS picks.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate::ManualClock;
use tollgate_server::config::lyft_env::Env;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::reload::Reloader;
use tollgate_server::service::Service;
use tollgate_server::{ServeError, Server};

use crate::shared::grpc;
// Not every test module sends gRPC.
#[allow(unused_imports)]
pub use grpc::{descriptor, request};

pub use tollgate_testkit::RedisServer;

/// Every network wait is bounded by this.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Awaits `future`, failing the test if it takes longer than [`TIMEOUT`].
pub async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(TIMEOUT, future)
        .await
        .expect("timed out")
}

/// The `ratelimit` service's environment in envoyproxy/ratelimit's
/// `docker-compose.yml`, unchanged but for the Redis address (`REDIS_URL`
/// is set by [`start`]).
pub const DOCKER_COMPOSE: &[(&str, &str)] = &[
    ("USE_STATSD", "false"),
    ("LOG_LEVEL", "debug"),
    ("REDIS_SOCKET_TYPE", "tcp"),
    ("RUNTIME_ROOT", "/data"),
    ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ("MEMCACHE_HOST_PORT", "memcached:11211"),
];

/// Where the counts live.
pub enum Counts<'a> {
    /// In the process (`BACKEND_TYPE=memory`, tollgate's own value), on a
    /// manual clock.
    Memory,
    /// On this Redis (`REDIS_URL=127.0.0.1:PORT`).
    Redis(&'a RedisServer),
    /// On a Redis expected on this loopback port, not started yet.
    Absent(u16),
}

pub struct LyftServer {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub debug: SocketAddr,
    pub clock: ManualClock,
    pub reloader: Arc<Reloader>,
    pub service: Arc<Service>,
    /// `RUNTIME_ROOT` (the compose file's `/data`).
    pub root: PathBuf,
    _tmp: tempfile::TempDir,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServeError>>>,
}

/// The config directory under `root` (`/data/ratelimit/config`).
pub fn config_dir(root: &Path) -> PathBuf {
    root.join("ratelimit").join("config")
}

/// Starts a server from [`DOCKER_COMPOSE`] plus `extra` variables, with
/// `layout` writing the config directory under `RUNTIME_ROOT` first.
/// Listeners are on loopback ports the OS picks (`HOST`, `PORT`, … are
/// envoyproxy/ratelimit's variables too); hot reload is driven by the
/// test through [`LyftServer::reloader`].
pub async fn start(
    counts: Counts<'_>,
    extra: &[(&str, &str)],
    layout: impl FnOnce(&Path),
) -> LyftServer {
    try_start(counts, extra, layout).await.expect("bind")
}

/// [`start`], saying why the server did not start (Redis refused, or not
/// there within `REDIS_STARTUP_MAX_ELAPSED_TIME`) instead of failing.
pub async fn try_start(
    counts: Counts<'_>,
    extra: &[(&str, &str)],
    layout: impl FnOnce(&Path),
) -> Result<LyftServer, ServeError> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("data");
    std::fs::create_dir_all(&root).expect("root");
    layout(&root);
    let root_text = root.to_str().expect("utf-8 path").to_owned();
    let mut vars: Vec<(String, String)> = DOCKER_COMPOSE
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let mut set = |k: &str, v: &str| {
        vars.retain(|(name, _)| name != k);
        vars.push((k.to_owned(), v.to_owned()));
    };
    set("RUNTIME_ROOT", &root_text);
    for name in ["HOST", "GRPC_HOST", "DEBUG_HOST"] {
        set(name, "127.0.0.1");
    }
    for name in ["PORT", "GRPC_PORT", "DEBUG_PORT"] {
        set(name, "0");
    }
    match counts {
        Counts::Memory => set("BACKEND_TYPE", "memory"),
        Counts::Redis(redis) => {
            let url = redis.url();
            set("REDIS_URL", url.trim_start_matches("redis://"));
        }
        Counts::Absent(port) => set("REDIS_URL", &format!("127.0.0.1:{port}")),
    }
    for (k, v) in extra {
        set(k, v);
    }
    let env: Env = vars.into_iter().collect();
    let clock = ManualClock::new();
    let mut server = Server::from_lyft_env(&env)
        .expect("starts from the environment")
        .with_reload_interval(Duration::ZERO);
    if matches!(counts, Counts::Memory) {
        server = server.with_clock(clock.clone());
    }
    let bound = server.bind().await?;
    let (tx, rx) = oneshot::channel::<()>();
    let grpc = bound.grpc_addr();
    let http = bound.http_addr();
    let debug = bound.debug_addr().expect("DEBUG_PORT is served");
    let reloader = bound.reloader();
    let service = bound.service();
    let task = tokio::spawn(bound.run(async move {
        let _ = rx.await;
    }));
    Ok(LyftServer {
        grpc,
        http,
        debug,
        clock,
        reloader,
        service,
        root,
        _tmp: tmp,
        shutdown: Some(tx),
        task: Some(task),
    })
}

impl LyftServer {
    pub async fn grpc_client(&self) -> RateLimitServiceClient<tonic::transport::Channel> {
        within(RateLimitServiceClient::connect(format!(
            "http://{}",
            self.grpc
        )))
        .await
        .expect("grpc connect")
    }

    /// Every rule in force, as `(rule id, requests per unit)`.
    pub fn rules(&self) -> Vec<(String, u64)> {
        self.service
            .rules()
            .rules()
            .iter()
            .map(|rule| {
                let per_unit = rule
                    .limits
                    .as_ref()
                    .map_or(0, |limits| limits.quotas[0].requests_per_unit);
                (rule.id.to_string(), per_unit)
            })
            .collect()
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

pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}
