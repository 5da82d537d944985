//! Warm-up on Redis: one [`WarmUp`] limit per key, decided by a script that
//! runs the core's transition with the same integer arithmetic, so that
//! every process of a fleet warms up one shared state (a cold fleet starts at
//! `rate / cold_factor` together, not each process on its own).
//!
//! # The script
//!
//! [`SOURCE_WARM_UP`] keeps the state `"F S"` (the instant the next request
//! may go, in ns, and the idle permits, in the limit's units) under the
//! key, and answers a check, a peek or a reservation (Guava's `acquire`:
//! served in arrival order, see [`WarmUp::reserve`]) in one atomic step.
//! The cost's products pass 2^53, so the script counts in base-10^7 limbs
//! parsed from and written as decimal strings: its answers equal the core's
//! to the nanosecond, checked by the shared vectors
//! (`crates/core/tests/vectors/warm_up.json`). The key's TTL is set in the
//! same step, to the instant the state is as cold as a fresh one plus a
//! slack: an expired key is a cold limit, so expiry forgets nothing.
//!
//! # Clocks
//!
//! With `now` left out the script reads the server's `TIME` (in µs, as ns),
//! so that client clocks do not matter; a test passes `now` in. A clock
//! going back is denied until `F`, as in the core.
//!
//! # In the general script
//!
//! [`Limit::WarmUp`](crate::Limit::WarmUp) runs the same transition, on the
//! same state `"F S"`, inside the general script (`decide.lua`), so that a
//! [`RedisLimiter`](crate::RedisLimiter) decides a warm-up limit beside its
//! other limits all-or-nothing in one call, with its leases, deny cache,
//! controls and failure policy. Both scripts share their arithmetic
//! (`bignum.lua`, `warm_math.lua`, prepended to each). Decisions where the
//! contract is silent:
//!
//! - The general script, never the lean scripts; the native module where
//!   every node's module decides warm-up (the version with
//!   `TOLLGATE.CHARGE`: same transition, same state, see
//!   [`module`](crate::module)); an older module would refuse the limit, so
//!   it gets the script.
//! - On the server's clock the script reads `TIME` in µs and decides in
//!   ns (`now · 1000`): every decision at 1 µs resolution, the costs exact.
//! - A value under the key that is not a state is read as cold (none), and
//!   replaced at the next admission, as the other limits do with foreign
//!   values; this script, called on its own, refuses it instead.
//! - A lease takes the burst (the capacity) when nothing is owed, and pays
//!   its cost as one request; a refund (of a lease or through the controls)
//!   is [`WarmUp::refund`]: what is owed moves back by the permits' stable
//!   intervals, and the permits go back to the idle store.
//! - The local fallback of [`FailurePolicy::Local`](crate::FailurePolicy)
//!   warms up the share of the rate on its own (its keys start cold).
//! - [`carry`](crate::carry) converts a warm-up state as the core's
//!   `carry_cell` does (what is owed and the idle permits rescaled, rounded
//!   colder); a change of algorithm into a warm-up takes the permits the old
//!   limit counted, as the core's charge does.
//! - The reply's durations must stay exact (below 2^53 ns, 104 days):
//!   [`limit`](crate::limit) refuses a warm-up whose cold cost of a burst
//!   plus warm-up period would pass it.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionLike;
use tollgate::{Decision, Nanos, WarmUp};

/// The warm-up script: the exact naturals and the transition shared with
/// the general script, then its own body.
pub const SOURCE_WARM_UP: &str = concat!(
    include_str!("bignum.lua"),
    include_str!("warm_math.lua"),
    include_str!("warm_up.lua")
);

/// The slack added to a key's TTL past the instant it is cold again: a
/// key read within it is still exact, one read after it is cold anyway.
pub const DEFAULT_SLACK: Duration = Duration::from_secs(10);

/// What a call asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Takes the permits if nothing is owed ([`WarmUp::transition`]).
    Check,
    /// Answers as a check would, writing nothing.
    Peek,
    /// Reserves the permits in arrival order ([`WarmUp::reserve`]).
    Reserve,
}

/// The arguments of one call of [`SOURCE_WARM_UP`] (after its one key).
pub fn args(warm: &WarmUp, op: Op, now: Option<Nanos>, cost: u64, slack: Duration) -> Vec<String> {
    let c = warm.constants();
    let op = match op {
        Op::Check => "c",
        Op::Peek => "p",
        Op::Reserve => "r",
    };
    vec![
        op.to_owned(),
        now.map_or_else(String::new, |now| now.as_u64().to_string()),
        cost.to_string(),
        slack.as_millis().to_string(),
        c.burst.to_string(),
        c.l.to_string(),
        c.t.to_string(),
        c.permit.to_string(),
        c.threshold.to_string(),
        c.max.to_string(),
        c.gain.to_string(),
        c.slope.to_string(),
        c.per_remainder.to_string(),
        c.denominator.to_string(),
    ]
}

/// Runs `op` for `cost` permits of `warm` on `key`, at `now` (the server's
/// clock if `None`). Returns the decision and the instant the permits are
/// (or would be) ready; a [`Op::Reserve`] is always allowed.
///
/// # Errors
///
/// What Redis answers: a connection error, or the script's refusal of a
/// key that holds something else.
pub async fn call<C: ConnectionLike>(
    connection: &mut C,
    key: &str,
    warm: &WarmUp,
    op: Op,
    now: Option<Nanos>,
    cost: u64,
) -> redis::RedisResult<(Decision, Nanos)> {
    // Hashed once: later calls are an EVALSHA (EVAL once per server).
    static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SOURCE_WARM_UP));
    let mut invocation = SCRIPT.prepare_invoke();
    invocation.key(key);
    for arg in args(warm, op, now, cost, DEFAULT_SLACK) {
        invocation.arg(arg);
    }
    let (allowed, remaining, retry, reset, ready): (i64, String, String, String, String) =
        invocation.invoke_async(connection).await?;
    let number = |text: &str| {
        text.parse::<u64>().map_err(|_| {
            redis::RedisError::from((
                redis::ErrorKind::Client,
                "tollgate warm-up: not a number",
                text.to_owned(),
            ))
        })
    };
    let decision = Decision::from_parts(
        allowed == 1,
        warm.constants().burst,
        number(&remaining)?,
        Duration::from_nanos(number(&retry)?),
        Duration::from_nanos(number(&reset)?),
    );
    Ok((decision, Nanos::new(number(&ready)?)))
}
