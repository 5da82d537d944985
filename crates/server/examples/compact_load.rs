//! Memory and decisions per second at many distinct client addresses
//! through the RLS, one rule on `remote_address`, with the in-memory
//! backend's keyed map (`keyed`) or its compact tables (`compact`).
//!
//! ```text
//! cargo run --release -p tollgate-server --example compact_load -- [keyed|compact] [KEYS] [SECONDS] [CLIENTS]
//! ```
//!
//! Starts the server in this process on 127.0.0.1 from a configuration
//! file, as a user runs it (for `compact`, `server: {compact_keys: KEYS}`,
//! which `tollgate serve --compact-keys KEYS` sets too), then CLIENTS
//! gRPC clients (default 4, one connection each, closed loop) send
//! `ShouldRateLimit` requests of 64 descriptors (the server's default
//! most), each `remote_address` = one IPv4 address:
//!
//! 1. **insert**: every one of KEYS distinct addresses once (default
//!    10^7), the clients taking disjoint ranges: decisions per second, and
//!    the process's resident memory before and after (`VmRSS`), so its
//!    growth per address;
//! 2. **known**: for SECONDS (default 10), addresses drawn uniformly among
//!    the KEYS: decisions per second on known keys.
//!
//! The rule admits every request (1,000 a day per address, so a state
//! stays live, unswept, for the run: 86.4 s a hit), and every answer is
//! checked to be OK. The client shares the machine with the
//! server: the rates are for the pair, read them beside each other.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use tollgate_server::Server;
use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

const CONFIG: &str = "
server:
  COMPACT
  grpc_listen: 127.0.0.1:0
  http_listen: 127.0.0.1:0
  max_concurrent_requests: 4096
  reload_interval_ms: 0
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 1000}
";

/// Descriptors per request: the server's default most.
const PER_REQUEST: usize = 64;

/// The `i`-th address: distinct for distinct `i` below 2^32, scattered.
fn address(i: u64) -> String {
    Ipv4Addr::from((i as u32).wrapping_mul(0x9E37_79B1)).to_string()
}

fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn request(addresses: impl Iterator<Item = String>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: addresses
            .map(|value| RateLimitDescriptor {
                entries: vec![Entry {
                    key: "remote_address".into(),
                    value,
                }],
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 1,
    }
}

type Client = RateLimitServiceClient<tonic::transport::Channel>;

async fn send(client: &mut Client, request: RateLimitRequest) -> usize {
    let answer = client
        .should_rate_limit(request)
        .await
        .expect("an answer")
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32, "a denial");
    answer.statuses.len()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map_or("compact", String::as_str).to_owned();
    let keys: u64 = args.get(1).map_or(Ok(10_000_000), |a| a.parse())?;
    let seconds: u64 = args.get(2).map_or(Ok(10), |a| a.parse())?;
    let clients: u64 = args.get(3).map_or(Ok(4), |a| a.parse())?;
    assert!(keys <= u64::from(u32::MAX), "at most 2^32 IPv4 addresses");
    let load = || {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    println!("load average before: {}", load());
    let compact = match mode.as_str() {
        "compact" => format!("compact_keys: {keys}"),
        "keyed" => "# compact_keys: off".to_owned(),
        other => return Err(format!("mode {other}: keyed or compact").into()),
    };
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("compact_load.yaml");
    std::fs::write(&path, CONFIG.replace("COMPACT", &compact))?;
    let bound = Server::from_config_file(&path)?.bind().await?;
    let grpc = bound.grpc_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(bound.run(async move {
        let _ = stopped.await;
    }));
    let mut connections = Vec::new();
    for _ in 0..clients {
        connections.push(RateLimitServiceClient::connect(format!("http://{grpc}")).await?);
    }
    println!("{mode}: {keys} addresses, {clients} clients, {PER_REQUEST} descriptors a request");

    let before = resident_bytes();
    let began = Instant::now();
    let mut tasks = Vec::new();
    for (c, mut client) in connections.clone().into_iter().enumerate() {
        let (from, to) = (keys * c as u64 / clients, keys * (c as u64 + 1) / clients);
        tasks.push(tokio::spawn(async move {
            let mut decided = 0;
            let mut next = from;
            while next < to {
                let end = (next + PER_REQUEST as u64).min(to);
                decided += send(&mut client, request((next..end).map(address))).await;
                next = end;
            }
            decided
        }));
    }
    let mut decided = 0;
    for task in tasks {
        decided += task.await?;
    }
    let took = began.elapsed();
    let after = resident_bytes();
    assert_eq!(decided as u64, keys);
    println!(
        "insert: {decided} decisions in {:.1} s, {:.0} decisions/s; resident {:.1} MB -> {:.1} MB, {:.1} B an address",
        took.as_secs_f64(),
        decided as f64 / took.as_secs_f64(),
        before as f64 / 1e6,
        after as f64 / 1e6,
        (after.saturating_sub(before)) as f64 / keys as f64
    );

    let deadline = Instant::now() + Duration::from_secs(seconds);
    let began = Instant::now();
    let mut tasks = Vec::new();
    for (c, mut client) in connections.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            // wyrand, then Lemire's reduction to the key count.
            let mut state = 0x5EED ^ c as u64;
            let mut draw = move || {
                state = state.wrapping_add(0xA076_1D64_78BD_642F);
                let t = u128::from(state) * u128::from(state ^ 0xE703_7ED1_A0B4_28DB);
                let r = ((t >> 64) as u64) ^ (t as u64);
                ((u128::from(r) * u128::from(keys)) >> 64) as u64
            };
            let mut decided = 0;
            while Instant::now() < deadline {
                let batch: Vec<String> = (0..PER_REQUEST).map(|_| address(draw())).collect();
                decided += send(&mut client, request(batch.into_iter())).await;
            }
            decided
        }));
    }
    let mut decided = 0;
    for task in tasks {
        decided += task.await?;
    }
    let took = began.elapsed();
    println!(
        "known: {decided} decisions in {:.1} s, {:.0} decisions/s; resident {:.1} MB",
        took.as_secs_f64(),
        decided as f64 / took.as_secs_f64(),
        resident_bytes() as f64 / 1e6
    );
    println!("load average after: {}", load());
    let _ = stop.send(());
    server.await??;
    Ok(())
}
