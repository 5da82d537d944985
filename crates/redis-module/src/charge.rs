//! `TOLLGATE.CHARGE`: a budget's charge on GCRA limits (`tollgate-redis`'s
//! `charge.lua`): `cost` permits recorded whether or not they fit, into
//! debt, atomically over every limit of one key.
//!
//! # Contract
//!
//! `TOLLGATE.CHARGE (key g scale interval capacity m limit)×m now cost
//! slack`: each key in front of its GCRA limit, as for `TOLLGATE.DECIDE`
//! (the same checks of `scale interval capacity m`, key specification
//! `(1, −4, 7)`), with the quota's `limit` (permits per period) in the place
//! of the refund value, then the call's clock (empty: the server's, in µs;
//! else ns, the test mode), cost and TTL slack (ms, at most a day). Reply
//! `{1}`: the charge fitted every limit; `{0}`: it went over (recorded
//! anyway); `{-1}`: a key holds a control's marker (a list, a penalty) and
//! nothing is charged. Any other algorithm is an error reply: the client
//! sends window charges to the scripts.
//!
//! # Model and guarantee
//!
//! The state is `TOLLGATE.DECIDE`'s GCRA state (the TAT in ticks modulo
//! `M`), so that checks and peeks of the same keys, by the module or the
//! scripts, read the debt. Per limit, the debt `d` (ticks ahead of now)
//! takes the most whole permits of the charge that end within the cap:
//!
//! ```text
//! cap      = min(capacity + DEBT_PERIODS · limit · interval,  M − 2·10^15)
//! recorded = min(cost, ⌊(cap − d) / interval⌋)        (0 if d ≥ cap)
//! d'       = d + recorded · interval
//! ```
//!
//! the core's `Gcra::charge` (the TAT never past `now + burst·T +
//! DEBT_PERIODS · limit · T`), bounded by what the state reads back as a
//! debt, so that repeated charges never hold more than the cap and never
//! wrap to a fresh bucket. The charge fitted iff every limit recorded all
//! of it within its capacity. Every key is read (and the markers checked)
//! before any is written; a limit that records nothing is not written.

use crate::args::{ArgError, Call, LimitArgs, Op, Params, STRIDE, gcra, number, positive};
use crate::store::Store;
use crate::transition::{self, Clock, State};

/// How many periods of its quota a limit may owe beyond full: the core's
/// `tollgate::algorithm::DEBT_PERIODS` (a test checks they agree).
pub const DEBT_PERIODS: i128 = 16;
/// The call's own values after the limits: `now cost slack`.
pub const TAIL: usize = 3;
/// The debt the GCRA state reads back: below `M − 2·10^15` ticks.
const READABLE: i128 = 2_000_000_000_000_000;

/// Parses the arguments of `TOLLGATE.CHARGE` (without the command name)
/// into a [`Call`]: op [`Op::Check`] (unused), stamp 0, each limit's `x`
/// its quota's limit.
///
/// # Errors
///
/// A wrong arity, a limit that is not GCRA, a value out of bounds.
pub fn parse<A: AsRef<[u8]>>(args: &[A]) -> Result<Call, ArgError> {
    if args.len() < STRIDE + TAIL || (args.len() - TAIL) % STRIDE != 0 {
        return Err(ArgError(
            "ERR wrong number of arguments for 'tollgate.charge' command".to_owned(),
        ));
    }
    let m = (args.len() - TAIL) / STRIDE;
    let tail = &args[m * STRIDE..];
    let now = match tail[0].as_ref() {
        b"" => None,
        raw => Some(number("now", raw)?),
    };
    let cost = number("cost", tail[1].as_ref())?;
    let slack = number("slack", tail[2].as_ref())?;
    if slack > 86_400_000 {
        return Err(ArgError(
            "ERR tollgate: slack must be at most one day".to_owned(),
        ));
    }
    let unit = if now.is_some() { 1 } else { 1_000 };
    let mut limits = smallvec::SmallVec::with_capacity(m);
    for limit in args[..m * STRIDE].chunks_exact(STRIDE) {
        let a = |i: usize| limit[2 + i].as_ref();
        if limit[1].as_ref() != b"g" {
            return Err(ArgError(format!(
                "ERR tollgate: TOLLGATE.CHARGE charges GCRA limits only, got '{}'",
                String::from_utf8_lossy(limit[1].as_ref())
            )));
        }
        limits.push(LimitArgs {
            params: gcra(unit, a(0), a(1), a(2), a(3))?,
            x: positive("limit", limit[6].as_ref())?,
        });
    }
    Ok(Call {
        op: Op::Check,
        now,
        cost,
        slack,
        stamp: 0,
        limits,
    })
}

/// Charges `call` (parsed by [`parse`]) over `store` at `now` (clock units
/// of `unit` ns): the reply `{1}`, `{0}` or `{-1}` (see the module docs).
///
/// # Errors
///
/// The store's read errors, before anything is written.
pub fn run(call: &Call, now: i128, unit: i128, store: &mut dyn Store) -> Result<Vec<i64>, String> {
    let clock = Clock::of(call, now, unit);
    let mut states = Vec::with_capacity(call.limits.len());
    for (i, limit) in call.limits.iter().enumerate() {
        let state = transition::load(store, i, &limit.params, &clock)?;
        // A marker is a value that is not a state and starts with `!`.
        if transition::blank(&state)
            && store
                .get(i)
                .ok()
                .flatten()
                .is_some_and(|raw| raw.first() == Some(&b'!'))
        {
            return Ok(vec![-1]);
        }
        states.push(state);
    }
    let mut fitted = 1;
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
            unreachable!("the parser takes GCRA limits only");
        };
        let cap = (capacity + DEBT_PERIODS * limit.x * interval).min(modulus - READABLE);
        let room = if *debt < cap {
            (cap - debt) / interval
        } else {
            0
        };
        let recorded = call.cost.min(room);
        let after = debt + recorded * interval;
        if recorded < call.cost || after > capacity {
            fitted = 0;
        }
        if recorded > 0 {
            transition::gcra_store(store, i, &clock, scale, (*cur, *modulus), after);
        }
    }
    Ok(vec![fitted])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Memory;

    /// The GCRA modulus in test mode at scale 1.
    const M: &str = "9000000000000000";

    /// 1 per 10 ns (limit 1 a period of 10), burst 2: capacity 20 ticks,
    /// the cap 20 + 16·10 = 180.
    fn charge(m: &mut Memory, cost: &str, now: i128) -> Vec<i64> {
        let args = ["k", "g", "1", "10", "20", M, "1", "0", cost, "5"];
        let call = parse(&args).unwrap();
        run(&call, now, 1, m).unwrap()
    }

    #[test]
    fn a_charge_fits_then_goes_into_debt_up_to_the_cap() {
        let mut m = Memory::default();
        assert_eq!(charge(&mut m, "2", 0), [1]);
        assert_eq!(m.strings[&0].0, b"20");
        assert_eq!(charge(&mut m, "3", 0), [0]);
        assert_eq!(m.strings[&0].0, b"50");
        // 10^15 permits: only up to the cap, 180 ticks ahead.
        assert_eq!(charge(&mut m, "1000000000000000", 0), [0]);
        assert_eq!(m.strings[&0].0, b"180");
        // Repeated charges stay at the cap; the debt is repaid with time.
        assert_eq!(charge(&mut m, "1", 0), [0]);
        assert_eq!(m.strings[&0].0, b"180");
        assert_eq!(charge(&mut m, "1", 100), [0]);
        assert_eq!(m.strings[&0].0, b"190", "80 ahead of 100, then 10 more");
        assert_eq!(
            m.strings[&0].1,
            1 + 5,
            "the TTL: the debt's ms, rounded up, plus the slack"
        );
    }

    #[test]
    fn the_debt_cap_is_the_cores() {
        assert_eq!(DEBT_PERIODS, i128::from(tollgate::algorithm::DEBT_PERIODS));
    }

    #[test]
    fn a_marker_is_not_charged_and_other_algorithms_are_refused() {
        let mut m = Memory::default();
        m.strings.insert(0, (b"!d".to_vec(), 1));
        assert_eq!(charge(&mut m, "5", 0), [-1]);
        assert_eq!(m.strings[&0].0, b"!d");
        let window = ["k", "f", "10", "2", "0", "0", "2", "0", "1", "5"];
        assert!(parse(&window).unwrap_err().0.contains("GCRA"));
        let short = ["k", "g", "1", "10", "20", M, "1", "0", "1"];
        assert!(parse(&short).is_err());
        let zero_limit = ["k", "g", "1", "10", "20", M, "0", "0", "1", "5"];
        assert!(parse(&zero_limit).unwrap_err().0.contains("limit"));
    }
}
