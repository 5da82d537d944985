//! The server-side scripts and their contract.
//!
//! # Model
//!
//! Every decision on Redis is one Lua script call, atomic: `EVALSHA`, and
//! on `NOSCRIPT` the same call once more as `EVAL` with the source (a
//! flushed script cache is recovered by the call that meets it). A script
//! is the core's transition in Lua's exact integers (below 2^53), on the
//! server's clock (`TIME`, 1 µs) or, in test mode, on a `now` in ns the
//! caller passes. The sources are assembled here:
//!
//! | source | files | does |
//! |---|---|---|
//! | [`SOURCE`] | `bignum.lua`, `warm_math.lua`, `prelude.lua`, `decide.lua` | every algorithm, the limits of one key all-or-nothing: check `c`, peek `p`, lease `l`, refund `r` |
//! | [`SOURCE_CHARGE`] | the same preludes, `charge.lua` | a budget's charge `h`: recorded into debt whether or not it fits |
//! | [`SOURCE_GCRA`], [`SOURCE_FIXED`] | `gcra.lua`, `fixed.lua` | the lean path: one GCRA or fixed window, check or peek, a one-number reply ([`expand_lean`]) |
//! | [`SOURCE_CARRY`] | [`SOURCE`]'s, `carry.lua` before `decide.lua` | a decision that first carries the previous limits' states ([`carry`](crate::carry)) |
//! | [`SOURCE_CONTROLS`] | [`SOURCE`]'s preludes, `controls.lua` | reset, refund, penalty, lists ([`controls`](crate::controls)) |
//! | [`SOURCE_LISTS`] | `lists.lua` | the lists' registry |
//!
//! `prelude.lua` validates the arguments (each source names its operations
//! in a line `local OPS = '…'` before it), reads the clock and loads each
//! limit's state through one module per algorithm (load, decision,
//! admission, refund, charge, a control's refund, carry): a decision, a
//! charge, a carry and a control read and write one format.
//!
//! # Contract
//!
//! `EVALSHA sha m KEYS[1..m] op now cost slack stamp (alg a1 a2 a3 a4 x)×m`:
//! one key per limit under one hash tag ([`key`](crate::key)); `now` empty
//! for the server's clock; `slack` ms added to every TTL; per limit `g
//! scale interval capacity m` (GCRA), `f period limit 0 0` (fixed window),
//! `c unit limit 0 0` (calendar), `s period slots limit 0` (sliding
//! window), `w<cold> burst l t warmup` (warm-up); `x` a GCRA refund's lease
//! reset, a charge's debt cap, a carry's old limit `3 · k + rule` (see
//! `carry.lua`), else 0. Every argument is validated before
//! a key is read; a refused call answers `ERR tollgate: invalid arguments:
//! …` and writes nothing. Reply: `{allowed, taken, now, (allowed_i,
//! headroom_i, retry_i, reset_i)×m}` (GCRA in ticks, the others in ns, -1
//! for never); a charge's, `{fitted, recorded}` then a peek's reply of one
//! permit after it.
//!
//! # Stored formats
//!
//! | algorithm | the key holds | a charge's debt |
//! |---|---|---|
//! | GCRA | an integer: the TAT in ticks modulo `M = m · unit · scale` | the TAT past `now + burst`, below `M − 2·10^15` |
//! | fixed, calendar window | `"<window> <count>"` | a count past the limit, up to `(DEBT_PERIODS + 1) · limit`, carried on less `limit` a window |
//! | sliding window | a hash: `h` newest epoch, `t` total (above the limit after a carry to a lower one), one field per non-empty slot | the field `d` (absent when 0), `t + d ≤ (DEBT_PERIODS + 1) · limit` |
//! | warm-up | `"F S"` (exact naturals) | not charged |
//! | any | a control's marker: `!d`, `!a`, `!p<end>`, `!pn` | none |
//! | `<key>!held` | while `<key>` is listed: what it held (a state or a penalty), with its TTL | as the state's |
//!
//! The Redis module (`crates/redis-module`) keeps the same bytes. A value
//! that is none of these (another type, garbage, a count past the cap)
//! reads as no state, as if the key had been evicted: never an error, which
//! would deny or fail one key for ever.
//!
//! # Guarantee
//!
//! Each script decides as the core's transition at the same instant (the
//! parity vectors and side-by-side runs in test mode; on the server's
//! clock at 1 µs resolution). Every write sets the key's TTL in the same
//! call (until the key is as if never used, plus `slack`); a denial writes
//! nothing. A charge's debt is read by every later check, and its stored
//! cap holds however many charges land: charged ≤ limit + the debt still
//! owed, at most [`DEBT_PERIODS`](tollgate::algorithm::DEBT_PERIODS) ·
//! limit.
//!
//! The details (the lean reply and the short form with their measurements,
//! why scripts and not Redis 7 functions, each state's exactness, the
//! resolution) are in `crates/redis/docs/scripts.md`.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, ServerErrorKind, Value};

use crate::limit::Limit;

/// The SHA-1 of the general script, as Redis names it in its cache.
static DECIDE_SHA: LazyLock<String> =
    LazyLock::new(|| redis::Script::new(SOURCE).get_hash().to_owned());
/// The SHA-1 of the lean GCRA script.
static GCRA_SHA: LazyLock<String> =
    LazyLock::new(|| redis::Script::new(SOURCE_GCRA).get_hash().to_owned());
/// The SHA-1 of the carrying script.
static CARRY_SHA: LazyLock<String> =
    LazyLock::new(|| redis::Script::new(SOURCE_CARRY).get_hash().to_owned());
/// The SHA-1 of the controls' script.
static CONTROLS_SHA: LazyLock<String> =
    LazyLock::new(|| redis::Script::new(SOURCE_CONTROLS).get_hash().to_owned());
/// The SHA-1 of the lists' registry script.
static LISTS_SHA: LazyLock<String> =
    LazyLock::new(|| redis::Script::new(SOURCE_LISTS).get_hash().to_owned());
/// The SHA-1 of the lean fixed window script.
static FIXED_SHA: LazyLock<String> =
    LazyLock::new(|| redis::Script::new(SOURCE_FIXED).get_hash().to_owned());

/// Which script a call runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Script {
    /// `decide.lua`: every algorithm, several limits, every operation.
    Decide,
    /// `gcra.lua`: one GCRA limit, check or peek.
    Gcra,
    /// `fixed.lua`: one fixed window, check or peek.
    Fixed,
    /// `carry.lua` then `decide.lua`: a decision that first carries the
    /// state of the previous limits' keys (see [`carry`](crate::carry)).
    Carry,
    /// `controls.lua`: reset, refund, penalty and lists of one key (see
    /// [`controls`](crate::controls)).
    Controls,
    /// The lists' registry, in the limiter's own slot (see
    /// [`controls`](crate::controls)).
    Lists,
}

impl Script {
    /// Every script, in the order a connection loads them.
    pub(crate) const ALL: [Script; 6] = [
        Script::Decide,
        Script::Gcra,
        Script::Fixed,
        Script::Carry,
        Script::Controls,
        Script::Lists,
    ];

    /// `SCRIPT LOAD` of this script: what a connection sends once, so that
    /// the first decision of a fresh process finds it compiled (see
    /// [`Redis::open`](crate::Redis::open)).
    pub(crate) fn load(self) -> Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.source_and_sha().0);
        cmd
    }

    fn source_and_sha(self) -> (&'static str, &'static str) {
        match self {
            Script::Decide => (SOURCE, &DECIDE_SHA),
            Script::Gcra => (SOURCE_GCRA, &GCRA_SHA),
            Script::Fixed => (SOURCE_FIXED, &FIXED_SHA),
            Script::Controls => (SOURCE_CONTROLS, &CONTROLS_SHA),
            Script::Carry => (SOURCE_CARRY, &CARRY_SHA),
            Script::Lists => (SOURCE_LISTS, &LISTS_SHA),
        }
    }
}

/// Runs `script` on `keys`: `EVALSHA`, then on `NOSCRIPT` one `EVAL`
/// carrying the source (see the module docs). `args` appends the arguments.
pub(crate) async fn run<C: ConnectionLike>(
    connection: &mut C,
    script: Script,
    keys: &[Vec<u8>],
    args: impl Fn(&mut Cmd),
) -> RedisResult<Vec<i64>> {
    let (source, sha) = script.source_and_sha();
    // Only `gcra.lua` has a short form: its arguments are made once here,
    // matched, and sent as made (short or full); every other script's are
    // written straight into the call.
    let mut full = Cmd::new();
    // `None` for another script (or an argument that is not plain bytes,
    // which no script takes: it is then written as `args` writes it).
    let words: Option<Vec<&[u8]>> = match script {
        Script::Gcra => {
            args(&mut full);
            full.args_iter()
                .map(|arg| match arg {
                    redis::Arg::Simple(arg) => Some(arg),
                    _ => None,
                })
                .collect()
        }
        _ => None,
    };
    let short = words.as_deref().and_then(short_gcra);
    let call = |verb: &str, script: &str| {
        let mut cmd = Cmd::new();
        cmd.arg(verb).arg(script).arg(keys.len());
        for key in keys {
            cmd.arg(key.as_slice());
        }
        match (&short, &words) {
            (Some(short), _) => {
                for arg in short {
                    cmd.arg(*arg);
                }
            }
            (None, Some(words)) => {
                for word in words {
                    cmd.arg(*word);
                }
            }
            (None, None) => args(&mut cmd),
        }
        cmd
    };
    let reply: Value = match call("EVALSHA", sha).query_async(connection).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            call("EVAL", source).query_async(connection).await?
        }
        reply => reply?,
    };
    numbers(reply)
}

/// `gcra.lua`'s short form of the full arguments `args`, when they are
/// the call it stands for (see `crates/redis/docs/scripts.md`, "The short form").
fn short_gcra<'a>(args: &[&'a [u8]]) -> Option<[&'a [u8]; 2]> {
    match *args {
        [
            b"c",
            b"",
            b"1",
            b"10",
            // `stamp`, unused by a check: the client sends the cost.
            b"0" | b"1",
            b"g",
            b"1",
            interval,
            capacity,
            b"9000000000000",
            b"0",
        ] => Some([interval, capacity]),
        _ => None,
    }
}

/// The numbers of a reply: an array of integers, or one integer (a lean
/// script's or the module's lean command's compact reply, see
/// [`expand_lean`]) as an array of one.
pub(crate) fn numbers(reply: Value) -> RedisResult<Vec<i64>> {
    match reply {
        Value::Int(v) => Ok(vec![v]),
        other => Ok(Vec::<i64>::from_redis_value(other)?),
    }
}

/// Whether `e` is an error the script or the module raised for this call (a
/// refused argument, a Lua error, a command on a key of another type):
/// Redis answered, the problem is the key's or the call's, and it must not
/// open the breaker for every other key. Server-wide conditions (`OOM`,
/// `BUSY`, `LOADING`, `READONLY`, `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`,
/// `MISCONF`, …) and connection errors are not, **even wrapped in a script
/// error** (Redis before 7 answers a write refused inside a script as
/// `ERR Error running script … -READONLY …`): a demoted master answers
/// them, and the breaker opening is what sends a Sentinel client to the new
/// master.
pub(crate) fn is_call_error(e: &RedisError) -> bool {
    match e.code() {
        Some("WRONGTYPE") => true,
        Some("ERR") => e.detail().is_some_and(|d| {
            (d.contains("tollgate:") || d.contains("user_script")) && !names_server_condition(d)
        }),
        _ => false,
    }
}

/// Whether a script error's text carries a server-wide error code.
fn names_server_condition(detail: &str) -> bool {
    const SERVER_WIDE: [&str; 8] = [
        "READONLY",
        "MASTERDOWN",
        "LOADING",
        "OOM",
        "BUSY",
        "CLUSTERDOWN",
        "TRYAGAIN",
        "MISCONF",
    ];
    detail
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|word| SERVER_WIDE.contains(&word))
}

/// The general script's source (every algorithm, several limits, leases),
/// for tools that load it themselves (such as `redis-benchmark`): the
/// preludes (exact naturals and the warm-up transition, built only when a
/// warm-up limit is decided; then `prelude.lua`, the arguments, the clock
/// and every algorithm's state), then `decide.lua`.
pub const SOURCE: &str = concat!(
    include_str!("bignum.lua"),
    include_str!("warm_math.lua"),
    "local OPS = 'cplr'\n",
    include_str!("prelude.lua"),
    include_str!("decide.lua")
);

/// The charge script's source (a budget's charge into debt over every
/// limit of a key; see [`RedisLimiter::charge_outcome`](crate::RedisLimiter::charge_outcome)):
/// the same preludes as [`SOURCE`], then `charge.lua`.
pub const SOURCE_CHARGE: &str = concat!(
    include_str!("bignum.lua"),
    include_str!("warm_math.lua"),
    "local OPS = 'h'\n",
    include_str!("prelude.lua"),
    include_str!("charge.lua")
);

/// The lean GCRA script's source (one GCRA limit, check or peek; the same
/// contract and reply as [`SOURCE`]).
pub const SOURCE_GCRA: &str = include_str!("gcra.lua");

/// The lean fixed window script's source (one fixed window, check or peek;
/// the same contract and reply as [`SOURCE`]).
pub const SOURCE_FIXED: &str = include_str!("fixed.lua");

/// The controls' script (reset, refund, penalty, lists; the same arguments
/// as [`SOURCE`], see [`controls`](crate::controls)): the same preludes
/// (so that a refund reads and writes every state as a decision does),
/// then `controls.lua`.
pub const SOURCE_CONTROLS: &str = concat!(
    include_str!("bignum.lua"),
    include_str!("warm_math.lua"),
    "local OPS = 'znkdaum'\n",
    include_str!("prelude.lua"),
    include_str!("controls.lua")
);

/// The lists' registry: `KEYS[1]` the set, `ARGV` = member, capacity, `+`
/// (reserve) or `-` (release). Reserving answers `{1}` if the key is (now)
/// in the set, `{0}` if the set is full.
pub const SOURCE_LISTS: &str = include_str!("lists.lua");

/// The carrying script: [`SOURCE`] with `carry.lua` between the prelude
/// (which loads the new and the old limits' states) and `decide.lua` (see
/// [`carry`](crate::carry)).
pub const SOURCE_CARRY: &str = concat!(
    include_str!("bignum.lua"),
    include_str!("warm_math.lua"),
    "local OPS = 'cplr'\n",
    include_str!("prelude.lua"),
    include_str!("carry.lua"),
    include_str!("decide.lua")
);

/// Reply values before the per-limit ones.
pub(crate) const HEAD_REPLY: usize = 3;
/// Reply values per limit.
pub(crate) const PER_LIMIT_REPLY: usize = 4;

/// What the script was asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Check,
    Peek,
    Lease,
    Refund,
}

impl Op {
    pub(crate) fn code(self) -> &'static str {
        match self {
            Op::Check => "c",
            Op::Peek => "p",
            Op::Lease => "l",
            Op::Refund => "r",
        }
    }
}

/// The limit of a lean script's call, as its compact reply needs it to be
/// read (see [`expand_lean`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lean {
    /// `gcra.lua`: the limit's emission interval and capacity, in ticks (the
    /// call's `interval` and `capacity` arguments).
    Gcra {
        /// Ticks per permit.
        interval: u64,
        /// The burst, in ticks.
        capacity: u64,
    },
    /// `fixed.lua`: the window's `period` in clock units and `limit` (the
    /// call's arguments), and the nanoseconds per clock unit (1,000 on the
    /// server's clock, 1 in test mode).
    Fixed {
        /// The window, in clock units.
        period: u64,
        /// Permits per window.
        limit: u64,
        /// Nanoseconds per clock unit.
        unit_nanos: u64,
    },
}

/// The shape of a lean script's call on `limit` (`None` for a limit no lean
/// script runs), `unit_nanos` nanoseconds per clock unit.
pub(crate) fn lean_of(limit: &Limit, unit_nanos: u64) -> Option<Lean> {
    match limit {
        Limit::Gcra(g) => Some(Lean::Gcra {
            interval: g.interval_ticks(),
            capacity: g.capacity_ticks(),
        }),
        Limit::FixedWindow(_) => Some(Lean::Fixed {
            period: limit.quota().period_nanos() / unit_nanos,
            limit: limit.quota().limit(),
            unit_nanos,
        }),
        Limit::SlidingWindow(_) | Limit::Calendar(_) | Limit::WarmUp(_) => None,
    }
}

/// A lean script's reply in the general script's form
/// `{allowed, taken, now, allowed, headroom, retry, reset}` (see
/// `crates/redis/docs/scripts.md`, "The lean reply"). `check` and `cost` are the call's (`c`
/// or `p`, and `cost`), `now` is put in the reply's `now` (the compact reply
/// carries no clock reading). A reply of more than one number (a control's
/// marker) is the general form already and is returned as it is; `None` if
/// the reply is not one the script gives for that limit.
///
/// ```
/// use tollgate_redis::script::{expand_lean, Lean};
///
/// // GCRA, 1 permit per 100 ticks, burst 5: admitted, 300 ticks of debt after.
/// let gcra = Lean::Gcra { interval: 100, capacity: 500 };
/// assert_eq!(expand_lean(&[300], gcra, true, 1, 0), Some(vec![1, 1, 0, 1, 200, 0, 300]));
/// // Denied with a debt of 450: retry once 50 ticks have passed.
/// assert_eq!(expand_lean(&[-451], gcra, true, 1, 0), Some(vec![0, 0, 0, 0, 50, 50, 450]));
/// ```
pub fn expand_lean(
    reply: &[i64],
    lean: Lean,
    check: bool,
    cost: u64,
    now: i64,
) -> Option<Vec<i64>> {
    let &[v] = reply else {
        return (reply.len() == HEAD_REPLY + PER_LIMIT_REPLY).then(|| reply.to_vec());
    };
    let allowed = v >= 0;
    // i128: every product and sum below is exact, whatever the reply.
    let u = if allowed {
        i128::from(v)
    } else {
        -1 - i128::from(v)
    };
    let cost = i128::from(cost);
    let taken = if allowed && check { cost } else { 0 };
    let [headroom, retry, reset] = match lean {
        Lean::Gcra { interval, capacity } => {
            let (interval, capacity) = (i128::from(interval), i128::from(capacity));
            if allowed {
                // u: the reset (debt after the call), at most the capacity.
                [capacity.checked_sub(u).filter(|h| *h >= 0)?, 0, u]
            } else {
                // u: the debt before the call.
                let need = cost * interval;
                let retry = if need <= capacity {
                    u + need - capacity
                } else {
                    -1
                };
                [(capacity - u).max(0), retry, u]
            }
        }
        Lean::Fixed {
            period,
            limit,
            unit_nanos,
        } => {
            // u: headroom · (period + 1) + the window's time left (units).
            let span = i128::from(period) + 1;
            let (headroom, left) = (u / span, u % span * i128::from(unit_nanos));
            let limit = i128::from(limit);
            if headroom > limit {
                return None;
            }
            // Something counted in the window: it resets when the window ends.
            let reset = if headroom < limit { left } else { 0 };
            let retry = if allowed {
                0
            } else if cost <= limit {
                left
            } else {
                -1
            };
            [headroom, retry, reset]
        }
    };
    let allowed = i128::from(allowed);
    [
        allowed,
        taken,
        i128::from(now),
        allowed,
        headroom,
        retry,
        reset,
    ]
    .into_iter()
    .map(|n| i64::try_from(n).ok())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_short_form_stands_only_for_the_call_it_means() {
        let full = |op: &'static str, now: &'static str, cost, slack, scale, m| {
            [
                op, now, cost, slack, "0", "g", scale, "1000", "5000", m, "0",
            ]
            .map(str::as_bytes)
        };
        let m = "9000000000000";
        assert_eq!(
            short_gcra(&full("c", "", "1", "10", "1", m)),
            Some([&b"1000"[..], b"5000"])
        );
        for other in [
            full("p", "", "1", "10", "1", m),
            full("c", "5", "1", "10", "1", m),
            full("c", "", "2", "10", "1", m),
            full("c", "", "1", "11", "1", m),
            full("c", "", "1", "10", "2", "4500000000000"),
        ] {
            assert_eq!(short_gcra(&other), None, "{other:?}");
        }
        let mut x = full("c", "", "1", "10", "1", m);
        x[10] = b"7";
        assert_eq!(short_gcra(&x), None);
        assert_eq!(short_gcra(&x[..10]), None);
    }

    /// The scripts read and cap a debt as the core does: its
    /// `DEBT_PERIODS`, written into the Lua sources.
    #[test]
    fn the_scripts_debt_cap_is_the_cores() {
        let periods = tollgate::algorithm::DEBT_PERIODS;
        assert!(include_str!("prelude.lua").contains(&format!("local DEBT_PERIODS = {periods}\n")));
        assert!(include_str!("fixed.lua").contains(&format!("c <= limit * {}", periods + 1)));
    }

    fn error(reply: &str) -> RedisError {
        let value = redis::parse_redis_value(format!("-{reply}\r\n").as_bytes()).unwrap();
        value.extract_error().unwrap_err()
    }

    /// A compact reply the script cannot give for the limit (a reset past
    /// the capacity, a headroom past the limit) or a reply of another
    /// length is unreadable, never a decision.
    #[test]
    fn an_impossible_lean_reply_is_unreadable() {
        let gcra = Lean::Gcra {
            interval: 100,
            capacity: 500,
        };
        let fixed = Lean::Fixed {
            period: 1000,
            limit: 3,
            unit_nanos: 1000,
        };
        assert_eq!(expand_lean(&[501], gcra, true, 1, 0), None);
        assert_eq!(expand_lean(&[4 * 1001], fixed, true, 1, 0), None);
        assert_eq!(expand_lean(&[-1 - 4 * 1001], fixed, true, 1, 0), None);
        assert_eq!(expand_lean(&[1, 2], gcra, true, 1, 0), None);
        assert_eq!(expand_lean(&[], fixed, true, 1, 0), None);
        // The most negative reply and the largest cost read back without
        // overflow: a debt of 2^63 - 1 ticks, never to retry.
        assert_eq!(
            expand_lean(&[i64::MIN], gcra, true, u64::MAX, 0).map(|r| r[5]),
            Some(-1)
        );
        // Fixed window: 2 left (a check of 1 taken), 300 units of 1 µs left.
        assert_eq!(
            expand_lean(&[2 * 1001 + 300], fixed, true, 1, 7),
            Some(vec![1, 1, 7, 1, 2, 0, 300_000])
        );
        // Denied with nothing counted (cost 4 > limit 3): never, no reset.
        assert_eq!(
            expand_lean(&[-1 - (3 * 1001 + 300)], fixed, false, 4, 7),
            Some(vec![0, 0, 7, 0, 3, -1, 0])
        );
    }

    /// Regression, and the Sentinel failover: per-key errors of the script or
    /// the module spare the breaker; a demoted master's `READONLY`,
    /// `MASTERDOWN` and `LOADING` count as Redis down, bare or wrapped in a
    /// script error (Redis 6's form).
    #[test]
    fn only_errors_about_the_call_are_per_key() {
        for per_key in [
            "ERR tollgate: invalid arguments: c  -2 10 0",
            "ERR tollgate: cost must be a non-negative integer, got '-2'",
            "ERR user_script:12: attempt to compare nil with number script: abc",
            "ERR Error running script (call to f_abc): @user_script:3: bad",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ] {
            assert!(is_call_error(&error(per_key)), "{per_key}");
        }
        for down in [
            "READONLY You can't write against a read only replica.",
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            "LOADING Redis is loading the dataset in memory",
            "ERR Error running script (call to f_abc): @user_script:39: \
             @user_script: 39: -READONLY You can't write against a read only replica.",
            "ERR Error running script (call to f_abc): @user_script:39: \
             -MASTERDOWN Link with MASTER is down",
            "OOM command not allowed when used memory > 'maxmemory'. script: abc",
            "ERR unknown command 'TOLLGATE.DECIDE'",
        ] {
            assert!(!is_call_error(&error(down)), "{down}");
        }
    }
}
