//! A load client for the server: decisions per second and latency
//! percentiles over gRPC and HTTP, on loopback, bounded in time.
//!
//! ```text
//! cargo run --release -p tollgate-server --example load -- [SECONDS] [CONCURRENCY] [BACKEND] [API]
//! ```
//!
//! API is `grpc`, `http` or `both` (the default).
//!
//! BACKEND is `floor` (no rate-limit server: a bare tonic server answering
//! a constant `OK`, gRPC only, the transport's cost alone, to compare the
//! server against), `memory` (the default), `redis` (a `redis-server` started by
//! this program on a free loopback port, no persistence, stopped at the
//! end), a `redis://` URL (an existing server), or `direct`: no server at
//! all, the same calls (same rules, keys, deadline and policy) made
//! through `tollgate-redis` directly on a `redis-server` of its own, by
//! CONCURRENCY tasks sharing one multiplexed connection as the server's
//! limiters do: the Redis-bound rate the server is compared with. With
//! Redis, the backend
//! section sets a deadline of 20 ms (200 ms with Redis capped, below) and
//! `fail_open`, and the decisions
//! taken by the failure policy instead of Redis are printed: a figure with
//! many of them measured the policy, not Redis.
//!
//! **Redis-bound runs.** With `TOLLGATE_BENCH_REDIS_CPU=P` in the
//! environment, the `redis-server` this program starts (backends `redis` and
//! `direct`) runs under a CPU quota of P % of one core (a cgroup of its own:
//! v2 `cpu.max`, else v1 `cpu.cfs_quota_us`: 1 ms per 100/P ms; needs root; the
//! run stops with a message if the quota cannot be set), so that Redis's
//! CPU is the scarce resource and both the server and the direct client are
//! bound by it, whatever else runs on the machine: the wall rates of the
//! two are then the Redis-bound rates to compare. Without it, read
//! `redis cpu/decision` (Redis's own CPU per decision, printed after each
//! Redis run), whose inverse is the Redis-bound rate. With
//! `TOLLGATE_BENCH_REDIS_CORE=N` as well, that `redis-server` runs alone on
//! core N and this process on the others (see [`pin_from_env`]).
//!
//! Starts the server in this process on 127.0.0.1 (ports chosen by the OS,
//! the monotonic clock), then for each API runs
//! CONCURRENCY client tasks in a closed loop (each sends its next request
//! when the previous answer arrives) for SECONDS (default 5; concurrency
//! 32), over one connection per task. Keys are spread over 10,000 users
//! under a GCRA rule high enough that most are admitted, plus 1 in 10
//! requests to a tight rule that denies, so both paths are measured. Client
//! and server share the machine's cores: the figures are for the pair.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tollgate_server::Server;
use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus,
};
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};

const SERVER: &str = "
server:
  grpc_listen: 127.0.0.1:0
  http_listen: 127.0.0.1:0
  max_concurrent_requests: 4096
  reload_interval_ms: 0
";

const RULES: &str = "
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: tight
    rate_limit: {unit: second, requests_per_unit: 10}
";

struct Report {
    decisions: u64,
    errors: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
}

impl Report {
    fn print(&self, api: &str) {
        let per_second = self.decisions as f64 / self.elapsed.as_secs_f64();
        println!(
            "{api:5} decisions/s {per_second:>10.0}  p50 {:>7.1} µs  p99 {:>7.1} µs  p99.9 {:>7.1} µs  max {:>8.1} µs  errors {}",
            self.latency.value_at_quantile(0.50) as f64 / 1e3,
            self.latency.value_at_quantile(0.99) as f64 / 1e3,
            self.latency.value_at_quantile(0.999) as f64 / 1e3,
            self.latency.max() as f64 / 1e3,
            self.errors,
        );
    }
}

/// Redis's own CPU time (user + sys, seconds) and commands processed so
/// far, from `INFO`: their deltas over a run divided by its decisions are
/// what one decision costs Redis, i.e. the inverse of the Redis-bound rate,
/// and unlike a wall-clock rate they hold on a loaded machine.
fn redis_usage(server: &tollgate_testkit::RedisServer) -> (f64, u64) {
    let info = server.cli(&["INFO", "all"]);
    let field = |name: &str| -> f64 {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0.0)
    };
    (
        field("used_cpu_user") + field("used_cpu_sys"),
        field("total_commands_processed") as u64,
    )
}

/// Both peers' Redis deadline: 20 ms, or 200 ms when Redis's CPU is capped
/// (a throttled Redis stalls for up to a quota period: the runs measure
/// Redis's rate, not the failure policy).
fn deadline() -> Duration {
    if std::env::var_os("TOLLGATE_BENCH_REDIS_CPU").is_some() {
        Duration::from_millis(200)
    } else {
        Duration::from_millis(20)
    }
}

/// `redis-server`'s CPU capped for a run (see the module docs): the process
/// in a cgroup of its own with a CPU quota, moved back out and the cgroup
/// removed on drop.
struct CpuCap {
    dir: std::path::PathBuf,
    parent_procs: std::path::PathBuf,
    pid: u32,
}

impl CpuCap {
    /// Caps `server` at `percent` of one core, if `TOLLGATE_BENCH_REDIS_CPU`
    /// asks for it.
    fn from_env(server: &tollgate_testkit::RedisServer) -> Result<Option<CpuCap>, String> {
        let Ok(percent) = std::env::var("TOLLGATE_BENCH_REDIS_CPU") else {
            return Ok(None);
        };
        let percent: u64 = percent
            .parse()
            .ok()
            .filter(|p| (1..=100).contains(p))
            .ok_or(format!(
                "TOLLGATE_BENCH_REDIS_CPU: a percentage of one core, 1 to 100, not '{percent}'"
            ))?;
        CpuCap::apply(server.pid(), percent)
            .map(Some)
            .map_err(|e| format!("cannot cap redis-server's CPU: {e}"))
    }

    fn apply(pid: u32, percent: u64) -> std::io::Result<CpuCap> {
        // The kernel's smallest quota (1 ms) and the shortest period that
        // gives the share: the shortest throttled stretches (at 20 %, 1 ms
        // of CPU per 5 ms), so that a decision's deadline is not spent
        // waiting for the next period.
        const QUOTA_US: u64 = 1_000;
        let (quota, period) = (QUOTA_US, QUOTA_US * 100 / percent);
        let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let root = if v2 {
            "/sys/fs/cgroup"
        } else {
            "/sys/fs/cgroup/cpu"
        };
        let dir = std::path::Path::new(root).join(format!("tollgate-bench-{pid}"));
        std::fs::create_dir(&dir)?;
        let cap = CpuCap {
            dir: dir.clone(),
            parent_procs: std::path::Path::new(root).join("cgroup.procs"),
            pid,
        };
        if v2 {
            std::fs::write(dir.join("cpu.max"), format!("{quota} {period}"))?;
        } else {
            std::fs::write(dir.join("cpu.cfs_period_us"), period.to_string())?;
            std::fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string())?;
        }
        std::fs::write(dir.join("cgroup.procs"), pid.to_string())?;
        println!("redis-server capped at {percent} % of one core ({quota} µs per {period} µs)");
        Ok(cap)
    }
}

impl Drop for CpuCap {
    fn drop(&mut self) {
        // Back to the parent (the process may have exited already), then the
        // empty cgroup can go.
        let _ = std::fs::write(&self.parent_procs, self.pid.to_string());
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// With `TOLLGATE_BENCH_REDIS_CORE=N`: `redis-server` pinned to core N and
/// this process (server and clients) to the other cores (`taskset`), so
/// that Redis has a core of its own, as on a host of its own in
/// production: its caches are not the load's, and what it costs per
/// decision is its own work, not the refills after the server ran on its
/// core.
fn pin_from_env(server: &tollgate_testkit::RedisServer) -> Result<(), String> {
    let Ok(core) = std::env::var("TOLLGATE_BENCH_REDIS_CORE") else {
        return Ok(());
    };
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let core: usize = core
        .parse()
        .ok()
        .filter(|c| *c < cores && cores > 1)
        .ok_or(format!(
            "TOLLGATE_BENCH_REDIS_CORE: a core below {cores}, with another left, not '{core}'"
        ))?;
    let others: Vec<String> = (0..cores)
        .filter(|c| *c != core)
        .map(|c| c.to_string())
        .collect();
    for (pid, list) in [
        (server.pid(), core.to_string()),
        (std::process::id(), others.join(",")),
    ] {
        let status = std::process::Command::new("taskset")
            .args(["-a", "-pc", &list, &pid.to_string()])
            .stdout(std::process::Stdio::null())
            .status()
            .map_err(|e| format!("taskset: {e}"))?;
        if !status.success() {
            return Err(format!("taskset -a -pc {list} {pid}: {status}"));
        }
    }
    println!(
        "redis-server on core {core}, this process on cores {}",
        others.join(",")
    );
    Ok(())
}

/// Prints what `decisions` cost Redis between two [`redis_usage`] readings.
fn print_redis_cost(api: &str, before: (f64, u64), after: (f64, u64), decisions: u64) {
    let decisions = decisions.max(1) as f64;
    println!(
        "{api:5} redis cpu/decision {:>6.2} µs  commands/decision {:.3}",
        (after.0 - before.0) * 1e6 / decisions,
        (after.1 - before.1) as f64 / decisions,
    );
}

fn key(worker: usize, i: u64) -> (&'static str, String) {
    if i % 10 == 0 {
        ("tight", format!("t{}", worker % 4))
    } else {
        ("user", format!("u{}", (i * 7919 + worker as u64) % 10_000))
    }
}

async fn run_grpc(addr: std::net::SocketAddr, workers: usize, seconds: u64) -> Report {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..workers {
        tasks.push(tokio::spawn(async move {
            let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
                .await
                .expect("connect");
            let mut latency = Histogram::<u64>::new(3).expect("histogram");
            let (mut decisions, mut errors, mut i) = (0u64, 0u64, 0u64);
            while Instant::now() < deadline {
                i += 1;
                let (k, v) = key(worker, i);
                let request = RateLimitRequest {
                    domain: "bench".into(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry {
                            key: k.into(),
                            value: v,
                        }],
                        ..RateLimitDescriptor::default()
                    }],
                    hits_addend: 1,
                };
                let sent = Instant::now();
                match tokio::time::timeout(
                    Duration::from_secs(5),
                    client.should_rate_limit(request),
                )
                .await
                {
                    Ok(Ok(_)) => {
                        decisions += 1;
                        let _ = latency.record(sent.elapsed().as_nanos() as u64);
                    }
                    _ => errors += 1,
                }
            }
            (decisions, errors, latency)
        }));
    }
    collect(tasks, started).await
}

async fn run_http(addr: std::net::SocketAddr, workers: usize, seconds: u64) -> Report {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let url: Arc<str> = format!("http://{addr}/v1/check").into();
    let mut tasks = Vec::new();
    for worker in 0..workers {
        let url = Arc::clone(&url);
        tasks.push(tokio::spawn(async move {
            // One connection per task, as the gRPC side has.
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .timeout(Duration::from_secs(5))
                .build()
                .expect("client");
            let mut latency = Histogram::<u64>::new(3).expect("histogram");
            let (mut decisions, mut errors, mut i) = (0u64, 0u64, 0u64);
            while Instant::now() < deadline {
                i += 1;
                let (k, v) = key(worker, i);
                let body = format!(
                    r#"{{"domain":"bench","descriptors":[{{"entries":[{{"key":"{k}","value":"{v}"}}]}}]}}"#
                );
                let sent = Instant::now();
                let answer = client
                    .post(&*url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                let ok = match answer {
                    Ok(response) => response.status() == 200 && response.bytes().await.is_ok(),
                    Err(_) => false,
                };
                if ok {
                    decisions += 1;
                    let _ = latency.record(sent.elapsed().as_nanos() as u64);
                } else {
                    errors += 1;
                }
            }
            (decisions, errors, latency)
        }));
    }
    collect(tasks, started).await
}

async fn collect(
    tasks: Vec<tokio::task::JoinHandle<(u64, u64, Histogram<u64>)>>,
    started: Instant,
) -> Report {
    let mut report = Report {
        decisions: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latency: Histogram::<u64>::new(3).expect("histogram"),
    };
    for task in tasks {
        let (decisions, errors, latency) = task.await.expect("worker");
        report.decisions += decisions;
        report.errors += errors;
        report.latency.add(latency).expect("same bounds");
    }
    report.elapsed = started.elapsed();
    report
}

/// The sum of a counter's samples whose labels contain `label`.
fn counter_sum(metrics: &str, name: &str, label: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| line.starts_with(name) && line.contains(label))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The floor: a bare tonic server whose `ShouldRateLimit` answers a
/// constant `OK` (one status, as the server's answer has), with no
/// decision, metrics or checks: what the transport alone costs.
#[derive(Clone, Copy)]
struct Floor;

#[tonic::async_trait]
impl RateLimitService for Floor {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let statuses = request
            .into_inner()
            .descriptors
            .iter()
            .map(|_| DescriptorStatus {
                code: Code::Ok as i32,
                limit_remaining: 1,
                ..DescriptorStatus::default()
            })
            .collect();
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses,
            ..RateLimitResponse::default()
        }))
    }
}

/// Starts [`Floor`] on a free loopback port.
async fn floor() -> Result<std::net::SocketAddr, Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(Floor))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    Ok(addr)
}

/// `direct`: the server's two rules as `tollgate-redis` limiters, called
/// directly by `workers` tasks in a closed loop, the server's key mix.
async fn run_direct(url: &str, workers: usize, seconds: u64) -> Report {
    use tollgate::{Gcra, Quota};
    use tollgate_redis::{FailurePolicy, Options, Redis, RedisLimiter};
    let redis = Redis::connect(url, &Options::default())
        .await
        .expect("redis");
    let limiter = |name: &str, per_second: u64| {
        RedisLimiter::builder(redis.clone(), name)
            .limit(Gcra::new(Quota::per_second(per_second).expect("quota")).expect("gcra"))
            .failure_policy(FailurePolicy::FailOpen)
            .deadline(deadline())
            .build()
            .expect("limiter")
    };
    let (user, tight) = (limiter("bench.user", 1_000_000), limiter("bench.tight", 10));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..workers {
        let (user, tight) = (user.clone(), tight.clone());
        tasks.push(tokio::spawn(async move {
            let mut latency = Histogram::<u64>::new(3).expect("histogram");
            let (mut decisions, mut i) = (0u64, 0u64);
            while Instant::now() < deadline {
                i += 1;
                let (k, v) = key(worker, i);
                let limiter = if k == "tight" { &tight } else { &user };
                let sent = Instant::now();
                let _ = limiter.check(v.as_bytes()).await;
                decisions += 1;
                let _ = latency.record(sent.elapsed().as_nanos() as u64);
            }
            (decisions, 0, latency)
        }));
    }
    let report = collect(tasks, started).await;
    let stats = [user.stats(), tight.stats()];
    println!(
        "decided by Redis: {}; by the failure policy instead: {}",
        stats.iter().map(|s| s.redis).sum::<u64>(),
        stats
            .iter()
            .map(|s| s.policy_allowed + s.policy_denied)
            .sum::<u64>(),
    );
    report
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().map_or(Ok(5), |s| s.parse())?;
    let workers: usize = args.next().map_or(Ok(32), |s| s.parse())?;
    let backend = args.next().unwrap_or_else(|| "memory".into());
    let api = args.next().unwrap_or_else(|| "both".into());
    let (grpc_on, http_on) = match api.as_str() {
        "both" => (true, true),
        "grpc" => (true, false),
        "http" => (false, true),
        other => return Err(format!("api: grpc, http or both, not '{other}'").into()),
    };
    if backend == "direct" {
        let own = tollgate_testkit::RedisServer::start();
        let _cap = CpuCap::from_env(&own)?;
        pin_from_env(&own)?;
        println!(
            "{seconds} s, {workers} concurrent callers, tollgate-redis directly on {} (no server)",
            own.url()
        );
        let before = redis_usage(&own);
        let report = run_direct(&own.url(), workers, seconds).await;
        report.print("direct");
        print_redis_cost("direct", before, redis_usage(&own), report.decisions);
        return Ok(());
    }
    if backend == "floor" {
        let addr = floor().await?;
        println!(
            "{seconds} s, {workers} concurrent clients, loopback, the floor (a constant answer)"
        );
        run_grpc(addr, workers, seconds).await.print("grpc");
        return Ok(());
    }
    let (own_redis, redis_url) = match backend.as_str() {
        "memory" => (None, None),
        "redis" => {
            // Its own redis-server on a free loopback port, killed on exit.
            let own = tollgate_testkit::RedisServer::start();
            let url = own.url();
            (Some(own), Some(url))
        }
        url if url.starts_with("redis://") => (None, Some(url.to_owned())),
        other => {
            return Err(format!("backend: memory, redis or a redis:// URL, not '{other}'").into());
        }
    };
    let _cap = match &own_redis {
        Some(own) => CpuCap::from_env(own)?,
        None => None,
    };
    if let Some(own) = &own_redis {
        pin_from_env(own)?;
    }
    let mut config = SERVER.to_owned();
    if let Some(url) = &redis_url {
        config.push_str(&format!(
            "backend:\n  redis: {url}\n  deadline: {}ms\n  failure_policy: fail_open\n",
            deadline().as_millis()
        ));
    }
    config.push_str(RULES);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("bench.yaml");
    std::fs::write(&path, config)?;
    let bound = Server::from_config_file(&path)?.bind().await?;
    let service = bound.service();
    let (grpc, http) = (bound.grpc_addr(), bound.http_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(bound.run(async move {
        let _ = stopped.await;
    }));
    let backend_name = match &redis_url {
        Some(url) => format!("Redis backend at {url}"),
        None => "in-memory backend".to_owned(),
    };
    println!("{seconds} s per API, {workers} concurrent clients, loopback, {backend_name}");
    let by = |service: &tollgate_server::service::Service, source: &str| {
        counter_sum(
            &service.metrics().encode(),
            "tollgate_redis_decisions_total",
            &format!("source=\"{source}\""),
        )
    };
    if grpc_on {
        let before = own_redis.as_ref().map(redis_usage);
        let report = run_grpc(grpc, workers, seconds).await;
        report.print("grpc");
        if let (Some(own), Some(before)) = (&own_redis, before) {
            print_redis_cost("grpc", before, redis_usage(own), report.decisions);
        }
    }
    let (redis_grpc, policy_grpc) = (by(&service, "redis"), by(&service, "policy"));
    if http_on {
        let before = own_redis.as_ref().map(redis_usage);
        let report = run_http(http, workers, seconds).await;
        report.print("http");
        if let (Some(own), Some(before)) = (&own_redis, before) {
            print_redis_cost("http", before, redis_usage(own), report.decisions);
        }
    }
    if redis_url.is_some() {
        println!(
            "decided by Redis: grpc {redis_grpc}, http {}; by the failure policy instead: grpc {policy_grpc}, http {}",
            by(&service, "redis") - redis_grpc,
            by(&service, "policy") - policy_grpc,
        );
    }
    let _ = stop.send(());
    server.await??;
    Ok(())
}
