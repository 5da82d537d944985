//! The controls of `tollgate::control` per key on `KeyedLimiter`, on a
//! manual clock: reset, refund, penalty, bounded deny / allow lists,
//! dry-run and observers with keys.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::control::ControlError;
use tollgate::observe::{Event, List, Observer, Outcome};
use tollgate::{FixedWindow, Gcra, KeyedLimiter, ManualClock, Quota, SlidingLog};

const NEVER: Duration = Duration::from_nanos(u64::MAX);

fn limiter(clock: &ManualClock) -> KeyedLimiter<String> {
    KeyedLimiter::builder(Gcra::new(Quota::per_second(4).unwrap()).unwrap())
        .clock(clock.clone())
        .sweep_every(None)
        .build()
}

#[derive(Default)]
struct Recorder {
    keys: bool,
    events: Mutex<Vec<(String, Outcome, Option<String>)>>,
}

impl Observer for Recorder {
    fn on_decision(&self, event: &Event<'_>) {
        self.events.lock().unwrap().push((
            event.limit.to_owned(),
            event.outcome,
            event.key.map(|k| k.to_string()),
        ));
    }
    fn wants_keys(&self) -> bool {
        self.keys
    }
}

#[test]
fn reset_and_refund_touch_one_key_only() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    assert!(limiter.check_n("a", 4).unwrap().is_allowed());
    assert!(limiter.check_n("b", 4).unwrap().is_allowed());
    assert_eq!(limiter.refund("a", 1).remaining(), 1);
    assert_eq!(limiter.refund("a", 100).remaining(), 4);
    assert!(limiter.check("b").is_denied());
    assert_eq!(limiter.reset("b").remaining(), 4);
    assert_eq!(limiter.reset("b").remaining(), 4);
    assert!(limiter.check_n("b", 4).unwrap().is_allowed());
    // Unknown keys: full, nothing created.
    assert_eq!(limiter.refund("nobody", 3).remaining(), 4);
    assert_eq!(limiter.reset("nobody").remaining(), 4);
    assert_eq!(limiter.len(), 2);
}

#[test]
fn refund_per_algorithm_on_keys() {
    let clock = ManualClock::new();
    let windows: KeyedLimiter<u32, FixedWindow> =
        KeyedLimiter::builder(FixedWindow::new(Quota::per_minute(10).unwrap()).unwrap())
            .clock(clock.clone())
            .sweep_every(None)
            .build();
    assert_eq!(windows.check_n(&1, 6).unwrap().remaining(), 4);
    assert_eq!(windows.refund(&1, 2).remaining(), 6);
    let logs: KeyedLimiter<u32, SlidingLog> =
        KeyedLimiter::builder(SlidingLog::new(Quota::per_minute(3).unwrap()).unwrap())
            .clock(clock.clone())
            .sweep_every(None)
            .build();
    assert!(logs.check_n(&1, 3).unwrap().is_allowed());
    assert!(logs.check(&1).is_denied());
    assert_eq!(logs.refund(&1, 1).remaining(), 1);
    assert!(logs.check(&1).is_allowed());
    assert!(logs.check(&1).is_denied());
}

#[test]
fn penalty_per_key_only_extends_and_ends_full() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    assert!(limiter.check_n("a", 3).unwrap().is_allowed());
    let boxed = limiter.penalize("a", Duration::from_secs(10)).unwrap();
    assert_eq!(
        (
            boxed.is_denied(),
            boxed.remaining(),
            boxed.retry_after(),
            boxed.reset_after()
        ),
        (true, 0, Duration::from_secs(10), Duration::from_secs(10))
    );
    assert!(limiter.check("b").is_allowed());
    assert!(limiter.check("a").is_denied());
    assert!(limiter.peek("a").is_denied());
    // Shorter: nothing changes; zero: a no-op.
    let same = limiter.penalize("a", Duration::from_secs(1)).unwrap();
    assert_eq!(same.retry_after(), Duration::from_secs(10));
    let _ = limiter.penalize("a", Duration::ZERO).unwrap();
    clock.advance(Duration::from_secs(4));
    assert_eq!(limiter.check("a").retry_after(), Duration::from_secs(6));
    // Charges count nothing in the box.
    let _ = limiter.charge_n("a", 4);
    clock.advance(Duration::from_secs(6));
    // Ended: full.
    assert!(limiter.check_n("a", 4).unwrap().is_allowed());
    // Past the clock's end: never.
    let forever = limiter.penalize("c", Duration::MAX).unwrap();
    assert_eq!(
        (forever.retry_after(), forever.reset_after()),
        (NEVER, NEVER)
    );
    // Reset cancels.
    assert_eq!(limiter.reset("c").remaining(), 4);
    assert!(limiter.check("c").is_allowed());
}

#[test]
fn lists_decide_before_limits_and_penalties_and_are_bounded() {
    let clock = ManualClock::new();
    let limiter: KeyedLimiter<String> =
        KeyedLimiter::builder(Gcra::new(Quota::per_second(4).unwrap()).unwrap())
            .clock(clock.clone())
            .sweep_every(None)
            .max_controlled(2)
            .build();
    limiter.deny("mallory").unwrap();
    let denied = limiter.check("mallory");
    assert_eq!(
        (
            denied.is_denied(),
            denied.remaining(),
            denied.retry_after(),
            denied.reset_after()
        ),
        (true, 0, NEVER, NEVER)
    );
    limiter.allow("ci").unwrap();
    for _ in 0..100 {
        let allowed = limiter.check_n("ci", 4).unwrap();
        assert!(allowed.is_allowed());
        assert_eq!(allowed.remaining(), 0);
    }
    // A cost above capacity is still an error.
    assert!(limiter.check_n("ci", 5).is_err());
    // Full: a typed error, never a silent drop.
    assert_eq!(limiter.deny("eve"), Err(ControlError::Full { max: 2 }));
    assert_eq!(
        limiter.penalize("eve", Duration::from_secs(1)),
        Err(ControlError::Full { max: 2 })
    );
    assert!(limiter.check("eve").is_allowed());
    // Moving between lists stays within the cap.
    limiter.deny("ci").unwrap();
    assert_eq!(limiter.listed("ci"), Some(List::Deny));
    assert_eq!(limiter.unlist("ci"), Some(List::Deny));
    assert_eq!(limiter.unlist("ci"), None);
    // Counted nothing while listed.
    assert_eq!(limiter.check_n("ci", 4).unwrap().remaining(), 0);
    // Room again.
    limiter.deny("eve").unwrap();
    // Lists come before penalties.
    limiter.unlist("eve");
    let _ = limiter.penalize("eve", Duration::from_secs(5)).unwrap();
    limiter.allow("eve").unwrap();
    assert!(limiter.check("eve").is_allowed());
    limiter.unlist("eve");
    assert!(limiter.check("eve").is_denied());
    // Ended penalties make room.
    clock.advance(Duration::from_secs(5));
    limiter.unlist("mallory");
    limiter.deny("a").unwrap();
    limiter.deny("b").unwrap();
}

#[test]
fn observers_see_outcomes_and_keys_only_when_asked() {
    let clock = ManualClock::new();
    let with_keys = Arc::new(Recorder {
        keys: true,
        ..Recorder::default()
    });
    let limiter: KeyedLimiter<String> =
        KeyedLimiter::builder(Gcra::new(Quota::per_second(1).unwrap()).unwrap())
            .clock(clock.clone())
            .sweep_every(None)
            .name("per-user")
            .observer_with_keys(with_keys.clone())
            .build();
    assert!(limiter.check("alice").is_allowed());
    assert!(limiter.check("alice").is_denied());
    let _ = limiter.peek("alice");
    let _ = limiter.charge_n("alice", 1);
    limiter.deny("bob").unwrap();
    assert!(limiter.check("bob").is_denied());
    limiter.set_dry_run(true);
    assert!(limiter.check("alice").is_denied());
    assert!(limiter.check("bob").is_denied());
    let events = with_keys.events.lock().unwrap();
    let seen: Vec<(Outcome, Option<&str>)> = events.iter().map(|e| (e.1, e.2.as_deref())).collect();
    assert_eq!(
        seen,
        [
            (Outcome::Allowed, Some("alice")),
            (Outcome::Denied, Some("alice")),
            (Outcome::Listed(List::Deny), Some("bob")),
            (Outcome::Shadow, Some("alice")),
            (Outcome::Shadow, Some("bob")),
        ]
    );
    assert!(events.iter().all(|e| e.0 == "per-user"));

    let without = Arc::new(Recorder::default());
    let limiter: KeyedLimiter<u64> =
        KeyedLimiter::builder(Gcra::new(Quota::per_second(1).unwrap()).unwrap())
            .clock(clock)
            .sweep_every(None)
            .observer(without.clone())
            .dry_run(true)
            .build();
    assert!(limiter.is_dry_run());
    let _ = limiter.check(&7);
    let _ = limiter.check(&7);
    let events = without.events.lock().unwrap();
    assert_eq!(
        events
            .iter()
            .map(|e| (e.1, e.2.clone()))
            .collect::<Vec<_>>(),
        [(Outcome::Allowed, None), (Outcome::Shadow, None)]
    );
}

/// `copy_controls_to`: lists and running penalties (with the time they have
/// left) move to a limiter of another algorithm; an ended penalty does not;
/// past the target's cap the copy is an error, never a silent drop.
#[test]
fn controls_copy_to_a_limiter_of_another_algorithm() {
    let clock = ManualClock::new();
    let from = limiter(&clock);
    from.deny("mallory").unwrap();
    from.allow("vip").unwrap();
    let _ = from.penalize("slow", Duration::from_secs(10)).unwrap();
    let _ = from.penalize("forever", Duration::MAX).unwrap();
    let _ = from.penalize("ended", Duration::from_secs(1)).unwrap();
    clock.advance(Duration::from_secs(4));

    let to: KeyedLimiter<String, FixedWindow> =
        KeyedLimiter::builder(FixedWindow::new(Quota::per_minute(2).unwrap()).unwrap())
            .clock(clock.clone())
            .build();
    assert_eq!(from.copy_controls_to(&to), Ok(4));
    assert_eq!(to.listed("mallory"), Some(List::Deny));
    assert_eq!(to.listed("vip"), Some(List::Allow));
    assert!(to.check("mallory").is_denied());
    for _ in 0..5 {
        assert!(to.check("vip").is_allowed());
    }
    // 10 s of penalty, 4 s of which had passed: 6 s left.
    let slow = to.check("slow");
    assert!(slow.is_denied());
    assert_eq!(slow.retry_after(), Duration::from_secs(6));
    assert_eq!(
        to.check("forever").retry_after(),
        Duration::from_nanos(u64::MAX)
    );
    assert!(to.check("ended").is_allowed());
    clock.advance(Duration::from_secs(6));
    assert!(to.check("slow").is_allowed());
    assert!(to.check("forever").is_denied());

    // A target whose cap is smaller than the controls: an error.
    let small: KeyedLimiter<String, FixedWindow> =
        KeyedLimiter::builder(FixedWindow::new(Quota::per_minute(2).unwrap()).unwrap())
            .clock(clock.clone())
            .max_controlled(1)
            .build();
    assert!(matches!(
        from.copy_controls_to(&small),
        Err(ControlError::Full { max: 1 })
    ));
}
