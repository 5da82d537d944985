//! Concurrency limits: acquire + release against their peers in the same
//! run.
//!
//! # Contenders, and which peer is like for like (decision)
//!
//! tollgate has two permits, as tokio has two semaphore permits:
//!
//! - `tollgate_owned`: [`ConcurrencyLimiter::try_acquire`], a
//!   [`Permit`](tollgate::concurrency::Permit) that owns a reference (an
//!   `Arc`) to its limit, so that it can outlive the caller's borrow (what
//!   a tower layer holding a slot through a response body needs). Its
//!   like-for-like peer is `tokio_owned`: `Arc::clone` and
//!   `Semaphore::try_acquire_owned` (an `OwnedSemaphorePermit`).
//! - `tollgate_borrowed`: [`ConcurrencyLimiter::try_acquire_borrowed`], a
//!   [`BorrowedPermit`](tollgate::concurrency::BorrowedPermit) that borrows
//!   the limiter. Its like-for-like peer is `tokio_borrowed`:
//!   `Semaphore::try_acquire` (a `SemaphorePermit<'_>`).
//!
//! Both pairs are reported; the target, a permit within 1.2× of the
//! semaphore's cost, is read on each pair, never across them.
//!
//! Keyed: [`KeyedConcurrencyLimiter::try_acquire`] over 1,000 keys against
//! a `DashMap<u64, Arc<Semaphore>>` (foldhash, the keys inserted
//! beforehand): a lookup, an `Arc` clone and `try_acquire_owned`, as a
//! keyed semaphore must hand out a permit that outlives the map's guard.
//! (The dashmap never drops a key; tollgate's map drops idle ones.)
//!
//! `1t`: one thread; `2t`: two threads on the same limiter (the same key
//! for keyed: the contended case), each doing the measured number of
//! acquire + release pairs; the figure is wall-clock ns per pair per
//! thread. Every acquisition must succeed (the limit is above what is held
//! at once); the bench panics otherwise.
//!
//! # Two harnesses in one binary
//!
//! First **interleaved rounds** (the figures `BENCHMARKS.md` reports): every
//! contender of a scenario runs [`PAIRS`] pairs per round, in an order
//! rotated every round, [`ROUNDS`] rounds; a contender's figure is its
//! fastest round (the least disturbed by the machine's other work), the
//! median beside it. So every ratio comes from rounds taken side by side,
//! which a busy shared machine needs. Then the same contenders under
//! **criterion** (one after the other, its statistics). A filter word
//! (`direct`, `keyed`) picks scenarios in both.
//!
//! Run: `cargo bench -p tollgate --bench concurrency` (about two minutes;
//! `-- direct` for the direct rows only). Under `cargo test` it runs a
//! smoke pass of every contender.

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use dashmap::DashMap;
use tokio::sync::Semaphore;
use tollgate::concurrency::{ConcurrencyLimiter, KeyedConcurrencyLimiter, Shares};

const KEYS: u64 = 1_000;
const LIMIT: u64 = 1_000;
/// Acquire + release pairs per contender per thread per round.
const PAIRS: u64 = 1_000_000;
/// Interleaved rounds per scenario.
const ROUNDS: usize = 15;

type Hasher = foldhash::fast::RandomState;

/// A contender: its name and one acquire + release (given a counter).
type Contender<'a> = (&'static str, Box<dyn Fn(u64) + Sync + 'a>);

/// Runs `op` `iters` times on each of `threads` threads started together;
/// returns the wall time.
fn on_threads(threads: usize, iters: u64, op: &(dyn Fn(u64) + Sync)) -> Duration {
    let barrier = Barrier::new(threads + 1);
    thread::scope(|scope| {
        for t in 0..threads {
            let barrier = &barrier;
            scope.spawn(move || {
                barrier.wait();
                for i in 0..iters {
                    op(i.wrapping_mul(t as u64 + 1));
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    })
}

/// The contenders, built once and shared by both harnesses.
struct Subjects {
    direct: ConcurrencyLimiter,
    semaphore: Arc<Semaphore>,
    keyed: KeyedConcurrencyLimiter<u64>,
    dashmap: DashMap<u64, Arc<Semaphore>, Hasher>,
}

impl Subjects {
    fn new() -> Subjects {
        let keyed = KeyedConcurrencyLimiter::<u64>::builder(LIMIT)
            .shares(Shares::none())
            .build()
            .expect("a valid limit");
        let dashmap: DashMap<u64, Arc<Semaphore>, Hasher> = DashMap::with_hasher(Hasher::default());
        for key in 0..KEYS {
            dashmap.insert(key, Arc::new(Semaphore::new(LIMIT as usize)));
            drop(keyed.try_acquire(&key, 1).expect("below the limit"));
        }
        Subjects {
            direct: ConcurrencyLimiter::builder(LIMIT)
                .shares(Shares::none())
                .build()
                .expect("a valid limit"),
            semaphore: Arc::new(Semaphore::new(LIMIT as usize)),
            keyed,
            dashmap,
        }
    }

    /// `(name, one acquire + release)` for the direct scenario.
    fn direct(&self) -> Vec<Contender<'_>> {
        vec![
            (
                "tollgate_owned",
                Box::new(|_| {
                    drop(black_box(
                        self.direct.try_acquire(1).expect("below the limit"),
                    ))
                }),
            ),
            (
                "tokio_owned",
                Box::new(|_| {
                    let permit = Arc::clone(&self.semaphore).try_acquire_owned();
                    drop(black_box(permit.expect("below the limit")));
                }),
            ),
            (
                "tollgate_borrowed",
                Box::new(|_| {
                    let permit = self.direct.try_acquire_borrowed(1);
                    drop(black_box(permit.expect("below the limit")));
                }),
            ),
            (
                "tokio_borrowed",
                Box::new(|_| {
                    let permit = self.semaphore.try_acquire();
                    drop(black_box(permit.expect("below the limit")));
                }),
            ),
        ]
    }

    /// `(name, one acquire + release)` for the keyed scenario: keys in turn
    /// on one thread, all threads on key 0 with two.
    fn keyed(&self, threads: usize) -> Vec<Contender<'_>> {
        let key = move |i: u64| if threads == 1 { i % KEYS } else { 0 };
        vec![
            (
                "tollgate_keyed",
                Box::new(move |i| {
                    let permit = self.keyed.try_acquire(&key(i), 1);
                    drop(black_box(permit.expect("below the limit")));
                }),
            ),
            (
                "dashmap_semaphore",
                Box::new(move |i| {
                    let semaphore = self.dashmap.get(&key(i)).map(|s| s.value().clone());
                    let semaphore = semaphore.expect("inserted beforehand");
                    drop(black_box(
                        semaphore.try_acquire_owned().expect("below the limit"),
                    ));
                }),
            ),
        ]
    }
}

/// Interleaved rounds of `contenders` on `threads` threads; prints one line
/// per contender: fastest round and median, ns per pair per thread.
fn interleaved(
    scenario: &str,
    threads: usize,
    pairs: u64,
    rounds: usize,
    contenders: &[Contender<'_>],
) {
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); contenders.len()];
    for round in 0..rounds {
        for k in 0..contenders.len() {
            let at = (k + round) % contenders.len();
            let elapsed = on_threads(threads, pairs, &*contenders[at].1);
            times[at].push(elapsed.as_nanos() as f64 / pairs as f64);
        }
    }
    for ((name, _), rounds) in contenders.iter().zip(&mut times) {
        rounds.sort_by(f64::total_cmp);
        println!(
            "interleaved {scenario}/{name}/{threads}t: fastest {:.1} ns, median {:.1} ns per pair ({} rounds of {pairs})",
            rounds[0],
            rounds[rounds.len() / 2],
            rounds.len()
        );
    }
}

fn criterion_group_of(
    c: &mut Criterion,
    group: &str,
    threads: usize,
    contenders: &[Contender<'_>],
) {
    let mut group = c.benchmark_group(group);
    for (name, op) in contenders {
        group.bench_function(format!("{name}/{threads}t"), |b| {
            b.iter_custom(|iters| on_threads(threads, iters, &**op))
        });
    }
    group.finish();
}

fn wanted(name: &str) -> bool {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
}

fn measuring() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn rounds() {
    let (pairs, rounds) = if measuring() {
        (PAIRS, ROUNDS)
    } else {
        (1_000, 2)
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average before: {}", load.trim());
    let subjects = Subjects::new();
    for threads in [1, 2] {
        if wanted("direct") {
            interleaved("direct", threads, pairs, rounds, &subjects.direct());
        }
        if wanted("keyed") {
            interleaved("keyed", threads, pairs, rounds, &subjects.keyed(threads));
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average after: {}", load.trim());
}

fn criterion(c: &mut Criterion) {
    let subjects = Subjects::new();
    for threads in [1, 2] {
        criterion_group_of(c, "direct", threads, &subjects.direct());
        criterion_group_of(c, "keyed", threads, &subjects.keyed(threads));
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = criterion
}

fn main() {
    rounds();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
