//! A budget's charge on Redis: `cost` permits of a key recorded whether or
//! not they fit, into debt, atomically over every limit of the key
//! (`src/charge.lua`), for GCRA limits, whose state holds a debt.
//!
//! # Guarantees and decisions
//!
//! - **Atomic, never refused, never dropped**: one script call reads and
//!   writes every limit's state of the key; the charge is written whether
//!   or not it fits, and later checks and peeks of the key (the limiter's
//!   own scripts, the module) read the debt, so they are refused until it
//!   is repaid at the quota's rate.
//! - **Bounded debt**: the state holds a debt of at most `M − 2·10^15`
//!   ticks (about 7·10^6 s × the tick rate; see `decide.lua`'s GCRA); a
//!   charge beyond it saturates there (refused for that long), never wraps
//!   to a fresh bucket.
//! - **Markers**: a key on a deny or allow list, or penalised, is not
//!   charged (refused anyway, or not counted): the answer says so.
//! - **GCRA only**: a limiter holding another algorithm is answered
//!   [`ChargeError::NotGcra`] (window states cannot hold a count above
//!   their limit yet); nothing is written.
//! - **The answer** is the charge's (fitted or not) with the state after
//!   it, read by a peek (cost 0) in a second call: informative, not part
//!   of the atomic step.
//! - **Faults**: through the breaker, the in-flight bound and the deadline
//!   as a decision; a charge Redis did not take is answered by the failure
//!   policy (its source says so) for a request of the limiter's capacity
//!   at most. The deny cache and leases are bypassed (a charge only makes a
//!   key stricter: a cached denial stays true).

use std::sync::LazyLock;
use std::time::Duration;

use tollgate::{Clock, Decision};

use super::{Outcome, RedisLimiter, Time};
use crate::breaker::Pass;
use crate::key::BoundedKey;
use crate::limit::Limit;
use crate::policy::Fault;
use crate::script;

/// The charge script's source (see the module docs).
pub const SOURCE_CHARGE: &str = include_str!("../charge.lua");

static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SOURCE_CHARGE));

/// Why a charge was not made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChargeError {
    /// The limiter holds a limit other than GCRA.
    NotGcra,
}

impl std::fmt::Display for ChargeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a charge into debt needs GCRA limits only")
    }
}

impl std::error::Error for ChargeError {}

/// What the script answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Charged {
    Fitted,
    Over,
    Marked,
}

impl RedisLimiter {
    /// Records `cost` permits of `key` whether or not they fit, into debt,
    /// atomically over every GCRA limit of the key (the debt saturates at
    /// what the state can hold; a listed or penalised key is not charged),
    /// and answers whether they fitted, with the
    /// state after the charge.
    ///
    /// # Errors
    ///
    /// [`ChargeError::NotGcra`]: a limit of this limiter is not GCRA.
    pub async fn charge_outcome(
        &self,
        key: impl AsRef<[u8]>,
        cost: u64,
    ) -> Result<Outcome, ChargeError> {
        let s = self.shared();
        if !s.limits.iter().all(|limit| matches!(limit, Limit::Gcra(_))) {
            return Err(ChargeError::NotGcra);
        }
        let bounded = BoundedKey::new(key.as_ref());
        if cost == 0 {
            return Ok(self.decide(&bounded, 0, script::Op::Peek).await);
        }
        let charged = match self.ask_charge(&bounded, cost).await {
            Ok(charged) => charged,
            Err((fault, retry)) => {
                let capacity = s.limits.iter().map(Limit::capacity).min().unwrap_or(1);
                return Ok(self.fallback(&bounded, cost.min(capacity), fault, retry));
            }
        };
        let after = self.decide(&bounded, 0, script::Op::Peek).await;
        let fitted = match charged {
            Charged::Fitted => true,
            Charged::Over => false,
            // A marker decides as it always does.
            Charged::Marked => after.decision.is_allowed(),
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
        let call = crate::cluster::resent(s.redis.is_cluster(), || {
            let mut invocation = SCRIPT.prepare_invoke();
            for k in &keys {
                invocation.key(k.as_slice());
            }
            invocation.arg(&now).arg(cost).arg(s.slack_ms);
            for args in &s.args {
                for a in args {
                    invocation.arg(a.as_str());
                }
            }
            let mut connection = s.redis.connection();
            async move {
                let reply: Vec<i64> = invocation.invoke_async(&mut connection).await?;
                Ok::<_, redis::RedisError>(reply)
            }
        });
        let fault = match tokio::time::timeout(s.deadline, call).await {
            Ok(Ok(reply)) => {
                breaker.success();
                return match reply.first() {
                    Some(1) => Ok(Charged::Fitted),
                    Some(0) => Ok(Charged::Over),
                    Some(-1) => Ok(Charged::Marked),
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
