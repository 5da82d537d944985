//! Loom models of the keyed limiter's protocol: inserts, sweeps, the key cap
//! and quota changes racing checks of the same key.
//!
//! Under `--cfg loom` the map is the production `KeyMap` (`src/keymap.rs`)
//! with one shard and loom's `Mutex` as its shard lock, so every
//! interleaving of the limiter's own steps and of the map's locking is
//! explored.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p tollgate-loom --release --target-dir target/loom --test it -- loom_keyed::`
#![cfg(loom)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use loom::thread;
use tollgate::{Carry, Gcra, KeyedLimiter, ManualClock, Quota};

/// One permit per second, burst 1.
fn one_per_second() -> Gcra {
    Gcra::new(Quota::per_second(1).unwrap()).unwrap()
}

fn limiter(clock: &ManualClock, max_keys: usize) -> KeyedLimiter<u64> {
    KeyedLimiter::builder(one_per_second())
        .clock(clock.clone())
        .max_keys(max_keys)
        .sweep_every(None)
        .build()
}

/// Runs `model` under loom and returns how many executions were explored.
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
        let keyed = limiter(&clock, 10);
        let other = keyed.clone();
        let racer = thread::spawn(move || other.check(&7).is_allowed());
        let mine = keyed.check(&7).is_allowed();
        let theirs = racer.join().unwrap();
        assert!(mine ^ theirs, "exactly one of two checks fits a burst of 1");
        assert_eq!(keyed.len(), 1);
    });
}

#[test]
fn a_sweep_racing_a_check_never_loses_the_admission() {
    explore("sweep/check", || {
        let clock = ManualClock::new();
        let keyed = limiter(&clock, 10);
        assert!(keyed.check(&7).is_allowed());
        // One second later the key is idle: a sweep may drop it.
        clock.advance(Duration::from_secs(1));
        let sweeper = keyed.clone();
        let sweep = thread::spawn(move || sweeper.sweep());
        let admitted = keyed.check(&7).is_allowed();
        let swept = sweep.join().unwrap();
        assert!(admitted, "an idle key is full");
        // Whatever the order, the admission is recorded: the key is not
        // idle, still there, and the next permit waits a whole second.
        let next = keyed.peek(&7);
        assert!(next.is_denied());
        assert_eq!(next.retry_after(), Duration::from_secs(1));
        assert_eq!(keyed.len(), 1);
        assert!(swept <= 1);
        assert_eq!(keyed.stats().evicted, swept as u64);
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
        // The other key shares the overflow state (burst 1): both fit once.
        assert!(mine && theirs);
        assert_eq!(keyed.stats().overflowed, 1);
    });
}

#[test]
fn a_quota_change_racing_a_check_applies_once() {
    explore("change/check", || {
        let clock = ManualClock::new();
        let keyed = limiter(&clock, 10);
        assert!(keyed.check(&7).is_allowed());
        let changer = keyed.clone();
        let change = thread::spawn(move || {
            let two = Gcra::new(Quota::per_second(2).unwrap()).unwrap();
            changer.set_default(two, Carry::Keep);
        });
        let during = keyed.check(&7);
        change.join().unwrap();
        let after = keyed.check(&7);
        // Before the change the key is exhausted (1 of 1 taken); after it,
        // Keep leaves 1 of 2. Either order admits exactly one of the two
        // later checks.
        assert_eq!(
            u8::from(during.is_allowed()) + u8::from(after.is_allowed()),
            1,
            "during: {during}, after: {after}"
        );
        assert!(keyed.peek(&7).is_denied());
    });
}

/// Regression, under every interleaving: a sweep that read 1.5 s races
/// a check whose clock was set back to 0.6 s. Whether the check comes before
/// the removal (the key's own state denies it) or after (a fresh state
/// decides it), the key is never decided fresh before the sweep's reading:
/// an admission is counted in the window [1 s, 2 s), which then admits
/// nothing more.
#[test]
fn a_check_set_back_before_a_racing_sweep_is_not_recredited() {
    explore("sweep/check set back", || {
        let at = |ms: u64| tollgate::Nanos::new(ms * 1_000_000);
        let clock = ManualClock::starting_at(at(500));
        let one_per_second = tollgate::FixedWindow::new(Quota::per_second(1).unwrap()).unwrap();
        let keyed: KeyedLimiter<u64, tollgate::FixedWindow> = KeyedLimiter::builder(one_per_second)
            .clock(clock.clone())
            .sweep_every(None)
            .build();
        assert!(keyed.check(&7).is_allowed());
        clock.set(at(1_500));
        let sweeper = keyed.clone();
        let sweep = thread::spawn(move || sweeper.sweep());
        clock.set(at(600));
        let during = keyed.check(&7);
        let swept = sweep.join().unwrap();
        if during.is_allowed() {
            // Decided at the sweep's reading (its window ends at 2 s), and
            // reported from the request's own reading, 0.6 s: the key is
            // full again 1.4 s later.
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

/// Regression: keys on the default live in their shard's hot table under the
/// shard's tag, keys on an override in its side table with their own
/// algorithm. A change of the default racing a check of a default key
/// (which moves the shard's hot keys aside, then brings the key back),
/// beside a key on an override in the same shard: the default key's state
/// is carried over exactly once, and the override key keeps its quota and
/// its state.
#[test]
fn a_default_change_racing_a_check_leaves_an_override_key_alone() {
    explore("change/check beside an override", || {
        let clock = ManualClock::new();
        let three = Gcra::new(Quota::per_second(3).unwrap()).unwrap();
        let keyed: KeyedLimiter<u64> = KeyedLimiter::builder(one_per_second())
            .override_key(1, three)
            .clock(clock.clone())
            .max_keys(10)
            .sweep_every(None)
            .build();
        assert!(keyed.check(&1).is_allowed());
        assert!(keyed.check(&7).is_allowed());
        let changer = keyed.clone();
        let change = thread::spawn(move || {
            let two = Gcra::new(Quota::per_second(2).unwrap()).unwrap();
            changer.set_default(two, Carry::Keep);
        });
        let during = keyed.check(&7);
        change.join().unwrap();
        let after = keyed.check(&7);
        assert_eq!(
            u8::from(during.is_allowed()) + u8::from(after.is_allowed()),
            1,
            "during: {during}, after: {after}"
        );
        assert!(keyed.peek(&7).is_denied());
        // 1 of 3 taken before the change, whatever the order: 1 left after
        // a second.
        assert_eq!(keyed.check(&1).remaining(), 1);
        assert_eq!(keyed.len(), 2);
    });
}
