//! Regression: `KeyedLimiter<CompactString>`, string keys stored inline, used
//! through `&str` everywhere a `KeyedLimiter<String>` is (the key bound
//! `K: Borrow<Q> + From<Q::Owned>`), with the same decisions.

use std::borrow::Borrow;
use std::hash::Hash;
use std::time::Duration;

use tollgate::{Carry, CompactString, Gcra, KeyedLimiter, ManualClock, Quota};

fn two_per_second() -> Gcra {
    Gcra::new(Quota::per_second(2).unwrap()).unwrap()
}

fn limiter<K>(clock: &ManualClock) -> KeyedLimiter<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    KeyedLimiter::builder(two_per_second())
        .clock(clock.clone())
        .sweep_every(None)
        .build()
}

/// Every request method's answer for `key`, in order.
fn answers<K>(keyed: &KeyedLimiter<K>, key: &str) -> Vec<String>
where
    K: Borrow<str> + From<String> + Hash + Eq + Send + Sync + 'static,
{
    vec![
        keyed.peek(key).to_string(),
        keyed.acquire(key).to_string(),
        keyed.check_n(key, 1).unwrap().to_string(),
        keyed.check(key).to_string(),
        keyed.peek_n(key, 1).unwrap().to_string(),
        keyed.charge_n(key, 1).to_string(),
    ]
}

/// Every request method, by `&str`, on inline keys and on `String` keys:
/// the same answers, short keys, an override and a key too long to be
/// inline alike.
#[test]
fn compact_string_keys_decide_as_string_keys_do() {
    let clock = ManualClock::new();
    let inline: KeyedLimiter<CompactString> = limiter(&clock);
    let heap: KeyedLimiter<String> = limiter(&clock);
    let ten = Gcra::new(Quota::per_second(10).unwrap()).unwrap();
    inline.set_override(CompactString::from("admin"), ten.clone(), Carry::Keep);
    heap.set_override("admin".to_string(), ten, Carry::Keep);
    for key in [
        "user:00001234",
        "admin",
        "a key longer than twenty-four bytes",
    ] {
        assert_eq!(answers(&inline, key), answers(&heap, key), "{key}");
    }
    assert!(inline.check("user:00001234").is_denied());
    assert!(inline.remove_override("admin", Carry::Keep));
    assert_eq!(inline.len(), 3);
    clock.advance(Duration::from_secs(10));
    assert_eq!(inline.sweep(), 3);
}
