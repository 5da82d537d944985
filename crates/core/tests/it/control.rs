//! The controls of `tollgate::control` on the plain `Limiter`, on a manual
//! clock: reset, refund, penalty, deny / allow lists, dry-run, observers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::observe::{Event, List, Observer, Outcome};
use tollgate::{FixedWindow, Gcra, Limiter, ManualClock, Quota, SlidingLog, SlidingWindow};

const NEVER: Duration = Duration::from_nanos(u64::MAX);

fn quota() -> Quota {
    Quota::per_second(4).unwrap()
}

/// Records (limit, outcome, cost) of every event.
#[derive(Default)]
struct Recorder(Mutex<Vec<(String, Outcome, u64)>>);

impl Observer for Recorder {
    fn on_decision(&self, event: &Event<'_>) {
        self.0
            .lock()
            .unwrap()
            .push((event.limit.to_owned(), event.outcome, event.cost));
    }
}

impl Recorder {
    fn outcomes(&self) -> Vec<Outcome> {
        self.0.lock().unwrap().iter().map(|e| e.1).collect()
    }
}

/// Every algorithm, as a closure that runs `test` on a fresh limiter of it.
fn each_algorithm(test: impl Fn(&str, &dyn Fn() -> Box<dyn Probe>)) {
    let clock = ManualClock::new();
    test("gcra", &|| {
        Box::new(Limiter::with_clock(
            Gcra::new(quota()).unwrap(),
            clock.clone(),
        ))
    });
    test("fixed", &|| {
        Box::new(Limiter::with_clock(
            FixedWindow::new(quota()).unwrap(),
            clock.clone(),
        ))
    });
    test("log", &|| {
        Box::new(Limiter::with_clock(
            SlidingLog::new(quota()).unwrap(),
            clock.clone(),
        ))
    });
    test("wheel", &|| {
        Box::new(Limiter::with_clock(
            SlidingWindow::new(quota(), 4).unwrap(),
            clock.clone(),
        ))
    });
}

/// The limiter's methods, whatever its algorithm.
trait Probe {
    fn check_n(&self, cost: u64) -> tollgate::Decision;
    fn peek(&self) -> tollgate::Decision;
    fn refund(&self, n: u64) -> tollgate::Decision;
    fn reset(&self) -> tollgate::Decision;
    fn penalize(&self, d: Duration) -> tollgate::Decision;
    fn deny(&self);
    fn allow(&self);
    fn unlist(&self) -> Option<List>;
    fn charge_n(&self, cost: u64) -> tollgate::Decision;
}

impl<A: tollgate::Algorithm> Probe for Limiter<A, ManualClock> {
    fn check_n(&self, cost: u64) -> tollgate::Decision {
        Limiter::check_n(self, cost).unwrap()
    }
    fn peek(&self) -> tollgate::Decision {
        Limiter::peek(self)
    }
    fn refund(&self, n: u64) -> tollgate::Decision {
        Limiter::refund(self, n)
    }
    fn reset(&self) -> tollgate::Decision {
        Limiter::reset(self)
    }
    fn penalize(&self, d: Duration) -> tollgate::Decision {
        Limiter::penalize(self, d)
    }
    fn deny(&self) {
        Limiter::deny(self)
    }
    fn allow(&self) {
        Limiter::allow(self)
    }
    fn unlist(&self) -> Option<List> {
        Limiter::unlist(self)
    }
    fn charge_n(&self, cost: u64) -> tollgate::Decision {
        Limiter::charge_n(self, cost)
    }
}

#[test]
fn reset_drops_the_state_and_is_idempotent() {
    each_algorithm(|name, make| {
        let limiter = make();
        assert!(limiter.check_n(4).is_allowed(), "{name}");
        assert!(limiter.check_n(1).is_denied(), "{name}");
        assert_eq!(limiter.reset().remaining(), 4, "{name}");
        assert_eq!(limiter.reset().remaining(), 4, "{name}");
        assert!(limiter.check_n(4).is_allowed(), "{name}");
    });
}

#[test]
fn refund_gives_back_never_above_full() {
    each_algorithm(|name, make| {
        let limiter = make();
        // On a full state: nothing changes.
        assert_eq!(limiter.refund(3).remaining(), 4, "{name}");
        assert!(limiter.check_n(3).is_allowed(), "{name}");
        assert_eq!(limiter.refund(2).remaining(), 3, "{name}");
        assert_eq!(limiter.refund(u64::MAX).remaining(), 4, "{name}");
        assert!(limiter.check_n(4).is_allowed(), "{name}");
        assert!(limiter.check_n(1).is_denied(), "{name}");
        // A refund of 0 gives nothing.
        assert_eq!(limiter.refund(0).remaining(), 0, "{name}");
    });
}

#[test]
fn penalty_denies_counting_nothing_then_the_key_is_full() {
    each_algorithm(|name, make| {
        let limiter = make();
        assert!(limiter.check_n(2).is_allowed(), "{name}");
        let boxed = limiter.penalize(Duration::from_secs(10));
        assert!(boxed.is_denied(), "{name}");
        assert_eq!(boxed.remaining(), 0, "{name}");
        assert_eq!(boxed.retry_after(), Duration::from_secs(10), "{name}");
        // The state was dropped: the time to full after the penalty is 0.
        assert_eq!(boxed.reset_after(), Duration::from_secs(10), "{name}");
        for _ in 0..10 {
            assert!(limiter.check_n(1).is_denied(), "{name}");
        }
        // A shorter penalty changes nothing.
        assert_eq!(
            limiter.penalize(Duration::from_secs(1)).retry_after(),
            Duration::from_secs(10),
            "{name}"
        );
        // Zero is a no-op.
        assert_eq!(
            limiter.penalize(Duration::ZERO).retry_after(),
            Duration::from_secs(10),
            "{name}"
        );
        // A reset cancels it.
        assert_eq!(limiter.reset().remaining(), 4, "{name}");
        assert!(limiter.check_n(4).is_allowed(), "{name}");
    });
}

#[test]
fn penalty_ends_on_time_with_a_full_state() {
    let clock = ManualClock::new();
    let limiter = Limiter::with_clock(Gcra::new(quota()).unwrap(), clock.clone());
    assert!(limiter.check_n(4).unwrap().is_allowed());
    let _ = limiter.penalize(Duration::from_secs(5));
    clock.advance(Duration::from_nanos(4_999_999_999));
    let last = limiter.check();
    assert!(last.is_denied());
    assert_eq!(last.retry_after(), Duration::from_nanos(1));
    clock.advance(Duration::from_nanos(1));
    // Full: the whole burst at once.
    assert!(limiter.check_n(4).unwrap().is_allowed());
    // A longer penalty extends a running one.
    let _ = limiter.penalize(Duration::from_secs(1));
    let _ = limiter.penalize(Duration::from_secs(3));
    assert_eq!(limiter.check().retry_after(), Duration::from_secs(3));
}

#[test]
fn a_penalty_past_the_end_of_the_clock_is_never() {
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1));
    let limiter = Limiter::with_clock(FixedWindow::new(quota()).unwrap(), clock.clone());
    let boxed = limiter.penalize(Duration::MAX);
    assert_eq!((boxed.retry_after(), boxed.reset_after()), (NEVER, NEVER));
    clock.advance(Duration::from_secs(1_000_000));
    assert_eq!(limiter.check().retry_after(), NEVER);
}

#[test]
fn lists_come_before_limits_and_penalties() {
    each_algorithm(|name, make| {
        let limiter = make();
        limiter.deny();
        let denied = limiter.check_n(1);
        assert!(denied.is_denied(), "{name}");
        assert_eq!(
            (
                denied.remaining(),
                denied.retry_after(),
                denied.reset_after()
            ),
            (0, NEVER, NEVER),
            "{name}"
        );
        // Counted nothing.
        limiter.allow();
        for _ in 0..10 {
            let allowed = limiter.check_n(3);
            assert!(allowed.is_allowed(), "{name}");
            // As a peek of the same cost sees it, nothing taken.
            assert_eq!(allowed.remaining(), 1, "{name}");
        }
        // Allowed even in a penalty; the penalty applies once unlisted.
        let _ = limiter.penalize(Duration::from_secs(1));
        assert!(limiter.check_n(1).is_allowed(), "{name}");
        assert_eq!(limiter.unlist(), Some(List::Allow), "{name}");
        assert!(limiter.check_n(1).is_denied(), "{name}");
        assert_eq!(limiter.unlist(), None, "{name}");
        let _ = limiter.reset();
        // Charges while listed count nothing.
        limiter.allow();
        let _ = limiter.charge_n(4);
        let _ = limiter.penalize(Duration::from_secs(1));
        let _ = limiter.charge_n(4);
        limiter.unlist();
        let _ = limiter.reset();
        // Neither charge was recorded: the whole capacity is there.
        assert!(limiter.check_n(4).is_allowed(), "{name}");
        assert!(limiter.peek().is_denied(), "{name}");
    });
}

#[test]
fn observers_see_each_decision_with_its_outcome() {
    let clock = ManualClock::new();
    let recorder = Arc::new(Recorder::default());
    let limiter = Limiter::builder(Gcra::new(Quota::per_second(1).unwrap()).unwrap())
        .clock(clock.clone())
        .name("login")
        .observer(recorder.clone())
        .build();
    assert!(limiter.check().is_allowed());
    assert!(limiter.check().is_denied());
    // Not reported: peeks, charges, controls, costs above capacity.
    let _ = limiter.peek();
    let _ = limiter.charge_n(1);
    let _ = limiter.refund(1);
    assert!(limiter.check_n(2).is_err());
    limiter.deny();
    assert!(limiter.check_n(0).unwrap().is_denied());
    limiter.allow();
    assert!(limiter.check().is_allowed());
    limiter.unlist();
    let _ = limiter.penalize(Duration::from_secs(1));
    assert!(limiter.check().is_denied());
    limiter.set_dry_run(true);
    assert!(limiter.check().is_denied());
    let _ = limiter.reset();
    assert!(limiter.check().is_allowed());
    assert!(limiter.check().is_denied());
    assert_eq!(
        recorder.outcomes(),
        [
            Outcome::Allowed,
            Outcome::Denied,
            Outcome::Listed(List::Deny),
            Outcome::Listed(List::Allow),
            Outcome::Penalized,
            Outcome::Shadow,
            Outcome::Allowed,
            Outcome::Shadow,
        ]
    );
    let events = recorder.0.lock().unwrap();
    assert!(events.iter().all(|e| e.0 == "login"));
    assert_eq!(events[2].2, 0);
}

#[test]
fn dry_run_decides_and_counts_as_usual() {
    let clock = ManualClock::new();
    let shadow = Limiter::builder(Gcra::new(quota()).unwrap())
        .clock(clock.clone())
        .dry_run(true)
        .build();
    let real = Limiter::with_clock(Gcra::new(quota()).unwrap(), clock.clone());
    assert!(shadow.is_dry_run() && !real.is_dry_run());
    for cost in [1, 3, 2, 1, 4] {
        let (a, b) = (shadow.check_n(cost).unwrap(), real.check_n(cost).unwrap());
        assert_eq!(
            (
                a.is_allowed(),
                a.remaining(),
                a.retry_after(),
                a.reset_after()
            ),
            (
                b.is_allowed(),
                b.remaining(),
                b.retry_after(),
                b.reset_after()
            )
        );
        clock.advance(Duration::from_millis(100));
    }
    shadow.set_dry_run(false);
    assert!(!shadow.is_dry_run());
}

#[test]
fn set_algorithm_carries_the_state_by_the_carry_rule() {
    use tollgate::Carry;
    let clock = ManualClock::new();
    let q = |n| Quota::per_second(n).unwrap();
    let window = Limiter::with_clock(FixedWindow::new(q(4)).unwrap(), clock.clone());
    assert!(window.check_n(3).unwrap().is_allowed());
    window.set_algorithm(FixedWindow::new(q(8)).unwrap(), Carry::Keep);
    assert_eq!(window.quota().limit(), 8);
    assert_eq!(window.peek_n(0).unwrap().remaining(), 5);
    // A cost above the old capacity is fine now.
    assert!(window.check_n(5).unwrap().is_allowed());
    window.set_algorithm(FixedWindow::new(q(2)).unwrap(), Carry::Keep);
    assert!(window.check().is_denied());
    assert!(window.check_n(3).is_err());
    window.set_algorithm(FixedWindow::new(q(4)).unwrap(), Carry::Reset);
    assert_eq!(window.check_n(4).unwrap().remaining(), 0);

    let gcra = Limiter::with_clock(Gcra::new(q(4)).unwrap(), clock.clone());
    assert!(gcra.check_n(2).unwrap().is_allowed());
    gcra.set_algorithm(Gcra::new(q(8)).unwrap(), Carry::Proportional);
    // Half taken stays half taken.
    assert_eq!(gcra.peek_n(0).unwrap().remaining(), 4);
    // The controls keep working on the current state.
    assert_eq!(gcra.refund(4).remaining(), 8);
    let _ = gcra.penalize(Duration::from_secs(1));
    assert!(gcra.check().is_denied());
    clock.advance(Duration::from_secs(1));
    assert_eq!(gcra.check_n(8).unwrap().remaining(), 0);

    let log = Limiter::with_clock(SlidingLog::new(q(4)).unwrap(), clock.clone());
    assert!(log.check_n(4).unwrap().is_allowed());
    log.set_algorithm(SlidingLog::new(q(6)).unwrap(), Carry::Keep);
    assert_eq!(log.check_n(2).unwrap().remaining(), 0);
    assert!(log.check().is_denied());
}

/// A request that read the old state as the algorithm changed decides on
/// the state taken out of it: it must be refused, never counted there.
#[test]
fn a_taken_cell_is_closed_for_ever() {
    use tollgate::{Algorithm, AllOf, Nanos};
    fn closed<A: Algorithm>(name: &str, algorithm: A) {
        let cell = algorithm.new_cell();
        assert!(algorithm.check_cell(&cell, Nanos::new(5), 1).is_allowed());
        let taken = algorithm.take_cell(&cell);
        // The state moved out intact.
        assert!(
            algorithm.peek_cell(&taken, Nanos::new(5), 0).remaining() < algorithm.capacity(),
            "{name}"
        );
        for now in [0, 5, 1 << 40, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
            let denied = algorithm.check_cell(&cell, Nanos::new(now), 1);
            assert!(denied.is_denied(), "{name} at {now}");
            assert_eq!(denied.retry_after(), NEVER, "{name} at {now}");
        }
    }
    closed("gcra", Gcra::new(quota()).unwrap());
    closed("fixed", FixedWindow::new(quota()).unwrap());
    closed("log", SlidingLog::new(quota()).unwrap());
    for slots in [1, 3, 4] {
        closed("wheel", SlidingWindow::new(quota(), slots).unwrap());
    }
    closed(
        "all of",
        AllOf::new(vec![
            Gcra::new(quota()).unwrap(),
            Gcra::new(Quota::per_minute(10).unwrap()).unwrap(),
        ])
        .unwrap(),
    );
}
