//! Checks per key at 10^7 uniform keys: the compact keyed table's batched
//! check (`check_batch`, calls of 256 keys) on `u64`, `Ipv6Addr` and
//! `ShortKey` keys and its single check, beside tollgate's `KeyedLimiter`,
//! governor's keyed limiter (by default, and with foldhash), and
//! pingora-limits' `Rate`, and **the memory's floor** measured in the same
//! process and rounds.
//!
//! # The floor
//!
//! What a batched check cannot beat: one independent random 8-byte read
//! per key from a plain array as large as the key type's table
//! (`floor_<key>_read`: the key's bits scaled to the array's length, the
//! reads summed so that none waits for another), and the same with the
//! key's hash computed as the table computes it (`floor_<key>_hash`:
//! foldhash of the key, the home slot's multiply-shift). Every batched
//! row is printed as a ratio to both, in wall time, round by round (the
//! median of the rounds' ratios) and fastest against fastest: a ratio
//! taken within one process and one round holds better from one machine
//! to another than the nanoseconds do.
//!
//! The floors' code is in `compact_floors.rs`. Two groups tell whether
//! the memory's floor and a decision's compute can overlap on this host:
//!
//! - `floor_u64_compute_*`: the same random reads, each feeding a chain
//!   of dependent arithmetic about as long as a decision where the table
//!   is in cache; the compute alone, after a group's words were loaded
//!   (a touch-then-decide), and with the next group's words prefetched
//!   (`prefetcht0` through `prefetch-index`);
//! - `floor_u64_stream_huge` and `floor_u64_compute_stream_huge`: each
//!   key's word prefetched [`AHEAD`](tollgate::keyed::compact::batch::AHEAD)
//!   keys before it is read, as `check_batch` streams, without and with
//!   the same chain of arithmetic.
//!
//! Overlapped, a row costs the larger of the compute and the floor; added
//! up, their sum.
//!
//! One more group is **the layout's floor**: a model of the table's slots
//! for `u64` keys (the key's two words and a two-word state, 8/7 slots a
//! key, linear probing from the hashed home slot) holding the same keys,
//! with `check_batch`'s prefetches, and no lock, no decision and no write
//! (`floor_u64_probe_huge`; `floor_u64_probe_cached` at the in-cache
//! table's 10^4 keys). What any batched check on this layout costs at
//! least. `floor_u64_probe_home_huge` reads one word of the same lines in
//! place of the probe: what the lines alone cost; `floor_u64_probe_half_huge`
//! is the probe at a load of 1/2 (32 bytes a key): what the probe's length
//! at 7/8 costs, and `compact_batch_half` the batch on a table at that load
//! (built for 7/4 as many keys as it holds). `floor_u64_probe_write_huge`
//! and `floor_u64_probe_locked_huge` add to the probe a state written back
//! or a lock taken, and `floor_u64_decide_huge` a whole check as the table
//! makes it (lock, probe, GCRA's transition, the state written back, the
//! decision stored in place) without the table's code around it.
//! `floor_ipv6_probe_huge` and `floor_ipv6_decide_huge` are the probe and
//! the whole check on the same model of the IPv6 table (a key of four
//! words, 24-byte slots that may straddle two lines).
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
//! `cargo bench -p tollgate --bench compact` (10^7 keys, about 4 GB and a
//! few minutes; `TOLLGATE_COMPACT_KEYS` sets another count,
//! `TOLLGATE_COMPACT_CALL` the keys a batched call, `TOLLGATE_COMPACT_ROUNDS`
//! the rounds, 9 by default; names after `--bench` keep the contenders
//! whose names contain one of them). Under `cargo test --all-targets` it
//! is a smoke test at 10^4 keys.

use std::hash::BuildHasher;
use std::hint::black_box;
use std::net::Ipv6Addr;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use governor::clock::DefaultClock;
use governor::state::keyed::DashMapStateStore;
use tollgate::keyed::compact::{CompactKeyedLimiter, FixedKey, ShortKey};
use tollgate::{Gcra, KeyedLimiter, Quota};

#[path = "compact_floors.rs"]
mod floors;
use floors::{
    COMPUTE_STEPS, Fetch, ProbeModel, floor_array, floor_array_huge, floor_compute, floor_probe,
    floor_reads, floor_stream, floor_two_lines,
};

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

/// The `u64` key's 8 bytes as a string key.
fn short_of(key: u64) -> ShortKey {
    ShortKey::from_bytes(&key.to_le_bytes()).expect("8 bytes")
}

/// The `u64` key as an IPv6 address: distinct for distinct keys, all 16
/// bytes varying.
fn ipv6_of(key: u64) -> Ipv6Addr {
    Ipv6Addr::from((u128::from(key) << 64) | u128::from(key.rotate_left(29) ^ 0x2001_0db8))
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

/// One round's keys, the same draws as each key type (converted before
/// the clock starts).
struct Round {
    u64s: Vec<u64>,
    ipv6: Vec<Ipv6Addr>,
    short: Vec<ShortKey>,
    /// As many draws among the [`CACHED_KEYS`] keys of the in-cache table.
    cached: Vec<u64>,
}

/// The keys of `compact_batch_cached`'s table: 183 KB, in a core's L2
/// cache, so that its batch costs a decision's compute and no miss.
const CACHED_KEYS: u64 = 10_000;

/// The compact table's load: 7 keys to 8 slots.
const TABLE_LOAD: (usize, usize) = (7, 8);

/// Checks every key of a round, returns how many were admitted.
type Run<'a> = Box<dyn FnMut(&Round) -> usize + 'a>;

/// A contender: a name and its run.
struct Contender<'a> {
    name: &'static str,
    run: Run<'a>,
    /// ns per check, in the order of the rounds.
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
    fn new(name: &'static str, run: impl FnMut(&Round) -> usize + 'a) -> Contender<'a> {
        Contender {
            name,
            run: Box::new(run),
            rounds: Vec::new(),
            cpu_rounds: Vec::new(),
        }
    }
}

/// Admitted checks of `keys` through `check_batch`, `call` keys a call.
fn batched<K: FixedKey>(
    limiter: &CompactKeyedLimiter<K>,
    keys: &[K],
    call: usize,
    decisions: &mut Vec<tollgate::Decision>,
) -> usize {
    let mut admitted = 0;
    for group in keys.chunks(call) {
        decisions.clear();
        limiter.check_batch(group, decisions);
        admitted += decisions.iter().filter(|d| d.is_allowed()).count();
    }
    admitted
}

type GovernorFoldhash =
    governor::RateLimiter<u64, DashMapStateStore<u64, foldhash::fast::RandomState>, DefaultClock>;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name}: a number")))
        .unwrap_or(default)
}

/// The batched (or other) row, its floors: printed as ratios.
const RATIOS: [(&str, &str, &str); 28] = [
    (
        "compact_batch",
        "floor_u64_hash_huge",
        "floor_u64_two_lines_huge",
    ),
    (
        "floor_u64_probe_huge",
        "floor_u64_hash_huge",
        "floor_u64_two_lines_huge",
    ),
    (
        "compact_batch_half",
        "floor_u64_hash_huge",
        "floor_u64_probe_half_huge",
    ),
    (
        "floor_u64_probe_half_huge",
        "floor_u64_hash_huge",
        "floor_u64_probe_huge",
    ),
    (
        "floor_u64_probe_write_huge",
        "floor_u64_probe_huge",
        "floor_u64_hash_huge",
    ),
    (
        "floor_u64_probe_locked_huge",
        "floor_u64_probe_huge",
        "floor_u64_hash_huge",
    ),
    (
        "floor_u64_decide_huge",
        "floor_u64_probe_huge",
        "floor_u64_hash_huge",
    ),
    (
        "compact_batch",
        "floor_u64_decide_huge",
        "floor_u64_decide_huge",
    ),
    (
        "floor_u64_probe_home_huge",
        "floor_u64_hash_huge",
        "floor_u64_hash_huge",
    ),
    (
        "compact_batch",
        "floor_u64_probe_huge",
        "floor_u64_probe_huge",
    ),
    (
        "floor_u64_stream_huge",
        "floor_u64_hash_huge",
        "floor_u64_hash_huge",
    ),
    (
        "floor_u64_compute_stream_huge",
        "floor_u64_compute_alone",
        "floor_u64_hash_huge",
    ),
    (
        "compact_batch_cached",
        "floor_u64_probe_cached",
        "floor_u64_probe_cached",
    ),
    (
        "compact_batch_cached",
        "floor_u64_hash",
        "floor_u64_hash_huge",
    ),
    (
        "compact_ipv6_batch",
        "floor_ipv6_hash_huge",
        "floor_ipv6_hash",
    ),
    (
        "floor_ipv6_probe_huge",
        "floor_ipv6_hash_huge",
        "floor_ipv6_hash_huge",
    ),
    (
        "floor_ipv6_decide_huge",
        "floor_ipv6_hash_huge",
        "floor_ipv6_hash_huge",
    ),
    (
        "compact_ipv6_batch",
        "floor_ipv6_decide_huge",
        "floor_ipv6_decide_huge",
    ),
    (
        "compact_short_batch",
        "floor_short_hash_huge",
        "floor_short_hash",
    ),
    (
        "floor_u64_compute_alone",
        "floor_u64_hash",
        "floor_u64_hash",
    ),
    (
        "floor_u64_compute_loads",
        "floor_u64_compute_alone",
        "floor_u64_hash",
    ),
    (
        "floor_u64_compute_prefetch",
        "floor_u64_compute_alone",
        "floor_u64_hash",
    ),
    (
        "compact_batch",
        "floor_u64_two_lines",
        "floor_u64_two_lines",
    ),
    ("compact_batch", "floor_u64_read", "floor_u64_hash"),
    ("compact_single", "floor_u64_read", "floor_u64_hash"),
    ("keyed_single", "floor_u64_read", "floor_u64_hash"),
    ("compact_ipv6_batch", "floor_ipv6_read", "floor_ipv6_read"),
    (
        "compact_short_batch",
        "floor_short_read",
        "floor_short_read",
    ),
];

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let size = if bench {
        Size {
            keys: env_or("TOLLGATE_COMPACT_KEYS", 10_000_000) as u64,
            checks: 1_000_000,
            rounds: env_or("TOLLGATE_COMPACT_ROUNDS", 9),
        }
    } else {
        SMOKE
    };
    let call = env_or("TOLLGATE_COMPACT_CALL", 256);
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
    println!(
        "keys {n}, {call} keys a batched call, {} rounds",
        size.rounds
    );
    let started = Instant::now();
    let compact: CompactKeyedLimiter<u64> = CompactKeyedLimiter::builder(gcra(), n as usize)
        .sweep_every(None)
        .build()
        .expect("table");
    // A table no contender uses is built for one key.
    let uses = |kind: &str| {
        [
            format!("compact_{kind}_batch"),
            format!("floor_{kind}_read"),
            format!("floor_{kind}_hash"),
        ]
        .iter()
        .any(|name| wanted(name))
    };
    let sized = |kind: &str| if uses(kind) { n as usize } else { 1 };
    let ipv6: CompactKeyedLimiter<Ipv6Addr> = CompactKeyedLimiter::builder(gcra(), sized("ipv6"))
        .sweep_every(None)
        .build()
        .expect("table");
    let short: CompactKeyedLimiter<ShortKey> = CompactKeyedLimiter::builder(gcra(), sized("short"))
        .sweep_every(None)
        .build()
        .expect("table");
    // The floors' arrays, each as large as its key type's table; empty
    // when no floor of that type runs.
    let floor_of = |name: &str, bytes: usize| {
        let floors = [
            "read",
            "hash",
            "two_lines",
            "compute_alone",
            "compute_loads",
            "compute_prefetch",
        ];
        if floors
            .iter()
            .any(|floor| wanted(&format!("floor_{name}_{floor}")))
        {
            floor_array(bytes)
        } else {
            Vec::new()
        }
    };
    let floor_u64 = floor_of("u64", compact.table_bytes());
    let floor_ipv6 = floor_of("ipv6", ipv6.table_bytes());
    let floor_short = floor_of("short", short.table_bytes());
    let huge_of = |name: &str, bytes: usize| {
        if [
            "hash_huge",
            "two_lines_huge",
            "compute_prefetch_huge",
            "compute_loads_huge",
            "stream_huge",
            "compute_stream_huge",
        ]
        .iter()
        .any(|floor| wanted(&format!("floor_{name}_{floor}")))
        {
            floor_array_huge(bytes)
        } else {
            floor_array_huge(4)
        }
    };
    let huge_u64 = huge_of("u64", compact.table_bytes());
    let huge_ipv6 = huge_of("ipv6", ipv6.table_bytes());
    let huge_short = huge_of("short", short.table_bytes());
    println!(
        "floor arrays on huge pages (madvise taken): u64 {}, ipv6 {}, short {}",
        huge_u64.advised(),
        huge_ipv6.advised(),
        huge_short.advised()
    );
    println!(
        "table (and floor array) bytes: u64 {}, ipv6 {}, short {}",
        compact.table_bytes(),
        ipv6.table_bytes(),
        short.table_bytes()
    );
    // Hashed as the table hashes: foldhash, seeded at random.
    let hasher = foldhash::fast::RandomState::default();
    // The layout's floor: a model of the table's slots holding the same
    // keys (and one of the in-cache table's), built when its row runs.
    let spread = |k: &u64| hasher.hash_one(k) << 8;
    let probe_model = [
        "floor_u64_probe_huge",
        "floor_u64_probe_home_huge",
        "floor_u64_probe_write_huge",
        "floor_u64_probe_locked_huge",
        "floor_u64_decide_huge",
    ]
    .iter()
    .any(|name| wanted(name))
    .then(|| {
        let keys: Vec<u64> = (0..n).map(key_of).collect();
        ProbeModel::new(&keys, spread, TABLE_LOAD)
    });
    // The same keys at a load of 1/2 (32 B a key): what the probe's
    // length at 7/8 costs.
    let probe_half = wanted("floor_u64_probe_half_huge").then(|| {
        let keys: Vec<u64> = (0..n).map(key_of).collect();
        ProbeModel::new(&keys, spread, (1, 2))
    });
    // The IPv6 table's layout (24-byte slots) holding its keys.
    let spread_ipv6 = |k: &Ipv6Addr| hasher.hash_one(k) << 8;
    let probe_ipv6 = ["floor_ipv6_probe_huge", "floor_ipv6_decide_huge"]
        .iter()
        .any(|name| wanted(name))
        .then(|| {
            let keys: Vec<Ipv6Addr> = (0..n).map(|k| ipv6_of(key_of(k))).collect();
            ProbeModel::new(&keys, spread_ipv6, TABLE_LOAD)
        });
    let probe_cached = wanted("floor_u64_probe_cached").then(|| {
        let keys: Vec<u64> = (0..CACHED_KEYS).map(key_of).collect();
        ProbeModel::new(&keys, spread, TABLE_LOAD)
    });
    let keyed: KeyedLimiter<u64> = KeyedLimiter::builder(gcra()).sweep_every(None).build();
    let governor_default = governor::RateLimiter::keyed(governor_quota());
    let governor_foldhash: GovernorFoldhash = governor::RateLimiter::dashmap_with_hasher(
        governor_quota(),
        foldhash::fast::RandomState::default(),
    );
    let pingora = pingora_limits::rate::Rate::new(Duration::from_secs(60));
    let all: Vec<u64> = (0..n).map(key_of).collect();
    let mut decisions = Vec::with_capacity(call);
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
    if wanted("compact_batch") || wanted("compact_single") {
        let began = Instant::now();
        let admitted = batched(&compact, &all, call, &mut decisions);
        populate("compact (batched)", admitted, began);
        assert_eq!(compact.stats().overflowed, 0, "{:?}", compact.stats());
    }
    let cached: CompactKeyedLimiter<u64> =
        CompactKeyedLimiter::builder(gcra(), CACHED_KEYS as usize)
            .sweep_every(None)
            .build()
            .expect("table");
    let all_cached: Vec<u64> = (0..CACHED_KEYS).map(key_of).collect();
    assert_eq!(
        batched(&cached, &all_cached, call, &mut decisions),
        CACHED_KEYS as usize
    );
    // The same keys in a table built for 7/4 as many, at a load of 1/2
    // (32 B a key): the batch where its probe is short.
    let half: CompactKeyedLimiter<u64> = CompactKeyedLimiter::builder(
        gcra(),
        if wanted("compact_batch_half") {
            (n as usize).saturating_mul(7) / 4
        } else {
            1
        },
    )
    .sweep_every(None)
    .build()
    .expect("table");
    if wanted("compact_batch_half") {
        let began = Instant::now();
        let admitted = batched(&half, &all, call, &mut decisions);
        populate("compact at a load of 1/2 (batched)", admitted, began);
    }
    if wanted("compact_ipv6_batch") {
        let began = Instant::now();
        let keys: Vec<Ipv6Addr> = all.iter().map(|&k| ipv6_of(k)).collect();
        let admitted = batched(&ipv6, &keys, call, &mut decisions);
        populate("compact ipv6 (batched)", admitted, began);
        assert_eq!(ipv6.stats().overflowed, 0, "{:?}", ipv6.stats());
    }
    if wanted("compact_short_batch") {
        let began = Instant::now();
        let keys: Vec<ShortKey> = all.iter().map(|&k| short_of(k)).collect();
        let admitted = batched(&short, &keys, call, &mut decisions);
        populate("compact short strings (batched)", admitted, began);
        assert_eq!(short.stats().overflowed, 0, "{:?}", short.stats());
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
    // What the kernel gave: huge pages only where it found them.
    let huge = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    for line in huge
        .lines()
        .filter(|l| l.starts_with("AnonHugePages") || l.starts_with("Rss"))
    {
        println!("process {line}");
    }
    let mut ipv6_decisions = Vec::with_capacity(call);
    let mut cached_decisions = Vec::with_capacity(call);
    let mut half_decisions = Vec::with_capacity(call);
    let mut model_decisions = Vec::with_capacity(call);
    let mut model_ipv6_decisions = Vec::with_capacity(call);
    let model_gcra = gcra();
    let mut short_decisions = Vec::with_capacity(call);
    let mut contenders = vec![
        Contender::new("floor_u64_read", |round| {
            floor_reads(&floor_u64, &round.u64s, |&k| k)
        }),
        Contender::new("floor_u64_hash", |round| {
            floor_reads(&floor_u64, &round.u64s, |k| hasher.hash_one(k) << 8)
        }),
        Contender::new("floor_u64_two_lines", |round| {
            floor_two_lines(&floor_u64, &round.u64s, |k| hasher.hash_one(k) << 8)
        }),
        Contender::new("floor_u64_hash_huge", |round| {
            floor_reads(&huge_u64, &round.u64s, |k| hasher.hash_one(k) << 8)
        }),
        Contender::new("floor_u64_two_lines_huge", |round| {
            floor_two_lines(&huge_u64, &round.u64s, |k| hasher.hash_one(k) << 8)
        }),
        Contender::new("floor_u64_compute_alone", |round| {
            floor_compute(
                &floor_u64,
                &round.u64s,
                |k| hasher.hash_one(k) << 8,
                Fetch::None,
            )
        }),
        Contender::new("floor_u64_compute_loads", |round| {
            floor_compute(
                &floor_u64,
                &round.u64s,
                |k| hasher.hash_one(k) << 8,
                Fetch::Loads,
            )
        }),
        Contender::new("floor_u64_compute_prefetch", |round| {
            floor_compute(
                &floor_u64,
                &round.u64s,
                |k| hasher.hash_one(k) << 8,
                Fetch::Prefetch,
            )
        }),
        Contender::new("floor_u64_compute_prefetch_huge", |round| {
            floor_compute(
                &huge_u64,
                &round.u64s,
                |k| hasher.hash_one(k) << 8,
                Fetch::Prefetch,
            )
        }),
        Contender::new("floor_u64_compute_loads_huge", |round| {
            floor_compute(
                &huge_u64,
                &round.u64s,
                |k| hasher.hash_one(k) << 8,
                Fetch::Loads,
            )
        }),
        Contender::new("floor_u64_stream_huge", |round| {
            floor_stream::<0, _>(&huge_u64, &round.u64s, spread)
        }),
        Contender::new("floor_u64_compute_stream_huge", |round| {
            floor_stream::<COMPUTE_STEPS, _>(&huge_u64, &round.u64s, spread)
        }),
        Contender::new("floor_u64_probe_huge", |round| {
            let model = probe_model.as_ref().expect("built when wanted");
            floor_probe(model, &round.u64s, spread, ProbeModel::probe)
        }),
        Contender::new("floor_u64_probe_half_huge", |round| {
            let model = probe_half.as_ref().expect("built when wanted");
            floor_probe(model, &round.u64s, spread, ProbeModel::probe)
        }),
        Contender::new("floor_u64_probe_write_huge", |round| {
            let model = probe_model.as_ref().expect("built when wanted");
            floor_probe(model, &round.u64s, spread, ProbeModel::probe_write)
        }),
        Contender::new("floor_u64_probe_locked_huge", |round| {
            let model = probe_model.as_ref().expect("built when wanted");
            floor_probe(model, &round.u64s, spread, ProbeModel::probe_locked)
        }),
        Contender::new("floor_u64_decide_huge", |round| {
            let model = probe_model.as_ref().expect("built when wanted");
            floors::floor_decide(
                model,
                &round.u64s,
                spread,
                &model_gcra,
                call,
                &mut model_decisions,
            )
        }),
        Contender::new("floor_u64_probe_home_huge", |round| {
            let model = probe_model.as_ref().expect("built when wanted");
            floor_probe(model, &round.u64s, spread, ProbeModel::home_word)
        }),
        Contender::new("floor_u64_probe_cached", |round| {
            let model = probe_cached.as_ref().expect("built when wanted");
            floor_probe(model, &round.cached, spread, ProbeModel::probe)
        }),
        Contender::new("compact_batch", |round| {
            batched(&compact, &round.u64s, call, &mut decisions)
        }),
        Contender::new("compact_batch_cached", |round| {
            batched(&cached, &round.cached, call, &mut cached_decisions)
        }),
        Contender::new("compact_batch_half", |round| {
            batched(&half, &round.u64s, call, &mut half_decisions)
        }),
        Contender::new("compact_single", |round| {
            round
                .u64s
                .iter()
                .filter(|k| compact.check(*k).is_allowed())
                .count()
        }),
        // The raw floor indexes by the `u64` the key was made from: the
        // same spread, no hashing.
        Contender::new("floor_ipv6_read", |round| {
            floor_reads(&floor_ipv6, &round.u64s, |&k| k)
        }),
        Contender::new("floor_ipv6_hash", |round| {
            floor_reads(&floor_ipv6, &round.ipv6, |k| hasher.hash_one(k) << 8)
        }),
        Contender::new("floor_ipv6_hash_huge", |round| {
            floor_reads(&huge_ipv6, &round.ipv6, |k| hasher.hash_one(k) << 8)
        }),
        Contender::new("floor_ipv6_probe_huge", |round| {
            let model = probe_ipv6.as_ref().expect("built when wanted");
            floor_probe(model, &round.ipv6, spread_ipv6, ProbeModel::probe)
        }),
        Contender::new("floor_ipv6_decide_huge", |round| {
            let model = probe_ipv6.as_ref().expect("built when wanted");
            floors::floor_decide(
                model,
                &round.ipv6,
                spread_ipv6,
                &model_gcra,
                call,
                &mut model_ipv6_decisions,
            )
        }),
        Contender::new("compact_ipv6_batch", |round| {
            batched(&ipv6, &round.ipv6, call, &mut ipv6_decisions)
        }),
        Contender::new("floor_short_read", |round| {
            floor_reads(&floor_short, &round.u64s, |&k| k)
        }),
        Contender::new("floor_short_hash", |round| {
            floor_reads(&floor_short, &round.short, |k| hasher.hash_one(k) << 8)
        }),
        Contender::new("floor_short_hash_huge", |round| {
            floor_reads(&huge_short, &round.short, |k| hasher.hash_one(k) << 8)
        }),
        Contender::new("compact_short_batch", |round| {
            batched(&short, &round.short, call, &mut short_decisions)
        }),
        Contender::new("keyed_single", |round| {
            round
                .u64s
                .iter()
                .filter(|k| keyed.check(*k).is_allowed())
                .count()
        }),
        Contender::new("governor_default", |round| {
            round
                .u64s
                .iter()
                .filter(|k| governor_default.check_key(*k).is_ok())
                .count()
        }),
        Contender::new("governor_foldhash", |round| {
            round
                .u64s
                .iter()
                .filter(|k| governor_foldhash.check_key(*k).is_ok())
                .count()
        }),
        // An estimate, not a decision: "admitted" is every observation.
        Contender::new("pingora_rate", |round| {
            for key in &round.u64s {
                black_box(pingora.observe(key, 1));
            }
            round.u64s.len()
        }),
    ];
    contenders.retain(|c| wanted(c.name));
    for round in 0..size.rounds {
        let u64s = draws(n, size.checks, 0x5EED ^ round as u64);
        let keys = Round {
            cached: draws(CACHED_KEYS, size.checks, 0xCAC4E ^ round as u64),
            ipv6: u64s.iter().map(|&k| ipv6_of(k)).collect(),
            short: u64s.iter().map(|&k| short_of(k)).collect(),
            u64s,
        };
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
                keys.u64s.len(),
                "{}: a check was denied",
                contender.name
            );
            contender
                .rounds
                .push(elapsed.as_nanos() as f64 / keys.u64s.len() as f64);
            contender
                .cpu_rounds
                .push(cpu as f64 / keys.u64s.len() as f64);
        }
    }
    let sorted = |rounds: &[f64]| {
        let mut rounds = rounds.to_vec();
        rounds.sort_by(f64::total_cmp);
        rounds
    };
    for contender in &contenders {
        let wall = sorted(&contender.rounds);
        let cpu = sorted(&contender.cpu_rounds);
        println!(
            "keys {n:<10} {:<20} wall min {:7.2} ns  median {:7.2} ns   on CPU min {:7.2} ns  median {:7.2} ns",
            contender.name,
            wall[0],
            wall[wall.len() / 2],
            cpu[0],
            cpu[cpu.len() / 2]
        );
    }
    // Each ratio in wall time: the median of the rounds' own ratios (the
    // two measured a few hundred ms apart), then fastest ÷ fastest. Not
    // in time on a CPU: the kernel may count that in scheduler ticks (4 ms
    // on the reference host), too coarse for a round of 10 to 60 ms; the
    // load average printed says whether the wall time had a core to spare.
    let find = |name: &str| contenders.iter().find(|c| c.name == name);
    for (row, read, hash) in RATIOS {
        let Some(row) = find(row) else { continue };
        let floors = if read == hash { 1 } else { 2 };
        for floor in [read, hash].into_iter().take(floors) {
            let Some(floor) = find(floor) else { continue };
            let ratios: Vec<f64> = row
                .rounds
                .iter()
                .zip(&floor.rounds)
                .map(|(r, f)| r / f)
                .collect();
            let ratios = sorted(&ratios);
            println!(
                "ratio {:<20} ÷ {:<17} median of rounds {:5.2}×  (range {:.2}–{:.2})  fastest ÷ fastest {:5.2}×",
                row.name,
                floor.name,
                ratios[ratios.len() / 2],
                ratios[0],
                ratios[ratios.len() - 1],
                sorted(&row.rounds)[0] / sorted(&floor.rounds)[0]
            );
        }
    }
    // The batch against its floor where memory and compute add up: the
    // two lines' floor plus a decision's compute in cache, round by round.
    if let (Some(batch), Some(lines), Some(compute)) = (
        find("compact_batch"),
        find("floor_u64_two_lines_huge"),
        find("compact_batch_cached"),
    ) {
        let ratios: Vec<f64> = (0..batch.rounds.len())
            .map(|r| batch.rounds[r] / (lines.rounds[r] + compute.rounds[r]))
            .collect();
        let ratios = sorted(&ratios);
        println!(
            "ratio compact_batch ÷ (floor_u64_two_lines_huge + compact_batch_cached) median of rounds {:5.2}×  (range {:.2}–{:.2})",
            ratios[ratios.len() / 2],
            ratios[0],
            ratios[ratios.len() - 1]
        );
    }
    load("after");
    println!("{:.0} s in all", started.elapsed().as_secs_f64());
}
