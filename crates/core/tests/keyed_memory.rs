//! Memory of a [`KeyedLimiter`], measured with a counting global allocator:
//! bytes per key at 1,000,000 keys, and whether the memory comes back once the
//! keys are idle and swept. The figures are printed
//! (`cargo test --test keyed_memory -- --nocapture`); the assertions are
//! bounds around them.
//!
//! A binary of its own, since it installs the allocator, and one `#[test]`,
//! so that no other test allocates while it counts. The allocator is
//! `stats_alloc`'s: the workspace forbids `unsafe` code, which a hand-written
//! `GlobalAlloc` needs. Live bytes are bytes requested minus bytes freed
//! (`realloc` is counted in both); the allocator's own overhead per
//! allocation (8 to 16 bytes in glibc) is not in them, and is what a String
//! key's separate allocation adds on top.
//!
//! # How the memory comes back
//!
//! The map is shards of `hashbrown` tables behind read/write locks
//! (`src/keymap.rs`): nothing is reclaimed later by epochs, so what a sweep
//! removes is freed before it returns, on the sweeping thread, and a shard
//! the sweep emptied frees its table. The memory is back to the empty
//! limiter when `sweep()` returns (to the byte when nothing else in the
//! process allocates meanwhile; the test harness's thread may: see
//! `HARNESS_BYTES`), and after `drop` to nothing.

use std::alloc::System;
use std::hash::Hash;
use std::thread;
use std::time::{Duration, Instant};

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tollgate::{CompactString, Gcra, KeyedBuilder, KeyedLimiter, ManualClock, Nanos, Quota};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const KEYS: u64 = 1_000_000;

/// Shards of the map at the default key cap: each holds one table
/// allocation once it has a key.
const SHARDS: i64 = 256;

/// What the test harness's own main thread may allocate and keep while the
/// test runs (the counting allocator sees every thread): seen, 4 blocks of
/// 900 bytes in all, when the binary starts right after a busy one. Never
/// anything per key: the bounds below are a few hundred times smaller than
/// one byte per key.
const HARNESS_BYTES: i64 = 4 * 1024;
const HARNESS_ALLOCATIONS: i64 = 8;

/// Bytes and allocations live now.
fn live() -> (i64, i64) {
    let stats = GLOBAL.stats();
    (
        stats.bytes_allocated as i64 - stats.bytes_deallocated as i64,
        stats.allocations as i64 - stats.deallocations as i64,
    )
}

fn live_bytes() -> i64 {
    live().0
}

/// 10 per second, burst 10: a key admitted once is idle 100 ms later.
fn gcra() -> Gcra {
    Gcra::new(Quota::per_second(10).expect("valid quota")).expect("valid gcra")
}

fn builder<K>(clock: &ManualClock) -> KeyedBuilder<K, Gcra>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    KeyedLimiter::builder(gcra()).clock(clock.clone())
}

/// What one run measured, in bytes unless said otherwise.
#[derive(Debug)]
struct Measured {
    /// The limiter right after `build`.
    empty: i64,
    /// Added by `KEYS` keys.
    keys: i64,
    /// Allocations added by the keys.
    allocations: i64,
    /// Above `empty` right after the sweep that removed every key.
    after_sweep: i64,
    /// Time to insert the keys, and to sweep them.
    insert_time: Duration,
    sweep_time: Duration,
}

impl Measured {
    /// Bytes per key held with every key in the map.
    fn per_key(&self) -> f64 {
        self.keys as f64 / KEYS as f64
    }
}

fn measure<K>(make: impl Fn(u64) -> K) -> Measured
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    let clock = ManualClock::starting_at(Nanos::new(1_000_000_000_000));
    let (base, base_allocations) = live();
    let limiter: KeyedLimiter<K> = builder(&clock).sweep_every(None).build();
    let (built, built_allocations) = live();
    let empty = built - base;
    let started = Instant::now();
    for i in 0..KEYS {
        let key = make(i);
        assert!(limiter.check(&key).is_allowed());
    }
    let insert_time = started.elapsed();
    // A pass of the sweeper that finds nothing idle, as the background
    // sweeper makes every second: a running limiter's memory includes it.
    assert_eq!(limiter.sweep(), 0);
    let (full, full_allocations) = live();
    assert_eq!(limiter.len(), KEYS as usize);

    clock.advance(Duration::from_secs(1));
    let started = Instant::now();
    assert_eq!(limiter.sweep(), KEYS as usize);
    let sweep_time = started.elapsed();
    assert!(limiter.is_empty());
    let after_sweep = live_bytes() - built;
    // A peek of a key not in the map creates nothing.
    assert!(limiter.peek(&make(0)).is_allowed());
    assert!(limiter.is_empty());
    assert!(live_bytes() - built - after_sweep <= HARNESS_BYTES);
    drop(limiter);
    let (left, left_allocations) = live();
    assert!(
        left - base <= HARNESS_BYTES && left_allocations - base_allocations <= HARNESS_ALLOCATIONS,
        "{} bytes in {} allocations left after drop",
        left - base,
        left_allocations - base_allocations
    );
    Measured {
        empty,
        keys: full - built,
        allocations: full_allocations - built_allocations,
        after_sweep,
        insert_time,
        sweep_time,
    }
}

/// Bytes per `u64` key once every key had a request after a change of the
/// default quota, and a sweep ran: the change moves each shard's keys aside
/// (24-byte entries, each with a pointer to the old default), each key's
/// next request carries its state over and brings it back to a 16-byte
/// entry, and the sweep frees the emptied side tables.
fn after_a_change() -> f64 {
    let clock = ManualClock::starting_at(Nanos::new(1_000_000_000_000));
    let base = live_bytes();
    let limiter: KeyedLimiter<u64> = builder(&clock).sweep_every(None).build();
    for key in 0..KEYS {
        assert!(limiter.check(&key).is_allowed());
    }
    let twenty = Gcra::new(Quota::per_second(20).expect("valid quota")).expect("valid gcra");
    limiter.set_default(twenty, tollgate::Carry::Keep);
    for key in 0..KEYS {
        // Keep: 1 of 10 used becomes 1 of 20 used.
        assert_eq!(limiter.check(&key).remaining(), 18);
    }
    assert_eq!(limiter.sweep(), 0);
    let per_key = (live_bytes() - base) as f64 / KEYS as f64;
    drop(limiter);
    per_key
}

/// How long the background sweeper takes to give the memory of 1,000,000
/// swept keys back, sweeping every `interval`; and the limiter's empty size
/// with its sweeper thread.
fn background(interval: Duration) -> (i64, i64, Duration) {
    let clock = ManualClock::starting_at(Nanos::new(1_000_000_000_000));
    let base = live_bytes();
    let limiter: KeyedLimiter<u64> = builder(&clock).sweep_every(Some(interval)).build();
    let empty = live_bytes() - base;
    for key in 0..KEYS {
        let _ = limiter.check(&key);
    }
    clock.advance(Duration::from_secs(1));
    let started = Instant::now();
    // The sweeper lowers the count after it freed what it removed; the
    // allocator's counters are read apart from it, so wait for both.
    while !limiter.is_empty() || live_bytes() - base - empty > HARNESS_BYTES {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{} keys and {} bytes above empty 30 s after the keys went idle",
            limiter.len(),
            live_bytes() - base - empty
        );
        thread::sleep(Duration::from_millis(1));
    }
    (empty, live_bytes() - base - empty, started.elapsed())
}

#[test]
fn bytes_per_key_and_memory_returning_after_a_sweep() {
    let u64_keys = measure(|i| i);
    // 16 bytes: "user-" and 11 digits.
    let string_keys = measure(|i| format!("user-{i:011}"));
    assert_eq!(format!("user-{:011}", 0).len(), 16);
    // The same keys inline: no heap block of their own.
    let inline_keys = measure(|i| CompactString::from(format!("user-{i:011}")));
    let changed = after_a_change();
    let interval = Duration::from_millis(2);
    let (bg_empty, bg_left, bg_time) = background(interval);

    for (name, m) in [
        ("u64", &u64_keys),
        ("16-byte String", &string_keys),
        ("16-byte CompactString", &inline_keys),
    ] {
        println!(
            "{name} keys, GCRA: empty limiter {} B; {KEYS} keys {} B = {:.1} B/key \
             ({:.2} allocations/key), inserted in {:?}, swept in {:?}",
            m.empty,
            m.keys,
            m.per_key(),
            m.allocations as f64 / KEYS as f64,
            m.insert_time,
            m.sweep_time
        );
        println!(
            "{name} keys: {} B above empty right after the sweep",
            m.after_sweep
        );
    }
    println!("u64 keys after a change of the default and a request each: {changed:.1} B/key");
    println!(
        "background sweeper every {interval:?}: empty limiter {bg_empty} B; memory back to \
         {bg_left} B above empty {bg_time:?} after the keys went idle (~{} sweeps)",
        bg_time.as_millis() / interval.as_millis()
    );

    // Bytes per key, with room for the table's load factor: a u64 key and its
    // one-word state take 16 bytes in a slot; a String key adds its 24-byte
    // header and 16 bytes on the heap.
    assert!((24.0..=80.0).contains(&u64_keys.per_key()), "{u64_keys:?}");
    assert!(
        (64.0..=160.0).contains(&string_keys.per_key()),
        "{string_keys:?}"
    );
    // Keys live in their shards' tables, one allocation each (a resize
    // frees the old one); a String key adds its own allocation.
    assert!(
        (1..=SHARDS + HARNESS_ALLOCATIONS).contains(&u64_keys.allocations),
        "u64 keys live in the shards' tables: {u64_keys:?}"
    );
    assert!(
        (1..=SHARDS + HARNESS_ALLOCATIONS).contains(&(string_keys.allocations - KEYS as i64)),
        "one allocation per String key, and the shards' tables: {string_keys:?}"
    );
    // Regression: a key on the default quota is a 16-byte entry (key and
    // state, no tier pointer): 2^21 slots of 17 bytes (with its control
    // byte) for 10^6 keys, 35.7 bytes per key, governor's size. With the
    // 24-byte entry it replaced, 52.4.
    assert!(u64_keys.per_key() <= 36.0, "{u64_keys:?}");
    // And again once every key had a request after a change of quota.
    assert!(changed <= 36.0, "{changed} B/key after a change");
    // Regression: a short string key inline costs no allocation of its own:
    // the shards' tables only, and a 32-byte entry per key.
    assert!(
        (1..=SHARDS + HARNESS_ALLOCATIONS).contains(&inline_keys.allocations),
        "inline keys live in the shards' tables: {inline_keys:?}"
    );
    assert!(inline_keys.per_key() <= 70.0, "{inline_keys:?}");
    // The memory is back as soon as the sweep returns.
    for (name, m) in [
        ("u64", &u64_keys),
        ("String", &string_keys),
        ("CompactString", &inline_keys),
    ] {
        assert!(
            m.after_sweep <= HARNESS_BYTES,
            "{name}: {} bytes above the empty size {} after the sweep",
            m.after_sweep,
            m.empty
        );
    }
    // (The sweeper thread may meanwhile free a few bytes of its own start-up.)
    assert!(
        bg_left <= HARNESS_BYTES,
        "background: {bg_left} bytes above the empty size {bg_empty} once every key is swept"
    );
}
