//! Carrying the lists' and penalties' markers to a changed limit's keys
//! (see [`carry`](crate::carry), "Listed and penalised keys stay so").

use std::sync::Weak;
use std::time::Duration;

use tollgate::Clock;

use crate::carry::CarrySpec;
use crate::controls::{Control, ControlError, Registry};
use crate::key::BoundedKey;
use crate::limiter::{RedisLimiter, Shared};

impl RedisLimiter {
    /// The carry, while decisions must carry (see the module docs).
    pub(crate) fn carrying(&self) -> Option<&CarrySpec> {
        let s = self.shared();
        s.carry.as_ref().filter(|c| c.active(s.clock.now()))
    }

    /// Moves the deny and allow list entries and the penalties set under
    /// the previous limits to the keys of the new ones: walks the lists'
    /// and the penalties' registries and, per key, moves its markers in one
    /// atomic call (see the module docs). Idempotent; a limiter built with
    /// [`carry_from`](crate::RedisLimiterBuilder::carry_from) runs it in
    /// the background once; call it yourself to wait for it, or to carry
    /// again after a rolling change. Answers how many keys had a marker
    /// moved; `Ok(0)` without a carry.
    ///
    /// # Errors
    ///
    /// [`ControlError::Backend`] if Redis did not answer a call (the keys
    /// moved before it stay moved; call again).
    pub async fn carry_controls(&self) -> Result<u64, ControlError> {
        let Some(carry) = &self.shared().carry else {
            return Ok(0);
        };
        let mut moved = 0;
        for registry in [Registry::Lists, Registry::Penalties] {
            let mut cursor = 0;
            loop {
                let (next, members) = self.registry_page(registry, cursor).await?;
                for member in members {
                    let key = BoundedKey::stored(&member);
                    moved += u64::from(self.control(&key, Control::Move, 0).await?);
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        carry.controls_were_carried();
        Ok(moved)
    }
}

/// Runs [`RedisLimiter::carry_controls`] in the background until it succeeds
/// or the limiter is dropped; nothing without a tokio runtime.
pub(crate) fn spawn_controls_carry(shared: Weak<Shared>, retry: Duration) {
    if tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    tokio::spawn(async move {
        loop {
            let Some(limiter) = RedisLimiter::upgrade(&shared) else {
                return;
            };
            if limiter.carry_controls().await.is_ok() {
                return;
            }
            drop(limiter);
            tokio::time::sleep(retry).await;
        }
    });
}
