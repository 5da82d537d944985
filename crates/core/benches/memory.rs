//! Bytes per key of the keyed limiters, under a counting allocator.
//!
//! Apart from the `limiters` bench, because a counting global allocator
//! slows every allocation it sees. Each case runs in a process of its own
//! (this binary re-runs itself with the case's name), so that one case's
//! freed memory cannot hide in the next one's resident set.
//!
//! A case builds a limiter, checks 1,000,000 distinct keys once each (every
//! check must be admitted), runs one pass of its sweep that finds nothing
//! idle (what a running limiter does every second: tollgate's `sweep`,
//! governor's `retain_recent`, dashmap's `retain`), and reports what is held
//! then. Every map here, tollgate's included, frees
//! what it drops (a resized table, a removed entry) at once, so nothing is
//! awaiting reclamation when the figures are taken:
//!
//! - `bytes`: heap bytes requested and not freed since the limiter was
//!   built (requested sizes: the system allocator's own per-block overhead
//!   is not counted);
//! - `rss_bytes`: the change of the resident set, which does count it (and
//!   the pages the allocator keeps), a rougher figure.
//!
//! Cases: `tollgate_u64`, `governor_u64`, `floor_dashmap_u64` (the bare
//! `DashMap<u64, AtomicU64>` with foldhash, for reference), and the same with
//! 21-byte `String` keys, whose own heap copy each map holds (the
//! `string_heap` case measures those copies alone); and
//! `tollgate_compact_string`, the same 21-byte keys as
//! `KeyedLimiter<CompactString>` (checked by `&str`), which keeps them
//! inline, without a heap copy.
//!
//! `cargo bench -p tollgate --bench memory` prints one JSON object per case
//! on standard output; `scripts/bench` puts them in `BENCHMARKS.md`.

use std::alloc::System;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::process::Command;
use std::sync::atomic::AtomicU64;

use dashmap::DashMap;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tollgate::{Gcra, KeyedLimiter, Quota};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Keys per case under `cargo bench`.
const KEYS: u64 = 1_000_000;
/// Keys per case under `cargo test --all-targets` (no `--bench` flag): a
/// smoke test of every case, not a measurement.
const SMOKE_KEYS: u64 = 10_000;

const CASES: [&str; 8] = [
    "tollgate_u64",
    "governor_u64",
    "floor_dashmap_u64",
    "tollgate_string",
    "tollgate_compact_string",
    "governor_string",
    "floor_dashmap_string",
    "string_heap",
];

fn main() {
    // `cargo bench` passes `--bench`; a case name is the only other word.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench = args.iter().any(|a| a == "--bench");
    let keys = if bench { KEYS } else { SMOKE_KEYS };
    match args.iter().find(|a| !a.starts_with("--")) {
        Some(case) => run_case(case, keys),
        None => {
            let exe = std::env::current_exe().expect("current executable");
            for case in CASES {
                let output = Command::new(&exe)
                    .arg(case)
                    .args(bench.then_some("--bench"))
                    .output()
                    .expect("run a memory case");
                assert!(
                    output.status.success(),
                    "memory case {case} failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
                print!("{}", String::from_utf8_lossy(&output.stdout));
            }
        }
    }
}

/// 100 per hour: no key turns idle during a case (and the sweeper is off).
fn tollgate_keyed<K: std::hash::Hash + Eq + Send + Sync + 'static>() -> KeyedLimiter<K> {
    let quota = Quota::per_hour(100).expect("quota");
    KeyedLimiter::builder(Gcra::new(quota).expect("gcra"))
        .sweep_every(None)
        .build()
}

fn governor_quota() -> governor::Quota {
    governor::Quota::per_hour(NonZeroU32::new(100).expect("nonzero"))
}

fn key_of(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn string_key_of(i: u64) -> String {
    format!("user-{:016x}", key_of(i))
}

fn run_case(case: &str, keys: u64) {
    let strings: Vec<String> = if case.ends_with("string") || case == "string_heap" {
        (0..keys).map(string_key_of).collect()
    } else {
        Vec::new()
    };
    let key = |i: u64| strings[i as usize].as_str();
    let rss_before = resident_bytes();
    // Each arm builds its map, then measures while the map is alive.
    let (bytes, rss) = match case {
        "tollgate_u64" => {
            let limiter = tollgate_keyed::<u64>();
            measure(
                keys,
                |i| limiter.check(&key_of(i)).is_allowed(),
                || assert_eq!(limiter.sweep(), 0),
            )
        }
        "governor_u64" => {
            let limiter = governor::RateLimiter::keyed(governor_quota());
            measure(
                keys,
                |i| limiter.check_key(&key_of(i)).is_ok(),
                || limiter.retain_recent(),
            )
        }
        "floor_dashmap_u64" => {
            let map = dashmap_of::<u64>();
            measure(
                keys,
                |i| {
                    map.insert(key_of(i), AtomicU64::new(1));
                    map.contains_key(&key_of(i))
                },
                || map.retain(|_, _| true),
            )
        }
        "tollgate_string" => {
            let limiter = tollgate_keyed::<String>();
            measure(
                keys,
                |i| limiter.check(key(i)).is_allowed(),
                || assert_eq!(limiter.sweep(), 0),
            )
        }
        "tollgate_compact_string" => {
            let limiter = tollgate_keyed::<tollgate::CompactString>();
            measure(
                keys,
                |i| limiter.check(key(i)).is_allowed(),
                || assert_eq!(limiter.sweep(), 0),
            )
        }
        "governor_string" => {
            let limiter = governor::RateLimiter::keyed(governor_quota());
            measure(
                keys,
                |i| limiter.check_key(&strings[i as usize]).is_ok(),
                || limiter.retain_recent(),
            )
        }
        "floor_dashmap_string" => {
            let map = dashmap_of::<String>();
            measure(
                keys,
                |i| {
                    if !map.contains_key(key(i)) {
                        map.insert(key(i).to_owned(), AtomicU64::new(1));
                    }
                    map.contains_key(key(i))
                },
                || map.retain(|_, _| true),
            )
        }
        "string_heap" => {
            // The copies' heap blocks only, not the vector of headers.
            let mut copies = Vec::with_capacity(keys as usize);
            let region = Region::new(GLOBAL);
            copies.extend((0..keys).map(|i| key(i).to_owned()));
            let headers = (keys as usize * size_of::<String>()) as i64;
            let measured = (net_bytes(&region), resident_bytes() - headers);
            black_box(&copies);
            measured
        }
        other => panic!("unknown memory case {other:?}; cases: {CASES:?}"),
    };
    report(case, keys, bytes, rss - rss_before);
}

fn dashmap_of<K: std::hash::Hash + Eq>() -> DashMap<K, AtomicU64, foldhash::fast::RandomState> {
    DashMap::with_hasher(foldhash::fast::RandomState::default())
}

/// Checks keys `0..keys` (each must be admitted), then runs `sweep` (which
/// must find nothing idle); returns the heap bytes allocated and not freed
/// meanwhile, and the resident set, taken while the caller's map is alive.
fn measure(keys: u64, mut check: impl FnMut(u64) -> bool, sweep: impl FnOnce()) -> (i64, i64) {
    let region = Region::new(GLOBAL);
    let admitted = (0..keys).filter(|&i| check(i)).count() as u64;
    assert_eq!(admitted, keys, "the first check of every key is admitted");
    sweep();
    (net_bytes(&region), resident_bytes())
}

/// Heap bytes allocated and not freed since `region` began.
fn net_bytes(region: &Region<'_, System>) -> i64 {
    let change = region.change();
    change.bytes_allocated as i64 - change.bytes_deallocated as i64
        + change.bytes_reallocated as i64
}

/// The resident set, from `/proc/self/statm` (0 where there is none).
fn resident_bytes() -> i64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: i64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn report(case: &str, keys: u64, bytes: i64, rss_bytes: i64) {
    println!(
        "{{\"case\":\"{case}\",\"keys\":{keys},\"bytes\":{bytes},\"bytes_per_key\":{:.1},\"rss_bytes\":{rss_bytes},\"rss_bytes_per_key\":{:.1}}}",
        bytes as f64 / keys as f64,
        rss_bytes as f64 / keys as f64
    );
}
