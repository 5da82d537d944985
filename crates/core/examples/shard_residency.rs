//! Why a keyed limiter's resident memory exceeds its heap bytes: the same
//! 10^6 `(u64, u64)` entries in `shards` hashbrown tables (the keyed map's
//! layout, without the limiter), and the resident-set change per key.
//!
//! ```sh
//! cargo run --release -p tollgate --example shard_residency -- 256 64 32 8
//! ```
//!
//! The heap bytes are the same for every shard count (the tables' slots,
//! 2^21 of 16 bytes in all); what changes is how much of the memory freed
//! by each table's doublings the allocator keeps resident. With many
//! shards, every table's last doubling frees a block below glibc's mmap
//! threshold, which stays in the heap; with few, the blocks are mmapped
//! and go back to the system when freed. Linux only (reads
//! `/proc/self/statm`).

use std::hash::BuildHasher;

use hashbrown::HashTable;

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    if let Some(shards) = std::env::var("SHARD_RESIDENCY_ONE")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        one(shards);
        return;
    }
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let counts = if counts.is_empty() { vec![256] } else { counts };
    for shards in counts {
        if !shards.is_power_of_two() {
            eprintln!("{shards}: the shard count must be a power of two");
            continue;
        }
        // Each count in a process of its own: what an earlier run freed
        // would otherwise be reused.
        let child = std::process::Command::new(std::env::current_exe().expect("own path"))
            .env("SHARD_RESIDENCY_ONE", shards.to_string())
            .status();
        if !child.is_ok_and(|s| s.success()) {
            eprintln!("{shards}: the run failed");
        }
    }
}

fn one(shards: usize) {
    const KEYS: u64 = 1_000_000;
    let hasher = foldhash::fast::RandomState::default();
    let before = resident_bytes();
    let mut tables: Vec<HashTable<(u64, u64)>> = (0..shards).map(|_| HashTable::new()).collect();
    for key in 0..KEYS {
        let hash = hasher.hash_one(key);
        let table = &mut tables[(hash >> 32) as usize & (shards - 1)];
        table.insert_unique(hash, (key, key), |entry| hasher.hash_one(entry.0));
    }
    let after = resident_bytes();
    let slots: usize = tables.iter().map(HashTable::capacity).sum();
    println!(
        "{shards:>4} shards: {:.1} resident bytes per key ({} entries of capacity {slots})",
        after.saturating_sub(before) as f64 / KEYS as f64,
        tables.iter().map(HashTable::len).sum::<usize>(),
    );
    std::hint::black_box(&tables);
}
