//! One state per key, one thread.
//!
//! Every limiter is populated (one check per key, outside the timed region)
//! before a run, so that the runs of `keyed_u64_uniform`,
//! `keyed_string_uniform`, `keyed_u64_zipf` and `keyed_deny` take the path of
//! a known key; `keyed_insert` takes the path of a new key on every check
//! (a fresh limiter per sample). Implementations:
//!
//! - `tollgate_monotonic` / `tollgate_cached` / `tollgate_quanta`:
//!   [`KeyedLimiter`] (GCRA, shards of `RwLock<hashbrown::HashTable>`,
//!   foldhash) on `MonotonicClock` / `CachedClock` (1 ms) / `QuantaClock`
//!   (the default, governor's default clock class), its sweeper off so
//!   that no key leaves the map during a run; `tollgate_cached` only in the
//!   u64 groups, the others everywhere ([`TollgateClock::UNCACHED`]);
//! - `governor`: `DefaultKeyedRateLimiter` (dashmap, std's SipHash,
//!   quanta clock); `governor_foldhash`: the same map with foldhash, to
//!   tell the hasher from the rest;
//! - `floor_dashmap`: floor kernel 2 (a clock read, a dashmap read with
//!   foldhash, one compare-and-swap).
//!
//! u64 keys are scattered 64-bit values; String keys are 21 bytes
//! (`user-` and 16 hex digits) and tollgate is asked by `&str`, governor by
//! `&String` (its API has no borrowed form).

use std::hash::Hash;
use std::sync::Arc;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion};
use governor::clock::DefaultClock;
use governor::state::keyed::DashMapStateStore;
use tollgate::{Gcra, KeyedLimiter, Quota};

use crate::direct::cached_clock;
use crate::support::{
    self, Expect, FloorMap, Uniform, key_of, string_key_of, time_ops, zipf_table,
};

/// Key counts of `keyed_u64_uniform`.
const U64_SIZES: [u64; 4] = [1, 1_000, 100_000, 1_000_000];
/// Added to [`U64_SIZES`] by `TOLLGATE_BENCH_10M=1`.
const HUGE: u64 = 10_000_000;
/// Key counts of `keyed_string_uniform`.
const STRING_SIZES: [u64; 2] = [1_000, 100_000];
/// Keys of `keyed_u64_zipf`, and its exponent.
const ZIPF_KEYS: u64 = 100_000;
const ZIPF_EXPONENT: f64 = 1.0;
/// Keys of `keyed_deny`.
const DENY_KEYS: u64 = 1_000;

/// governor's keyed limiter with foldhash instead of SipHash.
pub type GovernorFoldhash<K> =
    governor::RateLimiter<K, DashMapStateStore<K, foldhash::fast::RandomState>, DefaultClock>;

/// A stream of key indices.
pub trait Pick {
    /// The next index.
    fn pick(&mut self) -> u64;
}

impl Pick for Uniform {
    #[inline]
    fn pick(&mut self) -> u64 {
        self.next_index()
    }
}

/// Indices from a precomputed Zipf table, in a cycle.
#[derive(Clone)]
struct Zipf {
    table: Arc<[u32]>,
    position: usize,
}

impl Pick for Zipf {
    #[inline]
    fn pick(&mut self) -> u64 {
        let index = self.table[self.position & (self.table.len() - 1)];
        self.position = self.position.wrapping_add(1);
        u64::from(index)
    }
}

/// Every scenario.
pub fn benches(c: &mut Criterion) {
    u64_uniform(c);
    string_uniform(c);
    u64_zipf(c);
    insert(c);
    deny(c);
}

/// The clocks tollgate's keyed rows run on.
#[derive(Clone, Copy)]
pub enum TollgateClock {
    /// `MonotonicClock`.
    Monotonic,
    /// The shared `CachedClock` (1 ms).
    Cached,
    /// `QuantaClock`, the default: governor's default clock class.
    #[cfg(feature = "quanta")]
    Quanta,
}

impl TollgateClock {
    /// Every clock this build has.
    pub const ALL: &[TollgateClock] = &[
        TollgateClock::Monotonic,
        TollgateClock::Cached,
        #[cfg(feature = "quanta")]
        TollgateClock::Quanta,
    ];

    /// The clocks of the String, insert, deny and threads groups: the
    /// default, and governor's clock class so that `tollgate_quanta` ÷
    /// `governor` compares like with like. The cached clock only saves the
    /// clock read, which the u64 groups already show.
    pub const UNCACHED: &[TollgateClock] = &[
        TollgateClock::Monotonic,
        #[cfg(feature = "quanta")]
        TollgateClock::Quanta,
    ];

    /// The row's name.
    pub fn name(self) -> &'static str {
        match self {
            TollgateClock::Monotonic => "tollgate_monotonic",
            TollgateClock::Cached => "tollgate_cached",
            #[cfg(feature = "quanta")]
            TollgateClock::Quanta => "tollgate_quanta",
        }
    }
}

/// A tollgate keyed GCRA limiter with no sweeper on `clock`.
pub fn tollgate_keyed_on<K: Hash + Eq + Send + Sync + 'static>(
    quota: Quota,
    clock: TollgateClock,
) -> KeyedLimiter<K> {
    let builder = KeyedLimiter::builder(Gcra::new(quota).expect("gcra")).sweep_every(None);
    match clock {
        TollgateClock::Monotonic => builder.clock(tollgate::MonotonicClock::new()).build(),
        TollgateClock::Cached => builder.clock(cached_clock()).build(),
        #[cfg(feature = "quanta")]
        TollgateClock::Quanta => builder.build(),
    }
}

/// Governor's default keyed limiter.
pub fn governor_keyed<K: Clone + Hash + Eq>(
    quota: governor::Quota,
) -> governor::DefaultKeyedRateLimiter<K> {
    governor::RateLimiter::keyed(quota)
}

/// Checks keys `0..n` once each (all must be admitted: the first check of a
/// key always is).
pub fn populate(label: &str, n: u64, mut check: impl FnMut(u64) -> bool) {
    let admitted = (0..n).filter(|&i| check(i)).count() as u64;
    Expect::All.check(&format!("{label} (populating)"), admitted, n);
}

/// Benchmarks `check` on the indices `picker` gives.
fn measure<P: Pick + Clone>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    (function, param): (&str, &str),
    expect: Expect,
    picker: P,
    mut check: impl FnMut(u64) -> bool,
) {
    let label = format!("{function}/{param}");
    let label = label.as_str();
    group.bench_function(BenchmarkId::new(function, param), |b| {
        let mut picker = picker.clone();
        b.iter_custom(|iters| time_ops(label, expect, iters, || check(picker.pick())));
    });
}

/// Runs the four u64-keyed implementations on `n` keys with `picker`.
fn u64_implementations<P: Pick + Clone>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    n: u64,
    param: &str,
    picker: &P,
) {
    for &clock in TollgateClock::ALL {
        let name = clock.name();
        let limiter = tollgate_keyed_on::<u64>(support::allow_quota(), clock);
        populate(name, n, |i| limiter.check(&key_of(i)).is_allowed());
        measure(group, (name, param), Expect::All, picker.clone(), |i| {
            limiter.check(&key_of(i)).is_allowed()
        });
    }
    {
        let limiter = governor_keyed::<u64>(support::governor_allow());
        populate("governor", n, |i| limiter.check_key(&key_of(i)).is_ok());
        measure(
            group,
            ("governor", param),
            Expect::All,
            picker.clone(),
            |i| limiter.check_key(&key_of(i)).is_ok(),
        );
    }
    {
        let limiter: GovernorFoldhash<u64> = governor::RateLimiter::dashmap_with_hasher(
            support::governor_allow(),
            Default::default(),
        );
        populate("governor_foldhash", n, |i| {
            limiter.check_key(&key_of(i)).is_ok()
        });
        measure(
            group,
            ("governor_foldhash", param),
            Expect::All,
            picker.clone(),
            |i| limiter.check_key(&key_of(i)).is_ok(),
        );
    }
    {
        let floor = FloorMap::new();
        (0..n).for_each(|i| floor.add(key_of(i), true));
        measure(
            group,
            ("floor_dashmap", param),
            Expect::All,
            picker.clone(),
            |i| floor.check(&key_of(i)),
        );
    }
}

fn u64_uniform(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_u64_uniform");
    let huge = std::env::var_os("TOLLGATE_BENCH_10M").is_some_and(|v| v == "1");
    let sizes = U64_SIZES.iter().copied().chain(huge.then_some(HUGE));
    for n in sizes {
        u64_implementations(&mut group, n, &n.to_string(), &Uniform::new(n, 0x5EED ^ n));
    }
    group.finish();
}

fn u64_zipf(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_u64_zipf");
    let table: Arc<[u32]> = zipf_table(ZIPF_KEYS as usize, ZIPF_EXPONENT, 1 << 20, 0x21FF).into();
    let picker = Zipf { table, position: 0 };
    u64_implementations(&mut group, ZIPF_KEYS, &ZIPF_KEYS.to_string(), &picker);
    group.finish();
}

fn string_uniform(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_string_uniform");
    for n in STRING_SIZES {
        let keys: Vec<String> = (0..n).map(string_key_of).collect();
        let key = |i: u64| &keys[i as usize];
        let picker = Uniform::new(n, 0x57 ^ n);
        for &clock in TollgateClock::UNCACHED {
            let name = clock.name();
            let limiter = tollgate_keyed_on::<String>(support::allow_quota(), clock);
            populate(name, n, |i| limiter.check(key(i).as_str()).is_allowed());
            measure(
                &mut group,
                (name, &n.to_string()),
                Expect::All,
                picker.clone(),
                |i| limiter.check(key(i).as_str()).is_allowed(),
            );
        }
        {
            let limiter = governor_keyed::<String>(support::governor_allow());
            populate("governor", n, |i| limiter.check_key(key(i)).is_ok());
            measure(
                &mut group,
                ("governor", &n.to_string()),
                Expect::All,
                picker.clone(),
                |i| limiter.check_key(key(i)).is_ok(),
            );
        }
        {
            let floor = FloorMap::<String>::new();
            keys.iter().for_each(|k| floor.add(k.clone(), true));
            measure(
                &mut group,
                ("floor_dashmap", &n.to_string()),
                Expect::All,
                picker.clone(),
                |i| floor.check(key(i).as_str()),
            );
        }
    }
    group.finish();
}

/// Every check is the first of its key: a fresh limiter per sample, built
/// and dropped outside the timed region.
fn insert(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_insert");
    let allow = support::allow_quota;
    for &clock in TollgateClock::UNCACHED {
        let name = clock.name();
        let label = format!("insert {name} u64");
        group.bench_function(BenchmarkId::new(name, "u64"), |b| {
            b.iter_custom(|iters| {
                let limiter = tollgate_keyed_on::<u64>(allow(), clock);
                time_ops(
                    &label,
                    Expect::All,
                    iters,
                    counter(|i| limiter.check(&key_of(i)).is_allowed()),
                )
            });
        });
    }
    group.bench_function(BenchmarkId::new("governor", "u64"), |b| {
        b.iter_custom(|iters| {
            let limiter = governor_keyed::<u64>(support::governor_allow());
            time_ops(
                "insert governor u64",
                Expect::All,
                iters,
                counter(|i| limiter.check_key(&key_of(i)).is_ok()),
            )
        });
    });
    group.bench_function(BenchmarkId::new("floor_dashmap", "u64"), |b| {
        b.iter_custom(|iters| {
            let floor = FloorMap::new();
            time_ops(
                "insert floor u64",
                Expect::All,
                iters,
                counter(|i| floor.check_or_insert(key_of(i))),
            )
        });
    });
    let keys = |iters: u64| (0..iters).map(string_key_of).collect::<Vec<_>>();
    for &clock in TollgateClock::UNCACHED {
        let name = clock.name();
        let label = format!("insert {name} string");
        group.bench_function(BenchmarkId::new(name, "string"), |b| {
            b.iter_custom(|iters| {
                let keys = keys(iters);
                let limiter = tollgate_keyed_on::<String>(allow(), clock);
                time_ops(
                    &label,
                    Expect::All,
                    iters,
                    counter(|i| limiter.check(keys[i as usize].as_str()).is_allowed()),
                )
            });
        });
    }
    group.bench_function(BenchmarkId::new("governor", "string"), |b| {
        b.iter_custom(|iters| {
            let keys = keys(iters);
            let limiter = governor_keyed::<String>(support::governor_allow());
            time_ops(
                "insert governor string",
                Expect::All,
                iters,
                counter(|i| limiter.check_key(&keys[i as usize]).is_ok()),
            )
        });
    });
    group.bench_function(BenchmarkId::new("floor_dashmap", "string"), |b| {
        b.iter_custom(|iters| {
            let keys = keys(iters);
            let floor = FloorMap::new();
            time_ops(
                "insert floor string",
                Expect::All,
                iters,
                counter(|i| {
                    // The map owns its key, as the limiters' do: one copy.
                    floor.check_or_insert(keys[i as usize].clone())
                }),
            )
        });
    });
    group.finish();
}

/// `check` on 0, 1, 2, ...
fn counter(mut check: impl FnMut(u64) -> bool) -> impl FnMut() -> bool {
    let mut next = 0;
    move || {
        let i = next;
        next += 1;
        check(i)
    }
}

/// Exhausted keys: one permit per hour each, taken while populating.
fn deny(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_deny");
    let n = DENY_KEYS;
    let picker = Uniform::new(n, 0xDE ^ n);
    for &clock in TollgateClock::UNCACHED {
        let name = clock.name();
        let limiter = tollgate_keyed_on::<u64>(support::deny_quota(), clock);
        populate(&format!("{name} deny"), n, |i| {
            limiter.check(&key_of(i)).is_allowed()
        });
        measure(
            &mut group,
            (name, &n.to_string()),
            Expect::None,
            picker.clone(),
            |i| limiter.check(&key_of(i)).is_allowed(),
        );
    }
    {
        let limiter = governor_keyed::<u64>(support::governor_deny());
        populate("governor deny", n, |i| {
            limiter.check_key(&key_of(i)).is_ok()
        });
        measure(
            &mut group,
            ("governor", &n.to_string()),
            Expect::None,
            picker.clone(),
            |i| limiter.check_key(&key_of(i)).is_ok(),
        );
    }
    {
        let floor = FloorMap::new();
        (0..n).for_each(|i| floor.add(key_of(i), false));
        measure(
            &mut group,
            ("floor_dashmap", &n.to_string()),
            Expect::None,
            picker,
            |i| floor.check(&key_of(i)),
        );
    }
    group.finish();
}
