//! The shaper's release error and achieved rate at 1k, 100k and 1M permits per
//! second, on real time (tokio multi-thread runtime, the monotonic clock),
//! beside governor's `until_ready` at the same rates.
//!
//! `cargo bench -p tollgate --bench shaper --features tokio`; prints a
//! Markdown section, and writes it to `<target>/bench-shaper.md` for
//! `scripts/bench` to put in `BENCHMARKS.md`.
//!
//! Each run keeps `rate × 20 ms` tasks (at least 8) waiting in a loop: each
//! task awaits one permit, records its scheduled instant and the instant it
//! actually ran, and waits again. The schedule is absolute, so the achieved
//! rate is measured on the actual instants: permits ÷ (last − first) over the
//! run. Release error = actual − scheduled; it is never negative (a caller
//! never runs early), and is the timer's resolution (1 ms) plus scheduling
//! delay at worst.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Clock, MonotonicClock, Quota, Shaper};

/// How long each rate runs: 2 s under `cargo bench` (which passes
/// `--bench`), a moment under `cargo test --all-targets`, which only checks
/// that the bench runs.
fn run_time() -> Duration {
    if std::env::args().any(|arg| arg == "--bench") {
        Duration::from_secs(2)
    } else {
        Duration::from_millis(200)
    }
}

struct Outcome {
    permits: u64,
    achieved: f64,
    /// Release errors in ns, sorted; empty for governor (no schedule known).
    errors: Vec<u64>,
}

fn main() {
    let rates = [1_000u64, 100_000, 1_000_000];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let mut md = vec![
        "## Shaper: release error and achieved rate\n".to_string(),
        format!(
            "`cargo bench -p tollgate --bench shaper --features tokio`: for {} s at each rate, \
             `rate × 20 ms` tasks (at least 8) on a 2-worker tokio runtime each await one permit at \
             a time. Release error = the instant a task ran − its scheduled instant (never \
             negative). Achieved rate = permits ÷ (last − first actual instant). governor's \
             `until_ready` (burst 1, same rate, same tasks) beside it.\n",
            run_time().as_secs_f64()
        ),
        "| rate /s | tollgate permits | achieved | error vs target | p50 | p99 | p99.9 | max | governor achieved | governor error vs target |".to_string(),
        "|---|---|---|---|---|---|---|---|---|---|".to_string(),
    ];
    for rate in rates {
        let ours = runtime.block_on(shaper_run(rate));
        let peer = runtime.block_on(governor_run(rate));
        let pct = |e: &[u64], q: f64| -> String {
            if e.is_empty() {
                return "–".into();
            }
            let at = ((e.len() as f64 - 1.0) * q).round() as usize;
            format!("{:.0} µs", e[at] as f64 / 1_000.0)
        };
        let off = |achieved: f64| format!("{:+.3} %", (achieved / rate as f64 - 1.0) * 100.0);
        md.push(format!(
            "| {rate} | {} | {:.1} | {} | {} | {} | {} | {} | {:.1} | {} |",
            ours.permits,
            ours.achieved,
            off(ours.achieved),
            pct(&ours.errors, 0.5),
            pct(&ours.errors, 0.99),
            pct(&ours.errors, 0.999),
            pct(&ours.errors, 1.0),
            peer.achieved,
            off(peer.achieved),
        ));
    }
    md.push(String::new());
    let text = md.join("\n");
    println!("{text}");
    // Under `cargo test --benches` (no `--bench` flag) this is a smoke run
    // of a debug build: print it, but keep the measured file.
    if !std::env::args().any(|arg| arg == "--bench") {
        return;
    }
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| {
        // benches run from the package directory; the workspace target is two up.
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../target").to_string()
    });
    let _ = std::fs::write(format!("{target}/bench-shaper.md"), text);
}

/// Tasks enough to keep 20 ms of schedule queued: a slot nobody waits for is
/// lost (burst 1), so the waiters must outlast scheduling hiccups.
fn tasks_for(rate: u64) -> u64 {
    (rate / 50).max(8)
}

async fn shaper_run(rate: u64) -> Outcome {
    let quota = Quota::per_second(rate)
        .and_then(|q| q.with_burst(1))
        .expect("quota");
    let shaper = Shaper::builder(quota)
        .max_delay(Duration::from_secs(1))
        .max_waiters(1 << 20)
        .clock(MonotonicClock::new())
        .build()
        .expect("shaper");
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..tasks_for(rate))
        .map(|_| {
            let shaper = shaper.clone();
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let mut seen = Vec::with_capacity(4_096);
                // Relaxed: a flag polled once per permit; lateness of a few
                // permits is harmless.
                while !stop.load(Ordering::Relaxed) {
                    let Ok(at) = shaper.until_ready(1).await else {
                        tokio::task::yield_now().await;
                        continue;
                    };
                    let ran = shaper.clock().now();
                    seen.push((at.as_u64(), ran.as_u64()));
                }
                seen
            })
        })
        .collect();
    tokio::time::sleep(run_time()).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for handle in handles {
        all.extend(handle.await.expect("task"));
    }
    // Only the steady part: permits scheduled within the run window.
    all.sort_unstable();
    let first = all.first().map_or(0, |p| p.0);
    let errors: Vec<u64> = {
        let mut e: Vec<u64> = all.iter().map(|&(at, ran)| ran - at).collect();
        e.sort_unstable();
        e
    };
    let mut ran: Vec<u64> = all.iter().map(|p| p.1).collect();
    ran.sort_unstable();
    let span = ran.last().copied().unwrap_or(first) - ran.first().copied().unwrap_or(first);
    Outcome {
        permits: all.len() as u64,
        achieved: (all.len() as f64 - 1.0) / (span as f64 / 1e9),
        errors,
    }
}

async fn governor_run(rate: u64) -> Outcome {
    let quota = governor::Quota::per_second(NonZeroU32::new(rate as u32).expect("rate"))
        .allow_burst(NonZeroU32::MIN);
    let limiter = Arc::new(governor::RateLimiter::direct(quota));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..tasks_for(rate))
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let mut seen = Vec::with_capacity(4_096);
                while !stop.load(Ordering::Relaxed) {
                    limiter.until_ready().await;
                    seen.push(Instant::now());
                }
                seen
            })
        })
        .collect();
    tokio::time::sleep(run_time()).await;
    stop.store(true, Ordering::Relaxed);
    let mut ran = Vec::new();
    for handle in handles {
        ran.extend(handle.await.expect("task"));
    }
    ran.sort_unstable();
    let span = match (ran.first(), ran.last()) {
        (Some(first), Some(last)) => *last - *first,
        _ => Duration::ZERO,
    };
    Outcome {
        permits: ran.len() as u64,
        achieved: (ran.len() as f64 - 1.0) / span.as_secs_f64(),
        errors: Vec::new(),
    }
}
