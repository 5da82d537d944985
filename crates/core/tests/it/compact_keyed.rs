//! The compact keyed table (`tollgate::keyed::compact`): property tests
//! against one direct [`Limiter`] per key (the reference model), batches
//! against the same checks one by one, and the cap, the overflow state and
//! the sweep at sizes where the table's runs wrap and shift.

use std::fmt::Debug;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate::keyed::compact::{CompactKeyedLimiter, FixedKey, ShortKey};
use tollgate::{Algorithm, FixedWindow, Gcra, Limiter, ManualClock, Nanos, Quota};

const KEYS: usize = 12;
const MS: u64 = 1_000_000;
const MAX_PERIOD: u64 = 40 * MS;

#[derive(Clone, Debug)]
enum Op {
    Check { key: usize, cost: u64 },
    Peek { key: usize },
    Batch(Vec<usize>),
    Advance(u64),
    Sweep,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let key = 0..KEYS;
    let cost = prop_oneof![3 => 0..4u64, 1 => 0..=17u64];
    let op = prop_oneof![
        6 => (key.clone(), cost).prop_map(|(key, cost)| Op::Check { key, cost }),
        1 => key.clone().prop_map(|key| Op::Peek { key }),
        2 => prop::collection::vec(key, 0..40).prop_map(Op::Batch),
        3 => prop_oneof![Just(1u64), 1..=MAX_PERIOD / 8, 1..=2 * MAX_PERIOD].prop_map(Op::Advance),
        1 => Just(Op::Sweep),
    ];
    prop::collection::vec(op, 1..300)
}

fn quota() -> impl Strategy<Value = Quota> {
    (1..=8u64, 1..=MAX_PERIOD, 1..=16u64).prop_map(|(limit, period, burst)| {
        Quota::new(limit, Duration::from_nanos(period))
            .and_then(|quota| quota.with_burst(burst))
            .expect("valid quota")
    })
}

fn start() -> impl Strategy<Value = u64> {
    prop_oneof![0..=MAX_PERIOD, 0..=1u64 << 50]
}

/// Key values spread over the type, 0 and the all-ones value among them.
fn u64_keys() -> Vec<u64> {
    let mut keys: Vec<u64> = (0..KEYS as u64 - 2)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    keys.extend([u64::MAX, 1]);
    keys
}

fn ipv6_keys() -> Vec<Ipv6Addr> {
    u64_keys()
        .into_iter()
        .map(|k| Ipv6Addr::from(u128::from(k) << 64 | u128::from(!k)))
        .collect()
}

/// Strings from 0 to 27 bytes, some differing only in trailing zero bytes
/// (which the length, not the padding, tells apart) or in the last byte.
fn short_keys() -> Vec<ShortKey> {
    let texts = [
        "",
        "\0",
        "\0\0",
        "a",
        "a\0",
        "a\0\0",
        "b",
        "user:1",
        "user:1\0",
        "tenant-42:user-0000001234",
        "exactly-twenty-seven-bytes!",
        "exactly-twenty-seven-bytes?",
    ];
    assert_eq!(texts.len(), KEYS);
    texts
        .iter()
        .map(|text| ShortKey::new(text).expect("short"))
        .collect()
}

fn ipv4_keys() -> Vec<Ipv4Addr> {
    u64_keys()
        .into_iter()
        .map(|k| Ipv4Addr::from(k as u32))
        .collect()
}

/// Runs `ops` on a compact limiter with room for exactly `KEYS` keys (one
/// shard of 14 slots: runs are long and wrap) and on one direct limiter per
/// key; every answer must be identical.
fn compact_matches_one_limiter_per_key<
    K: FixedKey + Debug,
    A: Algorithm<Cell = std::sync::atomic::AtomicU64> + Debug,
>(
    algorithm: A,
    keys: &[K],
    start: u64,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::starting_at(Nanos::new(start));
    let compact = CompactKeyedLimiter::<K, A>::builder(algorithm.clone(), KEYS)
        .clock(clock.clone())
        .sweep_every(None)
        .build()
        .expect("table");
    let direct: Vec<_> = keys
        .iter()
        .map(|_| Limiter::with_clock(algorithm.clone(), clock.clone()))
        .collect();
    let mut batch = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        match op {
            &Op::Check { key, cost } => {
                let (got, want) = if cost == 1 {
                    (Ok(compact.check(&keys[key])), Ok(direct[key].check()))
                } else {
                    (compact.check_n(&keys[key], cost), direct[key].check_n(cost))
                };
                prop_assert_eq!(got, want, "step {}: check_n({}, {})", step, key, cost);
            }
            &Op::Peek { key } => {
                prop_assert_eq!(
                    compact.peek(&keys[key]),
                    direct[key].peek(),
                    "step {}: peek({})",
                    step,
                    key
                );
            }
            Op::Batch(indices) => {
                let named: Vec<K> = indices.iter().map(|&i| keys[i]).collect();
                batch.clear();
                compact.check_batch(&named, &mut batch);
                prop_assert_eq!(batch.len(), named.len());
                for (n, (&i, got)) in indices.iter().zip(&batch).enumerate() {
                    prop_assert_eq!(
                        *got,
                        direct[i].check(),
                        "step {}: batch item {} (key {})",
                        step,
                        n,
                        i
                    );
                }
            }
            &Op::Advance(by) => clock.advance(Duration::from_nanos(by)),
            Op::Sweep => {
                compact.sweep();
            }
        }
        prop_assert!(compact.len() <= KEYS);
        prop_assert_eq!(compact.stats().overflowed, 0);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn gcra_u64_is_one_limiter_per_key(quota in quota(), start in start(), ops in ops()) {
        let gcra = Gcra::new(quota).expect("representable");
        compact_matches_one_limiter_per_key(gcra, &u64_keys(), start, &ops)?;
    }

    #[test]
    fn fixed_window_u64_is_one_limiter_per_key(quota in quota(), start in start(), ops in ops()) {
        let window = FixedWindow::new(quota).expect("representable");
        compact_matches_one_limiter_per_key(window, &u64_keys(), start, &ops)?;
    }

    #[test]
    fn gcra_ipv6_is_one_limiter_per_key(quota in quota(), start in start(), ops in ops()) {
        let gcra = Gcra::new(quota).expect("representable");
        compact_matches_one_limiter_per_key(gcra, &ipv6_keys(), start, &ops)?;
    }

    #[test]
    fn fixed_window_ipv4_is_one_limiter_per_key(quota in quota(), start in start(), ops in ops()) {
        let window = FixedWindow::new(quota).expect("representable");
        compact_matches_one_limiter_per_key(window, &ipv4_keys(), start, &ops)?;
    }

    #[test]
    fn gcra_short_string_is_one_limiter_per_key(quota in quota(), start in start(), ops in ops()) {
        let gcra = Gcra::new(quota).expect("representable");
        compact_matches_one_limiter_per_key(gcra, &short_keys(), start, &ops)?;
    }
}

fn one_per_second() -> Gcra {
    Gcra::new(Quota::per_second(1).expect("quota")).expect("gcra")
}

#[test]
fn a_full_table_decides_new_keys_on_the_overflow_state_until_a_sweep() {
    let clock = ManualClock::new();
    let limiter = CompactKeyedLimiter::<u64>::builder(one_per_second(), 2)
        .clock(clock.clone())
        .sweep_every(None)
        .build()
        .expect("table");
    assert!(limiter.check(&1).is_allowed());
    assert!(limiter.check(&2).is_allowed());
    // Full: keys 3 and 4 share one fresh state of the same quota.
    assert!(limiter.check(&3).is_allowed());
    assert!(limiter.check(&4).is_denied());
    // A live key is never evicted for a new one.
    assert!(limiter.check(&1).is_denied());
    assert_eq!(limiter.len(), 2);
    assert_eq!(limiter.stats().overflowed, 2);
    assert_eq!(limiter.sweep(), 0, "nothing is idle yet");
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.sweep(), 2);
    assert!(limiter.check(&3).is_allowed());
    assert!(
        limiter.check(&3).is_denied(),
        "key 3 has a state of its own now"
    );
    assert_eq!(limiter.len(), 1);
    assert_eq!(limiter.stats().evicted, 2);
}

#[test]
fn a_key_swept_at_a_later_reading_is_decided_no_earlier() {
    // The sweeper's reading runs ahead of the requester's: the recreated
    // key decides at the sweep's reading (see `KeyedLimiter`'s "Clocks that
    // go back"), so going back never re-credits it.
    let clock = ManualClock::new();
    let limiter = CompactKeyedLimiter::<u64>::builder(one_per_second(), 8)
        .clock(clock.clone())
        .sweep_every(None)
        .build()
        .expect("table");
    assert!(limiter.check(&9).is_allowed());
    clock.advance(Duration::from_secs(5));
    assert_eq!(limiter.sweep(), 1);
    assert!(limiter.check(&9).is_allowed());
    clock.set(Nanos::new(Duration::from_secs(3).as_nanos() as u64));
    let denied = limiter.check(&9);
    assert!(
        denied.is_denied(),
        "the admission at 5 s still counts at 3 s"
    );
    assert_eq!(denied.retry_after(), Duration::from_secs(3));
}

#[test]
fn costs_above_capacity_and_impossible_sizes_are_refused() {
    let limiter = CompactKeyedLimiter::<u64>::builder(one_per_second(), 8)
        .sweep_every(None)
        .build()
        .expect("table");
    assert!(limiter.check_n(&1, 2).is_err());
    assert!(limiter.is_empty(), "a refused cost creates no state");
    let none = CompactKeyedLimiter::<u64>::builder(one_per_second(), 0).build();
    assert!(none.is_err());
    let huge = CompactKeyedLimiter::<[u8; 16]>::builder(one_per_second(), usize::MAX).build();
    let message = huge.expect_err("no address space holds it").to_string();
    assert!(message.contains("cannot be allocated"), "{message}");
}

#[test]
fn many_keys_over_many_shards_each_get_their_own_state_and_all_are_swept() {
    let clock = ManualClock::new();
    let keys = 200_000u64;
    let limiter = CompactKeyedLimiter::<u64>::builder(one_per_second(), keys as usize)
        .clock(clock.clone())
        .sweep_every(None)
        .build()
        .expect("table");
    let per_key = limiter.table_bytes() as f64 / keys as f64;
    assert!((18.0..18.7).contains(&per_key), "{per_key} bytes a key");
    let all: Vec<u64> = (0..keys)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    let mut decisions = Vec::new();
    limiter.check_batch(&all, &mut decisions);
    assert!(decisions.iter().all(|d| d.is_allowed()));
    assert_eq!(limiter.len() as u64 + limiter.stats().overflowed, keys);
    // A shard may fill before the cap (module docs); at 7/8 on average it
    // is rare, and those keys shared the overflow state.
    assert!(
        limiter.stats().overflowed < keys / 1000,
        "{:?}",
        limiter.stats()
    );
    for key in all.iter().step_by(97) {
        let again = limiter.check(key);
        assert!(again.is_denied() || limiter.stats().overflowed > 0);
    }
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.sweep(), limiter.stats().evicted as usize);
    assert!(limiter.is_empty());
}

/// A table past the batch's in-cache size (1 MiB), where it touches each
/// probe's lines before deciding: its decisions are the single checks', a
/// key named several times in one batch and across batches included.
#[test]
fn batches_on_a_table_out_of_cache_decide_as_single_checks() {
    let clock = ManualClock::new();
    let keys = 100_000u64;
    let build = || {
        CompactKeyedLimiter::<u64>::builder(
            Gcra::new(
                Quota::per_second(1)
                    .and_then(|q| q.with_burst(2))
                    .expect("quota"),
            )
            .expect("gcra"),
            keys as usize,
        )
        .clock(clock.clone())
        .sweep_every(None)
        .build()
        .expect("table")
    };
    let (batched, single) = (build(), build());
    assert!(batched.table_bytes() > 1 << 20, "{}", batched.table_bytes());
    // Every key once, then draws with repeats (a key three times in a
    // row, and scattered), in calls of several groups.
    let mut named: Vec<u64> = (0..keys)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    let mut state = 7u64;
    for _ in 0..60_000 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        let key = ((state >> 33) % keys).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        named.push(key);
        if state % 17 == 0 {
            named.extend([key, key]);
        }
    }
    let mut decisions = Vec::new();
    let mut denied = 0;
    for call in named.chunks(1_000) {
        decisions.clear();
        batched.check_batch(call, &mut decisions);
        denied += decisions.iter().filter(|d| d.is_denied()).count();
        assert_eq!(decisions.len(), call.len());
        for (key, decision) in call.iter().zip(&decisions) {
            let expected = single.check(key);
            assert_eq!(
                (
                    decision.is_allowed(),
                    decision.remaining(),
                    decision.retry_after()
                ),
                (
                    expected.is_allowed(),
                    expected.remaining(),
                    expected.retry_after()
                ),
                "key {key}"
            );
        }
        clock.advance(Duration::from_millis(40));
    }
    assert_eq!(batched.len(), single.len());
    assert!(denied > 0, "the burst was reached");
}

/// Real threads on one table, half of them checking in batches, a sweeper
/// running throughout, the clock still: every key admits exactly its burst
/// in all, however the checks interleave, and the cap is never passed.
#[test]
fn threads_checking_singly_and_in_batches_admit_exactly_the_burst_per_key() {
    const KEYS: u64 = 4_000;
    const BURST: u64 = 5;
    const THREADS: u64 = 4;
    let clock = ManualClock::new();
    let quota = Quota::per_second(1)
        .and_then(|quota| quota.with_burst(BURST))
        .expect("quota");
    // Room for 3/4 of the keys: the rest go to the overflow state.
    let limiter = CompactKeyedLimiter::<u64>::builder(Gcra::new(quota).expect("gcra"), 3_000)
        .clock(clock.clone())
        .sweep_every(None)
        .build()
        .expect("table");
    let keys: Vec<u64> = (0..KEYS)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    let done = std::sync::atomic::AtomicBool::new(false);
    let admitted: Vec<Vec<u64>> = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                assert_eq!(limiter.sweep(), 0, "nothing turns idle on a still clock");
            }
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (limiter, keys) = (&limiter, &keys);
                scope.spawn(move || {
                    let mut admitted = vec![0u64; KEYS as usize];
                    let mut decisions = Vec::new();
                    // Each thread takes the keys in its own order, twice the
                    // burst in all, singly or in batches of 7.
                    let order: Vec<usize> = (0..2 * BURST as usize * KEYS as usize)
                        .map(|n| (n * (2 * thread as usize + 1) + thread as usize) % KEYS as usize)
                        .collect();
                    for group in order.chunks(7) {
                        let named: Vec<u64> = group.iter().map(|&i| keys[i]).collect();
                        if thread % 2 == 0 {
                            decisions.clear();
                            limiter.check_batch(&named, &mut decisions);
                        } else {
                            decisions = named.iter().map(|key| limiter.check(key)).collect();
                        }
                        for (&i, decision) in group.iter().zip(&decisions) {
                            admitted[i] += u64::from(decision.is_allowed());
                        }
                    }
                    admitted
                })
            })
            .collect();
        let admitted = workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        admitted
    });
    assert!(limiter.len() <= 3_000, "the cap: {:?}", limiter.stats());
    let mut own = 0;
    let mut total = 0;
    for key in 0..KEYS as usize {
        let per_key: u64 = admitted.iter().map(|thread| thread[key]).sum();
        total += per_key;
        // A key with a state of its own admitted exactly its burst; one
        // decided on the overflow state shared that state's burst.
        if limiter.peek(&keys[key]).is_denied() && per_key == BURST {
            own += 1;
        }
        assert!(per_key <= BURST, "key {key}: {per_key} admitted");
    }
    assert_eq!(
        own,
        limiter.len(),
        "every live key admitted exactly its burst"
    );
    // The overflow state admits its own burst once, shared.
    assert!(
        total <= BURST * limiter.len() as u64 + BURST,
        "{total} admitted"
    );
}

#[test]
fn charges_carry_a_debt_and_reservations_settle_on_their_key() {
    let clock = ManualClock::new();
    let window = FixedWindow::new(Quota::per_second(10).unwrap()).unwrap();
    let limiter = CompactKeyedLimiter::<u64, FixedWindow>::builder(window, 2)
        .clock(clock.clone())
        .sweep_every(None)
        .build()
        .expect("table");
    // A charge of 0 creates no state.
    let nothing = limiter.charge(&1, 0);
    assert_eq!((nothing.recorded(), limiter.len()), (0, 0));
    // 25 of 10: 15 carried into the next second, 5 into the one after.
    assert_eq!(limiter.charge(&1, 25).recorded(), 25);
    assert!(limiter.peek(&1).is_denied());
    clock.advance(Duration::from_secs(2));
    assert_eq!(limiter.check_n(&1, 0).unwrap().remaining(), 5);
    // Reserve 4, use 1: 3 come back, on key 1 only.
    let reserved = limiter.reserve_estimate(&1, 4).unwrap();
    assert_eq!((*reserved.key(), reserved.reserved()), (1, 4));
    let settled = reserved.settle(1);
    assert_eq!(settled.refunded(), 3);
    assert_eq!(limiter.check_n(&1, 0).unwrap().remaining(), 4);
    // Never above full; then idle, and swept.
    assert_eq!(limiter.refund(&1, 100).remaining(), 9);
    assert_eq!(limiter.sweep(), 1);
    // u64::MAX stops at the cap: the limit and 16 limits of debt.
    assert_eq!(limiter.charge(&2, u64::MAX).recorded(), 170);
    assert_eq!(limiter.charge(&3, 1).recorded(), 1);
    // The table is full: a new key's charge goes to the overflow state.
    let overflowed = limiter.charge(&4, 30);
    assert_eq!(overflowed.recorded(), 30);
    assert_eq!(limiter.stats().overflowed, 1);
    assert!(
        limiter.check(&5).is_denied(),
        "the overflow state is in debt"
    );
}
