//! Measures how far the default clock ([`QuantaClock`], the TSC) drifts from
//! [`MonotonicClock`] (`Instant`): both are read back to back every few
//! seconds for a given time, and the drift rate is fitted and extrapolated
//! to an hour.
//!
//! Run with `cargo run --release -p tollgate --example clock_drift -- 300`
//! (the argument is the run time in seconds; 60 by default).
//!
//! Each sample reads the monotonic clock, the TSC clock, and the monotonic
//! clock again, and keeps the pair whose bracketing reads were closest (of
//! 1,000 tries), so that a preemption between the reads does not count as
//! drift. The offset (TSC − monotonic) at each sample, minus the offset at
//! the first, is the drift so far; the least-squares slope of drift over
//! time, times 3,600 s, is the hour's drift.

use std::time::Duration;

use tollgate::{Clock, MonotonicClock, QuantaClock};

/// One offset reading: (monotonic time in ns, TSC − monotonic in ns, the
/// bracket's width in ns).
fn offset(tsc: &QuantaClock, mono: &MonotonicClock) -> (f64, f64, u64) {
    let mut best: Option<(f64, f64, u64)> = None;
    for _ in 0..1000 {
        let before = mono.now().as_u64();
        let t = tsc.now().as_u64();
        let after = mono.now().as_u64();
        let width = after - before;
        let middle = before as f64 + width as f64 / 2.0;
        if best.is_none_or(|(_, _, w)| width < w) {
            best = Some((middle, t as f64 - middle, width));
        }
    }
    best.expect("at least one try")
}

fn main() {
    let seconds: u64 = std::env::args()
        .nth(1)
        .map(|arg| arg.parse().expect("the run time in whole seconds"))
        .unwrap_or(60);
    let mono = MonotonicClock::new();
    let tsc = QuantaClock::new();
    let (start, first, _) = offset(&tsc, &mono);
    let mut samples = vec![(0.0, 0.0)];
    println!("elapsed_s drift_ns bracket_ns");
    let step = Duration::from_secs(5);
    let mut elapsed = Duration::ZERO;
    while elapsed < Duration::from_secs(seconds) {
        std::thread::sleep(step);
        let (at, now, width) = offset(&tsc, &mono);
        let x = (at - start) / 1e9;
        let drift = now - first;
        samples.push((x, drift));
        println!("{x:.1} {drift:.0} {width}");
        elapsed = Duration::from_secs_f64(x);
    }
    let n = samples.len() as f64;
    let mean_x = samples.iter().map(|s| s.0).sum::<f64>() / n;
    let mean_y = samples.iter().map(|s| s.1).sum::<f64>() / n;
    let slope = samples
        .iter()
        .map(|s| (s.0 - mean_x) * (s.1 - mean_y))
        .sum::<f64>()
        / samples.iter().map(|s| (s.0 - mean_x).powi(2)).sum::<f64>();
    println!(
        "over {:.0} s: drift rate {:.3} ns/s ({:.3} ppm), extrapolated to one hour: {:.1} µs",
        samples.last().map_or(0.0, |s| s.0),
        slope,
        slope / 1e3,
        slope * 3600.0 / 1e3
    );
}
