//! Regression: the controls agree with the core's (`KeyedLimiter`'s reset,
//! refund and penalty) in every state, a state in debt included: the same
//! seeded schedule of checks, looks, charges into debt, refunds, resets and
//! penalties on a manual clock, every answer compared field by field, for
//! every algorithm the scripts store and for two limits of one key. The
//! refund read a window in debt (a count past its limit, a wheel's `d`
//! field) as no state and gave nothing back, and gave back nothing from a
//! fixed window's count carried into the current window, where the core
//! gives back from both. Lists are in the schedule too: listing a key
//! dropped its state (a debt included) and its penalty, so that a key
//! unlisted came back full where the core's came back as it was; and an
//! allow-listed key's decision reported the limit's full capacity where
//! the core's reports a look at the state it keeps aside (its remaining,
//! 0 if the look would be refused, and its reset_after): every field of
//! a listed key's decision is compared too.

use std::time::Duration;

use tollgate::algorithm::any::AnyAlgorithm;
use tollgate::algorithm::{Algorithm, DEBT_PERIODS};
use tollgate::{AllOf, FixedWindow, Gcra, KeyedLimiter, ManualClock, Nanos, Quota};
use tollgate::{SlidingWindow, WarmUp};
use tollgate_redis::{CalendarUnit, CalendarWindow, Limit, Redis};

use crate::support;
use crate::support::Connect as _;

const SEC: u64 = 1_000_000_000;

/// A seeded generator (SplitMix64): the schedule is the same every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

fn per(limit: u64, period: Duration) -> Quota {
    Quota::new(limit, period).unwrap()
}

/// Runs `steps` seeded steps on the core's `algorithm` and on Redis's
/// `limits` side by side; `period` scales the clock's steps, `capacity`
/// the costs. Returns the refunds that gave back into a debt, and the
/// looks at an allow-listed key whose state kept aside was not full.
#[allow(clippy::too_many_arguments)]
async fn replay<A: Algorithm>(
    redis: &Redis,
    name: &str,
    algorithm: A,
    limits: &[Limit],
    period: u64,
    capacity: u64,
    steps: usize,
    seed: u64,
) -> (u32, u32) {
    // Unix ns below 2^53 (test mode): 1970-01-05 10:20, a Monday.
    let clock = ManualClock::starting_at(Nanos::new(4 * 86_400 * SEC + 37_200 * SEC));
    let core = KeyedLimiter::<String, A>::builder(algorithm)
        .clock(clock.clone())
        .build();
    let mut b = support::on_manual_clock(redis, name, &clock);
    for l in limits {
        b = b.limit(l.clone());
    }
    let remote = b.build().unwrap();
    let warm_up = limits.iter().any(|l| matches!(l, Limit::WarmUp(_)));
    let key = "k";
    let mut rng = Rng(seed);
    let mut refunds_in_debt = 0;
    let mut listed_not_full = 0;
    for i in 0..steps {
        let at = tollgate::Clock::now(&clock).as_u64();
        let what = rng.below(100);
        let step = if what < 30 {
            let cost = [1, 1, 2, capacity / 2 + 1][rng.below(4) as usize];
            let (want, got) = (core.check_n(key, cost), remote.check_n(key, cost).await);
            assert_eq!(
                got.map(|d| support::fields(&d)).ok(),
                want.map(|d| support::fields(&d)).ok(),
                "{name} step {i} at {at}: check {cost}"
            );
            "check"
        } else if what < 42 && !warm_up {
            let cost = match rng.below(8) {
                0 => capacity * (DEBT_PERIODS + 2),
                1..=3 => capacity + 1 + rng.below(2 * capacity),
                _ => 1 + rng.below(capacity),
            };
            let _ = core.charge(key, cost);
            remote.charge_outcome(key, cost).await.unwrap();
            "charge"
        } else if what < 62 {
            let n = [1, 1, 2, capacity, capacity * 3][rng.below(5) as usize];
            if core.peek_n(key, 0).is_ok_and(|d| d.is_denied()) {
                refunds_in_debt += 1;
            }
            let _ = core.refund(key, n);
            remote.refund(key, n).await.unwrap();
            "refund"
        } else if what < 66 {
            let _ = core.reset(key);
            remote.reset(key).await.unwrap();
            "reset"
        } else if what < 70 {
            let d = Duration::from_nanos(1 + rng.below(period));
            let _ = core.penalize(key, d).unwrap();
            remote.penalize(key, d).await.unwrap();
            "penalty"
        } else if what < 75 {
            // Listed a while: the key's state (a debt included) and its
            // penalty are kept, and back once unlisted.
            if rng.below(2) == 0 {
                core.deny(key).unwrap();
                remote.deny(key).await.unwrap();
            } else {
                core.allow(key).unwrap();
                remote.allow(key).await.unwrap();
            }
            "listing"
        } else if what < 80 {
            let _ = core.unlist(key);
            remote.unlist(key).await.unwrap();
            "unlisting"
        } else {
            let by = match rng.below(6) {
                0 => period * (1 + rng.below(4)),
                1 | 2 => period / 2 + rng.below(period),
                _ => 1 + rng.below(period / 6),
            };
            clock.advance(Duration::from_nanos(by));
            "wait"
        };
        for look in [0, 1] {
            let want = core.peek_n(key, look).map(|d| support::fields(&d)).ok();
            if look == 0
                && core.listed(key) == Some(tollgate::observe::List::Allow)
                && want.is_some_and(|d| d.2 < capacity)
            {
                listed_not_full += 1;
            }
            let got = remote
                .peek_n(key, look)
                .await
                .map(|d| support::fields(&d))
                .ok();
            assert_eq!(
                got, want,
                "{name} step {i} at {at}: peek {look} after a {step}"
            );
        }
    }
    // Every algorithm listed once in a known state: spent in part, then
    // past its limit (a charge's debt, or a warm-up's wait), each look's
    // and each check's whole decision compared.
    let _ = core.unlist(key);
    remote.unlist(key).await.unwrap();
    let _ = core.reset(key);
    remote.reset(key).await.unwrap();
    for phase in 0..2 {
        if phase == 0 {
            let cost = capacity / 2 + 1;
            let (want, got) = (core.check_n(key, cost), remote.check_n(key, cost).await);
            assert_eq!(
                got.map(|d| support::fields(&d)).ok(),
                want.map(|d| support::fields(&d)).ok()
            );
        } else if !warm_up {
            let _ = core.charge(key, 3 * capacity);
            remote.charge_outcome(key, 3 * capacity).await.unwrap();
        } else {
            clock.advance(Duration::from_nanos(period / 8));
            let (want, got) = (core.check_n(key, 1), remote.check_n(key, 1).await);
            assert_eq!(
                got.map(|d| support::fields(&d)).ok(),
                want.map(|d| support::fields(&d)).ok()
            );
        }
        core.allow(key).unwrap();
        remote.allow(key).await.unwrap();
        for cost in [0, 1, capacity] {
            let want = core.peek_n(key, cost).map(|d| support::fields(&d)).ok();
            let got = remote
                .peek_n(key, cost)
                .await
                .map(|d| support::fields(&d))
                .ok();
            assert_eq!(got, want, "{name} listed, phase {phase}: peek {cost}");
            listed_not_full += u32::from(want.is_some_and(|d| d.2 < capacity));
            let want = core.check_n(key, cost).map(|d| support::fields(&d)).ok();
            let got = remote
                .check_n(key, cost)
                .await
                .map(|d| support::fields(&d))
                .ok();
            assert_eq!(got, want, "{name} listed, phase {phase}: check {cost}");
        }
        let _ = core.unlist(key);
        remote.unlist(key).await.unwrap();
    }
    (refunds_in_debt, listed_not_full)
}

/// Every algorithm, and several limits of one key: the core's controls'
/// answers at every step, refunds into debt reached.
#[tokio::test]
async fn controls_decide_as_the_core_in_every_state() {
    let server = support::Server::start();
    let redis = server.connect().await;
    let min = Duration::from_secs(60);
    let gcra = Gcra::new(per(10, min).with_burst(5).unwrap()).unwrap();
    let fixed = FixedWindow::new(per(10, min)).unwrap();
    let wheel = SlidingWindow::new(per(10, min), 4).unwrap();
    let hour = CalendarWindow::new(CalendarUnit::Hour, 8).unwrap();
    let warm = WarmUp::new(
        Quota::per_second(4).unwrap().with_burst(4).unwrap(),
        Duration::from_secs(2),
    )
    .unwrap();
    let both = AllOf::new(vec![
        AnyAlgorithm::Gcra(gcra.clone()),
        AnyAlgorithm::SlidingWindow(wheel.clone()),
    ])
    .unwrap();
    let cases: Vec<(&str, AnyAlgorithm, Vec<Limit>, u64, u64)> = vec![
        (
            "gcra",
            AnyAlgorithm::Gcra(gcra.clone()),
            vec![gcra.clone().into()],
            60 * SEC,
            5,
        ),
        (
            "fixed",
            AnyAlgorithm::FixedWindow(fixed.clone()),
            vec![fixed.into()],
            60 * SEC,
            10,
        ),
        (
            "sliding",
            AnyAlgorithm::SlidingWindow(wheel.clone()),
            vec![wheel.clone().into()],
            60 * SEC,
            10,
        ),
        (
            "calendar",
            AnyAlgorithm::Calendar(hour.clone()),
            vec![hour.into()],
            3_600 * SEC,
            8,
        ),
        (
            "warm",
            AnyAlgorithm::WarmUp(warm.clone()),
            vec![warm.into()],
            SEC,
            4,
        ),
    ];
    let mut in_debt = Vec::new();
    for (n, (name, algorithm, limits, period, capacity)) in cases.into_iter().enumerate() {
        let refunds = replay(
            &redis,
            name,
            algorithm,
            &limits,
            period,
            capacity,
            250,
            n as u64 + 1,
        )
        .await;
        in_debt.push((name, refunds));
    }
    // Several limits of one key: the core's AllOf.
    let limits = [Limit::from(gcra), Limit::from(wheel)];
    let refunds = replay(&redis, "both", both, &limits, 60 * SEC, 5, 250, 9).await;
    in_debt.push(("both", refunds));
    assert!(
        in_debt
            .iter()
            .filter(|(name, _)| *name != "warm")
            .all(|(_, (n, _))| *n > 3),
        "refunds while refused: {in_debt:?}"
    );
    // An allow-listed key's decision was compared where it is not the
    // limit's full capacity.
    assert!(
        in_debt.iter().all(|(_, (_, listed))| *listed >= 4),
        "allow-listed looks short of full: {in_debt:?}"
    );
}
