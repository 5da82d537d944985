//! A budget's charge on Redis: `cost` permits of a key recorded whether or
//! not they fit, into debt, atomically over every limit of the key
//! (`src/charge.lua` after the rule scripts' prelude), for GCRA, fixed,
//! calendar and sliding windows: the core's `charge` for each, `AllOf`
//! over the limits.
//!
//! # Guarantees and decisions
//!
//! - **Atomic, never refused, never dropped**: one script call reads and
//!   writes every limit's state of the key; the charge is written whether
//!   or not it fits, and later checks and peeks of the key (the limiter's
//!   scripts) read the debt, so they are refused until it is repaid at the
//!   quota's rate, by the core's rule per algorithm (see
//!   [`tollgate::algorithm`], "Charges, debt and its cap").
//! - **Bounded debt, stored and not only per charge**: each limit's state
//!   holds at most the core's cap, [`DEBT_PERIODS`] periods of its quota
//!   beyond full (GCRA: `capacity + DEBT_PERIODS · limit · interval`
//!   ticks, and at most what its state reads back, `M − 2·10^15` ticks;
//!   windows: `(DEBT_PERIODS + 1) · limit` permits, within the core's count
//!   field), whatever the number of charges: a charge beyond it records up
//!   to the cap (repeated charges stay at it), exactly as the core does.
//!   The client computes each cap ([`debt_cap`]) and sends it as the
//!   limit's `x`.
//! - **Markers**: a key on a deny or allow list, or penalised, is not
//!   charged (refused anyway, or not counted): the answer says so.
//! - **Not warm-up**: a limiter holding a warm-up limit is answered
//!   [`ChargeError::WarmUp`]; nothing is written.
//! - **The answer** is the charge's (fitted: every limit within its limit
//!   after it, or not) with the state after it as a peek of one permit
//!   reads it (the core's `Charge::decision`: `limit`, `remaining`,
//!   `retry_after`, `reset_after`), read in the same atomic call: one round
//!   trip, by the script or by the module's `TOLLGATE.CHARGE` (the same
//!   reply; see [`module`](crate::module), "Charges"). A reply that is not
//!   that shape (an older module's `{fitted, recorded}`) is never read as
//!   a state: the charge is recorded, and answered by the failure policy.
//! - **A carrying limiter** ([`carry`](crate::carry)) first carries the
//!   key's previous state with a look (one more call while the carry
//!   lasts), so that a charge is never written over a state not yet
//!   carried (which would then never be).
//! - **Faults**: through the breaker, the in-flight bound and the deadline
//!   as a decision; a charge Redis did not take is answered by the failure
//!   policy (its source says so) for a request of the limiter's capacity
//!   at most. The deny cache and leases are bypassed (a charge only makes a
//!   key stricter: a cached denial stays true).

use std::sync::LazyLock;
use std::time::Duration;

use tollgate::algorithm::DEBT_PERIODS;
use tollgate::{Clock, Decision};

use super::{Outcome, RedisLimiter, Time};
use crate::breaker::Pass;
use crate::key::BoundedKey;
use crate::limit::Limit;
use crate::policy::Fault;
use crate::script;

pub use crate::script::SOURCE_CHARGE;

static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SOURCE_CHARGE));

/// Why a charge was not made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChargeError {
    /// The limiter holds a warm-up limit, which no script charges.
    WarmUp,
}

impl std::fmt::Display for ChargeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a charge into debt on Redis does not run warm-up limits")
    }
}

impl std::error::Error for ChargeError {}

/// What the script answered: the charge, and the state after it (the
/// script's reply from its third value: a peek's reply).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Charged {
    Fitted(Vec<i64>),
    Over(Vec<i64>),
    Marked(Vec<i64>),
}

impl RedisLimiter {
    /// Records `cost` permits of `key` whether or not they fit, into debt,
    /// atomically over every limit of the key (each limit's debt capped at
    /// the core's [`DEBT_PERIODS`] periods; a listed or penalised key is
    /// not charged), and answers whether they fitted, with the state after
    /// the charge.
    ///
    /// # Errors
    ///
    /// [`ChargeError::WarmUp`]: a limit of this limiter is a warm-up.
    pub async fn charge_outcome(
        &self,
        key: impl AsRef<[u8]>,
        cost: u64,
    ) -> Result<Outcome, ChargeError> {
        let s = self.shared();
        if s.limits
            .iter()
            .any(|limit| matches!(limit, Limit::WarmUp(_)))
        {
            return Err(ChargeError::WarmUp);
        }
        let bounded = BoundedKey::new(key.as_ref());
        // The scripts' integers end at 2^53; every cap is below, so a cost
        // past it records what 2^53 − 1 does.
        let cost = cost.min((1 << 53) - 1);
        if cost == 0 {
            return Ok(self.decide(&bounded, 0, script::Op::Peek).await);
        }
        if self.carrying().is_some() {
            // The previous limits' state carried first (a look writes
            // nothing else); a fault here is met again by the charge.
            let _ = self.decide(&bounded, 0, script::Op::Peek).await;
        }
        let sent = self.now();
        let capacity = s.limits.iter().map(Limit::capacity).min().unwrap_or(1);
        let charged = match self.ask_charge(&bounded, cost).await {
            Ok(charged) => charged,
            Err((fault, retry)) => {
                return Ok(self.fallback(&bounded, cost.min(capacity), fault, retry));
            }
        };
        let (Charged::Fitted(state) | Charged::Over(state) | Charged::Marked(state)) = &charged;
        // A decision's reply for every limit, and nothing shorter (a
        // refund's three values would decode).
        let shape = script::HEAD_REPLY + script::PER_LIMIT_REPLY * s.limits.len();
        let after = match self.decode(state).filter(|_| state.len() == shape) {
            Some(reply) => self.decided(&bounded, 1, script::Op::Peek, sent, Ok(reply)),
            // Not the script's reply: recorded, but not read back.
            None => {
                return Ok(self.fallback(
                    &bounded,
                    cost.min(capacity),
                    Fault::Script,
                    Duration::ZERO,
                ));
            }
        };
        let fitted = match charged {
            Charged::Fitted(_) => true,
            Charged::Over(_) => false,
            // A marker decides as it always does.
            Charged::Marked(_) => after.decision.is_allowed(),
        };
        let d = after.decision;
        Ok(Outcome {
            decision: Decision::from_parts(
                fitted,
                d.limit(),
                d.remaining(),
                d.retry_after(),
                d.reset_after(),
            ),
            ..after
        })
    }

    /// The script call through the breaker, the in-flight bound and the
    /// deadline.
    async fn ask_charge(&self, key: &BoundedKey, cost: u64) -> Result<Charged, (Fault, Duration)> {
        let s = self.shared();
        let keys = s.codec.keys_of(key);
        let node = keys.first().and_then(|k| s.redis.node_of(k));
        let breaker = s.breakers.of(node.as_ref());
        if let Pass::Refuse(retry) = breaker.pass() {
            s.redis.refresh_topology();
            return Err((Fault::BreakerOpen, retry));
        }
        let Ok(_slot) = s.in_flight.clone().try_acquire_owned() else {
            return Err((Fault::Overloaded, s.deadline));
        };
        let now = match &s.time {
            Time::Server => String::new(),
            Time::Manual(clock) => clock.now().as_u64().to_string(),
        };
        // The module's TOLLGATE.CHARGE where every node has it (GCRA
        // limits), the charge script otherwise: the same arguments, the same
        // reply, the same stored state.
        let call = crate::cluster::resent(s.redis.is_cluster(), || {
            let redis = s.redis.clone();
            let keys = keys.clone();
            let now = now.clone();
            let mut connection = s.redis.connection();
            async move {
                redis
                    .charge(&mut connection, &SCRIPT, &keys, |cmd| {
                        cmd.arg("h").arg(&now).arg(cost).arg(s.slack_ms).arg(0);
                        for (args, limit) in s.args.iter().zip(&s.limits) {
                            for a in args {
                                cmd.arg(a.as_str());
                            }
                            cmd.arg(debt_cap(limit));
                        }
                    })
                    .await
            }
        });
        let fault = match tokio::time::timeout(s.deadline, call).await {
            Ok(Ok(reply)) => {
                breaker.success();
                let state = reply.get(2..).unwrap_or_default().to_vec();
                return match reply.first() {
                    Some(1) => Ok(Charged::Fitted(state)),
                    Some(0) => Ok(Charged::Over(state)),
                    Some(-1) => Ok(Charged::Marked(state)),
                    _ => Err((Fault::Script, Duration::ZERO)),
                };
            }
            Ok(Err(e)) if script::is_call_error(&e) => {
                breaker.success();
                return Err((Fault::Script, Duration::ZERO));
            }
            Ok(Err(_)) => Fault::Error,
            Err(_) => Fault::Timeout,
        };
        if breaker.failure() {
            s.redis.node_failing(node.as_deref());
        } else {
            s.redis.refresh_topology();
        }
        Err((fault, s.open_for))
    }
}

/// The most a limit's state may hold by charges, in the script's units
/// (ticks for GCRA, permits for windows): the core's cap, [`DEBT_PERIODS`]
/// periods of the quota beyond full, below 2^53 (the scripts' exact
/// integers). 0 for warm-up, which is not charged.
pub(crate) fn debt_cap(limit: &Limit) -> u64 {
    const EXACT: u128 = (1 << 53) - 1;
    let q = limit.quota();
    let windows = u128::from(q.limit()) * u128::from(DEBT_PERIODS + 1);
    let cap = match limit {
        // The core's Gcra::charge: the TAT at most burst·T + DEBT_PERIODS
        // · limit · T past now.
        Limit::Gcra(g) => {
            u128::from(g.capacity_ticks())
                + u128::from(DEBT_PERIODS) * u128::from(q.limit()) * u128::from(g.interval_ticks())
        }
        // The core's count field: the limit's bits, or every bit the
        // window index leaves (FixedWindow::new).
        Limit::FixedWindow(_) => {
            let bits = (u64::BITS - q.limit().leading_zeros())
                .max((u64::MAX / q.period_nanos()).leading_zeros());
            windows.min((1u128 << bits) - 1)
        }
        // The calendar window's 32-bit count.
        Limit::Calendar(_) => windows.min(u128::from(u32::MAX)),
        Limit::SlidingWindow(_) => windows,
        Limit::WarmUp(_) => 0,
    };
    u64::try_from(cap.min(EXACT)).unwrap_or(0)
}
