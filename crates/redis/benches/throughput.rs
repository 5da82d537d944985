//! Decisions per second and latency against one local `redis-server`,
//! beside `redis-benchmark` running the same script with the same number of
//! connections.
//!
//! ```sh
//! cargo bench -p tollgate-redis --bench throughput            # 2 s per row
//! TOLLGATE_BENCH_SECS=5 cargo bench -p tollgate-redis --bench throughput
//! ```
//!
//! Rows: one hot key or 100,000 keys; 1, 16 and 64 concurrent callers;
//! pipelining on (every caller on one multiplexed connection) or off (one
//! connection per caller, one call in flight on each); leases on or off.
//! The quota is large enough that every call is admitted, so leases are
//! used and the script always writes.

#[path = "../tests/support/mod.rs"]
mod support;
use support::Connect as _;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use hdrhistogram::Histogram;
use tollgate::{Gcra, Quota};
use tollgate_redis::{FailurePolicy, LeaseConfig, Redis, RedisLimiter};

const KEYSPACE: u64 = 100_000;

fn quota() -> Gcra {
    // 10^9 per second, burst 10^6: never denies in a benchmark.
    Gcra::new(
        Quota::per_second(1_000_000_000)
            .and_then(|q| q.with_burst(1_000_000))
            .expect("quota"),
    )
    .expect("gcra")
}

fn limiter(redis: &Redis, leases: bool) -> RedisLimiter {
    let mut b = RedisLimiter::builder(redis.clone(), "bench")
        .limit(quota())
        .failure_policy(FailurePolicy::FailClosed)
        .deadline(Duration::from_secs(1));
    if leases {
        b = b.leases(LeaseConfig {
            initial: 64,
            max: 1_024,
            ..LeaseConfig::default()
        });
    }
    b.build().expect("limiter")
}

struct Row {
    label: String,
    rate: f64,
    p50_us: f64,
    p99_us: f64,
}

/// `callers` tasks calling for `secs` on the limiters given (one per caller,
/// possibly clones of one).
async fn run(
    label: &str,
    limiters: Vec<RedisLimiter>,
    many_keys: bool,
    secs: f64,
) -> (f64, Histogram<u64>) {
    let stop = Instant::now() + Duration::from_secs_f64(secs);
    let seed = Arc::new(AtomicU64::new(1));
    let start = Instant::now();
    let tasks = limiters.into_iter().map(|l| {
        let seed = seed.clone();
        tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
            // Relaxed: a distinct seed per task, nothing else.
            let mut x = seed.fetch_add(0x9E37_79B9, Ordering::Relaxed) | 1;
            let mut denied = 0u64;
            while Instant::now() < stop {
                // xorshift: a cheap spread over the keyspace.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = if many_keys {
                    format!("k:{}", x % KEYSPACE)
                } else {
                    "hot".to_string()
                };
                let t = Instant::now();
                let o = l.check_outcome(key.as_bytes(), 1).await.expect("cost 1");
                hist.saturating_record(t.elapsed().as_micros() as u64);
                if o.decision.is_denied() {
                    denied += 1;
                }
            }
            (hist, denied)
        })
    });
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
    let mut denied = 0;
    for result in join_all(tasks).await {
        let (h, d) = result.expect("task");
        all.add(h).expect("merge");
        denied += d;
    }
    // Every call should be admitted: a denial is a fault (a deadline missed
    // on an overloaded machine goes to the fail-closed policy).
    if denied > 0 {
        eprintln!("{label}: {denied} of {} calls denied", all.len());
    }
    let rate = all.len() as f64 / start.elapsed().as_secs_f64();
    (rate, all)
}

fn redis_benchmark(
    port: u16,
    sha: &str,
    key: &str,
    connections: u32,
    pipeline: u32,
    random: bool,
    requests: u64,
) -> Option<Row> {
    let gcra = quota();
    let mut cmd = Command::new("redis-benchmark");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &connections.to_string(), "-P", &pipeline.to_string()])
        .args(["-n", &requests.to_string(), "--csv"]);
    if random {
        cmd.args(["-r", &KEYSPACE.to_string()]);
    }
    // m: the GCRA state's modulus on the server's clock (see `script`).
    let m = 9_000_000_000_000_000 / (1_000 * gcra.scale());
    cmd.args(["EVALSHA", sha, "1", key, "c", "", "1", "10", "0", "g"])
        .arg(gcra.scale().to_string())
        .arg(gcra.interval_ticks().to_string())
        .arg(gcra.capacity_ticks().to_string())
        .arg(m.to_string())
        .arg("0");
    let out = cmd.output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    let line = text.lines().find(|l| l.starts_with("\"EVALSHA"))?;
    let fields: Vec<f64> = line
        .split(',')
        .skip(1)
        .filter_map(|f| f.trim_matches('"').parse().ok())
        .collect();
    Some(Row {
        label: format!(
            "redis-benchmark -c {connections} -P {pipeline}, {}",
            if random { "100k keys" } else { "hot key" }
        ),
        rate: *fields.first()?,
        p50_us: fields.get(3)? * 1_000.0,
        p99_us: fields.get(5)? * 1_000.0,
    })
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` (CI) runs
    // the same rows for a moment each, to check that they run.
    let measuring = std::env::args().any(|arg| arg == "--bench");
    let secs: f64 = std::env::var("TOLLGATE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if measuring { 2.0 } else { 0.05 });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let server = support::Server::start();
    // The script the client runs for one GCRA limit: the lean one.
    let sha = server.cli(&["SCRIPT", "LOAD", tollgate_redis::script::SOURCE_GCRA]);
    let mut rows = Vec::new();
    runtime.block_on(async {
        let shared = server.connect().await;
        for many_keys in [false, true] {
            let keys = if many_keys { "100k keys" } else { "hot key" };
            for callers in [1usize, 16, 64] {
                // Pipelining on: every caller on one multiplexed connection.
                let l = limiter(&shared, false);
                let (rate, h) = run(
                    &format!("{callers} mux {many_keys}"),
                    vec![l; callers],
                    many_keys,
                    secs,
                )
                .await;
                rows.push(row(
                    format!("tollgate, {callers} callers, 1 multiplexed conn, {keys}"),
                    rate,
                    &h,
                ));
                // Pipelining off: a connection per caller, one call in flight on each.
                let own = join_all((0..callers).map(|_| server.connect())).await;
                let ls = own.iter().map(|r| limiter(r, false)).collect();
                let (rate, h) =
                    run(&format!("{callers} conns {many_keys}"), ls, many_keys, secs).await;
                rows.push(row(
                    format!("tollgate, {callers} callers, {callers} conns (no pipelining), {keys}"),
                    rate,
                    &h,
                ));
                if !many_keys {
                    let l = limiter(&shared, true);
                    let (rate, h) = run(
                        &format!("{callers} leases"),
                        vec![l.clone(); callers],
                        false,
                        secs,
                    )
                    .await;
                    l.shutdown().await;
                    rows.push(row(
                        format!("tollgate + leases, {callers} callers, 1 multiplexed conn, {keys}"),
                        rate,
                        &h,
                    ));
                }
            }
        }
    });
    let probe = runtime.block_on(async {
        let l = limiter(&server.connect().await, false);
        (
            l.redis_keys(b"hot")[0].clone(),
            l.redis_keys(b"k:__rand_int__")[0].clone(),
        )
    });
    // About `secs` per run at the rates of a small machine.
    let requests = (10_000.0 * secs) as u64;
    for (key, random) in [(&probe.0, false), (&probe.1, true)] {
        let key = String::from_utf8_lossy(key).to_string();
        for c in [1u32, 16, 64] {
            rows.extend(redis_benchmark(
                server.port,
                &sha,
                &key,
                c,
                1,
                random,
                requests,
            ));
            if c > 1 {
                rows.extend(redis_benchmark(
                    server.port,
                    &sha,
                    &key,
                    1,
                    c,
                    random,
                    requests,
                ));
            }
        }
    }
    println!("| scenario | decisions/s | p50 µs | p99 µs |");
    println!("|---|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} |",
            r.label, r.rate, r.p50_us, r.p99_us
        );
    }
}

fn row(label: String, rate: f64, h: &Histogram<u64>) -> Row {
    Row {
        label,
        rate,
        p50_us: h.value_at_quantile(0.5) as f64,
        p99_us: h.value_at_quantile(0.99) as f64,
    }
}
