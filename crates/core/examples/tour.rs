//! Drives every algorithm with the same traffic on a manual clock and prints
//! what each admits per 100 ms.
//!
//! Run with `cargo run -p tollgate --example tour`.
//!
//! The traffic: a burst of 15 requests at 0.95 s, another of 15 at 1.00 s,
//! then one request every 50 ms (twice the quota). Every limiter runs the
//! same quota, 10 per second (GCRA with a burst of 10; the wheel with 4
//! slots of 250 ms).

use std::time::Duration;

use tollgate::{
    Algorithm, FixedWindow, Gcra, Limiter, ManualClock, Quota, SlidingLog, SlidingWindow,
};

const STEP: Duration = Duration::from_millis(10);
const BUCKET_STEPS: u64 = 10;
const RUN_STEPS: u64 = 300;
/// The first bucket printed: nothing happens before it.
const FIRST_BUCKET: u64 = 9;

/// Requests arriving in the 10 ms step `step`.
fn offered(step: u64) -> u64 {
    let burst = if step == 95 || step == 100 { 15 } else { 0 };
    let steady = u64::from(step > 100 && step % 5 == 0);
    burst + steady
}

/// Admitted requests per 100 ms bucket, for one algorithm.
fn run<A: Algorithm>(algorithm: A) -> Vec<u64> {
    let clock = ManualClock::new();
    let limiter = Limiter::with_clock(algorithm, clock.clone());
    let mut buckets = vec![0; (RUN_STEPS / BUCKET_STEPS) as usize];
    for step in 0..RUN_STEPS {
        for _ in 0..offered(step) {
            if limiter.check().is_allowed() {
                buckets[(step / BUCKET_STEPS) as usize] += 1;
            }
        }
        clock.advance(STEP);
    }
    buckets
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let quota = Quota::per_second(10)?;
    let columns = [
        ("gcra", run(Gcra::new(quota)?)),
        ("fixed", run(FixedWindow::new(quota)?)),
        ("log", run(SlidingLog::new(quota)?)),
        ("wheel/4", run(SlidingWindow::new(quota, 4)?)),
    ];

    println!("quota: {quota}; admitted per 100 ms (offered = requests sent)\n");
    print!("{:>8} {:>8}", "time", "offered");
    for (name, _) in &columns {
        print!(" {name:>8}");
    }
    println!();
    for bucket in FIRST_BUCKET..(RUN_STEPS / BUCKET_STEPS) {
        let sent: u64 = (bucket * BUCKET_STEPS..(bucket + 1) * BUCKET_STEPS)
            .map(offered)
            .sum();
        print!("{:>7.1}s {sent:>8}", bucket as f64 / 10.0);
        for (_, admitted) in &columns {
            print!(" {:>8}", admitted[bucket as usize]);
        }
        println!();
    }
    print!(
        "\n{:>8} {:>8}",
        "total",
        (0..RUN_STEPS).map(offered).sum::<u64>()
    );
    for (_, admitted) in &columns {
        print!(" {:>8}", admitted.iter().sum::<u64>());
    }
    println!();
    println!();
    println!("Read it: the fixed window admits 10 at 0.95 s and 10 more at 1.00 s, 20 within");
    println!("50 ms, because a window boundary lies between them, then nothing until 2 s. The");
    println!(
        "sliding log never admits more than 10 in any second, wherever it starts. GCRA spends"
    );
    println!("its burst of 10, then admits one every 100 ms. The wheel is exact on its 250 ms");
    println!("slots: at most 10 in any run of four slots.");
    Ok(())
}
