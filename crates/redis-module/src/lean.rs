//! `TOLLGATE.LEAN`: one GCRA or fixed window limit, a check or a peek,
//! answered as the lean scripts answer (`gcra.lua`, `fixed.lua`; see
//! `tollgate_redis::script`, "The lean reply").
//!
//! # Why a second command
//!
//! Pipelined, most of what a decision costs Redis is not the decision but
//! the command around it: reading its arguments and writing its reply.
//! `TOLLGATE.DECIDE` answers the general 7-number array; the lean reply is
//! one integer, from which the client rebuilds that array with the numbers
//! it sent (`tollgate_redis::script::expand_lean`). Measured with
//! `redis-benchmark -P 64` (`BENCHMARKS.md`), that one change is what takes
//! the module's pipelined rate above redis-cell's.
//!
//! The reply of `TOLLGATE.DECIDE` stays the general one, so that a client
//! that predates this command reads every module it meets; a client uses
//! `TOLLGATE.LEAN` only where it detected it (see `tollgate_redis::module`).
//!
//! # Contract
//!
//! The arguments are `TOLLGATE.DECIDE`'s for one limit (`key alg a1 a2 a3 a4
//! x op now cost slack stamp`) with `alg` `g` or `f` and `op` `c` or `p`
//! ([`parse_lean`](crate::args::parse_lean)); any other call is an error
//! reply that writes nothing. The transitions, stored states and TTLs are
//! `TOLLGATE.DECIDE`'s ([`transition`]); only the reply's
//! form differs, and only where the lean scripts' differs:
//!
//! - GCRA: admitted, the reset (the debt after the call, ticks); denied,
//!   `-1 - debt`.
//! - Fixed window: `headroom · (period + 1) + left` (`left`, the window's
//!   time left in clock units), `-1 -` that for a denial, where it is exact:
//!   `(limit + 1) · (period + 1) < 2^53` and `left ≤ period`; elsewhere the
//!   general array.
//! - A control's marker: the general array, as the scripts answer it.

use crate::args::{Call, Op, Params};
use crate::controls::Marked;
use crate::store::Store;
use crate::transition::{self, Clock, State, Verdict, clamp};

/// 2^53: the lean scripts' exact range.
const EXACT: i128 = 1 << 53;

/// What `TOLLGATE.LEAN` answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The compact reply: one integer, its sign the decision.
    Compact(i64),
    /// The general array (a marker's answer, an inexact window).
    General(Vec<i64>),
}

/// Decides `call` (parsed by [`parse_lean`](crate::args::parse_lean)) over
/// `store` at `now` (clock units of `unit` ns), writes what it takes, and
/// answers as the lean scripts do.
///
/// # Errors
///
/// A call that is not one limit (the parser refuses it first), or the
/// store's read errors, as [`transition::run`].
pub fn run(call: &Call, now: i128, unit: i128, store: &mut dyn Store) -> Result<Reply, String> {
    let [limit] = call.limits.as_slice() else {
        return Err("ERR tollgate: TOLLGATE.LEAN decides one limit".to_owned());
    };
    let clock = Clock::of(call, now, unit);
    let mut state = transition::load(store, 0, &limit.params, &clock)?;
    match crate::controls::marked(call, now, unit, store, |_| transition::blank(&state)) {
        Some(Marked::Reply(reply)) => return Ok(Reply::General(reply)),
        Some(Marked::Listed) => {
            return Ok(Reply::General(transition::listed(
                call, store, &clock, call.cost,
            )?));
        }
        None => {}
    }
    let verdict = transition::decide(&limit.params, &state, &clock, call.cost);
    let allowed = verdict[0] == 1;
    let check = call.op == Op::Check;
    if allowed && check {
        transition::admit(store, 0, &limit.params, &mut state, &clock, call.cost);
    }
    if let Some(v) = compact(&limit.params, &state, &verdict, unit) {
        return Ok(Reply::Compact(v));
    }
    let taken = if allowed && check { call.cost } else { 0 };
    let mut reply = vec![clamp(verdict[0]), clamp(taken), clamp(now)];
    reply.extend(verdict.map(clamp));
    Ok(Reply::General(reply))
}

/// The compact reply for `verdict`, if exact (see the [module docs](self)).
fn compact(params: &Params, state: &State, verdict: &Verdict, unit: i128) -> Option<i64> {
    let [allowed, headroom, _, reset] = *verdict;
    let v = match (*params, state) {
        // Admitted, the reset is the debt after the call; denied, the debt.
        (Params::Gcra { .. }, State::Gcra { .. }) => reset,
        (Params::Fixed { period, limit }, State::Fixed { until_next, .. }) => {
            let left = until_next / unit;
            let span = period + 1;
            if left > period || (limit + 1) * span >= EXACT {
                return None;
            }
            headroom * span + left
        }
        _ => return None,
    };
    i64::try_from(if allowed == 1 { v } else { -1 - v }).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{parse, parse_lean};
    use crate::lean_cases;
    use crate::store::Memory;
    use tollgate_redis::script::{Lean, expand_lean};

    const M: &str = "9000000000000000";

    /// The client's reading of a compact reply for `params` (the call's
    /// `check`, `cost` and `now`): what `tollgate-redis` does with it.
    fn expand(v: i64, params: &Params, check: bool, cost: i64, now: i64) -> Vec<i64> {
        let shape = match *params {
            Params::Gcra {
                interval, capacity, ..
            } => Lean::Gcra {
                interval: u64::try_from(interval).unwrap(),
                capacity: u64::try_from(capacity).unwrap(),
            },
            Params::Fixed { period, limit } => Lean::Fixed {
                period: u64::try_from(period).unwrap(),
                limit: u64::try_from(limit).unwrap(),
                unit_nanos: 1,
            },
            Params::Sliding { .. } | Params::WarmUp(_) => {
                unreachable!("no lean sliding window or warm-up")
            }
        };
        let cost = u64::try_from(cost).unwrap();
        expand_lean(&[v], shape, check, cost, now).expect("a reply the client reads")
    }

    /// `TOLLGATE.LEAN` and `TOLLGATE.DECIDE` on two stores, the same calls:
    /// the lean reply reads back as the general one and both stores hold the
    /// same state after every step, for each shape; returns how many steps
    /// answered in the compact form.
    fn agree(limit: [&str; 5], steps: &[(&str, i128, i64)]) -> usize {
        let (mut lean, mut general) = (Memory::default(), Memory::default());
        let mut compact = 0;
        for (i, &(op, now, cost)) in steps.iter().enumerate() {
            let (now_s, cost_s) = (now.to_string(), cost.to_string());
            let mut args = vec!["k"];
            args.extend(limit);
            args.extend(["0", op, &now_s, &cost_s, "5", "0"]);
            let call = parse_lean(&args).unwrap();
            let want = transition::run(&parse(&args).unwrap(), now, 1, &mut general).unwrap();
            let got = match run(&call, now, 1, &mut lean).unwrap() {
                Reply::Compact(v) => {
                    compact += 1;
                    expand(v, &call.limits[0].params, op == "c", cost, now as i64)
                }
                Reply::General(reply) => reply,
            };
            assert_eq!(got, want, "step {i}: {op} at {now}, cost {cost}");
            assert_eq!(lean.strings, general.strings, "step {i}: the states differ");
        }
        compact
    }

    /// The lean scripts' own off-vector cases (`tollgate-redis`'s
    /// `tests/scenarios/lean_cases.rs`, which its parity and module tests
    /// replay against Redis): GCRA steps all compact; the fixed window
    /// compact only where exact ((limit + 1) · (period + 1) past 2^53, or a
    /// stored window ahead of a clock that stepped back, answer the general
    /// array).
    #[test]
    fn the_lean_reply_reads_back_as_the_general_one_and_is_compact_only_where_exact() {
        for (case, compact) in lean_cases::cases().iter().zip(lean_cases::COMPACT) {
            let steps: Vec<(&str, i128, i64)> = case
                .steps
                .iter()
                .map(|&(op, now, cost)| (op, i128::from(now), i64::try_from(cost).unwrap()))
                .collect();
            assert_eq!(agree(case.limit, &steps), compact, "{}", case.name);
        }
    }

    #[test]
    fn a_marker_is_answered_in_the_general_form() {
        let mut store = Memory::default();
        store.strings.insert(0, (b"!d".to_vec(), 100));
        let args = ["k", "g", "1", "100", "500", M, "0", "c", "0", "1", "5", "0"];
        let reply = run(&parse_lean(&args).unwrap(), 0, 1, &mut store).unwrap();
        assert_eq!(reply, Reply::General(vec![0, 0, 0, 0, 0, -1, -1]));
    }

    #[test]
    fn other_shapes_are_refused() {
        let two = [
            "a", "g", "1", "100", "500", M, "0", "b", "f", "10", "1", "0", "0", "0", "c", "0", "1",
            "5", "0",
        ];
        let sliding = [
            "k", "s", "1000", "10", "5", "0", "0", "c", "0", "1", "5", "0",
        ];
        let lease = ["k", "g", "1", "100", "500", M, "0", "l", "0", "1", "5", "0"];
        for args in [&two[..], &sliding, &lease] {
            let error = parse_lean(args).unwrap_err().0;
            assert!(error.contains("TOLLGATE.LEAN"), "{error}");
        }
        // What both commands refuse, the lean one refuses the same way.
        let bad = [
            "k", "g", "1", "100", "500", M, "0", "c", "0", "-2", "5", "0",
        ];
        assert_eq!(parse_lean(&bad), Err(parse(&bad).unwrap_err()));
    }
}
