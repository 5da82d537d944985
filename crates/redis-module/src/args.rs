//! The command's arguments, parsed and validated before any key is touched.
//!
//! `TOLLGATE.DECIDE (key alg a1 a2 a3 a4 x)×m op now cost slack stamp`: the
//! script's arguments (see `tollgate_redis::script`), with each key in front
//! of its limit and the call's own five values last. Keys come first so that
//! a cluster client routes the command by its first argument, and every key
//! sits at a fixed stride, which Redis's key specification `(1, -6, 7)`
//! expresses without a key-extraction callback.
//!
//! Every number is a decimal integer without sign, leading `+` or fraction,
//! in `[0, 2^53)`, within the script's bounds (`tollgate_redis::script`,
//! "Validation"): a cost of `-2` or `1.5`, a GCRA modulus `m` that is not
//! the largest with `m · unit · scale ≤ 9·10^15`, a slack above one day are
//! refused with an error reply (`ERR tollgate: …`) before anything is read or
//! written. (The scripts read numbers with Lua's `tonumber` and so also take
//! `1e3` or ` 1`; no client sends those, and the module refuses them.)

use std::fmt;

use smallvec::SmallVec;

use crate::warm_up::WarmArgs;

/// Values per limit: key, algorithm, four parameters, refund value.
pub const STRIDE: usize = 7;
/// The call's own values after the limits.
pub const TAIL: usize = 5;

/// What the call asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Take `cost` if every limit has it.
    Check,
    /// Decide, take nothing.
    Peek,
    /// Take as many as every limit has, up to `cost`, at least `stamp`.
    Lease,
    /// Give `cost` permits of a lease back.
    Refund,
    /// Record `cost` permits into debt (`TOLLGATE.CHARGE` only, see
    /// [`crate::charge`]).
    Charge,
}

/// One limit's algorithm and parameters, in the script's units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Params {
    /// `g scale interval capacity m`: GCRA in ticks of `1/scale` ns.
    Gcra {
        /// Ticks per nanosecond (1 to 16).
        scale: i128,
        /// Ticks per permit.
        interval: i128,
        /// `burst · interval`, below 2^52.
        capacity: i128,
        /// The state's modulus in clock units: the largest with
        /// `m · unit · scale ≤ 9·10^15`.
        m: i128,
    },
    /// `f period limit 0 0`: fixed window, `period` in clock units.
    Fixed {
        /// Clock units.
        period: i128,
        /// Permits per window.
        limit: i128,
    },
    /// `s period slots limit 0`: sliding window counter.
    Sliding {
        /// Clock units.
        period: i128,
        /// Slots in the wheel.
        n: i128,
        /// Permits per window.
        limit: i128,
    },
    /// `w<cold> burst l t warmup`: warm-up (see [`crate::warm_up`]).
    WarmUp(WarmArgs),
}

impl Params {
    /// What a limit reports remaining when it does not bind (a full limit:
    /// GCRA's capacity in ticks, a window's limit, a warm-up's burst), and
    /// its ticks per nanosecond (1 but for GCRA).
    pub(crate) fn full_and_scale(&self) -> (i128, i128) {
        match *self {
            Params::Gcra {
                capacity, scale, ..
            } => (capacity, scale),
            Params::Fixed { limit, .. } | Params::Sliding { limit, .. } => (limit, 1),
            Params::WarmUp(w) => (i128::from(w.burst), 1),
        }
    }
}

/// One limit of the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitArgs {
    /// The algorithm and its parameters.
    pub params: Params,
    /// For a GCRA refund, the lease's reset (ticks); else 0.
    pub x: i128,
}

/// A parsed call, keys left where they are (argument `1 + i·STRIDE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// What to do.
    pub op: Op,
    /// `None`: the server's clock (µs); `Some`: test mode (ns).
    pub now: Option<i128>,
    /// Permits.
    pub cost: i128,
    /// Milliseconds added to every TTL.
    pub slack: i128,
    /// A refund's lease time or a lease's need.
    pub stamp: i128,
    /// One per key (one inline: a call of one limit allocates nothing).
    pub limits: SmallVec<[LimitArgs; 1]>,
}

/// Why a call was refused (the error reply's text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgError(pub String);

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Every number is below it (the scripts' exact range in Lua's doubles).
const MAX: i128 = 1 << 53;
/// The GCRA state's modulus bound, in ticks (see `tollgate_redis::script`).
pub const MODULUS: i128 = 9_000_000_000_000_000;
/// The longest TTL slack, in milliseconds (one day).
const MAX_SLACK: i128 = 86_400_000;

#[inline]
pub(crate) fn number(what: &str, raw: &[u8]) -> Result<i128, ArgError> {
    match digits(raw) {
        Some(value) if value < 1 << 53 => Ok(i128::from(value)),
        _ => Err(not_a_number(what, raw)),
    }
}

/// The error of [`number`], out of the decision's hot path.
#[cold]
#[inline(never)]
fn not_a_number(what: &str, raw: &[u8]) -> ArgError {
    ArgError(format!(
        "ERR tollgate: {what} must be a non-negative integer, got '{}'",
        String::from_utf8_lossy(raw)
    ))
}

/// `raw` as a decimal integer if it is 1 to 20 digits and nothing else,
/// below 10^16; `None` otherwise.
#[inline]
fn digits(raw: &[u8]) -> Option<u64> {
    if raw.is_empty() || raw.len() > 20 {
        return None;
    }
    // Leading zeros are allowed (up to the 20 characters); past them, a
    // number of 17 digits or more is past 2^53, and 16 cannot overflow.
    let zeros = raw.iter().take_while(|&&b| b == b'0').count();
    let significant = &raw[zeros..];
    if significant.len() > 16 {
        return None;
    }
    let mut value: u64 = 0;
    for &b in significant {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value * 10 + u64::from(digit);
    }
    Some(value)
}

#[inline]
pub(crate) fn positive(what: &str, raw: &[u8]) -> Result<i128, ArgError> {
    let value = number(what, raw)?;
    if value == 0 {
        return Err(ArgError(format!("ERR tollgate: {what} must be positive")));
    }
    Ok(value)
}

/// Parses `args` (without the command name).
///
/// # Errors
///
/// A wrong number of arguments, an unknown operation or algorithm, or a
/// value that is not a non-negative integer (a divisor: not positive).
pub fn parse<A: AsRef<[u8]>>(args: &[A]) -> Result<Call, ArgError> {
    let call = parse_any(args, "tollgate.decide")?;
    if call.op == Op::Charge {
        return Err(ArgError(
            "ERR tollgate: a charge ('h') is TOLLGATE.CHARGE's".to_owned(),
        ));
    }
    Ok(call)
}

/// [`parse`] for `command`, taking every operation.
pub(crate) fn parse_any<A: AsRef<[u8]>>(args: &[A], command: &str) -> Result<Call, ArgError> {
    if args.len() < STRIDE + TAIL || (args.len() - TAIL) % STRIDE != 0 {
        return Err(ArgError(format!(
            "ERR wrong number of arguments for '{command}' command"
        )));
    }
    let m = (args.len() - TAIL) / STRIDE;
    let tail = &args[m * STRIDE..];
    let op = match tail[0].as_ref() {
        b"c" => Op::Check,
        b"p" => Op::Peek,
        b"l" => Op::Lease,
        b"r" => Op::Refund,
        b"h" => Op::Charge,
        other => {
            return Err(ArgError(format!(
                "ERR tollgate: unknown operation '{}'",
                String::from_utf8_lossy(other)
            )));
        }
    };
    let now = match tail[1].as_ref() {
        b"" => None,
        raw => Some(number("now", raw)?),
    };
    let cost = number("cost", tail[2].as_ref())?;
    let slack = number("slack", tail[3].as_ref())?;
    if slack > MAX_SLACK {
        return Err(ArgError(
            "ERR tollgate: slack must be at most one day".to_owned(),
        ));
    }
    // Nanoseconds per clock unit.
    let unit = if now.is_some() { 1 } else { 1_000 };
    let stamp = number("stamp", tail[4].as_ref())?;
    let mut limits = SmallVec::with_capacity(m);
    for limit in args[..m * STRIDE].chunks_exact(STRIDE) {
        let a = |i: usize| limit[2 + i].as_ref();
        let params = match limit[1].as_ref() {
            b"g" => gcra(unit, a(0), a(1), a(2), a(3))?,
            b"f" => {
                let period = positive("period", a(0))?;
                let limit = positive("limit", a(1))?;
                if period >= 1 << 52 || number("a3", a(2))? != 0 || number("a4", a(3))? != 0 {
                    return Err(ArgError(
                        "ERR tollgate: a fixed window is 'f period limit 0 0', period below 2^52"
                            .to_owned(),
                    ));
                }
                Params::Fixed { period, limit }
            }
            b"s" => {
                let period = positive("period", a(0))?;
                let n = positive("slots", a(1))?;
                let limit = positive("limit", a(2))?;
                if period * n >= MAX || number("a4", a(3))? != 0 {
                    return Err(ArgError(
                        "ERR tollgate: a sliding window is 's period slots limit 0', \
                         period · slots below 2^53"
                            .to_owned(),
                    ));
                }
                Params::Sliding { period, n, limit }
            }
            [b'w', cold @ ..] => Params::WarmUp(WarmArgs::parse(cold, a(0), a(1), a(2), a(3))?),
            other => {
                return Err(ArgError(format!(
                    "ERR tollgate: unknown algorithm {}",
                    String::from_utf8_lossy(other)
                )));
            }
        };
        limits.push(LimitArgs {
            params,
            x: number("refund value", limit[6].as_ref())?,
        });
    }
    Ok(Call {
        op,
        now,
        cost,
        slack,
        stamp,
        limits,
    })
}

/// Parses the arguments of `TOLLGATE.LEAN`: those of `TOLLGATE.DECIDE`
/// with one limit, a GCRA or a fixed window, and a check or a peek (the
/// lean scripts' calls, see [`crate::lean`]).
///
/// # Errors
///
/// As [`parse`], and a call of another shape.
pub fn parse_lean<A: AsRef<[u8]>>(args: &[A]) -> Result<Call, ArgError> {
    let call = parse(args)?;
    let lean = matches!(call.op, Op::Check | Op::Peek)
        && matches!(
            call.limits.as_slice(),
            [LimitArgs {
                params: Params::Gcra { .. } | Params::Fixed { .. },
                ..
            }]
        );
    if !lean {
        return Err(ArgError(
            "ERR tollgate: TOLLGATE.LEAN decides one GCRA or fixed window limit, \
             op 'c' or 'p' (TOLLGATE.DECIDE takes the others)"
                .to_owned(),
        ));
    }
    Ok(call)
}

/// `g scale interval capacity m`, checked as the scripts check it.
pub(crate) fn gcra(
    unit: i128,
    scale: &[u8],
    interval: &[u8],
    capacity: &[u8],
    m: &[u8],
) -> Result<Params, ArgError> {
    let scale = positive("scale", scale)?;
    let interval = positive("interval", interval)?;
    let capacity = number("capacity", capacity)?;
    let m = positive("m", m)?;
    if scale > 16 || capacity < interval || capacity >= 1 << 52 {
        return Err(ArgError(
            "ERR tollgate: GCRA needs 1 <= scale <= 16 and interval <= capacity < 2^52".to_owned(),
        ));
    }
    let us = unit * scale;
    if m * us > MODULUS || m * us + us <= MODULUS {
        return Err(ArgError(format!(
            "ERR tollgate: the GCRA modulus m must be {} for this clock and scale",
            MODULUS / us
        )));
    }
    Ok(Params::Gcra {
        scale,
        interval,
        capacity,
        m,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(cost: &str) -> Vec<&str> {
        vec![
            "k",
            "g",
            "1",
            "10",
            "50",
            "9000000000000",
            "0",
            "c",
            "",
            cost,
            "1000",
            "0",
        ]
    }

    #[test]
    fn a_gcra_check_parses() {
        let parsed = parse(&call("3")).unwrap();
        assert_eq!(parsed.op, Op::Check);
        assert_eq!(parsed.now, None);
        assert_eq!(parsed.cost, 3);
        assert_eq!(parsed.limits.len(), 1);
    }

    /// The digit reading reads every byte string as a plain `u64` loop
    /// does, below 10^16.
    #[test]
    fn digits_read_as_the_plain_loop() {
        fn plain(raw: &[u8]) -> Option<u64> {
            if raw.is_empty() || raw.len() > 20 {
                return None;
            }
            let value = raw.iter().try_fold(0u64, |v, &b| {
                b.is_ascii_digit()
                    .then(|| v.saturating_mul(10).saturating_add(u64::from(b - b'0')))
            })?;
            (value < 10_000_000_000_000_000).then_some(value)
        }
        let mut cases: Vec<Vec<u8>> = [
            "0",
            "7",
            "12345678",
            "99999999",
            "123456789",
            "3600000000000",
            "9000000000000000",
            "9999999999999999",
            "10000000000000000",
            "18446744073709551616",
            "99999999999999999999",
            "00000000000000000001",
            "000000000000000000001",
            "",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        for position in 0..11 {
            for byte in 0..=255u8 {
                let mut raw = b"00345678901".to_vec();
                raw[position] = byte;
                cases.push(raw);
            }
        }
        for raw in cases {
            assert_eq!(digits(&raw), plain(&raw), "{raw:?}");
        }
    }

    /// Regression: the script accepted cost −2 and 1.5 when called directly.
    #[test]
    fn negative_and_fractional_costs_are_refused() {
        for bad in [
            "-2",
            "1.5",
            "",
            "+1",
            "1e3",
            " 1",
            "99999999999999999999999",
            "9007199254740992",
        ] {
            let error = parse(&call(bad)).unwrap_err();
            assert!(error.0.contains("cost"), "{bad}: {error}");
        }
    }

    #[test]
    fn wrong_arity_unknown_algorithm_and_zero_divisors_are_refused() {
        assert!(parse(&call("1")[..11]).is_err());
        let mut unknown = call("1");
        unknown[1] = "z";
        assert!(parse(&unknown).unwrap_err().0.contains("algorithm"));
        let mut zero = call("1");
        zero[3] = "0";
        assert!(parse(&zero).unwrap_err().0.contains("interval"));
        let mut op = call("1");
        op[7] = "x";
        assert!(parse(&op).unwrap_err().0.contains("operation"));
    }

    /// The new GCRA contract: `m` is the modulus for the call's clock.
    #[test]
    fn the_gcra_modulus_must_match_the_clock_and_scale() {
        assert!(parse(&call("1")).is_ok());
        let mut burst = call("1");
        burst[5] = "5";
        assert!(
            parse(&burst).unwrap_err().0.contains("modulus"),
            "a burst in place of m"
        );
        let mut test_mode = call("1");
        test_mode[8] = "0";
        assert!(parse(&test_mode).unwrap_err().0.contains("modulus"));
        test_mode[5] = "9000000000000000";
        assert!(parse(&test_mode).is_ok());
        let mut slack = call("1");
        slack[10] = "86400001";
        assert!(parse(&slack).unwrap_err().0.contains("slack"));
        let mut scale = call("1");
        scale[2] = "17";
        assert!(parse(&scale).is_err());
    }
}
