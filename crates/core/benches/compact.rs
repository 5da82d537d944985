//! Checks per key at 10^7 uniform `u64` keys: the compact keyed table's
//! batched check (`check_batch`, groups of 64 keys) and its single check,
//! beside tollgate's `KeyedLimiter`, governor's keyed limiter (by default,
//! and with foldhash), and pingora-limits' `Rate`.
//!
//! `Rate` is Cloudflare's estimator: a count-min sketch of events per key
//! over an interval, of fixed size whatever the keys. It is approximate
//! (keys that collide in every row inflate each other's counts, and it
//! answers a rate, not a decision with its waits) and is here for
//! reference only: the cost of a sketch's update at the same key stream.
//!
//! As `benches/defaults.rs`: every limiter is first given every key once
//! (outside the timed rounds), the quota is 1 permit per minute with a
//! burst of 10^8 (every check is admitted, and checked to be; no key turns
//! idle), and each round runs every contender over the same sequence of
//! 10^6 uniformly drawn keys, in an order rotated every round; a
//! contender's figure is its fastest round, the median beside it, in ns
//! per check, both in wall time and in the thread's time on a CPU
//! (`/proc/thread-self/schedstat`: on a machine loaded past its cores, the
//! wall time also counts the waits for a CPU). The load average is printed
//! before and after.
//!
//! `cargo bench -p tollgate --bench compact` (10^7 keys, about 3 GB and a
//! few minutes; `TOLLGATE_COMPACT_KEYS` sets another count). Under
//! `cargo test --all-targets` it is a smoke test at 10^4 keys.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use governor::clock::DefaultClock;
use governor::state::keyed::DashMapStateStore;
use tollgate::keyed::compact::{CompactKeyedLimiter, ShortKey};
use tollgate::{Gcra, KeyedLimiter, Quota};

/// Keys in a batch call.
const BATCH: usize = 64;
const BURST: u32 = 100_000_000;

#[derive(Clone, Copy)]
struct Size {
    keys: u64,
    checks: usize,
    rounds: usize,
}

const SMOKE: Size = Size {
    keys: 10_000,
    checks: 10_000,
    rounds: 2,
};

fn quota() -> Quota {
    Quota::per_minute(1)
        .and_then(|quota| quota.with_burst(u64::from(BURST)))
        .expect("quota")
}

fn governor_quota() -> governor::Quota {
    governor::Quota::per_minute(NonZeroU32::MIN)
        .allow_burst(NonZeroU32::new(BURST).expect("nonzero"))
}

fn gcra() -> Gcra {
    Gcra::new(quota()).expect("gcra")
}

/// The `i`-th key: distinct for distinct `i`, scattered.
fn key_of(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The `u64` key's 8 bytes as a string key (the conversion is in the
/// timed loop: a few ns, stated beside the row in `BENCHMARKS.md`).
fn short_of(key: u64) -> ShortKey {
    ShortKey::from_bytes(&key.to_le_bytes()).expect("8 bytes")
}

/// Uniform draws among `n` (wyrand, then Lemire's reduction), as keys.
fn draws(n: u64, count: usize, seed: u64) -> Vec<u64> {
    let mut state = seed;
    (0..count)
        .map(|_| {
            state = state.wrapping_add(0xA076_1D64_78BD_642F);
            let t = u128::from(state) * u128::from(state ^ 0xE703_7ED1_A0B4_28DB);
            let r = ((t >> 64) as u64) ^ (t as u64);
            key_of(((u128::from(r) * u128::from(n)) >> 64) as u64)
        })
        .collect()
}

/// Checks every key of a round's sequence, returns how many were admitted.
type Run<'a> = Box<dyn FnMut(&[u64]) -> usize + 'a>;

/// A contender: a name and its run.
struct Contender<'a> {
    name: &'static str,
    run: Run<'a>,
    rounds: Vec<f64>,
    /// The same rounds in time on a CPU (see [`on_cpu_ns`]).
    cpu_rounds: Vec<f64>,
}

/// This thread's time on a CPU so far, in ns (`/proc/thread-self/schedstat`;
/// 0 where there is none). On a machine loaded past its cores a round's
/// wall time counts the time the thread waited for a CPU; this does not.
fn on_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|t| t.parse().ok()))
        .unwrap_or(0)
}

impl<'a> Contender<'a> {
    fn new(name: &'static str, run: impl FnMut(&[u64]) -> usize + 'a) -> Contender<'a> {
        Contender {
            name,
            run: Box::new(run),
            rounds: Vec::new(),
            cpu_rounds: Vec::new(),
        }
    }
}

type GovernorFoldhash =
    governor::RateLimiter<u64, DashMapStateStore<u64, foldhash::fast::RandomState>, DefaultClock>;

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let size = if bench {
        Size {
            keys: std::env::var("TOLLGATE_COMPACT_KEYS")
                .map(|k| k.parse().expect("TOLLGATE_COMPACT_KEYS: a number"))
                .unwrap_or(10_000_000),
            checks: 1_000_000,
            rounds: 9,
        }
    } else {
        SMOKE
    };
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| name.contains(o.as_str()));
    let load = |when: &str| {
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!("load average {when}: {}", load.trim());
    };
    load("before");
    let n = size.keys;
    let started = Instant::now();
    let compact: CompactKeyedLimiter<u64> = CompactKeyedLimiter::builder(gcra(), n as usize)
        .sweep_every(None)
        .build()
        .expect("table");
    let short: CompactKeyedLimiter<ShortKey> = CompactKeyedLimiter::builder(gcra(), n as usize)
        .sweep_every(None)
        .build()
        .expect("table");
    let keyed: KeyedLimiter<u64> = KeyedLimiter::builder(gcra()).sweep_every(None).build();
    let governor_default = governor::RateLimiter::keyed(governor_quota());
    let governor_foldhash: GovernorFoldhash = governor::RateLimiter::dashmap_with_hasher(
        governor_quota(),
        foldhash::fast::RandomState::default(),
    );
    let pingora = pingora_limits::rate::Rate::new(Duration::from_secs(60));
    let all: Vec<u64> = (0..n).map(key_of).collect();
    let mut decisions = Vec::with_capacity(BATCH);
    let mut short_decisions = Vec::with_capacity(BATCH);
    let populate = |name: &str, admitted: usize, began: Instant| {
        assert_eq!(
            admitted as u64, n,
            "populating {name}: a first check was denied"
        );
        println!(
            "populated {name}: {n} keys in {:.2} s ({:.0} ns a key)",
            began.elapsed().as_secs_f64(),
            began.elapsed().as_nanos() as f64 / n as f64
        );
    };
    if wanted("compact") {
        let began = Instant::now();
        let mut admitted = 0;
        for group in all.chunks(BATCH) {
            decisions.clear();
            compact.check_batch(group, &mut decisions);
            admitted += decisions.iter().filter(|d| d.is_allowed()).count();
        }
        populate("compact (batched)", admitted, began);
        assert_eq!(compact.stats().overflowed, 0, "{:?}", compact.stats());
    }
    if wanted("short") {
        let began = Instant::now();
        let admitted = all
            .iter()
            .filter(|&&k| short.check(&short_of(k)).is_allowed())
            .count();
        populate("compact short strings", admitted, began);
    }
    if wanted("keyed") {
        let began = Instant::now();
        let admitted = all.iter().filter(|k| keyed.check(*k).is_allowed()).count();
        populate("keyed", admitted, began);
    }
    if wanted("governor_default") {
        let began = Instant::now();
        let admitted = all
            .iter()
            .filter(|k| governor_default.check_key(*k).is_ok())
            .count();
        populate("governor_default", admitted, began);
    }
    if wanted("governor_foldhash") {
        let began = Instant::now();
        let admitted = all
            .iter()
            .filter(|k| governor_foldhash.check_key(*k).is_ok())
            .count();
        populate("governor_foldhash", admitted, began);
    }
    if wanted("pingora") {
        for key in &all {
            pingora.observe(key, 1);
        }
    }
    drop(all);
    let mut contenders = vec![
        Contender::new("compact_batch", |keys| {
            let mut admitted = 0;
            for group in keys.chunks(BATCH) {
                decisions.clear();
                compact.check_batch(group, &mut decisions);
                admitted += decisions.iter().filter(|d| d.is_allowed()).count();
            }
            admitted
        }),
        Contender::new("compact_single", |keys| {
            keys.iter()
                .filter(|k| compact.check(*k).is_allowed())
                .count()
        }),
        Contender::new("compact_short_batch", |keys| {
            let mut admitted = 0;
            let mut named = Vec::with_capacity(BATCH);
            for group in keys.chunks(BATCH) {
                named.clear();
                named.extend(group.iter().map(|&k| short_of(k)));
                short_decisions.clear();
                short.check_batch(&named, &mut short_decisions);
                admitted += short_decisions.iter().filter(|d| d.is_allowed()).count();
            }
            admitted
        }),
        Contender::new("keyed_single", |keys| {
            keys.iter().filter(|k| keyed.check(*k).is_allowed()).count()
        }),
        Contender::new("governor_default", |keys| {
            keys.iter()
                .filter(|k| governor_default.check_key(*k).is_ok())
                .count()
        }),
        Contender::new("governor_foldhash", |keys| {
            keys.iter()
                .filter(|k| governor_foldhash.check_key(*k).is_ok())
                .count()
        }),
        // An estimate, not a decision: "admitted" is every observation.
        Contender::new("pingora_rate", |keys| {
            for key in keys {
                black_box(pingora.observe(key, 1));
            }
            keys.len()
        }),
    ];
    contenders.retain(|c| wanted(c.name));
    for round in 0..size.rounds {
        let keys = draws(n, size.checks, 0x5EED ^ round as u64);
        for offset in 0..contenders.len() {
            let at = (round + offset) % contenders.len();
            let contender = &mut contenders[at];
            let cpu = on_cpu_ns();
            let start = Instant::now();
            let admitted = (contender.run)(black_box(&keys));
            let elapsed = start.elapsed();
            let cpu = on_cpu_ns() - cpu;
            assert_eq!(
                admitted,
                keys.len(),
                "{}: a check was denied",
                contender.name
            );
            contender
                .rounds
                .push(elapsed.as_nanos() as f64 / keys.len() as f64);
            contender.cpu_rounds.push(cpu as f64 / keys.len() as f64);
        }
    }
    for contender in &mut contenders {
        contender.rounds.sort_by(f64::total_cmp);
        contender.cpu_rounds.sort_by(f64::total_cmp);
        let min = contender.rounds[0];
        let median = contender.rounds[contender.rounds.len() / 2];
        let cpu_min = contender.cpu_rounds[0];
        let cpu_median = contender.cpu_rounds[contender.cpu_rounds.len() / 2];
        println!(
            "keys {n:<10} {:<20} wall min {min:7.2} ns  median {median:7.2} ns   on CPU min {cpu_min:7.2} ns  median {cpu_median:7.2} ns",
            contender.name
        );
    }
    load("after");
    println!("{:.0} s in all", started.elapsed().as_secs_f64());
}
