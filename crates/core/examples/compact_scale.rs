//! 10^8 keys in one compact keyed table (`keyed::compact`): build, insert
//! rate, resident memory, batched and single check time, and the pauses a
//! checker sees while a sweep removes every key.
//!
//! ```text
//! cargo run --release -p tollgate --example compact_scale            # 10^8 u64 keys, ~1.9 GB
//! cargo run --release -p tollgate --example compact_scale -- 10000000
//! cargo run --release -p tollgate --example compact_scale -- 100000000 governor  # ~3.5 GB
//! ```
//!
//! With `governor`, the same steps on governor's keyed limiter by default
//! (dashmap, SipHash, quanta; the same quota), one key at a time (it has
//! no batch), its `retain_recent` in the sweep's place.
//!
//! Not run by `.ci/test` (examples are only built there). GCRA at one
//! permit per second, burst 1: every key is admitted once as it is
//! inserted, and idle one second later. After the check rounds the
//! program waits for every key to turn idle, then sweeps the whole table
//! on one thread while another checks uniformly drawn keys without pause,
//! timing each check; its percentiles are the sweep's pauses as a request
//! sees them (a checked key the sweep already removed is created again,
//! so the sweep removes somewhat fewer than all); the same checker runs
//! alone for 5 s before, for the pauses the machine makes by itself. The
//! machine's load average is printed with the figures, and check times
//! both in wall time and in time on a CPU: read them as ratios.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tollgate::keyed::compact::CompactKeyedLimiter;
use tollgate::{Gcra, Quota};

const BATCH: usize = 64;

fn key_of(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A uniform draw among `n` (wyrand, then Lemire's reduction).
fn draw(state: &mut u64, n: u64) -> u64 {
    *state = state.wrapping_add(0xA076_1D64_78BD_642F);
    let t = u128::from(*state) * u128::from(*state ^ 0xE703_7ED1_A0B4_28DB);
    let r = ((t >> 64) as u64) ^ (t as u64);
    ((u128::from(r) * u128::from(n)) >> 64) as u64
}

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096
}

/// Nanoseconds this thread has spent on a CPU (0 where the kernel does not
/// say).
fn on_cpu() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn load() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Checks uniformly drawn keys for `time`, timing each check.
fn checker_alone(limiter: &CompactKeyedLimiter<u64>, keys: u64, time: Duration) -> Histogram<u64> {
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).unwrap();
    let mut state = 0xBA5E;
    let began = Instant::now();
    while began.elapsed() < time {
        let key = key_of(draw(&mut state, keys));
        let checked = Instant::now();
        let _ = black_box(limiter.check(&key));
        histogram.saturating_record(checked.elapsed().as_nanos() as u64);
    }
    histogram
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let keys: u64 = match std::env::args().nth(1) {
        Some(keys) => keys.parse()?,
        None => 100_000_000,
    };
    if std::env::args().nth(2).as_deref() == Some("governor") {
        governor_run(keys);
        return Ok(());
    }
    println!("keys {keys}, load average {}", load());
    let rss_before = resident_bytes();
    let began = Instant::now();
    let gcra = Gcra::new(Quota::per_second(1)?)?;
    let limiter: CompactKeyedLimiter<u64> = CompactKeyedLimiter::builder(gcra, keys as usize)
        .sweep_every(None)
        .build()?;
    println!(
        "build: {:.2} s, table {:.1} MB ({:.1} B a key)",
        began.elapsed().as_secs_f64(),
        limiter.table_bytes() as f64 / 1e6,
        limiter.table_bytes() as f64 / keys as f64
    );

    let began = Instant::now();
    let mut group = Vec::with_capacity(BATCH);
    let mut decisions = Vec::with_capacity(BATCH);
    let mut admitted = 0u64;
    for start in (0..keys).step_by(BATCH) {
        group.clear();
        group.extend((start..keys.min(start + BATCH as u64)).map(key_of));
        decisions.clear();
        limiter.check_batch(&group, &mut decisions);
        admitted += decisions.iter().filter(|d| d.is_allowed()).count() as u64;
    }
    let inserting = began.elapsed();
    let stats = limiter.stats();
    println!(
        "insert: {:.2} s, {:.1} M keys/s ({:.0} ns a key, batched); {admitted} admitted, {} live, {} overflowed; load {}",
        inserting.as_secs_f64(),
        keys as f64 / inserting.as_secs_f64() / 1e6,
        inserting.as_nanos() as f64 / keys as f64,
        stats.live_keys,
        stats.overflowed,
        load()
    );
    let resident = resident_bytes() - rss_before;
    println!(
        "resident: {:.1} MB, {:.1} B a key",
        resident as f64 / 1e6,
        resident as f64 / keys as f64
    );

    let checks = 10_000_000u64.min(keys * 10);
    let mut state = 0x5EED;
    let drawn: Vec<u64> = (0..checks)
        .map(|_| key_of(draw(&mut state, keys)))
        .collect();
    for round in 0..3 {
        let (cpu, began) = (on_cpu(), Instant::now());
        for group in drawn.chunks(BATCH) {
            decisions.clear();
            limiter.check_batch(group, &mut decisions);
            black_box(&decisions);
        }
        let batched = began.elapsed().as_nanos() as f64 / checks as f64;
        let batched_cpu = (on_cpu() - cpu) as f64 / checks as f64;
        let (cpu, began) = (on_cpu(), Instant::now());
        for key in &drawn {
            let _ = black_box(limiter.check(key));
        }
        let single = began.elapsed().as_nanos() as f64 / checks as f64;
        let single_cpu = (on_cpu() - cpu) as f64 / checks as f64;
        println!(
            "round {round}: {checks} uniform checks, batched {batched:.1} ns a check ({batched_cpu:.1} on a CPU), single {single:.1} ns ({single_cpu:.1} on a CPU); load {}",
            load()
        );
    }
    drop(drawn);

    // The checker alone first, as long as a sweep took at 10^8 keys on
    // this machine: its pauses without a sweep are the machine's own
    // (preemption on a loaded host), the floor under the sweep's.
    let baseline = checker_alone(&limiter, keys, Duration::from_secs(5));
    println!(
        "checker alone for 5 s: {} checks, p50 {:.2} µs, p99 {:.2} µs, p99.9 {:.2} µs, max {:.2} µs; load {}",
        baseline.len(),
        baseline.value_at_quantile(0.5) as f64 / 1e3,
        baseline.value_at_quantile(0.99) as f64 / 1e3,
        baseline.value_at_quantile(0.999) as f64 / 1e3,
        baseline.max() as f64 / 1e3,
        load()
    );

    // Every key idle: one second after its last admission.
    std::thread::sleep(Duration::from_millis(1_100));
    let done = AtomicBool::new(false);
    let (swept, sweeping, histogram) = std::thread::scope(|scope| {
        let checker = scope.spawn(|| {
            let mut histogram = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).unwrap();
            let mut state = 0xC0FFEE;
            while !done.load(Ordering::Relaxed) {
                let key = key_of(draw(&mut state, keys));
                let began = Instant::now();
                let _ = black_box(limiter.check(&key));
                histogram.saturating_record(began.elapsed().as_nanos() as u64);
            }
            histogram
        });
        let began = Instant::now();
        let swept = limiter.sweep();
        let sweeping = began.elapsed();
        // Relaxed: a stop flag; the join orders the rest.
        done.store(true, Ordering::Relaxed);
        (swept, sweeping, checker.join().unwrap())
    });
    let us = |q: f64| histogram.value_at_quantile(q) as f64 / 1e3;
    println!(
        "sweep: {swept} removed in {:.2} s ({:.1} ns a key); meanwhile {} checks, p50 {:.2} µs, p99 {:.2} µs, p99.9 {:.2} µs, max {:.2} µs; load {}",
        sweeping.as_secs_f64(),
        sweeping.as_nanos() as f64 / keys as f64,
        histogram.len(),
        us(0.5),
        us(0.99),
        us(0.999),
        histogram.max() as f64 / 1e3,
        load()
    );
    Ok(())
}

/// The same steps on governor's keyed limiter.
fn governor_run(keys: u64) {
    println!("governor, keys {keys}, load average {}", load());
    let rss_before = resident_bytes();
    let quota = governor::Quota::per_second(std::num::NonZeroU32::MIN);
    let limiter = governor::RateLimiter::keyed(quota);
    let began = Instant::now();
    let admitted = (0..keys)
        .filter(|&i| limiter.check_key(&key_of(i)).is_ok())
        .count();
    let inserting = began.elapsed();
    println!(
        "insert: {:.2} s, {:.1} M keys/s ({:.0} ns a key); {admitted} admitted, {} live; load {}",
        inserting.as_secs_f64(),
        keys as f64 / inserting.as_secs_f64() / 1e6,
        inserting.as_nanos() as f64 / keys as f64,
        limiter.len(),
        load()
    );
    let resident = resident_bytes() - rss_before;
    println!(
        "resident: {:.1} MB, {:.1} B a key",
        resident as f64 / 1e6,
        resident as f64 / keys as f64
    );
    let checks = 10_000_000u64.min(keys * 10);
    let mut state = 0x5EED;
    let drawn: Vec<u64> = (0..checks)
        .map(|_| key_of(draw(&mut state, keys)))
        .collect();
    for round in 0..3 {
        let (cpu, began) = (on_cpu(), Instant::now());
        for key in &drawn {
            let _ = black_box(limiter.check_key(key));
        }
        let single = began.elapsed().as_nanos() as f64 / checks as f64;
        let single_cpu = (on_cpu() - cpu) as f64 / checks as f64;
        println!(
            "round {round}: {checks} uniform checks, single {single:.1} ns ({single_cpu:.1} on a CPU); load {}",
            load()
        );
    }
    drop(drawn);
    // governor drops a key one period after it is idle (its TAT at most
    // `now - t`): two seconds after its last admission.
    std::thread::sleep(Duration::from_millis(2_100));
    let done = AtomicBool::new(false);
    let (sweeping, histogram) = std::thread::scope(|scope| {
        let checker = scope.spawn(|| {
            let mut histogram = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).unwrap();
            let mut state = 0xC0FFEE;
            while !done.load(Ordering::Relaxed) {
                let key = key_of(draw(&mut state, keys));
                let began = Instant::now();
                let _ = black_box(limiter.check_key(&key));
                histogram.saturating_record(began.elapsed().as_nanos() as u64);
            }
            histogram
        });
        let began = Instant::now();
        limiter.retain_recent();
        let sweeping = began.elapsed();
        // Relaxed: a stop flag; the join orders the rest.
        done.store(true, Ordering::Relaxed);
        (sweeping, checker.join().unwrap())
    });
    let us = |q: f64| histogram.value_at_quantile(q) as f64 / 1e3;
    println!(
        "retain_recent: {} left, in {:.2} s ({:.1} ns a key); meanwhile {} checks, p50 {:.2} µs, p99 {:.2} µs, p99.9 {:.2} µs, max {:.2} µs; load {}",
        limiter.len(),
        sweeping.as_secs_f64(),
        sweeping.as_nanos() as f64 / keys as f64,
        histogram.len(),
        us(0.5),
        us(0.99),
        us(0.999),
        histogram.max() as f64 / 1e3,
        load()
    );
}
