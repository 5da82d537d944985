//! A token budget on Redis (feature `redis`): a
//! [`tollgate_redis::RedisLimiter`] keeps one budget per key for every
//! process that shares it.
//!
//! # Model
//!
//! - **Reserve**: the limiter's check of the estimate (`check_n`): one
//!   script call, admitted and taken or refused, atomic over every limit
//!   of the key. A look is its `peek_n`.
//! - **Settle**: one script call too: the excess charged into debt
//!   (`charge_outcome`: recorded whether or not it fits, so that every
//!   process's next check of the key is refused until it is repaid), or
//!   the difference given back (`refund`, never above full). A settle of
//!   exactly the reservation calls nothing.
//! - **Not warm-up**: the limiter's charge records a debt in the states of
//!   GCRA and of the windows, not of warm-up (`charge_outcome` answers
//!   `ChargeError::WarmUp`); a limiter holding a warm-up limit is refused
//!   by [`Builder::build`](super::Builder::build)
//!   ([`BuildError::UnfitBudget`](crate::BuildError::UnfitBudget)), never
//!   served as a budget that a charge cannot fill. Should a charge still
//!   be refused, it is reported [`unrecorded`](super::Settlement::unrecorded).
//!
//! # When Redis does not answer
//!
//! The limiter's failure policy decides, within its deadline, never the
//! layer: a look or a reservation is answered by it (fail closed: `429`;
//! a local share: decided on this process's share of the quota; fail
//! open: admitted, as configured), and a charge Redis did not take is
//! reported [`unrecorded`](super::Settlement::unrecorded) (to
//! [`on_settled`](super::Builder::on_settled)) while the policy answers
//! the key's next requests. A refund Redis did not take leaves the
//! reservation charged: the error is on the side of refusing.
//!
//! Keys reach Redis as bytes through [`RedisKey`], as for the rate-limit
//! layer's Redis backend.

use tollgate::{CostError, Decision, Quota};
use tollgate_redis::{Limit, RedisLimiter, Source};

use super::backend::{BudgetBackend, Pending, Reservation, Settlement};
use crate::backend::BackendError;
use crate::redis::RedisKey;

impl<K> BudgetBackend<K> for RedisLimiter
where
    K: RedisKey + Send + Sync + 'static,
{
    fn peek(&self, key: &K, cost: u64) -> Pending<Result<Decision, BackendError>> {
        let limiter = self.clone();
        let key = bytes(key);
        Pending::Later(Box::pin(async move {
            limiter.peek_n(key, cost).await.map_err(cost_error)
        }))
    }

    fn reserve(
        &self,
        key: &K,
        estimate: u64,
    ) -> Pending<Result<Box<dyn Reservation>, BackendError>> {
        let limiter = self.clone();
        let key = bytes(key);
        Pending::Later(Box::pin(async move {
            let decision = limiter.check_n(&key, estimate).await.map_err(cost_error)?;
            let reserved = if decision.is_allowed() { estimate } else { 0 };
            let reservation: Box<dyn Reservation> = Box::new(RedisReserved {
                limiter,
                key,
                decision,
                reserved,
            });
            Ok(reservation)
        }))
    }

    fn quotas(&self) -> Vec<Quota> {
        self.limits().iter().map(|limit| *limit.quota()).collect()
    }

    fn unfit(&self) -> Option<String> {
        // The rule of `charge_outcome`, which refuses warm-up limits.
        let warm_up = self
            .limits()
            .iter()
            .any(|limit| matches!(limit, Limit::WarmUp(_)));
        warm_up.then(|| {
            format!(
                "the Redis limiter {:?} holds a warm-up limit, which a charge into debt does not run",
                self.name()
            )
        })
    }
}

/// An estimate reserved on Redis for one key.
struct RedisReserved {
    limiter: RedisLimiter,
    key: Vec<u8>,
    decision: Decision,
    reserved: u64,
}

impl Reservation for RedisReserved {
    fn decision(&self) -> Decision {
        self.decision
    }

    fn reserved(&self) -> u64 {
        self.reserved
    }

    fn settle(self: Box<Self>, actual: u64) -> Pending<Settlement> {
        let RedisReserved {
            limiter,
            key,
            reserved,
            ..
        } = *self;
        if actual == reserved {
            return Pending::Now(Settlement::default());
        }
        Pending::Later(Box::pin(async move {
            if actual > reserved {
                let extra = actual - reserved;
                let recorded = match limiter.charge_outcome(&key, extra).await {
                    Ok(outcome) => outcome.source == Source::Redis,
                    Err(_) => false,
                };
                Settlement {
                    charged: if recorded { extra } else { 0 },
                    refunded: 0,
                    unrecorded: if recorded { 0 } else { extra },
                }
            } else {
                let back = reserved - actual;
                let refunded = limiter.refund(&key, back).await.is_ok();
                Settlement {
                    charged: 0,
                    refunded: if refunded { back } else { 0 },
                    unrecorded: 0,
                }
            }
        }))
    }
}

fn bytes<K: RedisKey>(key: &K) -> Vec<u8> {
    let mut bytes = Vec::new();
    key.write_key(&mut bytes);
    bytes
}

fn cost_error(error: tollgate_redis::CostError) -> BackendError {
    BackendError::Cost(CostError::new(error.cost, error.capacity))
}
