//! Aggregate throughput of 1 and 2 threads.
//!
//! Each sample spawns its threads outside the timed region; they meet at a
//! barrier, each does the sample's `iters` checks, and the time from the
//! barrier to the last thread's finish is reported. Criterion's throughput
//! is set to the number of threads, so its time per iteration divided by
//! that number is the aggregate time per check.
//!
//! - `threads_direct_hot`: one shared limiter (tollgate GCRA on the
//!   monotonic clock, governor on quanta, the floor word);
//! - `threads_keyed_hot`: a keyed limiter of 1,000 keys (tollgate on the
//!   monotonic and, with feature `quanta`, the quanta clock; governor; the
//!   dashmap floor), every thread on key 0;
//! - `threads_keyed_disjoint`: the same limiters, thread `t` of `T` on its
//!   own keys `t, t + T, t + 2T, …`, chosen uniformly.
//!
//! All on the allow path: every check must be admitted.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use tollgate::{Gcra, Limiter};

use crate::keyed::{TollgateClock, governor_keyed, populate, tollgate_keyed_on};
use crate::support::{self, Expect, FloorMap, FloorWord, InstantClock, Uniform, key_of};

/// The thread counts measured.
const THREADS: [usize; 2] = [1, 2];
/// Keys of the keyed limiters.
const KEYS: u64 = 1_000;

/// Every scenario.
pub fn benches(c: &mut Criterion) {
    direct_hot(c);
    keyed(c, false);
    keyed(c, true);
}

fn direct_hot(c: &mut Criterion) {
    let mut group = c.benchmark_group("threads_direct_hot");
    let tollgate = Limiter::with_clock(
        Gcra::new(support::allow_quota()).expect("gcra"),
        tollgate::MonotonicClock::new(),
    );
    // governor's clock class, so that one row compares like with like.
    #[cfg(feature = "quanta")]
    let tollgate_quanta = Limiter::with_clock(
        Gcra::new(support::allow_quota()).expect("gcra"),
        tollgate::QuantaClock::new(),
    );
    let governor = governor::RateLimiter::direct(support::governor_allow());
    let floor = FloorWord::open(InstantClock::new());
    for threads in THREADS {
        group.throughput(Throughput::Elements(threads as u64));
        bench(&mut group, "tollgate_gcra_monotonic", threads, &|_| {
            || tollgate.check().is_allowed()
        });
        #[cfg(feature = "quanta")]
        bench(&mut group, "tollgate_gcra_quanta", threads, &|_| {
            || tollgate_quanta.check().is_allowed()
        });
        bench(&mut group, "governor_quanta", threads, &|_| {
            || governor.check().is_ok()
        });
        bench(&mut group, "floor_instant", threads, &|_| || floor.check());
    }
    group.finish();
}

fn keyed(c: &mut Criterion, disjoint: bool) {
    let name = if disjoint {
        "threads_keyed_disjoint"
    } else {
        "threads_keyed_hot"
    };
    let mut group = c.benchmark_group(name);
    let tollgates: Vec<_> = TollgateClock::UNCACHED
        .iter()
        .map(|&clock| {
            let limiter = tollgate_keyed_on::<u64>(support::allow_quota(), clock);
            populate(clock.name(), KEYS, |i| {
                limiter.check(&key_of(i)).is_allowed()
            });
            (clock.name(), limiter)
        })
        .collect();
    let governor = governor_keyed::<u64>(support::governor_allow());
    populate("governor", KEYS, |i| governor.check_key(&key_of(i)).is_ok());
    let floor = FloorMap::new();
    (0..KEYS).for_each(|i| floor.add(key_of(i), true));
    let (governor, floor) = (&governor, &floor);
    for threads in THREADS {
        group.throughput(Throughput::Elements(threads as u64));
        // The key index of thread `t`'s next check.
        let picker = |t: usize| {
            let mut uniform = Uniform::new(KEYS / threads as u64, 0x7EAD ^ t as u64);
            move || {
                if disjoint {
                    t as u64 + threads as u64 * uniform.next_index()
                } else {
                    0
                }
            }
        };
        for (name, tollgate) in &tollgates {
            bench(&mut group, name, threads, &|t| {
                let mut pick = picker(t);
                move || tollgate.check(&key_of(pick())).is_allowed()
            });
        }
        bench(&mut group, "governor", threads, &|t| {
            let mut pick = picker(t);
            move || governor.check_key(&key_of(pick())).is_ok()
        });
        bench(&mut group, "floor_dashmap", threads, &|t| {
            let mut pick = picker(t);
            move || floor.check(&key_of(pick()))
        });
    }
    group.finish();
}

fn bench<F, G>(group: &mut BenchmarkGroup<'_, WallTime>, name: &str, threads: usize, make: &F)
where
    F: Fn(usize) -> G + Sync,
    G: FnMut() -> bool,
{
    let label = format!("{name} on {threads} threads");
    group.bench_function(BenchmarkId::new(name, threads), |b| {
        b.iter_custom(|iters| parallel(&label, threads, iters, make));
    });
}

/// Runs `iters` checks on each of `threads` threads at once; returns the
/// time from their common start to the last one's finish.
fn parallel<F, G>(label: &str, threads: usize, iters: u64, make: &F) -> Duration
where
    F: Fn(usize) -> G + Sync,
    G: FnMut() -> bool,
{
    let start_line = Barrier::new(threads + 1);
    let finish_line = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (start_line, finish_line) = (&start_line, &finish_line);
                scope.spawn(move || {
                    let mut check = make(t);
                    start_line.wait();
                    let mut admitted = 0u64;
                    for _ in 0..iters {
                        admitted += u64::from(black_box(check()));
                    }
                    finish_line.wait();
                    admitted
                })
            })
            .collect();
        start_line.wait();
        let start = Instant::now();
        finish_line.wait();
        let elapsed = start.elapsed();
        let admitted = workers
            .into_iter()
            .map(|worker| worker.join().expect("worker thread"))
            .sum();
        Expect::All.check(label, admitted, iters * threads as u64);
        elapsed
    })
}
