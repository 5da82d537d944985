//! Keyed limiting: the proofs that [`KeyedLimiter`] keeps one exact state per
//! key, bounds its memory without losing a decision, and changes quotas as
//! documented.
//!
//! - **Frozen-clock hammer on 100,000 keys**: 8 threads released together
//!   check every key several times, colliding on keys (all in lockstep, then
//!   in strided orders); each key admits exactly its capacity, and the
//!   `remaining` values of its admissions tile `0..capacity`.
//! - **The victim**: with the map full, a throttled key stays throttled (the
//!   same denial, to the nanosecond) while a million fresh keys flood in;
//!   `len()` never exceeds the cap, and the flood shares one overflow state,
//!   counted in `stats().overflowed`. Once the flood keys are idle they are
//!   swept and the victim, still in debt, is not.
//! - **Lossless eviction**: a limiter swept after every few steps and one that
//!   is never swept answer identical decisions over a long random schedule; a
//!   sweep removes exactly the keys whose state is that of a fresh key.
//! - **Borrowed lookups**: a `KeyedLimiter<String>` is checked with `&str`;
//!   looking creates no state.
//! - **Per-key quotas**: exact overrides win over the override function, which
//!   wins over the default; live changes carry a key's state by the documented
//!   [`Carry`] rule, on the GCRA and the fixed window, and leave alone every
//!   key whose quota did not change (regression); a removed override's rule
//!   applies once, to the state it found (regression).
//! - **`AllOf` per key**: a denial by either limit takes from none, and the
//!   decision reports the limit that bound.
//! - **Sweeping under load**: a thread sweeps without pause while workers
//!   check a few keys: on a frozen clock each key admits exactly its
//!   capacity; with the clock jumping past idleness between rounds, exactly
//!   its capacity per round; with the clock moving in small steps, every
//!   key's admissions obey the algorithm's guarantee (`support::window`).
//! - **A stale reading after an eviction** (regression): a request that read
//!   the clock before a sweep evicted its key, and decides after, must not be
//!   admitted at its stale reading on a fresh state.
//!
//! Time only comes from a [`ManualClock`] (wrapped, where a test must see or
//! pause the readings); sweeps are explicit (`sweep_every(None)`) except where
//! a thread of the test runs them.

use crate::support;
use support::algorithms::{fixed, gcra, log, wheel};

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use support::recording::{RecordingClock, take_reading};
use support::window::Guaranteed;
use tollgate::{
    Algorithm, AllOf, Carry, Clock, ClockSource, Decision, FixedWindow, Gcra, KeyedBuilder,
    KeyedLimiter, Limiter, ManualClock, Nanos, SlidingLog, SlidingWindow,
};

const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

// ---------------------------------------------------------------------------
// Static assertions
// ---------------------------------------------------------------------------

const fn send_sync_clone<T: Send + Sync + Clone>() {}

const _: () = {
    send_sync_clone::<tollgate::DefaultKeyedLimiter<String>>();
    send_sync_clone::<KeyedLimiter<u64, FixedWindow>>();
    send_sync_clone::<KeyedLimiter<u64, SlidingLog>>();
    send_sync_clone::<KeyedLimiter<u64, SlidingWindow>>();
    send_sync_clone::<KeyedLimiter<String, AllOf<FixedWindow>>>();
};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A builder on `clock` with no sweeper thread: sweeps are explicit.
fn keyed<K, A>(algorithm: A, clock: &ManualClock) -> KeyedBuilder<K, A>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
    A: Algorithm,
{
    KeyedLimiter::builder(algorithm)
        .clock(clock.clone())
        .sweep_every(None)
}

/// splitmix64: a small deterministic generator for schedules.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), close enough for schedules.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ---------------------------------------------------------------------------
// Frozen clock, 100,000 keys: exactly the capacity per key
// ---------------------------------------------------------------------------

const HAMMER_KEYS: u64 = 100_000;
const HAMMER_THREADS: usize = 8;
/// Times each thread checks each key.
const HAMMER_PASSES: u64 = 8;
const HAMMER_CAPACITY: u64 = 3;
/// Strides coprime with 100,000 = 2^5 · 5^5: each is a permutation of the keys.
const STRIDES: [u64; 8] = [1, 3, 7, 11, 13, 17, 99_991, 31_337];

/// The key thread `thread` checks `i`-th in pass `pass`: in the first pass every
/// thread walks the keys in the same order (all of them on one key at once);
/// later, each thread its own permutation, so that threads meet anywhere.
fn hammer_key(thread: usize, pass: u64, i: u64) -> u64 {
    if pass == 0 {
        return i;
    }
    let stride = STRIDES[(thread + pass as usize) % STRIDES.len()];
    let offset = (thread as u64 * 12_347 + pass * 7_919) % HAMMER_KEYS;
    (i * stride + offset) % HAMMER_KEYS
}

fn frozen_keyed_hammer<A: Algorithm>(name: &str, algorithm: A) {
    let started = Instant::now();
    let start = Nanos::new(3_600 * SEC + 123);
    let clock = ManualClock::starting_at(start);
    let limiter: KeyedLimiter<u64, A> = keyed(algorithm, &clock).build();
    let admitted: Vec<AtomicU64> = (0..HAMMER_KEYS).map(|_| AtomicU64::new(0)).collect();
    // Bit r set: an admission of this key left r remaining.
    let tiles: Vec<AtomicU64> = (0..HAMMER_KEYS).map(|_| AtomicU64::new(0)).collect();
    let barrier = Barrier::new(HAMMER_THREADS);
    thread::scope(|scope| {
        for id in 0..HAMMER_THREADS {
            let (limiter, barrier) = (&limiter, &barrier);
            let (admitted, tiles) = (&admitted, &tiles);
            scope.spawn(move || {
                barrier.wait();
                for pass in 0..HAMMER_PASSES {
                    for i in 0..HAMMER_KEYS {
                        let key = hammer_key(id, pass, i);
                        let decision = limiter.check(&key);
                        assert_eq!(decision.limit(), HAMMER_CAPACITY, "{name}: key {key}");
                        if decision.is_allowed() {
                            // Relaxed: counters read after the threads are joined.
                            admitted[key as usize].fetch_add(1, Ordering::Relaxed);
                            let bit = 1 << decision.remaining();
                            let seen = tiles[key as usize].fetch_or(bit, Ordering::Relaxed);
                            assert_eq!(
                                seen & bit,
                                0,
                                "{name}: key {key}: two admissions left {} remaining",
                                decision.remaining()
                            );
                        } else {
                            assert_eq!(decision.remaining(), 0, "{name}: key {key}: {decision}");
                            assert!(
                                decision.retry_after() > Duration::ZERO,
                                "{name}: {decision}"
                            );
                        }
                    }
                }
            });
        }
    });
    for key in 0..HAMMER_KEYS as usize {
        assert_eq!(
            admitted[key].load(Ordering::Relaxed),
            HAMMER_CAPACITY,
            "{name}: key {key} admitted a wrong number of permits in {} attempts",
            HAMMER_THREADS as u64 * HAMMER_PASSES
        );
        assert_eq!(
            tiles[key].load(Ordering::Relaxed),
            (1 << HAMMER_CAPACITY) - 1,
            "{name}: key {key}: the admissions' remaining values do not tile 0..capacity"
        );
    }
    assert_eq!(limiter.len(), HAMMER_KEYS as usize, "{name}");
    assert_eq!(clock.now(), start, "{name}: the clock moved");
    // Every key is in debt on the frozen clock: a sweep removes none.
    assert_eq!(limiter.sweep(), 0, "{name}");
    assert!(limiter.peek(&0).is_denied() && limiter.peek(&(HAMMER_KEYS - 1)).is_denied());
    println!(
        "{name}: {} threads × {HAMMER_PASSES} passes × {HAMMER_KEYS} keys in {:?}",
        HAMMER_THREADS,
        started.elapsed()
    );
}

#[test]
fn frozen_clock_hammer_on_100k_keys_admits_exactly_the_capacity_per_key() {
    frozen_keyed_hammer("gcra burst 3", gcra(3, SEC, HAMMER_CAPACITY));
    frozen_keyed_hammer("fixed window 3/s", fixed(HAMMER_CAPACITY, SEC));
}

// ---------------------------------------------------------------------------
// The victim: a full map never frees a throttled key
// ---------------------------------------------------------------------------

const VICTIM_CAP: usize = 100_000;
const FLOOD: u64 = 1_000_000;
const FLOOD_BATCH: u64 = 10_000;
const VICTIM: u64 = u64::MAX;

/// Floods `keys` fresh keys at a frozen instant, checking after every batch
/// that the cap holds and the victim still gets `throttled`; sweeps every
/// `sweep_every` keys if asked (nothing is idle on a frozen clock). Returns how
/// many flood requests were admitted.
fn flood(
    limiter: &KeyedLimiter<u64>,
    keys: std::ops::Range<u64>,
    throttled: Decision,
    sweep_every: Option<u64>,
) -> u64 {
    let mut admitted = 0;
    for key in keys {
        admitted += u64::from(limiter.check(&key).is_allowed());
        let done = key + 1;
        if done % FLOOD_BATCH == 0 {
            assert!(
                limiter.len() <= VICTIM_CAP,
                "{} live keys above the cap of {VICTIM_CAP}",
                limiter.len()
            );
            assert_eq!(limiter.check(&VICTIM), throttled, "the victim escaped");
        }
        if sweep_every.is_some_and(|every| done % every == 0) {
            assert_eq!(limiter.sweep(), 0, "swept a key in debt on a frozen clock");
        }
    }
    admitted
}

fn victim_under_flood(sweep_every: Option<u64>) {
    let clock = ManualClock::starting_at(Nanos::new(1_000 * SEC));
    // 3 per second, burst 3: a fresh key is admitted once and stays in debt
    // for 1/3 s; the victim takes all 3 and is in debt for 1 s.
    let limiter: KeyedLimiter<u64> = keyed(gcra(3, SEC, 3), &clock).max_keys(VICTIM_CAP).build();
    for _ in 0..3 {
        assert!(limiter.check(&VICTIM).is_allowed());
    }
    let throttled = limiter.check(&VICTIM);
    assert!(throttled.is_denied());
    assert_eq!(throttled.retry_after(), Duration::from_nanos(SEC / 3 + 1));

    let admitted = flood(&limiter, 0..FLOOD, throttled, sweep_every);
    let inserted = VICTIM_CAP as u64 - 1;
    assert_eq!(limiter.len(), VICTIM_CAP);
    let stats = limiter.stats();
    assert_eq!(stats.live_keys, VICTIM_CAP);
    assert_eq!(stats.max_keys, VICTIM_CAP);
    assert_eq!(stats.overflowed, FLOOD - inserted, "{stats:?}");
    assert_eq!(stats.evicted, 0);
    // Every key that got a slot was admitted once; the rest shared one
    // overflow state under the default quota: 3 permits, then denials.
    assert_eq!(admitted, inserted + 3);
    let overflow = limiter.check(&(FLOOD + 1));
    assert!(overflow.is_denied() && overflow.limit() == 3, "{overflow}");
    // The keys that got a slot keep their own state.
    assert_eq!(limiter.peek_n(&0, 0).expect("cost 0").remaining(), 2);
    assert_eq!(limiter.check(&VICTIM), throttled);
}

#[test]
fn a_flood_of_fresh_keys_never_frees_the_throttled_victim() {
    victim_under_flood(None);
}

#[test]
fn a_flood_with_sweeps_interleaved_never_frees_the_victim() {
    victim_under_flood(Some(100_000));
}

#[test]
fn idle_flood_keys_are_swept_and_the_victim_in_debt_is_not() {
    let clock = ManualClock::starting_at(Nanos::new(1_000 * SEC));
    // The flood runs the default, 3 per second (a key admitted once is idle
    // after 1/3 s); the victim has a stricter quota, 3 per minute, and stays
    // throttled for 20 s after taking all 3.
    let limiter: KeyedLimiter<u64> = keyed(gcra(3, SEC, 3), &clock)
        .override_key(VICTIM, gcra(3, 60 * SEC, 3))
        .max_keys(VICTIM_CAP)
        .build();
    for _ in 0..3 {
        assert!(limiter.check(&VICTIM).is_allowed());
    }
    let mut throttled = limiter.check(&VICTIM);
    assert!(throttled.is_denied());
    assert_eq!(throttled.retry_after(), Duration::from_secs(20));
    let mut overflowed = 0;
    // Two floods of half a million, each followed by 400 ms: the flood keys
    // are idle then, the victim is not.
    for round in 0..2 {
        let keys = round * FLOOD / 2..(round + 1) * FLOOD / 2;
        flood(&limiter, keys, throttled, None);
        assert_eq!(limiter.len(), VICTIM_CAP);
        overflowed += FLOOD / 2 - (VICTIM_CAP as u64 - 1);
        assert_eq!(limiter.stats().overflowed, overflowed);

        clock.advance(Duration::from_millis(400));
        assert_eq!(limiter.sweep(), VICTIM_CAP - 1, "round {round}");
        assert_eq!(limiter.len(), 1, "only the victim is left");
        let now = limiter.check(&VICTIM);
        assert!(now.is_denied(), "round {round}: the victim escaped: {now}");
        assert_eq!(
            now.retry_after(),
            throttled.retry_after() - Duration::from_millis(400),
            "round {round}"
        );
        // Slots are free again: a new key gets its own state.
        assert!(limiter.check(&(FLOOD + round)).is_allowed());
        assert_eq!(limiter.len(), 2);
        assert_eq!(limiter.stats().overflowed, overflowed);
        clock.advance(Duration::from_millis(1));
        assert_eq!(limiter.sweep(), 0, "a key admitted 1 ms ago is in debt");
        clock.advance(Duration::from_millis(400));
        assert_eq!(limiter.sweep(), 1);
        throttled = limiter.check(&VICTIM);
        assert!(throttled.is_denied(), "{throttled}");
    }
    assert_eq!(limiter.stats().evicted, 2 * VICTIM_CAP as u64);
    assert_eq!(limiter.len(), 1);
}

// ---------------------------------------------------------------------------
// Lossless eviction
// ---------------------------------------------------------------------------

/// Keys the schedule uses, and one it never checks: a fresh state to compare with.
const SCHEDULE_KEYS: u64 = 4;
const NEVER_CHECKED: u64 = 1_000;

/// Drives a limiter that is swept now and then and one that is never swept
/// through the same random schedule on one clock: every decision is identical
/// (all fields), and every sweep removes exactly the keys whose state is that
/// of a fresh key, no other.
fn lossless<A: Algorithm + Clone>(name: &str, algorithm: A, steps: u64, seed: u64) {
    lossless_with(name, algorithm, steps, seed, true);
}

/// [`lossless`]; with `observable` false, for algorithms whose idleness the
/// decisions do not show (an `AllOf` reports one limit while another still
/// holds permits), only the decisions are compared.
fn lossless_with<A: Algorithm + Clone>(
    name: &str,
    algorithm: A,
    steps: u64,
    seed: u64,
    observable: bool,
) {
    let clock = ManualClock::starting_at(Nanos::new(17 * SEC + 5));
    let swept: KeyedLimiter<u64, A> = keyed(algorithm.clone(), &clock).build();
    let kept: KeyedLimiter<u64, A> = keyed(algorithm.clone(), &clock).build();
    let capacity = algorithm.capacity();
    let period = algorithm.quota().period_nanos();
    let mut present = [false; SCHEDULE_KEYS as usize];
    let mut rng = Rng(seed);
    let (mut sweeps, mut evicted, mut denials) = (0, 0, 0);
    for step in 0..steps {
        let key = rng.below(SCHEDULE_KEYS);
        match rng.below(16) {
            0..=7 => {
                // Mostly small costs; now and then 0 or one above capacity.
                let cost = match rng.below(10) {
                    0 => 0,
                    1 => capacity + 1,
                    _ => 1 + rng.below(capacity.min(3)),
                };
                let (a, b) = (swept.check_n(&key, cost), kept.check_n(&key, cost));
                assert_eq!(a, b, "{name}, step {step}: check_n({key}, {cost})");
                denials += u64::from(a.is_ok_and(|d| d.is_denied()));
                if (1..=capacity).contains(&cost) {
                    present[key as usize] = true;
                }
            }
            8..=9 => {
                let cost = rng.below(capacity + 1);
                let (a, b) = (swept.peek_n(&key, cost), kept.peek_n(&key, cost));
                assert_eq!(a, b, "{name}, step {step}: peek_n({key}, {cost})");
            }
            10..=12 => {
                // Steps from 1 ns to two periods, mostly small.
                let by = match rng.below(4) {
                    0 => 1,
                    1 => rng.below(2 * period) + 1,
                    _ => rng.below(period / 4 + 1) + 1,
                };
                clock.advance(Duration::from_nanos(by));
            }
            _ => {
                // What a fresh key looks like now, against each key's state in
                // the limiter that never forgets.
                let fresh = kept.peek_n(&NEVER_CHECKED, 0).expect("cost 0");
                let mut idle = 0;
                for k in 0..SCHEDULE_KEYS {
                    let state = kept.peek_n(&k, 0).expect("cost 0");
                    if present[k as usize] && state == fresh {
                        present[k as usize] = false;
                        idle += 1;
                    }
                }
                let removed = swept.sweep();
                if observable {
                    assert_eq!(removed, idle, "{name}, step {step}: swept the wrong keys");
                }
                sweeps += 1;
                evicted += removed;
            }
        }
        if observable {
            assert_eq!(
                swept.len(),
                present.iter().filter(|&&p| p).count(),
                "{name}, step {step}"
            );
        }
    }
    assert_eq!(
        kept.len(),
        SCHEDULE_KEYS as usize,
        "{name}: the kept limiter lost keys"
    );
    assert_eq!(swept.stats().evicted, evicted as u64);
    assert!(
        evicted > steps as usize / 100 && denials > steps / 100,
        "{name}: the schedule was too tame: {evicted} evictions, {denials} denials"
    );
    println!("{name}: {steps} steps, {sweeps} sweeps, {evicted} evictions, {denials} denials");
}

#[test]
fn eviction_is_lossless_gcra() {
    lossless("gcra 3/10ms burst 2", gcra(3, 10 * MS, 2), 30_000, 1);
    lossless("gcra 17/ms burst 5", gcra(17, MS, 5), 30_000, 2);
}

#[test]
fn eviction_is_lossless_fixed_window() {
    lossless("fixed window 4/10ms", fixed(4, 10 * MS), 30_000, 3);
}

#[test]
fn eviction_is_lossless_sliding_log() {
    lossless("sliding log 4/10ms", log(4, 10 * MS), 30_000, 4);
}

#[test]
fn eviction_is_lossless_sliding_window() {
    lossless(
        "sliding window 5/10ms, 4 slots",
        wheel(5, 10 * MS, 4),
        30_000,
        5,
    );
    lossless(
        "sliding window 3/7ms, 3 slots",
        wheel(3, 7 * MS, 3),
        30_000,
        6,
    );
}

#[test]
fn eviction_is_lossless_all_of() {
    let limits = AllOf::new(vec![fixed(3, 5 * MS), fixed(5, 20 * MS)]).expect("limits");
    lossless_with("all of 3/5ms, 5/20ms", limits, 30_000, 7, false);
}

// ---------------------------------------------------------------------------
// Borrowed lookups
// ---------------------------------------------------------------------------

#[test]
fn string_keys_are_checked_by_str_and_looking_creates_no_state() {
    let clock = ManualClock::new();
    let limiter: KeyedLimiter<String> = keyed(gcra(2, SEC, 2), &clock).build();
    assert!(limiter.peek("alice").is_allowed());
    assert_eq!(
        limiter
            .peek_n("alice", 2)
            .expect("within capacity")
            .remaining(),
        0
    );
    assert!(limiter.check_n("alice", 0).expect("cost 0").is_allowed());
    assert_eq!(
        limiter
            .check_n("alice", 3)
            .expect_err("above capacity")
            .capacity(),
        2
    );
    assert_eq!(
        limiter.len(),
        0,
        "looking, cost 0 and refused costs create no state"
    );
    assert!(limiter.is_empty());

    let owned = String::from("alice");
    assert_eq!(limiter.check(owned.as_str()).remaining(), 1);
    assert_eq!(limiter.len(), 1);
    assert_eq!(limiter.check(&owned).remaining(), 0);
    assert!(limiter.check("alice").is_denied());
    assert!(limiter.peek("bob").is_allowed());
    assert_eq!(limiter.len(), 1);
}

// ---------------------------------------------------------------------------
// Per-key quotas and live changes
// ---------------------------------------------------------------------------

#[test]
fn exact_overrides_win_over_the_function_which_wins_over_the_default() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let limiter: KeyedLimiter<String> = keyed(gcra(2, SEC, 2), &clock)
        .override_key("admin".into(), gcra(100, SEC, 100))
        .override_key("premium:vip".into(), gcra(50, SEC, 50))
        .override_with(move |key: &String| {
            if key == "premium:bob" {
                // Relaxed: a counter, read on this thread.
                counted.fetch_add(1, Ordering::Relaxed);
            }
            key.starts_with("premium:").then(|| gcra(10, SEC, 10))
        })
        .build();
    let first = |key: &str| {
        let decision = limiter.check(key);
        (decision.limit(), decision.remaining())
    };
    assert_eq!(first("alice"), (2, 1));
    assert_eq!(first("premiumbob"), (2, 1));
    assert_eq!(first("premium:bob"), (10, 9));
    assert_eq!(first("premium:carol"), (10, 9));
    assert_eq!(first("premium:vip"), (50, 49));
    assert_eq!(first("admin"), (100, 99));
    // The function runs when a key is first seen, not on a known key's path.
    for _ in 0..5 {
        assert!(limiter.check("premium:bob").is_allowed());
    }
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    assert_eq!(limiter.peek("premium:bob").remaining(), 3);
}

/// How a quota changes while a key is in use.
#[derive(Clone, Copy, Debug)]
enum Change {
    SetDefault,
    SetOverride,
    RemoveOverride,
}

/// The key's next decision after it took 7 permits under `old` and its quota
/// became `new` by `change` with `carry`; on a frozen clock.
fn after_change<A: Algorithm + Clone>(old: &A, new: &A, change: Change, carry: Carry) -> Decision {
    let clock = ManualClock::starting_at(Nanos::new(600 * SEC));
    let key = "k".to_string();
    let builder = match change {
        Change::SetDefault | Change::SetOverride => keyed(old.clone(), &clock),
        Change::RemoveOverride => keyed(new.clone(), &clock).override_key(key.clone(), old.clone()),
    };
    let limiter: KeyedLimiter<String, A> = builder.build();
    assert_eq!(
        limiter
            .check_n(&key, 7)
            .expect("within capacity")
            .remaining(),
        3
    );
    // A bystander under the default, for the changes to one key only.
    assert!(
        limiter
            .check_n("bystander", 2)
            .expect("within capacity")
            .is_allowed()
    );
    match change {
        Change::SetDefault => limiter.set_default(new.clone(), carry),
        Change::SetOverride => limiter.set_override(key.clone(), new.clone(), carry),
        Change::RemoveOverride => assert!(limiter.remove_override(&key, carry)),
    }
    if !matches!(change, Change::SetDefault) {
        let bystander = limiter.peek_n("bystander", 0).expect("cost 0");
        let default = if matches!(change, Change::RemoveOverride) {
            new
        } else {
            old
        };
        assert_eq!(bystander.limit(), default.quota().limit());
        assert_eq!(
            bystander.remaining(),
            default.quota().limit() - 2,
            "{change:?} {carry:?}"
        );
    }
    limiter.check(&key)
}

/// Checks the documented carry of "7 of 10 taken" into limits of 20 and 5.
fn carry_rules<A: Algorithm + Clone>(name: &str, make: impl Fn(u64) -> A) {
    let (ten, twenty, five) = (make(10), make(20), make(5));
    for change in [
        Change::SetDefault,
        Change::SetOverride,
        Change::RemoveOverride,
    ] {
        let grow = |carry| after_change(&ten, &twenty, change, carry);
        let shrink = |carry| after_change(&ten, &five, change, carry);
        let at = format!("{name}, {change:?}");
        // Keep: 7 stay taken: 13 of 20 left (12 after this check); under 5,
        // none left.
        let keep = grow(Carry::Keep);
        assert!(keep.is_allowed(), "{at}: {keep}");
        assert_eq!((keep.limit(), keep.remaining()), (20, 12), "{at}, keep");
        let keep = shrink(Carry::Keep);
        assert!(keep.is_denied(), "{at}, keep under 5: {keep}");
        assert_eq!(
            (keep.limit(), keep.remaining()),
            (5, 0),
            "{at}, keep under 5"
        );
        // Reset: fresh.
        let reset = grow(Carry::Reset);
        assert_eq!((reset.limit(), reset.remaining()), (20, 19), "{at}, reset");
        let reset = shrink(Carry::Reset);
        assert_eq!(
            (reset.limit(), reset.remaining()),
            (5, 4),
            "{at}, reset under 5"
        );
        // Proportional: 7/10 becomes 14/20 (6 left), and 3.5/5 rounds up to 4
        // taken (1 left).
        let proportional = grow(Carry::Proportional);
        assert!(proportional.is_allowed());
        assert_eq!(
            (proportional.limit(), proportional.remaining()),
            (20, 5),
            "{at}, proportional"
        );
        let proportional = shrink(Carry::Proportional);
        assert!(proportional.is_allowed(), "{at}: {proportional}");
        assert_eq!(
            (proportional.limit(), proportional.remaining()),
            (5, 0),
            "{at}, proportional under 5"
        );
    }
}

#[test]
fn live_changes_carry_by_the_rule_gcra() {
    carry_rules("gcra", |limit| gcra(limit, SEC, limit));
}

#[test]
fn live_changes_carry_by_the_rule_fixed_window() {
    carry_rules("fixed window", |limit| fixed(limit, 60 * SEC));
}

/// One key per tier, each with 7 taken; then `change`: the keys whose quota
/// did not change keep their state, whatever the carry rule.
fn unchanged_tiers_keep_their_state(change: impl Fn(&KeyedLimiter<String>)) -> [u64; 3] {
    let clock = ManualClock::starting_at(Nanos::new(600 * SEC));
    let limiter: KeyedLimiter<String> = keyed(gcra(10, SEC, 10), &clock)
        .override_key("admin".into(), gcra(50, SEC, 50))
        .override_with(|key: &String| key.starts_with("premium:").then(|| gcra(30, SEC, 30)))
        .build();
    for key in ["alice", "premium:bob", "admin"] {
        assert!(
            limiter
                .check_n(key, 7)
                .expect("within capacity")
                .is_allowed()
        );
    }
    change(&limiter);
    ["alice", "premium:bob", "admin"].map(|key| limiter.peek_n(key, 0).expect("cost 0").remaining())
}

#[test]
fn a_change_leaves_keys_whose_quota_did_not_change_alone() {
    // Regression: a change re-resolved the function's keys to a new copy of
    // the same algorithm and carried their state over by the default's rule:
    // `Reset` gave every premium key a fresh bucket.
    let remaining = unchanged_tiers_keep_their_state(|limiter| {
        limiter.set_default(gcra(20, SEC, 20), Carry::Reset);
    });
    assert_eq!(
        remaining,
        [20, 23, 43],
        "alice reset; premium:bob and admin untouched"
    );
    let remaining = unchanged_tiers_keep_their_state(|limiter| {
        limiter.set_default(gcra(20, SEC, 20), Carry::Reset);
        // Any later change re-resolves every key again.
        limiter.set_override("carol".into(), gcra(5, SEC, 5), Carry::Reset);
        limiter.set_override("dave".into(), gcra(5, SEC, 5), Carry::Keep);
    });
    assert_eq!(remaining, [20, 23, 43]);
    let remaining = unchanged_tiers_keep_their_state(|limiter| {
        limiter.set_override("admin".into(), gcra(50, SEC, 50), Carry::Proportional);
        limiter.set_default(gcra(10, SEC, 10), Carry::Reset);
    });
    assert_eq!(remaining, [3, 23, 43], "equal quotas are no change");
}

#[test]
fn a_removal_rule_applies_once_and_only_to_the_state_it_found() {
    // Regression: `remove_override(key, Reset)` for a key without a state left
    // its rule pending, and a later change carried the key's new state by it
    // instead of by that change's own rule.
    let clock = ManualClock::starting_at(Nanos::new(600 * SEC));
    let limiter: KeyedLimiter<String> = keyed(gcra(10, SEC, 10), &clock)
        .override_key("k".into(), gcra(100, SEC, 100))
        .build();
    assert!(limiter.remove_override("k", Carry::Reset));
    assert!(!limiter.remove_override("k", Carry::Reset));
    assert_eq!(
        limiter
            .check_n("k", 7)
            .expect("within capacity")
            .remaining(),
        3
    );
    limiter.set_default(gcra(20, SEC, 20), Carry::Keep);
    assert_eq!(
        limiter.check("k").remaining(),
        12,
        "carried by Keep, not the old Reset"
    );

    // The same when the state the rule was meant for is swept first.
    let limiter: KeyedLimiter<String> = keyed(gcra(10, SEC, 10), &clock)
        .override_key("k".into(), gcra(100, SEC, 100))
        .build();
    assert!(
        limiter
            .check_n("k", 50)
            .expect("within capacity")
            .is_allowed()
    );
    assert!(limiter.remove_override("k", Carry::Reset));
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.sweep(), 1);
    assert_eq!(
        limiter
            .check_n("k", 7)
            .expect("within capacity")
            .remaining(),
        3
    );
    limiter.set_default(gcra(20, SEC, 20), Carry::Keep);
    assert_eq!(
        limiter.check("k").remaining(),
        12,
        "carried by Keep, not the old Reset"
    );
}

// ---------------------------------------------------------------------------
// AllOf per key
// ---------------------------------------------------------------------------

#[test]
fn all_of_per_key_takes_from_none_on_a_denial_and_reports_the_binding_limit() {
    // 10 per second AND 12 per minute, from an instant aligned to both.
    let clock = ManualClock::starting_at(Nanos::new(600 * SEC));
    let limits = AllOf::new(vec![fixed(10, SEC), fixed(12, 60 * SEC)]).expect("limits");
    let limiter: KeyedLimiter<String, AllOf<FixedWindow>> = keyed(limits, &clock).build();
    let check = |key: &str, cost| limiter.check_n(key, cost).expect("within capacity");

    // Second: 5 left, minute: 7 left: the second binds.
    let d = check("k", 5);
    assert!(d.is_allowed());
    assert_eq!((d.limit(), d.remaining()), (10, 5));
    // Denied by the second; the minute, which would admit, is not charged.
    let d = check("k", 6);
    assert!(d.is_denied());
    assert_eq!((d.limit(), d.remaining()), (10, 5));
    assert_eq!(d.retry_after(), Duration::from_secs(1));

    clock.advance(Duration::from_secs(1));
    // Second: 6 left, minute: 3 left (7 − 4: the 6 denied took nothing).
    let d = check("k", 4);
    assert!(d.is_allowed(), "{d}");
    assert_eq!((d.limit(), d.remaining()), (12, 3));
    // Denied by the minute; the second, which would admit, is not charged...
    let d = check("k", 5);
    assert!(d.is_denied());
    assert_eq!((d.limit(), d.remaining()), (12, 3));
    assert_eq!(d.retry_after(), Duration::from_secs(59));
    // ...so it still has 6: 3 more fit (had the 5 been taken, 1 would be left).
    let d = check("k", 3);
    assert!(d.is_allowed(), "{d}");
    assert_eq!((d.limit(), d.remaining()), (12, 0));
    // Both deny: the longer wait binds.
    let d = check("k", 4);
    assert!(d.is_denied());
    assert_eq!((d.limit(), d.retry_after()), (12, Duration::from_secs(59)));

    // Another key is untouched.
    let d = check("j", 10);
    assert_eq!((d.limit(), d.remaining()), (10, 0));

    // Idle only once every limit is: not when only the second is over.
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.sweep(), 0);
    clock.advance(Duration::from_secs(58));
    assert_eq!(limiter.sweep(), 2);
    assert_eq!(check("k", 10).remaining(), 0);
}

#[test]
fn all_of_gcra_per_key() {
    // 10 per second (burst 10) AND 15 per minute (burst 15).
    let clock = ManualClock::starting_at(Nanos::new(600 * SEC));
    let limits = AllOf::new(vec![gcra(10, SEC, 10), gcra(15, 60 * SEC, 15)]).expect("limits");
    let limiter: KeyedLimiter<u64, AllOf<Gcra>> = keyed(limits, &clock).build();
    let d = limiter.check_n(&1, 10).expect("within capacity");
    assert_eq!((d.limit(), d.remaining()), (10, 0));
    // The second binds (100 ms to wait); the minute would admit and gives nothing.
    let d = limiter.check(&1);
    assert_eq!((d.is_denied(), d.limit()), (true, 10));
    assert_eq!(d.retry_after(), Duration::from_millis(100));
    clock.advance(Duration::from_secs(1));
    // 5 left in the minute: the minute binds.
    let d = limiter.check_n(&1, 5).expect("within capacity");
    assert_eq!((d.is_allowed(), d.limit(), d.remaining()), (true, 15, 0));
    let d = limiter.check(&1);
    assert_eq!((d.is_denied(), d.limit()), (true, 15));
    // The minute holds 59 s of debt in 60: one more permit (4 s) fits in 3 s.
    assert_eq!(d.retry_after(), Duration::from_secs(3));
}

// ---------------------------------------------------------------------------
// Sweeping while checking
// ---------------------------------------------------------------------------

const SWEPT_KEYS: u64 = 6;
const SWEPT_WORKERS: usize = 4;

/// Workers check a few keys in rounds while a thread sweeps without pause;
/// between rounds the clock moves by `jump`. With `jump` past idleness, each
/// round admits exactly the capacity per key; with no jump, the whole run
/// does. Returns the evictions.
fn sweeping_rounds<A: Algorithm>(name: &str, algorithm: A, rounds: u64, jump: Duration) -> u64 {
    let clock = ManualClock::starting_at(Nanos::new(100 * SEC));
    let capacity = algorithm.capacity();
    let limiter: KeyedLimiter<u64, A> = keyed(algorithm, &clock).build();
    let admitted: Vec<AtomicU64> = (0..SWEPT_KEYS).map(|_| AtomicU64::new(0)).collect();
    let done = AtomicBool::new(false);
    let barrier = Barrier::new(SWEPT_WORKERS + 1);
    let attempts = 8 * capacity * SWEPT_KEYS;
    thread::scope(|scope| {
        let sweeper = scope.spawn(|| {
            let mut sweeps = 0u64;
            // Relaxed: `done` only stops the loop.
            while !done.load(Ordering::Relaxed) {
                limiter.sweep();
                sweeps += 1;
            }
            sweeps
        });
        for id in 0..SWEPT_WORKERS {
            let (limiter, barrier, admitted) = (&limiter, &barrier, &admitted);
            scope.spawn(move || {
                for _ in 0..rounds {
                    barrier.wait();
                    for i in 0..attempts {
                        let key = (i + id as u64) % SWEPT_KEYS;
                        if limiter.check(&key).is_allowed() {
                            // Relaxed: read after the round's barrier.
                            admitted[key as usize].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    barrier.wait();
                }
            });
        }
        for round in 0..rounds {
            barrier.wait();
            barrier.wait();
            // With the clock frozen, the capacity is for the whole run.
            if !jump.is_zero() || round + 1 == rounds {
                for (key, count) in admitted.iter().enumerate() {
                    let count = count.swap(0, Ordering::Relaxed);
                    assert_eq!(count, capacity, "{name}, round {round}, key {key}");
                }
            }
            clock.advance(jump);
            // Every other round, let the sweeper evict the idle keys before
            // the workers start; otherwise they race.
            if round % 2 == 0 && !jump.is_zero() {
                let evicted = limiter.stats().evicted;
                for _ in 0..1_000_000 {
                    if limiter.stats().evicted > evicted || limiter.is_empty() {
                        break;
                    }
                    thread::yield_now();
                }
            }
        }
        done.store(true, Ordering::Relaxed);
        let sweeps = sweeper.join().expect("sweeper panicked");
        println!(
            "{name}: {rounds} rounds, jump {jump:?}: {sweeps} sweeps, {} evictions",
            limiter.stats().evicted
        );
    });
    limiter.stats().evicted
}

fn sweeping_all<A: Algorithm + Clone>(name: &str, algorithm: A) {
    let evicted = sweeping_rounds(name, algorithm.clone(), 20, Duration::ZERO);
    assert_eq!(evicted, 0, "{name}: evicted on a frozen clock");
    let evicted = sweeping_rounds(name, algorithm, 60, Duration::from_secs(10));
    assert!(evicted > 0, "{name}: the sweeper never evicted");
}

#[test]
fn sweeping_while_checking_loses_no_update_gcra() {
    sweeping_all("gcra 3/100ms burst 3", gcra(3, 100 * MS, 3));
}

#[test]
fn sweeping_while_checking_loses_no_update_fixed_window() {
    sweeping_all("fixed window 3/100ms", fixed(3, 100 * MS));
}

#[test]
fn sweeping_while_checking_loses_no_update_sliding_log() {
    sweeping_all("sliding log 3/100ms", log(3, 100 * MS));
}

#[test]
fn sweeping_while_checking_loses_no_update_sliding_window() {
    sweeping_all("sliding window 3/100ms, 4 slots", wheel(3, 100 * MS, 4));
}

const MOVING_KEYS: u64 = 4;
const MOVING_WORKERS: usize = 3;
const MOVING_STEPS: u64 = 20_000;
/// Steps during which the workers use one half of the keys, then the other:
/// the resting half goes idle and is swept, then comes back.
const HALF_TIME: u64 = 100;

/// Workers check the active half of the keys while the driver moves the clock
/// in small steps and a thread sweeps without pause; every key's admissions
/// are then checked against the algorithm's guarantee. Gated: the clock never
/// moves between a worker's reading and its decision, so every admission is
/// checked at its exact `now`.
fn moving_with_sweeps<A: Algorithm + Clone + Guaranteed>(name: &str, algorithm: A, max_step: u64) {
    let started = Instant::now();
    let clock = ManualClock::starting_at(Nanos::new(50 * SEC));
    let limiter: KeyedLimiter<u64, A> = KeyedLimiter::builder(algorithm.clone())
        .clock(ClockSource::custom(RecordingClock::new(clock.clone())))
        .sweep_every(None)
        .build();
    let gate = RwLock::new(());
    let done = AtomicBool::new(false);
    let step = AtomicU64::new(0);
    let barrier = Barrier::new(MOVING_WORKERS + 1);
    let admissions: Vec<Vec<(u64, u64)>> = thread::scope(|scope| {
        let sweeper = scope.spawn(|| {
            // Relaxed: `done` only stops the loop.
            while !done.load(Ordering::Relaxed) {
                limiter.sweep();
                thread::yield_now();
            }
        });
        let workers: Vec<_> = (0..MOVING_WORKERS)
            .map(|id| {
                let (limiter, gate, done, step, barrier) =
                    (&limiter, &gate, &done, &step, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    let mut admitted = vec![Vec::new(); MOVING_KEYS as usize];
                    let mut i = id as u64;
                    while !done.load(Ordering::Relaxed) {
                        i += 1;
                        // Relaxed: the step only picks which keys are active.
                        let half = step.load(Ordering::Relaxed) / HALF_TIME % 2;
                        let key = half * MOVING_KEYS / 2 + i % (MOVING_KEYS / 2);
                        let guard = gate.read().expect("gate");
                        let decision = limiter.check(&key);
                        let now = take_reading();
                        drop(guard);
                        if decision.is_allowed() {
                            admitted[key as usize].push((now, 1));
                        }
                        if i % 4 == 0 {
                            thread::yield_now();
                        }
                    }
                    admitted
                })
            })
            .collect();
        barrier.wait();
        let mut rng = Rng(0x5eed);
        for s in 0..MOVING_STEPS {
            {
                let _moving = gate.write().expect("gate");
                clock.advance(Duration::from_nanos(1 + rng.below(max_step)));
            }
            step.store(s, Ordering::Relaxed);
            for _ in 0..4 {
                thread::yield_now();
            }
        }
        done.store(true, Ordering::Relaxed);
        sweeper.join().expect("sweeper panicked");
        let mut per_key = vec![Vec::new(); MOVING_KEYS as usize];
        for worker in workers {
            for (key, admitted) in worker
                .join()
                .expect("worker panicked")
                .into_iter()
                .enumerate()
            {
                per_key[key].extend(admitted);
            }
        }
        per_key
    });
    let guarantee = algorithm.guarantee();
    let mut total = 0;
    for (key, admitted) in admissions.iter().enumerate() {
        guarantee
            .check(admitted)
            .unwrap_or_else(|violation| panic!("{name}, key {key}: {violation}"));
        total += admitted.len();
    }
    let evicted = limiter.stats().evicted;
    println!(
        "{name}: {total} admissions over {MOVING_KEYS} keys, {evicted} evictions, {:?}",
        started.elapsed()
    );
    assert!(evicted > 0, "{name}: nothing was swept");
    assert!(
        admissions.iter().all(|a| !a.is_empty()),
        "{name}: a key was never admitted"
    );
}

#[test]
fn sweeping_on_a_moving_clock_keeps_every_guarantee() {
    // Periods of 10 ms and steps of up to 1 ms: a resting key is idle within
    // a few dozen steps, well inside its 100 steps of rest.
    moving_with_sweeps("gcra 3/10ms burst 2", gcra(3, 10 * MS, 2), MS);
    moving_with_sweeps("fixed window 3/10ms", fixed(3, 10 * MS), MS);
    moving_with_sweeps("sliding log 3/10ms", log(3, 10 * MS), MS);
    moving_with_sweeps("sliding window 4/10ms, 5 slots", wheel(4, 10 * MS, 5), MS);
}

// ---------------------------------------------------------------------------
// A stale reading after an eviction
// ---------------------------------------------------------------------------

thread_local! {
    /// Whether this thread's next reading of a [`PausingClock`] pauses.
    static PAUSE_NEXT: Cell<bool> = const { Cell::new(false) };
}

/// A [`ManualClock`] that, on a thread that asked for it, stops right after
/// its next reading until the test lets it go: a preemption between the
/// limiter's reading and its decision, placed exactly.
#[derive(Clone)]
struct PausingClock {
    clock: ManualClock,
    paused: Arc<Barrier>,
    resume: Arc<Barrier>,
}

impl Clock for PausingClock {
    fn now(&self) -> Nanos {
        let now = self.clock.now();
        if PAUSE_NEXT.replace(false) {
            self.paused.wait();
            self.resume.wait();
        }
        now
    }
}

/// Key 7 admitted once at 10 s; then a request for it reads the clock at
/// 10.5 s and pauses, the clock moves to 11 s, a sweep evicts the key (idle
/// at 11 s), and the request decides. Returns its decision, the limiter and
/// the clock (at 11 s).
fn after_a_stale_reading<A: Algorithm>(
    algorithm: A,
    record: bool,
) -> (Decision, KeyedLimiter<u64, A>, ManualClock) {
    let clock = ManualClock::starting_at(Nanos::new(10 * SEC));
    let pausing = PausingClock {
        clock: clock.clone(),
        paused: Arc::new(Barrier::new(2)),
        resume: Arc::new(Barrier::new(2)),
    };
    let limiter: KeyedLimiter<u64, A> = KeyedLimiter::builder(algorithm)
        .clock(ClockSource::custom(pausing.clone()))
        .sweep_every(None)
        .build();
    assert!(limiter.check(&7).is_allowed());
    clock.advance(Duration::from_millis(500));
    let late = thread::scope(|scope| {
        let request = scope.spawn(|| {
            PAUSE_NEXT.set(true);
            if record {
                limiter.check(&7)
            } else {
                limiter.peek(&7)
            }
        });
        pausing.paused.wait();
        clock.advance(Duration::from_millis(500));
        assert_eq!(limiter.sweep(), 1, "idle at 11 s");
        pausing.resume.wait();
        request.join().expect("request panicked")
    });
    (late, limiter, clock)
}

/// The decision of a call that read 10.5 s and took effect after 11 s, on a
/// key that took its one permit per second at 10 s: denied as of 10.5 s, or
/// admitted as of 11 s (full again, the permit counted from 11 s, its waits
/// counted from the reading of 10.5 s), and nothing else.
fn decided_at_one_instant(
    late: Decision,
    retry_at_reading: Duration,
    reset_from_reading: Duration,
) {
    if late.is_allowed() {
        assert_eq!(
            late.reset_after(),
            reset_from_reading,
            "admitted as of 11 s, reported from 10.5 s: {late}"
        );
    } else {
        assert_eq!(late.retry_after(), retry_at_reading, "{late}");
    }
}

#[test]
fn a_reading_taken_before_an_eviction_does_not_admit_on_a_fresh_state() {
    // Regression: a request read the clock (10.5 s), a sweep then evicted its
    // key as idle at 11 s, and the request, deciding on a fresh state at its
    // stale reading, was admitted as of 10.5 s. For the GCRA (1 per second,
    // burst 1) that recorded a TAT of 11.5 s although the evicted state held
    // the first permit until 11 s: three permits in [10 s, 11.5 s], where at
    // most 2 fit. A limiter that never evicts denies it.
    let (late, limiter, clock) = after_a_stale_reading(gcra(1, SEC, 1), true);
    decided_at_one_instant(
        late,
        Duration::from_millis(500),
        Duration::from_millis(1_500),
    );
    clock.advance(Duration::from_millis(500));
    let next = limiter.check(&7);
    if late.is_allowed() {
        assert!(
            next.is_denied(),
            "three permits in 1.5 s at 1/s, burst 1: {next}"
        );
        assert_eq!(next.retry_after(), Duration::from_millis(500));
    } else {
        assert!(next.is_allowed(), "{next}");
    }

    // For the fixed window (1 per second) the stale admission counted in the
    // window of 10 s, which already held its one permit.
    let (late, limiter, clock) = after_a_stale_reading(fixed(1, SEC), true);
    decided_at_one_instant(
        late,
        Duration::from_millis(500),
        Duration::from_millis(1_500),
    );
    clock.advance(Duration::from_millis(500));
    let next = limiter.check(&7);
    assert_eq!(
        next.is_allowed(),
        late.is_denied(),
        "window of 11 s: {next}"
    );
}

#[test]
fn a_peek_taken_before_an_eviction_answers_for_one_instant() {
    // The same for a look: at 10.5 s the window of 10 s is full, at 11 s the
    // key is fresh; "allowed, resets in 0.5 s" is true of neither.
    let (late, limiter, _clock) = after_a_stale_reading(fixed(1, SEC), false);
    decided_at_one_instant(
        late,
        Duration::from_millis(500),
        Duration::from_millis(1_500),
    );
    assert!(limiter.is_empty(), "a look creates no state");
}

#[test]
fn a_limiter_with_a_sweeper_thread_empties_by_itself() {
    let clock = ManualClock::new();
    let limiter: KeyedLimiter<u64> = KeyedLimiter::builder(gcra(2, 10 * MS, 2))
        .clock(clock.clone())
        .sweep_every(Some(Duration::from_millis(1)))
        .build();
    for key in 0..1_000 {
        assert!(limiter.check(&key).is_allowed());
    }
    clock.advance(Duration::from_millis(10));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !limiter.is_empty() {
        assert!(Instant::now() < deadline, "{} keys left", limiter.len());
        thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(limiter.stats().evicted, 1_000);
}

#[test]
fn limiter_equivalence_for_a_single_key() {
    // A keyed limiter with one key and a direct limiter on the same clock
    // agree, including across sweeps (a sanity check of the helpers above).
    let clock = ManualClock::starting_at(Nanos::new(SEC));
    let keyed_limiter: KeyedLimiter<u64, SlidingLog> = keyed(log(3, 10 * MS), &clock).build();
    let direct = Limiter::with_clock(log(3, 10 * MS), clock.clone());
    let mut rng = Rng(99);
    for step in 0..5_000 {
        match rng.below(4) {
            0 => clock.advance(Duration::from_nanos(1 + rng.below(4 * MS))),
            1 => {
                keyed_limiter.sweep();
            }
            _ => assert_eq!(keyed_limiter.check(&0), direct.check(), "step {step}"),
        }
    }
}

// ---------------------------------------------------------------------------
// Charges: reserve, then settle
// ---------------------------------------------------------------------------

#[test]
fn a_charge_creates_the_state_of_a_new_key_and_a_charge_of_zero_does_not() {
    let clock = ManualClock::new();
    // 10 per second, burst 10: a permit every 100 ms.
    let limiter: KeyedLimiter<String> = keyed(gcra(10, SEC, 10), &clock).build();
    let nothing = limiter.charge_n("idle", 0);
    assert!(nothing.is_allowed());
    // What one permit would leave, as for a known key.
    assert_eq!(nothing.remaining(), 9);
    assert_eq!(limiter.len(), 0, "a charge of 0 records nothing");

    // 25 permits on a bucket of 10: a debt of 15, paid at 100 ms each.
    let after = limiter.charge_n("big", 25);
    assert!(after.is_denied());
    assert_eq!(after.retry_after(), Duration::from_millis(1_600));
    assert_eq!(limiter.len(), 1);
    clock.advance(Duration::from_millis(1_599));
    assert!(limiter.check("big").is_denied());
    clock.advance(Duration::from_millis(1));
    assert!(limiter.check("big").is_allowed());
    assert!(limiter.check("other").is_allowed(), "keys are independent");
}

#[test]
fn a_charge_while_the_map_is_full_goes_to_the_overflow_state() {
    let clock = ManualClock::new();
    let limiter: KeyedLimiter<u64, FixedWindow> = keyed(fixed(5, SEC), &clock).max_keys(1).build();
    assert!(limiter.check(&1).is_allowed());
    // Key 2 has no slot: its charge fills the shared overflow window (and
    // owes the rest to the next ones).
    assert!(limiter.charge_n(&2, 50).is_denied());
    assert!(limiter.check(&3).is_denied(), "the overflow window is full");
    assert_eq!(limiter.peek(&1).remaining(), 3, "key 1 keeps its own state");
}

/// Threads settle and check on one key under a frozen clock; returns what
/// the checks admitted, what was charged, and the key's state after (a
/// peek).
fn frozen_charges<A: Algorithm>(algorithm: A) -> (u64, u64, tollgate::Decision) {
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 2_000;
    let clock = ManualClock::starting_at(Nanos::new(3_600 * SEC));
    let limiter: KeyedLimiter<u64, A> = keyed(algorithm, &clock).build();
    let barrier = Barrier::new(THREADS as usize);
    let charges = |t: u64| (0..ROUNDS).filter(move |i| (i + t) % 3 == 0);
    let admitted: u64 = thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (limiter, barrier) = (&limiter, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    let mut admitted = 0;
                    for i in 0..ROUNDS {
                        if (i + t) % 3 == 0 {
                            let _ = limiter.charge_n(&7, 1);
                        } else {
                            admitted += u64::from(limiter.check(&7).is_allowed());
                        }
                    }
                    admitted
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    let charged = (0..THREADS).map(|t| charges(t).count() as u64).sum();
    (admitted, charged, limiter.peek(&7))
}

#[test]
fn frozen_clock_charges_racing_checks_lose_nothing() {
    // 100 per second, burst 50: a permit every 10 ms. Every admission and
    // every charge moved the TAT by 10 ms, whatever the interleaving, up to
    // the debt cap (16 periods: 1,600 permits past the burst): the key
    // waits out exactly the permits beyond the burst, capped, plus one.
    let (admitted, charged, after) = frozen_charges(gcra(100, SEC, 50));
    assert!(admitted <= 50, "gcra: {admitted} admitted, burst 50");
    let owed = (admitted + charged - 50).min(16 * 100);
    assert_eq!(
        after.retry_after(),
        Duration::from_millis(10 * (owed + 1)),
        "gcra: {admitted} admitted and {charged} charged"
    );

    // A window records every charge as debt (up to its cap): full at the
    // end, whatever the interleaving, and the checks never admitted more
    // than the limit.
    let windows = [
        ("fixed window", frozen_charges(fixed(50, SEC))),
        ("sliding log", frozen_charges(log(50, SEC))),
        ("sliding window", frozen_charges(wheel(50, SEC, 10))),
    ];
    for (name, (admitted, _, after)) in windows {
        assert!(admitted <= 50, "{name}: {admitted} admitted, limit 50");
        assert!(
            after.is_denied() && after.remaining() == 0,
            "{name}: {after}"
        );
    }
}
