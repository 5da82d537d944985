//! The adaptive limit in a deterministic simulation: a closed loop of
//! clients against a queueing service whose latency grows once more than
//! `knee` requests are in it, on a manual clock, through a real
//! `ConcurrencyLimiter` with the Vegas controller.
//!
//! # The service model
//!
//! `knee` servers: a request that starts with `c` requests in service (its
//! own included) takes `base · max(1, c / knee)`: flat below the knee, then
//! growing linearly with the queue, as a processor-sharing server. Each of
//! `CLIENTS` clients sends its next request as soon as the last one
//! completes, and retries after `base / 4` when refused. Time only moves
//! from event to event.
//!
//! # What is shown
//!
//! - from the initial limit (20) the limit climbs to the knee and settles
//!   just past it: the controller aims at `alpha..beta` (3..6 at these
//!   limits) requests queued in the service, so within 1.2× the knee (63
//!   for 60; Netflix's update per sample settled higher, see
//!   `concurrency::adaptive`);
//! - when the service slows (its knee halves), the limit backs off to the
//!   new knee (34.5 for 30), within 1.2× it too.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

use tollgate::concurrency::{ConcurrencyLimiter, Controller, Knee, Permit, Priority, Vegas};
use tollgate::{Clock, ManualClock, Nanos};

const CLIENTS: u64 = 1_000;
const BASE_NS: u64 = 10_000_000;

struct Sim {
    clock: ManualClock,
    limiter: ConcurrencyLimiter,
    knee: u64,
    /// (time, sequence, client): a completion if the sequence has a permit.
    events: BinaryHeap<Reverse<(u64, u64, u64)>>,
    permits: HashMap<u64, Permit>,
    seq: u64,
    in_service: u64,
}

impl Sim {
    fn new(controller: impl Into<Controller>) -> Sim {
        let clock = ManualClock::new();
        let limiter = ConcurrencyLimiter::builder(1)
            .adaptive(controller)
            .clock(clock.clone())
            .build()
            .unwrap();
        let mut sim = Sim {
            clock,
            limiter,
            knee: 0,
            events: BinaryHeap::new(),
            permits: HashMap::new(),
            seq: 0,
            in_service: 0,
        };
        for client in 0..CLIENTS {
            sim.push(client, client, None);
        }
        sim
    }

    fn push(&mut self, at: u64, client: u64, permit: Option<Permit>) {
        self.seq += 1;
        if let Some(permit) = permit {
            self.permits.insert(self.seq, permit);
        }
        self.events.push(Reverse((at, self.seq, client)));
    }

    /// Runs until `completions` requests completed; returns the limit after each.
    fn run(&mut self, completions: usize) -> Vec<u32> {
        let mut limits = Vec::with_capacity(completions);
        while limits.len() < completions {
            let Reverse((at, seq, client)) = self.events.pop().expect("clients never stop");
            self.clock.set(Nanos::new(at));
            if let Some(permit) = self.permits.remove(&seq) {
                drop(permit);
                self.in_service -= 1;
                limits.push(self.limiter.limit());
                self.push(at, client, None);
                continue;
            }
            match self.limiter.try_acquire_as(1, Priority::Critical) {
                Ok(permit) => {
                    self.in_service += 1;
                    let latency = BASE_NS * self.in_service.max(self.knee) / self.knee;
                    self.push(at + latency, client, Some(permit));
                }
                Err(_) => self.push(at + BASE_NS / 4, client, None),
            }
        }
        limits
    }
}

fn summary(limits: &[u32]) -> (u32, u32, f64) {
    let min = *limits.iter().min().unwrap();
    let max = *limits.iter().max().unwrap();
    let mean = limits.iter().map(|&l| l as f64).sum::<f64>() / limits.len() as f64;
    (min, max, mean)
}

#[test]
fn vegas_finds_the_knee_and_backs_off_when_the_service_slows() {
    let mut sim = Sim::new(Vegas::new());
    sim.knee = 60;
    let climb = sim.run(20_000);
    let (_, _, settled) = summary(&climb[10_000..]);
    let (low, high, _) = summary(&climb[10_000..]);
    println!("knee 60: limit {low}..{high}, mean {settled:.1} over the last 10,000 samples");

    sim.knee = 30;
    let slow = sim.run(20_000);
    let (low2, high2, settled2) = summary(&slow[10_000..]);
    println!("knee 30: limit {low2}..{high2}, mean {settled2:.1} over the last 10,000 samples");
    println!(
        "elapsed (simulated): {:?}",
        Duration::from_nanos(sim.clock.now().as_u64())
    );

    assert!(
        (60.0..=72.0).contains(&settled),
        "settles just past the knee of 60, not {settled:.1}"
    );
    assert!(
        (30.0..=36.0).contains(&settled2),
        "backs off to the new knee of 30, not {settled2:.1}"
    );
    // No swings past the knee: Netflix's per-sample update reached 127
    // and 65 (the probe's dips below are expected).
    assert!(high <= 75, "at most 1.25× the knee of 60, not {high}");
    assert!(high2 <= 37, "at most 1.25× the knee of 30, not {high2}");
}

#[test]
fn knee_finds_the_knee_through_the_limiter_and_follows_it_down_and_up() {
    // The default controller, through the builder and a manual clock: the
    // limit is set from the throughput (Little's law), 10 % (at least 2)
    // past the requests in service.
    let mut sim = Sim::new(Knee::new());
    for (knee, low, high) in [(60, 60.0, 72.0), (30, 30.0, 36.0), (60, 60.0, 72.0)] {
        sim.knee = knee;
        let limits = sim.run(60_000);
        let (min, max, mean) = summary(&limits[40_000..]);
        println!("knee {knee}: limit {min}..{max}, mean {mean:.1}");
        assert!(
            (low..=high).contains(&mean),
            "knee {knee}: mean limit {mean:.1} (min {min}, max {max})"
        );
    }
}

/// One round trip through `limiter`: as many critical permits as fit (up
/// to `wanted`) taken at the clock's instant, then all answered `rtt_ms`
/// later, the last taken first (so the first sample reports the most in
/// flight). Returns how many were taken.
fn round_trip(limiter: &ConcurrencyLimiter, clock: &ManualClock, wanted: u32, rtt_ms: u64) -> u32 {
    let mut permits = Vec::new();
    while permits.len() < wanted as usize {
        match limiter.try_acquire_as(1, Priority::Critical) {
            Ok(permit) => permits.push(permit),
            Err(_) => break,
        }
    }
    let taken = permits.len() as u32;
    clock.advance(Duration::from_millis(rtt_ms));
    while permits.pop().is_some() {}
    taken
}

#[test]
fn the_probe_drops_the_limit_to_time_unloaded_requests_then_restores_it() {
    // Netflix's probe took the current (under load, a loaded) sample for the
    // unloaded latency and never lowered the limit; Envoy's, followed here,
    // lets only `probe_limit` requests in, times them, and restores.
    let clock = ManualClock::new();
    let limiter = ConcurrencyLimiter::builder(1)
        .adaptive(Vegas::new().probe_multiplier(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert_eq!(limiter.limit(), 20);
    // Unloaded round trips of 10 ms: slow start, +6 per round.
    round_trip(&limiter, &clock, 100, 10);
    assert_eq!(limiter.limit(), 26);
    round_trip(&limiter, &clock, 100, 10);
    assert_eq!(limiter.limit(), 32);
    // 20 + 26 + 1 samples ≥ 1 · 32: the third round starts a probe.
    round_trip(&limiter, &clock, 100, 10);
    assert_eq!(limiter.limit(), 3, "the probe lets 3 in");
    // The service became uniformly slower: 15 ms unloaded. The probe times
    // 3 requests admitted under its limit, then restores the limit.
    assert_eq!(round_trip(&limiter, &clock, 100, 15), 3);
    assert_eq!(limiter.limit(), 32, "restored after the probe");
    // 15 ms is now the unloaded latency: 32 in flight at 15 ms read as no
    // queue (the limit climbs), not as a queue of 11 (which would lower it).
    round_trip(&limiter, &clock, 100, 15);
    assert_eq!(limiter.limit(), 38);
}
