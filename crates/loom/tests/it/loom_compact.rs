//! Loom models of the compact keyed table (`keyed::compact`): inserts,
//! batches, the key cap and sweeps (with their backward shifts) racing
//! checks of the same keys.
//!
//! Under `--cfg loom` the table has one shard and its lock is loom's
//! `Mutex` (`src/shard_lock.rs`), and the live-key count, the sweep's
//! reading and the overflow state are loom's atomics, so every order of the
//! holds and of those read-modify-writes is explored. The overflow state's
//! compare-and-swap is the `Limiter`'s own, modelled in `loom.rs` beside this file.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p tollgate-loom --release --target-dir target/loom --test it -- loom_compact::`
#![cfg(loom)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use loom::thread;
use tollgate::keyed::compact::CompactKeyedLimiter;
use tollgate::{FixedWindow, Gcra, ManualClock, Nanos, Quota};

/// One permit per second, burst 1.
fn one_per_second() -> Gcra {
    Gcra::new(Quota::per_second(1).unwrap()).unwrap()
}

fn limiter(clock: &ManualClock, max_keys: usize) -> CompactKeyedLimiter<u64> {
    CompactKeyedLimiter::builder(one_per_second(), max_keys)
        .clock(clock.clone())
        .sweep_every(None)
        .build()
        .unwrap()
}

/// Runs `model` under loom and prints how many executions were explored.
fn explore(name: &str, model: impl Fn() + Sync + Send + 'static) {
    static EXECUTIONS: AtomicUsize = AtomicUsize::new(0);
    EXECUTIONS.store(0, Ordering::Relaxed);
    loom::model(move || {
        EXECUTIONS.fetch_add(1, Ordering::Relaxed);
        model();
    });
    println!("{name}: {} executions", EXECUTIONS.load(Ordering::Relaxed));
}

#[test]
fn two_first_checks_of_one_key_create_one_state() {
    explore("insert/insert", || {
        let clock = ManualClock::new();
        let keyed = limiter(&clock, 4);
        let other = keyed.clone();
        let racer = thread::spawn(move || other.check(&7).is_allowed());
        let mine = keyed.check(&7).is_allowed();
        let theirs = racer.join().unwrap();
        assert!(mine ^ theirs, "exactly one of two checks fits a burst of 1");
        assert_eq!(keyed.len(), 1);
    });
}

#[test]
fn a_batch_racing_a_check_of_one_of_its_keys_admits_it_once() {
    explore("batch/check", || {
        let clock = ManualClock::new();
        let keyed = limiter(&clock, 4);
        let other = keyed.clone();
        let racer = thread::spawn(move || other.check(&7).is_allowed());
        let mut batch = Vec::new();
        keyed.check_batch(&[8, 7, 7], &mut batch);
        let theirs = racer.join().unwrap();
        assert!(batch[0].is_allowed(), "key 8 is new");
        assert!(batch[2].is_denied(), "the third item follows the second");
        assert!(batch[1].is_allowed() ^ theirs, "one admission of key 7");
        assert_eq!(keyed.len(), 2);
    });
}

#[test]
fn a_sweep_racing_a_check_never_loses_the_admission() {
    explore("sweep/check", || {
        let clock = ManualClock::new();
        let keyed = limiter(&clock, 4);
        assert!(keyed.check(&7).is_allowed());
        clock.advance(Duration::from_secs(1));
        let sweeper = keyed.clone();
        let sweep = thread::spawn(move || sweeper.sweep());
        let admitted = keyed.check(&7).is_allowed();
        let swept = sweep.join().unwrap();
        assert!(admitted, "an idle key is full");
        let next = keyed.peek(&7);
        assert!(next.is_denied());
        assert_eq!(next.retry_after(), Duration::from_secs(1));
        assert_eq!(keyed.len(), 1);
        assert!(swept <= 1);
        assert_eq!(keyed.stats().evicted, swept as u64);
    });
}

/// Two keys in a table of three slots (their runs often meet): a sweep that
/// removes the idle one, shifting the other back if it follows it, races a
/// check of the live one, which must find its state wherever it is.
#[test]
fn a_sweep_shifting_a_run_racing_a_check_of_a_key_in_it() {
    explore("sweep shift/check", || {
        let clock = ManualClock::new();
        let keyed = limiter(&clock, 2);
        assert!(keyed.check(&1).is_allowed());
        clock.advance(Duration::from_secs(1));
        assert!(keyed.check(&2).is_allowed());
        let sweeper = keyed.clone();
        let sweep = thread::spawn(move || sweeper.sweep());
        let during = keyed.check(&2);
        let swept = sweep.join().unwrap();
        assert!(during.is_denied(), "key 2's admission a moment ago counts");
        assert_eq!(swept, 1, "key 1 is idle, key 2 is not");
        assert_eq!(keyed.len(), 1);
    });
}

#[test]
fn the_key_cap_holds_when_two_new_keys_race_for_the_last_slot() {
    explore("cap", || {
        let clock = ManualClock::new();
        let keyed = limiter(&clock, 1);
        let other = keyed.clone();
        let racer = thread::spawn(move || other.check(&1).is_allowed());
        let mine = keyed.check(&2).is_allowed();
        let theirs = racer.join().unwrap();
        assert_eq!(keyed.len(), 1, "one slot, one live key");
        assert!(mine && theirs, "the other shares a fresh overflow state");
        assert_eq!(keyed.stats().overflowed, 1);
    });
}

/// As `loom_keyed`'s: a sweep that read 1.5 s races a check whose clock was
/// set back to 0.6 s; the key is never decided fresh before the sweep's
/// reading.
#[test]
fn a_check_set_back_before_a_racing_sweep_is_not_recredited() {
    explore("sweep/check set back", || {
        let at = |ms: u64| Nanos::new(ms * 1_000_000);
        let clock = ManualClock::starting_at(at(500));
        let window = FixedWindow::new(Quota::per_second(1).unwrap()).unwrap();
        let keyed: CompactKeyedLimiter<u64, FixedWindow> = CompactKeyedLimiter::builder(window, 4)
            .clock(clock.clone())
            .sweep_every(None)
            .build()
            .unwrap();
        assert!(keyed.check(&7).is_allowed());
        clock.set(at(1_500));
        let sweeper = keyed.clone();
        let sweep = thread::spawn(move || sweeper.sweep());
        clock.set(at(600));
        let during = keyed.check(&7);
        let swept = sweep.join().unwrap();
        if during.is_allowed() {
            assert_eq!(during.reset_after(), Duration::from_millis(1_400));
        }
        clock.set(at(1_500));
        let later = keyed.check(&7);
        assert_eq!(
            u8::from(during.is_allowed()) + u8::from(later.is_allowed()),
            1,
            "swept {swept}; during: {during}, later: {later}"
        );
    });
}
