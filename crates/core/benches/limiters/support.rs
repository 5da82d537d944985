//! What every scenario shares: the quotas, the admission check, the key
//! generators and the floor kernels.

use std::borrow::Borrow;
use std::hash::Hash;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use tollgate::{CachedClock, Clock, Quota};

/// The refresh interval of every coarse clock in the suite (tollgate's
/// `CachedClock`, governor's `QuantaUpkeepClock`).
pub const COARSE_INTERVAL: Duration = Duration::from_millis(1);

/// Allow path: 10^9 permits per second with a burst of 10^9, so that no run
/// (at most a few 10^7 checks per second) is ever denied.
pub const ALLOW_PER_SECOND: u32 = 1_000_000_000;

/// The quota of every allow-path tollgate limiter but the sliding log.
pub fn allow_quota() -> Quota {
    Quota::per_second(u64::from(ALLOW_PER_SECOND)).expect("allow quota")
}

/// The sliding log accepts at most 2^20 permits per period: 2^20 per
/// millisecond (10^9 per second) keeps the allow path open, with at most a
/// millisecond of admissions in the log.
pub fn allow_log_quota() -> Quota {
    Quota::new(1 << 20, Duration::from_millis(1)).expect("allow log quota")
}

/// Deny path: one permit per hour, taken before the run.
pub fn deny_quota() -> Quota {
    Quota::per_hour(1).expect("deny quota")
}

/// Governor's allow-path quota: the same rate and burst as [`allow_quota`].
pub fn governor_allow() -> governor::Quota {
    governor::Quota::per_second(NonZeroU32::new(ALLOW_PER_SECOND).expect("nonzero"))
}

/// Governor's deny-path quota: the same as [`deny_quota`].
pub fn governor_deny() -> governor::Quota {
    governor::Quota::per_hour(NonZeroU32::MIN)
}

/// How many of a run's checks must be admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Every check (allow path: the quota is far above the run's rate).
    All,
    /// None (deny path: the limiter was exhausted before the run).
    None,
}

impl Expect {
    /// Panics unless `admitted` of `total` checks is what the scenario's
    /// quota allows: a fast but wrong limiter fails the suite.
    pub fn check(self, label: &str, admitted: u64, total: u64) {
        let ok = match self {
            Expect::All => admitted == total,
            Expect::None => admitted == 0,
        };
        assert!(
            ok,
            "{label}: admitted {admitted} of {total} checks, expected {}",
            match self {
                Expect::All => "all (allow path)",
                Expect::None => "none (deny path)",
            }
        );
    }
}

/// Times `iters` calls of `op` (each returns whether it was admitted) and
/// checks the admissions against `expect`.
pub fn time_ops(label: &str, expect: Expect, iters: u64, mut op: impl FnMut() -> bool) -> Duration {
    let mut admitted = 0u64;
    let start = Instant::now();
    for _ in 0..iters {
        admitted += u64::from(black_box(op()));
    }
    let elapsed = start.elapsed();
    expect.check(label, admitted, iters);
    elapsed
}

/// The `i`-th u64 key: distinct for distinct `i`, scattered over the range.
pub fn key_of(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The `i`-th String key: 21 bytes, `user-` and 16 hex digits.
pub fn string_key_of(i: u64) -> String {
    format!("user-{:016x}", key_of(i))
}

/// A uniform choice among `n` indices (wyrand, then Lemire's reduction):
/// two multiplications, no table.
#[derive(Clone, Debug)]
pub struct Uniform {
    state: u64,
    n: u64,
}

impl Uniform {
    /// Indices in `0..n`, from `seed`.
    pub fn new(n: u64, seed: u64) -> Uniform {
        Uniform { state: seed, n }
    }

    /// The next index.
    #[inline]
    pub fn next_index(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0xA076_1D64_78BD_642F);
        let t = u128::from(self.state) * u128::from(self.state ^ 0xE703_7ED1_A0B4_28DB);
        let r = ((t >> 64) as u64) ^ (t as u64);
        ((u128::from(r) * u128::from(self.n)) >> 64) as u64
    }
}

/// `len` indices in `0..n` drawn from Zipf(`s`) by inverse transform
/// sampling (index 0 is the most popular); `len` must be a power of two so
/// that a run cycles through the table with a mask.
pub fn zipf_table(n: usize, s: f64, len: usize, seed: u64) -> Vec<u32> {
    assert!(len.is_power_of_two(), "zipf table length {len}");
    let mut cdf = Vec::with_capacity(n);
    let mut sum = 0.0;
    for rank in 1..=n {
        sum += 1.0 / (rank as f64).powf(s);
        cdf.push(sum);
    }
    let mut uniform = Uniform::new(1 << 53, seed);
    (0..len)
        .map(|_| {
            let u = uniform.next_index() as f64 / (1u64 << 53) as f64 * sum;
            let index = cdf.partition_point(|&c| c < u).min(n - 1);
            u32::try_from(index).expect("zipf index fits in u32")
        })
        .collect()
}

/// The floors' stand-in for a limiter's whole budget (`burst · T`): a
/// check fits while the word is at most this far ahead of now.
const FLOOR_CAPACITY: u64 = 1_000_000_000;

/// The floor kernel: one read of the word, then one compare-and-swap that
/// moves it to `max(word, now) + 1`, or no write at all if the word is more
/// than [`FLOOR_CAPACITY`] ahead of `now` (a denial). A GCRA with no
/// decision to compute: what any one-word limiter must at least do.
#[inline]
pub fn floor_kernel(cell: &AtomicU64, now: u64) -> bool {
    // Relaxed everywhere: the word publishes nothing else, as in tollgate.
    let mut current = cell.load(Ordering::Relaxed);
    loop {
        if current > now.saturating_add(FLOOR_CAPACITY) {
            return false;
        }
        match cell.compare_exchange(
            current,
            current.max(now) + 1,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return true,
            Err(actual) => current = actual,
        }
    }
}

/// A clock for the floors: whole nanoseconds as a `u64`.
pub trait FloorClock: Send + Sync {
    /// Now, in nanoseconds since the clock's origin.
    fn now_ns(&self) -> u64;
}

/// `Instant::now()` since an origin: what tollgate's `MonotonicClock` reads.
#[derive(Clone, Copy, Debug)]
pub struct InstantClock(Instant);

impl InstantClock {
    /// A clock counting from now.
    pub fn new() -> InstantClock {
        InstantClock(Instant::now())
    }
}

impl FloorClock for InstantClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// One relaxed load of a word a thread refreshes (tollgate's `CachedClock`
/// is exactly that).
impl FloorClock for CachedClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.now().as_u64()
    }
}

/// Floor kernel 1: a clock read and the one-word kernel.
pub struct FloorWord<C> {
    clock: C,
    cell: CachePadded<AtomicU64>,
}

impl<C: FloorClock> FloorWord<C> {
    /// A word that admits (allow path).
    pub fn open(clock: C) -> FloorWord<C> {
        FloorWord {
            clock,
            cell: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// A word that denies without writing (deny path).
    pub fn exhausted(clock: C) -> FloorWord<C> {
        FloorWord {
            clock,
            cell: CachePadded::new(AtomicU64::new(u64::MAX)),
        }
    }

    /// One check.
    #[inline]
    pub fn check(&self) -> bool {
        floor_kernel(&self.cell, self.clock.now_ns())
    }
}

/// Floor kernel 2: a clock read, a dashmap read (the same sharded
/// `RwLock<hashbrown>` design as tollgate's `KeyMap`) with the hasher
/// tollgate uses (foldhash, randomly seeded), and the one-word kernel.
pub struct FloorMap<K> {
    clock: InstantClock,
    map: DashMap<K, AtomicU64, foldhash::fast::RandomState>,
}

impl<K: Hash + Eq> FloorMap<K> {
    /// An empty map.
    pub fn new() -> FloorMap<K> {
        FloorMap {
            clock: InstantClock::new(),
            map: DashMap::with_hasher(foldhash::fast::RandomState::default()),
        }
    }

    /// Adds `key` with a word that admits (`open`) or denies.
    pub fn add(&self, key: K, open: bool) {
        let word = if open { 0 } else { u64::MAX };
        self.map.insert(key, AtomicU64::new(word));
    }

    /// One check of a known key; an unknown key is not admitted.
    #[inline]
    pub fn check<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.clock.now_ns();
        self.map
            .get(key)
            .is_some_and(|cell| floor_kernel(&cell, now))
    }

    /// One check that creates the key's word if it is new (the insert path).
    #[inline]
    pub fn check_or_insert(&self, key: K) -> bool {
        let now = self.clock.now_ns();
        match self.map.entry(key) {
            Entry::Occupied(occupied) => floor_kernel(occupied.get(), now),
            Entry::Vacant(vacant) => {
                vacant.insert(AtomicU64::new(now + 1));
                true
            }
        }
    }
}
