//! `TOLLGATE.CHARGE`: a budget's charge on GCRA limits (`tollgate-redis`'s
//! `charge.lua`): `cost` permits recorded whether or not they fit, into
//! debt, atomically over every limit of one key, answered with the state
//! after the charge in the same command.
//!
//! # Contract
//!
//! `TOLLGATE.CHARGE (key g scale interval capacity m cap)×m h now cost
//! slack stamp`: `TOLLGATE.DECIDE`'s arguments (the same layout, checks and
//! key specification) with the operation `h`, as the charge script takes
//! `decide.lua`'s with op `h`; each limit's `x` is its debt cap in ticks,
//! which the client computes (the core's `capacity + DEBT_PERIODS · limit ·
//! interval`). The reply is the charge script's:
//!
//! ```text
//! {fitted, recorded, allowed, 0, now, (allowed_i, headroom_i, retry_i, reset_i)×m}
//! ```
//!
//! - `fitted`: 1 when every limit's debt is within its capacity after the
//!   charge, 0 when the charge went over (recorded anyway), -1 when a key
//!   holds a control's marker (a list, a penalty in force: nothing is
//!   charged);
//! - `recorded`: the fewest permits a limit recorded (the rest reached its
//!   cap), 0 under a marker;
//! - then `TOLLGATE.DECIDE`'s reply to a peek of one permit on the states
//!   after the charge (the core's `Charge::decision`), or under a marker
//!   the marker's reply (`crate::controls`), as the script's `verdicts(1)`
//!   and `marked_reply`.
//!
//! So a charge's outcome is one round trip, and no other client's request
//! can land between the charge and the state it reports. Only GCRA limits:
//! any other algorithm is an error reply, and the client sends those
//! charges to the scripts (window debts are the scripts' alone, see
//! [`transition`]).
//!
//! The module of this shape registers `TOLLGATE.VERSION` (see
//! [`crate::VERSION`]); an earlier `TOLLGATE.CHARGE` answered
//! `{fitted, recorded}` alone. Clients tell the two apart by that command
//! before they send a charge (`tollgate_redis::module`, "Charges").
//!
//! # Model and guarantee
//!
//! The state is `TOLLGATE.DECIDE`'s GCRA state (the TAT in ticks modulo
//! `M`), so that checks and peeks of the same keys, by the module or the
//! scripts, read the debt. Per limit, the debt `d` (ticks ahead of now)
//! takes the most whole permits of the charge that end within the cap:
//!
//! ```text
//! most     = min(cap, M − 2·10^15)        (what the state reads back)
//! recorded = min(cost, ⌊(most − d) / interval⌋)      (0 if d ≥ most)
//! d'       = d + recorded · interval
//! ```
//!
//! the core's `Gcra::charge`, so that repeated charges never hold more than
//! the cap and never wrap to a fresh bucket. Every key is read (and the
//! markers checked) before any is written; a limit that records nothing is
//! not written.

use crate::args::{ArgError, Call, Op, Params, parse_any};
use crate::controls::Marked;
use crate::store::Store;
use crate::transition::{self, Clock, State};

/// The debt the GCRA state reads back: below `M − 2·10^15` ticks.
const READABLE: i128 = 2_000_000_000_000_000;

/// Parses the arguments of `TOLLGATE.CHARGE` (without the command name).
///
/// # Errors
///
/// As [`crate::args::parse`], an operation other than `h`, a limit that
/// is not GCRA.
pub fn parse<A: AsRef<[u8]>>(args: &[A]) -> Result<Call, ArgError> {
    let call = parse_any(args, "tollgate.charge")?;
    if call.op != Op::Charge {
        return Err(ArgError(
            "ERR tollgate: TOLLGATE.CHARGE takes the operation 'h'".to_owned(),
        ));
    }
    if !call
        .limits
        .iter()
        .all(|l| matches!(l.params, Params::Gcra { .. }))
    {
        return Err(ArgError(
            "ERR tollgate: TOLLGATE.CHARGE charges GCRA limits only".to_owned(),
        ));
    }
    Ok(call)
}

/// Charges `call` (parsed by [`parse`]) over `store` at `now` (clock units
/// of `unit` ns): the reply `{fitted, recorded}` then the state after the
/// charge as a peek of one permit reads it (see the module docs).
///
/// # Errors
///
/// The store's read errors, before anything is written.
pub fn run(call: &Call, now: i128, unit: i128, store: &mut dyn Store) -> Result<Vec<i64>, String> {
    let clock = Clock::of(call, now, unit);
    let mut states = Vec::with_capacity(call.limits.len());
    for (i, limit) in call.limits.iter().enumerate() {
        states.push(transition::load(store, i, &limit.params, &clock)?);
    }
    let blank = |i: usize| transition::blank(&states[i]);
    match crate::controls::marked(call, now, unit, store, blank) {
        Some(Marked::Reply(reply)) => return Ok(with(-1, 0, &reply)),
        Some(Marked::Listed) => {
            return Ok(with(-1, 0, &transition::listed(call, store, &clock, 1)?));
        }
        None => {}
    }
    let (mut fitted, mut fewest) = (1, call.cost);
    for (i, (limit, state)) in call.limits.iter().zip(&states).enumerate() {
        let (
            Params::Gcra {
                scale,
                interval,
                capacity,
                ..
            },
            State::Gcra { debt, cur, modulus },
        ) = (limit.params, state)
        else {
            // The parser takes GCRA limits only.
            return Err("ERR tollgate: TOLLGATE.CHARGE charges GCRA limits only".to_owned());
        };
        let most = limit.x.min(modulus - READABLE);
        let room = if *debt < most {
            (most - debt) / interval
        } else {
            0
        };
        let recorded = call.cost.min(room);
        let after = debt + recorded * interval;
        if after > capacity {
            fitted = 0;
        }
        fewest = fewest.min(recorded);
        if recorded > 0 {
            transition::gcra_store(store, i, &clock, scale, (*cur, *modulus), after);
        }
    }
    // The states after the charge, read back as the script reads them.
    for (i, limit) in call.limits.iter().enumerate() {
        states[i] = transition::load(store, i, &limit.params, &clock)?;
    }
    let after = transition::verdicts(call, &states, &clock, 1);
    Ok(with(fitted, transition::clamp(fewest), &after))
}

/// `{fitted, recorded}` then `after` (a decision's reply).
fn with(fitted: i64, recorded: i64, after: &[i64]) -> Vec<i64> {
    let mut reply = Vec::with_capacity(2 + after.len());
    reply.extend([fitted, recorded]);
    reply.extend_from_slice(after);
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Memory;

    /// The GCRA modulus in test mode at scale 1.
    const M: &str = "9000000000000000";

    /// 1 per 10 ns (limit 1 a period of 10), burst 2: capacity 20 ticks,
    /// the core's cap 20 + 16·10 = 180. Returns `{fitted, recorded}`,
    /// having checked that the rest of the reply is `TOLLGATE.DECIDE`'s
    /// peek of one permit on the state after the charge.
    fn charge(m: &mut Memory, cost: &str, now: i128) -> Vec<i64> {
        let args = [
            "k", "g", "1", "10", "20", M, "180", "h", "0", cost, "5", "0",
        ];
        let call = parse(&args).unwrap();
        let reply = run(&call, now, 1, m).unwrap();
        let peek = ["k", "g", "1", "10", "20", M, "180", "p", "0", "1", "5", "0"];
        let peek = crate::args::parse(&peek).unwrap();
        let after = transition::run(&peek, now, 1, m).unwrap();
        assert_eq!(reply[2..], after[..], "a charge of {cost} at {now}");
        reply[..2].to_vec()
    }

    /// The whole reply: the charge, then the state after it (a peek of one
    /// permit: its retry and reset are the debt's).
    #[test]
    fn the_reply_carries_the_state_after_the_charge() {
        let mut m = Memory::default();
        let args = ["k", "g", "1", "10", "20", M, "180", "h", "0", "2", "5", "0"];
        let call = parse(&args).unwrap();
        // 20 ticks of debt: full, one more permit in 10, back to full in 20.
        assert_eq!(
            run(&call, 7, 1, &mut m).unwrap(),
            [1, 2, 0, 0, 7, 0, 0, 10, 20]
        );
        // 40 ticks, over: one more permit in 30.
        assert_eq!(
            run(&call, 7, 1, &mut m).unwrap(),
            [0, 2, 0, 0, 7, 0, 0, 30, 40]
        );
        // A charge of one within the burst: one permit left after it.
        let mut m = Memory::default();
        let args = ["k", "g", "1", "10", "20", M, "180", "h", "0", "1", "5", "0"];
        let call = parse(&args).unwrap();
        assert_eq!(
            run(&call, 7, 1, &mut m).unwrap(),
            [1, 1, 1, 0, 7, 1, 0, 0, 20]
        );
    }

    #[test]
    fn a_charge_fits_then_goes_into_debt_up_to_the_cap() {
        let mut m = Memory::default();
        assert_eq!(charge(&mut m, "2", 0), [1, 2]);
        assert_eq!(m.strings[&0].0, b"20");
        assert_eq!(charge(&mut m, "3", 0), [0, 3]);
        assert_eq!(m.strings[&0].0, b"50");
        // 10^15 permits: only up to the cap, 180 ticks ahead.
        assert_eq!(charge(&mut m, "1000000000000000", 0), [0, 13]);
        assert_eq!(m.strings[&0].0, b"180");
        // Repeated charges stay at the cap; the debt is repaid with time.
        assert_eq!(charge(&mut m, "1", 0), [0, 0]);
        assert_eq!(m.strings[&0].0, b"180");
        assert_eq!(charge(&mut m, "1", 100), [0, 1]);
        assert_eq!(m.strings[&0].0, b"190", "80 ahead of 100, then 10 more");
        assert_eq!(
            m.strings[&0].1,
            1 + 5,
            "the TTL: the debt's ms, rounded up, plus the slack"
        );
    }

    #[test]
    fn a_marker_is_not_charged_and_other_algorithms_are_refused() {
        let mut m = Memory::default();
        m.strings.insert(0, (b"!d".to_vec(), 1));
        assert_eq!(charge(&mut m, "5", 0), [-1, 0]);
        // The marker's reply follows: denied, "never" (checked against the
        // peek by `charge`).
        let args = ["k", "g", "1", "10", "20", M, "180", "h", "0", "5", "5", "0"];
        let call = parse(&args).unwrap();
        assert_eq!(
            run(&call, 0, 1, &mut m).unwrap(),
            [-1, 0, 0, 0, 0, 0, 0, -1, -1]
        );
        assert_eq!(m.strings[&0].0, b"!d");
        // An allow-listed key: not charged, the look of one permit at what
        // the list holds aside (debt 10 of 20: admitted, 0 left).
        let mut listed = Memory::default();
        listed.strings.insert(0, (b"!a".to_vec(), 1));
        listed.held.insert(0, b"10".to_vec());
        let reply = run(&call, 0, 1, &mut listed).unwrap();
        assert_eq!(reply, [-1, 0, 1, 0, 0, 1, 0, 0, 20]);
        assert_eq!(listed.strings[&0].0, b"!a");
        // A penalty past its end is no marker: charged, as by the script.
        m.strings.insert(0, (b"!p0".to_vec(), 1));
        assert_eq!(charge(&mut m, "1", 5), [1, 1]);
        assert_eq!(m.strings[&0].0, b"15");
        let window = ["k", "f", "10", "2", "0", "0", "34", "h", "0", "1", "5", "0"];
        assert!(parse(&window).unwrap_err().0.contains("GCRA"));
        let check = ["k", "g", "1", "10", "20", M, "180", "c", "0", "1", "5", "0"];
        assert!(parse(&check).unwrap_err().0.contains("'h'"));
        // And TOLLGATE.DECIDE does not charge.
        let charge = ["k", "g", "1", "10", "20", M, "180", "h", "0", "1", "5", "0"];
        assert!(
            crate::args::parse(&charge)
                .unwrap_err()
                .0
                .contains("CHARGE")
        );
    }
}
