//! Why the keyed map keeps its entries inline: three layouts of a
//! `hashbrown` table of 1,000,000 `u64` keys, each key beside a one-word
//! state, with their bytes per key and the time of one check on a uniformly
//! drawn key: a shared lock taken and released around the lookup (as the
//! map's shard lock is: two atomic read-modify-writes, which also keep one
//! check's cache misses from overlapping the next one's, as in the
//! limiter), and one compare-and-swap on the state.
//!
//! - `inline_24`: key, tier pointer and state in the table's slots, 24
//!   bytes each: the map's layout before that change, and still that of its
//!   side table (keys on an override, see `src/keymap.rs`).
//! - `inline_16`: the same without the tier pointer (governor's layout, and
//!   the map's hot table since the shard lock: key and state, 16 bytes, the tier
//!   in the shard).
//! - `indexed_dense`: a table of 4-byte indices into a dense vector of
//!   16-byte (key, state) entries, with a parallel vector of 4-byte tier ids
//!   (the layout of Python's dict and `indexmap`): the only one under 32
//!   bytes per key at 10^6 keys, since a table holds at most 7/8 of its
//!   power-of-two slots and 10^6 keys therefore need 2^21 of them.
//!
//! The dense layout pays a dependent load the others do not: the slot gives
//! an index, and the key to compare is in another cache line. At 10^6 keys
//! (tables far larger than the cache) that is one more cache miss per
//! check, the cost this bench shows.
//!
//! Bytes are computed from the capacities (slots × (entry + 1 control
//! byte), plus the vectors' capacities), not measured: the `memory` bench
//! measures the real limiter. Times are the best of several rounds of
//! 2 × 10^6 lookups (the least disturbed by other work on a shared host).
//! `cargo bench -p tollgate --bench layout` prints one JSON object per
//! layout.

use std::hash::BuildHasher;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use hashbrown::HashTable;

const KEYS: u64 = 1_000_000;
const LOOKUPS: usize = 2_000_000;

type Hasher = foldhash::fast::RandomState;

/// A shard lock's word: a reader adds one, then takes it back.
static LOCK: AtomicU64 = AtomicU64::new(0);

/// One check: `lookup` between a shared lock's acquire and release (the
/// orderings of a read lock), then a load and a compare-and-swap on the
/// state it found, as a one-word algorithm does on the allow path.
fn check<'a>(lookup: impl FnOnce() -> &'a AtomicU64) {
    LOCK.fetch_add(1, Ordering::Acquire);
    let state = lookup();
    // Relaxed: a single-threaded measurement; nothing is published.
    let seen = state.load(Ordering::Relaxed);
    let _ = state.compare_exchange(seen, seen + 1, Ordering::Relaxed, Ordering::Relaxed);
    LOCK.fetch_sub(1, Ordering::Release);
}

/// Uniform draws of key numbers (xorshift: cheap, and the same every run).
fn draws() -> Vec<u64> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..LOOKUPS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % KEYS
        })
        .collect()
}

/// The best ns per lookup over `rounds` passes of `draws`.
fn best_of(rounds: usize, draws: &[u64], mut lookup: impl FnMut(u64)) -> f64 {
    (0..rounds)
        .map(|_| {
            let started = Instant::now();
            for &key in draws {
                lookup(black_box(key));
            }
            started.elapsed().as_nanos() as f64 / draws.len() as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn report(layout: &str, bytes: usize, ns: f64) {
    println!(
        "{{\"layout\": \"{layout}\", \"keys\": {KEYS}, \"bytes_per_key\": {:.1}, \"ns_per_check\": {ns:.1}}}",
        bytes as f64 / KEYS as f64
    );
}

/// An inline layout: `entry(key)` in the table's slots; `key` and `state`
/// read a slot's key and state.
fn inline<E>(
    layout: &str,
    rounds: usize,
    draws: &[u64],
    hasher: &Hasher,
    entry: impl Fn(u64) -> E,
    key: impl Fn(&E) -> u64,
    state: impl Fn(&E) -> &AtomicU64,
) {
    let mut table = HashTable::new();
    for k in 0..KEYS {
        table.insert_unique(hasher.hash_one(k), entry(k), |e| hasher.hash_one(key(e)));
    }
    let ns = best_of(rounds, draws, |k| {
        check(|| {
            let found = table
                .find(hasher.hash_one(k), |e| key(e) == k)
                .expect("every drawn key is in the table");
            state(found)
        });
    });
    report(layout, table.num_buckets() * (size_of::<E>() + 1), ns);
}

fn main() {
    // Under `cargo test --benches`, one short round: the bench still runs
    // end to end, and its assertions still hold.
    let rounds = if std::env::args().any(|a| a == "--bench") {
        7
    } else {
        1
    };
    let hasher = Hasher::default();
    let draws = draws();

    inline(
        "inline_24",
        rounds,
        &draws,
        &hasher,
        |key| (key, 0usize, AtomicU64::new(0)),
        |e| e.0,
        |e| {
            // A check reads the tier pointer beside the state.
            black_box(e.1);
            &e.2
        },
    );
    inline(
        "inline_16",
        rounds,
        &draws,
        &hasher,
        |key| (key, AtomicU64::new(0)),
        |e| e.0,
        |e| &e.1,
    );

    let mut index: HashTable<u32> = HashTable::new();
    let mut dense: Vec<(u64, AtomicU64)> = Vec::new();
    let mut tiers: Vec<u32> = Vec::new();
    for key in 0..KEYS {
        let at = u32::try_from(dense.len()).expect("10^6 entries fit a u32 index");
        dense.push((key, AtomicU64::new(0)));
        tiers.push(0);
        index.insert_unique(hasher.hash_one(key), at, |&i| {
            hasher.hash_one(dense[i as usize].0)
        });
    }
    let ns = best_of(rounds, &draws, |key| {
        check(|| {
            let &at = index
                .find(hasher.hash_one(key), |&i| dense[i as usize].0 == key)
                .expect("every drawn key is in the table");
            black_box(tiers[at as usize]);
            &dense[at as usize].1
        });
    });
    let bytes = index.num_buckets() * (size_of::<u32>() + 1)
        + dense.capacity() * size_of::<(u64, AtomicU64)>()
        + tiers.capacity() * size_of::<u32>();
    report("indexed_dense", bytes, ns);
}
