//! Bytes per key of the compact keyed table (`keyed::compact`) against
//! governor's keyed limiter and tollgate's `KeyedLimiter`, for `u64`,
//! IPv4, IPv6 and `[u8; 16]` keys, and short strings (`user:` and ten
//! digits, 15 bytes: a [`ShortKey`] in the compact table, a `String` in
//! the others), under a counting allocator.
//!
//! As `benches/memory.rs`: each case runs in a process of its own (this
//! binary re-runs itself with the case's name), builds its limiter, checks
//! `n` distinct keys once each (each must be admitted; one permit per
//! hour, so no key turns idle during a case, however loaded the machine,
//! and no sweeper runs), runs one sweep that finds
//! nothing, and reports, per key:
//!
//! - `bytes`: heap bytes requested and not freed since before the limiter
//!   was built (the compact table is allocated whole at build);
//! - `rss_bytes`: the change of the resident set over the same span.
//!
//! The compact table is built for exactly `n` keys (`max_keys = n`): it is
//! sized once, so that is its memory at any number of keys up to `n`.
//!
//! `cargo bench -p tollgate --bench compact_memory` measures 10^7 keys a
//! case (`TOLLGATE_COMPACT_KEYS` sets another count; about 3 GB at the
//! peak, one case at a time); under `cargo test --all-targets` it is a
//! smoke test of every case at 10^4 keys. One JSON object per case on
//! standard output, and the load average before and after.

use std::alloc::System;
use std::hash::Hash;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::num::NonZeroU32;
use std::process::Command;

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tollgate::keyed::compact::{CompactKeyedLimiter, FixedKey, ShortKey};
use tollgate::{FixedWindow, Gcra, KeyedLimiter, Quota};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Keys per case under `cargo bench`.
const KEYS: u64 = 10_000_000;
/// Keys per case under `cargo test --all-targets`.
const SMOKE_KEYS: u64 = 10_000;

const CASES: [&str; 14] = [
    "compact_u64",
    "compact_u64_fixed_window",
    "compact_ipv4",
    "compact_ipv6",
    "compact_bytes16",
    "governor_u64",
    "governor_ipv4",
    "governor_ipv6",
    "governor_bytes16",
    "keyed_u64",
    "keyed_ipv6",
    "compact_short_string",
    "governor_string",
    "keyed_string",
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench = args.iter().any(|a| a == "--bench");
    let keys = match std::env::var("TOLLGATE_COMPACT_KEYS") {
        Ok(keys) if bench => keys.parse().expect("TOLLGATE_COMPACT_KEYS: a number"),
        _ if bench => KEYS,
        _ => SMOKE_KEYS,
    };
    match args.iter().find(|a| !a.starts_with("--")) {
        Some(case) => run_case(case, keys),
        None => {
            let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
            println!("load average before: {}", load().trim());
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
            println!("load average after: {}", load().trim());
        }
    }
}

fn quota() -> Quota {
    Quota::per_hour(1).expect("quota")
}

fn governor_quota() -> governor::Quota {
    governor::Quota::per_hour(NonZeroU32::MIN)
}

fn key_of(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn ipv4_of(i: u64) -> Ipv4Addr {
    // A bijection on 32 bits for i < 2^32.
    Ipv4Addr::from(key_of(i) as u32)
}

fn ipv6_of(i: u64) -> Ipv6Addr {
    Ipv6Addr::from((u128::from(key_of(i)) << 64) | u128::from(i))
}

fn bytes16_of(i: u64) -> [u8; 16] {
    u128::from(ipv6_of(i)).to_le_bytes()
}

/// `user:` and ten digits, written in place (15 bytes): no allocation on
/// the way, so that what is counted is what each limiter keeps.
fn text_of(i: u64) -> [u8; 15] {
    use std::io::Write;
    let mut text = [0u8; 15];
    write!(&mut text[..], "user:{i:010}").expect("15 bytes");
    text
}

/// The key as a `String` of exactly its 15 bytes (`format!` would leave
/// spare capacity, counted against governor and `KeyedLimiter`).
fn string_of(i: u64) -> String {
    String::from_utf8(text_of(i).to_vec()).expect("ASCII")
}

/// The same key as a [`ShortKey`].
fn short_of(i: u64) -> ShortKey {
    ShortKey::from_bytes(&text_of(i)).expect("15 bytes")
}

fn run_case(case: &str, keys: u64) {
    let rss_before = resident_bytes();
    let region = Region::new(GLOBAL);
    match case {
        "compact_u64" => compact(keys, Gcra::new(quota()).expect("gcra"), key_of),
        "compact_u64_fixed_window" => {
            compact(keys, FixedWindow::new(quota()).expect("window"), key_of)
        }
        "compact_ipv4" => compact(keys, Gcra::new(quota()).expect("gcra"), ipv4_of),
        "compact_ipv6" => compact(keys, Gcra::new(quota()).expect("gcra"), ipv6_of),
        "compact_bytes16" => compact(keys, Gcra::new(quota()).expect("gcra"), bytes16_of),
        "governor_u64" => governor(keys, key_of),
        "governor_ipv4" => governor(keys, ipv4_of),
        "governor_ipv6" => governor(keys, ipv6_of),
        "governor_bytes16" => governor(keys, bytes16_of),
        "keyed_u64" => keyed(keys, key_of),
        "keyed_ipv6" => keyed(keys, ipv6_of),
        "compact_short_string" => compact(keys, Gcra::new(quota()).expect("gcra"), short_of),
        "governor_string" => governor(keys, string_of),
        "keyed_string" => keyed(keys, string_of),
        other => panic!("unknown memory case {other:?}; cases: {CASES:?}"),
    }
    .finish(case, keys, &region, rss_before);
}

/// What a case holds when it is measured: the limiter, alive.
struct Held(Box<dyn std::any::Any>);

impl Held {
    fn finish(self, case: &str, keys: u64, region: &Region<'_, System>, rss_before: i64) {
        let change = region.change();
        let bytes = change.bytes_allocated as i64 - change.bytes_deallocated as i64
            + change.bytes_reallocated as i64;
        let rss = resident_bytes() - rss_before;
        println!(
            "{{\"case\":\"{case}\",\"keys\":{keys},\"bytes\":{bytes},\"bytes_per_key\":{:.1},\"rss_bytes\":{rss},\"rss_bytes_per_key\":{:.1}}}",
            bytes as f64 / keys as f64,
            rss as f64 / keys as f64
        );
        drop(self.0);
    }
}

fn compact<K, A>(keys: u64, algorithm: A, key: fn(u64) -> K) -> Held
where
    K: FixedKey,
    A: tollgate::Algorithm<Cell = std::sync::atomic::AtomicU64>,
{
    let limiter = CompactKeyedLimiter::<K, A>::builder(algorithm, keys as usize)
        .sweep_every(None)
        .build()
        .expect("table");
    let admitted = (0..keys)
        .filter(|&i| limiter.check(&key(i)).is_allowed())
        .count();
    assert_eq!(admitted as u64, keys, "every first check is admitted");
    assert_eq!(limiter.stats().overflowed, 0, "{:?}", limiter.stats());
    assert_eq!(limiter.sweep(), 0);
    Held(Box::new(limiter))
}

fn governor<K: Hash + Eq + Clone + Send + Sync + 'static>(keys: u64, key: fn(u64) -> K) -> Held {
    let limiter = governor::RateLimiter::keyed(governor_quota());
    let admitted = (0..keys)
        .filter(|&i| limiter.check_key(&key(i)).is_ok())
        .count();
    assert_eq!(admitted as u64, keys, "every first check is admitted");
    limiter.retain_recent();
    Held(Box::new(limiter))
}

fn keyed<K: Hash + Eq + Clone + Send + Sync + 'static>(keys: u64, key: fn(u64) -> K) -> Held {
    let limiter: KeyedLimiter<K> = KeyedLimiter::builder(Gcra::new(quota()).expect("gcra"))
        .sweep_every(None)
        .build();
    let admitted = (0..keys)
        .filter(|&i| limiter.check(&key(i)).is_allowed())
        .count();
    assert_eq!(admitted as u64, keys, "every first check is admitted");
    assert_eq!(limiter.sweep(), 0);
    Held(Box::new(limiter))
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
