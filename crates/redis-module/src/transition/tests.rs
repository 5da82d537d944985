//! The transitions on a [`Memory`] store: the scripts' answers and stored
//! states, step by step.

use super::*;
use crate::args::parse;
use crate::store::Memory;

fn decide(store: &mut Memory, args: &[&str], now_ns: i128) -> Result<Vec<i64>, String> {
    let call = parse(args).map_err(|e| e.0)?;
    run(&call, now_ns, 1, store)
}

/// 1 per 10 ns, burst 2: two admitted, the third waits 10 ns.
#[test]
fn gcra_admits_the_burst_then_denies_with_the_exact_retry() {
    let mut m = Memory::default();
    let call = ["k", "g", "1", "10", "20", M, "0", "c", "0", "1", "5", "0"];
    assert_eq!(decide(&mut m, &call, 0).unwrap(), [1, 1, 0, 1, 10, 0, 10]);
    assert_eq!(decide(&mut m, &call, 0).unwrap(), [1, 1, 0, 1, 0, 0, 20]);
    assert_eq!(decide(&mut m, &call, 0).unwrap(), [0, 0, 0, 0, 0, 10, 20]);
    // The stored state is the script's: the TAT modulo M, with its TTL.
    assert_eq!(m.strings[&0], (b"20".to_vec(), 1 + 5));
    assert_eq!(decide(&mut m, &call, 10).unwrap()[..2], [1, 1]);
}

/// Several limits: one denial takes nothing from the others.
#[test]
fn several_limits_are_all_or_nothing() {
    let mut m = Memory::default();
    let args = [
        "a", "g", "1", "10", "100", M, "0", // roomy
        "b", "f", "1000", "1", "0", "0", "0", // one per window
        "c", "0", "1", "0", "0",
    ];
    assert_eq!(decide(&mut m, &args, 0).unwrap()[0], 1);
    let before = m.strings.clone();
    let denied = decide(&mut m, &args, 1).unwrap();
    assert_eq!(denied[..2], [0, 0]);
    assert_eq!(m.strings, before, "a denial wrote");
}

/// The GCRA modulus in test mode at scale 1 (`9·10^15 / (1 · 1)`).
const M: &str = "9000000000000000";

/// Foreign values (as the scripts, `tollgate_redis::script`): garbage, a
/// number out of range or a count above the limit read as no state and
/// are overwritten by the next admission; never an error.
#[test]
fn a_foreign_state_reads_as_none_and_is_overwritten_on_admission() {
    let gcra = ["k", "g", "1", "10", "20", M, "0", "c", "5", "1", "0", "0"];
    for foreign in [&b"garbage"[..], b"20 0", b"-3", b"1.5", b"9000000000000000"] {
        let mut m = Memory::default();
        m.strings.insert(0, (foreign.to_vec(), 1));
        let reply = decide(&mut m, &gcra, 5).unwrap();
        assert_eq!(reply, [1, 1, 5, 1, 10, 0, 10], "{foreign:?}");
        assert_eq!(m.strings[&0].0, b"15", "{foreign:?}");
    }
    // What Lua's `tonumber` takes is a state: " 10 " and "1e1" are 10.
    for spelled in [&b" 10 "[..], b"1e1", b"0xa", b"10.0"] {
        let mut m = Memory::default();
        m.strings.insert(0, (spelled.to_vec(), 1));
        assert_eq!(
            decide(&mut m, &gcra, 5).unwrap()[..2],
            [1, 1],
            "{spelled:?}"
        );
        assert_eq!(m.strings[&0].0, b"20", "{spelled:?}");
    }
    let fixed = ["k", "f", "100", "2", "0", "0", "0", "c", "5", "1", "0", "0"];
    for foreign in [&b"0 x"[..], b"0  1", b"-1 1", b"0 1 "] {
        let mut m = Memory::default();
        m.strings.insert(0, (foreign.to_vec(), 1));
        assert_eq!(
            decide(&mut m, &fixed, 5).unwrap()[..5],
            [1, 1, 5, 1, 1],
            "{foreign:?}"
        );
        assert_eq!(m.strings[&0].0, b"0 1", "{foreign:?}");
    }
    let sliding = ["k", "s", "100", "4", "2", "0", "0", "c", "5", "1", "0", "0"];
    // ("t", "1"): a total that is not the sum of the slots (none here).
    for (field, value) in [("9", "1"), ("h", "-1"), ("x", "1"), ("t", "1")] {
        let mut m = Memory::default();
        m.hashes
            .insert(0, vec![(field.to_owned(), value.to_owned())]);
        assert_eq!(
            decide(&mut m, &sliding, 5).unwrap()[..5],
            [1, 1, 5, 1, 1],
            "{field}"
        );
        let mut hash = m.hashes[&0].clone();
        hash.sort();
        let want = [("0", "1"), ("h", "0"), ("t", "1")].map(|(f, v)| (f.to_owned(), v.to_owned()));
        assert_eq!(hash, want, "{field}: the foreign hash was not replaced");
    }
}

/// A window in debt (a count above the limit, a wheel's debt field) is
/// the scripts' to decide: an error that writes nothing, never a window
/// read as empty.
#[test]
fn a_window_in_debt_is_deferred_to_the_scripts() {
    let fixed = ["k", "f", "100", "2", "0", "0", "0", "c", "5", "1", "0", "0"];
    let mut m = Memory::default();
    m.strings.insert(0, (b"0 3".to_vec(), 1));
    assert_eq!(decide(&mut m, &fixed, 5), Err(DEFER.to_owned()));
    assert_eq!(m.strings[&0].0, b"0 3");
    let sliding = ["k", "s", "100", "4", "2", "0", "0", "c", "5", "1", "0", "0"];
    for (field, value) in [("t", "3"), ("d", "1"), ("0", "3")] {
        let mut m = Memory::default();
        m.hashes
            .insert(0, vec![(field.to_owned(), value.to_owned())]);
        assert_eq!(
            decide(&mut m, &sliding, 5),
            Err(DEFER.to_owned()),
            "{field}"
        );
        assert_eq!(m.hashes[&0].len(), 1, "{field}: written");
    }
}

/// An allow-listed key is admitted, counting nothing, and reports a look
/// at the states its list holds aside (the scripts' `listed_reply`):
/// the look's answer where it would admit; else 0 remaining for the
/// binding denial (the longest retry), full for the others, each reset
/// as the denial reports it. Nothing is written, and a refund changes
/// nothing.
#[test]
fn an_allow_listed_key_reports_a_look_at_what_its_list_holds_aside() {
    let args = [
        "a", "g", "1", "10", "20", M, "0", // 2 per 20 ns
        "b", "f", "100", "2", "0", "0", "0", // 2 per 100 ns
        "c", "10", "1", "5", "0",
    ];
    let listed = |held: [&str; 2]| {
        let mut m = Memory::default();
        m.strings.insert(0, (b"!a".to_vec(), 7));
        m.held.insert(0, held[0].as_bytes().to_vec());
        m.held.insert(1, held[1].as_bytes().to_vec());
        m
    };
    // Debt 5 of 20 and 1 of 2: the look admits.
    let mut m = listed(["15", "0 1"]);
    let reply = decide(&mut m, &args, 10).unwrap();
    assert_eq!(reply, [1, 0, 10, 1, 5, 0, 15, 1, 0, 0, 90]);
    // Debt 40 (retry 30) and a full window (retry 90): the window binds.
    let mut m = listed(["50", "0 2"]);
    let reply = decide(&mut m, &args, 10).unwrap();
    assert_eq!(reply, [1, 0, 10, 1, 20, 0, 40, 1, 0, 0, 90]);
    assert_eq!(m.strings.len(), 1, "written");
    assert_eq!(m.strings[&0], (b"!a".to_vec(), 7), "written");
    // Nothing aside: the look at a fresh key.
    let mut m = listed(["", ""]);
    m.held.clear();
    assert_eq!(
        decide(&mut m, &args, 10).unwrap(),
        [1, 0, 10, 1, 10, 0, 10, 1, 1, 0, 90]
    );
    let mut refund = args;
    refund[14] = "r";
    assert_eq!(decide(&mut m, &refund, 10).unwrap(), [1, 0, 10]);
    assert_eq!(m.strings.len(), 1, "written");
}

/// The sliding window counter: 2 per 100 ns in 4 slots.
#[test]
fn sliding_window_counts_across_slots() {
    let mut m = Memory::default();
    let call = ["k", "s", "100", "4", "2", "0", "0", "c", "0", "1", "0", "0"];
    assert_eq!(decide(&mut m, &call, 0).unwrap()[..2], [1, 1]);
    assert_eq!(decide(&mut m, &call, 30).unwrap()[..2], [1, 1]);
    let denied = decide(&mut m, &call, 60).unwrap();
    // The first slot leaves the window at 100.
    assert_eq!(denied[..2], [0, 0]);
    assert_eq!(denied[5], 40);
    assert_eq!(decide(&mut m, &call, 100).unwrap()[..2], [1, 1]);
}
