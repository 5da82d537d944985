//! The benchmark suite of the core crate: tollgate and its peers (governor,
//! ratelimit) and two floor kernels, in one criterion run, on the same
//! scenarios and quotas.
//!
//! - `direct_*`: one limiter, allow path (a quota no run can exhaust) and
//!   deny path (a limiter exhausted before the run), every algorithm on the
//!   monotonic and the cached clock ([`direct`]).
//! - `keyed_*`: one state per key at 1 to 10^6 keys, u64 and String keys,
//!   uniform and Zipf access, the insert path and the deny path ([`keyed`]).
//! - `threads_*`: aggregate throughput of 1 and 2 threads on one hot
//!   limiter or key, and on disjoint keys ([`threads`]).
//!
//! Every run counts its admissions and panics unless they are what the
//! quota allows (all on the allow path, none on the deny path), so a fast
//! but wrong limiter fails the suite instead of winning it.
//!
//! Run it with `scripts/bench`, which also writes `BENCHMARKS.md`; bytes per
//! key are measured apart, by the `memory` bench. Set
//! `TOLLGATE_BENCH_10M=1` to add the 10^7-key keyed scenario.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};

mod direct;
mod keyed;
mod support;
mod threads;

/// Short groups: the whole suite is meant to finish in a few minutes on a
/// two-core machine. Command-line flags (a filter, `--quick`) still apply.
fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_millis(1500))
        .sample_size(40)
        .nresamples(20_000)
        .without_plots()
        .configure_from_args()
}

criterion_group! {
    name = limiters;
    config = config();
    targets = direct::benches, keyed::benches, threads::benches
}
criterion_main!(limiters);
